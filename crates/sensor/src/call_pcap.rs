//! One call's archived packets, SIP and RTP merged in time order, as one classic pcap
//! (`tandem cdr pcap CALL-ID`). The CDR row says where the members are (tar file, member name,
//! data offset and length, compression); each is read with one positioned read and checked
//! against the tar header before it is trusted. A stream without a call is read the same way,
//! from its row's RTP columns (`cdr::CdrStream::archive_as_call`, named by its uid).

use std::io::Write;
use std::path::PathBuf;

use archive::{ArchiveError, Compression, LinkType, MemberRecord, pcap};
use cdr::CdrCall;

/// Why a call's pcap cannot be written: the message names the call, the file and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum CallPcapError {
    #[error("{0}")]
    Archive(String),
    /// `what` is `call "CALL-ID"` or `stream "UID"`.
    #[error("{what}: {source}")]
    Read { what: String, source: ArchiveError },
    #[error("writing the pcap: {0}")]
    Write(std::io::Error),
}

macro_rules! fail {
    ($($arg:tt)*) => {
        return Err(CallPcapError::Archive(format!($($arg)*)))
    };
}

/// How messages name what a row is: `call "CALL-ID"`, or `stream "UID"` for a stream without a
/// call (its uid, `sensor|rtp|...`, which no Call-ID is: `|` is not among RFC 3261's word
/// characters) with no SIP member.
fn what(c: &CdrCall) -> String {
    if c.sip_tar.is_none() && c.call_id.contains("|rtp|") {
        format!("stream {:?}", c.call_id)
    } else {
        format!("call {:?}", c.call_id)
    }
}

/// The member a CDR's archive columns point at, or `None` when that kind was not archived.
fn member(
    what: &str,
    kind: &str,
    tar: &Option<String>,
    name: &Option<String>,
    offset: Option<u64>,
    len: Option<u64>,
    compression: &Option<String>,
) -> Result<Option<MemberRecord>, CallPcapError> {
    let (Some(tar), Some(name), Some(offset), Some(len)) = (tar, name, offset, len) else {
        return Ok(None);
    };
    let compression = match compression.as_deref() {
        Some("zstd") => Compression::Zstd,
        Some("none") | None => Compression::None,
        Some(other) => {
            fail!("{what}: the CDR names an unknown compression {other:?} for its {kind} member")
        }
    };
    Ok(Some(MemberRecord {
        tar_path: PathBuf::from(tar),
        member_name: name.clone(),
        data_offset: offset,
        data_len: len,
        compression,
        packets: 0,
        dropped_packets: 0,
    }))
}

/// Reads one member back, with errors that say what is wrong with the file.
fn read_member(what: &str, m: &MemberRecord) -> Result<Vec<u8>, CallPcapError> {
    let tar = m.tar_path.display();
    let damaged = |text: String| CallPcapError::Archive(text);
    archive::extract(m).map_err(|e| match e {
        ArchiveError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            damaged(format!(
                "{what}: archive file {tar} is missing (deleted by retention, or moved)"
            ))
        }
        ArchiveError::Io { source, .. } if source.kind() == std::io::ErrorKind::UnexpectedEof => {
            damaged(format!(
                "{what}: archive file {tar} is damaged: it ends before member {} (offset {}, {} bytes)",
                m.member_name,
                m.data_offset,
                m.data_len
            ))
        }
        ArchiveError::MemberMismatch {
            expected, found, ..
        } => damaged(format!(
            "{what}: archive file {tar} is damaged or was rewritten: at offset {} the CDR expects member {} ({} bytes), the tar header says {:?} ({} bytes)",
            m.data_offset,
            expected.0,
            expected.1,
            found.0,
            found.1
        )),
        ArchiveError::Zstd { source, .. } => damaged(format!(
            "{what}: archive file {tar} is damaged: member {} does not decompress: {source}",
            m.member_name
        )),
        other => CallPcapError::Read {
            what: what.to_string(),
            source: other,
        },
    })
}

/// Writes the call's SIP and RTP members, merged in time order, as one pcap to `out`.
pub fn write_call_pcap(c: &CdrCall, out: &mut dyn Write) -> Result<(), CallPcapError> {
    let buf = call_pcap(c)?;
    match out.write_all(&buf).and_then(|()| out.flush()) {
        // A reader that stopped early (`| head -c`) is not an error of ours.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(CallPcapError::Write),
    }
}

/// The call's SIP and RTP members, merged in time order, as the bytes of one pcap: what
/// [`write_call_pcap`] writes, built in one buffer of its final size (an hour of G.711 is
/// 82 MB: every copy counts).
pub fn call_pcap(c: &CdrCall) -> Result<Vec<u8>, CallPcapError> {
    let what = what(c);
    let id = what.as_str();
    let sip = member(
        id,
        "SIP",
        &c.sip_tar,
        &c.sip_member,
        c.sip_offset,
        c.sip_len,
        &c.sip_compression,
    )?;
    let rtp = member(
        id,
        "RTP",
        &c.rtp_tar,
        &c.rtp_member,
        c.rtp_offset,
        c.rtp_len,
        &c.rtp_compression,
    )?;
    if sip.is_none() && rtp.is_none() {
        fail!(
            "{id} has no archived packets: it was captured without --archive, or nothing of it was kept"
        );
    }
    let members: Vec<(MemberRecord, Vec<u8>)> = [sip, rtp]
        .into_iter()
        .flatten()
        .map(|m| read_member(id, &m).map(|bytes| (m, bytes)))
        .collect::<Result<_, _>>()?;
    let parts: Vec<(String, &[u8])> = members
        .iter()
        .map(|(m, bytes)| {
            let name = format!(
                "archive file {}, member {}",
                m.tar_path.display(),
                m.member_name
            );
            (name, bytes.as_slice())
        })
        .collect();
    merge(id, &parts)
}

/// Several pcaps written by Tandem (a call's members, or the pcaps of a call's legs) as one,
/// their packets in capture order: the legs of a call read together, as sngrep shows a call's
/// B legs on one ladder. Each part is named for errors (`call "ID"` and what the part is).
pub fn merge(id: &str, parts: &[(String, &[u8])]) -> Result<Vec<u8>, CallPcapError> {
    let mut link: Option<LinkType> = None;
    let mut records = Vec::new();
    for (name, bytes) in parts {
        let Some((lt, recs)) = pcap::records(bytes) else {
            fail!("{id}: {name} is damaged: it is not a pcap written by Tandem");
        };
        match link {
            Some(l) if l != lt => fail!(
                "{id}: its parts have different link types ({} and {}); they cannot share one pcap",
                l.0,
                lt.0
            ),
            _ => link = Some(lt),
        }
        records.extend(recs);
    }
    let Some(link) = link else {
        fail!("{id}: no packets to merge");
    };
    // Stable: SIP comes first among packets of the same microsecond, and an earlier part's
    // packets before a later one's.
    records.sort_by_key(|r| (r.ts_sec, r.ts_usec));
    let size = pcap::FILE_HEADER_BYTES
        + records
            .iter()
            .map(|r| pcap::RECORD_HEADER_BYTES + r.data.len())
            .sum::<usize>();
    let mut buf = Vec::with_capacity(size);
    pcap::write_file_header(&mut buf, link, pcap::DEFAULT_SNAPLEN_BYTES);
    for r in &records {
        pcap::write_record(&mut buf, r.ts_sec, r.ts_usec, r.data, r.orig_len);
    }
    debug_assert_eq!(buf.len(), size);
    Ok(buf)
}

#[cfg(test)]
mod merge_tests {
    use super::merge;
    use archive::{LinkType, pcap};

    fn leg(packets: &[(u32, u32, u8)]) -> Vec<u8> {
        let mut b = Vec::new();
        pcap::write_file_header(&mut b, LinkType::RAW, pcap::DEFAULT_SNAPLEN_BYTES);
        for &(sec, usec, byte) in packets {
            pcap::write_record(&mut b, sec, usec, &[byte; 4], 4);
        }
        b
    }

    #[test]
    fn legs_are_read_together_in_capture_order() {
        let a = leg(&[(10, 0, 1), (10, 500, 3), (12, 0, 5)]);
        let b = leg(&[(10, 200, 2), (11, 0, 4)]);
        let parts = [
            ("leg A".to_string(), a.as_slice()),
            ("leg B".to_string(), b.as_slice()),
        ];
        let merged = merge("call \"x\"", &parts).unwrap();
        let (_, recs) = pcap::records(&merged).unwrap();
        let order: Vec<u8> = recs.iter().map(|r| r.data[0]).collect();
        assert_eq!(order, [1, 2, 3, 4, 5]);
        let e = merge("call \"x\"", &[("leg C".to_string(), &b"nope"[..])]).unwrap_err();
        assert!(e.to_string().contains("leg C is damaged"), "{e}");
        let mut other = leg(&[(1, 0, 9)]);
        other[20] = 1;
        let e = merge(
            "call \"x\"",
            &[
                ("leg A".to_string(), a.as_slice()),
                ("leg D".to_string(), other.as_slice()),
            ],
        )
        .unwrap_err();
        assert!(e.to_string().contains("different link types"), "{e}");
    }
}

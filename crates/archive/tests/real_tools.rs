//! The archive checked with real tools: GNU `tar` lists and extracts the per-minute files,
//! `zstd` decompresses the SIP members, and `tshark` opens the pcaps and counts the same packets,
//! for synthetic calls and for a real capture. Tests that need a missing tool say so and skip.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use archive::{
    Archive, ArchiveConfig, ArchiveError, CallArchive, Compression, LinkType, MemberRecord, Packet,
    Retention, StoreMode, extract, extract_with_limit, pcap,
};

/// 2026-11-21T08:09:00Z
const T0: i64 = 1_795_248_540;

fn have(tool: &str) -> bool {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        test_env::skip(&format!(
            "the {tool} part of this test: `{tool}` is not installed"
        ));
    }
    ok
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// An Ethernet/IPv4/UDP frame; returns the frame and the offset of the UDP payload.
fn udp_frame(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> (Vec<u8>, usize) {
    let mut f = Vec::new();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let sum = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]); // no UDP checksum
    let at = f.len();
    f.extend_from_slice(payload);
    (f, at)
}

fn sip_message(method: &str, call_id: &str, cseq: u32) -> Vec<u8> {
    format!(
        "{method} sip:bob@10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK{cseq}\r\n\
         From: <sip:alice@10.0.0.1>;tag=1\r\nTo: <sip:bob@10.0.0.2>\r\nCall-ID: {call_id}\r\n\
         CSeq: {cseq} {method}\r\nContent-Length: 0\r\n\r\n"
    )
    .into_bytes()
}

/// An RTP packet: version 2, PT 8, `csrcs` CSRCs, an optional 2-word extension, 160 bytes audio.
fn rtp_packet(seq: u16, csrcs: u8, ext: bool) -> Vec<u8> {
    let mut p = vec![0x80 | csrcs | if ext { 0x10 } else { 0 }, 8];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&(u32::from(seq) * 160).to_be_bytes());
    p.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    for i in 0..csrcs {
        p.extend_from_slice(&[0, 0, 0, i]);
    }
    if ext {
        p.extend_from_slice(&[0xbe, 0xde, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8]);
    }
    p.extend(std::iter::repeat_n(0xd5, 160));
    p
}

struct SyntheticCall {
    call_id: &'static str,
    start: i64,
    sip: usize,
    rtp: usize,
}

/// Archives synthetic calls; returns each call's records.
fn archive_calls(
    archive: &mut Archive,
    calls: &[SyntheticCall],
    csrcs: u8,
    ext: bool,
) -> Vec<CallArchive> {
    let mut handles = Vec::new();
    for c in calls {
        let h = archive
            .start_call(c.call_id.as_bytes(), c.start, LinkType::ETHERNET)
            .unwrap();
        handles.push(h);
    }
    // Interleave the calls' packets, as a capture would.
    let most = calls.iter().map(|c| c.sip.max(c.rtp)).max().unwrap();
    for i in 0..most {
        for (c, &h) in calls.iter().zip(&handles) {
            let ts_sec = (c.start + i as i64 / 50) as u32;
            let ts_usec = (i as u32 % 50) * 20_000;
            if i < c.sip {
                let (f, _) = udp_frame(
                    [10, 0, 0, 1],
                    [10, 0, 0, 2],
                    5060,
                    5060,
                    &sip_message("INVITE", c.call_id, i as u32 + 1),
                );
                let p = Packet {
                    ts_sec,
                    ts_usec,
                    data: &f,
                    orig_len: f.len() as u32,
                };
                archive.add_sip(h, &p).unwrap();
            }
            if i < c.rtp {
                let (f, at) = udp_frame(
                    [10, 0, 0, 1],
                    [10, 0, 0, 2],
                    40_000,
                    40_002,
                    &rtp_packet(i as u16, csrcs, ext),
                );
                let p = Packet {
                    ts_sec,
                    ts_usec,
                    data: &f,
                    orig_len: f.len() as u32,
                };
                archive.add_rtp(h, &p, at).unwrap();
            }
        }
    }
    handles
        .into_iter()
        .map(|h| archive.end_call(h).unwrap())
        .collect()
}

/// `tshark -r FILE` with extra arguments; one output line per packet.
fn tshark_lines(file: &Path, args: &[&str]) -> Vec<String> {
    let out = run(Command::new("tshark").arg("-r").arg(file).args(args));
    out.lines().map(str::to_string).collect()
}

fn tar_list(tar: &Path) -> Vec<String> {
    let out = Command::new("tar").arg("-tvf").arg(tar).output().unwrap();
    assert!(
        out.status.success(),
        "tar -tvf {}: {}",
        tar.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "tar warns: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `-rw-r--r-- tandem/tandem SIZE DATE TIME NAME`: the name is the sixth field on.
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            assert!(l.starts_with("-rw-r--r-- tandem/tandem "), "{l}");
            l.split_whitespace().skip(5).collect::<Vec<_>>().join(" ")
        })
        .collect()
}

fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(all_files(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn synthetic_calls_list_with_tar_extract_and_open_in_tshark() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("archive");
    let mut cfg = ArchiveConfig::new(&root);
    cfg.store = StoreMode::FullRtp;
    let mut a = Archive::new(cfg).unwrap();
    let calls = [
        SyntheticCall {
            call_id: "a84b4c76e66710@pc33.atlanta.com",
            start: T0 + 5,
            sip: 6,
            rtp: 120,
        },
        SyntheticCall {
            call_id: "../../etc/passwd\n\u{7}x",
            start: T0 + 59,
            sip: 4,
            rtp: 0,
        },
        SyntheticCall {
            call_id: "second-minute@host",
            start: T0 + 60,
            sip: 3,
            rtp: 75,
        },
    ];
    let records = archive_calls(&mut a, &calls, 0, false);

    // Layout by minute of call start.
    let sip0 = records[0].sip.as_ref().unwrap();
    assert_eq!(sip0.tar_path, root.join("2026-11-21/08/09/sip.tar"));
    assert_eq!(
        records[0].rtp.as_ref().unwrap().tar_path,
        root.join("2026-11-21/08/09/rtp.tar")
    );
    assert_eq!(
        records[2].sip.as_ref().unwrap().tar_path,
        root.join("2026-11-21/08/10/sip.tar")
    );
    assert!(records[1].rtp.is_none(), "no RTP, no member");
    assert_eq!(
        records[1].sip.as_ref().unwrap().member_name,
        "%2E.%2F..%2Fetc%2Fpasswd%0A%07x.pcap.zst"
    );
    assert_eq!(sip0.compression, Compression::Zstd);
    assert_eq!(sip0.packets, 6);
    assert_eq!(a.stats().buffered_bytes, 0);
    assert_eq!(a.stats().members_written, 5);

    if !have("tar") {
        return;
    }
    assert_eq!(
        tar_list(&root.join("2026-11-21/08/09/sip.tar")),
        [
            "a84b4c76e66710@pc33.atlanta.com.pcap.zst",
            "%2E.%2F..%2Fetc%2Fpasswd%0A%07x.pcap.zst"
        ]
    );
    assert_eq!(
        tar_list(&root.join("2026-11-21/08/09/rtp.tar")),
        ["a84b4c76e66710@pc33.atlanta.com.pcap"]
    );
    assert_eq!(
        tar_list(&root.join("2026-11-21/08/10/rtp.tar")),
        ["second-minute@host.pcap"]
    );

    // Extract everything with GNU tar into an empty directory: only the members appear, in it.
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    for tar in ["2026-11-21/08/09/sip.tar", "2026-11-21/08/09/rtp.tar"] {
        run(Command::new("tar")
            .arg("-xf")
            .arg(root.join(tar))
            .arg("-C")
            .arg(&out));
    }
    let files = all_files(&out);
    assert_eq!(
        files,
        [
            out.join("%2E.%2F..%2Fetc%2Fpasswd%0A%07x.pcap.zst"),
            out.join("a84b4c76e66710@pc33.atlanta.com.pcap"),
            out.join("a84b4c76e66710@pc33.atlanta.com.pcap.zst"),
        ]
    );
    assert!(
        all_files(tmp.path())
            .iter()
            .all(|p| p.starts_with(&root) || p.starts_with(&out))
    );

    // extract(record) gives the same bytes as tar -xf (and zstd -d for SIP).
    let rtp0 = records[0].rtp.as_ref().unwrap();
    let rtp_bytes = extract(rtp0).unwrap();
    assert_eq!(
        rtp_bytes,
        std::fs::read(out.join(&rtp0.member_name)).unwrap()
    );
    let sip_bytes = extract(sip0).unwrap();
    let sip_pcap = out.join("sip0.pcap");
    if have("zstd") {
        run(Command::new("zstd")
            .arg("-q")
            .arg("-d")
            .arg(out.join(&sip0.member_name))
            .arg("-o")
            .arg(&sip_pcap));
        assert_eq!(std::fs::read(&sip_pcap).unwrap(), sip_bytes);
    } else {
        std::fs::write(&sip_pcap, &sip_bytes).unwrap();
    }

    if !have("tshark") {
        return;
    }
    let rtp_file = out.join(&rtp0.member_name);
    assert_eq!(tshark_lines(&rtp_file, &[]).len(), 120);
    let seqs = tshark_lines(
        &rtp_file,
        &["-d", "udp.port==40000,rtp", "-T", "fields", "-e", "rtp.seq"],
    );
    assert_eq!(seqs, (0..120).map(|s| s.to_string()).collect::<Vec<_>>());
    let ids = tshark_lines(
        &sip_pcap,
        &["-Y", "sip", "-T", "fields", "-e", "sip.Call-ID"],
    );
    assert_eq!(ids, vec!["a84b4c76e66710@pc33.atlanta.com".to_string(); 6]);
}

#[test]
fn rtp_headers_only_keeps_csrcs_and_extensions_and_tshark_reads_them() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = Archive::new(ArchiveConfig::new(tmp.path())).unwrap();
    assert_eq!(a.config().store, StoreMode::SipAndRtpHeaders);
    let calls = [SyntheticCall {
        call_id: "hdr@host",
        start: T0,
        sip: 1,
        rtp: 30,
    }];
    let rec = archive_calls(&mut a, &calls, 2, true).remove(0);
    let rtp = rec.rtp.unwrap();
    let bytes = extract(&rtp).unwrap();
    let (link, recs) = pcap::records(&bytes).unwrap();
    assert_eq!(link, LinkType::ETHERNET);
    assert_eq!(recs.len(), 30);
    let header = 12 + 2 * 4 + 4 + 8;
    for r in &recs {
        assert_eq!(r.data.len(), 14 + 20 + 8 + header);
        assert_eq!(r.orig_len as usize, 14 + 20 + 8 + header + 160);
    }
    if !have("tshark") {
        return;
    }
    let file = tmp.path().join("h.pcap");
    std::fs::write(&file, &bytes).unwrap();
    let seqs = tshark_lines(
        &file,
        &[
            "-d",
            "udp.port==40000,rtp",
            "-T",
            "fields",
            "-e",
            "rtp.seq",
            "-e",
            "rtp.csrc.item",
        ],
    );
    assert_eq!(seqs.len(), 30);
    assert_eq!(seqs[7], "7\t0x00000000,0x00000001");
}

#[test]
fn sip_only_ignores_rtp() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = ArchiveConfig::new(tmp.path());
    cfg.store = StoreMode::SipOnly;
    let mut a = Archive::new(cfg).unwrap();
    let rec = archive_calls(
        &mut a,
        &[SyntheticCall {
            call_id: "x@y",
            start: T0,
            sip: 2,
            rtp: 10,
        }],
        0,
        false,
    )
    .remove(0);
    assert!(rec.rtp.is_none());
    assert_eq!(rec.sip.unwrap().packets, 2);
    assert!(!tmp.path().join("2026-11-21/08/09/rtp.tar").exists());
}

#[test]
fn limits_drop_and_count_never_grow() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = ArchiveConfig::new(tmp.path());
    cfg.store = StoreMode::FullRtp;
    cfg.max_call_bytes = 24 + 10 * (16 + 14 + 20 + 8 + 172);
    cfg.max_calls = 2;
    let mut a = Archive::new(cfg).unwrap();
    let rec = archive_calls(
        &mut a,
        &[SyntheticCall {
            call_id: "big@y",
            start: T0,
            sip: 0,
            rtp: 25,
        }],
        0,
        false,
    )
    .remove(0);
    let rtp = rec.rtp.unwrap();
    assert_eq!((rtp.packets, rtp.dropped_packets), (10, 15));
    assert_eq!(a.stats().packets_dropped, 15);
    assert_eq!(pcap::records(&extract(&rtp).unwrap()).unwrap().1.len(), 10);

    let _h1 = a.start_call(b"1", T0, LinkType::RAW).unwrap();
    let h2 = a.start_call(b"2", T0, LinkType::RAW).unwrap();
    assert!(matches!(
        a.start_call(b"3", T0, LinkType::RAW),
        Err(ArchiveError::TooManyCalls { max: 2 })
    ));
    a.end_call(h2).unwrap();
    assert!(matches!(a.end_call(h2), Err(ArchiveError::UnknownCall(_))));
    assert!(a.start_call(b"3", T0, LinkType::RAW).is_ok());

    // Total buffered bytes are capped across calls.
    let mut cfg = ArchiveConfig::new(tmp.path().join("b"));
    cfg.max_buffered_bytes = 1000;
    let mut a = Archive::new(cfg).unwrap();
    let data = [0x45u8; 400];
    let p = Packet {
        ts_sec: 1,
        ts_usec: 0,
        data: &data,
        orig_len: 400,
    };
    let h1 = a.start_call(b"1", T0, LinkType::RAW).unwrap();
    let h2 = a.start_call(b"2", T0, LinkType::RAW).unwrap();
    a.add_sip(h1, &p).unwrap();
    a.add_sip(h2, &p).unwrap();
    a.add_sip(h1, &p).unwrap();
    assert_eq!(a.stats().buffered_bytes, 2 * (24 + 16 + 400));
    assert_eq!(a.stats().packets_dropped, 1);
    let sip = a.end_call(h1).unwrap().sip.unwrap();
    assert_eq!((sip.packets, sip.dropped_packets), (1, 1));
    assert_eq!(a.stats().buffered_bytes, 24 + 16 + 400);

    // A stream whose every packet was dropped has no member.
    let mut cfg = ArchiveConfig::new(tmp.path().join("c"));
    cfg.max_call_bytes = 100;
    let mut a = Archive::new(cfg).unwrap();
    let h = a.start_call(b"1", T0, LinkType::RAW).unwrap();
    a.add_sip(h, &p).unwrap();
    assert_eq!(a.end_call(h).unwrap(), CallArchive::default());
}

#[test]
fn tar_files_reopened_after_eviction_stay_valid() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = ArchiveConfig::new(tmp.path());
    cfg.max_open_tars = 1;
    let mut a = Archive::new(cfg).unwrap();
    let mut recs: Vec<MemberRecord> = Vec::new();
    // Calls from three minutes, ending alternately, so each tar is closed and reopened.
    for round in 0..4 {
        for m in 0..3 {
            let id = format!("r{round}m{m}");
            let start = T0 + 60 * m;
            let calls = [SyntheticCall {
                call_id: Box::leak(id.into_boxed_str()),
                start,
                sip: 2,
                rtp: 0,
            }];
            recs.push(
                archive_calls(&mut a, &calls, 0, false)
                    .remove(0)
                    .sip
                    .unwrap(),
            );
        }
    }
    assert_eq!(a.stats().open_tars, 1);
    assert!(a.stats().tars_opened >= 12);
    for r in &recs {
        let pcap_bytes = extract(r).unwrap();
        assert_eq!(pcap::records(&pcap_bytes).unwrap().1.len(), 2);
    }
    a.sync_and_close_tars().unwrap();
    if have("tar") {
        let listed = tar_list(&tmp.path().join("2026-11-21/08/10/sip.tar"));
        assert_eq!(
            listed,
            [
                "r0m1.pcap.zst",
                "r1m1.pcap.zst",
                "r2m1.pcap.zst",
                "r3m1.pcap.zst"
            ]
        );
    }
}

#[test]
fn foreign_files_are_not_appended_to_and_bad_records_are_caught() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("2026-11-21/08/09");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("sip.tar"), b"not a tar file").unwrap();
    let mut a = Archive::new(ArchiveConfig::new(tmp.path())).unwrap();
    let h = a.start_call(b"c", T0, LinkType::RAW).unwrap();
    a.add_sip(
        h,
        &Packet {
            ts_sec: 1,
            ts_usec: 0,
            data: &[0x45; 20],
            orig_len: 20,
        },
    )
    .unwrap();
    assert!(matches!(a.end_call(h), Err(ArchiveError::NotOurTar { .. })));
    assert_eq!(
        std::fs::read(dir.join("sip.tar")).unwrap(),
        b"not a tar file"
    );

    let calls = [SyntheticCall {
        call_id: "ok@x",
        start: T0 + 60,
        sip: 3,
        rtp: 0,
    }];
    let rec = archive_calls(&mut a, &calls, 0, false)
        .remove(0)
        .sip
        .unwrap();
    let mut wrong = rec.clone();
    wrong.member_name = "other.pcap.zst".into();
    assert!(matches!(
        extract(&wrong),
        Err(ArchiveError::MemberMismatch { .. })
    ));
    let mut wrong = rec.clone();
    wrong.data_offset += 512;
    assert!(extract(&wrong).is_err());
    let mut wrong = rec.clone();
    wrong.data_offset = 3;
    assert!(extract(&wrong).is_err());
    assert!(matches!(
        extract_with_limit(&rec, 100),
        Err(ArchiveError::TooLargeToExtract { .. })
    ));
    assert!(extract(&rec).is_ok());
}

#[test]
fn retention_by_age_and_size_never_touches_the_live_minute_or_other_files() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mut a = Archive::new(ArchiveConfig::new(root)).unwrap();
    // One call in each of 6 minutes, an hour apart: 06:09 .. 11:09.
    let mut all = Vec::new();
    for i in 0..6 {
        let start = T0 + (i - 2) * 3600;
        let id: &'static str = Box::leak(format!("call{i}").into_boxed_str());
        all.push(
            archive_calls(
                &mut a,
                &[SyntheticCall {
                    call_id: id,
                    start,
                    sip: 3,
                    rtp: 20,
                }],
                0,
                false,
            )
            .remove(0),
        );
    }
    a.sync_and_close_tars().unwrap();
    // A call still in progress in the oldest minute, and files that are not minute directories.
    let live = a
        .start_call(b"live", T0 - 2 * 3600, LinkType::ETHERNET)
        .unwrap();
    std::fs::write(root.join("notes.txt"), b"keep").unwrap();
    std::fs::create_dir_all(root.join("2026-11-21/08/xx")).unwrap();
    std::fs::create_dir_all(root.join("other")).unwrap();

    let now = T0 + 3 * 3600 + 30; // 11:09:30, inside the newest minute
    // By age: older than 2.5 h → 06:09 (protected: call in progress), 07:09, 08:09 go... except
    // the protected one.
    let report = a
        .prune(
            &Retention {
                max_age_sec: Some(9000),
                max_total_bytes: None,
            },
            now,
        )
        .unwrap();
    assert_eq!(report.minutes_deleted, 2);
    assert!(
        root.join("2026-11-21/06/09").exists(),
        "a call in progress protects its minute"
    );
    assert!(
        !root.join("2026-11-21/07").exists(),
        "empty hour directories go too"
    );
    assert!(!root.join("2026-11-21/08/09").exists());
    assert!(
        root.join("2026-11-21/08/xx").exists()
            && root.join("notes.txt").exists()
            && root.join("other").exists()
    );
    assert!(extract(all[1].sip.as_ref().unwrap()).is_err());
    assert!(extract(all[3].sip.as_ref().unwrap()).is_ok());

    // By size: keep at most one minute's worth; the live minute (11:09) and the protected one stay.
    a.end_call(live).unwrap();
    let one = report.bytes_kept / report.minutes_kept as u64;
    let report = a
        .prune(
            &Retention {
                max_age_sec: None,
                max_total_bytes: Some(one),
            },
            now,
        )
        .unwrap();
    assert_eq!(report.minutes_kept, 1);
    assert!(
        root.join("2026-11-21/11/09").exists(),
        "the minute being written is never deleted"
    );
    assert!(!root.join("2026-11-21/06/09").exists());
    assert!(root.join("notes.txt").exists());
}

/// A real capture (the classic SIP call with G.711 RTP): its SIP packets, grouped by Call-ID, and
/// its RTP, archived and read back by tshark with the same packets.
#[test]
fn real_capture_round_trips_through_the_archive() {
    // The shared captures sit beside the project's root (`../shared/captures`), or beside the
    // directory that holds this worktree.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let name = "shared/captures/rtp_rtcp_sip_ipv4_udp.pcap";
    let capture = [root.join("..").join(name), root.join("../..").join(name)]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| root.join("..").join(name));
    if !capture.exists() {
        test_env::skip(&format!("{} not found", capture.display()));
        return;
    }
    if !have("tshark") || !have("tar") {
        return;
    }
    let raw = std::fs::read(&capture).unwrap();
    let (link, packets) = pcap::records(&raw).expect("a little-endian microsecond pcap");
    assert_eq!(link, LinkType::ETHERNET);

    // tshark classifies; the archive stores. Frame numbers are 1-based.
    let sip_frames = tshark_lines(
        &capture,
        &[
            "-Y",
            "sip",
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            "sip.Call-ID",
        ],
    );
    let rtp_frames = tshark_lines(
        &capture,
        &[
            "-Y",
            "rtp",
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            "udp.payload",
        ],
    );
    let mut by_call: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for l in &sip_frames {
        let (n, id) = l.split_once('\t').unwrap();
        by_call
            .entry(id.to_string())
            .or_default()
            .push(n.parse().unwrap());
    }
    assert_eq!(by_call.len(), 4);

    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = ArchiveConfig::new(tmp.path());
    cfg.store = StoreMode::FullRtp;
    let mut a = Archive::new(cfg).unwrap();
    let mut records = BTreeMap::new();
    let rtp_call = "12013223@200.57.7.195"; // the call whose SDP set up the RTP
    let mut rtp_handle = None;
    for (id, frames) in &by_call {
        let first = &packets[frames[0] - 1];
        let h = a
            .start_call(id.as_bytes(), i64::from(first.ts_sec), link)
            .unwrap();
        for &n in frames {
            let r = &packets[n - 1];
            a.add_sip(
                h,
                &Packet {
                    ts_sec: r.ts_sec,
                    ts_usec: r.ts_usec,
                    data: r.data,
                    orig_len: r.orig_len,
                },
            )
            .unwrap();
        }
        if id == rtp_call {
            rtp_handle = Some(h);
        } else {
            records.insert(id.clone(), a.end_call(h).unwrap());
        }
    }
    let h = rtp_handle.expect("the RTP call is in the capture");
    for l in &rtp_frames {
        let (n, payload_hex) = l.split_once('\t').unwrap();
        let r = &packets[n.parse::<usize>().unwrap() - 1];
        let at = r.data.len() - payload_hex.len() / 2; // the UDP payload ends the frame
        a.add_rtp(
            h,
            &Packet {
                ts_sec: r.ts_sec,
                ts_usec: r.ts_usec,
                data: r.data,
                orig_len: r.orig_len,
            },
            at,
        )
        .unwrap();
    }
    records.insert(rtp_call.to_string(), a.end_call(h).unwrap());

    for (id, rec) in &records {
        let sip = rec.sip.as_ref().unwrap();
        let file = tmp.path().join(format!("{}.pcap", sip.member_name));
        std::fs::write(&file, extract(sip).unwrap()).unwrap();
        let got = tshark_lines(
            &file,
            &[
                "-Y",
                "sip",
                "-T",
                "fields",
                "-e",
                "sip.Call-ID",
                "-e",
                "sip.CSeq",
            ],
        );
        let want: Vec<String> = tshark_lines(
            &capture,
            &[
                "-Y",
                "sip",
                "-T",
                "fields",
                "-e",
                "sip.Call-ID",
                "-e",
                "sip.CSeq",
            ],
        )
        .into_iter()
        .filter(|l| l.split('\t').next() == Some(id))
        .collect();
        assert_eq!(got, want, "{id}");
        assert_eq!(got.len(), by_call[id].len());
    }
    let rtp = records[rtp_call].rtp.as_ref().unwrap();
    let file = tmp.path().join("rtp.pcap");
    std::fs::write(&file, extract(rtp).unwrap()).unwrap();
    let fields = [
        "-T",
        "fields",
        "-e",
        "frame.len",
        "-e",
        "udp.srcport",
        "-e",
        "udp.payload",
    ];
    let got = tshark_lines(&file, &fields);
    let want: Vec<String> = tshark_lines(&capture, &[&["-Y", "rtp"][..], &fields[..]].concat());
    assert_eq!(got.len(), rtp_frames.len());
    assert_eq!(got, want, "the same RTP packets, byte for byte");
    assert_eq!(rtp.packets as usize, rtp_frames.len());
}

/// The reason for the format: 10,000 calls starting in one minute create two files, each opened
/// once, not 20,000.
#[test]
fn ten_thousand_calls_in_one_minute_create_two_files() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = Archive::new(ArchiveConfig::new(tmp.path())).unwrap();
    let (sip, _) = udp_frame(
        [10, 0, 0, 1],
        [10, 0, 0, 2],
        5060,
        5060,
        &sip_message("INVITE", "x", 1),
    );
    let (rtp, at) = udp_frame(
        [10, 0, 0, 1],
        [10, 0, 0, 2],
        40_000,
        40_002,
        &rtp_packet(1, 0, false),
    );
    let mut handles = Vec::new();
    for i in 0..10_000 {
        handles.push(
            a.start_call(
                format!("call-{i}@host").as_bytes(),
                T0 + i % 60,
                LinkType::ETHERNET,
            )
            .unwrap(),
        );
    }
    for &h in &handles {
        for _ in 0..2 {
            a.add_sip(
                h,
                &Packet {
                    ts_sec: T0 as u32,
                    ts_usec: 0,
                    data: &sip,
                    orig_len: sip.len() as u32,
                },
            )
            .unwrap();
            a.add_rtp(
                h,
                &Packet {
                    ts_sec: T0 as u32,
                    ts_usec: 0,
                    data: &rtp,
                    orig_len: rtp.len() as u32,
                },
                at,
            )
            .unwrap();
        }
    }
    assert_eq!(a.stats().calls_in_progress, 10_000);
    for h in handles {
        a.end_call(h).unwrap();
    }
    let stats = a.stats();
    assert_eq!(
        (
            stats.tars_opened,
            stats.members_written,
            stats.packets_written
        ),
        (2, 20_000, 40_000)
    );
    let files = all_files(tmp.path());
    assert_eq!(
        files,
        [
            tmp.path().join("2026-11-21/08/09/rtp.tar"),
            tmp.path().join("2026-11-21/08/09/sip.tar")
        ]
    );
    if have("tar") {
        assert_eq!(tar_list(&files[1]).len(), 10_000);
    }
}

/// A full disk (a 192 KiB tmpfs, mounted for the test; skipped without the right to mount):
/// the member that does not fit is refused, the tar keeps the members before it and stays valid,
/// and the next call that fits is written.
#[test]
fn a_full_disk_leaves_the_tar_valid() {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=192k", "tandem-archive-test"])
        .arg(&mnt)
        .output()
        .is_ok_and(|o| o.status.success());
    if !mounted {
        test_env::skip("cannot mount a small tmpfs here (needs root)");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());

    let mut cfg = ArchiveConfig::new(&mnt);
    cfg.store = StoreMode::FullRtp;
    let mut a = Archive::new(cfg).unwrap();
    let mut written = Vec::new();
    let mut failed = None;
    for i in 0..20 {
        let id: &'static str = Box::leak(format!("fill{i}").into_boxed_str());
        // About 50 KB of RTP per call.
        let h = a.start_call(id.as_bytes(), T0, LinkType::ETHERNET).unwrap();
        let (f, at) = udp_frame(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            40_000,
            40_002,
            &rtp_packet(1, 0, false),
        );
        for _ in 0..230 {
            a.add_rtp(
                h,
                &Packet {
                    ts_sec: T0 as u32,
                    ts_usec: 0,
                    data: &f,
                    orig_len: f.len() as u32,
                },
                at,
            )
            .unwrap();
        }
        match a.end_call(h) {
            Ok(rec) => written.push(rec.rtp.unwrap()),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let err = failed.expect("the disk filled up");
    assert!(
        matches!(
            err,
            ArchiveError::Io {
                op: "write member",
                ..
            }
        ),
        "{err}"
    );
    assert!(!written.is_empty());
    let tar = mnt.join("2026-11-21/08/09/rtp.tar");
    let names: Vec<String> = written.iter().map(|r| r.member_name.clone()).collect();
    if have("tar") {
        assert_eq!(tar_list(&tar), names);
    }
    for r in &written {
        assert_eq!(pcap::records(&extract(r).unwrap()).unwrap().1.len(), 230);
    }
    // A small call still fits after the refused one was cut off.
    let h = a.start_call(b"small", T0, LinkType::ETHERNET).unwrap();
    let (f, at) = udp_frame(
        [10, 0, 0, 1],
        [10, 0, 0, 2],
        40_000,
        40_002,
        &rtp_packet(1, 0, false),
    );
    a.add_rtp(
        h,
        &Packet {
            ts_sec: T0 as u32,
            ts_usec: 0,
            data: &f,
            orig_len: f.len() as u32,
        },
        at,
    )
    .unwrap();
    let small = a.end_call(h).unwrap().rtp.unwrap();
    assert_eq!(pcap::records(&extract(&small).unwrap()).unwrap().1.len(), 1);
    if have("tar") {
        let mut all = names;
        all.push("small.pcap".into());
        assert_eq!(tar_list(&tar), all);
    }
}

#[test]
fn a_discarded_call_writes_nothing_and_frees_its_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let mut archive = Archive::new(ArchiveConfig::new(dir.path())).unwrap();
    let call = archive
        .start_call(b"late-rtp", T0, LinkType::ETHERNET)
        .unwrap();
    let (f, at) = udp_frame(
        [10, 0, 0, 1],
        [10, 0, 0, 2],
        40_000,
        40_002,
        &rtp_packet(1, 0, false),
    );
    let p = Packet {
        ts_sec: T0 as u32,
        ts_usec: 0,
        data: &f,
        orig_len: f.len() as u32,
    };
    archive.add_rtp(call, &p, at).unwrap();
    assert!(archive.stats().buffered_bytes > 0);
    assert_eq!(archive.discard_call(call).unwrap(), 1);
    let stats = archive.stats();
    assert_eq!((stats.buffered_bytes, stats.calls_in_progress), (0, 0));
    assert_eq!(stats.tars_opened, 0);
    assert!(all_files(dir.path()).is_empty(), "nothing written");
    assert!(matches!(
        archive.end_call(call),
        Err(ArchiveError::UnknownCall(_))
    ));
}

/// A stream archived on its own that turns out to be a call's: its packets move after the
/// call's, the pcap holds both in order of arrival, and the buffers are counted once; a stream
/// of another link type stays where it is.
#[test]
fn a_stream_s_packets_move_into_the_call_it_joins() {
    let dir = tempfile::tempdir().unwrap();
    let mut archive = Archive::new(ArchiveConfig {
        store: StoreMode::FullRtp,
        ..ArchiveConfig::new(dir.path())
    })
    .unwrap();
    let lone = archive
        .start_call(b"rtp_10.0.0.2:5000", T0, LinkType::ETHERNET)
        .unwrap();
    let call = archive
        .start_call(b"joined@tandem.test", T0, LinkType::ETHERNET)
        .unwrap();
    let packet = |seq: u16| {
        udp_frame(
            [10, 0, 0, 2],
            [10, 0, 0, 1],
            5000,
            4000,
            &rtp_packet(seq, 0, false),
        )
    };
    let add = |archive: &mut Archive, h, seq: u16| {
        let (f, at) = packet(seq);
        let p = Packet {
            ts_sec: T0 as u32,
            ts_usec: u32::from(seq) * 20_000,
            data: &f,
            orig_len: f.len() as u32,
        };
        archive.add_rtp(h, &p, at).unwrap();
    };
    for seq in 0..3 {
        add(&mut archive, lone, seq);
    }
    add(&mut archive, call, 3);
    let buffered = archive.stats().buffered_bytes;
    assert_eq!(archive.move_rtp(lone, call).unwrap(), 3);
    assert_eq!(
        archive.stats().buffered_bytes,
        buffered - pcap::FILE_HEADER_BYTES,
        "one pcap header less"
    );
    assert_eq!(archive.stats().calls_in_progress, 1);
    assert!(matches!(
        archive.end_call(lone),
        Err(ArchiveError::UnknownCall(_))
    ));
    let other = archive.start_call(b"raw", T0, LinkType::RAW).unwrap();
    assert!(matches!(
        archive.move_rtp(other, call),
        Err(ArchiveError::LinkTypes { .. })
    ));
    archive.discard_call(other).unwrap();
    let rec = archive.end_call(call).unwrap().rtp.unwrap();
    assert_eq!(rec.packets, 4);
    let bytes = extract(&rec).unwrap();
    let (_, records) = pcap::records(&bytes).unwrap();
    let seqs: Vec<u16> = records
        .iter()
        .map(|r| u16::from_be_bytes([r.data[44], r.data[45]]))
        .collect();
    assert_eq!(seqs, [3, 0, 1, 2], "the call's packet, then the stream's");
    assert_eq!(archive.stats().buffered_bytes, 0);
}

//! SDP (RFC 4566) as far as a call monitor needs it: session and media connection addresses,
//! media lines with their ports and formats, `a=rtpmap`, `a=rtcp` and direction attributes.

use std::net::IpAddr;

/// At most this many `m=` lines are kept; later ones are ignored.
pub const MAX_MEDIA: usize = 16;
/// At most this many payload formats and rtpmaps are kept per media line.
pub const MAX_FORMATS: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SdpError {
    #[error("SDP body is not UTF-8")]
    NotUtf8,
    #[error("SDP body does not start with v=")]
    NoVersion,
    #[error("SDP line {line}: {what}")]
    BadLine { line: usize, what: &'static str },
}

/// Media direction attribute (RFC 4566 6, RFC 3264).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    #[default]
    SendRecv,
    SendOnly,
    RecvOnly,
    Inactive,
}

/// `a=rtpmap:<pt> <encoding>/<clock rate>[/<channels>]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpMap<'a> {
    pub payload_type: u8,
    pub encoding: &'a str,
    pub clock_rate: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Media<'a> {
    /// `audio`, `video`, `image`, ...
    pub kind: &'a str,
    pub port: u16,
    pub proto: &'a str,
    /// RTP payload type numbers from the `m=` line (for RTP/AVP-like protocols).
    pub payload_types: Vec<u8>,
    /// The media-level `c=` address, else the session-level one.
    pub connection: Option<IpAddr>,
    pub rtpmaps: Vec<RtpMap<'a>>,
    pub direction: Direction,
    /// `a=rtcp:<port>` (RFC 3605), else RTCP is on `port + 1`.
    pub rtcp_port: Option<u16>,
}

impl Media<'_> {
    /// The encoding name and clock rate for `pt`: from rtpmap, else the static table.
    pub fn codec(&self, pt: u8) -> Option<(&str, u32)> {
        self.rtpmaps
            .iter()
            .find(|m| m.payload_type == pt)
            .map(|m| (m.encoding, m.clock_rate))
            .or_else(|| static_payload(pt))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sdp<'a> {
    /// Session-level `c=` address.
    pub connection: Option<IpAddr>,
    pub media: Vec<Media<'a>>,
}

/// Encoding name and clock rate of static RTP payload types (RFC 3551 table 4).
pub fn static_payload(pt: u8) -> Option<(&'static str, u32)> {
    Some(match pt {
        0 => ("PCMU", 8000),
        3 => ("GSM", 8000),
        4 => ("G723", 8000),
        5 => ("DVI4", 8000),
        6 => ("DVI4", 16000),
        7 => ("LPC", 8000),
        8 => ("PCMA", 8000),
        9 => ("G722", 8000),
        10 | 11 => ("L16", 44100),
        12 => ("QCELP", 8000),
        13 => ("CN", 8000),
        14 => ("MPA", 90000),
        15 => ("G728", 8000),
        16 => ("DVI4", 11025),
        17 => ("DVI4", 22050),
        18 => ("G729", 8000),
        25 => ("CelB", 90000),
        26 => ("JPEG", 90000),
        28 => ("nv", 90000),
        31 => ("H261", 90000),
        32 => ("MPV", 90000),
        33 => ("MP2T", 90000),
        34 => ("H263", 90000),
        _ => return None,
    })
}

fn parse_connection(v: &str) -> Option<IpAddr> {
    // c=IN IP4 192.0.2.1[/ttl[/n]]
    let mut it = v.split_ascii_whitespace();
    let _net = it.next()?;
    let _family = it.next()?;
    let addr = it.next()?;
    let addr = addr.split('/').next()?;
    addr.parse().ok()
}

impl<'a> Sdp<'a> {
    /// Parses an SDP body. Unknown lines and attributes are skipped; a media line that cannot
    /// be read is an error naming its line number.
    pub fn parse(body: &'a [u8]) -> Result<Sdp<'a>, SdpError> {
        let text = std::str::from_utf8(body).map_err(|_| SdpError::NotUtf8)?;
        let mut sdp = Sdp::default();
        let mut session_direction = Direction::SendRecv;
        let mut saw_version = false;
        let mut media_dropped = false;
        for (i, raw) in text.split('\n').enumerate() {
            let line = raw.strip_suffix('\r').unwrap_or(raw).trim_end();
            if line.is_empty() {
                continue;
            }
            let Some((kind, value)) = line.split_once('=') else {
                continue;
            };
            if !saw_version {
                if kind.trim() != "v" {
                    return Err(SdpError::NoVersion);
                }
                saw_version = true;
                continue;
            }
            match kind {
                "c" => {
                    let addr = parse_connection(value);
                    match sdp.media.last_mut() {
                        Some(m) if !media_dropped => m.connection = addr.or(m.connection),
                        Some(_) => {}
                        None => sdp.connection = addr,
                    }
                }
                "m" => {
                    if sdp.media.len() == MAX_MEDIA {
                        media_dropped = true;
                        continue;
                    }
                    let mut it = value.split_ascii_whitespace();
                    let bad = |what| SdpError::BadLine { line: i + 1, what };
                    let kind = it.next().ok_or(bad("m= has no media type"))?;
                    let port = it.next().ok_or(bad("m= has no port"))?;
                    let port: u16 = port
                        .split('/')
                        .next()
                        .and_then(|p| p.parse().ok())
                        .ok_or(bad("m= port is not a number"))?;
                    let proto = it.next().ok_or(bad("m= has no protocol"))?;
                    let payload_types = if proto.to_ascii_uppercase().contains("RTP") {
                        it.filter_map(|f| f.parse().ok())
                            .take(MAX_FORMATS)
                            .collect()
                    } else {
                        Vec::new()
                    };
                    sdp.media.push(Media {
                        kind,
                        port,
                        proto,
                        payload_types,
                        connection: sdp.connection,
                        rtpmaps: Vec::new(),
                        direction: session_direction,
                        rtcp_port: None,
                    });
                }
                "a" => {
                    let (name, arg) = value.split_once(':').unwrap_or((value, ""));
                    let dir = match name {
                        "sendrecv" => Some(Direction::SendRecv),
                        "sendonly" => Some(Direction::SendOnly),
                        "recvonly" => Some(Direction::RecvOnly),
                        "inactive" => Some(Direction::Inactive),
                        _ => None,
                    };
                    let no_media = sdp.media.is_empty();
                    let media = if media_dropped {
                        None
                    } else {
                        sdp.media.last_mut()
                    };
                    match (dir, media) {
                        (Some(d), Some(m)) => m.direction = d,
                        (Some(d), None) if no_media => session_direction = d,
                        (None, Some(m)) if name == "rtpmap" => {
                            if let Some(map) = parse_rtpmap(arg)
                                && m.rtpmaps.len() < MAX_FORMATS
                            {
                                m.rtpmaps.push(map);
                            }
                        }
                        (None, Some(m)) if name == "rtcp" => {
                            m.rtcp_port = arg
                                .split_ascii_whitespace()
                                .next()
                                .and_then(|p| p.parse().ok());
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        if !saw_version {
            return Err(SdpError::NoVersion);
        }
        Ok(sdp)
    }
}

fn parse_rtpmap(arg: &str) -> Option<RtpMap<'_>> {
    let (pt, rest) = arg.trim().split_once(' ')?;
    let mut parts = rest.trim().split('/');
    let encoding = parts.next()?;
    let clock_rate = parts.next()?.trim().parse().ok()?;
    Some(RtpMap {
        payload_type: pt.parse().ok()?,
        encoding,
        clock_rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_offer() {
        let body = b"v=0\r\no=- 1 1 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n\
m=audio 4000 RTP/AVP 8 0 101\r\na=rtpmap:8 PCMA/8000\r\na=rtpmap:101 telephone-event/8000\r\n\
a=sendonly\r\nm=video 5000 RTP/AVP 96\r\nc=IN IP6 2001:db8::1\r\na=rtcp:5003\r\n";
        let sdp = Sdp::parse(body).unwrap();
        assert_eq!(sdp.media.len(), 2);
        let a = &sdp.media[0];
        assert_eq!(a.port, 4000);
        assert_eq!(a.payload_types, vec![8, 0, 101]);
        assert_eq!(a.connection, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(a.direction, Direction::SendOnly);
        assert_eq!(a.codec(101), Some(("telephone-event", 8000)));
        assert_eq!(a.codec(0), Some(("PCMU", 8000)));
        let v = &sdp.media[1];
        assert_eq!(v.connection, Some("2001:db8::1".parse().unwrap()));
        assert_eq!(v.rtcp_port, Some(5003));
    }

    #[test]
    fn rejects_non_sdp() {
        assert_eq!(Sdp::parse(b"hello"), Err(SdpError::NoVersion));
        assert!(matches!(
            Sdp::parse(b"v=0\nm=audio x RTP/AVP 0\n"),
            Err(SdpError::BadLine { line: 2, .. })
        ));
    }
}

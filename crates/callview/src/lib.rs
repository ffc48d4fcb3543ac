//! One call seen whole, computed on demand from its archived pcap: the SIP ladder, the RTP
//! streams with their figures and a chart point per second, the RTCP reports each stream got,
//! and its G.711 audio as a WAV file. The console's call page is built on it; the pcap is the
//! one `sensor::call_pcap::write_call_pcap` writes (`tandem cdr pcap CALL-ID`).
//!
//! Public API:
//! - [`analyze`]`(pcap, &Limits) -> CallView`: [`CallView`] holds the ladder
//!   ([`LadderEvent`]s, with the hosts as columns) and the streams ([`StreamView`]: the
//!   monitor's own figures as a CDR row, [`Interval`]s, [`RtcpPoint`]s, [`AudioInfo`]).
//! - [`wav`]`(pcap, AudioSelect, &Limits) -> Vec<u8>`: one stream's audio
//!   ([`AudioSelect::Stream`], numbered as in [`CallView::streams`]) or every decodable
//!   stream's on one timeline ([`AudioSelect::Mixed`]).
//! - [`Limits`] bounds everything the input can make grow; [`CallViewError`] says what is
//!   wrong and where ("the call's pcap: at byte N: ...").
//!
//! The figures are the monitor's, not a second implementation: the pcap goes through
//! `monitor::Monitor` with `tandem capture --read`'s configuration (the defaults, one worker,
//! inline), each stream's figures are its record's, converted by `sensor::records::cdr_stream`
//! (so they equal the CDR row and `tandem capture --json` for a call whose packets were all
//! archived), and each second of a stream is cut from the monitor's running figures, read with
//! `Monitor::open_stream` after each of the stream's packets.
//!
//! Never: does IO beyond the bytes the caller gives (it takes bytes, never paths; it opens no
//! file, socket or thread); panics on any input (a truncated or damaged pcap gives what was read
//! and [`CallView::read_error`]; it is fuzzed by `fuzz/fuzz_targets/callview.rs`); grows without
//! a bound that [`Limits`] or a named constant sets (ladder messages and their text, streams,
//! seconds and RTCP reports per stream, seconds of audio; the monitor's own tables are bounded
//! by its configuration); copies the pcap (a classic pcap is read in place; only pcapng and
//! gzip input are copied once, into the monitor's reader).
//!
//! Start reading at [`analyze`] and `Pass` below, then `streams.rs` (seconds, RTCP, audio
//! facts of each stream), `ladder.rs`, `audio.rs` (placing and writing samples), `frames.rs`
//! (reading and classifying frames) and `g711.rs`.

use monitor::rtp::{Media, RtpStream, StreamKey};
use monitor::{Monitor, MonitorConfig, StreamRecord};
use serde::Serialize;

mod audio;
mod frames;
mod g711;
mod ladder;
mod streams;

pub use ladder::{LadderEvent, SdpMarker, SdpMedia};

use audio::{NS_PER_SAMPLE, Placement, SAMPLE_RATE_HZ, WAV_SAMPLES_MAX};
use frames::{Classifier, Seen, for_each_frame};
use ladder::Ladder;
use streams::{AudioFacts, PT_PCMA, PT_PCMU, Tracker, Trackers};

/// Default of [`Limits::sip_messages_max`].
pub const SIP_MESSAGES_MAX: usize = 2000;
/// Default of [`Limits::sip_text_bytes_max`]: 16 KiB.
pub const SIP_TEXT_BYTES_MAX: usize = 16 * 1024;
/// Default of [`Limits::streams_max`].
pub const STREAMS_MAX: usize = 64;
/// Default of [`Limits::intervals_max`]: four hours of seconds.
pub const INTERVALS_MAX: usize = 4 * 3600;
/// Default of [`Limits::rtcp_reports_max`].
pub const RTCP_REPORTS_MAX: usize = 10_000;
/// Default of [`Limits::audio_seconds_max`]: four hours.
pub const AUDIO_SECONDS_MAX: u64 = 4 * 3600;

/// How much of a call the view holds at most. What does not fit is counted, not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// SIP messages on the ladder ([`SIP_MESSAGES_MAX`]); later ones are counted in
    /// [`CallView::ladder_left_out`].
    pub sip_messages_max: usize,
    /// Bytes of each message's text kept ([`SIP_TEXT_BYTES_MAX`]); the rest is counted in
    /// [`LadderEvent::text_cut_bytes`].
    pub sip_text_bytes_max: usize,
    /// Streams shown ([`STREAMS_MAX`]), the first to start; the others are counted in
    /// [`CallView::streams_left_out`].
    pub streams_max: usize,
    /// Seconds of each stream ([`INTERVALS_MAX`]); later ones are counted in
    /// [`StreamView::intervals_left_out`].
    pub intervals_max: usize,
    /// RTCP report blocks kept per stream ([`RTCP_REPORTS_MAX`]); later ones are counted in
    /// [`StreamView::rtcp_left_out`].
    pub rtcp_reports_max: usize,
    /// Longest audio [`wav`] writes, in seconds ([`AUDIO_SECONDS_MAX`]): 8 kHz 16-bit mono is
    /// 57.6 MB an hour. Longer asks are refused with [`CallViewError::AudioTooLong`].
    pub audio_seconds_max: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            sip_messages_max: SIP_MESSAGES_MAX,
            sip_text_bytes_max: SIP_TEXT_BYTES_MAX,
            streams_max: STREAMS_MAX,
            intervals_max: INTERVALS_MAX,
            rtcp_reports_max: RTCP_REPORTS_MAX,
            audio_seconds_max: AUDIO_SECONDS_MAX,
        }
    }
}

/// Why a call cannot be shown or played.
#[derive(Debug, thiserror::Error)]
pub enum CallViewError {
    /// The bytes are not a capture at all (no pcap or pcapng header): "the call's pcap: at
    /// byte 0: not a pcap or pcapng file ...". A capture damaged later is not an error: the view
    /// shows what was read, with [`CallView::read_error`].
    #[error(transparent)]
    Pcap(#[from] monitor::pcap::CaptureError),
    #[error("the call's pcap has no stream {index}: it has {streams} (numbered from 0)")]
    NoSuchStream { index: usize, streams: usize },
    #[error("stream {index} of the call's pcap cannot be played: {why}")]
    NotDecodable { index: usize, why: String },
    #[error("no stream of the call's pcap can be played{why}")]
    NothingToPlay { why: String },
    #[error(
        "the audio asked for would last {seconds} s, more than the {max_s} s allowed (Limits::audio_seconds_max)"
    )]
    AudioTooLong { seconds: u64, max_s: u64 },
}

/// Which audio [`wav`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AudioSelect {
    /// The stream at this place of [`CallView::streams`].
    Stream(usize),
    /// Every decodable stream of the call on one timeline (each placed at the capture time of
    /// its first packet), added together with saturation.
    Mixed,
}

/// One call, seen whole.
#[derive(Debug, Clone, Serialize)]
pub struct CallView {
    /// The ladder's columns: every SIP sender and receiver (`ip:port`), in order of appearance.
    pub hosts: Vec<String>,
    /// Every SIP message in capture order (at most [`Limits::sip_messages_max`]).
    pub ladder: Vec<LadderEvent>,
    /// SIP messages past the limit, not on the ladder.
    pub ladder_left_out: u64,
    /// The RTP streams, in order of their first packet (then by addresses and SSRC, as the
    /// monitor orders a call's streams). A stream's place here is its number for [`wav`].
    pub streams: Vec<StreamView>,
    /// Streams past [`Limits::streams_max`], not shown.
    pub streams_left_out: u64,
    /// RTCP report blocks about an SSRC that no shown stream has.
    pub rtcp_unmatched: u64,
    /// Frames read from the pcap.
    pub frames: u64,
    /// Where a truncated or damaged pcap stopped being readable ("the call's pcap: at byte N:
    /// file ends inside a packet (truncated capture)"); everything before it is shown.
    pub read_error: Option<String>,
}

/// One RTP stream (one record of the monitor).
#[derive(Debug, Clone, Serialize)]
pub struct StreamView {
    /// The monitor's figures for the whole stream, as the CDR stores them
    /// (`sensor::records::cdr_stream` of its record): equal to the CDR row and to
    /// `tandem capture --json` when the archive holds all of the stream's packets.
    pub figures: cdr::CdrStream,
    pub key: StreamKeyView,
    /// One per second of the stream, from its first packet (seconds without packets
    /// included), at most [`Limits::intervals_max`].
    pub intervals: Vec<Interval>,
    /// Seconds past the limit, not listed.
    pub intervals_left_out: u64,
    /// Every RTCP report block about this stream (the far end's view of it), in capture order,
    /// at most [`Limits::rtcp_reports_max`].
    pub rtcp: Vec<RtcpPoint>,
    /// Report blocks past the limit, not listed.
    pub rtcp_left_out: u64,
    /// The stream's audio, when [`wav`] can play it.
    pub audio: Option<AudioInfo>,
    /// Why there is no audio (`None` when there is): "G.729: not decodable here", "payload not
    /// archived: ...".
    pub audio_note: Option<String>,
}

/// What names a stream: its addresses and SSRC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamKeyView {
    /// `ip:port` of the sender and of the receiver.
    pub src: String,
    pub dst: String,
    pub ssrc: u32,
}

/// One second of a stream, cut from the monitor's running figures read after each of the
/// stream's packets: counts are differences between the reading at the end of the second and
/// the one at the end of the second before, so that they add up to the stream's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interval {
    /// Seconds from the stream's first packet to the start of this second.
    pub t_s: f64,
    /// Packets that arrived in this second.
    pub packets: u64,
    /// Packets missing from the sequence in this second, in the RFC 3550 view that `loss_pct`
    /// and the E-model use (A.1: a gap is counted when the packet after it arrives, a
    /// duplicate counts once). Never negative: a duplicate takes nothing away, and a late
    /// packet that fills a gap an earlier second counted does not take that second's loss
    /// back here (it is in `out_of_order` of the stream). So the seconds add up to the
    /// stream's RFC 3550 loss (`lost + duplicates` of the CDR row, whose `lost` is
    /// Wireshark's and counts duplicates as received), or more when packets came late
    /// across a second's end.
    pub lost: i64,
    /// The stream's interarrival jitter (the monitor's running value, RFC 3550 A.8 computed as
    /// Wireshark does) at the end of the second.
    pub jitter_ms: f64,
    /// The highest value that running jitter took within the second, read after each packet
    /// (starting from its value when the second began).
    pub max_jitter_ms: f64,
    /// Packets lost in this second per packets expected in it, in percent, in the RFC 3550
    /// view (A.1, which counts a duplicate once): the loss the E-model is given.
    pub loss_pct: f64,
    /// The monitor's E-model (`monitor::mos::mos`, G.107 with G.113 factors) on this second:
    /// its `loss_pct`, its burst ratio and the mean of its jitter readings, with the stream's
    /// codec. `None` for a second without packets, a video stream or a codec the E-model has no
    /// factors for.
    pub mos: Option<f64>,
}

/// One RTCP report block (SR or RR, RFC 3550 6.4) about a stream: how its receiver saw it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RtcpPoint {
    /// Capture time of the RTCP packet, µs since the epoch.
    pub ts_us: i64,
    /// `ip:port` the RTCP packet came from.
    pub from: String,
    /// SSRC of the reporter (the RTCP packet's sender).
    pub reporter_ssrc: u32,
    /// The fraction lost since the previous report, in percent (the 8-bit fraction × 100 / 256).
    pub fraction_lost_pct: f64,
    /// Cumulative packets lost (may be negative with duplicates).
    pub cumulative_lost: i64,
    /// The extended highest sequence number received.
    pub highest_seq: u32,
    /// The reported interarrival jitter in ms, at the clock rate the monitor uses for the
    /// stream at that moment (`None` while it knows none, e.g. a dynamic payload type without
    /// SDP).
    pub jitter_ms: Option<f64>,
}

/// A stream [`wav`] can play.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AudioInfo {
    /// `PCMA` or `PCMU` (the stream's main payload type; a packet of the other law is decoded
    /// with its own).
    pub codec: &'static str,
    /// Its length: from the earliest sample to the end of the latest packet, by RTP timestamp
    /// (the WAV's length).
    pub seconds: f64,
    pub sample_rate_hz: u32,
    /// Every packet the sequence numbers call for arrived (RFC 3550 loss 0): false when some
    /// of the audio will be silence because packets were lost.
    pub payload_complete: bool,
}

/// One analysis pass over the pcap: frames through the monitor (for the figures), the ladder
/// and the stream trackers (for the seconds, RTCP points and audio facts).
struct Pass {
    ladder: Ladder,
    trackers: Trackers,
    records: Vec<StreamRecord>,
    frames: u64,
    read_error: Option<String>,
}

/// A stream of the view with what [`wav`] needs to play it.
struct Chosen {
    view: StreamView,
    /// `None` when not decodable (`view.audio_note` says why).
    placement: Option<Placement>,
    /// Decodable but longer than [`Limits::audio_seconds_max`]: its length in samples.
    too_long_samples: Option<u64>,
}

/// Whether a stream can be played.
struct AudioVerdict {
    info: Option<AudioInfo>,
    note: Option<String>,
    /// Where it goes (at 0: [`wav`] places it).
    placement: Option<Placement>,
    too_long_samples: Option<u64>,
}

impl Pass {
    /// Reads the whole pcap; `with_ladder`: also follow SIP over TCP and build the ladder.
    fn run(pcap: &[u8], limits: &Limits, with_ladder: bool) -> Result<Pass, CallViewError> {
        // `tandem capture --read`'s monitor: the default configuration, one worker.
        let mut monitor = Monitor::new(MonitorConfig::default(), 1);
        let mut classifier = Classifier::new(with_ladder);
        let mut ladder = Ladder::new(limits);
        let mut trackers = Trackers::new(limits);
        let mut frames = 0u64;
        let end = for_each_frame(pcap, |frame| {
            frames = frame.number;
            monitor.packet(frame.ts_ns, frame.link_type, frame.data);
            let monitor = &monitor;
            classifier.frame(frame, &mut |seen| match seen {
                Seen::Sip {
                    src,
                    dst,
                    transport,
                    data,
                } => {
                    if with_ladder {
                        ladder.push(frame.number, frame.ts_ns, src, dst, transport, data);
                    }
                }
                Seen::Rtp {
                    src, dst, header, ..
                } => {
                    let key = StreamKey {
                        src,
                        dst,
                        ssrc: header.ssrc,
                    };
                    trackers.rtp(monitor, frame.ts_ns, key, &header, frame.is_cut());
                }
                Seen::Rtcp { src, dst, datagram } => {
                    trackers.rtcp(monitor, frame.ts_ns, src, dst, datagram);
                }
            });
        })?;
        trackers.close_all();
        let analysis = monitor.finish();
        let mut records: Vec<StreamRecord> =
            analysis.calls.into_iter().flat_map(|c| c.streams).collect();
        records.extend(analysis.streams);
        records.sort_by_key(|r| (r.stream.first_ns, r.stream.key));
        Ok(Pass {
            ladder,
            trackers,
            records,
            frames,
            read_error: end.map(|e| e.to_string()),
        })
    }

    /// The streams of the view, each with its record's figures and its tracker's seconds,
    /// RTCP points and audio.
    fn streams(&mut self, limits: &Limits) -> (Vec<Chosen>, u64) {
        let mut by_record: std::collections::HashMap<(StreamKey, i64), usize> = self
            .trackers
            .list
            .iter()
            .enumerate()
            .map(|(i, t)| ((t.key, t.first_ns), i))
            .collect();
        let mut chosen = Vec::new();
        let mut left_out = 0u64;
        for r in &self.records {
            let tracker = by_record.remove(&(r.stream.key, r.stream.first_ns));
            // A record without a tracker is a stream past the limit (or, should the monitor
            // have taken packets the classifier did not, one seen only by the monitor: shown
            // with its figures alone while there is room).
            if chosen.len() >= limits.streams_max
                || (tracker.is_none() && self.trackers.list.len() >= limits.streams_max)
            {
                left_out += 1;
                continue;
            }
            let mut t = match tracker {
                Some(i) => std::mem::replace(
                    &mut self.trackers.list[i],
                    Tracker::new(r.stream.key, r.stream.first_ns),
                ),
                None => Tracker::new(r.stream.key, r.stream.first_ns),
            };
            t.score(&r.stream);
            let verdict = audio_of(r, &t.audio, limits);
            chosen.push(Chosen {
                view: StreamView {
                    figures: sensor::records::cdr_stream(r),
                    key: StreamKeyView {
                        src: r.stream.key.src.to_string(),
                        dst: r.stream.key.dst.to_string(),
                        ssrc: r.stream.key.ssrc,
                    },
                    intervals: t.intervals,
                    intervals_left_out: t.intervals_left_out,
                    rtcp: t.rtcp,
                    rtcp_left_out: t.rtcp_left_out,
                    audio: verdict.info,
                    audio_note: verdict.note,
                },
                placement: verdict.placement,
                too_long_samples: verdict.too_long_samples,
            });
        }
        (chosen, left_out)
    }
}

/// Whether a stream can be played, and if so its placement.
fn audio_of(r: &StreamRecord, facts: &AudioFacts, limits: &Limits) -> AudioVerdict {
    let s = &r.stream;
    let refuse = |why: String| AudioVerdict {
        info: None,
        note: Some(why),
        placement: None,
        too_long_samples: None,
    };
    if s.media == Media::Video {
        return refuse("video: not decodable here".into());
    }
    if s.encrypted {
        return refuse("SRTP: the payload is encrypted, not decodable here".into());
    }
    let codec = match s.main_payload_type() {
        Some(PT_PCMA) => "PCMA",
        Some(PT_PCMU) => "PCMU",
        Some(pt) => return refuse(format!("{}: not decodable here", codec_label(s, pt))),
        None => return refuse("no packets".into()),
    };
    if facts.cut_packets > 0 {
        return refuse(if facts.cut_packets >= facts.packets {
            "payload not archived: the archive kept RTP headers only (--archive-store headers); \
             archive with --archive-store full to listen"
                .into()
        } else {
            format!(
                "{} of {} packets were captured without their whole payload (cut at the \
                 snapshot length): not decodable here",
                facts.cut_packets, facts.packets
            )
        });
    }
    if facts.g711_packets == 0 {
        return refuse("no G.711 packet with a payload (comfort noise or events only)".into());
    }
    // At least one sample: a G.711 packet with a payload reaches past its own offset.
    let samples = facts.samples().max(1) as u64;
    let max_samples = limits
        .audio_seconds_max
        .saturating_mul(u64::from(SAMPLE_RATE_HZ));
    if samples > max_samples.min(WAV_SAMPLES_MAX) {
        return AudioVerdict {
            too_long_samples: Some(samples),
            ..refuse(format!(
                "its RTP timestamps span {} s, more than the {} s this view plays \
                 (Limits::audio_seconds_max)",
                samples / u64::from(SAMPLE_RATE_HZ),
                limits.audio_seconds_max
            ))
        };
    }
    let info = AudioInfo {
        codec,
        seconds: samples as f64 / f64::from(SAMPLE_RATE_HZ),
        sample_rate_hz: SAMPLE_RATE_HZ,
        payload_complete: s.sequence.lost() <= 0,
    };
    let placement = Placement {
        key: s.key,
        first_ns: s.first_ns,
        last_ns: s.last_ns,
        min_offset: facts.min_offset,
        samples: samples as usize,
        at: 0,
    };
    AudioVerdict {
        info: Some(info),
        note: None,
        placement: Some(placement),
        too_long_samples: None,
    }
}

/// A payload type's name for a note: the usual name of a static type, else the name the SDP
/// gave it.
fn codec_label(s: &RtpStream, pt: u8) -> String {
    let known = match pt {
        3 => "GSM",
        4 => "G.723.1",
        9 => "G.722",
        13 | 19 => "comfort noise",
        18 => "G.729",
        _ => "",
    };
    if !known.is_empty() {
        return known.to_string();
    }
    if s.events_pt == Some(pt) {
        return "telephone-event".to_string();
    }
    if let Some((_, name)) = s.codec_names.iter().find(|(p, _)| *p == pt) {
        return name.to_string();
    }
    match sip::sdp::static_payload(pt) {
        Some((name, _)) => name.to_string(),
        None => format!("payload type {pt}"),
    }
}

/// The call's view: ladder, streams (figures, seconds, RTCP, audio), from the pcap's bytes.
pub fn analyze(pcap: &[u8], limits: &Limits) -> Result<CallView, CallViewError> {
    let mut pass = Pass::run(pcap, limits, true)?;
    let (chosen, streams_left_out) = pass.streams(limits);
    Ok(CallView {
        hosts: pass.ladder.hosts,
        ladder: pass.ladder.events,
        ladder_left_out: pass.ladder.left_out,
        streams: chosen.into_iter().map(|c| c.view).collect(),
        streams_left_out,
        rtcp_unmatched: pass.trackers.rtcp_unmatched,
        frames: pass.frames,
        read_error: pass.read_error,
    })
}

/// A stream's audio, or every decodable stream's mixed, as an 8 kHz mono 16-bit PCM WAV file.
/// Packets are placed by RTP timestamp; lost packets, gaps, comfort noise and telephone events
/// are silence; the first copy of a sample wins. A stream's WAV lasts from its earliest sample
/// to the end of its latest packet ([`AudioInfo::seconds`]).
pub fn wav(pcap: &[u8], which: AudioSelect, limits: &Limits) -> Result<Vec<u8>, CallViewError> {
    let mut pass = Pass::run(pcap, limits, false)?;
    let (chosen, _) = pass.streams(limits);
    let max_samples = limits
        .audio_seconds_max
        .saturating_mul(u64::from(SAMPLE_RATE_HZ))
        .min(WAV_SAMPLES_MAX);
    let too_long = |samples: u128| CallViewError::AudioTooLong {
        seconds: u64::try_from(samples / u128::from(SAMPLE_RATE_HZ)).unwrap_or(u64::MAX),
        max_s: limits.audio_seconds_max,
    };
    let mut placements = Vec::new();
    match which {
        AudioSelect::Stream(index) => {
            let c = chosen.get(index).ok_or(CallViewError::NoSuchStream {
                index,
                streams: chosen.len(),
            })?;
            match c.placement {
                Some(p) => placements.push(p),
                None if let Some(n) = c.too_long_samples => {
                    return Err(too_long(u128::from(n)));
                }
                None => {
                    return Err(CallViewError::NotDecodable {
                        index,
                        why: c.view.audio_note.clone().unwrap_or_default(),
                    });
                }
            }
        }
        AudioSelect::Mixed => {
            placements.extend(chosen.iter().filter_map(|c| c.placement));
            if placements.is_empty() {
                let why = chosen
                    .iter()
                    .enumerate()
                    .filter_map(|(i, c)| {
                        Some(format!("stream {i}: {}", c.view.audio_note.as_ref()?))
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(CallViewError::NothingToPlay {
                    why: if why.is_empty() {
                        ": it has no RTP stream".into()
                    } else {
                        format!(" ({why})")
                    },
                });
            }
            // Each stream's earliest sample at its capture time: the first packet's time,
            // moved back by the samples before the first packet's timestamp.
            let start_ns = |p: &Placement| {
                i128::from(p.first_ns) + i128::from(p.min_offset) * i128::from(NS_PER_SAMPLE)
            };
            let origin = placements.iter().map(start_ns).min().unwrap_or(0);
            let mut total: u128 = 0;
            for p in &mut placements {
                let at = ((start_ns(p) - origin) / i128::from(NS_PER_SAMPLE)) as u128;
                let end = at + p.samples as u128;
                if end > u128::from(max_samples) {
                    return Err(too_long(end));
                }
                p.at = at as usize;
                total = total.max(end);
            }
            return Ok(audio::render(pcap, &placements, total as usize));
        }
    }
    let total = placements.iter().map(|p| p.samples).sum::<usize>();
    if total as u64 > max_samples {
        return Err(too_long(total as u128));
    }
    Ok(audio::render(pcap, &placements, total))
}

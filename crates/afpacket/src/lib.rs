//! Live capture from a Linux network interface, without libpcap: an `AF_PACKET` socket with a
//! TPACKET_V3 ring mapped into the process ([`Capture`]), load sharing between capture threads
//! (`PACKET_FANOUT`, [`Fanout`]), the kernel's counters (`PACKET_STATISTICS`, [`KernelStats`]),
//! a pcap-filter subset compiled to classic BPF and attached with `SO_ATTACH_FILTER`
//! ([`filter::Filter`]), and a socket that sends whole frames ([`Sender`]).
//!
//! ```no_run
//! use afpacket::{Capture, CaptureConfig, filter::{Filter, DEFAULT_FILTER}};
//!
//! let cfg = CaptureConfig {
//!     filter: Some(Filter::compile(DEFAULT_FILTER)?),
//!     ..CaptureConfig::default()
//! };
//! let mut cap = Capture::open("eth0", &cfg)?;
//! while let Some(block) = cap.next_block(100)? {
//!     for frame in block.frames() {
//!         println!("{} ns: {} of {} bytes", frame.ts_ns, frame.data.len(), frame.wire_len);
//!     }
//! } // each block goes back to the kernel when dropped
//! println!("{:?}", cap.stats()?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What this crate must never do: allocate per frame (frames are borrowed from the ring), read
//! outside a block whatever offsets the ring holds (each is checked against the block), keep a
//! block from the kernel longer than the caller holds it, or pass a program to the kernel that
//! [`bpf::validate`] refuses. Everything unsafe is in `sys.rs`, `ring.rs` and `send.rs`, each
//! block with the reason it is sound.
//!
//! [`netns`] makes a network namespace with a veth pair for tests and benchmarks; [`frames`]
//! builds test frames.

pub mod bpf;
pub mod filter;
pub mod frames;
pub mod netns;
mod ring;
mod send;
mod sys;

pub use ring::{
    Block, Capture, CaptureConfig, Fanout, Frame, Frames, MAX_RING_BYTES, RingConfig, VlanTag,
    walk_block_image,
};
pub use send::Sender;

/// The kernel's counters for one capture socket (`struct tpacket_stats_v3`), summed since it
/// was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Frames that passed the filter, including those dropped.
    pub packets: u64,
    /// Frames dropped because the ring had no free block.
    pub drops: u64,
    /// Times the ring was full and the kernel froze it until a block came back.
    pub freezes: u64,
}

/// What went wrong, naming the interface.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("interface {0:?}: no such interface (see `ip link`)")]
    NoSuchInterface(String),
    #[error(
        "interface {interface:?}: {op}: permission denied; capturing and sending frames needs root or CAP_NET_RAW"
    )]
    Permission { interface: String, op: &'static str },
    #[error(
        "interface {interface:?}: a ring of {bytes} bytes could not be set up ({source}); choose a smaller ring"
    )]
    RingTooLarge {
        interface: String,
        bytes: usize,
        source: std::io::Error,
    },
    #[error("interface {interface:?}: invalid ring: {why}")]
    BadRing { interface: String, why: String },
    #[error(
        "interface {interface:?}: hardware type {hardware_type} is not Ethernet; only Ethernet (and loopback) interfaces can be captured"
    )]
    NotEthernet {
        interface: String,
        hardware_type: u16,
    },
    #[error("interface {interface:?}: {op}: {source}")]
    Io {
        interface: String,
        op: &'static str,
        source: std::io::Error,
    },
}

impl Error {
    /// The error of system call `op` on `interface`: a permission error says what is needed,
    /// any other keeps the system's error.
    pub(crate) fn io<'a>(
        interface: &'a str,
        op: &'static str,
    ) -> impl FnOnce(std::io::Error) -> Error + 'a {
        move |source| {
            if matches!(source.raw_os_error(), Some(libc::EPERM | libc::EACCES)) {
                Error::Permission {
                    interface: interface.to_string(),
                    op,
                }
            } else {
                Error::Io {
                    interface: interface.to_string(),
                    op,
                    source,
                }
            }
        }
    }
}

//! The few kernel interfaces used, by direct system calls: constants from
//! `<linux/if_packet.h>` and `<linux/filter.h>`, and thin wrappers that turn `-1` into
//! `io::Error`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub const SOL_PACKET: libc::c_int = 263;
pub const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
pub const PACKET_RX_RING: libc::c_int = 5;
pub const PACKET_STATISTICS: libc::c_int = 6;
pub const PACKET_VERSION: libc::c_int = 10;
pub const PACKET_FANOUT: libc::c_int = 18;
pub const TPACKET_V3: libc::c_int = 2;
pub const PACKET_MR_PROMISC: u16 = 1;
pub const PACKET_FANOUT_HASH: u32 = 0;
pub const PACKET_FANOUT_FLAG_DEFRAG: u32 = 0x8000;
pub const TP_STATUS_KERNEL: u32 = 0;
pub const TP_STATUS_USER: u32 = 1;
pub const TP_STATUS_VLAN_VALID: u32 = 0x10;
pub const TP_STATUS_VLAN_TPID_VALID: u32 = 0x40;
pub const ETH_P_ALL: u16 = 0x0003;
pub const ARPHRD_ETHER: u16 = 1;
pub const ARPHRD_LOOPBACK: u16 = 772;

/// `struct tpacket_req3`.
#[repr(C)]
pub struct TpacketReq3 {
    pub block_size: u32,
    pub block_nr: u32,
    pub frame_size: u32,
    pub frame_nr: u32,
    pub retire_blk_tov: u32,
    pub sizeof_priv: u32,
    pub feature_req_word: u32,
}

/// `struct tpacket_stats_v3`.
#[repr(C)]
#[derive(Default)]
pub struct TpacketStatsV3 {
    pub packets: u32,
    pub drops: u32,
    pub freeze_q_cnt: u32,
}

/// `struct packet_mreq`.
#[repr(C)]
pub struct PacketMreq {
    pub ifindex: libc::c_int,
    pub kind: u16,
    pub alen: u16,
    pub address: [u8; 8],
}

/// Layout of `struct tpacket_block_desc` (version 1 header): byte offsets in a block.
pub mod block {
    pub const STATUS: usize = 8;
    pub const NUM_PKTS: usize = 12;
    pub const OFFSET_TO_FIRST_PKT: usize = 16;
    pub const BLK_LEN: usize = 20;
    /// Bytes of the descriptor before the first packet can start.
    pub const HEADER_BYTES: usize = 48;
}

/// Layout of `struct tpacket3_hdr`: byte offsets from a packet's header.
pub mod packet {
    pub const NEXT_OFFSET: usize = 0;
    pub const SEC: usize = 4;
    pub const NSEC: usize = 8;
    pub const SNAPLEN: usize = 12;
    pub const LEN: usize = 16;
    pub const STATUS: usize = 20;
    pub const MAC: usize = 24;
    pub const VLAN_TCI: usize = 32;
    pub const VLAN_TPID: usize = 36;
    pub const HEADER_BYTES: usize = 48;
    /// `sll_pkttype` of the `struct sockaddr_ll` that follows the header (at
    /// `TPACKET_ALIGN(sizeof(struct tpacket3_hdr))` = 48, then 10 bytes in).
    pub const LL_PKTTYPE: usize = 58;
}

/// `sll_pkttype` of a frame this host sent (linux/if_packet.h).
pub const PACKET_OUTGOING: u8 = 4;

pub fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// An `AF_PACKET`, `SOCK_RAW` socket that receives nothing until it is bound with a protocol.
pub fn packet_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain system call with constant arguments; the returned descriptor is checked
    // and then owned by exactly one `OwnedFd`.
    let fd = cvt(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` is a fresh, valid descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt` with a value of type `T` (a `repr(C)` kernel struct or an integer).
pub fn setsockopt<T>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to a live `T` of exactly the length passed; the kernel only reads it.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

pub fn ifindex(name: &str) -> Option<libc::c_uint> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return None;
    }
    let c = CString::new(name).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

/// The interface's hardware type (`ARPHRD_*`), from `SIOCGIFHWADDR`.
pub fn hardware_type(fd: &OwnedFd, name: &str) -> io::Result<u16> {
    // SAFETY: `ifreq` is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: `req` is a valid `ifreq` with a NUL-terminated name (the name is shorter than
    // IFNAMSIZ, checked by `ifindex`, and the rest is zero); the kernel writes into it.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) })?;
    // SAFETY: SIOCGIFHWADDR fills the `ifru_hwaddr` member of the union.
    Ok(unsafe { req.ifr_ifru.ifru_hwaddr.sa_family })
}

/// Binds a packet socket to one interface, receiving `protocol` (network byte order; 0 for
/// none).
pub fn bind(fd: &OwnedFd, ifindex: libc::c_uint, protocol: u16) -> io::Result<()> {
    // SAFETY: `sockaddr_ll` is plain old data; all zeroes is valid.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = ifindex as libc::c_int;
    // SAFETY: `sll` is a valid `sockaddr_ll` and the length passed is its size.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })
    .map(drop)
}

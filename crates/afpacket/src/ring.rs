//! The receive side: an `AF_PACKET` socket on one interface with a TPACKET_V3 ring mapped into
//! this process. The kernel fills blocks of frames and hands each block over by setting its
//! status word to `TP_STATUS_USER`; [`Capture::next_block`] lends one [`Block`] at a time, and
//! dropping it gives the block back (`TP_STATUS_KERNEL`). A block is handed over when it is
//! full or when `block_timeout_ms` passed since its first frame, so a quiet link still
//! delivers within that time.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::filter::Filter;
use crate::sys::{self, block, packet};
use crate::{Error, KernelStats};

/// Largest ring accepted (the kernel's sizes are 32-bit; this also keeps a typo from asking
/// for all of the machine's memory).
pub const MAX_RING_BYTES: usize = 1 << 30;

/// The ring's geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    /// Bytes per block: a multiple of the page size, at least 64 KiB (a frame never spans
    /// blocks, so this is also the largest frame).
    pub block_bytes: usize,
    pub block_count: usize,
    /// A block with frames is handed over after this long even if not full.
    pub block_timeout_ms: u32,
}

impl Default for RingConfig {
    /// 256 blocks of 256 KiB (64 MiB), handed over after 10 ms. The kernel hands a block over
    /// when it is full or when its timeout expires, so at low rates each block holds only
    /// 10 ms of frames: the ring absorbs a stall of the capture thread of about
    /// `block_count × block_timeout_ms` (2.5 s) at low rates, and of `ring_bytes` of frames
    /// at high ones. Many small blocks serve both.
    fn default() -> Self {
        RingConfig {
            block_bytes: 1 << 18,
            block_count: 256,
            block_timeout_ms: 10,
        }
    }
}

impl RingConfig {
    /// A ring of `mib` MiB in 256 KiB blocks (at least 4 blocks).
    pub fn with_mib(mib: usize) -> RingConfig {
        RingConfig {
            block_count: mib.saturating_mul(4).max(4),
            ..RingConfig::default()
        }
    }

    pub fn ring_bytes(&self) -> usize {
        self.block_bytes.saturating_mul(self.block_count)
    }
}

/// Load balancing between sockets on one interface: frames of one flow (addresses, ports,
/// protocol) always reach the same socket; IPv4 fragments are reassembled by the kernel first
/// so that they hash with their flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fanout {
    /// Sockets with the same group ID on the same interface share its frames. Choose one per
    /// capture (for instance from the process ID).
    pub group_id: u16,
}

#[derive(Debug, Clone, Default)]
pub struct CaptureConfig {
    pub ring: RingConfig,
    /// Receive frames addressed to other hosts too (a mirror port): a `PACKET_MR_PROMISC`
    /// membership, removed by the kernel when the socket closes.
    pub promiscuous: bool,
    pub fanout: Option<Fanout>,
    /// Frames the filter rejects never reach the ring. `None` takes everything.
    pub filter: Option<Filter>,
}

/// A VLAN tag the kernel took out of a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag {
    pub tci: u16,
    /// The tag's ethertype (0x8100 for 802.1Q, 0x88a8 for 802.1ad).
    pub tpid: u16,
}

/// One received frame, borrowed from the ring.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// Reception time, nanoseconds since the Unix epoch.
    pub ts_ns: i64,
    /// The frame from its Ethernet header on, without the tag in `vlan` (see
    /// [`Frame::write_with_tag`]).
    pub data: &'a [u8],
    /// Length on the wire (more than `data.len()` when the filter cut the frame).
    pub wire_len: u32,
    pub vlan: Option<VlanTag>,
    /// Sent by this host (`PACKET_OUTGOING`), not received.
    pub outgoing: bool,
}

impl Frame<'_> {
    /// Appends the frame as it was on the wire to `out`: with the VLAN tag the kernel took
    /// out put back after the two MAC addresses. Returns the bytes appended.
    pub fn write_with_tag(&self, out: &mut Vec<u8>) -> usize {
        match self.vlan {
            Some(tag) if self.data.len() >= 12 => {
                out.extend_from_slice(&self.data[..12]);
                out.extend_from_slice(&tag.tpid.to_be_bytes());
                out.extend_from_slice(&tag.tci.to_be_bytes());
                out.extend_from_slice(&self.data[12..]);
                self.data.len() + 4
            }
            _ => {
                out.extend_from_slice(self.data);
                self.data.len()
            }
        }
    }

    /// The frame's length once the tag is put back.
    pub fn len_with_tag(&self) -> usize {
        self.data.len()
            + if self.vlan.is_some() && self.data.len() >= 12 {
                4
            } else {
                0
            }
    }
}

/// Reads frames from one interface through a TPACKET_V3 ring.
pub struct Capture {
    fd: OwnedFd,
    ring: *mut u8,
    ring_bytes: usize,
    block_bytes: usize,
    block_count: usize,
    block_timeout_ms: u32,
    next: usize,
    interface: String,
    totals: KernelStats,
    /// Blocks whose frame offsets did not add up (counted, the rest of the block skipped).
    malformed_blocks: u64,
    /// A loopback interface hands every packet over twice, as it leaves and as it arrives;
    /// only the arriving copy is kept (as libpcap does).
    loopback: bool,
}

// SAFETY: the mapping is owned by this value alone (no other handle to it exists in this
// process); moving it to another thread moves that ownership. It is not `Sync`: blocks are
// lent through `&mut self`.
unsafe impl Send for Capture {}

impl Capture {
    /// Opens the ring on `interface`. The filter is attached before the socket is bound, so
    /// no frame it rejects is ever queued.
    pub fn open(interface: &str, cfg: &CaptureConfig) -> Result<Capture, Error> {
        let ring = cfg.ring;
        let page = page_size();
        if ring.block_bytes < 65_536
            || !ring.block_bytes.is_multiple_of(page)
            || ring.block_count == 0
        {
            return Err(Error::BadRing {
                interface: interface.to_string(),
                why: format!(
                    "block size {} must be a multiple of the page size ({page}) and at least 65536, with at least one block",
                    ring.block_bytes
                ),
            });
        }
        if ring.ring_bytes() > MAX_RING_BYTES {
            return Err(Error::RingTooLarge {
                interface: interface.to_string(),
                bytes: ring.ring_bytes(),
                source: io::Error::other(format!("more than the {MAX_RING_BYTES} bytes allowed")),
            });
        }
        let ifindex =
            sys::ifindex(interface).ok_or_else(|| Error::NoSuchInterface(interface.to_string()))?;
        let fd = sys::packet_socket().map_err(Error::io(interface, "opening a packet socket"))?;
        let hatype = sys::hardware_type(&fd, interface)
            .map_err(Error::io(interface, "reading the hardware type"))?;
        if hatype != sys::ARPHRD_ETHER && hatype != sys::ARPHRD_LOOPBACK {
            return Err(Error::NotEthernet {
                interface: interface.to_string(),
                hardware_type: hatype,
            });
        }
        sys::setsockopt(&fd, sys::SOL_PACKET, sys::PACKET_VERSION, &sys::TPACKET_V3)
            .map_err(Error::io(interface, "selecting TPACKET_V3"))?;
        if let Some(filter) = &cfg.filter {
            attach_filter(&fd, filter).map_err(Error::io(interface, "attaching the BPF filter"))?;
        }
        let req = sys::TpacketReq3 {
            block_size: ring.block_bytes as u32,
            block_nr: ring.block_count as u32,
            // Frames are packed in V3; these two only have to be consistent.
            frame_size: 2048,
            frame_nr: (ring.block_bytes / 2048 * ring.block_count) as u32,
            retire_blk_tov: ring.block_timeout_ms,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        sys::setsockopt(&fd, sys::SOL_PACKET, sys::PACKET_RX_RING, &req).map_err(|source| {
            match source.raw_os_error() {
                Some(libc::ENOMEM) => Error::RingTooLarge {
                    interface: interface.to_string(),
                    bytes: ring.ring_bytes(),
                    source,
                },
                _ => Error::io(interface, "setting up the ring")(source),
            }
        })?;
        let ring_bytes = ring.ring_bytes();
        // SAFETY: maps the ring the kernel just allocated for this socket; the length is the
        // ring's size and the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::RingTooLarge {
                interface: interface.to_string(),
                bytes: ring_bytes,
                source: io::Error::last_os_error(),
            });
        }
        let cap = Capture {
            fd,
            ring: ptr.cast(),
            ring_bytes,
            block_bytes: ring.block_bytes,
            block_count: ring.block_count,
            block_timeout_ms: ring.block_timeout_ms,
            next: 0,
            interface: interface.to_string(),
            totals: KernelStats::default(),
            malformed_blocks: 0,
            loopback: hatype == sys::ARPHRD_LOOPBACK,
        };
        sys::bind(&cap.fd, ifindex, sys::ETH_P_ALL)
            .map_err(Error::io(interface, "binding to the interface"))?;
        if cfg.promiscuous {
            let mreq = sys::PacketMreq {
                ifindex: ifindex as libc::c_int,
                kind: sys::PACKET_MR_PROMISC,
                alen: 0,
                address: [0; 8],
            };
            sys::setsockopt(&cap.fd, sys::SOL_PACKET, sys::PACKET_ADD_MEMBERSHIP, &mreq)
                .map_err(Error::io(interface, "entering promiscuous mode"))?;
        }
        if let Some(f) = cfg.fanout {
            let arg: u32 = u32::from(f.group_id)
                | ((sys::PACKET_FANOUT_HASH | sys::PACKET_FANOUT_FLAG_DEFRAG) << 16);
            sys::setsockopt(&cap.fd, sys::SOL_PACKET, sys::PACKET_FANOUT, &arg).map_err(
                Error::io(interface, "joining the fanout group (PACKET_FANOUT)"),
            )?;
        }
        Ok(cap)
    }

    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// The kernel hands over a partly filled block after this long.
    pub fn block_timeout_ms(&self) -> u32 {
        self.block_timeout_ms
    }

    /// Blocks skipped (in part) because an offset in them did not fit the block.
    pub fn malformed_blocks(&self) -> u64 {
        self.malformed_blocks
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        debug_assert!(i < self.block_count);
        // SAFETY: block `i` lies inside the mapping (i < block_count, and the mapping is
        // block_bytes * block_count long); its status word at offset 8 is 4-byte aligned (the
        // mapping is page-aligned and blocks are page multiples); the kernel and this process
        // exchange the block through this word, so it is only ever accessed atomically here.
        unsafe { AtomicU32::from_ptr(self.ring.add(i * self.block_bytes + block::STATUS).cast()) }
    }

    /// The next block the kernel handed over, waiting up to `timeout_ms` (negative: forever).
    /// `Ok(None)` when the time passed or a signal interrupted the wait.
    pub fn next_block(&mut self, timeout_ms: i32) -> Result<Option<Block<'_>>, Error> {
        if self.status(self.next).load(Ordering::Acquire) & sys::TP_STATUS_USER == 0 {
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN | libc::POLLERR,
                revents: 0,
            };
            // SAFETY: one valid pollfd, count 1.
            let r = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    return Ok(None);
                }
                return Err(Error::io(&self.interface, "waiting for frames")(e));
            }
            if self.status(self.next).load(Ordering::Acquire) & sys::TP_STATUS_USER == 0 {
                return Ok(None);
            }
        }
        let i = self.next;
        self.next = (self.next + 1) % self.block_count;
        // SAFETY: the block is inside the mapping (see `status`). The kernel set its status to
        // TP_STATUS_USER (read with Acquire above, pairing with the kernel's barrier before
        // that store), and does not write a block it handed over until the status returns to
        // TP_STATUS_KERNEL, which only `Block::drop` does. The slice starts after the status
        // word, so no shared reference covers the word that is written atomically.
        let body = unsafe {
            std::slice::from_raw_parts(
                self.ring.add(i * self.block_bytes + block::NUM_PKTS),
                self.block_bytes - block::NUM_PKTS,
            )
        };
        // SAFETY: as in `status`; the reference lives as long as the returned `Block`, which
        // holds the caller's mutable borrow of `self`, so the mapping outlives it.
        let status = unsafe {
            AtomicU32::from_ptr(self.ring.add(i * self.block_bytes + block::STATUS).cast())
        };
        let mut block = Block::new(body, status);
        if block.malformed {
            self.malformed_blocks += 1;
        }
        block.skip_outgoing = self.loopback;
        Ok(Some(block))
    }

    /// The kernel's counters since the socket was opened. (The kernel resets them at each
    /// read; this adds them up.)
    pub fn stats(&mut self) -> Result<KernelStats, Error> {
        let mut st = sys::TpacketStatsV3::default();
        let mut len = std::mem::size_of::<sys::TpacketStatsV3>() as libc::socklen_t;
        // SAFETY: `st` is a live, writable tpacket_stats_v3 and `len` its size; the kernel
        // writes at most `len` bytes.
        sys::cvt(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                sys::SOL_PACKET,
                sys::PACKET_STATISTICS,
                (&mut st as *mut sys::TpacketStatsV3).cast(),
                &mut len,
            )
        })
        .map_err(Error::io(&self.interface, "reading PACKET_STATISTICS"))?;
        self.totals.packets += u64::from(st.packets);
        self.totals.drops += u64::from(st.drops);
        self.totals.freezes += u64::from(st.freeze_q_cnt);
        Ok(self.totals)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`; no `Block` can outlive `self`.
        unsafe {
            libc::munmap(self.ring.cast(), self.ring_bytes);
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

fn attach_filter(fd: &OwnedFd, filter: &Filter) -> io::Result<()> {
    let prog = filter.program();
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        // `Insn` has the layout of `struct sock_filter`; the kernel only reads the program.
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
}

/// A block of frames lent by the kernel; dropping it gives it back.
pub struct Block<'a> {
    /// The block from its `num_pkts` field on (offset 12): block offset `o` is `body[o - 12]`.
    body: &'a [u8],
    status: &'a AtomicU32,
    first: usize,
    count: u32,
    /// End of the block's used bytes, as a block offset.
    end: usize,
    malformed: bool,
    /// Leave out frames this host sent (the loopback interface's first copy).
    skip_outgoing: bool,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

impl<'a> Block<'a> {
    fn new(body: &'a [u8], status: &'a AtomicU32) -> Block<'a> {
        let base = block::NUM_PKTS;
        let block_bytes = body.len() + base;
        let field = |o: usize| u32_at(body, o - base).unwrap_or(0);
        let count = field(block::NUM_PKTS);
        let first = field(block::OFFSET_TO_FIRST_PKT) as usize;
        let end = (field(block::BLK_LEN) as usize).min(block_bytes);
        let malformed = count > 0 && (first < block::HEADER_BYTES || first >= end);
        Block {
            body,
            status,
            first,
            count: if malformed { 0 } else { count },
            end,
            malformed,
            skip_outgoing: false,
        }
    }

    /// Frames in the block, as the kernel counted them.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether an offset in the block was out of bounds (the frames after it are skipped).
    pub fn is_malformed(&self) -> bool {
        self.malformed
    }

    /// The frames, in arrival order, without allocating.
    pub fn frames(&self) -> Frames<'_> {
        Frames {
            body: self.body,
            at: self.first,
            left: self.count,
            end: self.end,
            skip_outgoing: self.skip_outgoing,
        }
    }
}

/// Walks a block image laid out as the kernel writes one (from the block's first byte) exactly
/// as a captured block is walked, and returns each frame's captured length and whether the
/// block was malformed. For fuzzing the bounds checks on what the ring holds.
#[doc(hidden)]
pub fn walk_block_image(image: &[u8]) -> (Vec<usize>, bool) {
    let Some(body) = image.get(block::NUM_PKTS..) else {
        return (Vec::new(), false);
    };
    let status = AtomicU32::new(0);
    let block = Block::new(body, &status);
    let lengths = block.frames().map(|f| f.data.len()).collect();
    (lengths, block.is_malformed())
}

impl Drop for Block<'_> {
    fn drop(&mut self) {
        // Release: our reads of the block happen before the kernel may reuse it.
        self.status.store(sys::TP_STATUS_KERNEL, Ordering::Release);
    }
}

/// Iterates a block's frames. Every offset read from the ring is checked against the block:
/// a header or frame that would leave it ends the iteration.
pub struct Frames<'a> {
    body: &'a [u8],
    /// Block offset of the next packet header.
    at: usize,
    left: u32,
    end: usize,
    skip_outgoing: bool,
}

impl<'a> Iterator for Frames<'a> {
    type Item = Frame<'a>;

    fn next(&mut self) -> Option<Frame<'a>> {
        while self.left > 0 {
            self.left -= 1;
            match self.read(self.at) {
                Some((f, next)) => {
                    self.at = next;
                    if !(self.skip_outgoing && f.outgoing) {
                        return Some(f);
                    }
                }
                None => {
                    self.left = 0;
                }
            }
        }
        None
    }
}

impl<'a> Frames<'a> {
    fn read(&self, at: usize) -> Option<(Frame<'a>, usize)> {
        let base = block::NUM_PKTS;
        if at < base || at.checked_add(packet::HEADER_BYTES)? > self.end {
            return None;
        }
        let h = self.body.get(at - base..self.end - base)?;
        let next_off = u32_at(h, packet::NEXT_OFFSET)? as usize;
        let sec = u32_at(h, packet::SEC)?;
        let nsec = u32_at(h, packet::NSEC)?;
        let snaplen = u32_at(h, packet::SNAPLEN)? as usize;
        let wire_len = u32_at(h, packet::LEN)?;
        let status = u32_at(h, packet::STATUS)?;
        let mac = u16_at(h, packet::MAC)? as usize;
        let tci = u32_at(h, packet::VLAN_TCI)?;
        let tpid = u16_at(h, packet::VLAN_TPID)?;
        // The sockaddr_ll after the header says who the frame was for.
        let outgoing =
            mac > packet::LL_PKTTYPE && h.get(packet::LL_PKTTYPE) == Some(&sys::PACKET_OUTGOING);
        let data = h.get(mac..mac.checked_add(snaplen)?)?;
        let vlan = (status & sys::TP_STATUS_VLAN_VALID != 0).then_some(VlanTag {
            tci: tci as u16,
            tpid: if status & sys::TP_STATUS_VLAN_TPID_VALID != 0 {
                tpid
            } else {
                0x8100
            },
        });
        // The last frame has next_offset 0; any other must move forward inside the block.
        let next = if next_off == 0 {
            self.end
        } else {
            at.checked_add(next_off)?
        };
        if next_off != 0 && next_off < packet::HEADER_BYTES {
            return None;
        }
        Some((
            Frame {
                ts_ns: i64::from(sec) * 1_000_000_000 + i64::from(nsec),
                data,
                wire_len,
                vlan,
                outgoing,
            },
            next,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a block image as the kernel lays it out, for the bounds checks.
    fn block_image(frames: &[(&[u8], u32)], corrupt_next: Option<u32>) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        let mut at = 48usize;
        let first = at;
        for (i, (data, len)) in frames.iter().enumerate() {
            let mac = 48 + 2; // header, then 2 bytes so that the IP header is aligned
            let total = (mac + data.len()).next_multiple_of(16);
            let last = i + 1 == frames.len();
            let next = corrupt_next.unwrap_or(if last { 0 } else { total as u32 });
            b[at..at + 4].copy_from_slice(&next.to_ne_bytes());
            b[at + 4..at + 8].copy_from_slice(&7u32.to_ne_bytes());
            b[at + 8..at + 12].copy_from_slice(&9u32.to_ne_bytes());
            b[at + 12..at + 16].copy_from_slice(&(data.len() as u32).to_ne_bytes());
            b[at + 16..at + 20].copy_from_slice(&len.to_ne_bytes());
            b[at + 24..at + 26].copy_from_slice(&(mac as u16).to_ne_bytes());
            b[at + mac..at + mac + data.len()].copy_from_slice(data);
            at += total;
        }
        b[12..16].copy_from_slice(&(frames.len() as u32).to_ne_bytes());
        b[16..20].copy_from_slice(&(first as u32).to_ne_bytes());
        b[20..24].copy_from_slice(&(at as u32).to_ne_bytes());
        b
    }

    fn frames_of(img: &[u8]) -> Vec<(Vec<u8>, u32, i64)> {
        let status = AtomicU32::new(1);
        let block = Block::new(&img[12..], &status);
        block
            .frames()
            .map(|f| (f.data.to_vec(), f.wire_len, f.ts_ns))
            .collect()
    }

    #[test]
    fn frames_come_out_in_order_with_their_lengths() {
        let img = block_image(&[(b"first frame", 11), (b"second", 1500)], None);
        let got = frames_of(&img);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, b"first frame");
        assert_eq!(got[1], (b"second".to_vec(), 1500, 7_000_000_009));
    }

    #[test]
    fn offsets_outside_the_block_end_the_iteration() {
        // A next_offset pointing past the block: the first frame is read, then nothing.
        let img = block_image(&[(b"a", 1), (b"b", 1)], Some(1_000_000));
        assert_eq!(frames_of(&img).len(), 1);
        // A snap length running past the block's end.
        let mut img = block_image(&[(b"abc", 3)], None);
        img[48 + 12..48 + 16].copy_from_slice(&100_000u32.to_ne_bytes());
        assert!(frames_of(&img).is_empty());
        // A first-packet offset inside the block descriptor.
        let mut img = block_image(&[(b"abc", 3)], None);
        img[16..20].copy_from_slice(&8u32.to_ne_bytes());
        let status = AtomicU32::new(1);
        assert!(Block::new(&img[12..], &status).is_malformed());
        // A count larger than the frames present stops at the last valid one.
        let mut img = block_image(&[(b"abc", 3)], None);
        img[12..16].copy_from_slice(&50u32.to_ne_bytes());
        assert_eq!(frames_of(&img).len(), 1);
    }

    #[test]
    fn dropping_a_block_gives_it_back_to_the_kernel() {
        let img = block_image(&[(b"x", 1)], None);
        let status = AtomicU32::new(sys::TP_STATUS_USER);
        drop(Block::new(&img[12..], &status));
        assert_eq!(status.load(Ordering::Relaxed), sys::TP_STATUS_KERNEL);
    }

    #[test]
    fn a_kernel_held_tag_is_put_back_on_the_wire_form() {
        let data: Vec<u8> = (0u8..20).collect();
        let f = Frame {
            ts_ns: 0,
            data: &data,
            wire_len: 20,
            vlan: Some(VlanTag {
                tci: 0x0064,
                tpid: 0x8100,
            }),
            outgoing: false,
        };
        let mut out = Vec::new();
        assert_eq!(f.write_with_tag(&mut out), 24);
        assert_eq!(&out[12..16], &[0x81, 0x00, 0x00, 0x64]);
        assert_eq!(&out[16..], &data[12..]);
        assert_eq!(f.len_with_tag(), 24);
    }
}

//! The send side: whole frames written onto an interface through an `AF_PACKET` socket that
//! receives nothing (bound with protocol 0).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::Error;
use crate::sys;

/// Sends frames (from the Ethernet header on) onto one interface, unchanged.
pub struct Sender {
    fd: OwnedFd,
    interface: String,
}

impl Sender {
    pub fn open(interface: &str) -> Result<Sender, Error> {
        let ifindex =
            sys::ifindex(interface).ok_or_else(|| Error::NoSuchInterface(interface.to_string()))?;
        let err = |op| Error::io(interface, op);
        let fd = sys::packet_socket().map_err(err("opening a packet socket"))?;
        sys::bind(&fd, ifindex, 0).map_err(err("binding to the interface"))?;
        Ok(Sender {
            fd,
            interface: interface.to_string(),
        })
    }

    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// Sends one frame. Errors are the kernel's: `EMSGSIZE` for a frame over the MTU,
    /// `ENOBUFS` when the device queue is full, `ENXIO`/`ENETDOWN` when the link is down.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: `frame` is a live buffer of `frame.len()` bytes that the kernel only reads.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != frame.len() {
            return Err(io::Error::other(format!(
                "sent {n} of {} bytes",
                frame.len()
            )));
        }
        Ok(())
    }
}

//! The filter compiler: any text either fails with an error or compiles to a program the
//! kernel's rules accept; running it on frames never panics. The input is split at the first
//! NUL byte: the filter text before it, the frame after it (its first byte, when odd, gives
//! the frame a kernel-held VLAN tag).
#![no_main]

use afpacket::bpf::{self, Packet};
use afpacket::filter::Filter;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (text, frame) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let Ok(filter) = Filter::compile(text) else {
        return;
    };
    assert_eq!(bpf::validate(filter.program()), Ok(()));
    let vlan_tci = frame.first().filter(|b| *b & 1 == 1).map(|b| u16::from(*b) << 4);
    let packet = Packet {
        data: frame,
        vlan_tci,
    };
    let verdict = bpf::run(filter.program(), packet);
    assert!(verdict == 0 || verdict == afpacket::filter::ACCEPT_BYTES);
    // The same program through the kernel's rules and again: the same verdict.
    assert_eq!(bpf::run(filter.program(), packet), verdict);
});

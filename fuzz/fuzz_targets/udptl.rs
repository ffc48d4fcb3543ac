//! UDPTL (T.38) packets: the IFP type decode never reads past the packet, the short copy the
//! front keeps decodes as the whole packet does, and a flow fed any sequence numbers keeps its
//! counts consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::t38::{T38Flow, UdptlHead, ifp_type};

fuzz_target!(|data: &[u8]| {
    let whole = ifp_type(data);
    if let Some(head) = UdptlHead::new(data) {
        assert_eq!(head.ifp_type(), whole, "the 8-byte copy decodes as the packet");
        assert_eq!(head.len(), data.len());
    }
    if let Some(t) = whole {
        let _ = t.name();
    }
    // The input as a run of sequence numbers.
    let a = "192.0.2.1:4000".parse().unwrap();
    let b = "192.0.2.2:5000".parse().unwrap();
    let mut seqs = data
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]));
    if let Some(first) = seqs.next() {
        let mut f = T38Flow::new(a, b, 0, first, 10);
        for (i, s) in seqs.enumerate() {
            f.add(i as i64, s, 10);
        }
        assert!(f.duplicates + f.out_of_order < f.packets);
        assert!(f.types.len() <= monitor::t38::TYPES_MAX);
    }
});

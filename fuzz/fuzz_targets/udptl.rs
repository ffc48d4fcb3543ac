//! UDPTL (T.38) packets and the T.30 frames inside them: the decode never reads past a packet,
//! the short copy the front keeps decodes as the whole packet does, a flow fed any packets
//! keeps its counts and its bounds, and a call's fax summary is consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::t38::{
    FaxSummary, HDLC_BYTES_MAX, T30_FRAMES_MAX, T38Flow, TYPES_MAX, UdptlHead, UdptlPacket,
    data_fields, ifp_type,
};

fuzz_target!(|data: &[u8]| {
    let whole = ifp_type(data);
    if let Some(head) = UdptlHead::new(data) {
        assert_eq!(head.ifp_type(), whole, "the 8-byte copy decodes as the packet");
        assert_eq!(head.len(), data.len());
        assert_eq!(UdptlPacket::from_head(&head).seq, head.seq());
    }
    if let Some(t) = whole {
        let _ = t.name();
    }
    if let Some(p) = UdptlPacket::parse(data) {
        assert_eq!(p.ifp, whole);
        assert_eq!(p.bytes as usize, data.len());
        assert!(p.v21.as_ref().is_none_or(|f| f.len() < data.len()));
    }
    // The input as data fields, every field inside the input.
    for (_, bytes) in data_fields(data) {
        assert!(bytes.len() <= data.len());
    }
    // The input as a run of packets, each after a length byte, alternating directions.
    let a = "192.0.2.1:4000".parse().unwrap();
    let b = "192.0.2.2:5000".parse().unwrap();
    let mut flows: [Option<T38Flow>; 2] = [None, None];
    let (mut at, mut n) = (0usize, 0i64);
    while at < data.len() {
        let len = usize::from(data[at]);
        let Some(packet) = data.get(at + 1..at + 1 + len) else {
            break;
        };
        at += 1 + len;
        n += 1;
        let Some(p) = UdptlPacket::parse(packet) else {
            continue;
        };
        let d = (n % 2) as usize;
        match &mut flows[d] {
            Some(f) => f.take(n, &p),
            None => flows[d] = Some(T38Flow::new(a, b, n, &p)),
        }
        // A V.21 IFP's fields fed again as the flow's own: bounded whatever they hold.
        if let (Some(f), Some(fields)) = (&mut flows[d], &p.v21) {
            f.add_v21(n, fields);
        }
    }
    let flows: Vec<&T38Flow> = flows.iter().flatten().collect();
    for f in &flows {
        assert!(f.duplicates + f.out_of_order < f.packets);
        assert!(f.types.len() <= TYPES_MAX);
        assert!(f.t30.len() <= T30_FRAMES_MAX);
        assert!(f.redundant + f.fec <= f.packets);
    }
    let _ = HDLC_BYTES_MAX;
    if let Some(s) = FaxSummary::of(flows.iter().copied()) {
        let frames: usize = flows.iter().map(|f| f.t30.len()).sum();
        assert!(s.pages.is_none_or(|p| (p as usize) <= frames));
        assert_eq!(s.pages.is_some(), s.result.is_some());
    }
});

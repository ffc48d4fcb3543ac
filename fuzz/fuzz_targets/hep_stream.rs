//! HEP over TCP: arbitrary bytes fed to `hep::Deframer` in pieces of arbitrary sizes must cut
//! the same frames, and stop at the same error, as `hep::frame_len` applied to the whole stream
//! at once; every frame is decoded (never a panic; what decodes re-encodes to the same
//! packet), and the key check agrees with plain equality.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first bytes choose the sizes of the pieces the stream arrives in.
    let (sizes, stream) = data.split_at(data.len().min(4));
    let sizes: Vec<usize> = if sizes.is_empty() {
        vec![1]
    } else {
        sizes
            .iter()
            .map(|&b| 1 + usize::from(b) * usize::from(b))
            .collect()
    };

    // The reference: the whole stream at once.
    let mut expected: Vec<&[u8]> = Vec::new();
    let mut rest = stream;
    let expected_error = loop {
        match hep::frame_len(rest) {
            Ok(Some(n)) if n <= rest.len() => {
                expected.push(&rest[..n]);
                rest = &rest[n..];
            }
            Ok(_) => break None,
            Err(e) => break Some(e),
        }
    };

    let limits = hep::DecodeLimits::default();
    let mut deframer = hep::Deframer::new(hep::STREAM_BUFFER_BYTES_MIN);
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut error = None;
    let mut at = 0;
    let mut turn = 0;
    'reading: while at < stream.len() {
        let room = deframer.spare();
        assert!(
            !room.is_empty(),
            "a deframer with a partial packet always has room"
        );
        let n = sizes[turn % sizes.len()]
            .min(room.len())
            .min(stream.len() - at);
        turn += 1;
        room[..n].copy_from_slice(&stream[at..at + n]);
        deframer.filled(n);
        at += n;
        loop {
            match deframer.next_frame() {
                Ok(Some(frame)) => {
                    if let Ok(p) = hep::decode(frame, &limits) {
                        assert!(p.payload.bytes().len() <= limits.max_payload_bytes);
                        let bytes = p.to_bytes().expect("a decoded packet fits in 65535 bytes");
                        assert_eq!(hep::decode(&bytes, &limits), Ok(p));
                        assert_eq!(
                            hep::auth_key_matches(b"key", p.auth_key),
                            p.auth_key == Some(&b"key"[..])
                        );
                    }
                    got.push(frame.to_vec());
                }
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break 'reading;
                }
            }
        }
    }
    assert_eq!(got, expected);
    match (&error, &expected_error) {
        // A wrong start is refused as soon as its first byte arrives: the bytes the error
        // shows are those that had arrived then (the rest zero).
        (
            Some(hep::DecodeError::BadMagic { found }),
            Some(hep::DecodeError::BadMagic { found: whole }),
        ) => {
            for (f, w) in found.iter().zip(whole) {
                assert!(*f == *w || *f == 0, "{found:?} is not a start of {whole:?}");
            }
        }
        _ => assert_eq!(error, expected_error),
    }
    if error.is_none() {
        assert_eq!(deframer.buffered(), rest.len());
    }
});

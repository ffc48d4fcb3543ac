//! A block of the capture ring, walked as a captured block is: whatever the bytes (the kernel
//! is trusted, but a bug there or here must not read outside the block), every frame lies
//! inside the block and the walk ends.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (lengths, _malformed) = afpacket::walk_block_image(data);
    assert!(lengths.iter().all(|&n| n <= data.len()));
});

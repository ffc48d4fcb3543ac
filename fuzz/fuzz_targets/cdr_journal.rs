//! The CDR journal reader: any file reads as a prefix of whole entries, then the end or a
//! damage report; opening it for append cuts the damage off and the rest still reads the same.
//! Any header is this release's, a newer format's (refused) or no journal's.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("tandem-fuzz-{}.journal", std::process::id()));
    let mut file = cdr::journal::MAGIC.to_vec();
    file.extend_from_slice(data);
    std::fs::write(&path, &file).unwrap();
    let (records, damage) = cdr::Journal::inspect(&path).unwrap();
    if let Some(d) = &damage {
        assert!(d.offset >= cdr::journal::HEADER_BYTES && d.offset + d.bytes == file.len() as u64);
    }
    let (journal, opened) = cdr::Journal::open(&path, u64::MAX).unwrap();
    assert_eq!(opened.damage, damage);
    drop(journal);
    let (again, none) = cdr::Journal::inspect(&path).unwrap();
    assert_eq!((again, none), (records, None));
    // The header itself: any first bytes are this release's journal, a newer format (refused,
    // naming both versions) or not a journal; nothing else.
    std::fs::write(&path, data).unwrap();
    match cdr::Journal::inspect(&path) {
        Ok(_) => assert!(data.starts_with(cdr::journal::MAGIC)),
        Err(cdr::JournalError::Format(_)) => {
            assert!(data.starts_with(cdr::journal::MAGIC_PREFIX) && data[7] > b'1')
        }
        Err(cdr::JournalError::NotAJournal { .. }) => {
            assert!(!data.starts_with(cdr::journal::MAGIC))
        }
        Err(e) => panic!("{e}"),
    }
    let _ = std::fs::remove_file(&path);
});

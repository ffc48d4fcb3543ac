//! The console's call, registration and stream searches read their filters from a query string
//! (`cdr::search::CallQuery`, `cdr::registration::RegistrationQuery`,
//! `cdr::lone::StreamQuery`, `cdr::devices::DeviceQuery`): any bytes are read or
//! refused with an error, never a panic, and a query that reads writes itself back
//! (`to_query`) as a string that reads as the same query, and writes the same string again.
#![no_main]

use cdr::devices::DeviceQuery;
use cdr::lone::StreamQuery;
use cdr::registration::RegistrationQuery;
use cdr::search::CallQuery;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let raw = String::from_utf8_lossy(data);
    match CallQuery::from_query(&raw) {
        Ok(q) => {
            let text = q.to_query();
            let back = CallQuery::from_query(&text)
                .unwrap_or_else(|e| panic!("{text:?}, written from {q:?}, does not read: {e}"));
            assert_eq!(back, q, "{text:?}");
            assert_eq!(back.to_query(), text);
        }
        Err(e) => assert!(!e.param.is_empty() && !e.problem.is_empty()),
    }
    match RegistrationQuery::from_query(&raw) {
        Ok(q) => {
            let text = q.to_query();
            let back = RegistrationQuery::from_query(&text)
                .unwrap_or_else(|e| panic!("{text:?}, written from {q:?}, does not read: {e}"));
            assert_eq!(back, q, "{text:?}");
            assert_eq!(back.to_query(), text);
        }
        Err(e) => assert!(!e.param.is_empty() && !e.problem.is_empty()),
    }
    match StreamQuery::from_query(&raw) {
        Ok(q) => {
            let text = q.to_query();
            let back = StreamQuery::from_query(&text)
                .unwrap_or_else(|e| panic!("{text:?}, written from {q:?}, does not read: {e}"));
            assert_eq!(back, q, "{text:?}");
            assert_eq!(back.to_query(), text);
        }
        Err(e) => assert!(!e.param.is_empty() && !e.problem.is_empty()),
    }
    match DeviceQuery::from_query(&raw) {
        Ok(q) => {
            let text = q.to_query();
            let back = DeviceQuery::from_query(&text)
                .unwrap_or_else(|e| panic!("{text:?}, written from {q:?}, does not read: {e}"));
            assert_eq!(back, q, "{text:?}");
            assert_eq!(back.to_query(), text);
        }
        Err(e) => assert!(!e.param.is_empty() && !e.problem.is_empty()),
    }
});

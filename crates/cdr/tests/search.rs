//! The console's searches against real databases: a SQLite file and a throwaway PostgreSQL
//! server (initdb + pg_ctl; skipped with a reason where PostgreSQL is not installed), in both
//! of its layouts (plain tables, and tables partitioned by day). Every test runs the same
//! checks on each.
//!
//! - A small set of calls, each with something to find it by, and a table of query strings
//!   with the calls each must find: every filter, lists, negation, suffixes, CIDRs in IPv4 and
//!   IPv6, response classes, codec aliases.
//! - Sixty thousand synthetic calls, where the search chooses between an index and a walk in
//!   time order, and pages cut short by the walk's row budget: every query paged to its end
//!   must give what a plain filter over the records gives, in order, each call once.
//! - Keyset paging across calls that started at the same microsecond.
//! - Totals and their buckets; one call by its uid or its row number; registrations; a
//!   database from the release before the search columns; the writer's sensor.

mod common;

use std::collections::HashSet;

use cdr::registration::{CdrRegistration, RegistrationQuery};
use cdr::search::{CallPage, CallQuery};
use cdr::{
    CdrCall, CdrRecord, CdrStore, CdrStream, CdrT38, CdrWriter, CdrWriterConfig, PgLayout, PgStore,
    SqliteStore,
};
use common::PgServer;

/// Where a check's database is: to name it in messages and to open a second store on it.
#[derive(Clone, Debug)]
enum Db {
    Sqlite(std::path::PathBuf),
    /// A connection string, and the layout the database is created with.
    Pg(String, PgLayout),
}

impl Db {
    fn open(&self) -> Box<dyn CdrStore + Send> {
        match self {
            Db::Sqlite(p) => Box::new(SqliteStore::open(p).unwrap()),
            Db::Pg(c, layout) => {
                Box::new(PgStore::connect_with(c, &common::options(*layout)).unwrap())
            }
        }
    }

    /// The SQLite file in `dir`, then, with a server, a fresh PostgreSQL database for each
    /// layout.
    fn all(dir: &std::path::Path, name: &str, pg: &Option<PgServer>) -> Vec<Db> {
        let mut dbs = vec![Db::Sqlite(dir.join(name))];
        if let Some(server) = pg {
            for layout in common::LAYOUTS {
                dbs.push(Db::Pg(fresh_pg_database(server), layout));
            }
        }
        dbs
    }
}

impl std::fmt::Display for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Db::Sqlite(_) => "sqlite",
            Db::Pg(_, PgLayout::Plain) => "postgres",
            Db::Pg(_, PgLayout::Partitioned) => "postgres, partitioned",
        })
    }
}

/// A fresh SQLite file, then a fresh PostgreSQL database on `pg` for each layout (when there
/// is a server): `check` runs on each.
fn on_both(pg: &Option<PgServer>, check: impl Fn(&mut dyn CdrStore, &Db)) {
    let dir = tempfile::tempdir().unwrap();
    for db in Db::all(dir.path(), "cdr.sqlite3", pg) {
        check(db.open().as_mut(), &db);
    }
}

/// A new database on the server, its connection string.
fn fresh_pg_database(server: &PgServer) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = format!("search_{}", N.fetch_add(1, Ordering::Relaxed));
    let mut admin = postgres::Client::connect(&server.conninfo(), postgres::NoTls).unwrap();
    // ICU's en-US, not C: prefix ranges must still be byte ranges (the indexes are COLLATE "C").
    let icu = admin.batch_execute(&format!(
        "CREATE DATABASE {name} LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8' \
         TEMPLATE template0"
    ));
    if icu.is_err() {
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
    }
    server
        .conninfo()
        .replace("dbname=postgres", &format!("dbname={name}"))
}

const T0: i64 = 1_795_000_000_000_000; // 2026-11-18T...

/// A call `id` (`id@test` its Call-ID) that started `at_s` seconds after T0.
fn call(id: &str, at_s: i64, caller: &str, called: &str, from: &str, to: &str) -> CdrCall {
    CdrCall {
        call_id: format!("{id}@test"),
        caller: caller.into(),
        called: called.into(),
        caller_addr: from.into(),
        callee_addr: to.into(),
        start_us: T0 + at_s * 1_000_000,
        ringing_us: Some(T0 + at_s * 1_000_000 + 500_000),
        state: "ended".into(),
        last_response: Some(200),
        last_reason: "OK".into(),
        sip_messages: 7,
        ..CdrCall::default()
    }
}

/// Answered at 1 s, ended `talk_s` later, hung up by `by`, with a MOS.
fn answered(mut c: CdrCall, talk_s: i64, by: &str, mos: f64) -> CdrCall {
    c.answer_us = Some(c.start_us + 1_000_000);
    c.end_us = Some(c.start_us + (1 + talk_s) * 1_000_000);
    c.hangup_by = Some(by.into());
    c.mos_min = Some(mos);
    c
}

fn failed(mut c: CdrCall, code: u16, state: &str, by: &str) -> CdrCall {
    c.end_us = Some(c.start_us + 3_000_000);
    c.last_response = Some(code);
    c.state = state.into();
    c.hangup_by = Some(by.into());
    c
}

/// A stream as the monitor writes it: `payload` in its names, `lost` of `packets + lost`.
fn stream(payload: &str, packets: u64, lost: i64, jitter_ms: f64) -> CdrStream {
    CdrStream {
        src: "10.9.9.9:4000".into(),
        dst: "10.9.9.8:4000".into(),
        payload: payload.into(),
        packets,
        lost,
        max_jitter_ms: jitter_ms,
        ..CdrStream::default()
    }
}

fn record(c: CdrCall, streams: Vec<CdrStream>, sensor: &str) -> CdrRecord {
    let c = CdrCall {
        sensor: sensor.into(),
        ..c
    };
    let mut r = CdrRecord::call(c, streams);
    r.uid = r.identity(sensor);
    r
}

/// Ten calls, one letter each, each with something to find it by.
fn ten_calls() -> Vec<CdrRecord> {
    let pbx = "192.168.10.5:5060";
    vec![
        record(
            answered(
                call("a", 10, "1001", "+4930123456", "10.1.0.5:5060", pbx),
                120,
                "caller",
                4.3,
            ),
            vec![
                stream("g711A, telephone-event", 6000, 0, 2.0),
                stream("g711A", 6000, 0, 1.0),
            ],
            "local",
        ),
        record(
            answered(
                call("b", 20, "1002", "+491701234589", "10.1.0.6:5060", pbx),
                30,
                "callee",
                2.9,
            ),
            vec![stream("g711U", 90, 10, 45.0)],
            "site-a",
        ),
        record(
            failed(
                call("c", 30, "+4930555189", "1001", "203.0.113.10:5060", pbx),
                486,
                "failed",
                "callee",
            ),
            vec![],
            "local",
        ),
        record(
            failed(
                call(
                    "d",
                    40,
                    "+12125550100",
                    "+4930123457",
                    "[2001:db8:ffff::10]:5060",
                    "[2001:db8:4::5]:5060",
                ),
                404,
                "failed",
                "callee",
            ),
            vec![],
            "dc-2",
        ),
        record(
            answered(
                call(
                    "e",
                    50,
                    "2001",
                    "*97",
                    "10.2.0.17:5060",
                    "192.168.20.5:5060",
                ),
                5,
                "caller",
                4.4,
            ),
            vec![stream("opus", 250, 0, 1.5)],
            "site-a",
        ),
        record(
            failed(
                call("f", 60, "1001", "1002", "10.1.0.5:5060", pbx),
                487,
                "cancelled",
                "caller",
            ),
            vec![],
            "local",
        ),
        record(
            failed(
                call(
                    "g",
                    70,
                    "anonymous",
                    "+494098765001",
                    "198.51.100.20:5060",
                    "192.168.20.5:5060",
                ),
                503,
                "failed",
                "callee",
            ),
            vec![],
            "site-a",
        ),
        record(
            answered(
                call("h", 80, "1100", "+4989555120", "10.1.3.9:5060", pbx),
                40,
                "callee",
                3.5,
            ),
            vec![stream("g722", 1980, 20, 12.0)],
            "local",
        ),
        record(
            answered(
                call("i", 90, "3005", "0800123", "pbx-a", "pbx-b"),
                60,
                "caller",
                4.1,
            ),
            vec![stream("G729", 3000, 0, 3.0)],
            "local",
        ),
        // Still ringing: no end, no duration.
        record(
            CdrCall {
                state: "early".into(),
                last_response: Some(180),
                ..call(
                    "j",
                    100,
                    "1003",
                    "+4930123456",
                    "[2001:db8:4::105]:5060",
                    "[2001:db8:4::5]:5060",
                )
            },
            vec![stream("g711U", 100, 0, 1.0)],
            "dc-2",
        ),
    ]
}

/// The calls a query finds, as their letters, newest first (every page followed).
fn letters(st: &mut dyn CdrStore, raw: &str) -> String {
    let mut q = CallQuery::from_query(raw).unwrap();
    q.limit = 3;
    let mut out = String::new();
    loop {
        let page: CallPage = st.search(&q).unwrap();
        for c in &page.calls {
            out.push_str(c.call.call_id.trim_end_matches("@test"));
        }
        match page.next {
            Some(n) => q.after = Some(cdr::query::Cursor::parse("after", &n).unwrap()),
            None => return out,
        }
    }
}

/// What each filter finds among the ten calls (newest first: j is the newest).
const FINDS: &[(&str, &str)] = &[
    ("", "jihgfedcba"),
    // Numbers: exact, prefix, suffix, contains, lists, negation.
    ("caller=1001", "fa"),
    ("caller=100*", "jfba"),
    ("caller=*01", "fea"),
    ("caller=*00*", "jihfedba"),
    ("caller=1001,*03", "jfa"),
    ("caller=1001,100*", "jfba"),
    ("caller=!100*", "ihgedc"),
    ("caller=!1001,anonymous", "jihedcb"),
    ("called=%2B4930*", "jda"),
    ("called=*89", "b"),
    ("called=*97", "e"),
    ("called=!%2B49*,*97", "ifc"),
    ("caller=*", "jihgfedcba"),
    // One call by its Call-ID.
    ("call_id=b%40test", "b"),
    // Addresses: either side, a CIDR or one address, IPv4 or IPv6.
    ("ip=10.1.0.0/16", "hfba"),
    ("ip=10.1.0.5", "fa"),
    ("ip=192.168.20.0/24", "ge"),
    ("ip=2001:db8::/32", "jd"),
    ("ip=2001:db8:4::/48", "jd"),
    ("ip=0.0.0.0/0", "hgfecba"),
    // Responses: a code, a class, a list.
    ("response=486", "c"),
    ("response=4xx", "fdc"),
    ("response=486,5xx", "gc"),
    ("response=1xx", "j"),
    // Figures.
    ("min_duration_s=60", "ia"),
    ("min_duration_s=0", "ihgfedcba"),
    ("mos_below=3.1", "b"),
    ("mos_below=4.2", "ihb"),
    ("loss_above_pct=5", "b"),
    ("loss_above_pct=0.5", "hb"),
    ("jitter_above_ms=10", "hb"),
    // Codecs: the monitor's names and the RTP ones, any case.
    ("codec=PCMA", "a"),
    ("codec=g711a", "a"),
    ("codec=PCMU", "jb"),
    ("codec=OPUS", "e"),
    ("codec=g729", "i"),
    ("codec=telephone-event", "a"),
    ("codec=speex", ""),
    ("hangup_by=caller", "ifea"),
    ("sensor=site-a", "geb"),
    ("sensor=dc-2", "jd"),
    // Time: from inclusive, to exclusive.
    ("from=1795000030&to=1795000070", "fedc"),
    ("from=2026-11-18T08:27:10Z&to=1795000020", "a"),
    // Together.
    ("caller=100*&response=2xx", "ba"),
    ("ip=10.0.0.0/8&mos_below=4&sensor=site-a", "b"),
    ("called=%2B49*&hangup_by=callee&from=1795000015", "hgdb"),
];

#[test]
fn each_filter_finds_exactly_its_calls() {
    let pg = PgServer::start();
    on_both(&pg, |st, db| {
        st.insert_records(&ten_calls()).unwrap();
        for (raw, want) in FINDS {
            assert_eq!(letters(st, raw), *want, "{db}: {raw}");
        }
    });
}

#[test]
fn a_page_carries_the_figures_the_list_shows() {
    let pg = PgServer::start();
    on_both(&pg, |st, db| {
        st.insert_records(&ten_calls()).unwrap();
        let page = st
            .search(&CallQuery::from_query("caller=1002").unwrap())
            .unwrap();
        let b = &page.calls[0];
        assert_eq!(b.uid, "site-a|b@test|1795000020000000", "{db}");
        assert_eq!(b.call.sensor, "site-a");
        assert_eq!(b.duration_s, Some(31.0));
        assert_eq!(b.codec, "g711U");
        assert_eq!(b.loss_pct_max, Some(10.0));
        assert_eq!(b.jitter_max_ms, Some(45.0));
        let j = &st
            .search(&CallQuery::from_query("caller=1003").unwrap())
            .unwrap()
            .calls[0];
        assert_eq!((j.duration_s, j.call.end_us), (None, None), "{db}");
        // The JSON the browser reads: the call's fields flattened beside the figures.
        let json = serde_json::to_value(&page).unwrap();
        let row = &json["calls"][0];
        for key in [
            "call_id",
            "caller",
            "sensor",
            "uid",
            "id",
            "duration_s",
            "codec",
            "loss_pct_max",
            "jitter_max_ms",
        ] {
            assert!(row.get(key).is_some(), "{db}: {key} in {row}");
        }
        assert!(json["next"].is_null() && json.get("scanned_to_us").is_none());
    });
}

#[test]
fn pages_follow_the_keyset_across_equal_start_times() {
    let pg = PgServer::start();
    on_both(&pg, |st, db| {
        // 95 calls, five at each microsecond: pages of 7 cut through runs of equal times.
        let records: Vec<CdrRecord> = (0..95)
            .map(|i| {
                let c = call(
                    &format!("k{i}"),
                    i / 5,
                    &format!("{}", 5000 + i % 3),
                    "1",
                    "10.0.0.1:5060",
                    "10.0.0.2:5060",
                );
                record(c, vec![], "local")
            })
            .collect();
        st.insert_records(&records).unwrap();
        for raw in [
            "limit=7",
            "limit=7&caller=5001",
            "limit=7&caller=500*",
            "limit=1&caller=!5002",
        ] {
            let mut q = CallQuery::from_query(raw).unwrap();
            let mut seen = Vec::new();
            let mut pages = 0;
            loop {
                let page = st.search(&q).unwrap();
                pages += 1;
                assert!(page.calls.len() <= q.limit, "{db} {raw}");
                seen.extend(page.calls.iter().map(|c| (c.call.start_us, c.id)));
                match page.next {
                    Some(n) => q.after = Some(cdr::query::Cursor::parse("after", &n).unwrap()),
                    None => break,
                }
            }
            let want = records
                .iter()
                .filter(|r| {
                    let caller = &r.call.as_ref().unwrap().caller;
                    match raw {
                        "limit=7&caller=5001" => caller == "5001",
                        "limit=1&caller=!5002" => caller != "5002",
                        _ => true,
                    }
                })
                .count();
            let distinct: HashSet<_> = seen.iter().collect();
            assert_eq!(
                (seen.len(), distinct.len()),
                (want, want),
                "{db} {raw}: each once"
            );
            assert!(
                seen.windows(2).all(|w| w[0] > w[1]),
                "{db} {raw}: newest first"
            );
            assert!(pages >= want / q.limit, "{db} {raw}");
        }
    });
}

#[test]
fn totals_count_the_filter_per_round_bucket() {
    let pg = PgServer::start();
    on_both(&pg, |st, db| {
        st.insert_records(&ten_calls()).unwrap();
        // 100 s of calls over an hour: one-minute buckets aligned to the minute (T0 is 40 s
        // past one), the first three hold them all.
        let q = CallQuery::from_query("from=1795000000&to=1795003600").unwrap();
        let t = st.totals(&q).unwrap();
        assert_eq!(
            (t.from_us, t.to_us, t.bucket_s),
            (T0, T0 + 3_600_000_000, 60)
        );
        assert_eq!((t.calls, t.answered, t.buckets.len()), (10, 5, 61), "{db}");
        assert_eq!(
            t.buckets[0].start_us, 1_794_999_960_000_000,
            "aligned to the minute"
        );
        let counts: Vec<u64> = t.buckets.iter().take(3).map(|b| b.calls).collect();
        assert_eq!(counts, [1, 6, 3]);
        assert_eq!(t.buckets.iter().map(|b| b.calls).sum::<u64>(), 10);
        assert_eq!(t.mos_min, Some(2.9));
        let avg = (4.3 + 2.9 + 4.4 + 3.5 + 4.1) / 5.0;
        assert!(
            (t.mos_avg.unwrap() - avg).abs() < 1e-9,
            "{db}: {:?}",
            t.mos_avg
        );
        assert_eq!(t.note, None);
        // The filter applies; `after` and `limit` do not.
        let q = CallQuery::from_query(
            "from=1795000000&to=1795003600&caller=100*&after=1795000050000000.1&limit=1",
        )
        .unwrap();
        let t = st.totals(&q).unwrap();
        assert_eq!((t.calls, t.answered, t.mos_min), (4, 2, Some(2.9)), "{db}");
        // A day: half-hour buckets. Without a range: the last 24 hours (none of these calls).
        let q = CallQuery::from_query("from=1795000000&to=1795086400").unwrap();
        assert_eq!(st.totals(&q).unwrap().bucket_s, 1800);
        let t = st.totals(&CallQuery::default()).unwrap();
        assert_eq!((t.to_us - t.from_us, t.calls), (86_400_000_000, 0), "{db}");
    });
}

#[test]
fn a_call_is_found_by_its_uid_or_by_its_row_number() {
    let pg = PgServer::start();
    on_both(&pg, |st, db| {
        let mut records = ten_calls();
        records[0].t38 = vec![CdrT38 {
            src: "10.1.0.5:4000".into(),
            dst: "192.168.10.5:4000".into(),
            types: "cng,v21".into(),
            ..CdrT38::default()
        }];
        st.insert_records(&records).unwrap();
        let (a, streams, t38) = st
            .call_by_uid("local|a@test|1795000010000000")
            .unwrap()
            .unwrap();
        assert_eq!(a.call.call_id, "a@test", "{db}");
        assert_eq!((streams.len(), t38.len()), (2, 1));
        assert_eq!(streams[0].payload, "g711A, telephone-event");
        // A row stored without a uid (by `insert`) is `#<id>`, in the list and here.
        let old = call("old", 5, "7", "8", "10.0.0.1:1", "10.0.0.2:2");
        st.insert(std::slice::from_ref(&old), &[]).unwrap();
        let page = st
            .search(&CallQuery::from_query("caller=7").unwrap())
            .unwrap();
        let uid = &page.calls[0].uid;
        assert_eq!(uid, &format!("#{}", page.calls[0].id), "{db}");
        let (found, _, _) = st.call_by_uid(uid).unwrap().unwrap();
        assert_eq!(found.call.call_id, "old@test");
        assert!(st.call_by_uid("#999999").unwrap().is_none());
        assert!(st.call_by_uid("nope").unwrap().is_none());
        // A row with a uid is not found by its number: its uid is its name.
        assert!(st.call_by_uid(&format!("#{}", a.id)).unwrap().is_none());
    });
}

fn registration(i: i64, user: &str, src: &str, code: Option<u16>, result: &str) -> CdrRecord {
    let mut r = CdrRecord::registration(CdrRegistration {
        call_id: format!("reg{i}@test"),
        user: user.into(),
        domain: "pbx.example.com".into(),
        contact: format!("sip:{user}@{src};transport=udp"),
        user_agent: "Yealink SIP-T46U 108.86.0.20".into(),
        src: src.into(),
        dst: "192.168.10.5:5060".into(),
        first_us: T0 + i * 1_000_000,
        last_us: T0 + i * 1_000_000 + 40_000,
        requests: 2,
        last_code: code,
        result: result.into(),
        expires_s: code.map(|_| 3600),
        sensor: String::new(),
    });
    r.uid = r.identity("local");
    r
}

#[test]
fn registrations_are_stored_once_and_searched_like_calls() {
    let pg = PgServer::start();
    on_both(&pg, |st, db| {
        let regs = vec![
            registration(1, "1001", "10.1.0.5:5060", Some(200), "registered"),
            registration(2, "1002", "10.1.0.6:5060", Some(401), "challenged"),
            registration(3, "2001", "[2001:db8:4::105]:5060", Some(403), "failed"),
            registration(4, "1001", "10.1.0.5:5060", None, "no-response"),
        ];
        st.insert_records(&regs).unwrap();
        // Stored again (a replayed journal): updated in place, not added.
        st.insert_records(&regs[..1]).unwrap();
        let users = |st: &mut dyn CdrStore, raw: &str| -> Vec<String> {
            let page = st
                .registrations(&RegistrationQuery::from_query(raw).unwrap())
                .unwrap();
            page.registrations
                .iter()
                .map(|r| r.registration.call_id.trim_end_matches("@test").to_string())
                .collect()
        };
        assert_eq!(users(st, ""), ["reg4", "reg3", "reg2", "reg1"], "{db}");
        assert_eq!(users(st, "user=1001"), ["reg4", "reg1"]);
        assert_eq!(users(st, "user=10*"), ["reg4", "reg2", "reg1"]);
        assert_eq!(users(st, "user=*01"), ["reg4", "reg3", "reg1"]);
        assert_eq!(users(st, "user=!1001"), ["reg3", "reg2"]);
        assert_eq!(users(st, "ip=2001:db8::/32"), ["reg3"]);
        assert_eq!(
            users(st, "ip=192.168.10.5"),
            ["reg4", "reg3", "reg2", "reg1"]
        );
        assert_eq!(users(st, "result=failed,challenged"), ["reg3", "reg2"]);
        assert_eq!(users(st, "from=1795000002&to=1795000004"), ["reg3", "reg2"]);
        assert_eq!(
            users(st, "limit=2&after=1795000003040000.3"),
            ["reg2", "reg1"]
        );
        let page = st
            .registrations(&RegistrationQuery::from_query("limit=1").unwrap())
            .unwrap();
        let json = serde_json::to_value(&page).unwrap();
        let row = &json["registrations"][0];
        for key in [
            "uid",
            "user",
            "domain",
            "contact",
            "user_agent",
            "result",
            "last_code",
            "expires_s",
            "requests",
            "src",
            "dst",
            "first_us",
            "last_us",
            "sensor",
            "call_id",
        ] {
            assert!(row.get(key).is_some(), "{db}: {key} in {row}");
        }
        assert_eq!(row["uid"], "local|reg|reg4@test|1795000004000000");
        assert_eq!(row["sensor"], "local", "stored with the default sensor");
        assert!(json["next"].is_string());
    });
}

/// The `cdr` and `cdr_rtp` tables as the release before the search columns made them, with
/// two calls and their streams.
const BEFORE_SEARCH_COLUMNS: &str = "
CREATE TABLE cdr (
    id ID PRIMARY KEY, call_id TEXT NOT NULL, caller TEXT NOT NULL, called TEXT NOT NULL,
    caller_addr TEXT NOT NULL, callee_addr TEXT NOT NULL, start_us BIGINT NOT NULL,
    ringing_us BIGINT, answer_us BIGINT, end_us BIGINT, state TEXT NOT NULL,
    last_response INTEGER, last_reason TEXT NOT NULL, hangup_by TEXT, q850_cause INTEGER,
    sip_messages BIGINT NOT NULL, reinvites BIGINT NOT NULL, mos_min DOUBLE PRECISION,
    sip_tar TEXT, sip_member TEXT, sip_offset BIGINT, sip_len BIGINT, sip_compression TEXT,
    rtp_tar TEXT, rtp_member TEXT, rtp_offset BIGINT, rtp_len BIGINT, rtp_compression TEXT,
    dtmf TEXT, fax_pages BIGINT, fax_result TEXT, uid TEXT
);
CREATE INDEX cdr_start ON cdr(start_us);
CREATE INDEX cdr_call_id ON cdr(call_id);
CREATE INDEX cdr_caller ON cdr(caller);
CREATE INDEX cdr_called ON cdr(called);
CREATE UNIQUE INDEX cdr_uid ON cdr(uid);
CREATE TABLE cdr_rtp (
    id ID PRIMARY KEY, cdr_id BIGINT, call_id TEXT, src TEXT NOT NULL, dst TEXT NOT NULL,
    ssrc BIGINT NOT NULL, payload TEXT NOT NULL, start_us BIGINT NOT NULL, end_us BIGINT NOT NULL,
    packets BIGINT NOT NULL, lost BIGINT NOT NULL, duplicates BIGINT NOT NULL,
    out_of_order BIGINT NOT NULL, min_delta_ms DOUBLE PRECISION NOT NULL,
    mean_delta_ms DOUBLE PRECISION NOT NULL, max_delta_ms DOUBLE PRECISION NOT NULL,
    mean_jitter_ms DOUBLE PRECISION NOT NULL, max_jitter_ms DOUBLE PRECISION NOT NULL,
    mos DOUBLE PRECISION, rtcp_reports BIGINT NOT NULL, rtcp_fraction_lost_pct DOUBLE PRECISION,
    rtcp_jitter_ms DOUBLE PRECISION, uid TEXT
);
INSERT INTO cdr (call_id, caller, called, caller_addr, callee_addr, start_us, end_us, state,
    last_response, last_reason, sip_messages, reinvites, mos_min, uid) VALUES
    ('old1@x', '1001', '+491701234589', '10.1.0.5:5060', '[2001:db8::5]:5060', 1000000, 61000000,
     'ended', 200, 'OK', 7, 0, 2.5, 'site-a|old1@x|1000000'),
    ('old2@x', '1002', '1003', 'somewhere', 'else', 2000000, NULL, 'early', 180, 'Ringing', 3, 0,
     NULL, NULL);
INSERT INTO cdr_rtp (cdr_id, src, dst, ssrc, payload, start_us, end_us, packets, lost,
    duplicates, out_of_order, min_delta_ms, mean_delta_ms, max_delta_ms, mean_jitter_ms,
    max_jitter_ms, rtcp_reports) VALUES
    (1, 'a', 'b', 1, 'g711A, telephone-event', 1, 2, 95, 5, 0, 0, 20, 20, 20, 1, 9.5, 0),
    (1, 'b', 'a', 2, 'g711A', 1, 2, 100, 0, 0, 0, 20, 20, 20, 1, 3, 0);
";

fn check_old_rows_searchable(st: &mut dyn CdrStore, backend: &str) {
    // Computed from the rows already stored when the columns were added.
    for (raw, want) in [
        ("called=*89", "old1@x"),
        ("ip=2001:db8::/32", "old1@x"),
        ("ip=10.1.0.5", "old1@x"),
        ("codec=PCMA", "old1@x"),
        ("min_duration_s=60", "old1@x"),
        ("loss_above_pct=4.9", "old1@x"),
        ("jitter_above_ms=9", "old1@x"),
        ("sensor=site-a", "old1@x"),
        // Stored without a uid: the default sensor.
        ("sensor=local", "old2@x"),
        ("caller=1002", "old2@x"),
    ] {
        let page = st.search(&CallQuery::from_query(raw).unwrap()).unwrap();
        let ids: Vec<&str> = page.calls.iter().map(|c| c.call.call_id.as_str()).collect();
        assert_eq!(ids.join(","), want, "{backend}: {raw}");
    }
    let old2 = st
        .search(&CallQuery::from_query("caller=1002").unwrap())
        .unwrap();
    assert_eq!(
        (old2.calls[0].duration_s, old2.calls[0].codec.as_str()),
        (None, "")
    );
    // New calls go in beside them.
    st.insert_records(&ten_calls()).unwrap();
    assert_eq!(
        letters(st, "caller=100*&from=1795000000"),
        "jfba",
        "{backend}"
    );
}

#[test]
fn a_database_from_before_the_search_columns_gets_them_filled() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite3");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(&BEFORE_SEARCH_COLUMNS.replace("ID PRIMARY", "INTEGER PRIMARY"))
        .unwrap();
    let mut st = SqliteStore::open(&path).unwrap();
    check_old_rows_searchable(&mut st, "sqlite");
    drop(st);
    // The retired single-column indexes are gone, the search indexes are there.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mut names = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'cdr'")
        .unwrap();
    let names: Vec<String> = names
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(!names.contains(&"cdr_caller".to_string()), "{names:?}");
    assert!(
        names.contains(&"cdr_called_rev_start".to_string()),
        "{names:?}"
    );
    // Opening again fills nothing twice and finds everything.
    let mut st = SqliteStore::open(&path).unwrap();
    assert_eq!(letters(&mut st, "caller=*1&from=1795000000"), "fea");

    let Some(server) = PgServer::start() else {
        return;
    };
    let conninfo = fresh_pg_database(&server);
    let mut client = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
    client
        .batch_execute(&BEFORE_SEARCH_COLUMNS.replace("ID PRIMARY", "BIGSERIAL PRIMARY"))
        .unwrap();
    drop(client);
    let mut st = PgStore::connect(&conninfo).unwrap();
    check_old_rows_searchable(&mut st, "postgres");
    drop(st);
    let mut client = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
    let retired: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE indexname IN ('cdr_caller', 'cdr_called', 'cdr_start')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(retired, 0);
}

#[test]
fn a_registration_goes_through_the_journal_whole() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("cdr.journal");
    let (mut j, _) = cdr::Journal::open(&journal, 1 << 20).unwrap();
    let rec = registration(9, "4711", "10.0.0.1:5060", Some(200), "registered");
    j.append(std::slice::from_ref(&rec)).unwrap();
    drop(j);
    let (back, damage) = cdr::Journal::inspect(&journal).unwrap();
    assert_eq!((back, damage), (vec![rec], None));
    // A record journaled before registrations existed reads as it was.
    let old: CdrRecord = serde_json::from_str(r#"{"uid":"x","call":null,"streams":[]}"#).unwrap();
    assert_eq!((old.uid.as_str(), old.registration), ("x", None));
}

#[test]
fn the_writer_gives_calls_and_registrations_its_sensor() {
    let pg = PgServer::start();
    on_both(&pg, |st, db| {
        let dir = tempfile::tempdir().unwrap();
        let cfg = CdrWriterConfig {
            sensor: "edge-7".into(),
            batch_delay_ms: 5,
            ..CdrWriterConfig::new(dir.path().join("cdr.journal"))
        };
        let target = db.clone();
        let writer = CdrWriter::start(cfg, move || Ok(target.open() as Box<dyn CdrStore>)).unwrap();
        let c = call("w", 1, "4711", "4712", "10.0.0.1:5060", "10.0.0.2:5060");
        assert!(c.sensor.is_empty());
        let mut reg = registration(9, "4711", "10.0.0.1:5060", Some(200), "registered");
        reg.uid.clear();
        writer.submit(CdrRecord::call(c, vec![]));
        writer.submit(reg);
        let stats = writer.close();
        assert_eq!(stats.written_records, 2, "{db}: {stats:?}");
        let page = st
            .search(&CallQuery::from_query("sensor=edge-7").unwrap())
            .unwrap();
        assert_eq!(page.calls.len(), 1, "{db}");
        assert_eq!(page.calls[0].uid, "edge-7|w@test|1795000001000000");
        let regs = st
            .registrations(&RegistrationQuery::from_query("user=4711").unwrap())
            .unwrap();
        assert_eq!(regs.registrations[0].registration.sensor, "edge-7", "{db}");
        assert_eq!(
            regs.registrations[0].uid,
            "edge-7|reg|reg9@test|1795000009000000"
        );
    });
}

/// What a query should find, decided without SQL: the filter's meaning applied to each record.
fn oracle(q: &CallQuery, r: &CdrRecord) -> bool {
    use cdr::query::{NumberFilter, NumberPattern, ip_bytes};
    use cdr::search::{HangupBy, ResponseMatch};
    let c = r.call.as_ref().unwrap();
    let number = |f: &NumberFilter, n: &str| {
        let any = f.items.iter().any(|p| match p {
            NumberPattern::Exact(v) => n == v,
            NumberPattern::Prefix(v) => n.starts_with(v.as_str()),
            NumberPattern::Suffix(v) => n.ends_with(v.as_str()),
            NumberPattern::Contains(v) => n.contains(v.as_str()),
        });
        any != f.negate
    };
    let in_net = |addr: &str| {
        let (lo, hi) = q.ip.unwrap().range();
        ip_bytes(addr).is_some_and(|b| lo <= b && b <= hi)
    };
    let duration_ms = c.end_us.map(|e| (e - c.start_us) / 1000);
    let loss = r
        .streams
        .iter()
        .map(|s| {
            let lost = s.lost.max(0) as f64;
            100.0 * lost / (s.packets as f64 + lost)
        })
        .reduce(f64::max);
    let jitter = r.streams.iter().map(|s| s.max_jitter_ms).reduce(f64::max);
    let codecs: Vec<String> = r
        .streams
        .iter()
        .flat_map(|s| s.payload.split(','))
        .map(|p| p.trim().to_ascii_lowercase())
        .collect();
    q.from_us.is_none_or(|f| c.start_us >= f)
        && q.to_us.is_none_or(|t| c.start_us < t)
        && q.caller.as_ref().is_none_or(|f| number(f, &c.caller))
        && q.called.as_ref().is_none_or(|f| number(f, &c.called))
        && q.call_id.as_ref().is_none_or(|id| &c.call_id == id)
        && (q.ip.is_none() || in_net(&c.caller_addr) || in_net(&c.callee_addr))
        && (q.response.is_empty()
            || q.response.iter().any(|m| match (m, c.last_response) {
                (ResponseMatch::Code(x), Some(y)) => *x == y,
                (ResponseMatch::Class(x), Some(y)) => y / 100 == u16::from(*x),
                _ => false,
            }))
        && q.min_duration_s
            .is_none_or(|v| duration_ms.is_some_and(|d| d as f64 >= (v * 1000.0).ceil()))
        && q.mos_below.is_none_or(|v| c.mos_min.is_some_and(|m| m < v))
        && q.loss_above_pct.is_none_or(|v| loss.is_some_and(|l| l > v))
        && q.jitter_above_ms
            .is_none_or(|v| jitter.is_some_and(|j| j > v))
        && q.codec.as_ref().is_none_or(|name| {
            let name = name.to_ascii_lowercase();
            let names: &[&str] = match name.as_str() {
                "pcma" | "g711a" => &["pcma", "g711a"],
                "pcmu" | "g711u" => &["pcmu", "g711u"],
                n => &[n],
            };
            codecs.iter().any(|c| names.contains(&c.as_str()))
        })
        && q.hangup_by.is_none_or(|h| {
            c.hangup_by.as_deref()
                == Some(match h {
                    HangupBy::Caller => "caller",
                    HangupBy::Callee => "callee",
                })
        })
        && q.sensor.as_ref().is_none_or(|s| &c.sensor == s)
}

const DAY_US: i64 = 86_400_000_000;

/// 60,000 synthetic calls over two days; 25,000 more from one busy number (7777), so that an
/// exact number has more calls than an index plan reads; and the oldest call the only one with
/// a codec nobody else uses, 85,000 rows back (more than a walk reads for one page).
fn many_calls() -> Vec<CdrRecord> {
    let mut all: Vec<CdrRecord> =
        cdr::seed::synthetic_calls(60_000, T0, T0 + 2 * DAY_US, 3).collect();
    all.extend(
        cdr::seed::synthetic_calls(25_000, T0, T0 + 2 * DAY_US, 4).map(|mut r| {
            let c = r.call.as_mut().unwrap();
            c.caller = "7777".into();
            c.call_id = format!("busy-{}", c.call_id);
            let sensor = c.sensor.clone();
            r.uid = r.identity(&sensor);
            r
        }),
    );
    let mut odd = cdr::seed::synthetic_calls(1, T0 - 1_000_000, T0, 5)
        .next()
        .unwrap();
    odd.streams = vec![stream("speex", 100, 0, 1.0)];
    all.insert(0, odd);
    all
}

/// Every page of `raw`, followed to the end: the calls (start, Call-ID), and how many pages
/// stopped on the walk's row budget.
fn every_page(st: &mut dyn CdrStore, raw: &str) -> (Vec<(i64, String)>, usize) {
    let mut q = CallQuery::from_query(raw).unwrap();
    let (mut out, mut cut) = (Vec::new(), 0);
    loop {
        let page = st.search(&q).unwrap();
        assert!(page.calls.len() <= q.limit, "{raw}");
        if page.scanned_to_us.is_some() {
            cut += 1;
        }
        out.extend(
            page.calls
                .iter()
                .map(|c| (c.call.start_us, c.call.call_id.clone())),
        );
        match page.next {
            Some(n) => q.after = Some(cdr::query::Cursor::parse("after", &n).unwrap()),
            None => return (out, cut),
        }
    }
}

#[test]
fn index_plans_and_walks_find_what_the_filter_means() {
    let records = many_calls();
    let queries = [
        "limit=500",
        // Dense: more index entries than an index plan reads, so the time index is walked.
        "caller=1*&limit=500",
        "called=%2B49*&response=4xx&limit=200",
        "ip=10.1.0.0/16&limit=500",
        "caller=!1*&limit=500",
        "codec=PCMA&hangup_by=caller&limit=500",
        // One busy number: walked along its own index, in time order.
        "caller=7777&limit=200",
        "caller=7777&mos_below=3.5&limit=100",
        // Sparse: read through the filter's index and sorted (the rows checked in batches).
        "called=*55&limit=300",
        "called=*55&mos_below=4.2&limit=50",
        "ip=10.1.0.0/24&sensor=local&limit=50",
        "ip=2001:db8::/32&limit=300",
        "caller=1000,1001,1002&min_duration_s=30&limit=100",
        // A window, and a filter that matches nothing but the oldest call: its first page
        // stops on the row budget and says how far it looked.
        "from=2026-11-18T12:00:00Z&to=2026-11-18T18:00:00Z&jitter_above_ms=10&limit=100",
        "codec=speex",
    ];
    let pg = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    for db in &Db::all(dir.path(), "many.sqlite3", &pg) {
        let loaded = match db {
            Db::Sqlite(p) => cdr::seed::bulk_load_sqlite(p, records.clone()),
            Db::Pg(c, _) => {
                // The bulk load keeps the layout the database was created with.
                drop(db.open());
                cdr::seed::bulk_load_postgres(c, records.clone())
            }
        }
        .unwrap();
        assert_eq!(loaded.calls, 85_001, "{db}");
        let mut st = db.open();
        for raw in queries {
            let q = CallQuery::from_query(raw).unwrap();
            // Newest first; equal times in the order stored (the id).
            let mut want: Vec<(i64, usize, String)> = records
                .iter()
                .enumerate()
                .filter(|(_, r)| oracle(&q, r))
                .map(|(i, r)| {
                    let c = r.call.as_ref().unwrap();
                    (c.start_us, i, c.call_id.clone())
                })
                .collect();
            want.sort_by_key(|w| std::cmp::Reverse((w.0, w.1)));
            let want: Vec<(i64, String)> = want.into_iter().map(|(t, _, id)| (t, id)).collect();
            let (got, cut) = every_page(st.as_mut(), raw);
            assert_eq!(got.len(), want.len(), "{db}: {raw}");
            assert!(got == want, "{db}: {raw}: the same calls in the same order");
            if raw == "codec=speex" {
                assert_eq!(got.len(), 1);
                assert!(cut >= 1, "{db}: the walk said where it stopped");
            }
        }
        // Totals agree with the records over a day, and their buckets add up.
        let q = CallQuery::from_query("from=1795000000&to=1795086400&caller=7777").unwrap();
        let t = st.totals(&q).unwrap();
        let day: Vec<&CdrCall> = records
            .iter()
            .filter(|r| oracle(&q, r))
            .map(|r| r.call.as_ref().unwrap())
            .collect();
        assert_eq!(t.calls, day.len() as u64, "{db}");
        assert_eq!(
            t.answered,
            day.iter().filter(|c| c.answer_us.is_some()).count() as u64
        );
        let mos_min = day.iter().filter_map(|c| c.mos_min).reduce(f64::min);
        assert_eq!(t.mos_min, mos_min, "{db}");
        assert_eq!(t.buckets.iter().map(|b| b.calls).sum::<u64>(), t.calls);
        assert_eq!((t.bucket_s, t.note.as_deref()), (1800, None));
    }
}

#[test]
fn seeded_registrations_load_in_bulk_and_page_to_the_end() {
    let regs: Vec<CdrRecord> =
        cdr::seed::synthetic_registrations(3_000, T0, T0 + DAY_US, 9).collect();
    let pg = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    for db in &Db::all(dir.path(), "regs.sqlite3", &pg) {
        let loaded = match db {
            Db::Sqlite(p) => cdr::seed::bulk_load_sqlite(p, regs.clone()),
            Db::Pg(c, _) => {
                drop(db.open());
                cdr::seed::bulk_load_postgres(c, regs.clone())
            }
        }
        .unwrap();
        assert_eq!((loaded.registrations, loaded.calls), (3_000, 0), "{db}");
        let mut st = db.open();
        for (raw, want) in [
            ("limit=500", regs.len()),
            (
                "user=10*&result=registered&limit=100",
                regs.iter()
                    .filter_map(|r| r.registration.as_ref())
                    .filter(|r| r.user.starts_with("10") && r.result == "registered")
                    .count(),
            ),
        ] {
            let mut q = RegistrationQuery::from_query(raw).unwrap();
            let mut seen: Vec<(i64, String)> = Vec::new();
            loop {
                let page = st.registrations(&q).unwrap();
                seen.extend(
                    page.registrations
                        .iter()
                        .map(|r| (r.registration.last_us, r.uid.clone())),
                );
                match page.next {
                    Some(n) => q.after = Some(cdr::query::Cursor::parse("after", &n).unwrap()),
                    None => break,
                }
            }
            let distinct: HashSet<&String> = seen.iter().map(|s| &s.1).collect();
            assert_eq!((seen.len(), distinct.len()), (want, want), "{db}: {raw}");
            assert!(seen.windows(2).all(|w| w[0].0 >= w[1].0), "{db}: {raw}");
        }
    }
}

#[test]
fn fax_calls_are_found_by_their_flows_or_their_result() {
    let pg = PgServer::start();
    on_both(&pg, |st, db| {
        let mut records = ten_calls();
        // `a` sent T.38 whose T.30 frames were not seen; `h` has a fax result.
        records[0].t38 = vec![CdrT38 {
            src: "10.1.0.5:4000".into(),
            dst: "192.168.10.5:4000".into(),
            types: "cng".into(),
            ..CdrT38::default()
        }];
        if let Some(c) = records[7].call.as_mut() {
            c.fax_pages = Some(1);
            c.fax_result = Some("completed".into());
        }
        st.insert_records(&records).unwrap();
        assert_eq!(letters(st, "fax=1"), "ha", "{db}");
        assert_eq!(letters(st, "fax=0"), "jigfedcb", "{db}");
        assert_eq!(letters(st, "fax=1&caller=1100"), "h", "{db}");
        let page = st.search(&CallQuery::default()).unwrap();
        let faxes: Vec<bool> = page.calls.iter().map(|c| c.fax).collect();
        assert_eq!(
            faxes,
            [
                false, false, true, false, false, false, false, false, false, true
            ],
            "{db}: the list's fax mark"
        );
        let json = serde_json::to_value(&page).unwrap();
        assert_eq!(json["calls"][2]["fax"], true, "{db}");
    });
}

#[test]
fn an_empty_first_page_says_where_the_newest_call_is() {
    let pg = PgServer::start();
    on_both(&pg, |st, db| {
        let empty = st.search(&CallQuery::default()).unwrap();
        assert_eq!((empty.calls.len(), empty.newest_us), (0, None), "{db}");
        let regs = st.registrations(&RegistrationQuery::default()).unwrap();
        assert_eq!(regs.newest_us, None, "{db}");
        st.insert_records(&ten_calls()).unwrap();
        // A range years later: nothing in it, and the newest call is `j`'s start.
        let later = "from=2030-01-01T00:00:00Z&to=2030-01-02T00:00:00Z";
        let page = st.search(&CallQuery::from_query(later).unwrap()).unwrap();
        assert!(page.calls.is_empty(), "{db}");
        assert_eq!(page.newest_us, Some(T0 + 100_000_000), "{db}");
        // Whatever the filter: where the database has calls at all.
        let q = CallQuery::from_query(&format!("{later}&caller=9*")).unwrap();
        assert_eq!(st.search(&q).unwrap().newest_us, Some(T0 + 100_000_000));
        // A page with calls does not say.
        assert_eq!(st.search(&CallQuery::default()).unwrap().newest_us, None);
    });
}

/// A stream seen without signalling, `at_s` seconds after T0.
fn lone(src: &str, dst: &str, ssrc: u32, at_s: i64) -> CdrRecord {
    let mut r = CdrRecord::lone_stream(CdrStream {
        src: src.into(),
        dst: dst.into(),
        ssrc,
        payload: "g711A".into(),
        start_us: T0 + at_s * 1_000_000,
        end_us: T0 + (at_s + 20) * 1_000_000,
        packets: 1000,
        lost: 3,
        ..CdrStream::default()
    });
    r.uid = r.identity("site-b");
    r
}

#[test]
fn streams_without_a_call_are_found_by_address_port_ssrc_and_time() {
    use cdr::lone::StreamQuery;
    let pg = PgServer::start();
    on_both(&pg, |st, db| {
        let none = st.lone_streams(&StreamQuery::default()).unwrap();
        assert_eq!((none.streams.len(), none.newest_us), (0, None), "{db}");
        // Two days of lone streams, three of which to find, beside calls whose streams share
        // their addresses and SSRC (a call's stream is never one of these).
        let mut records = ten_calls();
        records[0].streams[0].ssrc = 0xABCD_0001;
        for k in 0..3000i64 {
            let a = format!("10.50.{}.{}:{}", k % 7, k % 200, 20_000 + 2 * (k % 500));
            records.push(lone(&a, "192.0.2.80:30000", 0x1000_0000 + k as u32, k * 60));
        }
        records.push(lone("10.1.0.5:4000", "192.0.2.9:31000", 0xABCD_0001, 50));
        records.push(lone(
            "[2001:db8:4::105]:4002",
            "[2001:db8:4::5]:5004",
            0xABCD_0002,
            70,
        ));
        records.push(lone("192.0.2.9:31000", "10.1.0.5:4000", 0xABCD_0003, 75));
        st.insert_records(&records).unwrap();
        let find = |st: &mut dyn CdrStore, raw: &str| -> Vec<u32> {
            let mut q = StreamQuery::from_query(raw).unwrap();
            q.limit = 2;
            let mut out = Vec::new();
            loop {
                let page = st.lone_streams(&q).unwrap();
                out.extend(page.streams.iter().map(|s| s.stream.ssrc));
                match page.next {
                    Some(n) => q.after = Some(cdr::query::Cursor::parse("after", &n).unwrap()),
                    None => return out,
                }
            }
        };
        assert_eq!(find(st, "ssrc=0xABCD0001"), [0xABCD_0001], "{db}");
        assert_eq!(find(st, "ssrc=abcd0002"), [0xABCD_0002], "{db}");
        assert_eq!(
            find(st, "ip=10.1.0.5"),
            [0xABCD_0003, 0xABCD_0001],
            "{db}: either end, newest first"
        );
        assert_eq!(
            find(st, "ip=10.1.0.5&port=4000"),
            [0xABCD_0003, 0xABCD_0001]
        );
        assert_eq!(find(st, "ip=10.1.0.5&port=4001"), [0u32; 0]);
        assert_eq!(find(st, "ip=2001:db8:4::5&port=5004"), [0xABCD_0002]);
        assert_eq!(
            find(st, "ip=10.1.0.50"),
            [0u32; 0],
            "{db}: 10.1.0.5 is not a prefix of 10.1.0.50"
        );
        assert_eq!(find(st, "port=31000"), [0xABCD_0003, 0xABCD_0001], "{db}");
        // A time range over the generated ones: minutes 100 to 110, both ends of the range.
        let (from, to) = (T0 / 1_000_000 + 6000, T0 / 1_000_000 + 6600);
        let got = find(st, &format!("from={from}&to={to}"));
        let want: Vec<u32> = (100..110).rev().map(|k| 0x1000_0000 + k).collect();
        assert_eq!(got, want, "{db}");
        // A dense prefix over the whole range: a walk, every match once.
        let got = find(st, "ip=10.50.3.0");
        let want: Vec<u32> = (0..3000u32)
            .rev()
            .filter(|k| k % 7 == 3 && k % 200 == 0)
            .map(|k| 0x1000_0000 + k)
            .collect();
        assert_eq!(got, want, "{db}");
        // One by its uid, with its figures and sensor; a call's stream is not one.
        let page = st
            .lone_streams(&StreamQuery::from_query("ssrc=0xABCD0002").unwrap())
            .unwrap();
        let s = &page.streams[0];
        assert_eq!(s.sensor, "site-b", "{db}");
        let again = st.lone_stream_by_uid(&s.uid).unwrap().unwrap();
        assert_eq!(again, *s, "{db}");
        assert_eq!((s.stream.packets, s.stream.lost), (1000, 3));
        assert!(
            st.lone_stream_by_uid("local|a@test|1795000010000000/0")
                .unwrap()
                .is_none(),
            "{db}"
        );
        // Nothing in a range: the newest is named.
        let page = st
            .lone_streams(&StreamQuery::from_query("from=2031-01-01&to=2031-01-02").unwrap())
            .unwrap();
        assert_eq!(page.newest_us, Some(T0 + 2999 * 60_000_000), "{db}");
    });
}

/// A stream without a call says where its own packets are archived: the columns go in by
/// `COPY` (new records) and by the upsert (stored again, moved), and come back with the
/// stream, by search and by uid. A call's streams have none.
#[test]
fn a_stream_without_a_call_keeps_its_archive_columns() {
    use cdr::lone::StreamQuery;
    let pg = PgServer::start();
    on_both(&pg, |st, db| {
        let mut rec = lone("10.1.0.5:4000", "192.0.2.9:31000", 0xABCD_0001, 50);
        let s = &mut rec.streams[0];
        s.rtp_tar = Some("/var/lib/tandem/archive/2026-11-18/20/14/rtp.tar".into());
        s.rtp_member = Some("rtp_10.1.0.5:4000_192.0.2.9:31000_abcd0001.pcap".into());
        s.rtp_offset = Some(5_000_000_000);
        s.rtp_len = Some(172_024);
        s.rtp_compression = Some("none".into());
        let mut records = ten_calls();
        records.push(rec.clone());
        st.insert_records(&records).unwrap();
        let found = st.lone_stream_by_uid(&format!("{}/0", rec.uid)).unwrap();
        assert_eq!(found.unwrap().stream, rec.streams[0], "{db}");
        let page = st.lone_streams(&StreamQuery::default()).unwrap();
        assert_eq!(page.streams[0].stream, rec.streams[0], "{db}");
        assert!(page.streams[0].stream.archived());
        // Stored again with its member elsewhere (the upsert replaces the columns).
        rec.streams[0].rtp_offset = Some(512);
        st.insert_records(std::slice::from_ref(&rec)).unwrap();
        let found = st.lone_stream_by_uid(&format!("{}/0", rec.uid)).unwrap();
        assert_eq!(found.unwrap().stream.rtp_offset, Some(512), "{db}");
        let (_, streams, _) = st.call_by_uid(&records[0].uid).unwrap().unwrap();
        assert!(streams.iter().all(|s| !s.archived()), "{db}");
    });
}

/// `group=NAME` finds the calls of the group's networks and number prefixes, through the same
/// indexes (union of the single filters), and the in-memory check of the alert rules' scopes
/// agrees with it call by call.
#[test]
fn a_group_finds_the_calls_of_its_addresses_and_numbers() {
    let configs = vec![
        groups::GroupConfig {
            name: "site".into(),
            addresses: vec!["10.1.0.0/16".into(), "2001:db8:4::/48".into()],
            numbers: vec!["+4930".into()],
        },
        groups::GroupConfig {
            name: "trunk".into(),
            addresses: vec!["203.0.113.10".into()],
            numbers: vec![],
        },
    ];
    cdr::search::set_search_groups(std::sync::Arc::new(groups::Groups::new(&configs).unwrap()));
    let e = CallQuery::from_query("group=nowhere").unwrap_err();
    assert_eq!(e.param, "group");
    assert!(e.problem.contains("the groups are all, site, trunk"), "{e}");
    assert_eq!(
        CallQuery::from_query("group=all").unwrap(),
        CallQuery::default()
    );
    let q = CallQuery::from_query("group=site&from=1795000000").unwrap();
    assert_eq!(CallQuery::from_query(&q.to_query()).unwrap(), q);
    let pg = PgServer::start();
    on_both(&pg, |st, db| {
        let calls = ten_calls();
        st.insert_records(&calls).unwrap();
        let mut union = |parts: &[&str]| {
            let mut all: Vec<char> = parts
                .iter()
                .flat_map(|p| letters(st, p).chars().collect::<Vec<_>>())
                .collect();
            all.sort_unstable_by(|a, b| b.cmp(a));
            all.dedup();
            all.into_iter().collect::<String>()
        };
        let site = union(&[
            "ip=10.1.0.0/16",
            "ip=2001:db8:4::/48",
            "caller=%2B4930*",
            "called=%2B4930*",
        ]);
        assert!(site.len() >= 3, "{site}");
        assert_eq!(letters(st, "group=site"), site, "{db}");
        assert_eq!(
            letters(st, "group=trunk"),
            letters(st, "ip=203.0.113.10"),
            "{db}"
        );
        assert_eq!(letters(st, "group=all"), "jihgfedcba", "{db}");
        let q = CallQuery::from_query("group=site").unwrap();
        let in_memory: String = calls
            .iter()
            .rev()
            .filter(|r| q.matches(r))
            .map(|r| {
                r.call
                    .as_ref()
                    .unwrap()
                    .call_id
                    .trim_end_matches("@test")
                    .to_string()
            })
            .collect();
        assert_eq!(in_memory, site);
    });
}

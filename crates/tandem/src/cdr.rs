//! `tandem cdr list|show|streams|pcap`: queries the call records `tandem capture` stored, and
//! the streams it saw without a call; `pcap` reads a call's (or such a stream's) archived
//! packets back (`sensor::call_pcap`).

use std::io::Write;
use std::path::PathBuf;

use ::cdr::query::{Cursor, LIMIT_MAX, NumberFilter};
use ::cdr::search::{CallQuery, CallSummary, ResponseMatch};
use anyhow::Context;
use utc::{format_us, parse_us};

/// The CDR database a command reads (`tandem cdr`, `tandem alerts`).
#[derive(clap::Args, Debug)]
pub struct CdrDatabase {
    /// SQLite file with the CDRs (and the alerts kept beside them).
    #[arg(
        long,
        visible_alias = "db",
        global = true,
        default_value = "tandem-data/cdr.sqlite3",
        env = "TANDEM_CDR_DB"
    )]
    pub cdr_db: PathBuf,
    /// Read CDRs from PostgreSQL instead (libpq-style `host=... port=... user=... dbname=...`).
    #[arg(long, global = true, env = "TANDEM_CDR_POSTGRES")]
    pub cdr_postgres: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub db: CdrDatabase,
    /// `pcap` of a call a remote sensor archived: the running collector's local socket
    /// (`collector.sock` in `tandem serve`'s data directory), through which the pcap is fetched
    /// from that sensor. Without a collector here, the archive files are read on this machine.
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        default_value = "tandem-data/collector.sock",
        env = "TANDEM_COLLECTOR_SOCKET"
    )]
    pub collector_socket: PathBuf,
    #[command(subcommand)]
    pub command: CdrCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum CdrCommand {
    /// Calls, newest first.
    List {
        /// Calls that started at or after this time (YYYY-MM-DD[THH:MM[:SS]] UTC, or Unix seconds).
        #[arg(long)]
        since: Option<String>,
        /// Calls that started before this time.
        #[arg(long)]
        until: Option<String>,
        /// Caller or called number, as the console's search writes it: `1001` (that number),
        /// `12*` (starts with), `*89` (ends with), `*12*` (contains), `1001,12*` (any of),
        /// `!1001,12*` (neither the caller nor the called is any of).
        #[arg(long)]
        number: Option<String>,
        /// Last SIP response code to the INVITE.
        #[arg(long)]
        response: Option<u16>,
        /// Calls with a stream whose MOS is below this.
        #[arg(long)]
        mos_below: Option<f64>,
        /// Any search of the console's Calls page, as `/api/calls` takes it:
        /// `--query 'ua=yealink&to_domain=carrier.example.net&header=X-Account:1234'`. The
        /// options above narrow it further.
        #[arg(long, value_name = "QUERY")]
        query: Option<String>,
        /// Most rows (0: every call). Default 100, or every call with --csv and --jsonl.
        #[arg(long)]
        limit: Option<usize>,
        /// One JSON object per line.
        #[arg(long, conflicts_with_all = ["csv", "jsonl"])]
        json: bool,
        /// Every matching call as CSV with a header line (the columns of the console's
        /// export, `format=csv`), written as the pages are read.
        #[arg(long, conflicts_with = "jsonl")]
        csv: bool,
        /// Every matching call as JSON lines with the same columns.
        #[arg(long)]
        jsonl: bool,
    },
    /// One call and its RTP streams.
    Show {
        call_id: String,
        #[arg(long)]
        json: bool,
    },
    /// RTP streams seen without SIP (stored with no call), newest first, as the console's
    /// Streams page finds them; each line ends with the uid `pcap` takes.
    Streams {
        /// Streams that started at or after this time (YYYY-MM-DD[THH:MM[:SS]] UTC, or Unix
        /// seconds).
        #[arg(long)]
        since: Option<String>,
        /// Streams that started before this time.
        #[arg(long)]
        until: Option<String>,
        /// An IP address of either end (with --port: that endpoint).
        #[arg(long)]
        ip: Option<String>,
        /// A UDP port of either end.
        #[arg(long)]
        port: Option<String>,
        /// The SSRC: 0x and hex (0x1A2B3C4D), or decimal.
        #[arg(long)]
        ssrc: Option<String>,
        /// Most rows.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// The call's archived packets (SIP and RTP merged in time order) as one pcap on stdout:
    /// `tandem cdr pcap CALL-ID > call.pcap`. Needs a capture made with --archive. A stream
    /// seen without SIP is asked for by its uid, as the console's Streams page and
    /// `/api/streams` give it: `tandem cdr pcap 'local|rtp|SRC|DST|SSRC|START/0'`.
    Pcap { call_id: String },
}

/// Binary on a terminal garbles it and helps nobody: refuse before any work.
fn refuse_terminal() -> anyhow::Result<()> {
    if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        anyhow::bail!(
            "refusing to write a pcap to a terminal: redirect it (`tandem cdr pcap CALL-ID > call.pcap`) or pipe it (`| tshark -r -`)"
        );
    }
    Ok(())
}

fn time_arg(name: &str, v: Option<String>) -> anyhow::Result<Option<i64>> {
    v.map(|s| {
        parse_us(&s).with_context(|| {
            format!("--{name} {s:?}: expected YYYY-MM-DD[THH:MM[:SS]] or Unix seconds")
        })
    })
    .transpose()
}

/// Every row of a keyset search, newest first, at most `limit` (0: all): `page(want, after)`
/// reads a page of at most `want` rows after the cursor and gives its rows and the next one.
fn all_pages<T>(
    limit: usize,
    mut page: impl FnMut(usize, Option<Cursor>) -> anyhow::Result<(Vec<T>, Option<String>)>,
) -> anyhow::Result<Vec<T>> {
    let (mut out, mut after) = (Vec::new(), None);
    loop {
        let want = if limit == 0 {
            LIMIT_MAX
        } else {
            (limit - out.len()).min(LIMIT_MAX)
        };
        if want == 0 {
            return Ok(out);
        }
        let (rows, next) = page(want, after)?;
        out.extend(rows);
        match next {
            Some(next) => after = Some(Cursor::parse("after", &next)?),
            None => return Ok(out),
        }
    }
}

/// The calls `q` matches, newest first, at most `limit` (0: all), a page at a time through the
/// console's search (its indexes, its number syntax).
/// Every call of `q` (at most `limit`, 0: all) as CSV or JSON lines on `out`, a page at a
/// time ([`::cdr::export::each_call`]).
fn export_calls(
    store: &mut dyn ::cdr::CdrStore,
    q: &CallQuery,
    limit: usize,
    format: exports::Format,
    out: impl Write,
) -> anyhow::Result<()> {
    let out = std::io::BufWriter::with_capacity(64 << 10, out);
    let columns = ::cdr::export::CALL_EXPORT_COLUMNS;
    let mut w = exports::RowWriter::new(out, format, columns)?;
    let max = if limit == 0 { u64::MAX } else { limit as u64 };
    ::cdr::export::each_call(store, q, max, |c| -> anyhow::Result<()> {
        w.row(&::cdr::export::CallExportRow::from(c))?;
        Ok(())
    })?;
    w.get_mut()
        .flush()
        .context("writing the export to stdout")?;
    Ok(())
}

fn search_all(
    store: &mut dyn ::cdr::CdrStore,
    mut q: CallQuery,
    limit: usize,
) -> anyhow::Result<Vec<CallSummary>> {
    all_pages(limit, |want, after| {
        (q.limit, q.after) = (want, after);
        let page = store.search(&q)?;
        Ok((page.calls, page.next))
    })
}

/// The streams without a call `q` matches, newest first, at most `limit` (0: all), a page at
/// a time.
fn lone_all(
    store: &mut dyn ::cdr::CdrStore,
    mut q: ::cdr::lone::StreamQuery,
    limit: usize,
) -> anyhow::Result<Vec<::cdr::lone::LoneStream>> {
    all_pages(limit, |want, after| {
        (q.limit, q.after) = (want, after);
        let page = store.lone_streams(&q)?;
        Ok((page.streams, page.next))
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if let CdrCommand::Pcap { .. } = &args.command {
        refuse_terminal()?;
    }
    if args.db.cdr_postgres.is_none() && !args.db.cdr_db.exists() {
        anyhow::bail!(
            "no CDR database at {} (run `tandem capture --read FILE` first, or pass --cdr-db)",
            args.db.cdr_db.display()
        );
    }
    let mut store = sensor::records::open_store(&args.db.cdr_db, args.db.cdr_postgres.as_deref())?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match args.command {
        CdrCommand::List {
            since,
            until,
            number,
            response,
            mos_below,
            query,
            limit,
            json,
            csv,
            jsonl,
        } => {
            let number = number
                .map(|n| NumberFilter::parse("--number", &n))
                .transpose()?
                .flatten();
            let mut base = match &query {
                Some(raw) => {
                    CallQuery::from_query(raw).map_err(|e| anyhow::anyhow!("--query: {e}"))?
                }
                None => CallQuery::default(),
            };
            if since.is_some() {
                base.from_us = time_arg("since", since)?;
            }
            if until.is_some() {
                base.to_us = time_arg("until", until)?;
            }
            if let Some(code) = response {
                base.response = vec![ResponseMatch::Code(code)];
            }
            if mos_below.is_some() {
                base.mos_below = mos_below;
            }
            if csv || jsonl {
                let format = if csv {
                    exports::Format::Csv
                } else {
                    exports::Format::JsonLines
                };
                let q = match number {
                    None => base,
                    Some(f) if f.negate => CallQuery {
                        caller: Some(f.clone()),
                        called: Some(f),
                        ..base
                    },
                    Some(_) => anyhow::bail!(
                        "--number with --csv or --jsonl: name the side in --query (caller=... or called=...), so that the export is one search read in order"
                    ),
                };
                return export_calls(store.as_mut(), &q, limit.unwrap_or(0), format, out);
            }
            let limit = limit.unwrap_or(100);
            let calls: Vec<_> = match number {
                None => search_all(store.as_mut(), base, limit)?,
                // None of them on either side: both filters at once.
                Some(f) if f.negate => {
                    let q = CallQuery {
                        caller: Some(f.clone()),
                        called: Some(f),
                        ..base
                    };
                    search_all(store.as_mut(), q, limit)?
                }
                // Either side: the newest of the two searches, each call once.
                Some(f) => {
                    let callers = CallQuery {
                        caller: Some(f.clone()),
                        ..base.clone()
                    };
                    let mut both = search_all(store.as_mut(), callers, limit)?;
                    let called = CallQuery {
                        called: Some(f),
                        ..base
                    };
                    both.extend(search_all(store.as_mut(), called, limit)?);
                    both.sort_by_key(|c| std::cmp::Reverse((c.call.start_us, c.id)));
                    both.dedup_by_key(|c| c.id);
                    both.truncate(if limit == 0 { usize::MAX } else { limit });
                    both
                }
            };
            let calls = calls.into_iter().map(|c| c.call).collect::<Vec<_>>();
            let row = |start: &str,
                       caller: &str,
                       called: &str,
                       state: &str,
                       last: &str,
                       mos: &str,
                       id: &str| {
                format!(
                    "{start:<27}  {caller:>12}  {called:<12}  {state:<9}  {last:<28}  {mos:<4}  {id}"
                )
            };
            if !json && !calls.is_empty() {
                let header = row(
                    "start (UTC)",
                    "caller",
                    "called",
                    "state",
                    "last response",
                    "MOS",
                    "Call-ID",
                );
                writeln!(out, "{header}")?;
            }
            if calls.is_empty() && !json {
                eprintln!("no calls match");
            }
            for c in calls {
                if json {
                    serde_json::to_writer(&mut out, &c)?;
                    writeln!(out)?;
                } else {
                    let last = match c.last_response {
                        Some(code) => format!("{code} {}", c.last_reason),
                        None => "-".to_string(),
                    };
                    let mos = c.mos_min.map_or("-".to_string(), |m| format!("{m:.2}"));
                    let line = row(
                        &format_us(c.start_us),
                        &c.caller,
                        &c.called,
                        &c.state,
                        &last,
                        &mos,
                        &c.call_id,
                    );
                    writeln!(out, "{line}")?;
                }
            }
        }
        CdrCommand::Pcap { call_id } => {
            let (c, what) = match store.show(&call_id)? {
                Some((c, _)) => (c, format!("call {call_id:?}")),
                None => match store.lone_stream_by_uid(&call_id)? {
                    // A stream without a call: its own member, named by its uid.
                    Some(s) => (
                        s.stream.archive_as_call(&s.uid, &s.sensor),
                        format!("stream {call_id:?}"),
                    ),
                    None => anyhow::bail!(
                        "no call with Call-ID {call_id:?}, nor a stream without a call with that uid, in {}",
                        args.db.cdr_db.display()
                    ),
                },
            };
            let remote = !c.sensor.is_empty() && c.sensor != ::cdr::writer::DEFAULT_SENSOR;
            if remote && args.collector_socket.exists() {
                let pcap = collector::fetch_pcap_local(
                    &args.collector_socket,
                    &c.sensor,
                    &collector::PcapCall::from(&c),
                    std::time::Duration::from_secs(120),
                )
                .map_err(|e| anyhow::anyhow!("{what} from sensor {}: {e}", c.sensor))?;
                out.write_all(&pcap)?;
                return Ok(());
            }
            sensor::call_pcap::write_call_pcap(&c, &mut out).map_err(|e| match e {
                sensor::call_pcap::CallPcapError::Write(e) => {
                    anyhow::Error::new(e).context("writing the pcap to stdout")
                }
                other if remote => anyhow::Error::new(other).context(format!(
                    "{what} was archived by sensor {:?}, and no collector answers here ({} is missing): run this on the collector's machine, or on that sensor's",
                    c.sensor,
                    args.collector_socket.display()
                )),
                other => other.into(),
            })?;
        }
        CdrCommand::Streams {
            since,
            until,
            ip,
            port,
            ssrc,
            limit,
            json,
        } => {
            // The console's own parameters and parsing: the same errors, named as options.
            let mut raw = String::new();
            for (name, value) in [("ip", ip), ("port", port), ("ssrc", ssrc)] {
                if let Some(v) = value {
                    raw += &format!("&{name}={}", console::web::url_encode(&v));
                }
            }
            let mut q = ::cdr::lone::StreamQuery::from_query(raw.trim_start_matches('&'))
                .map_err(|e| anyhow::anyhow!("--{}: {}", e.param, e.problem))?;
            (q.from_us, q.to_us) = (time_arg("since", since)?, time_arg("until", until)?);
            let streams = lone_all(store.as_mut(), q, limit)?;
            if streams.is_empty() && !json {
                eprintln!("no streams without a call match");
            }
            for l in streams {
                if json {
                    serde_json::to_writer(&mut out, &l)?;
                    writeln!(out)?;
                    continue;
                }
                let s = &l.stream;
                writeln!(
                    out,
                    "{}  {} -> {}  0x{:08X}  {}  packets {}  lost {}  mos {}  {}",
                    format_us(s.start_us),
                    s.src,
                    s.dst,
                    s.ssrc,
                    s.payload,
                    s.packets,
                    s.lost,
                    s.mos.map_or("-".to_string(), |m| format!("{m:.2}")),
                    l.uid
                )?;
            }
        }
        CdrCommand::Show { call_id, json } => {
            let Some((c, streams)) = store.show(&call_id)? else {
                anyhow::bail!(
                    "no call with Call-ID {call_id:?} in {}",
                    args.db.cdr_db.display()
                );
            };
            let t38 = store.t38(&call_id)?;
            if json {
                serde_json::to_writer(
                    &mut out,
                    &serde_json::json!({ "call": c, "streams": streams, "t38": t38 }),
                )?;
                writeln!(out)?;
            } else {
                writeln!(out, "call_id      {}", c.call_id)?;
                writeln!(out, "caller       {} ({})", c.caller, c.caller_addr)?;
                writeln!(out, "called       {} ({})", c.called, c.callee_addr)?;
                writeln!(out, "start        {}", format_us(c.start_us))?;
                for (label, t) in [
                    ("ringing", c.ringing_us),
                    ("answer", c.answer_us),
                    ("end", c.end_us),
                ] {
                    if let Some(t) = t {
                        writeln!(out, "{label:<12} {}", format_us(t))?;
                    }
                }
                writeln!(out, "state        {}", c.state)?;
                writeln!(
                    out,
                    "last resp.   {} {}",
                    c.last_response.map(|r| r.to_string()).unwrap_or_default(),
                    c.last_reason
                )?;
                if let Some(h) = &c.hangup_by {
                    writeln!(out, "hangup by    {h}")?;
                }
                if let Some(q) = c.q850_cause {
                    writeln!(out, "Q.850 cause  {q}")?;
                }
                if !c.dtmf.is_empty() {
                    writeln!(out, "digits       {}", c.dtmf)?;
                }
                if let Some(r) = &c.fax_result {
                    let pages = c.fax_pages.map(|p| p.to_string()).unwrap_or("?".into());
                    writeln!(out, "fax          {r}, {pages} page(s)")?;
                } else if c.t38_offered {
                    writeln!(out, "fax          T.38 offered")?;
                }
                if c.encrypted {
                    writeln!(out, "media        SRTP")?;
                }
                for s in streams {
                    writeln!(
                        out,
                        "rtp  {} -> {}  0x{:08X}  {}  packets {}  lost {}  delta {:.3}/{:.3}/{:.3} ms  jitter {:.3}/{:.3} ms  mos {}",
                        s.src,
                        s.dst,
                        s.ssrc,
                        s.payload,
                        s.packets,
                        s.lost,
                        s.min_delta_ms,
                        s.mean_delta_ms,
                        s.max_delta_ms,
                        s.mean_jitter_ms,
                        s.max_jitter_ms,
                        s.mos
                            .map(|m| format!("{m:.2}"))
                            .unwrap_or_else(|| "-".into())
                    )?;
                }
                for t in t38 {
                    writeln!(
                        out,
                        "t38  {} -> {}  packets {}  lost {}  duplicates {}  redundant {}  fec {}  {} ms  {}  t30 {}",
                        t.src,
                        t.dst,
                        t.packets,
                        t.lost,
                        t.duplicates,
                        t.redundant,
                        t.fec,
                        (t.end_us - t.start_us) / 1000,
                        t.types,
                        t.t30
                    )?;
                }
            }
        }
    }
    Ok(())
}

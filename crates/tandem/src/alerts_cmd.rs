//! `tandem alerts`: try rules on stored CDRs before they wake anyone (`test`), and read the
//! alerts kept in the CDR database (`list`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub db: crate::cdr::CdrDatabase,
    #[command(subcommand)]
    pub command: AlertsCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum AlertsCommand {
    /// Replays the stored calls and registrations of a time range through rules and says
    /// when each would have fired and resolved; nothing is stored or sent.
    Test(TestArgs),
    /// The alerts kept in the CDR database, newest first.
    List(ListArgs),
}

#[derive(clap::Args, Debug)]
pub struct TestArgs {
    /// The file with the rules: `[[alerts.rule]]` tables (tandem.toml, or a rules file).
    #[arg(long, value_name = "FILE", default_value = "tandem.toml")]
    pub rules: PathBuf,
    /// Only this rule (repeat for several); default every rule of the file.
    #[arg(long = "rule", value_name = "NAME")]
    pub rule: Vec<String>,
    /// The start of the range: RFC 3339 (`2026-11-20T00:00:00Z`) or seconds since the epoch.
    #[arg(long)]
    pub from: String,
    /// The end of the range (default: now).
    #[arg(long)]
    pub to: Option<String>,
    /// One JSON line per alert (`"kind":"alert"`), as `tandem capture --json` prints them.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// `firing` or `resolved`; default both.
    #[arg(long)]
    pub state: Option<String>,
    /// At most this many (default 50, at most 500).
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.db.cdr_postgres.is_none() && !args.db.cdr_db.exists() {
        anyhow::bail!(
            "no CDR database at {}: give --cdr-db (or --cdr-postgres) where `tandem capture` or \
             `tandem serve` stores calls",
            args.db.cdr_db.display()
        );
    }
    let mut store = sensor::records::open_store(&args.db.cdr_db, args.db.cdr_postgres.as_deref())?;
    match args.command {
        AlertsCommand::Test(t) => test(&mut *store, t),
        AlertsCommand::List(l) => list(&mut *store, l),
    }
}

/// A record's event waiting for its time: a call's end or a registration.
struct Pending(i64, u64, cdr::CdrRecord);

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.0, self.1) == (o.0, o.1)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.0, self.1).cmp(&(o.0, o.1))
    }
}

fn test(store: &mut dyn cdr::CdrStore, t: TestArgs) -> anyhow::Result<()> {
    // The rules' `group=NAME` scopes name the `[[groups]]` of the same file (tandem.toml).
    let text = std::fs::read_to_string(&t.rules)
        .with_context(|| format!("reading {}", t.rules.display()))?;
    if let Ok(table) = toml::from_str::<toml::Table>(&text)
        && let Some(list) = table.get("groups")
    {
        let configs: Vec<groups::GroupConfig> = list
            .clone()
            .try_into()
            .with_context(|| format!("{}: [[groups]]", t.rules.display()))?;
        let groups =
            groups::Groups::new(&configs).with_context(|| format!("{}", t.rules.display()))?;
        ::cdr::search::set_search_groups(std::sync::Arc::new(groups));
    }
    let (mut cfg, _) = crate::alerts::load_rules(&t.rules)?;
    if !t.rule.is_empty() {
        let names: Vec<String> = cfg.rule.iter().map(|r| r.name.clone()).collect();
        for want in &t.rule {
            if !names.contains(want) {
                anyhow::bail!(
                    "no rule {want:?} in {}; its rules: {}",
                    t.rules.display(),
                    names.join(", ")
                );
            }
        }
        cfg.rule.retain(|r| t.rule.contains(&r.name));
    }
    let set = crate::alerts::rule_set(&cfg)?;
    let rules = set.rules.len();
    let mut engine = alerts::Engine::new(set, crate::alerts::lookup(&cfg)?);
    let from_us = cdr::query::parse_time("from", &t.from)
        .map_err(|e| anyhow::anyhow!("--from: {}", e.problem))?;
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    let to_us = match &t.to {
        Some(v) => {
            cdr::query::parse_time("to", v).map_err(|e| anyhow::anyhow!("--to: {}", e.problem))?
        }
        None => now_us,
    };
    anyhow::ensure!(from_us < to_us, "--from must come before --to");
    let source = store
        .replay_source()
        .context("this CDR database cannot replay its records")?;
    let mut out = Vec::new();
    let mut pending: BinaryHeap<Reverse<Pending>> = BinaryHeap::new();
    let (mut calls, mut registrations, mut seq) = (0u64, 0u64, 0u64);
    let mut stdout = std::io::stdout().lock();
    let mut print = |alerts: &mut Vec<alerts::Alert>| -> std::io::Result<()> {
        for a in alerts.drain(..) {
            if t.json {
                writeln!(stdout, "{}", a.json_line())?;
            } else {
                writeln!(
                    stdout,
                    "{}  {:<8} {:<8} {}  ({} call(s): {})",
                    utc::format_us(a.at_us),
                    a.state.as_str(),
                    a.severity.as_str(),
                    a.summary,
                    a.calls.len(),
                    a.calls
                        .iter()
                        .take(3)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                )?;
            }
        }
        Ok(())
    };
    for r in cdr::replay::records_between(source, from_us, to_us) {
        let r = r?;
        let start = r
            .call
            .as_ref()
            .map(|c| c.start_us)
            .or(r.registration.as_ref().map(|g| g.first_us))
            .unwrap_or(from_us);
        // Everything that ended before this record began comes first.
        while let Some(Reverse(p)) = pending.peek()
            && p.0 <= start
        {
            let Reverse(Pending(_, _, rec)) = pending.pop().expect("peeked");
            observe_end(&mut engine, &rec, &mut out);
        }
        if let Some(c) = &r.call {
            calls += 1;
            let start = alerts::CallStart::of(&r.uid, c);
            engine.observe(alerts::Event::CallStart(&start), &mut out);
            seq += 1;
            pending.push(Reverse(Pending(c.end_us.unwrap_or(c.start_us), seq, r)));
        } else if let Some(g) = &r.registration {
            registrations += 1;
            seq += 1;
            pending.push(Reverse(Pending(g.last_us, seq, r)));
        }
        print(&mut out)?;
    }
    while let Some(Reverse(Pending(_, _, rec))) = pending.pop() {
        observe_end(&mut engine, &rec, &mut out);
    }
    engine.advance(to_us.min(now_us), &mut out);
    print(&mut out)?;
    let st = engine.stats();
    let summary = format!(
        "{rules} rule(s) over {calls} call(s) and {registrations} registration(s) from {} to {}: {} alert(s) fired, {} resolved",
        utc::format_us(from_us),
        utc::format_us(to_us),
        st.fired,
        st.resolved
    );
    if t.json {
        eprintln!("{summary}");
    } else {
        writeln!(std::io::stdout(), "{summary}")?;
    }
    Ok(())
}

fn observe_end(engine: &mut alerts::Engine, r: &cdr::CdrRecord, out: &mut Vec<alerts::Alert>) {
    if r.call.is_some() {
        engine.observe(alerts::Event::CallEnd(r), out);
    } else if r.registration.is_some() {
        engine.observe(alerts::Event::Registration(r), out);
    }
}

fn list(store: &mut dyn cdr::CdrStore, l: ListArgs) -> anyhow::Result<()> {
    let st = store
        .alert_store()
        .context("this CDR database keeps no alerts")?;
    if let Some(s) = &l.state {
        anyhow::ensure!(
            s == "firing" || s == "resolved",
            "--state is firing or resolved, not {s:?}"
        );
    }
    let rows = st.list_alerts(&cdr::alerts::AlertQuery {
        state: l.state.clone(),
        limit: l.limit,
        ..Default::default()
    })?;
    let mut out = std::io::stdout().lock();
    for r in rows {
        if l.json {
            let figures: serde_json::Value =
                serde_json::from_str(&r.figures_json).unwrap_or_default();
            writeln!(
                out,
                "{}",
                serde_json::json!({
                    "id": r.id, "rule": r.rule, "rule_kind": r.rule_kind, "severity": r.severity,
                    "group_by": r.group_by, "key": r.key, "state": r.state,
                    "since": utc::format_us(r.since_us), "at": utc::format_us(r.at_us),
                    "figures": figures, "calls": r.calls, "summary": r.summary, "node": r.node,
                    "acked_by": r.acked_by,
                })
            )?;
        } else {
            writeln!(
                out,
                "#{:<6} {:<8} {:<8} since {}  {}{}",
                r.id,
                r.state,
                r.severity,
                utc::format_us(r.since_us),
                r.summary,
                r.acked_by
                    .map(|u| format!("  (acknowledged by {u})"))
                    .unwrap_or_default()
            )?;
        }
    }
    Ok(())
}

//! `tandem bench legs`: how well the leg linker puts the dialogs of one call together, on a
//! capture of real B2BUA traffic made in the same run. SIPp phones call through the emulated
//! Asterisk PBX (`asterisk_emu::pbx`) to a SIPp trunk, many at once, while other phones call
//! the trunk directly with the same callers and numbers; dumpcap records loopback; the
//! running executable's `tandem capture --read --json` links the dialogs; the PBX's own record
//! of what it bridged is the truth.
//!
//! Per rule (`linked_by`): legs linked, right and wrong; and the bridged pairs missed. A leg
//! is linked right when the group it joined holds its partner and nothing else; a direct call
//! linked to anything is wrong; a pair whose legs are in different groups is missed.
//! Needs sipp, dumpcap and the right to capture on `lo` (root or `CAP_NET_RAW`).

use crate::report::{BenchReport, Table, emit};
use anyhow::{Context, bail};
use asterisk_emu::pbx::campaign::Campaign;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Calls through the PBX.
    #[arg(long, default_value_t = 1000)]
    pub calls: usize,
    /// Calls straight to the trunk, with the same callers and numbers, at the same time.
    #[arg(long, default_value_t = 200)]
    pub direct_calls: usize,
    /// Every n-th call through the PBX dials the number of the call before it (0: none).
    #[arg(long, default_value_t = 0)]
    pub same_number_every: usize,
    /// Calls placed per second by each SIPp phone.
    #[arg(long, default_value_t = 200)]
    pub calls_per_s: u32,
    /// How long each answered call is held: with 200 calls/s, 8 s holds 1,000 at once.
    #[arg(long, default_value_t = 8000)]
    pub hold_ms: u64,
    /// The PBX adds this header (the phone leg's Call-ID) to its trunk INVITEs; without it
    /// only the B2BUA rule can link.
    #[arg(long)]
    pub header: Option<String>,
    /// Configure the PBX's address for the linker (otherwise it must learn it).
    #[arg(long)]
    pub configure_pbx: bool,
    /// Keep the capture and SIPp's logs here (default: a temporary directory).
    #[arg(long)]
    pub keep: Option<std::path::PathBuf>,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One rule's results.
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct RuleFigures {
    pub linked: u64,
    pub right: u64,
    pub wrong: u64,
    /// Lowest and median confidence of the rule's links.
    pub confidence_min: Option<f64>,
    pub confidence_median: Option<f64>,
}

/// What the linker made of a capture, against the PBX's truth.
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct Score {
    /// Dialogs in the capture's output.
    pub dialogs: u64,
    /// Pairs the PBX bridged (phone leg and trunk leg).
    pub pairs: u64,
    /// Pairs whose two legs share a group and no other dialog.
    pub pairs_right: u64,
    /// Pairs whose legs are in different groups.
    pub pairs_missed: u64,
    /// Calls not through the PBX that were linked to anything.
    pub direct_linked: u64,
    pub by_rule: BTreeMap<String, RuleFigures>,
}

#[derive(Serialize)]
struct Report {
    calls: usize,
    direct_calls: usize,
    calls_per_s: u32,
    hold_ms: u64,
    header: Option<String>,
    pbx_configured: bool,
    peak_concurrent: u64,
    sipp_failed: Vec<String>,
    score: Score,
    missed_rate_pct: f64,
    wrong_rate_pct: f64,
}

impl BenchReport for Report {
    fn print_table(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        writeln!(
            out,
            "{} calls through one PBX ({} at once at the peak) and {} direct calls to the same numbers; header {}; PBX {}",
            self.calls,
            self.peak_concurrent,
            self.direct_calls,
            self.header.as_deref().unwrap_or("none"),
            if self.pbx_configured {
                "configured"
            } else {
                "learned"
            }
        )?;
        let mut t = Table::new([
            "rule",
            "linked",
            "right",
            "wrong",
            "min conf.",
            "median conf.",
        ]);
        let conf = |c: Option<f64>| c.map_or("-".to_string(), |c| format!("{c:.2}"));
        for (rule, f) in &self.score.by_rule {
            t.row([
                rule.clone(),
                f.linked.to_string(),
                f.right.to_string(),
                f.wrong.to_string(),
                conf(f.confidence_min),
                conf(f.confidence_median),
            ]);
        }
        t.write(out)?;
        writeln!(
            out,
            "pairs {}: right {}, missed {} ({:.2} %); wrong links {:.2} % of links; direct calls linked {}",
            self.score.pairs,
            self.score.pairs_right,
            self.score.pairs_missed,
            self.missed_rate_pct,
            self.wrong_rate_pct,
            self.score.direct_linked
        )?;
        if !self.sipp_failed.is_empty() {
            writeln!(
                out,
                "SIPp reported failed calls: {}",
                self.sipp_failed.join(", ")
            )?;
        }
        Ok(())
    }
}

/// Scores `tandem capture --json` lines against the bridged pairs.
pub fn score(lines: &str, bridged: &[asterisk_emu::pbx::Bridged]) -> anyhow::Result<Score> {
    struct Leg {
        group: String,
        rule: Option<String>,
        confidence: Option<f64>,
    }
    let mut legs: HashMap<String, Leg> = HashMap::new();
    for line in lines.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("capture --json line {line:.80}"))?;
        if v.get("kind")
            .and_then(|k| k.as_str())
            .is_some_and(|k| k != "call")
        {
            continue;
        }
        let Some(call_id) = v.get("call_id").and_then(|c| c.as_str()) else {
            continue;
        };
        let group = v
            .get("call_group")
            .and_then(|g| g.as_str())
            .context("a call record without call_group: this tandem does not link legs")?;
        legs.insert(
            call_id.to_string(),
            Leg {
                group: group.to_string(),
                rule: v
                    .get("linked_by")
                    .and_then(|r| r.as_str())
                    .map(str::to_string),
                confidence: v.get("link_confidence").and_then(|c| c.as_f64()),
            },
        );
    }
    let mut members: HashMap<&str, Vec<&str>> = HashMap::new();
    for (id, leg) in &legs {
        members
            .entry(leg.group.as_str())
            .or_default()
            .push(id.as_str());
    }
    let mut partner: HashMap<&str, &str> = HashMap::new();
    let mut score = Score {
        dialogs: legs.len() as u64,
        ..Score::default()
    };
    for b in bridged {
        let Some(out) = b.outbound_call_id.as_deref() else {
            continue;
        };
        partner.insert(b.inbound_call_id.as_str(), out);
        partner.insert(out, b.inbound_call_id.as_str());
        score.pairs += 1;
        match (legs.get(b.inbound_call_id.as_str()), legs.get(out)) {
            (Some(a), Some(o)) if a.group == o.group && members[a.group.as_str()].len() == 2 => {
                score.pairs_right += 1
            }
            _ => score.pairs_missed += 1,
        }
    }
    let mut confidences: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (id, leg) in &legs {
        let group = &members[leg.group.as_str()];
        let alone_right = |p: &str| group.len() == 2 && group.contains(&p);
        if group.len() > 1 && !partner.contains_key(id.as_str()) {
            score.direct_linked += 1;
        }
        let Some(rule) = &leg.rule else { continue };
        let f = score.by_rule.entry(rule.clone()).or_default();
        f.linked += 1;
        if partner.get(id.as_str()).is_some_and(|p| alone_right(p)) {
            f.right += 1;
        } else {
            f.wrong += 1;
        }
        if let Some(c) = leg.confidence {
            confidences.entry(rule.clone()).or_default().push(c);
        }
    }
    for (rule, mut cs) in confidences {
        cs.sort_by(f64::total_cmp);
        if let Some(f) = score.by_rule.get_mut(&rule) {
            f.confidence_min = cs.first().copied();
            f.confidence_median = cs.get(cs.len() / 2).copied();
        }
    }
    Ok(score)
}

/// The `--legs-*` options the capture runs with: the route's prefixes undone (an outside-line
/// 9, the national 0 and the international 0049 both made +49), the PBX configured or learned,
/// the header when the PBX adds one.
pub fn legs_options(pbx: Option<std::net::SocketAddr>, header: Option<&str>) -> Vec<String> {
    let mut o: Vec<String> = ["9=", "0=+49", "0049=+49"]
        .iter()
        .flat_map(|r| ["--legs-prefix-rule".to_string(), r.to_string()])
        .collect();
    if let Some(pbx) = pbx {
        o.extend([
            "--legs-pbx".to_string(),
            pbx.to_string(),
            "--no-legs-learn".to_string(),
        ]);
    }
    if let Some(h) = header {
        o.extend(["--legs-header".to_string(), h.to_string()]);
    }
    o
}

/// Runs `tandem` (`exe`) `capture --read PCAP --json --no-store` with `options`.
pub fn capture_json(exe: &Path, pcap: &Path, options: &[String]) -> anyhow::Result<String> {
    let out = Command::new(exe)
        .args(["capture", "--no-store", "--json"])
        .args(options)
        .arg("--read")
        .arg(pcap)
        .output()
        .context("running tandem capture")?;
    if !out.status.success() {
        bail!(
            "tandem capture --read {} failed: {}",
            pcap.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// Most calls up at once, from the PBX's point of view: each answered call is held `hold_ms`
/// from its placing, so the peak is what SIPp places in one hold.
fn peak(args: &Args) -> u64 {
    (u64::from(args.calls_per_s) * args.hold_ms / 1000).min(args.calls as u64)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let temp = tempfile::tempdir()?;
    let dir = match &args.keep {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => temp.path().to_path_buf(),
    };
    let campaign = Campaign {
        net: "127.0.36".into(),
        calls: args.calls,
        direct_calls: args.direct_calls,
        same_number_every: args.same_number_every,
        calls_per_s: args.calls_per_s,
        hold_ms: args.hold_ms,
        correlation_header: args.header.clone(),
    };
    let rec = campaign
        .run(&dir)
        .context("placing the calls (needs sipp, dumpcap and capture rights on lo)")?;
    let exe = std::env::current_exe().context("the running tandem's path")?;
    let options = legs_options(
        args.configure_pbx.then_some(rec.pbx),
        args.header.as_deref(),
    );
    let lines = capture_json(&exe, &rec.pcap, &options)?;
    let score = score(&lines, &rec.bridged)?;
    let links: u64 = score.by_rule.values().map(|f| f.linked).sum();
    let wrong: u64 = score.by_rule.values().map(|f| f.wrong).sum();
    let report = Report {
        calls: args.calls,
        direct_calls: args.direct_calls,
        calls_per_s: args.calls_per_s,
        hold_ms: args.hold_ms,
        header: args.header.clone(),
        pbx_configured: args.configure_pbx,
        peak_concurrent: peak(&args),
        sipp_failed: rec
            .sipp_status
            .iter()
            .filter(|(_, s)| *s != Some(0))
            .map(|(n, s)| format!("{n} ({s:?})"))
            .collect(),
        missed_rate_pct: 100.0 * score.pairs_missed as f64 / (score.pairs.max(1)) as f64,
        wrong_rate_pct: 100.0 * wrong as f64 / (links.max(1)) as f64,
        score,
    };
    emit(&report, args.json)
}

#[cfg(test)]
mod tests {
    use super::score;
    use asterisk_emu::pbx::Bridged;

    fn pair(a: &str, b: &str) -> Bridged {
        Bridged {
            inbound_call_id: a.into(),
            outbound_call_id: Some(b.into()),
            caller: "201".into(),
            dialled: "9017".into(),
            sent_to_trunk: Some("0049".into()),
            phone_status: 0,
        }
    }

    #[test]
    fn right_wrong_and_missed_links_are_told_apart() {
        let lines = [
            r#"{"call_id":"a1","call_group":"u1","linked_by":null}"#,
            r#"{"call_id":"b1","call_group":"u1","linked_by":"b2bua","link_confidence":0.95}"#,
            r#"{"call_id":"a2","call_group":"u3","linked_by":null}"#,
            r#"{"call_id":"b2","call_group":"u4","linked_by":null}"#,
            r#"{"call_id":"d1","call_group":"u3","linked_by":"b2bua","link_confidence":0.6}"#,
        ]
        .join("\n");
        let s = score(&lines, &[pair("a1", "b1"), pair("a2", "b2")]).unwrap();
        assert_eq!(
            (s.pairs, s.pairs_right, s.pairs_missed, s.direct_linked),
            (2, 1, 1, 1)
        );
        let b2bua = &s.by_rule["b2bua"];
        assert_eq!((b2bua.linked, b2bua.right, b2bua.wrong), (2, 1, 1));
        assert_eq!(b2bua.confidence_min, Some(0.6));
        assert!(score(r#"{"call_id":"x"}"#, &[]).is_err());
    }
}

//! `[alerts]` for the commands that run rules: reading a rules file (`--rules`, tandem.toml)
//! into a validated rule set, and the engine's lookups.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

/// Reads and validates the `[alerts]` of `path`; every problem is listed, each naming its
/// rule and key.
pub fn load_rules(path: &Path) -> anyhow::Result<(alerts::AlertsConfig, alerts::RuleSet)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the alert rules in {}", path.display()))?;
    let cfg = alerts::RulesFile::parse(path, &text)?;
    let set = rule_set(&cfg).with_context(|| format!("the alert rules in {}", path.display()))?;
    Ok((cfg, set))
}

/// Validates `cfg`, all its problems in one error.
pub fn rule_set(cfg: &alerts::AlertsConfig) -> anyhow::Result<alerts::RuleSet> {
    alerts::RuleSet::new(cfg).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
        anyhow::anyhow!("{} problem(s):\n{}", errors.len(), lines.join("\n"))
    })
}

/// The lookups rules use: numbers as dialled, and countries.
pub fn lookup(_cfg: &alerts::AlertsConfig) -> anyhow::Result<Arc<dyn alerts::Lookup>> {
    Ok(Arc::new(alerts::lookup::Basic))
}

/// An engine for `cfg`'s rules.
pub fn engine(
    cfg: &alerts::AlertsConfig,
    set: alerts::RuleSet,
) -> anyhow::Result<Arc<std::sync::Mutex<alerts::Engine>>> {
    Ok(Arc::new(std::sync::Mutex::new(alerts::Engine::new(
        set,
        lookup(cfg)?,
    ))))
}

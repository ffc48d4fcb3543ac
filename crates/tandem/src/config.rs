//! `tandem.toml`: every service's settings in one file. A missing file means the embedded
//! defaults (loopback listeners, data under `./tandem-data`); `tandem.example.toml` documents
//! every option with its default.

use anyhow::Context;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::Path;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub fastagi: fastagi::ServerConfig,
    pub scripts: fastagi::script::ScriptConfig,
    pub metrics: MetricsConfig,
    pub kv: KvConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvConfig {
    /// Directory of the key-value store (its file is kv.sqlite3 in it).
    pub data_dir: std::path::PathBuf,
    /// astdb families that legacy scripts' DATABASE commands reach in Tandem's store instead of
    /// Asterisk's astdb (only families no dialplan or module of Asterisk uses).
    pub script_families: Vec<String>,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig {
            data_dir: "tandem-data".into(),
            script_families: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Prometheus `/metrics` and `/health` over HTTP.
    pub listen: SocketAddr,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9573)),
        }
    }
}

impl Config {
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
        let config: Config = toml::from_str(&text)
            .with_context(|| format!("configuration file {} is not valid", path.display()))?;
        config
            .fastagi
            .validate()
            .map_err(|e| anyhow::anyhow!("configuration file {}: {e}", path.display()))?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_file_parses_and_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tandem.example.toml");
        let example = Config::load(&path).unwrap();
        let defaults = Config::default();
        assert_eq!(example.fastagi, defaults.fastagi);
        assert_eq!(example.scripts, defaults.scripts);
        assert_eq!(example.metrics.listen, defaults.metrics.listen);
        assert_eq!(example.kv.data_dir, defaults.kv.data_dir);
        assert_eq!(example.kv.script_families, defaults.kv.script_families);
    }

    #[test]
    fn unknown_options_are_errors_that_name_them() {
        let err = toml::from_str::<Config>("[fastagi]\nmax_session = 3\n").unwrap_err();
        assert!(err.to_string().contains("max_session"), "{err}");
    }
}

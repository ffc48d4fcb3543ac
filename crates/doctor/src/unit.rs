//! What an installed systemd unit for Tandem grants: its user, ambient capabilities, capability
//! bounding set and address families. Asked of `systemctl show` when systemd runs (it has
//! merged the unit and its drop-ins), read from the unit file and its drop-ins otherwise (a
//! chroot, a container, a system just installed), following systemd.exec(5): an empty
//! assignment resets, a list adds to an allow list, a `~` list takes away.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A set of capabilities or address families: everything, only some, or all but some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameSet {
    All,
    Only(BTreeSet<String>),
    AllBut(BTreeSet<String>),
}

impl NameSet {
    pub fn contains(&self, name: &str) -> bool {
        match self {
            NameSet::All => true,
            NameSet::Only(s) => s.contains(name),
            NameSet::AllBut(s) => !s.contains(name),
        }
    }

    /// One assignment applied over what earlier ones gave; `assigned` says whether any came
    /// before (the first allow list replaces the default, later ones add to it).
    fn apply(&mut self, value: &str, assigned: bool) {
        let value = value.trim();
        if value.is_empty() {
            *self = NameSet::Only(BTreeSet::new());
            return;
        }
        let (invert, list) = match value.strip_prefix('~') {
            Some(rest) => (true, rest),
            None => (false, value),
        };
        let names: BTreeSet<String> = list.split_whitespace().map(normalize).collect();
        *self = match (std::mem::replace(self, NameSet::All), invert) {
            (_, true) if names.is_empty() => NameSet::All,
            (NameSet::All, true) => NameSet::AllBut(names),
            (NameSet::Only(s), true) => NameSet::Only(&s - &names),
            (NameSet::AllBut(s), true) => NameSet::AllBut(&s | &names),
            (_, false) if !assigned => NameSet::Only(names),
            (NameSet::All, false) => NameSet::All,
            (NameSet::Only(s), false) => NameSet::Only(&s | &names),
            (NameSet::AllBut(s), false) => NameSet::AllBut(&s - &names),
        };
    }
}

/// `cap_net_raw` and `CAP_NET_RAW` alike; address families as they are (`AF_PACKET`).
fn normalize(name: &str) -> String {
    name.to_ascii_uppercase()
}

/// An installed unit's grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitGrants {
    /// Where this was read: `systemctl show tandem.service`, or the files.
    pub source: String,
    /// `User=`; None: root.
    pub user: Option<String>,
    pub ambient: NameSet,
    pub bounding: NameSet,
    pub address_families: NameSet,
    /// `StateDirectory=`, as absolute paths (`/var/lib/NAME`): systemd makes them, owned by
    /// the service's user, when the service starts.
    pub state_directories: Vec<PathBuf>,
    /// `Environment=` assignments, a later one of a name replacing the earlier.
    pub environment: Vec<(String, String)>,
    /// The command line of `ExecStart=` (the last one).
    pub exec_start: Vec<String>,
}

impl UnitGrants {
    fn new(source: String) -> UnitGrants {
        UnitGrants {
            source,
            user: None,
            ambient: NameSet::Only(BTreeSet::new()),
            bounding: NameSet::All,
            address_families: NameSet::All,
            state_directories: Vec::new(),
            environment: Vec::new(),
            exec_start: Vec::new(),
        }
    }

    /// What the service's command line gives one of `options` (`--config FILE`,
    /// `--config=FILE`), else its environment's `env`: how `serve` would read the setting.
    pub fn setting(&self, options: &[&str], env: &str) -> Option<String> {
        let args = &self.exec_start;
        for (i, arg) in args.iter().enumerate() {
            for option in options {
                if arg == option {
                    return args.get(i + 1).cloned();
                }
                if let Some(value) = arg.strip_prefix(option).and_then(|v| v.strip_prefix('=')) {
                    return Some(value.to_string());
                }
            }
        }
        self.environment
            .iter()
            .rev()
            .find(|(name, _)| name == env)
            .map(|(_, value)| value.clone())
    }

    /// `Environment=`'s value (`A=1 "B=two words"`) added (an empty one clears them).
    fn add_environment(&mut self, value: &str) {
        if value.trim().is_empty() {
            self.environment.clear();
        }
        for word in words(value) {
            if let Some((name, v)) = word.split_once('=') {
                self.environment.retain(|(n, _)| n != name);
                self.environment.push((name.to_string(), v.to_string()));
            }
        }
    }

    /// `StateDirectory=`'s value added to the list (an empty one clears it).
    fn state_directory(&mut self, value: &str) {
        if value.trim().is_empty() {
            self.state_directories.clear();
        }
        for name in value.split_whitespace() {
            // `NAME:SYMLINK` pairs keep the first part; systemd refuses a name that is
            // absolute or climbs out, and so does this.
            let name = Path::new(name.split(':').next().unwrap_or(name));
            if name
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)))
            {
                self.state_directories
                    .push(Path::new("/var/lib").join(name));
            }
        }
    }

    /// Whether the service's process holds capability `cap` (`CAP_NET_RAW`): as root within
    /// the bounding set, otherwise when it is also ambient.
    pub fn has_capability(&self, cap: &str) -> bool {
        let root = self.user.as_deref().is_none_or(|u| u == "root" || u == "0");
        self.bounding.contains(cap) && (root || self.ambient.contains(cap))
    }
}

/// Words as systemd splits a line: on white space, double or single quotes keeping theirs.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut started = false;
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                started = true;
            }
            (None, c) if c.is_whitespace() => {
                if started {
                    out.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            (None, c) => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(word);
    }
    out
}

/// `ExecStart=`'s command line: its words after the prefixes (`-`, `@`, `+`, `!`, `:`).
fn exec_words(value: &str) -> Vec<String> {
    let mut w = words(value);
    if let Some(first) = w.first_mut() {
        *first = first
            .trim_start_matches(['-', '@', '+', '!', ':'])
            .to_string();
    }
    w
}

/// Directories of unit files, highest precedence first (systemd.unit(5)).
pub const UNIT_DIRS: [&str; 5] = [
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

/// Bytes read of one unit file or drop-in, and of `systemctl show`'s answer, at most: units
/// are a few KiB, and a file beyond this is read up to it.
pub const UNIT_TEXT_BYTES_MAX: u64 = 1 << 20;

/// The first [`UNIT_TEXT_BYTES_MAX`] bytes of a file, as text.
fn read_bounded(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut raw = Vec::new();
    let file = std::fs::File::open(path).ok()?;
    file.take(UNIT_TEXT_BYTES_MAX).read_to_end(&mut raw).ok()?;
    Some(String::from_utf8_lossy(&raw).into_owned())
}

/// Whether systemd is the running init (sd_booted(3)).
pub fn systemd_running() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// The grants of `unit` (`tandem.service`): from systemd when it runs, else from the files
/// under `dirs`. None when no such unit is installed (or it is masked).
pub fn read(unit: &str, dirs: &[&Path], timeout: Duration) -> Option<UnitGrants> {
    if systemd_running()
        && let Some(grants) = from_systemctl(unit, timeout)
    {
        return Some(grants);
    }
    from_files(unit, dirs)
}

/// `systemctl show UNIT -p ...`; None when systemctl cannot tell or the unit is not loaded.
pub fn from_systemctl(unit: &str, timeout: Duration) -> Option<UnitGrants> {
    let out = run_with_timeout(
        Command::new("systemctl").args([
            "show",
            unit,
            "--property=LoadState,User,AmbientCapabilities,CapabilityBoundingSet,RestrictAddressFamilies,StateDirectory,Environment,ExecStart",
        ]),
        timeout,
    )?;
    parse_show(unit, &out)
}

/// The text of `systemctl show`'s `KEY=VALUE` lines.
pub fn parse_show(unit: &str, text: &str) -> Option<UnitGrants> {
    let mut g = UnitGrants::new(format!("systemctl show {unit}"));
    let mut loaded = false;
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        match key {
            "LoadState" => loaded = value == "loaded",
            "User" if !value.is_empty() => g.user = Some(value.to_string()),
            "StateDirectory" => g.state_directory(value),
            "Environment" => g.add_environment(value),
            // `{ path=/usr/bin/tandem ; argv[]=/usr/bin/tandem serve ; ... }`
            "ExecStart" => {
                let argv = value
                    .split(" ; ")
                    .find_map(|f| f.trim_start_matches("{ ").strip_prefix("argv[]="));
                g.exec_start = argv.map(words).unwrap_or_default();
            }
            "AmbientCapabilities" => g.ambient.apply(value, true),
            // systemctl lists every capability of the set, or none.
            "CapabilityBoundingSet" => g.bounding.apply(value, false),
            "RestrictAddressFamilies" if value.is_empty() => g.address_families = NameSet::All,
            "RestrictAddressFamilies" => g.address_families.apply(value, false),
            _ => {}
        }
    }
    loaded.then_some(g)
}

/// The unit file (the first of `dirs` that has it) and its drop-ins (`UNIT.d/*.conf` of every
/// directory, a name in a higher directory hiding the same name below, applied by name).
pub fn from_files(unit: &str, dirs: &[&Path]) -> Option<UnitGrants> {
    let file = dirs.iter().map(|d| d.join(unit)).find(|p| p.exists())?;
    // A unit linked to /dev/null is masked: not installed, as far as running goes.
    if std::fs::canonicalize(&file).is_ok_and(|p| p == Path::new("/dev/null")) {
        return None;
    }
    let mut drop_ins: Vec<(String, PathBuf)> = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir.join(format!("{unit}.d"))) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".conf") && !drop_ins.iter().any(|(n, _)| *n == name) {
                drop_ins.push((name, e.path()));
            }
        }
    }
    drop_ins.sort();
    let mut sources = vec![file.display().to_string()];
    let mut texts = vec![read_bounded(&file)?];
    for (_, path) in &drop_ins {
        sources.push(path.display().to_string());
        texts.push(read_bounded(path).unwrap_or_default());
    }
    Some(parse_unit(sources.join(" + "), &texts))
}

/// A unit file's text and its drop-ins', in the order systemd applies them.
pub fn parse_unit(source: String, texts: &[String]) -> UnitGrants {
    let mut g = UnitGrants::new(source);
    let mut assigned = [false; 3];
    for text in texts {
        apply_service_section(&mut g, text, &mut assigned);
    }
    g
}

/// The `[Service]` lines of one file, over what earlier files gave.
fn apply_service_section(g: &mut UnitGrants, text: &str, assigned: &mut [bool; 3]) {
    let mut in_service = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_service = line == "[Service]";
            continue;
        }
        if !in_service || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let (set, i) = match key.trim() {
            "User" => {
                let v = value.trim();
                g.user = (!v.is_empty()).then(|| v.to_string());
                continue;
            }
            "StateDirectory" => {
                g.state_directory(value);
                continue;
            }
            "Environment" => {
                g.add_environment(value);
                continue;
            }
            "ExecStart" => {
                g.exec_start = exec_words(value);
                continue;
            }
            "AmbientCapabilities" => (&mut g.ambient, 0),
            "CapabilityBoundingSet" => (&mut g.bounding, 1),
            "RestrictAddressFamilies" => (&mut g.address_families, 2),
            _ => continue,
        };
        if i == 2 && value.trim().is_empty() {
            // An empty RestrictAddressFamilies= lifts the restriction.
            *set = NameSet::All;
            assigned[i] = false;
            continue;
        }
        // Ambient capabilities start empty: a first list adds to nothing either way.
        set.apply(value, assigned[i] || i == 0);
        assigned[i] = true;
    }
}

/// A command's stdout, or None when it fails, cannot start, or outlives `timeout` (then it is
/// killed).
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Option<String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut raw = Vec::new();
        let _ = std::io::Read::read_to_end(
            &mut std::io::Read::take(&mut stdout, UNIT_TEXT_BYTES_MAX),
            &mut raw,
        );
        String::from_utf8_lossy(&raw).into_owned()
    });
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let text = reader.join().ok()?;
                return status.success().then_some(text);
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHIPPED: &str = include_str!("../../../deploy/tandem.service");

    #[test]
    fn the_shipped_unit_grants_no_raw_sockets_until_its_lines_are_uncommented() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tandem.service"), SHIPPED).unwrap();
        let g = from_files("tandem.service", &[dir.path()]).unwrap();
        assert_eq!(g.user.as_deref(), Some("tandem"));
        assert_eq!(g.state_directories, [Path::new("/var/lib/tandem")]);
        let odd = parse_unit(
            "odd".into(),
            &["[Service]\nStateDirectory=/etc ../x a/b:link\n".into()],
        );
        assert_eq!(odd.state_directories, [Path::new("/var/lib/a/b")]);
        assert_eq!(
            g.setting(&["--data-dir"], "TANDEM_DATA_DIR").as_deref(),
            Some("/var/lib/tandem")
        );
        assert_eq!(
            g.setting(&["--config", "-c"], "TANDEM_CONFIG").as_deref(),
            Some("/etc/tandem/tandem.toml")
        );
        let started = parse_unit(
            "x".into(),
            &[
                "[Service]\nExecStart=-/usr/bin/tandem serve --config=/etc/a.toml\n\
                 Environment=\"TANDEM_CONFIG=/etc/b c.toml\" X=1\n"
                    .into(),
            ],
        );
        assert_eq!(started.exec_start[0], "/usr/bin/tandem");
        assert_eq!(
            started
                .setting(&["--config", "-c"], "TANDEM_CONFIG")
                .as_deref(),
            Some("/etc/a.toml")
        );
        let env_only = UnitGrants {
            exec_start: vec![],
            ..started
        };
        assert_eq!(
            env_only.setting(&["--config"], "TANDEM_CONFIG").as_deref(),
            Some("/etc/b c.toml")
        );
        assert!(!g.has_capability("CAP_NET_RAW"));
        assert!(!g.address_families.contains("AF_PACKET"));
        assert!(g.address_families.contains("AF_INET6"));

        // The three lines the unit's comment gives, as a drop-in.
        let d = dir.path().join("tandem.service.d");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(
            d.join("capture.conf"),
            "[Service]\nAmbientCapabilities=CAP_NET_RAW\nCapabilityBoundingSet=CAP_NET_RAW\n\
             RestrictAddressFamilies=AF_PACKET\n",
        )
        .unwrap();
        let g = from_files("tandem.service", &[dir.path()]).unwrap();
        assert!(g.has_capability("CAP_NET_RAW"), "{g:?}");
        assert!(g.address_families.contains("AF_PACKET"));
        assert!(g.address_families.contains("AF_INET"));
        assert!(!g.has_capability("CAP_SETUID"));
        assert!(g.source.ends_with("capture.conf"), "{}", g.source);

        // A later drop-in that empties the bounding set takes it away again.
        std::fs::write(d.join("z.conf"), "[Service]\nCapabilityBoundingSet=\n").unwrap();
        let g = from_files("tandem.service", &[dir.path()]).unwrap();
        assert!(!g.has_capability("CAP_NET_RAW"));
        assert_eq!(from_files("other.service", &[dir.path()]), None);
    }

    #[test]
    fn systemctl_shows_merged_sets() {
        let text = "LoadState=loaded\nUser=tandem\nAmbientCapabilities=cap_net_raw\n\
                    CapabilityBoundingSet=cap_net_raw\n\
                    RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_PACKET\n";
        let g = parse_show("tandem.service", text).unwrap();
        assert!(g.has_capability("CAP_NET_RAW"));
        let exec = "LoadState=loaded\nExecStart={ path=/usr/bin/tandem ; argv[]=/usr/bin/tandem \
                    serve --config /etc/tandem/tandem.toml ; ignore_errors=no ; start_time=[n/a] }\n\
                    Environment=TANDEM_DATA_DIR=/srv/tandem\n";
        let e = parse_show("tandem.service", exec).unwrap();
        assert_eq!(
            e.setting(&["--config"], "TANDEM_CONFIG").as_deref(),
            Some("/etc/tandem/tandem.toml")
        );
        assert_eq!(
            e.setting(&["--data-dir"], "TANDEM_DATA_DIR").as_deref(),
            Some("/srv/tandem")
        );
        assert!(g.address_families.contains("AF_PACKET"));
        let deny = "LoadState=loaded\nUser=\nAmbientCapabilities=\n\
                    CapabilityBoundingSet=cap_chown cap_net_raw\nRestrictAddressFamilies=~AF_PACKET\n";
        let g = parse_show("tandem.service", deny).unwrap();
        assert!(
            g.has_capability("CAP_NET_RAW"),
            "root within the bounding set"
        );
        assert!(!g.address_families.contains("AF_PACKET"));
        assert_eq!(parse_show("tandem.service", "LoadState=not-found\n"), None);
    }

    #[test]
    fn a_command_that_outlives_its_timeout_is_killed() {
        // `sleep 5` that ran to its end would give Some("").
        let out = run_with_timeout(Command::new("sleep").arg("5"), Duration::from_millis(100));
        assert_eq!(out, None);
        let out = run_with_timeout(Command::new("echo").arg("hi"), Duration::from_secs(5));
        assert_eq!(out.as_deref(), Some("hi\n"));
    }
}

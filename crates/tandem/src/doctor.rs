//! `tandem doctor`: loads the configuration as `serve` does and hands each check of the
//! `doctor` crate its part of it; prints the report (text, or one JSON object with `--json`)
//! and exits 0 (nothing failed), 1 (a check failed) or 2 (it could not run).

use crate::config::Config;
use ::doctor::account::Account;
use ::doctor::ports::{BindRights, Listener};
use ::doctor::unit::UnitGrants;
use ::doctor::{Finding, Report};
use procstat::Proto;
use std::io::{IsTerminal, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// The packaged service's configuration.
use crate::data_dir::SERVICE_CONFIG as PACKAGED_CONFIG;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Configuration file, as `serve` takes it. Without one: /etc/tandem/tandem.toml when it
    /// exists (the packaged service's), else the embedded defaults.
    #[arg(long, short, value_name = "FILE", env = "TANDEM_CONFIG")]
    pub config: Option<PathBuf>,
    /// Data directory (overrides [kv] data_dir), as `serve` takes it.
    #[arg(long, value_name = "DIR", env = "TANDEM_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The user the service runs as. Default: User= of an installed tandem.service, else
    /// `tandem` when that user exists, else the user running doctor.
    #[arg(long, value_name = "NAME")]
    pub service_user: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Time one network check may take (PostgreSQL, the collector, a Tandem's /health).
    #[arg(long, value_name = "MS", default_value_t = 3_000)]
    pub timeout_ms: u64,
}

pub fn run(args: Args) -> ExitCode {
    let mut report = Report::default();
    let code = match check(&args, &mut report) {
        Ok(()) => report.exit_code(),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "tandem doctor cannot run: {e:#}");
            ::doctor::EXIT_CANNOT_RUN
        }
    };
    let mut out = std::io::stdout().lock();
    let text = if args.json {
        let mut json = report.to_json();
        json["exit_code"] = code.into();
        format!("{json}\n")
    } else if code == ::doctor::EXIT_CANNOT_RUN {
        String::new()
    } else {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        report.to_text(std::io::stdout().is_terminal() && !no_color)
    };
    // A reader that went away (`| head`) loses the rest; the status still tells.
    let _ = out.write_all(text.as_bytes());
    ExitCode::from(code)
}

/// Which configuration, and why that one: `--config` (or `TANDEM_CONFIG`), else the one the
/// installed unit starts `serve` with, else the packaged one, else none. Err: a named file
/// that cannot be read.
fn configuration(
    args: &Args,
    unit: Option<&UnitGrants>,
) -> anyhow::Result<(Option<PathBuf>, String)> {
    let from_unit = unit.and_then(|u| {
        let path = u.setting(&["--config", "-c"], "TANDEM_CONFIG")?;
        Some((PathBuf::from(path), format!("the service's: {}", u.source)))
    });
    let (path, why) = match (&args.config, from_unit) {
        (Some(p), _) => (p.clone(), "--config or TANDEM_CONFIG".to_string()),
        (None, Some(found)) => found,
        (None, None) if Path::new(PACKAGED_CONFIG).exists() => (
            PathBuf::from(PACKAGED_CONFIG),
            "the packaged service's: no --config or TANDEM_CONFIG given".to_string(),
        ),
        (None, None) => {
            return Ok((
                None,
                format!("no --config or TANDEM_CONFIG given, and no {PACKAGED_CONFIG}"),
            ));
        }
    };
    std::fs::File::open(&path).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the configuration file {}: {e} (run as root, or name another with --config)",
            path.display()
        )
    })?;
    Ok((Some(path), why))
}

/// An installed unit that starts `serve` without a configuration while the packaged one
/// exists: the service runs on the embedded defaults, whatever that file says.
fn unit_ignores_packaged_config(unit: &UnitGrants) -> Option<Finding> {
    let serves = unit.exec_start.iter().any(|a| a == "serve");
    let configured = unit.setting(&["--config", "-c"], "TANDEM_CONFIG").is_some();
    if !serves || configured || !Path::new(PACKAGED_CONFIG).exists() {
        return None;
    }
    Some(Finding::warn(
        "configuration",
        "service unit",
        format!(
            "starts `{}` without --config: the service runs on the embedded defaults, not {PACKAGED_CONFIG} ({})",
            unit.exec_start.join(" "),
            unit.source
        ),
        format!(
            "systemctl edit tandem, and add:\n[Service]\nExecStart=\nExecStart={} --config {PACKAGED_CONFIG}",
            unit.exec_start.join(" ")
        ),
    ))
}

fn check(args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let timeout = Duration::from_millis(args.timeout_ms.max(1));
    let dirs: Vec<&Path> = ::doctor::unit::UNIT_DIRS.iter().map(Path::new).collect();
    let unit = ::doctor::unit::read("tandem.service", &dirs, timeout);
    let (path, why) = configuration(args, unit.as_ref())?;
    let shown = path
        .as_ref()
        .map_or("embedded defaults".into(), |p| p.display().to_string());
    report.fact("configuration", "configuration", format!("{shown} ({why})"));
    let config = match &path {
        None => Config::default(),
        Some(p) => match Config::load(p) {
            Ok(c) => c,
            Err(e) => {
                report.add(Finding::fail(
                    "configuration",
                    p.display().to_string(),
                    format!("{e:#}"),
                    "correct the file (tandem.example.toml documents every option); the other \
                     checks need a configuration that loads",
                ));
                return Ok(());
            }
        },
    };
    report.add(Finding::ok(
        "configuration",
        shown,
        "parses and validates (as tandem serve loads it)",
    ));
    report.extend(serve_checks(&config));

    report.extend(unit.as_ref().and_then(unit_ignores_packaged_config));
    report.fact(
        "unit",
        "systemd unit",
        unit.as_ref()
            .map_or("no tandem.service installed".into(), |u| u.source.clone()),
    );
    let (user, why) = service_user(args, unit.as_ref())?;
    report.fact(
        "service_user",
        "service user",
        format!("{} ({why})", user.name),
    );
    let unit_data_dir = unit
        .as_ref()
        .and_then(|u| u.setting(&["--data-dir"], "TANDEM_DATA_DIR"));
    let (data_dir, why) = match (&args.data_dir, unit_data_dir) {
        (Some(d), _) => (d.clone(), "--data-dir or TANDEM_DATA_DIR".to_string()),
        (None, Some(d)) => (PathBuf::from(d), "the service unit's".to_string()),
        (None, None) => (config.kv.data_dir.clone(), "[kv] data_dir".to_string()),
    };
    let shown = match std::path::absolute(&data_dir) {
        Ok(abs) if data_dir.is_relative() => {
            format!(
                "{} ({why}; relative: {})",
                data_dir.display(),
                abs.display()
            )
        }
        _ => format!("{} ({why})", data_dir.display()),
    };
    report.fact("data_dir", "data directory", shown);

    let low_ports = user.is_root()
        || unit
            .as_ref()
            .is_some_and(|u| u.has_capability("CAP_NET_BIND_SERVICE"));
    let mut unusable = Vec::new();
    let listening = listeners(&config, &mut unusable);
    report.extend(unusable);
    report.extend(::doctor::ports::check_listeners(
        &listening,
        BindRights::with_kernel(low_ports),
        timeout,
    ));
    report.extend(::doctor::files::check_data_dir(
        &data_dir,
        &user,
        unit.as_ref(),
    ));
    if let Some(dir) = &config.scripts.dir {
        match config.scripts.user.as_deref().map(Account::lookup) {
            None => report.extend(::doctor::files::check_scripts(dir, &user)),
            Some(Ok(scripts_user)) => {
                report.extend(::doctor::files::check_scripts(dir, &scripts_user));
                report.extend(::doctor::files::check_script_user_switch(
                    &scripts_user,
                    &user,
                    unit.as_ref(),
                ));
            }
            Some(Err(e)) => report.add(Finding::fail(
                "files",
                format!("scripts in {}", dir.display()),
                format!("[scripts] {e}"),
                "create the user, or set [scripts] user to an existing one (FreePBX: asterisk)",
            )),
        }
    }
    if !config.capture.interface.is_empty() {
        report.add(::doctor::capture::check_interface(
            &config.capture.interface,
            Path::new("/sys/class/net"),
        ));
        report.extend(::doctor::capture::check_raw_sockets(
            ::doctor::capture::raw_socket_allowed(),
            unit.as_ref(),
        ));
    }
    if config.web.enabled {
        report.add(::doctor::console::check_first_user(
            &data_dir,
            &add_user_command(&user, &data_dir),
        ));
    }
    report.add(::doctor::clock::check(::doctor::clock::read()));
    if !config.capture.cdr_postgres.is_empty() {
        report.add(::doctor::postgres::check_connection(
            "[capture] cdr_postgres",
            &config.capture.cdr_postgres,
            timeout,
        ));
    }
    if config.collector.enabled() && !config.collector.postgres.is_empty() {
        report.add(::doctor::postgres::check_connection(
            "[collector] postgres",
            &config.collector.postgres,
            timeout,
        ));
    }
    let c = &config.capture;
    if !c.collector.is_empty() {
        let some = |s: &str| (!s.is_empty()).then(|| PathBuf::from(s));
        let target = ::doctor::collector::CollectorTarget {
            addr: c.collector.clone(),
            ca_file: some(&c.collector_ca),
            server_name: (!c.collector_server_name.is_empty())
                .then(|| c.collector_server_name.clone()),
            client_cert: some(&c.sensor_cert).zip(some(&c.sensor_key)),
        };
        report.add(::doctor::collector::check_collector(&target, timeout));
        if let Some(token) = some(&c.sensor_token_file) {
            let sensor = if c.sensor_id.is_empty() {
                "local"
            } else {
                &c.sensor_id
            };
            report.add(::doctor::collector::check_token_file(&token, &user, sensor));
        }
    }
    Ok(())
}

/// What `serve` checks of its settings before it binds anything (the console's TLS files and
/// names, the metrics' names), with `serve`'s own errors.
fn serve_checks(config: &Config) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut add = |check: &str, result: Result<(), String>| {
        if let Err(e) = result {
            out.push(Finding::fail(
                "configuration",
                check,
                e,
                "correct the setting named above (tandem.example.toml documents it)",
            ));
        }
    };
    if config.web.enabled {
        add(
            "[web]",
            console::check(&config.web).map_err(|e| e.to_string()),
        );
    }
    add(
        "[metrics] hosts",
        metrics_http::hosts(&config.metrics.hosts)
            .map(|_| ())
            .map_err(|e| e.to_string()),
    );
    out
}

/// The service's user, and why that one.
fn service_user(args: &Args, unit: Option<&UnitGrants>) -> anyhow::Result<(Account, String)> {
    let lookup = |name: &str| Account::lookup(name).map_err(anyhow::Error::msg);
    if let Some(name) = &args.service_user {
        return Ok((lookup(name)?, "--service-user".into()));
    }
    if let Some(u) = unit {
        let name = u.user.as_deref().unwrap_or("root");
        return Ok((lookup(name)?, format!("User= of {}", u.source)));
    }
    if let Ok(a) = Account::lookup("tandem") {
        return Ok((a, "the packaged service's user".into()));
    }
    let me = Account::current().map_err(anyhow::Error::msg)?;
    Ok((
        me,
        "no tandem.service and no user tandem: the user running doctor".into(),
    ))
}

/// `tandem user add` as the operator should run it: as the service's user (so that the
/// accounts file is the service's), with the data directory.
fn add_user_command(user: &Account, data_dir: &Path) -> String {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let dir = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let add = format!(
        "tandem user add admin --role admin --data-dir {}",
        dir.display()
    );
    if euid == user.uid {
        add
    } else {
        format!("runuser -u {} -- {add}", user.name)
    }
}

/// Every address `serve` would listen on with this configuration.
/// A setting that gives no address is a failure in `unusable`.
fn listeners(config: &Config, unusable: &mut Vec<Finding>) -> Vec<Listener> {
    let mut out = Vec::new();
    let mut add = |service: &str, setting: &str, addr: SocketAddr, protos: &[Proto]| {
        for &proto in protos {
            out.push(Listener {
                service: service.into(),
                setting: setting.into(),
                addr,
                proto,
                health: service == "metrics",
            });
        }
    };
    let tcp = &[Proto::Tcp][..];
    let both = &[Proto::Udp, Proto::Tcp][..];
    add("fastagi", "[fastagi] listen", config.fastagi.listen, tcp);
    add("metrics", "[metrics] listen", config.metrics.listen, tcp);
    if config.web.enabled {
        add("web console", "[web] listen", config.web.listen, tcp);
    }
    if let Some(r) = config.registrar.as_ref().filter(|r| r.enabled) {
        add("sip", "[registrar] listen", r.listen_addr(), both);
        if let Some(tls) = r.tls_listen {
            add("sip tls", "[registrar] tls_listen", tls, tcp);
        }
    }
    let c = &config.capture;
    let mut named = vec![];
    if c.enabled() {
        named.push(("hep", "[capture] hep_listen", &c.hep_listen, both));
        named.push((
            "capture metrics",
            "[capture] metrics_listen",
            &c.metrics_listen,
            tcp,
        ));
    }
    if config.collector.enabled() {
        named.push((
            "collector",
            "[collector] listen",
            &config.collector.listen,
            tcp,
        ));
    }
    for (service, setting, text, protos) in named.into_iter().filter(|n| !n.2.is_empty()) {
        // `HOST:PORT` as one address: the first it resolves to.
        match text.to_socket_addrs().ok().and_then(|mut a| a.next()) {
            Some(a) => add(service, setting, a, protos),
            None => unusable.push(Finding::fail(
                "ports",
                service,
                format!("{setting} = {text:?} is not an address"),
                format!("set {setting} to HOST:PORT"),
            )),
        }
    }
    out
}

//! `tandem serve`: runs every enabled service until SIGTERM or ctrl-c, then drains.

use crate::config::Config;
use clap::Args;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tracing::info;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Configuration file (TOML). Without one, safe defaults: FastAGI on 127.0.0.1:4573,
    /// metrics on 127.0.0.1:9573. See tandem.example.toml for every option.
    #[arg(long, short, value_name = "FILE", env = "TANDEM_CONFIG")]
    pub config: Option<PathBuf>,
    /// Where FastAGI listens (overrides fastagi.listen).
    #[arg(long, value_name = "ADDR")]
    pub agi_listen: Option<SocketAddr>,
    /// Serve every executable under DIR as a script route named by its path relative to DIR:
    /// `agi://127.0.0.1/sub/x.sh` runs DIR/sub/x.sh (overrides scripts.dir).
    #[arg(long, value_name = "DIR")]
    pub agi_script_dir: Option<PathBuf>,
    /// Where /metrics and /health listen (overrides metrics.listen).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Where the web console listens (overrides web.listen; default 127.0.0.1:9574).
    #[arg(long, value_name = "ADDR")]
    pub web_listen: Option<SocketAddr>,
    /// Run the SIP registrar on ADDR, UDP and TCP (overrides registrar.listen; without a
    /// `[registrar]` section: every domain served, realm `tandem`, digest MD5 and SHA-256).
    #[arg(long, value_name = "ADDR")]
    pub sip_listen: Option<SocketAddr>,
    /// Receive remote sensors' CDRs on ADDR (overrides collector.listen; TLS with
    /// collector.tls_cert or [web]'s certificate, plain TCP from loopback only).
    #[arg(long, value_name = "ADDR")]
    pub collector_listen: Option<SocketAddr>,
    /// The PostgreSQL the collector writes CDRs to (libpq-style, overrides collector.postgres).
    #[arg(long, value_name = "CONNSTR", env = "TANDEM_COLLECTOR_POSTGRES")]
    pub collector_postgres: Option<String>,
    /// Directory of the key-value store (overrides kv.data_dir).
    #[arg(long, value_name = "DIR", env = "TANDEM_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(a) = args.agi_listen {
        config.fastagi.listen = a;
    }
    if let Some(d) = args.agi_script_dir {
        config.scripts.dir = Some(d);
    }
    if let Some(a) = args.metrics_listen {
        config.metrics.listen = a;
    }
    if let Some(a) = args.web_listen {
        config.web.listen = a;
    }
    if let Some(d) = args.data_dir {
        config.kv.data_dir = d;
    }
    if let Some(a) = args.collector_listen {
        config.collector.listen = a.to_string();
    }
    if let Some(p) = args.collector_postgres {
        config.collector.postgres = p;
    }
    // The groups: the collector's rollups, the capture's (below), and `group=NAME` in the
    // calls search and the alert rules' scopes.
    config.collector.groups = config.groups()?;
    ::cdr::search::set_search_groups(config.collector.groups.clone());
    // The CDR database lives in the data directory unless the configuration names one, so
    // that the console of a `serve --data-dir DIR` finds the calls a capture stored there.
    cdr_db_in_data_dir(&mut config);
    if let Some(a) = args.sip_listen {
        let r = config.registrar.get_or_insert_with(Default::default);
        r.enabled = true;
        r.listen = Some(a);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(config))
}

/// The history's own figures on `/metrics`: the series it records against `max_series`, and the
/// samples of new series it refused at that cap.
struct HistoryMetrics {
    series: prometheus_client::metrics::gauge::Gauge,
    refused: prometheus_client::metrics::counter::Counter,
    max_series: usize,
    refused_before: u64,
}

impl HistoryMetrics {
    fn register(registry: &mut Registry, max_series: usize) -> HistoryMetrics {
        let m = HistoryMetrics {
            series: Default::default(),
            refused: Default::default(),
            max_series,
            refused_before: 0,
        };
        let max = prometheus_client::metrics::gauge::Gauge::<i64>::default();
        max.set(max_series as i64);
        let r = registry.sub_registry_with_prefix("tandem_history");
        r.register(
            "series",
            "Series the metrics history records",
            m.series.clone(),
        );
        r.register(
            "series_max",
            "Most series the metrics history records ([history] max_series)",
            max,
        );
        r.register(
            "series_refused",
            "Samples of new series the metrics history refused at max_series",
            m.refused.clone(),
        );
        m
    }

    fn update(&mut self, stats: &history::HistoryStats) {
        use std::sync::atomic::Ordering::Relaxed;
        self.series.set(stats.series.load(Relaxed) as i64);
        let refused = stats.series_refused.load(Relaxed);
        if refused > self.refused_before {
            if self.refused_before == 0 {
                tracing::warn!(
                    max_series = self.max_series,
                    "metrics history: new series refused past [history] max_series; \
                     tandem_history_series_refused_total counts them (raise the setting if \
                     they are wanted)"
                );
            }
            self.refused.inc_by(refused - self.refused_before);
            self.refused_before = refused;
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    // A session holds a socket (and a script's pipes): take every descriptor the system allows
    // before the session limit is sized from them.
    match fastagi::runtime::raise_fd_limit() {
        Ok((before, after)) if after > before => {
            info!(
                before,
                after, "raised the open-file limit to the hard limit"
            )
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit; keeping it"),
    }
    let mut registry = Registry::default();
    let metrics = Arc::new(fastagi::Metrics::new(&mut registry));
    // A taken FastAGI port fails before the data directory is created.
    fastagi::runtime::check_listen_free(config.fastagi.listen)?;
    // So does a console that could not start (TLS files, plain HTTP off loopback, hosts),
    // and a metrics host that is not a name.
    if config.web.enabled {
        console::check(&config.web)?;
    }
    let metrics_hosts = metrics_http::hosts(&config.metrics.hosts)?;
    let store = kv::Store::open_dir(&config.kv.data_dir, kv::Options::default())?;
    info!(path = %store.path().display(), "key-value store open");
    let mut router = agi_routes::db::add(fastagi::builtin::routes(), &store)?;
    if config.dialparties.enabled {
        let rules = config.dialparties.rules()?;
        info!(version = ?rules.version, fixes = ?config.dialparties.fix, "dialparties served natively");
        let route = agi_routes::dialparties::Dialparties::new(rules, config.dialparties.verbose);
        router = agi_routes::dialparties::add(router, route)?;
    }
    if config.scripts.dir.is_some() {
        // Every path no native route takes goes to the script directory.
        let script_metrics = Arc::new(fastagi::script::ScriptMetrics::new(&mut registry));
        let mut runner = fastagi::script::ScriptRunner::new(
            config.scripts.clone(),
            config.fastagi.max_line_bytes,
            script_metrics,
        )?;
        if !config.kv.script_families.is_empty() {
            info!(families = ?config.kv.script_families, "scripts' DATABASE commands on these families use Tandem's store");
            runner = runner.with_intercept(Arc::new(agi_routes::db::DatabaseIntercept {
                store: store.clone(),
                families: config.kv.script_families.iter().cloned().collect(),
            }));
        }
        router = router.fallback("script", runner);
    }
    let sip = match config.registrar.as_ref().filter(|r| r.enabled) {
        Some(settings) => {
            let (reg, listeners) = start_registrar(settings, &config, &store).await?;
            let limits = sip_limits(settings.stream_limits()?);
            reg.metrics.register(&mut registry);
            router = agi_routes::registrar::add(router, reg.clone())?;
            Some((reg, listeners, limits))
        }
        None => None,
    };
    // Sensors' CDRs into PostgreSQL; bound before anything serves, so a bad setting stops here.
    let collector = if config.collector.enabled() {
        let web_tls = config.web.tls_cert.clone().zip(config.web.tls_key.clone());
        Some(
            collector::Collector::bind(
                &config.collector,
                web_tls,
                &config.kv.data_dir,
                &mut registry,
            )
            .await?,
        )
    } else {
        None
    };
    let collector_handle = collector.as_ref().map(collector::Collector::handle);
    // Alert rules over the capture's calls, the collector's and the metrics: tandem.toml's,
    // and the console's (so that an admin can add the first rule there).
    let alerts = if config.alerts.rule.is_empty() && !config.web.enabled {
        None
    } else {
        let (set, console_text) =
            crate::alerts::ConsoleRules::load(&config.alerts, &config.kv.data_dir)?;
        if !set.rules.is_empty() {
            info!(rules = set.rules.len(), "alert rules loaded");
        }
        let (db, postgres) = cdr_database(&config, collector_handle.is_some());
        let notifier =
            crate::alerts::notifier(&config.alerts)?.map(|n| Arc::new(std::sync::Mutex::new(n)));
        let dispatch = crate::alerts::Dispatch {
            db,
            postgres,
            node: if collector_handle.is_some() {
                "collector".into()
            } else {
                cdr::writer::DEFAULT_SENSOR.into()
            },
            deliver: notifier.clone().map(crate::alerts::deliver_to),
            log: true,
        };
        let started = crate::alerts::ServeAlerts::start(&config.alerts, set, dispatch)?;
        registry.register_collector(Box::new(crate::alerts_metrics::AlertMetrics {
            engine: started.engine.clone(),
            dropped: started.dropped.clone(),
            notifier,
        }));
        Some((started, console_text))
    };
    let (alerts, console_rules) = match alerts {
        Some((a, text)) => {
            let rules =
                crate::alerts::ConsoleRules::new(&config.alerts, &config.kv.data_dir, text, &a);
            (Some(a), Some(Arc::new(rules)))
        }
        None => (None, None),
    };
    if let (Some(a), Some(h)) = (&alerts, &collector_handle) {
        a.watch_collector(h);
    }
    let server = fastagi::Server::bind(config.fastagi.clone(), router, metrics)?;
    // The call monitor, when configured, on threads of its own.
    let capture = if config.capture.enabled() {
        let mut sensor_config = config.capture.to_sensor()?;
        sensor_config.monitor.legs = config.legs.clone();
        if let Some(cdr) = sensor_config.cdr.as_mut() {
            cdr.groups = config.groups()?;
        }
        info!(interface = %config.capture.interface, hep = %config.capture.hep_listen, "call monitor starting");
        let sensor_alerts = alerts
            .as_ref()
            .map(|a| a.sensor(cdr::writer::DEFAULT_SENSOR));
        match sensor::Sensor::start_with_alerts(sensor_config, None, sensor_alerts) {
            Ok(handle) => {
                handle.register_metrics(&mut registry);
                if let Some(addr) = handle.hep_addr() {
                    info!(%addr, "call monitor listening for HEP v3");
                }
                Some(handle)
            }
            // Like any other bad setting, it stops Tandem before anything serves.
            Err(e) => {
                let c = &config.capture;
                let source = match (c.interface.is_empty(), c.hep_listen.is_empty()) {
                    (false, true) => format!("interface = {:?}", c.interface),
                    (true, false) => format!("hep_listen = {:?}", c.hep_listen),
                    _ => format!(
                        "interface = {:?}, hep_listen = {:?}",
                        c.interface, c.hep_listen
                    ),
                };
                anyhow::bail!(
                    "the call monitor ([capture] {source}) cannot start: {e}; correct the \
                     setting or remove it from the configuration file"
                );
            }
        }
    } else {
        None
    };
    let http = metrics_http::bind(config.metrics.listen).await?;
    info!(metrics = %http.local_addr()?, "metrics on http://{}/metrics", http.local_addr()?);

    let (stop_tx, stop_rx) = fastagi::shutdown_channel();
    let stopped = |mut rx: fastagi::Shutdown| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let history_metrics = config
        .history
        .enabled
        .then(|| HistoryMetrics::register(&mut registry, config.history.max_series));
    let registry = Arc::new(registry);
    // Every interval_s, /metrics and the host into the history, on a thread of its own.
    let recorder = if let Some(mut history_metrics) = history_metrics {
        let path = config.history.path(&config.kv.data_dir);
        let h = history::History::open(&path, config.history.to_config()?)?;
        info!(path = %path.display(), interval_s = config.history.interval_s,
              max_series = config.history.max_series, "metrics history open");
        let (registry, mut host, store, stats) = (
            registry.clone(),
            procstat::host::HostSampler::new("tandem_process"),
            store.clone(),
            h.stats(),
        );
        let mut latencies = metrics_http::HistogramDeltas::default();
        let sampler = alerts.as_ref().map(crate::alerts::ServeAlerts::sampler);
        let source = move || {
            // The history's own figures as of the last tick, so that this tick records them.
            history_metrics.update(&stats);
            let text = metrics_http::exposition(&registry);
            let mut samples = metrics_http::samples(&text);
            samples.extend(host.sample());
            let kv = store.quick_stats().samples();
            samples.extend(kv.into_iter().map(|(n, v)| (n.to_owned(), v)));
            if let Some(rules) = &sampler {
                rules(&samples);
            }
            history::Tick {
                samples,
                latencies: latencies.observe(metrics_http::histograms(&text)),
            }
        };
        let warn = |e| tracing::warn!(error = %e, "metrics history: tick not recorded");
        Some(history::Recorder::spawn(
            h,
            config.history.interval_s,
            source,
            warn,
        )?)
    } else {
        None
    };
    let web_task = if config.web.enabled {
        let history = config.history.enabled.then(|| {
            let path = config.history.path(&config.kv.data_dir);
            config.history.to_config().map(|c| (path, c))
        });
        let history = history.transpose()?;
        let mut console = console::Console::bind(
            &config.web,
            &config.kv.data_dir,
            history.as_ref().map(|(p, c)| (p.as_path(), c.clone())),
            Some(calls_config(
                &config,
                capture.as_ref().map(|c| c.live_calls()),
                collector_handle.clone(),
            )),
        )
        .await?;
        console.show_sensors(collector_handle.clone().map(|h| sensors_config(&config, h)));
        console.show_registrar_devices(sip.as_ref().map(|(reg, _, _)| registrar_devices(reg)));
        console.manage_alert_rules(console_rules.map(|r| {
            let r: Arc<dyn console::alert_rules::AlertRules> = r;
            r
        }));
        console.show_reports(Some(console::reports::ReportsConfig {
            groups: group_names(&config),
        }));
        info!(console = %console.url(), "web console on {}", console.url());
        Some(tokio::spawn(console.serve(stopped(stop_rx.clone()))))
    } else {
        None
    };
    let sip_task = sip.map(|(reg, listeners, limits)| {
        tokio::spawn(registrar::serve(
            reg,
            listeners,
            limits,
            stopped(stop_rx.clone()),
        ))
    });
    let collector_task = collector.map(|c| tokio::spawn(c.serve(stopped(stop_rx.clone()))));
    if let Some(daily) = daily_report(&config)? {
        info!(recipients = daily.email.to.len(), at = %config.reports.email_at, "daily report by email");
        tokio::spawn(daily.run(stopped(stop_rx.clone())));
    }
    let http_task = tokio::spawn(metrics_http::serve_for(
        http,
        registry,
        metrics_hosts,
        stopped(stop_rx.clone()),
    ));
    tokio::spawn(async move {
        wait_for_signal().await;
        info!("shutting down: no new sessions; draining those in progress");
        let _ = stop_tx.send(true);
    });
    // The FastAGI workers run on threads of their own, each with its own runtime.
    let summary = tokio::task::spawn_blocking(move || server.run_on_threads(stop_rx)).await??;
    info!(
        sessions = summary.sessions,
        cut = summary.cut_at_shutdown,
        "FastAGI server stopped"
    );
    http_task.await??;
    if let Some(sip) = sip_task {
        sip.await?;
    }
    if let Some(web) = web_task {
        web.await??;
    }
    if let Some(c) = collector_task {
        c.await?;
    }
    if let Some(recorder) = recorder {
        tokio::task::spawn_blocking(move || recorder.stop()).await?;
    }
    if let Some(capture) = capture {
        // Its calls in progress are reported and stored as `tandem capture` does at SIGTERM.
        capture.stop();
        match tokio::task::spawn_blocking(move || capture.join()).await? {
            Ok(report) => info!(
                calls = report.totals.calls,
                packets = report.packets,
                "call monitor stopped"
            ),
            Err(e) => tracing::error!(error = %e, "call monitor stopped"),
        }
    }
    Ok(())
}

/// The CDR database lives in the data directory unless the configuration names one, so that
/// the console of a `serve --data-dir DIR` finds the calls a capture stored there.
pub(crate) fn cdr_db_in_data_dir(config: &mut Config) {
    if config.capture.cdr_db == crate::config::CaptureConfig::default().cdr_db {
        config.capture.cdr_db = config.kv.data_dir.join("cdr.sqlite3");
    }
}

/// The names of the configured groups (`[[groups]]`), in the configuration's order.
pub(crate) fn group_names(config: &Config) -> Vec<String> {
    config.groups.iter().map(|g| g.name.clone()).collect()
}

/// The daily report of `[reports]`, or `None` when it has no recipient; `config`'s CDR
/// database as serve uses it (the data directory's file, or the collector's PostgreSQL).
pub(crate) fn daily_report(config: &Config) -> anyhow::Result<Option<crate::reports::DailyReport>> {
    let Some(email) = config.reports.mailer(&config.alerts)? else {
        return Ok(None);
    };
    let mut config = config.clone();
    cdr_db_in_data_dir(&mut config);
    Ok(Some(crate::reports::DailyReport {
        settings: config.reports.clone(),
        groups: config.reports.report_groups(&group_names(&config))?,
        cdr: cdr_database(&config, config.collector.enabled()),
        email,
    }))
}

/// Where the console reads calls: the capture's CDR database (PostgreSQL when configured,
/// else its SQLite file, which `tandem capture` runs may have filled without a `[capture]`).
/// With a running capture, its calls in progress feed the live page.
/// The CDR database this Tandem's calls (and alerts) are in: the capture's, or a collector's
/// PostgreSQL where its sensors' calls go.
fn cdr_database(config: &Config, collector: bool) -> (std::path::PathBuf, Option<String>) {
    let capture = &config.capture;
    if !capture.cdr_postgres.is_empty() {
        (capture.cdr_db.clone(), Some(capture.cdr_postgres.clone()))
    } else if collector {
        (
            capture.cdr_db.clone(),
            Some(config.collector.postgres.clone()),
        )
    } else {
        (capture.cdr_db.clone(), None)
    }
}

fn calls_config(
    config: &Config,
    live: Option<Arc<sensor::LiveCalls>>,
    collector: Option<collector::CollectorHandle>,
) -> console::calls::CallsConfig {
    let source = match cdr_database(config, collector.is_some()) {
        (_, Some(pg)) => console::calls::CdrSource::Postgres(pg),
        (path, None) => console::calls::CdrSource::Sqlite(path),
    };
    let mut cfg = console::calls::CallsConfig::new(source);
    cfg.readers_max = config.web.cdr_readers_max.max(1);
    cfg.pcap_cache_bytes_max = config.web.pcap_cache_mib.saturating_mul(1 << 20);
    cfg.live = live.map(|board| {
        let feed: console::calls::LiveFeed = Arc::new(move || {
            serde_json::to_value(board.snapshot()).unwrap_or(serde_json::Value::Null)
        });
        feed
    });
    // A call archived by a remote sensor is fetched over that sensor's session.
    cfg.remote_pcap = collector.map(|handle| {
        let fetch: console::calls::RemotePcap = Arc::new(move |call: ::cdr::CdrCall| {
            let handle = handle.clone();
            Box::pin(async move {
                if !handle.knows(&call.sensor).await {
                    return None;
                }
                let what = collector::PcapCall::from(&call);
                Some(
                    handle
                        .fetch_pcap(&call.sensor, what)
                        .await
                        .map_err(|e| e.to_string()),
                )
            })
        });
        fetch
    });
    cfg
}

/// The collector's sensors for the console (the dashboard's Sensors panel, `/api/sensors`), as
/// the console's own rows.
/// The registrar's devices as the console's Devices page takes them.
fn registrar_devices(reg: &Arc<registrar::Registrar>) -> console::devices::RegistrarFeed {
    let reg = reg.clone();
    Arc::new(move || {
        let rows = reg.devices(registrar::now_ms()).into_iter();
        rows.map(|d| console::devices::RegistrarDevice {
            user: d.user,
            domain: d.domain,
            address: d.address,
            source: d.source,
            contact: d.contact,
            user_agent: d.user_agent,
            registered_ms: d.registered_ms,
            expires_ms: d.expires_ms,
            live: d.live,
            failures: d.failures,
            last_failure_ms: d.last_failure_ms,
            last_failure: d.last_failure.to_string(),
            last_failure_reason: d.last_failure_reason.to_string(),
        })
        .collect()
    })
}

fn sensors_config(
    config: &Config,
    handle: collector::CollectorHandle,
) -> console::sensors::SensorsConfig {
    let feed: console::sensors::SensorsFeed = Arc::new(move || {
        let rows = handle.sensors().into_iter();
        rows.map(|s| console::sensors::SensorState {
            name: s.name,
            connected: s.connected,
            peer: s.peer,
            last_seen_us: s.last_seen_us,
            clock_skew_ms: s.clock_skew_ms,
            lag_ms: s.lag_ms,
            records_received: s.records_received,
            records_stored: s.records_stored,
            journal_records: s.journal_records,
            spilled: s.spilled,
            replayed: s.replayed,
            dropped: s.dropped,
            sessions: s.sessions,
            software: (!s.software.is_empty()).then_some(s.software),
        })
        .collect()
    });
    console::sensors::SensorsConfig {
        feed,
        clock_skew_warn_ms: config.collector.clock_skew_warn_ms,
    }
}

/// The registrar's TCP/TLS limits within the process's descriptors: a flood of SIP
/// connections must not take the descriptors FastAGI sessions need.
fn sip_limits(limits: registrar::StreamLimits) -> registrar::StreamLimits {
    let Ok((fds, _)) = fastagi::runtime::fd_limits() else {
        return limits;
    };
    let (fit, lowered) = limits.within_descriptors(fds);
    if lowered {
        tracing::warn!(
            connections_max = fit.connections_max,
            configured = limits.connections_max,
            open_files = fds,
            "registrar.connections_max lowered to a quarter of the open-file limit; raise the \
             limit (LimitNOFILE= in the unit) to keep the configured value"
        );
    }
    fit
}

/// Opens the registrar on the store and binds its sockets (before anything is served, so a
/// taken port or a bad certificate stops `serve` at once). SIP over TLS uses the console's
/// certificate unless `[registrar]` names one.
async fn start_registrar(
    settings: &registrar::Settings,
    config: &Config,
    store: &kv::Store,
) -> anyhow::Result<(Arc<registrar::Registrar>, registrar::Listeners)> {
    let tls = match settings.tls_listen {
        None => None,
        Some(addr) => {
            let cert = settings.tls_cert.as_ref().or(config.web.tls_cert.as_ref());
            let key = settings.tls_key.as_ref().or(config.web.tls_key.as_ref());
            let (Some(cert), Some(key)) = (cert, key) else {
                anyhow::bail!(
                    "registrar.tls_listen needs registrar.tls_cert and registrar.tls_key (or web.tls_cert and web.tls_key)"
                );
            };
            Some((addr, registrar::tls_acceptor(cert, key)?))
        }
    };
    let reg = registrar::Registrar::open(store, settings.config()?)?;
    let listeners = registrar::bind(settings.listen_addr(), tls).await?;
    let c = reg.config();
    info!(
        tls = ?settings.tls_listen,
        realm = %c.realm,
        algorithms = ?c.algorithms,
        bindings = reg.location().stats().bindings,
        "SIP registrar on udp and tcp {}", listeners.udp_addr()
    );
    Ok((reg, listeners))
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

//! The status figures as Prometheus metrics (`tandem_capture_*`), taken from the board at each
//! scrape, and the `capture-metrics` thread that serves them with `metrics_http::serve`.

use std::net::SocketAddr;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::{Sample, StatusBoard};
use crate::SensorError;

pub(crate) fn counter(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: u64,
) -> std::fmt::Result {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

pub(crate) fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let g = ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

/// One counter per value of `label` (`name_total{label="value"}`).
pub(crate) fn counter_family(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    values: &[(&str, u64)],
) -> std::fmt::Result {
    let mut family =
        e.encode_descriptor(name, help, None, ConstCounter::new(0u64).metric_type())?;
    for &(value, v) in values {
        ConstCounter::new(v).encode(family.encode_family(&[(label, value)])?)?;
    }
    Ok(())
}

fn ratio(e: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> std::fmt::Result {
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

/// Writes a sample's figures; parts absent from it are left out.
fn encode_sample(s: &Sample, e: &mut DescriptorEncoder) -> std::fmt::Result {
    if let Some(c) = s.calls {
        gauge(e, "calls_active", "Calls tracked now", c.active)?;
        counter(e, "calls", "Calls seen since the start", c.total)?;
    }
    if let Some(p) = s.packets {
        counter(e, "packets", "Packets handed to the monitor", p.total)?;
        counter(e, "sip_messages", "SIP messages decoded", p.sip)?;
        counter(e, "rtp_packets", "RTP packets decoded", p.rtp)?;
    }
    if let Some(c) = s.capture {
        counter(
            e,
            "kernel_drops",
            "Packets the kernel dropped because the capture ring was full",
            c.kernel_drops,
        )?;
        ratio(
            e,
            "buffer_used_ratio",
            "Share of the buffer between capture threads and analysis in use",
            c.buffer_used_pct / 100.0,
        )?;
        counter(
            e,
            "buffer_overruns",
            "Frames dropped because the buffer between capture threads and analysis was full",
            c.buffer_overruns,
        )?;
    }
    if let Some(c) = &s.cdr {
        gauge(
            e,
            "cdr_queue_records",
            "CDRs queued for the database",
            c.queue_records as u64,
        )?;
        gauge(
            e,
            "cdr_queue_records_max",
            "Bound of the CDR queue",
            c.queue_records_max as u64,
        )?;
        counter(
            e,
            "cdr_written_records",
            "CDRs stored in the database",
            c.written_records,
        )?;
        counter(e, "cdr_batches", "Transactions that stored CDRs", c.batches)?;
        counter(
            e,
            "cdr_journaled_records",
            "CDRs appended to the journal",
            c.journaled_records,
        )?;
        counter(
            e,
            "cdr_replayed_records",
            "CDRs stored from the journal",
            c.replayed_records,
        )?;
        gauge(
            e,
            "cdr_journal_records",
            "CDRs in the journal now",
            c.journal_records,
        )?;
        gauge(
            e,
            "cdr_journal_bytes",
            "Bytes of the journal now",
            c.journal_bytes,
        )?;
        gauge(
            e,
            "cdr_journal_bytes_max",
            "Bound of the journal",
            c.journal_bytes_max,
        )?;
        counter(
            e,
            "cdr_store_errors",
            "Failed attempts to open or write the CDR database",
            c.store_errors,
        )?;
        counter(
            e,
            "cdr_dropped_records",
            "CDRs lost because the journal was full or failed",
            c.dropped_records,
        )?;
        gauge(
            e,
            "cdr_store_up",
            "1 while the CDR database takes writes",
            u64::from(c.store_up),
        )?;
    }
    if let Some(a) = s.archive {
        gauge(
            e,
            "archive_queue",
            "Batches of packets queued for the archive writer",
            a.depth,
        )?;
        gauge(
            e,
            "archive_queue_max",
            "Bound of the archive queue, in batches",
            a.bound,
        )?;
        counter(
            e,
            "archive_dropped",
            "Packets dropped because the archive queue was full",
            a.dropped,
        )?;
    }
    if let Some(h) = &s.hep {
        crate::hep::encode_metrics(h, e)?;
    }
    if let Some(h) = &s.hep_send {
        crate::hep_send::encode_metrics(h, e)?;
    }
    if !s.threads.is_empty() {
        let c = ConstCounter::new(0.0f64);
        let mut family = e.encode_descriptor(
            "thread_cpu_seconds",
            "CPU time (user and system) of each named thread",
            None,
            c.metric_type(),
        )?;
        let ticks = s.ticks_per_s.max(1) as f64;
        let mut by_name: std::collections::BTreeMap<&str, u64> = Default::default();
        for t in &s.threads {
            *by_name.entry(&t.name).or_default() += t.cpu_ticks;
        }
        for (name, cpu_ticks) in by_name {
            let labels = [("thread", name)];
            ConstCounter::new(cpu_ticks as f64 / ticks).encode(family.encode_family(&labels)?)?;
        }
    }
    if let Some(rss) = s.rss_bytes {
        gauge(
            e,
            "resident_memory_bytes",
            "Resident set size of the process",
            rss,
        )?;
    }
    Ok(())
}

impl Collector for StatusBoard {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        encode_sample(&self.sample(), &mut encoder)
    }
}

/// `/metrics` and `/health` on a thread of its own, stopped when dropped.
pub struct MetricsServer {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `addr` now (an error names it) and serves until dropped.
    pub fn start(addr: SocketAddr, board: StatusBoard) -> Result<MetricsServer, SensorError> {
        let bind_error = |source| metrics_http::HttpError::Bind { addr, source };
        let listener = std::net::TcpListener::bind(addr).map_err(bind_error)?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        let local = listener.local_addr().map_err(bind_error)?;
        let mut registry = Registry::default();
        registry
            .sub_registry_with_prefix("tandem_capture")
            .register_collector(Box::new(board));
        let registry = Arc::new(registry);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("capture-metrics".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start the metrics server");
                        return;
                    }
                };
                runtime.block_on(async move {
                    let served = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => {
                            metrics_http::serve(l, registry, async {
                                let _ = stop_rx.await;
                            })
                            .await
                        }
                        Err(e) => Err(metrics_http::HttpError::Serve(e)),
                    };
                    if let Err(e) = served {
                        tracing::error!(error = %e, "the metrics server stopped");
                    }
                });
            })
            .map_err(|source| SensorError::Thread {
                thread: "capture-metrics",
                source,
            })?;
        tracing::info!(metrics = %local, "metrics on http://{local}/metrics");
        Ok(MetricsServer {
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

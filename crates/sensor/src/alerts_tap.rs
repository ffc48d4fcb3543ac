//! Alert rules decided on the sensor's thread, as records close: each batch's call starts
//! (INVITEs), closed calls and settled REGISTER chains go through the engine in time order,
//! as the CDR rows the sensor stores (so a dry run over stored CDRs and the collector see the
//! same thing). What fires goes to the `--json` observer and to [`AlertOutput`].
//!
//! Never waits: the engine costs a few hash lookups per event, and the output (notifications,
//! the alert store) must queue and return.

use std::sync::{Arc, Mutex};

use alerts::{Alert, CallStart, Engine, Event};
use cdr::CdrRecord;
use monitor::{Analysis, StartedCall};

use crate::records::us;

/// Where the alerts go besides the `--json` output: notifications and storage in `serve`.
/// Called on the sensor's thread: it must not wait.
pub trait AlertOutput: Send {
    fn alerts(&mut self, alerts: &[Alert]);
}

/// The sensor's rules: the engine (shared with whoever else feeds it, e.g. metric samples)
/// and where alerts go.
pub struct SensorAlerts {
    pub engine: Arc<Mutex<Engine>>,
    /// The sensor's name in uids (`cdr::CdrRecord::identity`): the CDR writer's.
    pub sensor: String,
    pub output: Option<Box<dyn AlertOutput>>,
}

impl std::fmt::Debug for SensorAlerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SensorAlerts")
            .field("sensor", &self.sensor)
            .finish_non_exhaustive()
    }
}

impl SensorAlerts {
    /// Runs a batch through the rules; returns what fired or resolved (also handed to the
    /// output). `now_ns`: the capture's time when the batch was taken (0: unknown).
    pub fn on_part(&mut self, part: &Analysis, now_ns: i64) -> Vec<Alert> {
        if self.idle() {
            return Vec::new();
        }
        let mut rows = crate::cdr_sink::CdrSink::rows(part, None);
        self.name_rows(&mut rows);
        self.on_rows(&part.started, &rows, now_ns)
    }

    /// No rule to run (a `serve` whose rules are all in the console, none saved yet).
    pub fn idle(&self) -> bool {
        self.engine
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .rules()
            .rules
            .is_empty()
    }

    /// Gives rows their sensor and uid, as the CDR writer will store them.
    pub fn name_rows(&self, rows: &mut [CdrRecord]) {
        for r in rows {
            if let Some(c) = r.call.as_mut()
                && c.sensor.is_empty()
            {
                c.sensor.clone_from(&self.sensor);
            }
            if let Some(g) = r.registration.as_mut()
                && g.sensor.is_empty()
            {
                g.sensor.clone_from(&self.sensor);
            }
            r.fill_identity(&self.sensor);
        }
    }

    /// Runs a batch's call starts and rows (the CDR writer's, so that they are made once)
    /// through the rules, in the order they happened.
    pub fn on_rows(
        &mut self,
        started: &[StartedCall],
        rows: &[CdrRecord],
        now_ns: i64,
    ) -> Vec<Alert> {
        // (time, starts first at a tie, index): indices are sorted, not the records.
        let mut order: Vec<(i64, bool, usize)> = Vec::with_capacity(started.len() + rows.len());
        for (i, s) in started.iter().enumerate() {
            order.push((us(s.invite_ns), false, i));
        }
        for (i, r) in rows.iter().enumerate() {
            let at = match (&r.call, &r.registration) {
                (Some(c), _) => c.end_us.unwrap_or(c.start_us),
                (None, Some(g)) => g.last_us,
                _ => continue,
            };
            order.push((at, true, started.len() + i));
        }
        order.sort_unstable();
        let mut out = Vec::new();
        {
            let mut engine = self.engine.lock().unwrap_or_else(|p| p.into_inner());
            for (_, _, i) in order {
                match i.checked_sub(started.len()) {
                    None => {
                        let s = &started[i];
                        let start_us = us(s.invite_ns);
                        let start = CallStart {
                            uid: format!("{}|{}|{start_us}", self.sensor, s.call_id),
                            call: cdr::CdrCall {
                                call_id: s.call_id.to_string(),
                                caller: s.caller.to_string(),
                                called: s.called.to_string(),
                                caller_addr: s.caller_addr.to_string(),
                                callee_addr: s.callee_addr.to_string(),
                                start_us,
                                sensor: self.sensor.clone(),
                                state: "calling".into(),
                                ..cdr::CdrCall::default()
                            },
                            user_agent: s.user_agent.as_deref().map(str::to_string),
                        };
                        engine.observe(Event::CallStart(&start), &mut out);
                    }
                    Some(j) => {
                        let r = &rows[j];
                        let ev = if r.call.is_some() {
                            Event::CallEnd(r)
                        } else {
                            Event::Registration(r)
                        };
                        engine.observe(ev, &mut out);
                    }
                }
            }
            if now_ns > 0 {
                engine.advance(us(now_ns), &mut out);
            }
        }
        if !out.is_empty()
            && let Some(o) = self.output.as_mut()
        {
            o.alerts(&out);
        }
        out
    }
}

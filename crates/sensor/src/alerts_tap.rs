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
use monitor::Analysis;

use crate::records::{cdr_call, cdr_registration, cdr_stream, us};

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

/// One event of a batch, owned, with its time.
enum Owned {
    Start(CallStart),
    End(CdrRecord),
    Registration(CdrRecord),
}

impl SensorAlerts {
    /// Runs a batch through the rules; returns what fired or resolved (also handed to the
    /// output). `now_ns`: the capture's time when the batch was taken (0: unknown).
    pub fn on_part(&mut self, part: &Analysis, now_ns: i64) -> Vec<Alert> {
        let mut events: Vec<(i64, Owned)> =
            Vec::with_capacity(part.started.len() + part.calls.len() + part.registrations.len());
        for s in &part.started {
            let start_us = us(s.invite_ns);
            events.push((
                start_us,
                Owned::Start(CallStart {
                    uid: format!("{}|{}|{start_us}", self.sensor, s.call_id),
                    call_id: s.call_id.to_string(),
                    caller: s.caller.to_string(),
                    called: s.called.to_string(),
                    caller_addr: s.caller_addr,
                    callee_addr: s.callee_addr,
                    start_us,
                    sensor: self.sensor.clone(),
                    user_agent: s.user_agent.as_deref().map(str::to_string),
                }),
            ));
        }
        for c in &part.calls {
            let mut row = cdr_call(c);
            row.sensor.clone_from(&self.sensor);
            let at = row.end_us.unwrap_or(row.start_us);
            let mut r = CdrRecord::call(row, c.streams.iter().map(cdr_stream).collect());
            r.uid = r.identity(&self.sensor);
            events.push((at, Owned::End(r)));
        }
        for g in &part.registrations {
            let mut row = cdr_registration(g);
            row.sensor.clone_from(&self.sensor);
            let at = row.last_us;
            let mut r = CdrRecord::registration(row);
            r.uid = r.identity(&self.sensor);
            events.push((at, Owned::Registration(r)));
        }
        // Starts before ends at the same time: a call is up before it is down.
        events.sort_by_key(|(at, e)| (*at, !matches!(e, Owned::Start(_))));
        let mut out = Vec::new();
        {
            let mut engine = self.engine.lock().unwrap_or_else(|p| p.into_inner());
            for (_, e) in &events {
                let ev = match e {
                    Owned::Start(s) => Event::CallStart(s),
                    Owned::End(r) => Event::CallEnd(r),
                    Owned::Registration(r) => Event::Registration(r),
                };
                engine.observe(ev, &mut out);
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

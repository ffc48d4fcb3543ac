//! `dialparties`: FreePBX's ring groups and Follow Me, decided in-process.
//!
//! FreePBX runs `dialparties.agi`, a PHP script forked per call, for every ring-group and
//! Follow Me call (macro-dial). This route makes the same decisions and sets the same
//! variables, reading what it needs in two to four round trips where the script makes 65 to 112:
//!
//! ```text
//! exten => s,n,AGI(dialparties.agi)                   ; FreePBX: Asterisk forks PHP
//! exten => s,n,AGI(agi://127.0.0.1/dialparties.agi)   ; Tandem, in-process
//! ```
//!
//! 1. One `GET FULL VARIABLE` reads every channel variable the script reads, `ARG3`..`ARG8`,
//!    and the follow-me times nested on `${FMGRP}`.
//! 2. One reads every member's `CF`, `DND`, `CW`, `CFB`, `CFU`, devices, extension state, the
//!    screening and CF ring-timer keys, and the dial string of each member's device (nested).
//! 3. One reads `PJSIP_DIAL_CONTACTS` of the PJSIP devices to dial, and what step 2 could not
//!    nest (members with several devices).
//! 4. Rarely, the contacts of those.
//!
//! Then the writes, one command each as AGI wants: the `SET VARIABLE`s and CALLTRACE
//! `DATABASE PUT`/`DEL` the script makes, in its order. Not sent: the script's 30-odd
//! `VERBOSE` lines (with `dialparties.verbose` they go to Tandem's log at info) and its final
//! `NOOP`.
//!
//! The decision ([`decide`]) is a function of what it reads: run over the values fetched so
//! far, it says what else it needs; the route fetches that and runs it again, until it needs
//! nothing. So the route reads what the script would read, and the first run's guesses only
//! decide what is fetched together.
//!
//! Differences from the script, all harmless to the call: `${DB(...)}` sets `DB_RESULT` on the
//! channel to the last value found; screening without memory removes the caller's recorded
//! introductions directly (the files `<callerid>.*`), not through a shell; a read the script
//! makes several times (an extension state) is made once.

pub mod decide;
pub mod fetch;
pub mod php;

pub use decide::{Action, Call, Decision, Facts, Fix, Rules, Shuffle, Version, decide};

use fastagi::{AgiError, Handler, RouteError, Router, Session};
use fetch::{Cache, Fact, Guess};
use std::path::{Component, Path};
use std::sync::Arc;
use tracing::{debug, info, warn};

/// The channel variables the script reads, fetched in the first round trip.
const VARIABLES: [&str; 29] = [
    "CWINUSEBUSY",
    "CWIGNORE",
    "CFIGNORE",
    "SIGNORE",
    "AMPUSER",
    "QUEUEWAIT",
    "SAVEDCIDNAME",
    "ARG1",
    "ARG2",
    "RingGroupMethod",
    "RG_CONFIRM",
    "RVOL",
    "ALERT_INFO",
    "SIPADDHEADER",
    "FMGRP",
    "PR_DIALSTATUS",
    "NODEST",
    "RINGGROUP_INDEX",
    "USE_CONFIRMATION",
    "SCREEN",
    "FROM_DID",
    "REALCALLERIDNUM",
    "BLINDTRANSFER",
    "ASTVARLIBDIR",
    "DIRECTION",
    "FROMQ",
    "DIALSTATUS",
    "RVOL_MODE",
    "RVOLPARENT",
];

/// Member arguments read in the first round trip (`ARG3`..); a longer list costs one more.
const MEMBER_ARGS_FIRST: usize = 6;

/// Decision runs before the route gives up (each run but the last adds what it lacked; real
/// calls need at most five).
const RUNS_MAX: usize = 16;

/// A random-order source per call.
pub type ShuffleSource = Arc<dyn Fn() -> Box<dyn Shuffle + Send> + Send + Sync>;

/// Uniform shuffles from a generator seeded per call.
pub struct RandomShuffle(fastrand::Rng);

impl Shuffle for RandomShuffle {
    fn shuffle(&mut self, members: &mut [String]) {
        self.0.shuffle(members);
    }
}

/// The route, with its rules.
pub struct Dialparties {
    /// `rules.notes`: the decision's notes go to Tandem's log (`dialparties.verbose`).
    pub rules: Rules,
    pub shuffle: ShuffleSource,
}

impl Dialparties {
    pub fn new(mut rules: Rules, verbose: bool) -> Self {
        rules.notes = verbose;
        Dialparties {
            rules,
            shuffle: Arc::new(|| Box::new(RandomShuffle(fastrand::Rng::new()))),
        }
    }
}

/// What one call cost: round trips before the writes, and the writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trips {
    pub reads: u32,
    pub writes: u32,
}

/// Registers the route as `dialparties` and `dialparties.agi`.
pub fn add(router: Router, route: Dialparties) -> Result<Router, RouteError> {
    let route = Arc::new(route);
    router
        .route("dialparties", Shared(route.clone()))?
        .route("dialparties.agi", Shared(route))
}

struct Shared(Arc<Dialparties>);

impl Handler for Shared {
    async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
        self.0.run(s).await.map(drop)
    }
}

impl Dialparties {
    /// Serves one call; returns what it cost.
    pub async fn run(&self, s: &mut Session) -> Result<Trips, AgiError> {
        let call = Call {
            callerid: s.header().callerid().to_string(),
            calleridname: s.header().calleridname().to_string(),
            channel: s.header().channel().to_string(),
            now_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64),
        };
        let line_max = fetch::line_bytes_max(s.header().version()).min(s.line_bytes_max());
        let mut cache = Cache::default();
        let first: Vec<Fact> = VARIABLES
            .iter()
            .map(|v| v.to_string())
            .chain((3..3 + MEMBER_ARGS_FIRST).map(|n| format!("ARG{n}")))
            .map(Fact::Var)
            .collect();
        let followme = vec![
            Guess::Followme { leaf: "prering" },
            Guess::Followme { leaf: "grptime" },
        ];
        let mut reads = fetch::fetch(s, &mut cache, first, followme, line_max).await?;
        let mut shuffle = (self.shuffle)();
        let mut runs = 0;
        let decision = loop {
            runs += 1;
            let decision = decide(&call, &self.rules, &mut cache, shuffle.as_mut());
            let missing = cache.take_missing();
            if missing.is_empty() {
                break decision;
            }
            if runs >= RUNS_MAX {
                return Err(AgiError::Handler(
                    format!(
                        "dialparties: still missing {} values after {runs} reads",
                        missing.len()
                    )
                    .into(),
                ));
            }
            // A member's forward is read first; its devices and their dial strings come
            // along (nested), since a member that is rung needs them next.
            let mut wanted = missing;
            let members: Vec<String> = wanted
                .iter()
                .filter_map(|f| match f {
                    Fact::Db(family, m) if family == "CF" && fetch::embeddable(m) => {
                        Some(m.clone())
                    }
                    _ => None,
                })
                .collect();
            let mut guesses = Vec::with_capacity(members.len());
            for member in members {
                wanted.push(Fact::Db("AMPUSER".into(), format!("{member}/device")));
                guesses.push(Guess::DeviceDial { member });
            }
            reads += fetch::fetch(s, &mut cache, wanted, guesses, line_max).await?;
        };
        debug!(
            session = s.id(),
            reads,
            values = cache.len(),
            runs,
            "dialparties decided"
        );
        for line in &decision.log {
            info!(session = s.id(), "dialparties: {line}");
        }
        if let Some(why) = &decision.stopped {
            warn!(
                session = s.id(),
                "dialparties stops early, as the script would: {why}"
            );
        }
        let writes = self.write(s, &decision, line_max).await?;
        Ok(Trips { reads, writes })
    }

    /// Carries out the decision in its order. Variables and CALLTRACE puts go in batches of
    /// `EXEC MSet(name=value,...)`: MSet sets each pair with the function SET VARIABLE uses
    /// (`pbx_builtin_setvar_helper`), and `DB(family/key)=value` writes astdb as DATABASE PUT
    /// does, so a dozen writes cost one round trip instead of a dozen.
    async fn write(
        &self,
        s: &mut Session,
        decision: &Decision,
        line_max: usize,
    ) -> Result<u32, AgiError> {
        let mut writes = 0;
        let mut batch = MsetBatch::new(line_max);
        for action in &decision.actions {
            let pair = match action {
                Action::Set { name, value } => Some(mset_pair(name, value)),
                Action::DbPut { family, key, value } if fetch::db_path_embeddable(family, key) => {
                    Some(mset_pair(&format!("DB({family}/{key})"), value))
                }
                _ => None,
            };
            if let Some(pair) = pair {
                if !batch.fits(&pair) {
                    writes += batch.flush(s).await?;
                }
                if batch.fits(&pair) {
                    batch.push(pair);
                    continue;
                }
            }
            // Too long for one line, or not a variable: on its own, as the script sends it.
            writes += batch.flush(s).await?;
            match action {
                Action::Set { name, value } => s.set_variable(name, value).await?,
                Action::DbPut { family, key, value } => {
                    s.database_put(family, key, value).await?;
                }
                Action::DbDel { family, key } => s.database_del(family, key).await?,
                Action::ForgetIntroductions { dir, callerid } => {
                    let (dir, callerid) = (dir.clone(), callerid.clone());
                    let id = s.id();
                    // A directory listing: off the session's thread.
                    let _ = tokio::task::spawn_blocking(move || {
                        forget_introductions(id, &dir, &callerid)
                    })
                    .await;
                    continue;
                }
            }
            writes += 1;
        }
        writes += batch.flush(s).await?;
        Ok(writes)
    }
}

/// Escapes what Asterisk's argument splitter acts on (`__ast_app_separate_args`): it takes a
/// backslash as "the next character is literal" and removes it, removes quotes, and does not
/// split inside parentheses or brackets.
fn mset_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if matches!(c, '\\' | '"' | '(' | ')' | '[' | ']' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// MSet splits its argument into pairs at `,`, then each pair at its first `=`, both with the
/// splitter; the second pass leaves the part after `=` as it is. So a name goes through the
/// splitter twice and a value once.
fn mset_pair(name: &str, value: &str) -> String {
    format!("{}={}", mset_escape(&mset_escape(name)), mset_escape(value))
}

/// MSet takes at most 99 pairs.
const MSET_PAIRS_MAX: usize = 90;

struct MsetBatch {
    pairs: Vec<String>,
    /// The encoded command line so far: `EXEC MSet "..."` and its newline.
    line_bytes: usize,
    line_max: usize,
}

/// `EXEC MSet ""` and the newline.
const MSET_LINE_BASE: usize = "EXEC MSet \"\"\n".len();

/// What a pair adds to the line: itself, a backslash before each quote and backslash (the
/// AGI quoting of the argument), and its comma.
fn mset_line_bytes(pair: &str) -> usize {
    pair.len() + pair.bytes().filter(|b| matches!(b, b'"' | b'\\')).count() + 1
}

impl MsetBatch {
    fn new(line_max: usize) -> Self {
        MsetBatch {
            pairs: Vec::new(),
            line_bytes: MSET_LINE_BASE,
            line_max,
        }
    }
    fn fits(&self, pair: &str) -> bool {
        self.pairs.len() < MSET_PAIRS_MAX && self.line_bytes + mset_line_bytes(pair) < self.line_max
    }
    fn push(&mut self, pair: String) {
        self.line_bytes += mset_line_bytes(&pair);
        self.pairs.push(pair);
    }
    async fn flush(&mut self, s: &mut Session) -> Result<u32, AgiError> {
        if self.pairs.is_empty() {
            return Ok(0);
        }
        let options = self.pairs.join(",");
        self.pairs.clear();
        self.line_bytes = MSET_LINE_BASE;
        s.exec("MSet", &options).await?;
        Ok(1)
    }
}

/// Removes `<dir>/<callerid>.*`, the recorded introductions of screening without memory. The
/// directory comes from the channel (`ASTVARLIBDIR`), so it must be absolute and plain; when
/// Tandem runs on another host than Asterisk it does not exist and nothing happens.
fn forget_introductions(session: u64, dir: &str, callerid: &str) {
    let path = Path::new(dir);
    let plain = path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !plain || callerid.is_empty() || callerid.contains('/') {
        warn!(
            session,
            dir, "dialparties: not removing introductions from this directory"
        );
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    let prefix = format!("{callerid}.");
    for entry in entries.flatten() {
        let name = entry.file_name();
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if is_file
            && name.to_string_lossy().starts_with(&prefix)
            && let Err(e) = std::fs::remove_file(entry.path())
        {
            warn!(session, file = %entry.path().display(), error = %e, "dialparties: cannot remove an introduction");
        }
    }
}

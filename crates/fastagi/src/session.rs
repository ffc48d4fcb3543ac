//! The session API a native handler uses: one command at a time, each answered before the next
//! is sent (Asterisk answers only the first of several commands that arrive in one write).
//!
//! Hangup: Asterisk sends an unsolicited `HANGUP` line when the channel goes away, but only on the
//! next turn of its AGI loop: a media command cut by the caller's hangup answers `result=-1` at
//! once, and the line follows when the next command arrives, or some time later if none does
//! (44 ms in transcript S07, 545 ms in S15). So after a `-1` from a command that needs a live
//! channel the session asks: a `HANGUP` that has already arrived settles it; otherwise it sends
//! `CHANNEL STATUS`, which has no effect on a live channel and is not permitted on a dead one.
//! `HANGUP` and/or `511` mean the caller hung up ([`AgiError::Hangup`]); a plain reply means the
//! `-1` was a real failure ([`AgiError::Failed`]), as for a missing sound file (S13). One round
//! trip, no fixed wait, and only after a `-1` (S16 shows Asterisk answering it this way).
//!
//! The session consumes `HANGUP` lines wherever they come and remembers them
//! ([`Session::hung_up`]). Commands Asterisk still permits on a dead channel keep working; the
//! others fail with [`AgiError::DeadChannel`].

use crate::conn::Conn;
use crate::error::AgiError;
use crate::metrics::Metrics;
use crate::timeouts::{CommandTimeouts, within};
use agi::{
    ChannelStatus, Command, Event, GetDataResult, Header, Reply, ReplyParser, Response, Route,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;

/// What the router found for this session: the route asked for and the segments its pattern
/// captured.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub route: Route,
    pub captures: Vec<(String, String)>,
}

/// What Asterisk can say while no command is in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unsolicited {
    Hangup,
    Closed,
}

/// The command buffer a session keeps between commands.
const OUT_KEPT_BYTES: usize = 256;

pub struct Session {
    conn: Conn,
    header: Header,
    request: Request,
    parser: ReplyParser,
    hung_up: bool,
    out: Vec<u8>,
    id: u64,
    peer: SocketAddr,
    timeouts: CommandTimeouts,
    hangup_probe_timeout: Duration,
    /// Replies still owed to hangup probes that timed out: skipped when they come, so that each
    /// later reply still pairs with its own command.
    late_probe_replies: u32,
    /// The command a hangup cut short, for the log.
    hangup_during: Option<String>,
    max_line_bytes: usize,
    metrics: Arc<Metrics>,
}

pub(crate) struct SessionParts {
    pub id: u64,
    pub peer: SocketAddr,
    pub timeouts: CommandTimeouts,
    pub hangup_probe_timeout: Duration,
    pub max_line_bytes: usize,
    pub metrics: Arc<Metrics>,
}

impl Session {
    pub(crate) fn new(conn: Conn, header: Header, request: Request, parts: SessionParts) -> Self {
        Session {
            conn,
            header,
            request,
            parser: ReplyParser::default(),
            hung_up: false,
            out: Vec::with_capacity(256),
            id: parts.id,
            peer: parts.peer,
            timeouts: parts.timeouts,
            hangup_probe_timeout: parts.hangup_probe_timeout,
            late_probe_replies: 0,
            hangup_during: None,
            max_line_bytes: parts.max_line_bytes,
            metrics: parts.metrics,
        }
    }

    pub(crate) fn into_conn(self) -> Conn {
        self.conn
    }

    /// The session header as Asterisk sent it.
    pub fn header(&self) -> &Header {
        &self.header
    }
    /// The dialplan's arguments: `AGI(agi://host/route,a,b)` gives `["a", "b"]`.
    pub fn args(&self) -> impl ExactSizeIterator<Item = &str> + Clone {
        self.header.args()
    }
    /// An argument by position, starting at 1 like `agi_arg_1`.
    pub fn arg(&self, n: usize) -> Option<&str> {
        self.header.arg(n)
    }
    /// The route path asked for (`agi_network_script` without its query).
    pub fn route_path(&self) -> &str {
        &self.request.route.path
    }
    /// A query parameter of the request: `agi://host/route?lang=fr` gives `param("lang")`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.request.route.param(name)
    }
    /// A segment captured by the route's pattern: `queue/{name}` gives `capture("name")`.
    pub fn capture(&self, name: &str) -> Option<&str> {
        self.request
            .captures
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    /// The longest line this session sends or reads (`fastagi.max_line_bytes`).
    pub fn line_bytes_max(&self) -> usize {
        self.max_line_bytes
    }
    /// This session's number in the server's log.
    pub fn id(&self) -> u64 {
        self.id
    }
    /// Asterisk's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }
    /// True once the channel is known to be gone: Asterisk said `HANGUP`, answered `511` (with
    /// AGISIGHUP=no it never sends the line), or this session hung it up itself.
    pub fn hung_up(&self) -> bool {
        self.hung_up
    }
    /// The command the caller's hangup cut short (`WAIT FOR DIGIT`, say), when one did.
    pub fn hangup_during(&self) -> Option<&str> {
        self.hangup_during.as_deref()
    }

    /// Sends one command and waits for its final reply. `100 Trying...` (GOSUB) and `HANGUP`
    /// lines on the way are consumed; 510/511/520 become errors. A `-1` from a command that needs
    /// a live channel is checked as the typed methods check it: [`AgiError::Hangup`] when the
    /// caller hung up, else the reply as it came.
    pub async fn command(&mut self, cmd: &Command) -> Result<Reply, AgiError> {
        self.out.clear();
        cmd.encode_into(&mut self.out)?;
        let reply = self.exchange(cmd.name()).await?;
        if reply.result.starts_with('-')
            && cmd.needs_live_channel()
            && self.hung_up_after_minus_one(cmd.name()).await?
        {
            return Err(AgiError::Hangup);
        }
        Ok(reply)
    }

    /// [`Session::command`] from words at hand: no [`Command`] is built, nothing is copied.
    async fn send(&mut self, name: &'static str, args: &[&str]) -> Result<Reply, AgiError> {
        self.out.clear();
        agi::encode_command(name, args, &mut self.out)?;
        self.exchange(name).await
    }

    /// Writes the encoded command in `self.out` and reads its final reply.
    async fn exchange(&mut self, name: &str) -> Result<Reply, AgiError> {
        if self.out.len() > self.max_line_bytes + 1 {
            return Err(AgiError::CommandTooLong {
                command: name.to_string(),
                bytes: self.out.len() - 1,
                max: self.max_line_bytes,
            });
        }
        self.conn.write_all(&self.out).await?;
        self.metrics.commands_sent.inc();
        let limit = self.timeouts.for_command(&self.out);
        self.shrink_out();
        let response = within(limit, || name.to_string(), self.read_response(None)).await?;
        let command = || name.to_string();
        match response {
            Response::Success(reply) => Ok(reply),
            Response::InvalidCommand => Err(AgiError::InvalidCommand { command: command() }),
            Response::DeadChannel => Err(AgiError::DeadChannel { command: command() }),
            Response::Usage { usage } => Err(AgiError::Usage {
                command: command(),
                usage,
            }),
            Response::Other { code, text } => Err(AgiError::Failed {
                command: command(),
                result: format!("{code} {text}"),
            }),
        }
    }

    /// For the script relay: sends `line` (a validated command, without its newline) and
    /// appends the raw reply lines to `reply`: GOSUB's `100` and a multi-line `520` whole, but no
    /// `HANGUP` line (those are consumed and noted, as in [`Session::command`]). Returns the
    /// final response, parsed.
    pub(crate) async fn relay(
        &mut self,
        line: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<Response, AgiError> {
        self.out.clear();
        self.out.extend_from_slice(line);
        self.out.push(b'\n');
        self.conn.write_all(&self.out).await?;
        self.metrics.commands_sent.inc();
        let limit = self.timeouts.for_command(line);
        self.shrink_out();
        let read = self.read_response(Some(reply));
        within(limit, || String::from_utf8_lossy(line).into_owned(), read).await
    }

    /// After a long command went out, gives its buffer back: a session that then waits hours for
    /// the reply (a `Dial`) holds the few hundred bytes commands need, not the longest it sent.
    fn shrink_out(&mut self) {
        if self.out.capacity() > OUT_KEPT_BYTES {
            self.out = Vec::with_capacity(OUT_KEPT_BYTES);
        }
    }

    /// Consumes `HANGUP` lines that have already arrived (none is waited for). True if the
    /// channel has hung up.
    pub(crate) fn take_arrived_hangups(&mut self) -> bool {
        loop {
            match self.conn.take_hangup_line() {
                Some(true) => self.saw_hangup(),
                Some(false) => break,
                None if self.conn.fill_nonblocking() => {}
                None => break,
            }
        }
        self.hung_up
    }

    /// While no command is in flight, waits for what Asterisk says on its own: `HANGUP`, or the
    /// end of the connection. A late reply to a hangup probe is consumed on the way. Cancel-safe:
    /// each line is taken whole or not at all.
    pub(crate) async fn unsolicited(&mut self) -> Result<Unsolicited, AgiError> {
        loop {
            let line = match self.conn.read_line().await? {
                None => return Ok(Unsolicited::Closed),
                Some(l) => l,
            };
            if self.late_probe_replies == 0 {
                if line.strip_suffix(b"\n").unwrap_or(line) == b"HANGUP" {
                    self.saw_hangup();
                    return Ok(Unsolicited::Hangup);
                }
                return Err(agi::ReplyError::Malformed {
                    line: String::from_utf8_lossy(line).into_owned(),
                }
                .into());
            }
            match self.parser.push_line(line)? {
                Some(Event::Hangup) => {
                    self.saw_hangup();
                    return Ok(Unsolicited::Hangup);
                }
                Some(Event::Response(r)) => self.skip_late_probe_reply(&r),
                None | Some(Event::Trying(_)) => {}
            }
        }
    }

    /// Reads up to the final reply of the command in flight. `HANGUP` lines on the way are
    /// noted; replies owed to timed-out probes are skipped; with `raw`, the reply's own lines
    /// (GOSUB's `100`, a multi-line `520`) are appended as they came, each ending in `\n`.
    async fn read_response(&mut self, mut raw: Option<&mut Vec<u8>>) -> Result<Response, AgiError> {
        let start = raw.as_ref().map_or(0, |r| r.len());
        loop {
            let line = self.conn.read_line().await?.ok_or(AgiError::Disconnected)?;
            let event = self.parser.push_line(line)?;
            if let (Some(raw), None | Some(Event::Trying(_)) | Some(Event::Response(_))) =
                (raw.as_deref_mut(), &event)
            {
                raw.extend_from_slice(line);
                if !line.ends_with(b"\n") {
                    raw.push(b'\n');
                }
            }
            match event {
                None | Some(Event::Trying(_)) => {}
                Some(Event::Hangup) => self.saw_hangup(),
                Some(Event::Response(r)) if self.late_probe_replies > 0 => {
                    self.skip_late_probe_reply(&r);
                    if let Some(raw) = raw.as_deref_mut() {
                        raw.truncate(start);
                    }
                }
                Some(Event::Response(r)) => {
                    if r == Response::DeadChannel {
                        self.saw_hangup();
                    }
                    return Ok(r);
                }
            }
        }
    }

    /// A reply to a probe that timed out, arriving at last: it still says whether the channel
    /// is dead.
    fn skip_late_probe_reply(&mut self, r: &Response) {
        debug_assert!(self.late_probe_replies > 0);
        self.late_probe_replies -= 1;
        if *r == Response::DeadChannel {
            self.saw_hangup();
        }
    }

    fn saw_hangup(&mut self) {
        if !self.hung_up {
            self.metrics.hangups.inc();
        }
        self.hung_up = true;
    }

    /// After a `-1` from `command`, which needs a live channel: true if the caller hung up,
    /// false if the command failed on a live channel. A `HANGUP` already received settles it
    /// at no cost; otherwise one `CHANNEL STATUS` does (see the module's documentation).
    pub(crate) async fn hung_up_after_minus_one(
        &mut self,
        command: &str,
    ) -> Result<bool, AgiError> {
        if !self.take_arrived_hangups() {
            if self.conn.at_eof() {
                // Asterisk closed right after the -1 (AGIEXITONHANGUP=yes does): the call is over.
                self.saw_hangup();
            } else {
                self.probe_channel(command).await?;
            }
        }
        if self.hung_up && self.hangup_during.is_none() {
            self.hangup_during = Some(command.to_string());
        }
        Ok(self.hung_up)
    }

    /// Sends `CHANNEL STATUS` and reads its reply for at most `hangup_probe_timeout_ms`. A reply
    /// that does not come in time is skipped when it does, and the `-1` stands as a failure.
    async fn probe_channel(&mut self, command: &str) -> Result<(), AgiError> {
        const PROBE: &[u8] = b"CHANNEL STATUS\n";
        match self.conn.write_all(PROBE).await {
            Ok(()) => {}
            // Asterisk is gone, and the channel with it.
            Err(AgiError::Io(_)) => {
                self.saw_hangup();
                self.metrics.probe_answered("gone");
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        self.metrics.commands_sent.inc();
        match tokio::time::timeout(self.hangup_probe_timeout, self.read_response(None)).await {
            Ok(Ok(Response::DeadChannel)) => self.metrics.probe_answered("dead"),
            Ok(Ok(_)) if self.hung_up => self.metrics.probe_answered("dead"),
            Ok(Ok(_)) => self.metrics.probe_answered("live"),
            Ok(Err(AgiError::Disconnected)) => {
                self.saw_hangup();
                self.metrics.probe_answered("gone");
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                self.late_probe_replies += 1;
                self.metrics.probe_answered("timeout");
                warn!(
                    session = self.id,
                    command,
                    hangup_probe_timeout_ms = self.hangup_probe_timeout.as_millis() as u64,
                    "no reply to CHANNEL STATUS after a -1; taking the -1 as a failure"
                );
            }
        }
        Ok(())
    }

    /// A `-1` from a command that needs the channel: a hangup if Asterisk says so, else failure.
    async fn minus_one(&mut self, name: &str, reply: Reply) -> AgiError {
        match self.hung_up_after_minus_one(name).await {
            Ok(true) => AgiError::Hangup,
            Ok(false) => AgiError::Failed {
                command: name.to_string(),
                result: reply.result,
            },
            Err(e) => e,
        }
    }

    /// A command that needs a live channel: `-1` means hangup or failure.
    async fn run_media(&mut self, name: &'static str, args: &[&str]) -> Result<Reply, AgiError> {
        let reply = self.send(name, args).await?;
        if reply.result.starts_with('-') {
            return Err(self.minus_one(name, reply).await);
        }
        Ok(reply)
    }

    /// ANSWER.
    pub async fn answer(&mut self) -> Result<(), AgiError> {
        self.run_media("ANSWER", &[]).await.map(drop)
    }

    /// GET VARIABLE: `None` when the variable is not set.
    pub async fn get_variable(&mut self, name: &str) -> Result<Option<String>, AgiError> {
        Ok(self.send("GET VARIABLE", &[name]).await?.into_variable())
    }

    /// GET FULL VARIABLE: evaluates an expression such as `${CALLERID(num)}`.
    pub async fn get_full_variable(
        &mut self,
        expression: &str,
    ) -> Result<Option<String>, AgiError> {
        Ok(self
            .send("GET FULL VARIABLE", &[expression])
            .await?
            .into_variable())
    }

    /// SET VARIABLE.
    pub async fn set_variable(&mut self, name: &str, value: &str) -> Result<(), AgiError> {
        self.send("SET VARIABLE", &[name, value]).await.map(drop)
    }

    /// EXEC an application; returns what the application returned. Options are the
    /// application's arguments as in dialplan, comma separated.
    pub async fn exec(&mut self, application: &str, options: &str) -> Result<i64, AgiError> {
        let reply = self.send("EXEC", &[application, options]).await?;
        match reply.result_int() {
            Some(-2) => Err(AgiError::NoSuchApplication {
                application: application.to_string(),
            }),
            Some(n) => Ok(n),
            None => Err(AgiError::Failed {
                command: "EXEC".into(),
                result: reply.result,
            }),
        }
    }

    /// STREAM FILE: plays a file; returns the escape digit pressed, if any.
    pub async fn stream_file(
        &mut self,
        file: &str,
        escape_digits: &str,
    ) -> Result<Option<char>, AgiError> {
        Ok(self
            .run_media("STREAM FILE", &[file, escape_digits])
            .await?
            .digit())
    }

    /// GET DATA: plays a prompt and collects up to `max_digits` digits.
    pub async fn get_data(
        &mut self,
        file: &str,
        timeout_ms: u32,
        max_digits: u32,
    ) -> Result<GetDataResult, AgiError> {
        let (timeout, max) = (timeout_ms.to_string(), max_digits.to_string());
        let reply = self.run_media("GET DATA", &[file, &timeout, &max]).await?;
        Ok(reply.get_data().expect("a result without '-' is digits"))
    }

    /// WAIT FOR DIGIT: `None` when the timeout passed with no digit (-1 waits forever).
    pub async fn wait_for_digit(&mut self, timeout_ms: i32) -> Result<Option<char>, AgiError> {
        let timeout = timeout_ms.to_string();
        Ok(self.run_media("WAIT FOR DIGIT", &[&timeout]).await?.digit())
    }

    /// CHANNEL STATUS of this channel.
    pub async fn channel_status(&mut self) -> Result<ChannelStatus, AgiError> {
        let reply = self.send("CHANNEL STATUS", &[]).await?;
        reply.channel_status().ok_or(AgiError::Failed {
            command: "CHANNEL STATUS".into(),
            result: reply.result,
        })
    }

    /// DATABASE GET: `None` when the key does not exist.
    pub async fn database_get(
        &mut self,
        family: &str,
        key: &str,
    ) -> Result<Option<String>, AgiError> {
        Ok(self
            .send("DATABASE GET", &[family, key])
            .await?
            .into_variable())
    }

    /// DATABASE PUT.
    pub async fn database_put(
        &mut self,
        family: &str,
        key: &str,
        value: &str,
    ) -> Result<(), AgiError> {
        self.expect_one("DATABASE PUT", &[family, key, value]).await
    }

    /// DATABASE DEL. Asterisk answers success for a key that did not exist, too.
    pub async fn database_del(&mut self, family: &str, key: &str) -> Result<(), AgiError> {
        self.expect_one("DATABASE DEL", &[family, key]).await
    }

    /// VERBOSE: a line in Asterisk's log at `level` (1-4).
    pub async fn verbose(&mut self, message: &str, level: u8) -> Result<(), AgiError> {
        self.send("VERBOSE", &[message, &level.to_string()])
            .await
            .map(drop)
    }

    /// HANGUP of this channel. Asterisk then sends `HANGUP`; later commands follow the rules of
    /// a dead channel.
    pub async fn hangup(&mut self) -> Result<(), AgiError> {
        let reply = self.send("HANGUP", &[]).await?;
        if reply.result == "1" {
            self.saw_hangup();
        }
        Ok(())
    }

    async fn expect_one(&mut self, name: &'static str, args: &[&str]) -> Result<(), AgiError> {
        let reply = self.send(name, args).await?;
        if reply.result == "1" {
            Ok(())
        } else {
            Err(AgiError::Failed {
                command: name.to_string(),
                result: reply.result,
            })
        }
    }
}

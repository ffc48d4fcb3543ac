//! The session API a native handler uses: one command at a time, each answered before the next
//! is sent (Asterisk answers only the first of several commands that arrive in one write).
//!
//! Hangup: Asterisk sends an unsolicited `HANGUP` line when the channel goes away; it may arrive
//! before a reply, and a media command cut by the hangup answers `result=-1` just before it.
//! The session consumes the line wherever it comes, remembers it ([`Session::hung_up`]), and turns
//! a `-1` caused by it into [`AgiError::Hangup`]. Commands Asterisk still permits on a dead channel
//! keep working; the others fail with [`AgiError::DeadChannel`].

use crate::conn::Conn;
use crate::error::AgiError;
use crate::metrics::Metrics;
use agi::{
    ChannelStatus, Command, Event, GetDataResult, Header, Reply, ReplyParser, Response, Route,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

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

pub struct Session {
    conn: Conn,
    header: Header,
    request: Request,
    parser: ReplyParser,
    hung_up: bool,
    out: Vec<u8>,
    id: u64,
    peer: SocketAddr,
    command_timeout: Option<Duration>,
    hangup_probe: Duration,
    max_line_bytes: usize,
    metrics: Arc<Metrics>,
}

pub(crate) struct SessionParts {
    pub id: u64,
    pub peer: SocketAddr,
    pub command_timeout: Option<Duration>,
    pub hangup_probe: Duration,
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
            command_timeout: parts.command_timeout,
            hangup_probe: parts.hangup_probe,
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
    pub fn args(&self) -> &[String] {
        self.header.args()
    }
    /// An argument by position, starting at 1 like `agi_arg_1`.
    pub fn arg(&self, n: usize) -> Option<&str> {
        n.checked_sub(1)
            .and_then(|i| self.header.args().get(i))
            .map(String::as_str)
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
    /// This session's number in the server's log.
    pub fn id(&self) -> u64 {
        self.id
    }
    /// Asterisk's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }
    /// True once Asterisk has said `HANGUP`.
    pub fn hung_up(&self) -> bool {
        self.hung_up
    }

    /// Sends one command and waits for its final reply. `100 Trying...` (GOSUB) and `HANGUP`
    /// lines on the way are consumed; 510/511/520 become errors.
    pub async fn command(&mut self, cmd: &Command) -> Result<Reply, AgiError> {
        self.out.clear();
        cmd.encode_into(&mut self.out)?;
        self.exchange(cmd.name()).await
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
        let limit = self.command_timeout;
        let response =
            within_command_timeout(limit, || name.to_string(), self.read_response()).await?;
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
    /// `HANGUP` line (those are consumed and noted, as in [`Session::command`]).
    pub(crate) async fn relay(&mut self, line: &[u8], reply: &mut Vec<u8>) -> Result<(), AgiError> {
        self.out.clear();
        self.out.extend_from_slice(line);
        self.out.push(b'\n');
        self.conn.write_all(&self.out).await?;
        self.metrics.commands_sent.inc();
        let read = async {
            loop {
                let raw = self.conn.read_line().await?.ok_or(AgiError::Disconnected)?;
                match self.parser.push_line(raw)? {
                    Some(Event::Hangup) => {
                        if !self.hung_up {
                            self.metrics.hangups.inc();
                        }
                        self.hung_up = true;
                    }
                    Some(Event::Response(_)) => {
                        reply.extend_from_slice(raw);
                        if !raw.ends_with(b"\n") {
                            reply.push(b'\n');
                        }
                        return Ok::<(), AgiError>(());
                    }
                    None | Some(Event::Trying(_)) => {
                        reply.extend_from_slice(raw);
                        if !raw.ends_with(b"\n") {
                            reply.push(b'\n');
                        }
                    }
                }
            }
        };
        let limit = self.command_timeout;
        within_command_timeout(limit, || String::from_utf8_lossy(line).into_owned(), read).await
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
    /// end of the connection. Cancel-safe.
    pub(crate) async fn unsolicited(&mut self) -> Result<Unsolicited, AgiError> {
        let line = match self.conn.read_line().await? {
            None => return Ok(Unsolicited::Closed),
            Some(l) => l,
        };
        if line.strip_suffix(b"\n").unwrap_or(line) == b"HANGUP" {
            self.saw_hangup();
            Ok(Unsolicited::Hangup)
        } else {
            Err(agi::ReplyError::Malformed {
                line: String::from_utf8_lossy(line).into_owned(),
            }
            .into())
        }
    }

    async fn read_response(&mut self) -> Result<Response, AgiError> {
        loop {
            let line = self.conn.read_line().await?.ok_or(AgiError::Disconnected)?;
            match self.parser.push_line(line)? {
                None | Some(Event::Trying(_)) => {}
                Some(Event::Hangup) => self.saw_hangup(),
                Some(Event::Response(r)) => return Ok(r),
            }
        }
    }

    fn saw_hangup(&mut self) {
        if !self.hung_up {
            self.metrics.hangups.inc();
        }
        self.hung_up = true;
    }

    /// Consumes `HANGUP` lines that have arrived, waiting at most `wait` for one. Used after a
    /// `-1`, to tell a hangup from a plain failure. Any other line is left for the next reader.
    async fn probe_hangup(&mut self, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            while let Some(is_hangup) = self.conn.take_hangup_line() {
                if !is_hangup {
                    return;
                }
                self.saw_hangup();
            }
            if self.hung_up || self.conn.at_eof() {
                return;
            }
            if self.conn.fill_nonblocking() {
                continue;
            }
            match tokio::time::timeout_at(deadline, self.conn.fill()).await {
                Ok(Ok(())) => continue,
                _ => return,
            }
        }
    }

    /// A `-1` from a command that needs the channel: a hangup if Asterisk says so, else failure.
    async fn minus_one(&mut self, name: &str, reply: Reply) -> AgiError {
        if !self.hung_up {
            self.probe_hangup(self.hangup_probe).await;
        }
        if self.hung_up {
            AgiError::Hangup
        } else {
            AgiError::Failed {
                command: name.to_string(),
                result: reply.result,
            }
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
        self.send("HANGUP", &[]).await.map(drop)
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

/// Bounds a command's reply by `command_timeout_ms`, when one is configured (off by default:
/// a `Dial` through `EXEC` may last hours).
async fn within_command_timeout<T>(
    limit: Option<Duration>,
    command: impl FnOnce() -> String,
    read: impl std::future::Future<Output = Result<T, AgiError>>,
) -> Result<T, AgiError> {
    match limit {
        None => read.await,
        Some(limit) => tokio::time::timeout(limit, read)
            .await
            .map_err(|_| AgiError::Timeout {
                command: command(),
                timeout_ms: limit.as_millis() as u64,
            })?,
    }
}

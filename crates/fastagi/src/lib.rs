//! The FastAGI server: Asterisk connects (`AGI(agi://127.0.0.1/route,args)`), sends the session
//! header, and the route's native handler drives the call with AGI commands.
//!
//! Start reading at:
//! - [`Server`]: bind with a [`ServerConfig`], a [`Router`] and [`Metrics`], then
//!   [`Server::run_on_threads`] (one single-threaded runtime per core) or [`Server::run`] (the
//!   caller's runtime) until the [`Shutdown`] signal. Every limit is in [`ServerConfig`].
//! - [`Router`]: exact routes, `{name}` and `{*rest}` captures, a fallback.
//! - [`Handler`] and [`Session`]: what a native handler implements and the API it calls.
//! - [`builtin`]: the `health`, `example` and `bench` routes.
//!
//! What this crate never does: pipeline commands (Asterisk answers only the first of several in
//! one write), block a tokio worker, hold a connection it will not serve (over the limit,
//! disallowed network, unknown route or bad header: `failure` at once), or time out a command
//! that waits on the caller, media or an application unless configured to (a `Dial` can last
//! hours); see [`timeouts`].

pub mod builtin;
mod config;
mod conn;
mod error;
mod handler;
mod lines;
mod metrics;
mod router;
pub mod runtime;
pub mod script;
mod server;
mod session;
pub mod timeouts;

pub use config::{RouteSettings, ServerConfig, SessionLimit};
pub use error::AgiError;
pub use handler::Handler;
pub use metrics::{Metrics, SessionOutcome};
pub use router::{RouteError, Router};
pub use server::{RunSummary, Server, Shutdown, shutdown_channel};
pub use session::{Request, Session};

/// The README's Rust examples, compiled and run as doctests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExamples;

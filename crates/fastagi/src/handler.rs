//! Native handlers: async Rust that runs a session.
//!
//! ```
//! use fastagi::{AgiError, Handler, Session};
//!
//! struct Greeting;
//! impl Handler for Greeting {
//!     async fn call(&self, session: &mut Session) -> Result<(), AgiError> {
//!         session.answer().await?;
//!         session.stream_file("hello-world", "").await?;
//!         Ok(())
//!     }
//! }
//! ```
//!
//! A handler that returns `Ok` ends the session normally (AGISTATUS=SUCCESS unless the call hung
//! up). An error other than a hangup is logged and ends the session with `failure`
//! (AGISTATUS=FAILURE), so the dialplan can tell. A panic is caught and treated the same way.

use crate::error::AgiError;
use crate::session::Session;
use std::future::Future;
use std::pin::Pin;

pub trait Handler: Send + Sync + 'static {
    fn call(&self, session: &mut Session) -> impl Future<Output = Result<(), AgiError>> + Send;
}

pub(crate) type BoxedCall<'a> = Pin<Box<dyn Future<Output = Result<(), AgiError>> + Send + 'a>>;

/// The object-safe form the router stores.
pub(crate) trait DynHandler: Send + Sync + 'static {
    fn call_boxed<'a>(&'a self, session: &'a mut Session) -> BoxedCall<'a>;
}

impl<H: Handler> DynHandler for H {
    fn call_boxed<'a>(&'a self, session: &'a mut Session) -> BoxedCall<'a> {
        Box::pin(self.call(session))
    }
}

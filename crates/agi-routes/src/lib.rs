//! Native FastAGI routes that need Tandem's own services, registered by `tandem serve` beside
//! the built-in ones (`fastagi::builtin`, which need nothing):
//! - [`db`]: `db/get`, `db/put`, `db/del`, `db/deltree` on the key-value store, and the
//!   [`db::DatabaseIntercept`] that answers legacy scripts' `DATABASE` commands from it.
//! - [`dialparties`]: FreePBX's ring-group and Follow Me logic.
//! - [`registrar`]: `registrar/{aor}`, a registered user's contacts as a dial string.
//!
//! A route here is a [`fastagi::Handler`] holding the service it uses (a `kv::Store` is a cheap
//! clone). Never: blocks the session's runtime thread on disk (reads that miss memory go to the
//! blocking pool), or reads configuration itself: the binary builds routes and registers them.
//!
//! Start reading at `db.rs`: the module comment shows the dialplan side.

pub mod db;
pub mod dialparties;
pub mod registrar;

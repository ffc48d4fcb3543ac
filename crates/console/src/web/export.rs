//! Searches downloaded whole: `GET /api/calls?…&format=csv|jsonl` and
//! `GET /api/registrations?…&format=csv|jsonl` stream every row the search matches (the JSON
//! API's rows, in its order, with the columns of `cdr::export`) as CSV or JSON lines (crate
//! `exports`), without holding them: a reader pages along the search's keyset on a blocking
//! thread and hands the body over in chunks of [`EXPORT_CHUNK_BYTES`] through a queue of
//! [`EXPORT_CHUNKS_QUEUED`], so a million calls download in constant memory.
//!
//! Bounds: at most [`EXPORTS_AT_ONCE_MAX`] exports run at once (each holds one of the
//! console's database readers while it runs; more get 429); one stops after
//! [`EXPORT_ROWS_MAX`] rows; a client that reads nothing for [`EXPORT_STALL_MS`] is dropped.
//! An export that fails once its first chunk is sent can no longer change its status: its body
//! is cut off without the chunked encoding's last chunk, which every HTTP client reports as an
//! incomplete transfer, never as a complete file. A failure before (a bad database, no
//! database) is an ordinary JSON error with its status.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use exports::{Format, RowWriter};

use super::api::{ApiError, api_error};
use crate::calls::{Calls, CallsError};

/// Exports running at once.
pub const EXPORTS_AT_ONCE_MAX: usize = 2;
/// Rows of one export at most.
pub const EXPORT_ROWS_MAX: u64 = 10_000_000;
/// Bytes handed to the connection at a time.
pub const EXPORT_CHUNK_BYTES: usize = 64 << 10;
/// Chunks written ahead of the client at most.
pub const EXPORT_CHUNKS_QUEUED: usize = 4;
/// How long a client may leave a chunk unread before the export is dropped.
pub const EXPORT_STALL_MS: u64 = 30_000;

/// `format=` taken out of a query string: the format asked for, if any, and the rest for the
/// search's own parser (which refuses parameters it does not know).
pub(super) fn split_format(
    raw: Option<String>,
) -> Result<(Option<Format>, Option<String>), ApiError> {
    let Some(raw) = raw else {
        return Ok((None, None));
    };
    let mut format = None;
    let mut rest: Vec<&str> = Vec::new();
    for part in raw.split('&') {
        match part.strip_prefix("format=") {
            Some(v) => {
                let f = Format::parse(v)
                    .map_err(|e| api_error(StatusCode::BAD_REQUEST, format!("format: {e}")))?;
                format = Some(f);
            }
            None => rest.push(part),
        }
    }
    Ok((format, Some(rest.join("&"))))
}

/// The chunks of a body on their way to the connection.
type Chunk = Result<Vec<u8>, std::io::Error>;

/// An `io::Write` that hands the body to the response a chunk at a time, waiting at most
/// [`EXPORT_STALL_MS`] for the client to take one.
struct ChunkSink {
    buf: Vec<u8>,
    tx: tokio::sync::mpsc::Sender<Chunk>,
    rt: tokio::runtime::Handle,
    sent: bool,
}

impl ChunkSink {
    fn send(&mut self, chunk: Chunk) -> std::io::Result<()> {
        let stall = Duration::from_millis(EXPORT_STALL_MS);
        let tx = self.tx.clone();
        match self
            .rt
            .block_on(tokio::time::timeout(stall, tx.send(chunk)))
        {
            Ok(Ok(())) => {
                self.sent = true;
                Ok(())
            }
            Ok(Err(_)) => Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the client went away",
            )),
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the client read nothing for {EXPORT_STALL_MS} ms"),
            )),
        }
    }
}

impl Write for ChunkSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= EXPORT_CHUNK_BYTES {
            self.flush()?;
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(EXPORT_CHUNK_BYTES));
        self.send(Ok(chunk))
    }
}

/// Why an export stopped early.
#[derive(Debug, thiserror::Error)]
pub(super) enum ExportFail {
    #[error(transparent)]
    Cdr(#[from] cdr::CdrError),
    #[error(transparent)]
    Write(#[from] exports::ExportError),
}

/// The writer an export's rows go to.
pub(super) type Rows<'a> = RowWriter<&'a mut dyn Write>;

/// What an export writes: every row of its search, read from the store, into the writer.
pub(super) type Produce = Box<
    dyn FnOnce(&mut dyn cdr::CdrStore, &mut Rows<'_>) -> Result<cdr::export::Exported, ExportFail>
        + Send,
>;

/// Streams an export named `name` (`calls`, `registrations`) in `format`.
pub(super) async fn stream(
    calls: &Arc<Calls>,
    name: &'static str,
    format: Format,
    columns: &'static [&'static str],
    produce: Produce,
) -> Result<Response, ApiError> {
    let Some(permit) = calls.export_permit() else {
        return Err(api_error(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "{EXPORTS_AT_ONCE_MAX} exports are running already: try again when one has finished"
            ),
        ));
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Chunk>(EXPORT_CHUNKS_QUEUED);
    let rt = tokio::runtime::Handle::current();
    let reader = calls.clone();
    let err_tx = tx.clone();
    let task = tokio::spawn(async move {
        let _permit = permit;
        let r = reader
            .read(move |store| {
                let mut sink = ChunkSink {
                    buf: Vec::with_capacity(EXPORT_CHUNK_BYTES),
                    tx,
                    rt,
                    sent: false,
                };
                let r = {
                    let out: &mut dyn Write = &mut sink;
                    match RowWriter::new(out, format, columns) {
                        Ok(mut w) => produce(store, &mut w),
                        Err(e) => Err(ExportFail::from(e)),
                    }
                };
                match r {
                    Ok(done) => {
                        if done.cut {
                            tracing::info!(
                                export = name,
                                rows = done.rows,
                                "export stopped at its row limit"
                            );
                        }
                        if let Err(e) = sink.flush() {
                            tracing::info!(export = name, error = %e, "export stopped");
                        }
                        Ok(())
                    }
                    // Before anything was sent the failure is the answer's status; after, the
                    // body is cut off.
                    Err(ExportFail::Cdr(e)) if !sink.sent => Err(e),
                    Err(e) => {
                        tracing::info!(export = name, error = %e, "export stopped");
                        let _ = sink.send(Err(std::io::Error::other(e.to_string())));
                        Ok(())
                    }
                }
            })
            .await;
        if let Err(e) = r {
            let _ = err_tx.send(Err(std::io::Error::other(e.to_string()))).await;
            return Err(e);
        }
        Ok(())
    });
    // The first chunk, or the end: an export that fails before sending anything answers with
    // its error.
    let first = rx.recv().await;
    let first = match first {
        Some(Ok(chunk)) => Some(chunk),
        Some(Err(_)) | None => match task.await {
            Ok(Err(CallsError::NoDatabase(_))) => None,
            Ok(Err(e)) => return Err(e.into()),
            Err(e) => {
                return Err(api_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("the export's task failed: {e}"),
                ));
            }
            Ok(Ok(())) => None,
        },
    };
    let empty_header = || {
        let mut w = RowWriter::new(Vec::new(), format, columns).ok()?;
        Some(std::mem::take(w.get_mut()))
    };
    let head = first.or_else(empty_header).unwrap_or_default();
    let rest = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    let body = futures_util::stream::StreamExt::chain(
        futures_util::stream::iter([Ok::<_, std::io::Error>(head)]),
        rest,
    );
    let stamp = utc::format_us(now_us()).replace([':', '-'], "");
    let file = format!(
        "{name}-{}.{}",
        &stamp[..15.min(stamp.len())],
        format.extension()
    );
    Ok((
        [
            (header::CONTENT_TYPE, format.content_type().to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}\""),
            ),
            (header::CACHE_CONTROL, "no-store".to_string()),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

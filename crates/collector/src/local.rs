//! The local socket of a running collector (`collector.sock` in the data directory, mode 0600:
//! only the user `tandem serve` runs as, and root, can use it), through which `tandem cdr pcap`
//! on the collector's machine asks for a remote sensor's pcap: one JSON line
//! `{"sensor": NAME, "call": {archive columns}}`, answered by one JSON line (`{"bytes": N}` or
//! `{"error": TEXT}`) and then the N bytes of the pcap.

use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use crate::{CollectorError, CollectorHandle, PcapCall};

/// The socket's name in the data directory.
pub const LOCAL_SOCKET_FILE: &str = "collector.sock";
/// Longest request line.
const REQUEST_BYTES_MAX: usize = 64 << 10;
/// Local requests served at once.
const LOCAL_REQUESTS_MAX: usize = 16;
/// Time to send the request line.
const REQUEST_TIMEOUT_MS: u64 = 10_000;

#[derive(serde::Serialize, serde::Deserialize)]
struct Request {
    sensor: String,
    call: PcapCall,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Answer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub(crate) fn bind(path: &Path) -> Result<tokio::net::UnixListener, CollectorError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |source| CollectorError::Socket {
        path: path.display().to_string(),
        source,
    };
    if path.exists() {
        // One left by a collector that was killed: nothing answers on it.
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                "another collector serves this data directory",
            )));
        }
        std::fs::remove_file(path).map_err(err)?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    listener.set_nonblocking(true).map_err(err)?;
    tokio::net::UnixListener::from_std(listener).map_err(err)
}

pub(crate) async fn serve(listener: tokio::net::UnixListener, handle: CollectorHandle) {
    let permits = Arc::new(Semaphore::new(LOCAL_REQUESTS_MAX));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            continue;
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let _permit = permit;
            answer(stream, handle).await;
        });
    }
}

async fn answer(stream: tokio::net::UnixStream, handle: CollectorHandle) {
    let (rd, mut wr) = stream.into_split();
    let mut rd = tokio::io::BufReader::new(rd);
    let mut line = Vec::new();
    let read = tokio::time::timeout(Duration::from_millis(REQUEST_TIMEOUT_MS), async {
        let mut limited = tokio::io::AsyncReadExt::take(&mut rd, REQUEST_BYTES_MAX as u64);
        limited.read_until(b'\n', &mut line).await
    })
    .await;
    let result = match read {
        Ok(Ok(_)) => match serde_json::from_slice::<Request>(&line) {
            Ok(req) => handle
                .fetch_pcap(&req.sensor, req.call)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(format!("a request the collector cannot read: {e}")),
        },
        _ => Err("no request line".to_string()),
    };
    let (head, body) = match result {
        Ok(pcap) => (
            Answer {
                bytes: Some(pcap.len() as u64),
                error: None,
            },
            pcap,
        ),
        Err(e) => (
            Answer {
                bytes: None,
                error: Some(e),
            },
            Vec::new(),
        ),
    };
    let mut out = serde_json::to_vec(&head).unwrap_or_default();
    out.push(b'\n');
    let _ = wr.write_all(&out).await;
    let _ = wr.write_all(&body).await;
    let _ = wr.shutdown().await;
}

/// Asks the collector serving `socket` for `sensor`'s pcap of `call` (blocking; for `tandem cdr
/// pcap`). The error says what went wrong, including a collector that is not running.
pub fn fetch_pcap_local(
    socket: &Path,
    sensor: &str,
    call: &PcapCall,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let mut s = std::os::unix::net::UnixStream::connect(socket).map_err(|e| {
        format!(
            "no collector answers on {} ({e}): is `tandem serve` with a [collector] running here, as this user?",
            socket.display()
        )
    })?;
    s.set_read_timeout(Some(timeout)).ok();
    s.set_write_timeout(Some(timeout)).ok();
    let mut req = serde_json::to_vec(&Request {
        sensor: sensor.to_string(),
        call: call.clone(),
    })
    .map_err(|e| e.to_string())?;
    req.push(b'\n');
    s.write_all(&req)
        .map_err(|e| format!("asking the collector: {e}"))?;
    let mut rd = std::io::BufReader::new(s);
    let mut head = String::new();
    rd.read_line(&mut head)
        .map_err(|e| format!("reading the collector's answer: {e}"))?;
    let answer: Answer = serde_json::from_str(head.trim_end())
        .map_err(|e| format!("the collector's answer is not readable ({e}): {head:?}"))?;
    if let Some(e) = answer.error {
        return Err(e);
    }
    let n = answer.bytes.unwrap_or(0);
    let mut pcap = Vec::with_capacity(n.min(1 << 30) as usize);
    rd.take(n)
        .read_to_end(&mut pcap)
        .map_err(|e| format!("reading the pcap from the collector: {e}"))?;
    if pcap.len() as u64 != n {
        return Err(format!(
            "the collector sent {} of the pcap's {n} bytes",
            pcap.len()
        ));
    }
    Ok(pcap)
}

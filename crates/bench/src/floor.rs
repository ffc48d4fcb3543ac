//! The wire floor: a FastAGI server that only exchanges the benchmark's bytes. It reads the
//! header, writes the ten commands of the `bench` route one at a time, reads one reply line for
//! each, closes like Tandem does, and does nothing else: no parsing, routing, limits or metrics.
//! Whatever Tandem does above this costs the difference.

use clap::Args;
use std::net::SocketAddr;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[derive(Args, Debug)]
pub struct FloorArgs {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:4579")]
    pub listen: SocketAddr,
}

pub fn run(args: FloorArgs) -> anyhow::Result<()> {
    // The runtime `tandem serve` uses: a single-threaded runtime per core, each accepting on its
    // own SO_REUSEPORT socket. The difference to Tandem is then the work, not the scheduler.
    let mut threads = Vec::new();
    for _ in 0..fastagi::runtime::worker_count(0) {
        let listener = fastagi::runtime::reuseport_listener(args.listen)?;
        threads.push(std::thread::spawn(move || -> anyhow::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move { accept_loop(TcpListener::from_std(listener)?).await })
        }));
    }
    for t in threads {
        t.join().expect("floor worker panicked")?;
    }
    Ok(())
}

async fn accept_loop(listener: TcpListener) -> anyhow::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(exchange(stream));
    }
}

/// One session's bytes: header in, ten commands out with a reply line each, half-close, drain.
async fn exchange(stream: TcpStream) {
    let mut stream = BufReader::new(stream);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        if stream.read_until(b'\n', &mut line).await.unwrap_or(0) == 0 {
            return;
        }
        if line == b"\n" {
            break;
        }
    }
    let mut out = Vec::with_capacity(64);
    for cmd in fastagi::builtin::BENCH_COMMANDS {
        out.clear();
        out.extend_from_slice(cmd.as_bytes());
        out.push(b'\n');
        if stream.get_mut().write_all(&out).await.is_err() {
            return;
        }
        line.clear();
        if stream.read_until(b'\n', &mut line).await.unwrap_or(0) == 0 {
            return;
        }
    }
    let _ = stream.get_mut().shutdown().await;
    while stream.read_until(b'\n', &mut line).await.unwrap_or(0) > 0 {}
}

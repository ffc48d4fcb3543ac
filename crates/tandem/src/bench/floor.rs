//! The wire floor: a FastAGI server that only exchanges the benchmark's bytes. It reads the
//! header, writes the ten commands of the `bench` route one at a time, reads one reply line for
//! each, closes like Tandem does, and does nothing else: no parsing, routing, limits or metrics.
//! Whatever Tandem does above this costs the difference.

use clap::Args;
use std::net::SocketAddr;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

#[derive(Args, Debug)]
pub struct FloorArgs {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:4579")]
    pub listen: SocketAddr,
}

pub fn run(args: FloorArgs) -> anyhow::Result<()> {
    // The same runtime as `tandem serve`, so the difference is the work, not the scheduler.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(args.listen).await?;
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
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
                for cmd in fastagi::builtin::BENCH_COMMANDS {
                    let mut out = Vec::with_capacity(cmd.len() + 1);
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
            });
        }
    })
}

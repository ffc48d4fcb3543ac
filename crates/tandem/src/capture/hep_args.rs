//! `tandem capture`'s HEP options beside `--hep-listen`: the authentication key, the UDP
//! socket's buffer, and `--hep-send` for thin sensors; what they add to the [`SensorConfig`]
//! and to what a capture prints at its end.

use std::path::PathBuf;

use sensor::hep::{
    AuthKey, HEP_SOCKET_BUFFER_BYTES, HEP_TCP_CONNECTIONS_MAX, HEP_TCP_IDLE_TIMEOUT_S,
};
use sensor::hep_send::{HEP_SEND_CAPTURE_ID, HepSendConfig};
use sensor::{Report, SensorConfig};

/// A key given on the command line; `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(<{} bytes>)", self.0.len())
    }
}

fn secret(s: &str) -> Result<Secret, String> {
    if s.is_empty() {
        return Err(
            "the key is empty; leave the option out to accept packets without a key".into(),
        );
    }
    Ok(Secret(s.to_string()))
}

#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("hep_key").args(["hep_auth_key", "hep_auth_key_file"])))]
pub struct HepArgs {
    /// HEP authentication key (chunk 14). With --hep-listen, only packets that carry this key
    /// are analysed; a packet without it or with another is refused, counted
    /// (tandem_capture_hep_refused_total{reason="auth"}) and logged. Without a key, packets
    /// with or without one are accepted. With --hep-send, every packet carries it. A command
    /// line is visible to other users: prefer --hep-auth-key-file or the environment.
    #[arg(
        long,
        value_name = "KEY",
        value_parser = secret,
        env = "TANDEM_HEP_AUTH_KEY",
        hide_env_values = true
    )]
    pub hep_auth_key: Option<Secret>,
    /// The HEP authentication key read from FILE (one trailing line end is not part of it).
    #[arg(long, value_name = "FILE")]
    pub hep_auth_key_file: Option<PathBuf>,
    /// With --hep-listen: the UDP socket's receive buffer asked of the kernel, in MiB. Beyond
    /// net.core.rmem_max it needs CAP_NET_ADMIN (root); a smaller grant is logged. Datagrams the
    /// kernel still drops are counted (tandem_capture_hep_socket_drops_total).
    #[arg(long, value_name = "MIB", default_value_t = HEP_SOCKET_BUFFER_BYTES >> 20, requires = "hep_listen")]
    pub hep_socket_buffer_mib: usize,
    /// Thin sensor: forward the captured packets (--read or --interface) as HEP v3 to this
    /// collector (another Tandem's --hep-listen, heplify-server, Homer): every UDP datagram
    /// (SIP, RTP, RTCP, T.38, ...) and every SIP message over TCP as one packet. UDP without a
    /// prefix. Alone it only forwards (no calls, CDRs or archive here); add --hep-send-analyse
    /// to analyse here as well. Files are sent as fast as the collector takes them (TCP's flow
    /// control paces them; see --hep-send-max-pps for UDP); a live capture never waits: what
    /// the 32 MiB queue cannot hold is dropped and counted. Over TCP it reconnects with backoff
    /// (0.1 s doubling to 10 s) and the queue holds packets meanwhile.
    #[arg(
        long,
        value_name = "[udp://|tcp://]HOST:PORT",
        value_parser = HepSendConfig::parse,
        conflicts_with = "hep_listen"
    )]
    pub hep_send: Option<HepSendConfig>,
    /// With --hep-send: the capture agent id (chunk 12) of every packet.
    #[arg(long, value_name = "N", default_value_t = HEP_SEND_CAPTURE_ID, requires = "hep_send")]
    pub hep_capture_id: u32,
    /// With --hep-send: also analyse here (calls, CDRs, --archive, --json) as without it.
    #[arg(long, requires = "hep_send")]
    pub hep_send_analyse: bool,
    /// With --hep-send: send at most this many packets per second (0: no cap). For a UDP
    /// collector that drops what comes faster than it reads.
    #[arg(long, value_name = "N", default_value_t = 0, requires = "hep_send")]
    pub hep_send_max_pps: u64,
}

impl HepArgs {
    /// True when the capture only forwards (`--hep-send` without `--hep-send-analyse`).
    pub fn forward_only(&self) -> bool {
        self.hep_send.is_some() && !self.hep_send_analyse
    }

    /// Adds the HEP settings to `config`; a forwarding-only capture stores no CDRs.
    pub fn apply(&self, config: &mut SensorConfig) {
        let hep = &mut config.hep;
        hep.auth_key = match (&self.hep_auth_key, &self.hep_auth_key_file) {
            (Some(k), _) => Some(AuthKey::Key(k.0.clone().into_bytes())),
            (None, Some(f)) => Some(AuthKey::File(f.clone())),
            (None, None) => None,
        };
        hep.socket_buffer_bytes = self.hep_socket_buffer_mib.saturating_mul(1 << 20);
        hep.send = self.hep_send.clone().map(|mut s| {
            s.capture_id = self.hep_capture_id;
            s.analyse = self.hep_send_analyse;
            s.max_pps = self.hep_send_max_pps;
            s
        });
        if self.forward_only() {
            config.cdr = None;
        }
    }
}

/// The listening line of a HEP capture.
pub fn listening(addr: std::net::SocketAddr) -> String {
    format!(
        "listening for HEP v3 on udp://{addr} and tcp://{addr} \
         (at most {HEP_TCP_CONNECTIONS_MAX} TCP senders, idle ones closed after {HEP_TCP_IDLE_TIMEOUT_S} s)"
    )
}

/// What HEP in and out did, for stderr at the end; an error when a capture of files could not
/// forward everything (a script must know its upload is incomplete).
pub fn report(r: &Report, from_files: bool) -> anyhow::Result<()> {
    if let Some(h) = &r.hep {
        eprintln!("HEP: {h}");
    }
    let Some(sent) = &r.hep_send else {
        return Ok(());
    };
    eprintln!(
        "{} read in {:.3} s; {sent}",
        sensor::table::plural(r.packets, "packet"),
        r.elapsed.as_secs_f64()
    );
    let lost = sent.stats.lost();
    if from_files && lost > 0 {
        anyhow::bail!(
            "{lost} packets were not forwarded to {}: is the collector listening and reachable?",
            sent.url
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Command {
        #[command(flatten)]
        args: crate::capture::Args,
    }

    fn from_flags(argv: &[&str]) -> SensorConfig {
        Command::try_parse_from(std::iter::once("capture").chain(argv.iter().copied()))
            .unwrap()
            .args
            .to_config()
            .unwrap()
    }

    /// `[capture]`'s HEP keys in `tandem serve` mean what the same flags mean to `tandem
    /// capture`, defaults included.
    #[test]
    fn capture_keys_are_the_hep_flags() {
        let thin = crate::config::CaptureConfig {
            interface: "eth1".into(),
            hep_send: "tcp://collector.example:9060".into(),
            hep_capture_id: 9,
            hep_send_max_pps: 5_000,
            hep_auth_key: "-starts-like-an-option".into(),
            ..Default::default()
        };
        let config = thin.to_sensor().unwrap();
        let flags = from_flags(&[
            "--interface",
            "eth1",
            "--hep-send",
            "tcp://collector.example:9060",
            "--hep-capture-id",
            "9",
            "--hep-send-max-pps",
            "5000",
            "--hep-auth-key=-starts-like-an-option",
        ]);
        assert_eq!(format!("{config:?}"), format!("{flags:?}"));
        let send = config.hep.send.as_ref().unwrap();
        assert_eq!(send.url(), "tcp://collector.example:9060");
        assert_eq!(
            (send.capture_id, send.max_pps, send.analyse),
            (9, 5_000, false)
        );
        assert_eq!(
            config.hep.auth_key,
            Some(AuthKey::Key(b"-starts-like-an-option".to_vec()))
        );
        // Forwarding only: no CDRs here.
        assert!(config.cdr.is_none());
        assert!(
            !format!("{config:?}").contains("starts-like"),
            "the key in Debug"
        );

        let analysing = crate::config::CaptureConfig {
            hep_send_analyse: true,
            ..thin
        };
        let config = analysing.to_sensor().unwrap();
        assert!(config.hep.send.as_ref().unwrap().analyse);
        assert!(config.cdr.is_some());

        let listen = crate::config::CaptureConfig {
            hep_listen: "127.0.0.1:9060".into(),
            hep_auth_key_file: "/etc/tandem/hep.key".into(),
            hep_socket_buffer_mib: 8,
            ..Default::default()
        };
        let config = listen.to_sensor().unwrap();
        let flags = from_flags(&[
            "--hep-listen",
            "127.0.0.1:9060",
            "--hep-auth-key-file",
            "/etc/tandem/hep.key",
            "--hep-socket-buffer-mib",
            "8",
        ]);
        assert_eq!(format!("{config:?}"), format!("{flags:?}"));
        assert_eq!(
            config.hep.auth_key,
            Some(AuthKey::File("/etc/tandem/hep.key".into()))
        );
        assert_eq!(config.hep.socket_buffer_bytes, 8 << 20);
        assert!(config.hep.send.is_none());
    }

    #[test]
    fn hep_flags_that_cannot_work_are_refused() {
        let refused = |argv: &[&str]| {
            Command::try_parse_from(std::iter::once("capture").chain(argv.iter().copied()))
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        let e = refused(&["--hep-listen", "127.0.0.1:9060", "--hep-send", "a:1"]);
        assert!(e.contains("cannot be used with"), "{e}");
        let e = refused(&[
            "--read",
            "x.pcap",
            "--hep-auth-key",
            "a",
            "--hep-auth-key-file",
            "k",
        ]);
        assert!(e.contains("cannot be used with"), "{e}");
        let e = refused(&["--read", "x.pcap", "--hep-send", "sctp://a:1"]);
        assert!(e.contains("udp:// and tcp://"), "{e}");
        let e = refused(&["--read", "x.pcap", "--hep-send-analyse"]);
        assert!(e.contains("--hep-send"), "{e}");
        let e = refused(&["--read", "x.pcap", "--hep-auth-key", ""]);
        assert!(e.contains("empty"), "{e}");
    }
}

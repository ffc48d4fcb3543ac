//! Live capture (`[capture] interface`): the interface exists, this process may open raw packet
//! sockets (root or CAP_NET_RAW), and an installed systemd unit grants the service
//! CAP_NET_RAW and AF_PACKET (the three lines `deploy/tandem.service` leaves commented).

use crate::Finding;
use crate::unit::UnitGrants;
use std::path::Path;

const GROUP: &str = "capture";

/// The drop-in that lets the service capture, as the commands that install it.
pub const CAPTURE_DROP_IN: &str = "mkdir -p /etc/systemd/system/tandem.service.d\n\
printf '[Service]\\nAmbientCapabilities=CAP_NET_RAW\\nCapabilityBoundingSet=CAP_NET_RAW\\nRestrictAddressFamilies=AF_PACKET\\n' > /etc/systemd/system/tandem.service.d/capture.conf\n\
systemctl daemon-reload && systemctl restart tandem";

/// Whether network interface `name` exists (under `sys_class_net`, `/sys/class/net`).
pub fn check_interface(name: &str, sys_class_net: &Path) -> Finding {
    let check = format!("interface {name}");
    if sys_class_net.join(name).exists() {
        return Finding::ok(GROUP, check, "exists");
    }
    let mut names: Vec<String> = std::fs::read_dir(sys_class_net)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let found = if names.is_empty() {
        format!(
            "no interface {name} ({} lists none)",
            sys_class_net.display()
        )
    } else {
        format!("no interface {name}; this machine has {}", names.join(", "))
    };
    Finding::fail(
        GROUP,
        check,
        found,
        "set [capture] interface to one of this machine's interfaces (`ip -br link`)",
    )
}

/// Whether this process may open a raw packet socket: one is opened (bound to nothing, so it
/// receives nothing) and closed at once. `Err` is the system's answer.
pub fn raw_socket_allowed() -> Result<(), std::io::Error> {
    // SAFETY: socket(2) with constant arguments; the descriptor is closed below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is the socket just opened, closed once.
    unsafe { libc::close(fd) };
    Ok(())
}

/// Raw sockets for this process now, and for the service when a unit is installed. Without a
/// unit, what this process may do is what a `tandem serve` started the same way may do, so its
/// refusal is a failure; with one, the unit decides and this process's refusal is only said.
pub fn check_raw_sockets(
    now: Result<(), std::io::Error>,
    unit: Option<&UnitGrants>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let check = "raw packet sockets";
    match (&now, unit) {
        (Ok(()), _) => out.push(Finding::ok(
            GROUP,
            check,
            "this process may open them (root or CAP_NET_RAW)",
        )),
        (Err(e), None) => out.push(Finding::fail(
            GROUP,
            check,
            format!("this process may not open them: {e}"),
            "run tandem as root, or give the binary the capability: setcap cap_net_raw+ep \"$(command -v tandem)\"",
        )),
        (Err(e), Some(_)) => out.push(Finding::ok(
            GROUP,
            check,
            format!("this process may not open them ({e}); the service's unit decides below"),
        )),
    }
    if let Some(g) = unit {
        let mut missing = Vec::new();
        if !g.has_capability("CAP_NET_RAW") {
            missing.push("CAP_NET_RAW");
        }
        if !g.address_families.contains("AF_PACKET") {
            missing.push("AF_PACKET");
        }
        let check = "service unit";
        out.push(if missing.is_empty() {
            Finding::ok(
                GROUP,
                check,
                format!("grants CAP_NET_RAW and AF_PACKET ({})", g.source),
            )
        } else {
            Finding::fail(
                GROUP,
                check,
                format!("does not grant {} ({})", missing.join(" or "), g.source),
                CAPTURE_DROP_IN,
            )
        });
    }
    out
}

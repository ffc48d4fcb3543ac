//! SIPp (Debian's `sip-tester`) as the phones and the trunks around the emulated PBX: the
//! scenarios, written for this emulator, and a child process that is stopped when dropped.
//!
//! Phones place calls from a CSV injection file (caller number, dialled number, caller name);
//! an answered call is held for SIPp's `-d` and hung up by the phone. Trunks answer (SIPp's
//! own `uas`), refuse with 486, or ring until cancelled.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The phone's INVITE, with SDP; `[field0]` is the caller, `[field1]` the number dialled,
/// `[field2]` the caller's name.
const INVITE: &str = r#"  <send retrans="500">
    <![CDATA[
INVITE sip:[field1]@[remote_ip]:[remote_port] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: "[field2]" <sip:[field0]@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
To: <sip:[field1]@[remote_ip]:[remote_port]>
Call-ID: [call_id]
CSeq: 1 INVITE
Contact: <sip:[field0]@[local_ip]:[local_port]>
Max-Forwards: 70
User-Agent: Yealink SIP-T46S 66.86.0.15
Content-Type: application/sdp
Content-Length: [len]

v=0
o=- 53655765 2353687637 IN IP[local_ip_type] [local_ip]
s=-
c=IN IP[media_ip_type] [media_ip]
t=0 0
m=audio [media_port] RTP/AVP 8 0 101
a=rtpmap:8 PCMA/8000
a=rtpmap:0 PCMU/8000
a=rtpmap:101 telephone-event/8000
a=sendrecv
    ]]>
  </send>
"#;

/// The ACK of a refusal (or of the 487 after a CANCEL); `BRANCH` is the INVITE's.
const ACK_REFUSAL: &str = r#"  <send>
    <![CDATA[
ACK sip:[field1]@[remote_ip]:[remote_port] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=BRANCH
From: "[field2]" <sip:[field0]@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
[last_To:]
Call-ID: [call_id]
CSeq: 1 ACK
Max-Forwards: 70
Content-Length: 0
    ]]>
  </send>
"#;

fn with_invite(skeleton: &str, invite_branch: &str) -> String {
    skeleton.replace("INVITE\n", INVITE).replace(
        "ACK_REFUSAL\n",
        &ACK_REFUSAL.replace("BRANCH", invite_branch),
    )
}

/// A phone: INVITE with SDP, then either a 200 (ACK, hold for `-d`, BYE) or a refusal (ACK).
pub fn phone() -> String {
    with_invite(PHONE, "[branch-12]")
}

/// A phone that gives up after a ring: INVITE, 180, CANCEL, 487, ACK.
pub fn cancelling_phone() -> String {
    with_invite(CANCELLING_PHONE, "[branch-6]")
}

const PHONE: &str = r#"<?xml version="1.0" encoding="ISO-8859-1" ?>
<scenario name="phone">
INVITE
  <recv response="100" optional="true" />
  <recv response="180" optional="true" />
  <recv response="183" optional="true" />
  <recv response="404" optional="true" next="refused" />
  <recv response="486" optional="true" next="refused" />
  <recv response="503" optional="true" next="refused" />
  <recv response="200" rtd="true" rrs="true" />
  <send>
    <![CDATA[
ACK [next_url] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: "[field2]" <sip:[field0]@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
[last_To:]
Call-ID: [call_id]
CSeq: 1 ACK
Contact: <sip:[field0]@[local_ip]:[local_port]>
Max-Forwards: 70
Content-Length: 0
    ]]>
  </send>
  <pause />
  <send retrans="500">
    <![CDATA[
BYE [next_url] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: "[field2]" <sip:[field0]@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
[last_To:]
Call-ID: [call_id]
CSeq: 2 BYE
Max-Forwards: 70
Content-Length: 0
    ]]>
  </send>
  <recv response="200" crlf="true" next="done" />
  <label id="refused" />
ACK_REFUSAL
  <label id="done" />
</scenario>
"#;

/// A trunk that refuses every call with 486 Busy Here.
pub const BUSY_TRUNK: &str = r#"<?xml version="1.0" encoding="ISO-8859-1" ?>
<scenario name="busy trunk">
  <recv request="INVITE" />
  <send>
    <![CDATA[
SIP/2.0 486 Busy Here
[last_Via:]
[last_From:]
[last_To:];tag=[pid]SIPpTag01[call_number]
[last_Call-ID:]
[last_CSeq:]
Content-Length: 0
    ]]>
  </send>
  <recv request="ACK" />
</scenario>
"#;

const CANCELLING_PHONE: &str = r#"<?xml version="1.0" encoding="ISO-8859-1" ?>
<scenario name="cancelling phone">
INVITE
  <recv response="100" optional="true" />
  <recv response="180" />
  <send>
    <![CDATA[
CANCEL sip:[field1]@[remote_ip]:[remote_port] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch-3]
From: "[field2]" <sip:[field0]@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
To: <sip:[field1]@[remote_ip]:[remote_port]>
Call-ID: [call_id]
CSeq: 1 CANCEL
Max-Forwards: 70
Content-Length: 0
    ]]>
  </send>
  <recv response="200" />
  <recv response="487" />
ACK_REFUSAL
</scenario>
"#;

/// A trunk that rings until the caller cancels: 180, then 200 to the CANCEL and 487.
pub const RINGING_TRUNK: &str = r#"<?xml version="1.0" encoding="ISO-8859-1" ?>
<scenario name="ringing trunk">
  <recv request="INVITE">
    <action>
      <ereg regexp="[0-9]+" search_in="hdr" header="CSeq:" check_it="true" assign_to="1" />
    </action>
  </recv>
  <send>
    <![CDATA[
SIP/2.0 180 Ringing
[last_Via:]
[last_From:]
[last_To:];tag=[pid]SIPpTag01[call_number]
[last_Call-ID:]
[last_CSeq:]
Contact: <sip:[local_ip]:[local_port]>
Content-Length: 0
    ]]>
  </send>
  <recv request="CANCEL" />
  <send>
    <![CDATA[
SIP/2.0 200 OK
[last_Via:]
[last_From:]
[last_To:];tag=[pid]SIPpTag01[call_number]
[last_Call-ID:]
[last_CSeq:]
Content-Length: 0
    ]]>
  </send>
  <send>
    <![CDATA[
SIP/2.0 487 Request Terminated
[last_Via:]
[last_From:]
[last_To:];tag=[pid]SIPpTag01[call_number]
[last_Call-ID:]
CSeq: [$1] INVITE
Content-Length: 0
    ]]>
  </send>
  <recv request="ACK" />
</scenario>
"#;

/// One call a phone places: its number, the number dialled, its name.
#[derive(Debug, Clone)]
pub struct Dial {
    pub caller: String,
    pub dialled: String,
    pub name: String,
}

/// SIPp's injection file for `dials`, in order.
pub fn injection_file(path: &Path, dials: &[Dial]) -> std::io::Result<()> {
    let mut text = String::from("SEQUENTIAL\n");
    for d in dials {
        text.push_str(&format!("{};{};{}\n", d.caller, d.dialled, d.name));
    }
    std::fs::write(path, text)
}

/// True when SIPp is on PATH.
pub fn available() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join("sipp").is_file()))
}

/// A SIPp process, stopped (SIGKILL) and reaped when dropped.
pub struct Sipp {
    child: Child,
    pub name: String,
}

impl Sipp {
    /// Starts `sipp` with `args` in `dir`, its screen off and its error log in `dir`.
    pub fn spawn(dir: &Path, name: &str, args: &[String]) -> std::io::Result<Sipp> {
        let child = Command::new("sipp")
            .current_dir(dir)
            .args(args)
            .args(["-nostdin", "-trace_err", "-error_file"])
            .arg(dir.join(format!("{name}-errors.log")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Sipp {
            child,
            name: name.to_string(),
        })
    }

    /// Waits up to `timeout`: SIPp's exit status (0: every call succeeded), `None` on timeout.
    pub fn wait(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status.code().unwrap_or(-1));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Sipp {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Writes `text` as `dir/name` and returns the path.
pub fn scenario_file(dir: &Path, name: &str, text: &str) -> std::io::Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Waits up to `timeout` until something (a SIPp just started) has bound UDP `addr`: binding
/// it ourselves then fails. True when it has.
pub fn wait_bound(addr: std::net::SocketAddr, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if std::net::UdpSocket::bind(addr).is_err() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

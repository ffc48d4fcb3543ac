//! A FreePBX system as its dialplan and AGI scripts see it: extensions with one PJSIP device
//! each (`AMPUSER/<ext>/device`, `DEVICE/<ext>/dial`), call waiting on (`CW/<ext>`), idle hints
//! in `ext-local`, one registered contact per device. For the dialparties tests and bench.

use crate::channel::Channel;

/// The contact `PJSIP_DIAL_CONTACTS(<ext>)` gives for an extension of [`extensions`].
pub fn contact(ext: &str) -> String {
    format!("PJSIP/{ext}/sip:{ext}@192.0.2.7:5060")
}

/// A channel on a system with these extensions; caller ID 2000 "Alice".
pub fn extensions(exts: &[String]) -> Channel {
    let mut channel = Channel::new("", "");
    for e in exts {
        channel
            .astdb
            .insert(format!("/AMPUSER/{e}/device"), e.clone());
        channel
            .astdb
            .insert(format!("/DEVICE/{e}/dial"), format!("PJSIP/{e}"));
        channel.astdb.insert(format!("/CW/{e}"), "ENABLED".into());
        channel.pjsip_contacts.insert(e.clone(), contact(e));
        channel
            .extension_states
            .insert(format!("{e}@ext-local"), "NOT_INUSE".into());
    }
    channel
}

/// macro-dial calling a ring group: the strategy, ring time 20 s, options `tr`, the members.
pub fn ring_group(channel: &mut Channel, method: &str, members: &[String]) {
    for (name, value) in [
        ("RingGroupMethod", method.to_string()),
        ("ARG1", "20".into()),
        ("ARG2", "tr".into()),
        ("ARG3", members.join("-")),
    ] {
        channel.variables.insert(name.into(), value);
    }
}

/// `n` extensions from 100.
pub fn numbers(n: usize) -> Vec<String> {
    (0..n).map(|i| (100 + i).to_string()).collect()
}

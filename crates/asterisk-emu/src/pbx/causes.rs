//! What the caller hears when the trunk refuses: Asterisk turns the trunk's final status into a
//! hangup cause (res_pjsip.c, `ast_sip_hangup_sip2cause`) and the cause back into the status
//! it sends the phone (chan_pjsip.c, `hangup_cause2sip`; a cause without a status becomes 603,
//! res_pjsip_session.c's default). The round trip is not the identity: 487 and 405 come back
//! as 500, 600 as 486, 401/407 as 403. The tables are written from those facts.

/// Asterisk's hangup causes (causes.h) the tables use.
mod cause {
    pub const UNALLOCATED: u16 = 1;
    pub const NO_ROUTE_DESTINATION: u16 = 3;
    pub const USER_BUSY: u16 = 17;
    pub const NO_USER_RESPONSE: u16 = 18;
    pub const NO_ANSWER: u16 = 19;
    pub const CALL_REJECTED: u16 = 21;
    pub const NUMBER_CHANGED: u16 = 22;
    pub const REDIRECTED: u16 = 23;
    pub const DESTINATION_OUT_OF_ORDER: u16 = 27;
    pub const INVALID_NUMBER_FORMAT: u16 = 28;
    pub const FACILITY_REJECTED: u16 = 29;
    pub const NORMAL_UNSPECIFIED: u16 = 31;
    pub const CONGESTION: u16 = 34;
    pub const NORMAL_TEMPORARY_FAILURE: u16 = 41;
    pub const BEARERCAPABILITY_NOTAVAIL: u16 = 58;
    pub const RECOVERY_ON_TIMER_EXPIRE: u16 = 102;
    pub const INTERWORKING: u16 = 127;
    pub const FAILURE: u16 = 38;
}

/// The hangup cause Asterisk records for a trunk's final status.
pub fn sip_to_cause(status: u16) -> u16 {
    use cause::*;
    match status {
        302 => REDIRECTED,
        401 | 403 | 407 | 603 => CALL_REJECTED,
        404 | 485 | 604 => UNALLOCATED,
        408 => NO_USER_RESPONSE,
        409 => NORMAL_TEMPORARY_FAILURE,
        410 => NUMBER_CHANGED,
        420 => NO_ROUTE_DESTINATION,
        480 | 483 => NO_ANSWER,
        484 => INVALID_NUMBER_FORMAT,
        486 | 600 => USER_BUSY,
        488 | 606 => BEARERCAPABILITY_NOTAVAIL,
        501 => FACILITY_REJECTED,
        502 => DESTINATION_OUT_OF_ORDER,
        503 => CONGESTION,
        504 => RECOVERY_ON_TIMER_EXPIRE,
        400..=499 => INTERWORKING,
        500..=599 => FAILURE,
        _ => NORMAL_UNSPECIFIED,
    }
}

/// The status Asterisk sends a phone whose channel hangs up with `cause`.
pub fn cause_to_sip(cause: u16) -> u16 {
    use cause::*;
    match cause {
        REDIRECTED => 302,
        UNALLOCATED | NO_ROUTE_DESTINATION | 2 => 404,
        CONGESTION | 42 => 503,
        NO_USER_RESPONSE => 408,
        NO_ANSWER | 20 | NORMAL_UNSPECIFIED => 480,
        CALL_REJECTED => 403,
        NUMBER_CHANGED => 410,
        INVALID_NUMBER_FORMAT => 484,
        USER_BUSY => 486,
        FAILURE | INTERWORKING => 500,
        FACILITY_REJECTED => 501,
        66 => 503,
        DESTINATION_OUT_OF_ORDER => 502,
        BEARERCAPABILITY_NOTAVAIL => 488,
        _ => 603,
    }
}

/// The status a phone sees when the trunk answers the PBX's INVITE with `status`.
pub fn relayed_status(status: u16) -> u16 {
    cause_to_sip(sip_to_cause(status))
}

#[cfg(test)]
mod tests {
    use super::relayed_status;

    #[test]
    fn round_trips_as_asterisk_does() {
        for (trunk, phone) in [
            (486, 486),
            (404, 404),
            (503, 503),
            (480, 480),
            (403, 403),
            (487, 500),
            (600, 486),
            (407, 403),
            (504, 603),
            (488, 488),
        ] {
            assert_eq!(relayed_status(trunk), phone, "trunk {trunk}");
        }
    }
}

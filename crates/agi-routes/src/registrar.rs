//! `registrar/{aor}`: where a registered user can be reached, for the dialplan, from the
//! registrar's memory (no disk, no SIP):
//!
//! ```text
//! same => n,AGI(agi://127.0.0.1/registrar/${EXTEN})            ; endpoint named like the user
//! same => n,AGI(agi://127.0.0.1/registrar/${EXTEN},phones)     ; or through endpoint "phones"
//! same => n,GotoIf($[${TANDEM_CONTACT_COUNT} = 0]?unavailable)
//! same => n,Dial(${TANDEM_CONTACTS},30)
//! ```
//!
//! `TANDEM_CONTACTS` is `PJSIP/<endpoint>/<contact URI>` per binding, `&`-joined, highest q
//! first; `TANDEM_CONTACT_COUNT` how many. The AOR is `user@domain`, a SIP URI, or a bare
//! `user`: the user in the one domain served, or else in the one domain it has bindings in
//! (`registrar::Registrar::find`). A bare user bound in several domains finds nothing: the
//! count is 0, `TANDEM_AMBIGUOUS` names the domains and the log says so; it is empty otherwise.
//! A contact whose URI holds a character that Dial would split on (`&`, `,`, `)`, a line end) is
//! left out and logged: it could not be dialled as one target.

use fastagi::{AgiError, Handler, RouteError, Router, Session};
use registrar::{Found, Registrar};
use std::sync::Arc;

pub const CONTACTS_VARIABLE: &str = "TANDEM_CONTACTS";
pub const COUNT_VARIABLE: &str = "TANDEM_CONTACT_COUNT";
pub const AMBIGUOUS_VARIABLE: &str = "TANDEM_AMBIGUOUS";

/// The route's handler: holds the running registrar.
pub struct Location {
    pub registrar: Arc<Registrar>,
}

/// The dial string of `uris` through `endpoint`, and how many went in.
pub fn dial_string<'a>(endpoint: &str, uris: impl IntoIterator<Item = &'a str>) -> (String, usize) {
    let mut out = String::new();
    let mut n = 0;
    for uri in uris {
        if uri.contains(['&', ',', ')', '(', '\r', '\n', '"']) {
            tracing::warn!(
                uri,
                "a contact that Dial would split is left out of TANDEM_CONTACTS"
            );
            continue;
        }
        if n > 0 {
            out.push('&');
        }
        out.push_str("PJSIP/");
        out.push_str(endpoint);
        out.push('/');
        out.push_str(uri);
        n += 1;
    }
    (out, n)
}

impl Handler for Location {
    async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
        let query = s.capture("aor").unwrap_or("").to_string();
        let (aor, bindings, ambiguous) = match self.registrar.find(&query) {
            Found::Aor { aor, bindings } => (Some(aor), bindings, String::new()),
            Found::Nothing => (None, Vec::new(), String::new()),
            Found::Ambiguous {
                user,
                domains,
                bound_domains,
            } => {
                tracing::warn!(
                    user,
                    domains = %domains.join(" "),
                    bound_domains,
                    "registrar/{{aor}}: the user has bindings in several domains; ask for user@domain"
                );
                (None, Vec::new(), domains.join(" "))
            }
        };
        let endpoint = match s.arg(1).filter(|a| !a.is_empty()) {
            Some(e) => e.to_string(),
            None => aor
                .as_deref()
                .and_then(registrar::location::user_of)
                .unwrap_or(&query)
                .to_string(),
        };
        if endpoint.contains(['&', ',', '/', ')', '(']) {
            return Err(AgiError::Handler(
                format!("registrar: endpoint {endpoint:?} cannot stand in a dial string").into(),
            ));
        }
        let (dial, n) = dial_string(&endpoint, bindings.iter().map(|b| b.uri.as_str()));
        s.set_variable(CONTACTS_VARIABLE, &dial).await?;
        s.set_variable(COUNT_VARIABLE, &n.to_string()).await?;
        // Always set, so that a value from an earlier lookup on the channel does not linger.
        s.set_variable(AMBIGUOUS_VARIABLE, &ambiguous).await
    }
}

/// Registers `registrar/{aor}` on `router`.
pub fn add(router: Router, registrar: Arc<Registrar>) -> Result<Router, RouteError> {
    router.route("registrar/{aor}", Location { registrar })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dial_string_joins_in_order_and_leaves_out_what_dial_would_split() {
        let (d, n) = dial_string(
            "1001",
            [
                "sip:1001@192.0.2.1:5060",
                "sip:a&b@x",
                "sip:1001@[2001:db8::1]:5062;transport=tcp",
            ],
        );
        assert_eq!(n, 2);
        assert_eq!(
            d,
            "PJSIP/1001/sip:1001@192.0.2.1:5060&PJSIP/1001/sip:1001@[2001:db8::1]:5062;transport=tcp"
        );
    }
}

//! A configured PostgreSQL connection: it connects within the timeout, and the server's version
//! is shown. The connection string's password is never printed: the finding names the user,
//! host, port and database only.

use crate::{Finding, within};
use postgres::config::Host;
use std::time::Duration;

const GROUP: &str = "databases";

/// `user@host:port/dbname` of a parsed connection string (no password).
pub fn target(config: &postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            };
            let port = config.get_ports().get(i).or(config.get_ports().first());
            format!("{host}:{}", port.copied().unwrap_or(5432))
        })
        .collect();
    let hosts = if hosts.is_empty() {
        "localhost:5432".to_string()
    } else {
        hosts.join(",")
    };
    format!(
        "{}@{hosts}/{}",
        config.get_user().unwrap_or("(your login name)"),
        config.get_dbname().or(config.get_user()).unwrap_or("")
    )
}

/// Connects with `conninfo` (libpq-style, as `setting` gives it) and asks the server's version.
pub fn check_connection(setting: &str, conninfo: &str, timeout: Duration) -> Finding {
    let check = setting.to_string();
    let mut config: postgres::Config = match conninfo.parse() {
        Ok(c) => c,
        Err(e) => {
            return Finding::fail(
                GROUP,
                check,
                format!("not a valid connection string: {e}"),
                format!(
                    "write {setting} as `host=HOST port=5432 user=USER dbname=DB password=...`"
                ),
            );
        }
    };
    let who = target(&config);
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(timeout);
    }
    let outcome = within(timeout + Duration::from_millis(500), move || {
        let mut client = config.connect(postgres::NoTls)?;
        let row = client.query_one("SHOW server_version", &[])?;
        Ok::<String, postgres::Error>(row.get(0))
    });
    match outcome {
        Some(Ok(version)) => Finding::ok(
            GROUP,
            check,
            format!("{who}: connected, PostgreSQL {version}"),
        ),
        Some(Err(e)) => {
            let code = e.code().map(|c| c.code().to_string());
            let fix = match code.as_deref() {
                // invalid_password, invalid_authorization_specification
                Some("28P01" | "28000") => format!(
                    "check the user and password in {setting}, and that pg_hba.conf lets this host in"
                ),
                // invalid_catalog_name
                Some("3D000") => format!(
                    "create the database: runuser -u postgres -- createdb -O {} {}",
                    who.split('@').next().unwrap_or("USER"),
                    who.rsplit('/').next().unwrap_or("DB")
                ),
                _ => format!(
                    "check that PostgreSQL runs and listens there (`systemctl status postgresql`, \
                     listen_addresses), and the host and port in {setting}"
                ),
            };
            let mut text = e.to_string();
            if let Some(source) = std::error::Error::source(&e) {
                text = format!("{text}: {source}");
            }
            Finding::fail(GROUP, check, format!("{who}: {text}"), fix)
        }
        None => Finding::fail(
            GROUP,
            check,
            format!("{who}: no answer within {} ms", timeout.as_millis()),
            format!(
                "check that PostgreSQL runs and that a firewall lets this host reach it ({setting})"
            ),
        ),
    }
}

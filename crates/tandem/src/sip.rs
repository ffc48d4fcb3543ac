//! `tandem sip ...`: the registrar's users (digest credentials) and bindings.
//!
//! `user list` and `bindings` read the store file and work while `tandem serve` runs; `user
//! add`, `del` and `import` open the store for writing and are refused while another process
//! has it (stop `serve`, change, start: bindings and their remaining time survive).

use anyhow::Context;
use clap::Subcommand;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub(crate) data_dir: crate::DataDir,
    #[command(subcommand)]
    cmd: SipCommand,
}

#[derive(Subcommand, Debug)]
enum SipCommand {
    /// Digest users of the registrar (the store keeps HA1s, never a password).
    #[command(subcommand)]
    User(UserCommand),
    /// Live bindings: every AOR, or one (`1001`, `1001@example.com` or `sip:1001@example.com`).
    Bindings { aor: Option<String> },
}

#[derive(Subcommand, Debug)]
enum UserCommand {
    /// Add or replace USER; the password is read from stdin (one line).
    Add {
        user: String,
        #[arg(long, default_value = "tandem")]
        realm: String,
        /// Read the password from stdin (required: a password never goes on a command line).
        #[arg(long, required = true)]
        password_stdin: bool,
    },
    /// Remove USER; exit 1 if there was none.
    Del {
        user: String,
        #[arg(long, default_value = "tandem")]
        realm: String,
    },
    /// List users with the algorithms each can use.
    List {
        #[arg(long)]
        realm: Option<String>,
    },
    /// Import the `type=auth` sections of an Asterisk pjsip.conf (userpass and md5_cred).
    Import {
        #[arg(long, value_name = "FILE")]
        pjsip: PathBuf,
        /// Realm for sections that set none (an md5_cred is only valid in the realm it was
        /// made for: Asterisk's default is `asterisk`).
        #[arg(long, default_value = "tandem")]
        realm: String,
    },
}

fn open_rw(dir: &Path) -> anyhow::Result<kv::Store> {
    crate::db::open_rw(
        dir,
        "`tandem sip user list` and `tandem sip bindings` (bindings and their remaining time \
         survive the restart)",
    )
}

/// The registrar's entries under `family`, read from the file (works while `serve` runs).
fn read_tree(dir: &Path, family: &str) -> anyhow::Result<Vec<(String, String)>> {
    let file = dir.join(kv::FILE_NAME);
    if !file.exists() {
        return Ok(Vec::new());
    }
    let store = match kv::ReadOnlyStore::open_namespace(&file, registrar::users::NAMESPACE) {
        Ok(s) => s,
        // No registrar namespace yet: nothing registered, nobody added.
        Err(_) => return Ok(Vec::new()),
    };
    Ok(store
        .tree(Some(family), None)?
        .into_iter()
        .map(|(k, v)| (k, v.to_string_lossy()))
        .collect())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = &args.data_dir.path;
    let mut out = std::io::stdout().lock();
    match args.cmd {
        SipCommand::User(UserCommand::Add { user, realm, .. }) => {
            let mut password = String::new();
            std::io::stdin().read_to_string(&mut password)?;
            let password = password.lines().next().unwrap_or("").to_string();
            registrar::users::add(&open_rw(dir)?, &realm, &user, &password)?;
            writeln!(
                out,
                "User {user} in realm {realm} stored (HA1 for MD5, SHA-256, SHA-512-256)."
            )?;
        }
        SipCommand::User(UserCommand::Del { user, realm }) => {
            if !registrar::users::del(&open_rw(dir)?, &realm, &user)? {
                eprintln!("no user {user} in realm {realm}");
                std::process::exit(1);
            }
            writeln!(out, "User {user} in realm {realm} removed.")?;
        }
        SipCommand::User(UserCommand::List { realm }) => {
            let users = registrar::users::parse_entries(read_tree(dir, "user")?);
            let mut n = 0;
            for (r, user, algs) in users {
                if realm.as_deref().is_some_and(|want| want != r) {
                    continue;
                }
                let algs: Vec<&str> = algs.iter().map(|a| a.name()).collect();
                writeln!(out, "{r:<20} {user:<24} {}", algs.join(","))?;
                n += 1;
            }
            writeln!(out, "{n} users.")?;
        }
        SipCommand::User(UserCommand::Import { pjsip, realm }) => {
            let text = std::fs::read_to_string(&pjsip)
                .with_context(|| format!("reading {}", pjsip.display()))?;
            let (n, notes) = registrar::users::import_pjsip(&open_rw(dir)?, &text, &realm)
                .with_context(|| format!("importing {}", pjsip.display()))?;
            for note in &notes {
                eprintln!("{}: {note}", pjsip.display());
            }
            let (file, skipped) = (pjsip.display(), notes.len());
            writeln!(
                out,
                "Imported {n} users from {file} ({skipped} sections skipped)."
            )?;
        }
        SipCommand::Bindings { aor } => {
            let now = registrar::now_ms();
            let query = aor.as_deref().map(registrar::location::AorQuery::parse);
            let list =
                registrar::location::stored_bindings(read_tree(dir, "aor")?, query.as_ref(), now);
            for (name, b) in &list {
                let q = b
                    .q_milli
                    .map_or("-".to_string(), |q| format!("{:.3}", q as f64 / 1000.0));
                let (uri, left, from, ua) = (&b.uri, b.remaining_s(now), &b.source, &b.user_agent);
                writeln!(
                    out,
                    "{name}\t{uri}\texpires={left}s\tq={q}\tfrom={from}\tua={ua}"
                )?;
            }
            writeln!(out, "{} bindings.", list.len())?;
        }
    }
    out.flush()?;
    Ok(())
}

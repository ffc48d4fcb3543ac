//! `tandem user ...`: the web console's users and their API tokens. Works while `tandem serve`
//! runs: the accounts file (console.sqlite3 in the data directory) is shared with the server,
//! which sees a change at the next request.

use clap::Subcommand;
use console::{Accounts, Role, accounts::accounts_file};
use std::io::{BufRead, IsTerminal, Write};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub(crate) data_dir: crate::DataDir,
    #[command(subcommand)]
    cmd: UserCommand,
}

#[derive(Subcommand, Debug)]
enum UserCommand {
    /// Add a user. The password is asked for twice on the terminal, or read as the first line
    /// of stdin with --password-stdin.
    Add {
        name: String,
        /// admin: everything; viewer: read-only pages.
        #[arg(long, value_parser = ["admin", "viewer"], default_value = "viewer")]
        role: String,
        #[arg(long)]
        password_stdin: bool,
    },
    /// Set a user's password: their sessions and API tokens end, and their failed-login
    /// counters are cleared.
    Passwd {
        name: String,
        #[arg(long)]
        password_stdin: bool,
    },
    /// Clear a user's failed-login counters, so that they sign in again without waiting out
    /// the delays (a running `tandem serve` applies it at their next attempt).
    Unlock { name: String },
    /// Delete a user with their sessions and tokens.
    Del { name: String },
    /// List the users.
    List,
    /// Create an API token for NAME and print it once (only its hash is kept). Scripts send
    /// it as `Authorization: Bearer TOKEN` to /api/*, with NAME's role.
    Token {
        name: String,
        /// What the token is for (shown by `tokens`).
        #[arg(long, default_value = "")]
        label: String,
    },
    /// List API tokens (of NAME, or all).
    Tokens { name: Option<String> },
    /// Revoke an API token by its id (from `tokens`).
    Revoke { id: String },
}

fn read_password(from_stdin: bool) -> anyhow::Result<String> {
    if from_stdin || !std::io::stdin().is_terminal() {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        let p = line.trim_end_matches(['\r', '\n']).to_owned();
        anyhow::ensure!(!p.is_empty(), "no password on stdin");
        return Ok(p);
    }
    let first = rpassword::prompt_password("Password: ")?;
    let again = rpassword::prompt_password("Password again: ")?;
    anyhow::ensure!(first == again, "the two passwords differ; nothing changed");
    Ok(first)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir.path)?;
    let accounts = Accounts::open(&accounts_file(&args.data_dir.path))?;
    let mut out = std::io::stdout().lock();
    match args.cmd {
        UserCommand::Add {
            name,
            role,
            password_stdin,
        } => {
            let role: Role = role.parse()?;
            let password = read_password(password_stdin)?;
            accounts.add_user(&name, role, &password)?;
            eprintln!("added {role} {name}");
        }
        UserCommand::Passwd {
            name,
            password_stdin,
        } => {
            let password = read_password(password_stdin)?;
            accounts.set_password(&name, &password)?;
            eprintln!(
                "password of {name} changed; their sessions and API tokens ended, their failed logins forgotten"
            );
        }
        UserCommand::Unlock { name } => {
            accounts.unlock(&name)?;
            eprintln!("failed logins of {name} forgotten: they may sign in again at once");
        }
        UserCommand::Del { name } => {
            accounts.delete_user(&name)?;
            eprintln!("deleted {name} with their sessions and tokens");
        }
        UserCommand::List => {
            for u in accounts.users()? {
                writeln!(out, "{}\t{}", u.name, u.role)?;
            }
        }
        UserCommand::Token { name, label } => {
            let (info, token) = accounts.new_token(&name, &label)?;
            writeln!(out, "{token}")?;
            eprintln!(
                "token {} for {name}: shown once, keep it now (revoke with `tandem user revoke {}`)",
                info.id, info.id
            );
        }
        UserCommand::Tokens { name } => {
            for t in accounts.tokens(name.as_deref())? {
                let used = t.last_used_s.map_or("never used".to_owned(), utc::format_s);
                writeln!(
                    out,
                    "{}\t{}\t{}\t{}\t{}",
                    t.id,
                    t.user,
                    utc::format_s(t.created_s),
                    used,
                    t.label
                )?;
            }
        }
        UserCommand::Revoke { id } => {
            anyhow::ensure!(accounts.revoke_token(&id)?, "no API token with id {id:?}");
            eprintln!("token {id} revoked");
        }
    }
    Ok(())
}

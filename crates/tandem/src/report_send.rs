//! `tandem report send-now`: the daily report of `[reports]`, sent at once (to check the SMTP
//! settings, or to send a day again).

use std::path::PathBuf;

use anyhow::Context;

use crate::config::Config;

#[derive(clap::Subcommand, Debug)]
pub enum ReportCommand {
    /// Sends the daily report now: each group's last `email_days` days up to the end of
    /// yesterday (UTC), to `email_to` (or `--to`).
    SendNow(SendNowArgs),
}

#[derive(clap::Args, Debug)]
pub struct SendNowArgs {
    /// The configuration: `[reports]`, the `[alerts.action.NAME]` it sends with, the groups
    /// and where the calls are stored.
    #[arg(
        long,
        short,
        value_name = "FILE",
        env = "TANDEM_CONFIG",
        default_value = "tandem.toml"
    )]
    pub config: PathBuf,
    /// The data directory, as serve's (overrides kv.data_dir).
    #[arg(long, value_name = "DIR", env = "TANDEM_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Send to this address instead of email_to (repeat for several).
    #[arg(long, value_name = "ADDRESS")]
    pub to: Vec<String>,
}

pub fn run(command: ReportCommand) -> anyhow::Result<()> {
    match command {
        ReportCommand::SendNow(args) => {
            let mut config = Config::load(&args.config)?;
            if let Some(d) = &args.data_dir {
                config.kv.data_dir = d.clone();
            }
            if !args.to.is_empty() {
                config.reports.email_to = args.to.clone();
            }
            if config.reports.email_to.is_empty() {
                anyhow::bail!(
                    "[reports] email_to is empty in {}: set the recipients there, or give --to ADDRESS",
                    args.config.display()
                );
            }
            let daily = crate::serve::daily_report(&config)?
                .context("the daily report has no SMTP settings")?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_secs() as i64;
            let sent = rt.block_on(daily.send(now))?;
            println!(
                "sent the daily report of {} to {} {} ({} {}, {} calls)",
                sent.day,
                sent.recipients,
                if sent.recipients == 1 {
                    "recipient"
                } else {
                    "recipients"
                },
                sent.groups,
                if sent.groups == 1 { "group" } else { "groups" },
                sent.calls
            );
            Ok(())
        }
    }
}

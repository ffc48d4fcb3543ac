//! `tandem db ...`: read and write the key-value store, exchange it with Asterisk's astdb.
//!
//! Reading commands (get, show, export-astdb, backup) read the file directly and work while
//! `tandem serve` has the store open; writing commands open the store for writing and are
//! refused while another process has it.

use anyhow::Context;
use clap::Subcommand;
use kv::{Options, ReadOnlyStore, Store};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub(crate) data_dir: crate::DataDir,
    #[command(subcommand)]
    cmd: DbCommand,
}

#[derive(Subcommand, Debug)]
enum DbCommand {
    /// Print the value of FAMILY/KEY alone on stdout; exit 1 if there is none.
    Get { family: String, key: String },
    /// Set FAMILY/KEY to VALUE; exits 0 only once the write is on disk.
    Put {
        family: String,
        key: String,
        value: String,
    },
    /// Delete FAMILY/KEY; exit 1 if it did not exist.
    Del { family: String, key: String },
    /// Delete FAMILY, or FAMILY/KEYTREE, by whole path segments; exit 1 if nothing matched.
    Deltree {
        family: String,
        keytree: Option<String>,
    },
    /// Print entries like Asterisk's `database show`: all, FAMILY, or FAMILY KEYTREE.
    Show {
        family: Option<String>,
        keytree: Option<String>,
    },
    /// Add every entry of an Asterisk astdb.sqlite3 (existing keys are replaced).
    #[command(name = "import-astdb")]
    ImportAstdb { file: PathBuf },
    /// Write the astdb families as an Asterisk astdb.sqlite3 (FILE must not exist), readable
    /// by its owner only (0600) unless --group is given.
    #[command(name = "export-astdb")]
    ExportAstdb {
        file: PathBuf,
        /// Let the members of GROUP (Asterisk's, a name or a gid) read the file: 0640 of that
        /// group. This process must belong to GROUP or run as root.
        #[arg(long, value_name = "GROUP")]
        group: Option<String>,
    },
    /// Copy the whole store to FILE (must not exist) with SQLite's online backup. With --all,
    /// FILE is a directory (must not exist) that receives the store, the console's accounts,
    /// the metrics history and the console's alert rules: what a package upgrade saves first.
    Backup {
        file: PathBuf,
        /// Back up every database but the CDRs into the directory FILE.
        #[arg(long)]
        all: bool,
    },
}

fn store_file(dir: &Path) -> PathBuf {
    dir.join(kv::FILE_NAME)
}

/// The store in `dir` opened for writing by a command that makes a change. While another
/// process (a running `tandem serve`) holds it, the error says to stop that process and names
/// `readers`, the commands of the same family that work meanwhile.
pub fn open_rw(dir: &Path, readers: &str) -> anyhow::Result<Store> {
    // A command makes one commit: preallocating the WAL would write 18 MiB of zeros for it.
    let options = Options {
        wal_preallocate: false,
        ..Options::default()
    };
    match Store::open_dir(dir, options) {
        Err(kv::KvError::Locked { lock, .. }) => anyhow::bail!(
            "the key-value store in {} is held by another process, most likely a running \
             `tandem serve` (lock file {}): this command changes it, so stop that process, run \
             the command, then start it again; {readers} work while it runs",
            dir.display(),
            lock.display()
        ),
        r => r.with_context(|| format!("opening the key-value store in {}", dir.display())),
    }
}

/// What `tandem db` offers while `serve` runs.
const DB_READERS: &str = "`tandem db get`, `show`, `export-astdb` and `backup`";

fn open_ro(dir: &Path) -> anyhow::Result<ReadOnlyStore> {
    ReadOnlyStore::open(store_file(dir))
        .with_context(|| format!("reading the key-value store in {}", dir.display()))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = &args.data_dir.path;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match args.cmd {
        DbCommand::Get { family, key } => {
            if !store_file(dir).exists() {
                eprintln!(
                    "no key-value store in {} (see --data-dir); {}/{} not found",
                    dir.display(),
                    family,
                    key
                );
                std::process::exit(1);
            }
            match open_ro(dir)?.get(&family, &key)? {
                Some(v) => {
                    out.write_all(v.as_bytes())?;
                    out.write_all(b"\n")?;
                    out.flush()?;
                }
                None => {
                    eprintln!("Database entry not found: /{family}/{key}");
                    std::process::exit(1);
                }
            }
        }
        DbCommand::Put { family, key, value } => {
            let store = open_rw(dir, DB_READERS)?;
            store
                .put_with(&family, &key, value, kv::Durability::Sync)?
                .wait()?;
            // Dropping the last handle stops the writer after folding the WAL into the file.
            drop(store);
        }
        DbCommand::Del { family, key } => {
            let store = open_rw(dir, DB_READERS)?;
            let existed = store.del(&family, &key)?;
            drop(store);
            if existed {
                writeln!(out, "Database entry removed.")?;
            } else {
                eprintln!("Database entry does not exist.");
                std::process::exit(1);
            }
        }
        DbCommand::Deltree { family, keytree } => {
            let store = open_rw(dir, DB_READERS)?;
            let n = store.deltree(Some(&family), keytree.as_deref())?;
            drop(store);
            if n == 0 {
                // As `del`: nothing there to delete is exit status 1.
                eprintln!("Database entries do not exist.");
                std::process::exit(1);
            } else {
                writeln!(out, "{n} database entries removed.")?;
            }
        }
        DbCommand::Show { family, keytree } => {
            let entries = open_ro(dir)?.tree(family.as_deref(), keytree.as_deref())?;
            for (k, v) in &entries {
                // Asterisk's format: "%-50s: %-25s".
                writeln!(out, "{:<50}: {:<25}", k, v.to_string_lossy())?;
            }
            writeln!(out, "{} results found.", entries.len())?;
        }
        DbCommand::ImportAstdb { file } => {
            let n = open_rw(dir, DB_READERS)?
                .import_astdb(&file)
                .with_context(|| format!("importing {}", file.display()))?;
            writeln!(out, "Imported {n} entries from {}.", file.display())?;
        }
        DbCommand::ExportAstdb { file, group } => {
            let access = match &group {
                Some(g) => filemode::Access::group(g)
                    .with_context(|| format!("--group {g}: choose a group this user is in"))?,
                None => filemode::Access::Private,
            };
            let n = open_ro(dir)?
                .export_astdb_with(&file, &access)
                .with_context(|| format!("exporting to {}", file.display()))?;
            writeln!(out, "Exported {n} entries to {}.", file.display())?;
        }
        DbCommand::Backup { file, all: true } => {
            let copied = backup_all(dir, &file)?;
            writeln!(
                out,
                "Backed up {} from {} to {}.",
                copied.join(", "),
                dir.display(),
                file.display()
            )?;
        }
        DbCommand::Backup { file, all: false } => {
            open_ro(dir)?
                .backup(&file)
                .with_context(|| format!("backing up to {}", file.display()))?;
            writeln!(
                out,
                "Backed up {} to {}.",
                store_file(dir).display(),
                file.display()
            )?;
        }
    }
    out.flush()?;
    Ok(())
}

/// The files of the data directory `backup --all` saves: the store, the console's accounts, the
/// metrics history (SQLite, copied online) and the rules edited in the console (copied). Not
/// the CDR database: it can hold millions of calls, and has its own retention.
const BACKED_UP: [(&str, bool); 4] = [
    (kv::FILE_NAME, true),
    ("console.sqlite3", true),
    ("history.sqlite3", true),
    (crate::alerts::CONSOLE_RULES_FILE, false),
];

/// `tandem db backup --all`: every file of [`BACKED_UP`] present in `dir` into the new directory
/// `dest` (its owner's alone), with `backup.txt` saying what and from which Tandem. The names of
/// the files copied.
fn backup_all(dir: &Path, dest: &Path) -> anyhow::Result<Vec<&'static str>> {
    if dest.exists() {
        anyhow::bail!("{} exists: name a new directory", dest.display());
    }
    filemode::create_dir_all(dest, &filemode::Access::Private)
        .with_context(|| format!("creating {}", dest.display()))?;
    let mut copied = Vec::new();
    for (name, sqlite) in BACKED_UP {
        let src = dir.join(name);
        if !src.is_file() {
            continue;
        }
        let to = dest.join(name);
        let context = || format!("backing up {} to {}", src.display(), to.display());
        if sqlite {
            kv::backup_sqlite_file(&src, &to).with_context(context)?;
        } else {
            let mut from = std::fs::File::open(&src).with_context(context)?;
            let mut into =
                filemode::create_new(&to, &filemode::Access::Private).with_context(context)?;
            std::io::copy(&mut from, &mut into).with_context(context)?;
            into.sync_all().with_context(context)?;
        }
        copied.push(name);
    }
    if copied.is_empty() {
        anyhow::bail!(
            "nothing to back up in {} (see --data-dir): none of {}",
            dir.display(),
            BACKED_UP.map(|(n, _)| n).join(", ")
        );
    }
    let note = format!(
        "Backed up by tandem {} at {} from {}: {}\n\
         To roll back: README, \"Rolling back\".\n",
        env!("CARGO_PKG_VERSION"),
        utc::format_s(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        ),
        dir.display(),
        copied.join(", ")
    );
    let mut f = filemode::create_new(&dest.join("backup.txt"), &filemode::Access::Private)?;
    f.write_all(note.as_bytes())?;
    f.sync_all()?;
    Ok(copied)
}

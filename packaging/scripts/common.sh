# Shared by the .deb's and the .rpm's maintainer scripts: packaging/build puts this file at the
# top of each. POSIX sh; runs as root, before or after dpkg/rpm has placed the files.

# The service's system user and group, and the asterisk group when Asterisk is installed, so
# Tandem reads what Asterisk's group may (FreePBX's AGI scripts, /etc/freepbx.conf).
tandem_add_user() {
    if ! getent group tandem >/dev/null; then
        groupadd --system tandem
    fi
    if ! getent passwd tandem >/dev/null; then
        useradd --system --gid tandem --home-dir /var/lib/tandem --no-create-home \
            --shell /usr/sbin/nologin --comment "Tandem" tandem
    fi
    if getent group asterisk >/dev/null && ! id -nG tandem | tr ' ' '\n' | grep -qx asterisk; then
        usermod -a -G asterisk tandem
    fi
}

# The data directory (kept on remove), and the configuration readable by the service alone.
tandem_own_files() {
    if [ ! -d /var/lib/tandem ]; then
        install -d -o tandem -g tandem -m 0750 /var/lib/tandem
    fi
    chgrp tandem /etc/tandem /etc/tandem/tandem.toml
    chmod 0750 /etc/tandem
    chmod 0640 /etc/tandem/tandem.toml
}

# Before a version replaces another, with the installed binary: an online backup of the store,
# the console's accounts, the metrics history and the console's rules into
# /var/lib/tandem/backup/NAME, replacing the previous one only once the new one is complete.
# NAME is pre-upgrade when a newer version comes, pre-downgrade when an older one does: a
# rollback keeps the pre-upgrade backup it is about to restore (README, "Rolling back"). A
# failed backup stops the upgrade, with nothing changed; TANDEM_SKIP_BACKUP=1 goes on without.
tandem_backup() {
    name=$1
    [ "${TANDEM_SKIP_BACKUP:-}" = 1 ] && return 0
    [ -x /usr/bin/tandem ] || return 0
    [ -e /var/lib/tandem/kv.sqlite3 ] || [ -e /var/lib/tandem/console.sqlite3 ] || return 0
    dir=/var/lib/tandem/backup
    rm -rf "$dir/$name.new"
    if TANDEM_DATA_DIR=/var/lib/tandem /usr/bin/tandem db backup --all "$dir/$name.new" >/dev/null; then
        rm -rf "$dir/$name"
        mv "$dir/$name.new" "$dir/$name"
        echo "tandem: backup before the change of version in $dir/$name (README, \"Rolling back\")"
    else
        rm -rf "$dir/$name.new"
        echo "tandem: the backup before the change of version failed (above); nothing was changed." >&2
        echo "tandem: fix it and try again, or go on without one: TANDEM_SKIP_BACKUP=1" >&2
        return 1
    fi
}

# Whether systemd runs this system (not in a chroot or a container without it).
tandem_systemd_runs() {
    [ -d /run/systemd/system ]
}

//! The user's home directory as libpq 15 finds it (`pqGetHomeDirectory`): `HOME` unless it is
//! unset or empty, else the home of the effective user's passwd entry. `~/.pgpass`,
//! `~/.pg_service.conf` and `~/.postgresql/` are looked for there, so all three must use this
//! one rule: a process started without `HOME` (a cron job, a service unit without `User=`)
//! still finds its files where libpq finds them.

use std::ffi::OsString;
use std::path::PathBuf;

/// The home directory, given the value of `HOME` (`None` when unset).
pub(crate) fn dir_from(home: Option<OsString>) -> Option<PathBuf> {
    home.filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(passwd_home)
}

/// The home directory of this process (its `HOME`, else its passwd entry's).
pub(crate) fn dir() -> Option<PathBuf> {
    dir_from(std::env::var_os("HOME"))
}

fn passwd_home() -> Option<PathBuf> {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|u| u.dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The effective user's home as `getent` reads the passwd database, independently of nix.
    fn getent_home() -> PathBuf {
        let uid = nix::unistd::geteuid().to_string();
        let out = std::process::Command::new("getent")
            .args(["passwd", &uid])
            .output()
            .unwrap();
        let line = String::from_utf8(out.stdout).unwrap();
        PathBuf::from(line.trim_end().split(':').nth(5).unwrap())
    }

    /// As libpq 15 (checked with strace on psql 15: `env -u HOME` and `HOME=` both look for
    /// `/root/.pgpass` when run as root). Before, `~/.pgpass` and `~/.postgresql/` were read
    /// from `HOME` only: without it there was no password file and no default certificate.
    #[test]
    fn an_unset_or_empty_home_is_the_passwd_entrys() {
        assert_eq!(dir_from(None), Some(getent_home()));
        assert_eq!(dir_from(Some(OsString::new())), Some(getent_home()));
        assert_eq!(
            dir_from(Some("/srv/app".into())),
            Some(PathBuf::from("/srv/app"))
        );
    }
}

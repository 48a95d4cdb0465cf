//! The local PostgreSQL installation: where its binaries are, which OS user runs the server, and
//! a cached `initdb` template that makes new clusters cheap.

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

use crate::Error;

/// Bump when the template's `initdb` options change, so stale templates are not reused.
const TEMPLATE_VERSION: u32 = 1;

/// How to install PostgreSQL, for error messages.
pub const INSTALL_HINT: &str = "install PostgreSQL 15 server binaries (Debian/Ubuntu: `apt-get install postgresql-15`), \
     or point SLIPSTREAM_PG_BINDIR at the directory holding initdb and postgres";

/// A PostgreSQL installation and the OS user its server runs as.
///
/// ```no_run
/// let install = slipstream_testkit::Install::find()?;
/// println!("{} in {}", install.version()?, install.bindir().display());
/// # Ok::<(), slipstream_testkit::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Install {
    bindir: PathBuf,
    owner: Owner,
}

/// The OS user that owns data directories and runs `initdb`/`postgres`. PostgreSQL refuses to
/// run as root, so as root we switch to the `postgres` user.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owner {
    uid: u32,
    gid: u32,
    switch: bool,
}

impl Install {
    /// Finds the binaries: `$SLIPSTREAM_PG_BINDIR`, then `pg_config --bindir`, then
    /// `/usr/lib/postgresql/<newest>/bin`.
    ///
    /// ```no_run
    /// // SLIPSTREAM_PG_BINDIR=/usr/lib/postgresql/16/bin picks one of several installations.
    /// let install = slipstream_testkit::Install::find()?;
    /// assert!(install.bindir().join("initdb").exists());
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn find() -> Result<Install, Error> {
        Ok(Install {
            bindir: find_bindir()?,
            owner: Owner::detect()?,
        })
    }

    /// The directory holding `initdb`, `postgres`, `pg_ctl`, `psql`.
    ///
    /// ```no_run
    /// let install = slipstream_testkit::Install::find()?;
    /// assert!(install.bindir().join("postgres").exists());
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn bindir(&self) -> &Path {
        &self.bindir
    }

    /// A command for one of the installation's binaries (`pg_basebackup`, `pgbench`, ...),
    /// run as the server's OS user.
    ///
    /// ```no_run
    /// let cluster = slipstream_testkit::Cluster::start()?;
    /// let status = cluster.install().command("pgbench")
    ///     .args(["-i", "-s", "1", "-h", "127.0.0.1", "-p", &cluster.port().to_string()])
    ///     .args(["-U", "postgres", "postgres"])
    ///     .status()
    ///     .expect("pgbench runs");
    /// assert!(status.success());
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bindir.join(program));
        self.owner.apply(&mut cmd);
        cmd.env("LC_ALL", "C");
        cmd
    }

    pub(crate) fn owner(&self) -> Owner {
        self.owner
    }

    /// The server's version line as `postgres --version` prints it, e.g.
    /// `postgres (PostgreSQL) 15.4` (the whole line, not only the major version).
    ///
    /// ```no_run
    /// let install = slipstream_testkit::Install::find()?;
    /// assert!(install.version()?.starts_with("postgres (PostgreSQL) "));
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn version(&self) -> Result<String, Error> {
        let out = run(
            self.command("postgres").arg("--version"),
            "postgres --version",
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// A pristine data directory made by `initdb` once and reused: copying it is much faster
    /// than running `initdb` for every cluster. Safe against concurrent test processes: it is
    /// built under a unique name and renamed into place.
    pub(crate) fn template(&self) -> Result<PathBuf, Error> {
        let base = base_dir()?;
        let key = self.bindir.to_string_lossy().replace('/', "_");
        let template = base.join(format!("template-v{TEMPLATE_VERSION}{key}"));
        if template.join("PG_VERSION").exists() {
            return Ok(template);
        }
        let staging = tempfile::Builder::new()
            .prefix("template-staging-")
            .tempdir_in(&base)
            .map_err(|e| Error::io("could not create a staging directory for initdb", e))?;
        self.owner.chown(staging.path())?;
        let data = staging.path().join("data");
        run(
            self.command("initdb").arg("-D").arg(&data).args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ]),
            "initdb",
        )?;
        match std::fs::rename(&data, &template) {
            Ok(()) => Ok(template),
            // Another process won the race; its template is as good as ours.
            Err(_) if template.join("PG_VERSION").exists() => Ok(template),
            Err(e) => Err(Error::io(
                format!(
                    "could not move the initdb template to {}",
                    template.display()
                ),
                e,
            )),
        }
    }

    /// Copies the template into `dest` (which must not exist), owned by the server's user;
    /// `prepare` runs on the copy before it takes `dest`'s name.
    ///
    /// `dest` appears whole or not at all: the copy is made in a sibling directory named by
    /// [`copy_prefix`] and renamed into place once `cp` and `prepare` are done. A process
    /// killed mid-copy (Ctrl-C on `slipstream db start`) leaves that sibling, which no later
    /// start uses; its `cp`, which would otherwise write on for a while as an orphan, dies with
    /// it, and holds the sibling's [`COPY_LOCK`] until it has. [`remove_interrupted_copies`]
    /// clears such leftovers.
    pub(crate) fn copy_template(
        &self,
        dest: &Path,
        prepare: impl FnOnce(&Path) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let template = self.template()?;
        let parent = dest.parent().unwrap_or(Path::new("."));
        let staging = tempfile::Builder::new()
            .prefix(&copy_prefix(dest))
            .tempdir_in(parent)
            .map_err(|e| {
                Error::io(
                    format!(
                        "could not create a directory in {} to copy the initdb template into",
                        parent.display()
                    ),
                    e,
                )
            })?;
        self.owner.chown(staging.path())?;
        let lock_path = staging.path().join(COPY_LOCK);
        let lock = File::create(&lock_path)
            .map_err(|e| Error::io(format!("could not create {}", lock_path.display()), e))?;
        let lock = Flock::lock(lock, FlockArg::LockExclusive).map_err(|(_, errno)| {
            Error::io(
                format!("could not lock {}", lock_path.display()),
                std::io::Error::from(errno),
            )
        })?;
        let held = lock
            .try_clone()
            .map_err(|e| Error::io(format!("could not open {}", lock_path.display()), e))?;
        let copy = staging.path().join("data");
        let mut cp = Command::new("cp");
        self.owner.apply(&mut cp);
        die_with_parent(&mut cp);
        // cp never reads its input: the descriptor is there so that the lock lives exactly
        // as long as the last of us and cp (a descriptor shares its lock with its copies).
        cp.stdin(held);
        run(
            cp.arg("-a").arg(&template).arg(&copy),
            "copying the initdb template",
        )?;
        prepare(&copy)?;
        std::fs::rename(&copy, dest).map_err(|e| {
            Error::io(
                format!(
                    "could not move the copy of the initdb template to {}",
                    dest.display()
                ),
                e,
            )
        })
    }
}

/// The name prefix of the sibling directories [`Install::copy_template`] copies into, for a
/// `dest` of that name.
fn copy_prefix(dest: &Path) -> String {
    let name = dest
        .file_name()
        .map_or_else(|| "data".into(), |n| n.to_string_lossy());
    format!(".{name}.copy-")
}

/// The file in a copy's directory that is locked (`flock`) while anything may write into the
/// copy: taken before `cp` starts and held by it too, so that it is free only once both the
/// process that copies and its `cp` have ended, however they ended.
const COPY_LOCK: &str = "copying";

/// Removes what interrupted copies into `dest` left beside it. Only for a caller that knows
/// no copy into `dest` is under way (the embedded cluster's lock). A leftover whose `cp` has
/// not yet ended (it dies with its command, a moment later) is waited for up to `wait`, and
/// then is an error: removing a directory while something writes into it fails, or leaves
/// what is written after.
pub(crate) fn remove_interrupted_copies(dest: &Path, wait: Duration) -> Result<(), Error> {
    let Some(parent) = dest.parent() else {
        return Ok(());
    };
    let prefix = copy_prefix(dest);
    let entries = match std::fs::read_dir(parent) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(format!("could not list {}", parent.display()), e)),
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let path = entry.path();
        // Held until the directory is gone. No lock file: killed before it made one, so
        // before its `cp` started.
        let _quiet = match File::open(path.join(COPY_LOCK)) {
            Ok(file) => Some(wait_for_lock(file, &path, wait)?),
            Err(_) => None,
        };
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::new(format!(
                    "could not remove {}, left by an interrupted copy of the initdb template: {e}; remove it by hand",
                    path.display()
                )));
            }
        }
    }
    Ok(())
}

/// `file` locked exclusively, waiting up to `wait` for whoever holds it.
fn wait_for_lock(file: File, copy: &Path, wait: Duration) -> Result<Flock<File>, Error> {
    /// How often the lock is tried again: a killed `cp` ends within milliseconds.
    const RETRY: Duration = Duration::from_millis(10);
    let deadline = Instant::now() + wait;
    let mut file = file;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => return Ok(locked),
            Err((back, nix::errno::Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                file = back;
                std::thread::sleep(RETRY);
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                return Err(Error::new(format!(
                    "{} is still being written by an interrupted copy of the initdb template (a `cp` that outlived the command that started it); try again once it has ended",
                    copy.display()
                )));
            }
            Err((_, errno)) => {
                return Err(Error::io(
                    format!("could not lock {}", copy.join(COPY_LOCK).display()),
                    std::io::Error::from(errno),
                ));
            }
        }
    }
}

/// Has the kernel kill `cmd`'s process (SIGKILL) when the thread that spawns it ends. For
/// work that is useless without us, such as a copy: an orphan `cp` would write on into a
/// directory no one will use. The signal comes when the spawning *thread* ends, not the
/// process; [`run`] waits for the child on that thread, so that is never before the child
/// ends unless the whole process dies. A server that must outlive us is never spawned so.
fn die_with_parent(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        let parent = nix::unistd::getpid();
        // SAFETY: the closure runs in the forked child before exec, where only
        // async-signal-safe calls are allowed: it makes two system calls (prctl, getppid)
        // and builds an `io::Error` from an errno, none of which allocates or takes a lock.
        // std runs it after switching to the server's user, which must stay so: a change of
        // credentials clears the death signal.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)?;
                // A parent that died before the line above sends no signal: give up now.
                if nix::unistd::getppid() != parent {
                    return Err(std::io::Error::from(nix::errno::Errno::ESRCH));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

impl Owner {
    /// Fails only as root without a `postgres` OS user, where no server can run.
    pub(crate) fn detect() -> Result<Owner, Error> {
        let uid = nix::unistd::geteuid();
        if !uid.is_root() {
            return Ok(Owner {
                uid: uid.as_raw(),
                gid: nix::unistd::getegid().as_raw(),
                switch: false,
            });
        }
        match nix::unistd::User::from_name("postgres") {
            Ok(Some(user)) => Ok(Owner {
                uid: user.uid.as_raw(),
                gid: user.gid.as_raw(),
                switch: true,
            }),
            _ => Err(Error::new(format!(
                "running as root, PostgreSQL must run as another user but there is no `postgres` OS user: {INSTALL_HINT} (the package creates it)"
            ))),
        }
    }

    pub(crate) fn apply(&self, cmd: &mut Command) {
        if self.switch {
            cmd.uid(self.uid).gid(self.gid);
        }
    }

    /// Makes `path` belong to the server's user.
    pub(crate) fn chown(&self, path: &Path) -> Result<(), Error> {
        if self.switch {
            std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
                .map_err(|e| Error::io(format!("could not chown {}", path.display()), e))?;
        }
        Ok(())
    }

    pub(crate) fn is_switching(&self) -> bool {
        self.switch
    }

    /// Whether `dir` is a directory (not a link) of this user or of the server's, as
    /// [`Owner::private_dir`] makes or takes one.
    pub(crate) fn made(&self, dir: &Path) -> bool {
        std::fs::symlink_metadata(dir).is_ok_and(|m| self.owns_dir(&m))
    }

    /// Whether `meta` is of a directory (not a link) of this user or of the server's.
    fn owns_dir(&self, meta: &std::fs::Metadata) -> bool {
        use std::os::unix::fs::MetadataExt;
        let me = nix::unistd::geteuid().as_raw();
        meta.is_dir() && (meta.uid() == me || meta.uid() == self.uid)
    }

    /// Makes `dir` (its parent must exist) a directory of the server's user that only it can
    /// enter, or takes one already there that is ours or the server's user's. Never a symlink
    /// or another user's directory: in a shared directory such as /var/tmp, at a name anyone
    /// can compute, a local user could plant either to have us create, `chown` and later
    /// remove files where they chose.
    pub(crate) fn private_dir(&self, dir: &Path) -> Result<(), Error> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        match std::fs::create_dir(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io(format!("could not create {}", dir.display()), e)),
        }
        let meta = std::fs::symlink_metadata(dir)
            .map_err(|e| Error::io(format!("could not read {}", dir.display()), e))?;
        if !self.owns_dir(&meta) {
            return Err(Error::new(format!(
                "{} is not a directory of this user or of the server's (it is {}, owned by uid {}): someone else made it; remove it, or choose another home with --home or SLIPSTREAM_HOME",
                dir.display(),
                if meta.file_type().is_symlink() {
                    "a symbolic link"
                } else if meta.is_dir() {
                    "a directory"
                } else {
                    "a file"
                },
                meta.uid()
            )));
        }
        self.chown(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io(format!("could not restrict {}", dir.display()), e))
    }
}

/// `$TMPDIR/slipstream-testkit-<euid>`: one per user, since the template in it belongs to the
/// server's user (`postgres` for root, the user otherwise) and is private to it. Shared by
/// every user, it held whichever user's template came first, and every other user's
/// `initdb` then failed to move its own into place. Traversable by all, so that the server's
/// user reaches what is below when root made it.
pub(crate) fn base_dir() -> Result<PathBuf, Error> {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::geteuid().as_raw();
    let base = std::env::temp_dir().join(format!("slipstream-testkit-{uid}"));
    std::fs::create_dir_all(&base)
        .map_err(|e| Error::io(format!("could not create {}", base.display()), e))?;
    let meta = std::fs::symlink_metadata(&base)
        .map_err(|e| Error::io(format!("could not read {}", base.display()), e))?;
    if meta.uid() != uid || !meta.is_dir() {
        return Err(Error::new(format!(
            "{} is not a directory of this user (uid {uid}): remove it, or set TMPDIR to another directory",
            base.display()
        )));
    }
    let _ = std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755));
    Ok(base)
}

fn has_server(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("postgres").is_file()
}

/// `$SLIPSTREAM_PG_BINDIR` when set (and then it must hold the binaries: a wrong one is named,
/// not passed over), else `pg_config --bindir`, else the newest `/usr/lib/postgresql/*/bin`.
fn find_bindir() -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os("SLIPSTREAM_PG_BINDIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        if has_server(&dir) {
            return Ok(dir);
        }
        return Err(Error::new(format!(
            "SLIPSTREAM_PG_BINDIR is set to {}, which holds no initdb and postgres: point it at the directory that does (e.g. the output of `pg_config --bindir`), or unset it. Without PostgreSQL: {INSTALL_HINT}",
            dir.display()
        )));
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has_server(&dir) {
            return Ok(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, d)| has_server(d))
        .collect();
    versions.sort();
    versions.pop().map(|(_, d)| d).ok_or_else(|| {
        Error::new(format!(
            "PostgreSQL server binaries (initdb, postgres) not found: {INSTALL_HINT}"
        ))
    })
}

/// Runs a command to completion; a failure carries its output.
pub(crate) fn run(cmd: &mut Command, what: &str) -> Result<Output, Error> {
    let out = cmd
        .output()
        .map_err(|e| Error::io(format!("could not run {what}"), e))?;
    if !out.status.success() {
        return Err(Error::new(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        )));
    }
    Ok(out)
}

/// Writes a file and hands it to the server's user with the given mode (keys need 0600).
pub(crate) fn write_owned(
    owner: Owner,
    path: &Path,
    contents: impl AsRef<[u8]>,
    mode: u32,
) -> Result<(), Error> {
    std::fs::write(path, contents)
        .map_err(|e| Error::io(format!("could not write {}", path.display()), e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(format!("could not chmod {}", path.display()), e))?;
    owner.chown(path)
}

/// Appends settings to `postgresql.conf`; later lines win, so callers' settings override ours.
pub(crate) fn append_settings<K: AsRef<str>, V: AsRef<str>>(
    data: &Path,
    settings: impl IntoIterator<Item = (K, V)>,
) -> Result<(), Error> {
    use std::io::Write;
    let path = data.join("postgresql.conf");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .map_err(|e| Error::io(format!("could not open {}", path.display()), e))?;
    let mut text = String::from("\n# added by slipstream-testkit\n");
    for (k, v) in settings {
        text.push_str(&format!(
            "{} = '{}'\n",
            k.as_ref(),
            v.as_ref().replace('\'', "''")
        ));
    }
    f.write_all(text.as_bytes())
        .map_err(|e| Error::io(format!("could not write {}", path.display()), e))
}

/// A port that was free a moment ago (the server may still lose a race for it; callers retry).
///
/// ```
/// let port = slipstream_testkit::free_port()?;
/// assert_ne!(port, 0);
/// # Ok::<(), slipstream_testkit::Error>(())
/// ```
pub fn free_port() -> Result<u16, Error> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::io("could not find a free port", e))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::io("could not find a free port", e))
}

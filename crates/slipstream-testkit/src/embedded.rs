//! The CLI's embedded cluster: a persistent local PostgreSQL under a state directory, started
//! with `pg_ctl` so that it outlives the command that started it.
//!
//! What must stay true, whatever runs at once on one home (two `slipstream bench` load
//! generators, a `db stop` beside a `sql`):
//! - every command that reads or changes the cluster holds `embedded.lock` (an advisory
//!   `flock`: exclusive to create, start, stop or destroy, shared to look), so two commands
//!   never both create, both pick a port, or remove what the other is using;
//! - "running" means a postmaster (a process running the `postgres` binary) whose working
//!   directory is this data directory (the postmaster lives in it), and the port is the one that postmaster wrote in
//!   `postmaster.pid`: a PID reused by another process, a zombie, or a state file that names
//!   another port cannot make a command report a server that is not there, or signal a
//!   process that is not ours;
//! - a data directory is never removed while a postmaster runs on it: a live one is adopted,
//!   and one the state file no longer names is still found where this home's data goes;
//! - a data directory is whole or absent: the template is copied beside it and renamed into
//!   place, so a start killed mid-copy (Ctrl-C) leaves nothing a later start uses or trips
//!   over, and destroy finds this home's data directory without the state file (such a start
//!   never wrote one);
//! - the state file names a data directory before any server is started on it, so a start
//!   killed while `pg_ctl` waits leaves a server that status, stop and destroy find.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};

use crate::Error;
use crate::install::{Install, Owner, append_settings, free_port, remove_interrupted_copies, run};
use crate::postmaster::{LockFile, lock_file};

/// The state file that records where the data lives and which port it uses.
const STATE_FILE: &str = "embedded.conf";
/// The lock every command on the home holds (see the module's doc).
const LOCK_FILE: &str = "embedded.lock";
/// How long destroy waits for the `cp` of a start killed mid-copy to end. It is killed with
/// that start and ends within milliseconds; the rest is slack for a loaded machine.
const COPY_END_WAIT: Duration = Duration::from_secs(10);
/// The longest Unix socket path the kernel takes (`sun_path`, less its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// A persistent local cluster managed by `slipstream db start|stop|status|url`.
///
/// The state directory holds `embedded.conf` (data directory and port). The data directory is
/// `<state>/pgdata`, except when running as root: the server then runs as `postgres`, which
/// cannot enter root's home, so the data goes to `/var/tmp/slipstream-<uid>-<hash>/pgdata`.
/// A relative state directory is taken from the current directory, once: the same relative
/// name used from two directories is two clusters.
///
/// ```no_run
/// let db = slipstream_testkit::Embedded::new("/tmp/slipstream-home");
/// let url = db.start()?; // creates the cluster on first use
/// println!("{url}");
/// db.stop()?;
/// # Ok::<(), slipstream_testkit::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Embedded {
    home: PathBuf,
}

/// What [`Embedded::status`] found.
///
/// ```
/// use slipstream_testkit::{Embedded, Status};
/// let home = std::env::temp_dir().join(format!("slipstream-doc-status-{}", std::process::id()));
/// // Looking creates nothing.
/// assert_eq!(Embedded::new(&home).status()?, Status::NotCreated);
/// assert!(!home.exists());
/// # Ok::<(), slipstream_testkit::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// No cluster has been created under this state directory.
    NotCreated,
    /// Created, not running.
    Stopped {
        /// The data directory.
        data: PathBuf,
    },
    /// Running.
    Running {
        /// The data directory.
        data: PathBuf,
        /// The TCP port on 127.0.0.1.
        port: u16,
    },
}

impl Embedded {
    /// An embedded cluster under `home` (the state directory), made absolute against the
    /// current directory.
    ///
    /// ```
    /// let db = slipstream_testkit::Embedded::new("relative/home");
    /// assert!(db.home().is_absolute());
    /// assert!(db.home().ends_with("relative/home"));
    /// ```
    pub fn new(home: impl Into<PathBuf>) -> Embedded {
        let home = home.into();
        Embedded {
            home: std::path::absolute(&home).unwrap_or(home),
        }
    }

    /// The state directory.
    ///
    /// ```
    /// let db = slipstream_testkit::Embedded::new("/var/tmp/slipstream-home");
    /// assert_eq!(db.home(), std::path::Path::new("/var/tmp/slipstream-home"));
    /// ```
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The URL of the running cluster.
    ///
    /// ```
    /// assert_eq!(
    ///     slipstream_testkit::Embedded::url_for_port(5433),
    ///     "postgres://postgres@127.0.0.1:5433/postgres"
    /// );
    /// ```
    pub fn url_for_port(port: u16) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    }

    fn state(&self) -> Option<(PathBuf, u16)> {
        let text = std::fs::read_to_string(self.home.join(STATE_FILE)).ok()?;
        let mut data = None;
        let mut port = None;
        for line in text.lines() {
            match line.split_once('=') {
                Some(("data", v)) => data = Some(PathBuf::from(v.trim())),
                Some(("port", v)) => port = v.trim().parse().ok(),
                _ => {}
            }
        }
        Some((data?, port?))
    }

    /// Written whole or not at all (a reader never sees half a file and takes the cluster
    /// for not created).
    fn save_state(&self, data: &Path, port: u16) -> Result<(), Error> {
        let path = self.home.join(STATE_FILE);
        let temp = self.home.join(format!("{STATE_FILE}.new"));
        std::fs::write(&temp, format!("data={}\nport={port}\n", data.display()))
            .and_then(|()| std::fs::rename(&temp, &path))
            .map_err(|e| Error::io(format!("could not write {}", path.display()), e))
    }

    /// The home's lock, exclusive or shared, held until dropped; `None` (shared only) when the
    /// home does not exist, so that looking creates nothing.
    fn lock(&self, exclusive: bool) -> Result<Option<Flock<File>>, Error> {
        if !exclusive && !self.home.is_dir() {
            return Ok(None);
        }
        std::fs::create_dir_all(&self.home).map_err(|e| {
            Error::new(format!(
                "could not create the state directory {}: {e}; choose another with --home or SLIPSTREAM_HOME",
                self.home.display()
            ))
        })?;
        let path = self.home.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("could not open {}", path.display()), e))?;
        let how = if exclusive {
            FlockArg::LockExclusive
        } else {
            FlockArg::LockShared
        };
        let locked = Flock::lock(file, how).map_err(|(_, errno)| {
            Error::io(
                format!("could not lock {}", path.display()),
                std::io::Error::from(errno),
            )
        })?;
        Ok(Some(locked))
    }

    /// Whether the cluster exists and runs.
    ///
    /// ```no_run
    /// use slipstream_testkit::{Embedded, Status};
    /// match Embedded::new("/tmp/slipstream-home").status()? {
    ///     Status::Running { port, .. } => println!("{}", Embedded::url_for_port(port)),
    ///     Status::Stopped { data } => println!("stopped ({})", data.display()),
    ///     Status::NotCreated => println!("not created: slipstream db start"),
    /// }
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn status(&self) -> Result<Status, Error> {
        let _lock = self.lock(false)?;
        Ok(self.look())
    }

    /// [`Embedded::status`], under a lock the caller holds. The data is the state file's, else
    /// what is where this home's data goes: as root that is outside the home, and a home (or
    /// its state) deleted while the cluster lived on must not hide it from status, stop and
    /// destroy, nor have a start copy a new cluster over it. (Without root, only a start
    /// killed between the copy's rename and the state's write leaves one there, fresh.)
    fn look(&self) -> Status {
        let recorded = self.state().map(|(data, _)| data);
        let unrecorded = || {
            let owner = Owner::detect().ok()?;
            let data = self.data_location(owner);
            // Never a link or a stranger's directory planted at that name (see `create`).
            owner.made(data.parent()?).then_some(data)
        };
        let has_data = |d: &PathBuf| d.join("PG_VERSION").exists();
        let Some(data) = recorded
            .filter(has_data)
            .or_else(|| unrecorded().filter(has_data))
        else {
            return Status::NotCreated;
        };
        match live_postmaster(&data) {
            Some(port) => Status::Running { data, port },
            None => Status::Stopped { data },
        }
    }

    /// Starts the cluster, creating it first if needed, and returns its URL. Does nothing but
    /// return the URL if it already runs.
    ///
    /// ```no_run
    /// let db = slipstream_testkit::Embedded::new("/tmp/slipstream-home");
    /// let url = db.start()?;
    /// assert_eq!(db.start()?, url); // already running: the same URL, nothing done
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn start(&self) -> Result<String, Error> {
        let _lock = self.lock(true)?;
        let install = Install::find()?;
        let data = match self.look() {
            Status::Running { data, port } => {
                // Recorded again if the state was lost while the server ran on.
                if self.state() != Some((data.clone(), port)) {
                    self.save_state(&data, port)?;
                }
                return Ok(Embedded::url_for_port(port));
            }
            Status::Stopped { data } => data,
            Status::NotCreated => {
                let data = self.data_dir(&install)?;
                self.create(&install, &data)?;
                data
            }
        };
        // A lock file that names a dead server, or a PID some other process has since been
        // given, would stop PostgreSQL's own start while that PID lives. One that cannot be
        // read for sure is left to PostgreSQL's check.
        if lock_file(&data) == LockFile::Stale {
            remove_stale_lock_files(&data);
        }
        let mut port = self.state().map_or(0, |s| s.1);
        if port == 0 || std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            port = free_port()?;
        }
        let log = data.parent().unwrap_or(&data).join("server.log");
        // Recorded before the server starts: a start killed while `pg_ctl` waits leaves a
        // server starting on (pg_ctl detaches it), which status, stop and destroy must find.
        self.save_state(&data, port)?;
        let started = run(
            install
                .command("pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "60", "-o"])
                .arg(format!("-p {port}"))
                .arg("start"),
            "pg_ctl start",
        );
        if let Err(e) = started {
            return Err(Error::new(format!(
                "{e}\nthe server log ({}) says:\n{}\nif the data directory {} cannot be repaired, `slipstream db destroy` (with the same home) deletes it and the next start creates a new one",
                log.display(),
                log_tail(&log),
                data.display()
            )));
        }
        // The port the server took, from its own lock file.
        let port = live_postmaster(&data).unwrap_or(port);
        self.save_state(&data, port)?;
        Ok(Embedded::url_for_port(port))
    }

    /// Where this home's data directory goes, refusing a home `pg_ctl` cannot take.
    fn data_dir(&self, install: &Install) -> Result<PathBuf, Error> {
        if !install.owner().is_switching() {
            // The data directory's path is a line of `postmaster.pid`, which pg_ctl reads to
            // see the server up, and of the state file, which is UTF-8 text.
            let Some(home) = self.home.to_str().filter(|h| !h.contains('\n')) else {
                return Err(Error::new(format!(
                    "the state directory {:?} holds a line break or bytes that are not UTF-8, which PostgreSQL's postmaster.pid and slipstream's state file cannot hold; choose another with --home or SLIPSTREAM_HOME",
                    self.home
                )));
            };
            // pg_ctl starts the server through /bin/sh with these paths in double quotes.
            if let Some(c) = home.chars().find(|c| matches!(c, '"' | '$' | '`' | '\\')) {
                return Err(Error::new(format!(
                    "the state directory {} holds `{c}`, which pg_ctl would hand to /bin/sh when it starts the server; choose another with --home or SLIPSTREAM_HOME",
                    self.home.display()
                )));
            }
        }
        Ok(self.data_location(install.owner()))
    }

    /// Where this home's data directory goes when the server runs as `owner`.
    fn data_location(&self, owner: Owner) -> PathBuf {
        if !owner.is_switching() {
            return self.home.join("pgdata");
        }
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&self.home, &mut hasher);
        PathBuf::from(format!(
            "/var/tmp/slipstream-{}-{:x}",
            nix::unistd::geteuid().as_raw(),
            std::hash::Hasher::finish(&hasher)
        ))
        .join("pgdata")
    }

    /// Makes `data` a fresh copy of the template (no postmaster runs on it: the caller
    /// checked, under the lock).
    fn create(&self, install: &Install, data: &Path) -> Result<(), Error> {
        let parent = data.parent().unwrap_or(data).to_path_buf();
        if install.owner().is_switching() {
            install.owner().private_dir(&parent)?;
        }
        // What an earlier start left: copies it was killed in the middle of, and a whole
        // copy it did not get to record in the state file (no server runs on it). A copy
        // whose `cp` is still ending is in no one's way (each copy has its own name) and is
        // not waited for: the next start or destroy removes it.
        let _ = remove_interrupted_copies(data, Duration::ZERO);
        if data.exists() {
            std::fs::remove_dir_all(data).map_err(|e| {
                Error::new(format!(
                    "could not remove {}, left by an earlier start that did not finish: {e}; run `slipstream db destroy` with the same home (or remove it by hand) and start again",
                    data.display()
                ))
            })?;
        }
        // The CLI connects over TCP; a Unix socket goes beside the data only where its path
        // fits and the setting's list syntax cannot split it, nor trim it (it trims the
        // whitespace around each element: `/x/home ` would be `/x/home`), and otherwise
        // there is none.
        let socket = parent.display().to_string();
        let socket_fits = socket.len() + "/.s.PGSQL.65535.lock".len() <= MAX_SOCKET_PATH
            && !socket.ends_with(char::is_whitespace)
            && !socket
                .chars()
                .any(|c| c == ',' || c == '"' || c.is_control());
        install.copy_template(data, |copy| {
            append_settings(
                copy,
                [
                    ("listen_addresses", "127.0.0.1".to_string()),
                    (
                        "unix_socket_directories",
                        if socket_fits { socket } else { String::new() },
                    ),
                    ("max_connections", "200".to_string()),
                    ("lc_messages", "C".to_string()),
                ],
            )
        })
    }

    /// Stops the cluster (fast shutdown). Not an error if it is not running.
    ///
    /// ```
    /// let home = std::env::temp_dir().join(format!("slipstream-doc-stop-{}", std::process::id()));
    /// slipstream_testkit::Embedded::new(&home).stop()?; // nothing to stop: not an error
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn stop(&self) -> Result<(), Error> {
        if !self.home.is_dir() && self.look() == Status::NotCreated {
            return Ok(());
        }
        let _lock = self.lock(true)?;
        self.stop_locked()
    }

    fn stop_locked(&self) -> Result<(), Error> {
        if let Status::Running { data, .. } = self.look() {
            stop_server(&data)?;
        }
        Ok(())
    }

    /// Stops the cluster and deletes its data and state. Not an error if none exists.
    ///
    /// ```no_run
    /// use slipstream_testkit::{Embedded, Status};
    /// let db = Embedded::new("/tmp/slipstream-home");
    /// db.destroy()?;
    /// assert_eq!(db.status()?, Status::NotCreated);
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn destroy(&self) -> Result<(), Error> {
        if !self.home.is_dir() && self.look() == Status::NotCreated {
            return Ok(());
        }
        let _lock = self.lock(true)?;
        self.stop_locked()?;
        // The data directory the state names, and the one this home's data goes to: a start
        // killed before it wrote the state made the second, and nothing else names it. As
        // root without a `postgres` user no start got as far as making one.
        let mut dirs: Vec<PathBuf> = self.state().map(|(data, _)| data).into_iter().collect();
        if let Ok(owner) = Owner::detect() {
            let derived = self.data_location(owner);
            if !dirs.contains(&derived) {
                dirs.push(derived);
            }
        }
        for data in &dirs {
            // Taken back by a start that found its state lost; not to be removed under it.
            if live_postmaster(data).is_some() {
                stop_server(data)?;
            }
            remove_data(data)?;
        }
        match std::fs::remove_file(self.home.join(STATE_FILE)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(
                format!("could not remove {}", self.home.join(STATE_FILE).display()),
                e,
            )),
            _ => Ok(()),
        }
    }
}

/// Stops the server running on `data` (fast shutdown).
fn stop_server(data: &Path) -> Result<(), Error> {
    let install = Install::find()?;
    run(
        install
            .command("pg_ctl")
            .arg("-D")
            .arg(data)
            .args(["-m", "fast", "-w", "stop"]),
        "pg_ctl stop",
    )?;
    Ok(())
}

/// Removes a data directory, what interrupted copies left beside it, and the /var/tmp parent
/// made for root (ours alone; a state directory is the user's, and stays).
fn remove_data(data: &Path) -> Result<(), Error> {
    remove_interrupted_copies(data, COPY_END_WAIT)?;
    let var_tmp_parent = data.parent().filter(|p| {
        p.starts_with("/var/tmp")
            && p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("slipstream-"))
    });
    let doomed = var_tmp_parent.unwrap_or(data);
    match std::fs::remove_dir_all(doomed) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::new(format!(
                "could not remove {}: {e}; run `slipstream db destroy` again, or remove it by hand",
                doomed.display()
            )));
        }
        _ => {}
    }
    Ok(())
}

/// Removes the lock files of a server that no longer runs on `data`: its `postmaster.pid`,
/// and the lock of the Unix socket it made beside the data (`.s.PGSQL.<port>.lock`), which
/// names the same PID. PostgreSQL takes either for a live server's while that PID lives (a
/// zombie right after a `kill -9`, another process after a reboot) and will not start, though
/// nothing is wrong with the data. Only for a caller that holds the home's exclusive lock and
/// found no postmaster on `data`: the socket directory is this cluster's alone.
fn remove_stale_lock_files(data: &Path) {
    let _ = std::fs::remove_file(data.join("postmaster.pid"));
    let Some(Ok(entries)) = data.parent().map(std::fs::read_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(".s.PGSQL.") && name.ends_with(".lock") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The port of the postmaster running on `data`, if one does.
fn live_postmaster(data: &Path) -> Option<u16> {
    match lock_file(data) {
        LockFile::Live { port, .. } => Some(port),
        LockFile::Stale | LockFile::Unknown => None,
    }
}

/// The lines of the server log that say why it stopped (FATAL, PANIC, ERROR), or its last
/// lines.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let bad: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains("FATAL") || l.contains("PANIC") || l.contains("ERROR"))
        .collect();
    let shown = if bad.is_empty() { &lines } else { &bad };
    shown[shown.len().saturating_sub(5)..].join("\n")
}

//! The CLI's embedded cluster: a persistent local PostgreSQL under a state directory, started
//! with `pg_ctl` so that it outlives the command that started it.

use std::path::{Path, PathBuf};

use crate::Error;
use crate::install::{Install, append_settings, free_port, run};

/// The state file that records where the data lives and which port it uses.
const STATE_FILE: &str = "embedded.conf";

/// A persistent local cluster managed by `slipstream db start|stop|status|url`.
///
/// The state directory holds `embedded.conf` (data directory and port). The data directory is
/// `<state>/pgdata`, except when running as root: the server then runs as `postgres`, which
/// cannot enter root's home, so the data goes to `/var/tmp/slipstream-<uid>-<hash>/pgdata`.
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
    /// An embedded cluster under `home` (the state directory).
    pub fn new(home: impl Into<PathBuf>) -> Embedded {
        Embedded { home: home.into() }
    }

    /// The state directory.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The URL of the running cluster.
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

    fn save_state(&self, data: &Path, port: u16) -> Result<(), Error> {
        std::fs::write(
            self.home.join(STATE_FILE),
            format!("data={}\nport={port}\n", data.display()),
        )
        .map_err(|e| {
            Error::io(
                format!("could not write {}", self.home.join(STATE_FILE).display()),
                e,
            )
        })
    }

    /// Whether the cluster exists and runs.
    pub fn status(&self) -> Result<Status, Error> {
        let Some((data, port)) = self.state() else {
            return Ok(Status::NotCreated);
        };
        if !data.join("PG_VERSION").exists() {
            return Ok(Status::NotCreated);
        }
        let install = Install::find()?;
        let out = install
            .command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .arg("status")
            .output();
        match out {
            Ok(o) if o.status.success() => Ok(Status::Running { data, port }),
            _ => Ok(Status::Stopped { data }),
        }
    }

    /// Starts the cluster, creating it first if needed, and returns its URL. Does nothing but
    /// return the URL if it already runs.
    pub fn start(&self) -> Result<String, Error> {
        std::fs::create_dir_all(&self.home).map_err(|e| {
            Error::io(
                format!(
                    "could not create the state directory {}",
                    self.home.display()
                ),
                e,
            )
        })?;
        let install = Install::find()?;
        let (data, mut port) = match self.status()? {
            Status::Running { port, .. } => return Ok(Embedded::url_for_port(port)),
            Status::Stopped { data } => (data, self.state().map(|s| s.1).unwrap_or(0)),
            Status::NotCreated => (self.create(&install)?, 0),
        };
        if port == 0 || std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            port = free_port()?;
        }
        self.save_state(&data, port)?;
        let log = data.parent().unwrap_or(&data).join("server.log");
        run(
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
        )
        .map_err(|e| Error::new(format!("{e}\nserver log: {}", log.display())))?;
        Ok(Embedded::url_for_port(port))
    }

    fn create(&self, install: &Install) -> Result<PathBuf, Error> {
        let parent = if install.owner().is_switching() {
            let mut hasher = std::hash::DefaultHasher::new();
            std::hash::Hash::hash(&self.home, &mut hasher);
            let dir = PathBuf::from(format!(
                "/var/tmp/slipstream-{}-{:x}",
                nix::unistd::geteuid().as_raw(),
                std::hash::Hasher::finish(&hasher)
            ));
            std::fs::create_dir_all(&dir)
                .map_err(|e| Error::io(format!("could not create {}", dir.display()), e))?;
            install.owner().chown(&dir)?;
            dir
        } else {
            self.home.clone()
        };
        let data = parent.join("pgdata");
        if data.exists() {
            std::fs::remove_dir_all(&data).map_err(|e| {
                Error::io(format!("could not remove the stale {}", data.display()), e)
            })?;
        }
        install.copy_template(&data)?;
        append_settings(
            &data,
            [
                ("listen_addresses", "127.0.0.1".to_string()),
                ("unix_socket_directories", parent.display().to_string()),
                ("max_connections", "200".to_string()),
                ("lc_messages", "C".to_string()),
            ],
        )?;
        Ok(data)
    }

    /// Stops the cluster (fast shutdown). Not an error if it is not running.
    pub fn stop(&self) -> Result<(), Error> {
        if let Status::Running { data, .. } = self.status()? {
            let install = Install::find()?;
            run(
                install
                    .command("pg_ctl")
                    .arg("-D")
                    .arg(&data)
                    .args(["-m", "fast", "-w", "stop"]),
                "pg_ctl stop",
            )?;
        }
        Ok(())
    }

    /// Stops the cluster and deletes its data and state. Not an error if none exists.
    pub fn destroy(&self) -> Result<(), Error> {
        self.stop()?;
        if let Some((data, _)) = self.state() {
            if data.exists() {
                std::fs::remove_dir_all(&data)
                    .map_err(|e| Error::io(format!("could not remove {}", data.display()), e))?;
            }
            // The /var/tmp parent made for root is ours alone; the state directory is the user's.
            if let Some(parent) = data.parent().filter(|p| {
                p.starts_with("/var/tmp")
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("slipstream-"))
            }) {
                let _ = std::fs::remove_dir_all(parent);
            }
            let _ = std::fs::remove_file(self.home.join(STATE_FILE));
        }
        Ok(())
    }
}

//! Throwaway PostgreSQL clusters: a copy of the `initdb` template in a temporary directory,
//! a server on a free port of 127.0.0.1 and on a Unix socket, removed on drop.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::Error;
use crate::install::{Install, append_settings, base_dir, free_port, run, write_owned};
use crate::postmaster::{LockFile, ProcessMark, has_exited, is_own_child, lock_file};

/// How long a server may take to become ready before we give up and show its log.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an immediate shutdown may take before the server is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts to start on a fresh port when another process took ours first.
const PORT_ATTEMPTS: usize = 5;
/// The start of the line PostgreSQL logs when it accepts connections (`lc_messages` is forced
/// to C); a hot standby ends it with "read-only connections".
const READY_LINE: &str = "database system is ready to accept";

/// Settings for a throwaway cluster: speed over durability, and logging we can read.
const BASE_SETTINGS: &[(&str, &str)] = &[
    ("listen_addresses", "127.0.0.1"),
    ("fsync", "off"),
    ("synchronous_commit", "off"),
    ("full_page_writes", "off"),
    ("max_connections", "200"),
    ("lc_messages", "C"),
    ("logging_collector", "off"),
    ("log_destination", "stderr"),
];

/// Trust for everything local, including replication (for [`Cluster::start_standby`]).
const DEFAULT_HBA: &str = "local all all trust\nhost all all 127.0.0.1/32 trust\n\
                           host all all ::1/128 trust\nlocal replication all trust\n\
                           host replication all 127.0.0.1/32 trust\n";

/// Options for a cluster; see [`Cluster::builder`].
///
/// ```no_run
/// let cluster = slipstream_testkit::Cluster::builder()
///     .setting("max_connections", "50")
///     .start()?;
/// assert_eq!(cluster.psql("SHOW max_connections")?, "50");
/// # Ok::<(), slipstream_testkit::Error>(())
/// ```
#[derive(Debug, Default, Clone)]
pub struct ClusterBuilder {
    settings: Vec<(String, String)>,
    hba: Option<String>,
    files: Vec<(String, Vec<u8>)>,
    env: Vec<(String, String)>,
}

impl ClusterBuilder {
    /// Sets an environment variable of the server process, e.g. `LANGUAGE=de` with a session's
    /// `lc_messages = 'C.UTF-8'` for translated server messages (`LC_ALL` stays `C`).
    ///
    /// ```no_run
    /// // Translated server messages: the server needs LANGUAGE, the session lc_messages.
    /// let cluster = slipstream_testkit::Cluster::builder().env("LANGUAGE", "de").start()?;
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Adds a `postgresql.conf` setting (overrides the testkit's).
    ///
    /// ```no_run
    /// let cluster = slipstream_testkit::Cluster::builder()
    ///     .setting("shared_buffers", "16MB")
    ///     .setting("log_min_duration_statement", "0")
    ///     .start()?;
    /// assert_eq!(cluster.psql("SHOW shared_buffers")?, "16MB");
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn setting(mut self, name: &str, value: &str) -> Self {
        self.settings.push((name.into(), value.into()));
        self
    }

    /// Replaces `pg_hba.conf` (default: trust for local and 127.0.0.1).
    ///
    /// ```no_run
    /// // Passwords over TCP, trust over the Unix socket (which psql uses).
    /// let cluster = slipstream_testkit::Cluster::builder()
    ///     .hba("host all all 127.0.0.1/32 scram-sha-256\nlocal all all trust\n")
    ///     .start()?;
    /// cluster.psql("CREATE ROLE app LOGIN PASSWORD 'secret'")?;
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn hba(mut self, contents: &str) -> Self {
        self.hba = Some(contents.into());
        self
    }

    /// Writes a file into the data directory (mode 0600, owned by the server's user), e.g. a
    /// TLS certificate and key referenced by `ssl_cert_file`.
    ///
    /// ```no_run
    /// # let (cert_pem, key_pem) = (String::new(), String::new());
    /// let cluster = slipstream_testkit::Cluster::builder()
    ///     .file("server.crt", &cert_pem)
    ///     .file("server.key", &key_pem)
    ///     .setting("ssl", "on")
    ///     .setting("ssl_cert_file", "server.crt")
    ///     .setting("ssl_key_file", "server.key")
    ///     .start()?;
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn file(mut self, name: &str, contents: impl AsRef<[u8]>) -> Self {
        self.files.push((name.into(), contents.as_ref().to_vec()));
        self
    }

    /// Serves TLS with this certificate and key (PEM): writes them into the data directory
    /// and turns `ssl` on with them. Add `ssl_ca_file` and the like with [`Self::file`] and
    /// [`Self::setting`].
    ///
    /// ```no_run
    /// # let (cert_pem, key_pem) = (String::new(), String::new());
    /// let cluster = slipstream_testkit::Cluster::builder()
    ///     .tls(&cert_pem, &key_pem)
    ///     .hba("local all all trust\nhostssl all all 127.0.0.1/32 trust\n")
    ///     .start()?;
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn tls(self, cert_pem: impl AsRef<[u8]>, key_pem: impl AsRef<[u8]>) -> Self {
        self.file("server.crt", cert_pem)
            .file("server.key", key_pem)
            .setting("ssl", "on")
            .setting("ssl_cert_file", "server.crt")
            .setting("ssl_key_file", "server.key")
    }

    /// Creates and starts the cluster.
    ///
    /// ```no_run
    /// let cluster = slipstream_testkit::Cluster::builder().setting("work_mem", "64MB").start()?;
    /// assert_eq!(cluster.psql("SHOW work_mem")?, "64MB");
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn start(self) -> Result<Cluster, Error> {
        let (install, root, data) = new_root("c-", "a cluster")?;
        install.copy_template(&data, |_| Ok(()))?;
        let socket_dir = root.path().to_path_buf();
        let mut settings: Vec<(String, String)> = BASE_SETTINGS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        settings.push((
            "unix_socket_directories".into(),
            socket_dir.display().to_string(),
        ));
        settings.extend(self.settings);
        append_settings(&data, settings)?;
        write_owned(
            install.owner(),
            &data.join("pg_hba.conf"),
            self.hba.as_deref().unwrap_or(DEFAULT_HBA),
            0o600,
        )?;
        for (name, contents) in &self.files {
            write_owned(install.owner(), &data.join(name), contents, 0o600)?;
        }
        let mut cluster = Cluster {
            install,
            root,
            data,
            socket_dir,
            port: 0,
            server: None,
            env: self.env,
        };
        // From here its Drop removes it, so it is listed until then.
        live().insert(cluster.root.path().to_path_buf(), None);
        cluster.start_server()?;
        Ok(cluster)
    }
}

/// A running throwaway PostgreSQL cluster, stopped and deleted on drop (also when a test
/// panics). Superuser `postgres`, database `postgres`, trust authentication unless
/// [`ClusterBuilder::hba`] says otherwise.
///
/// ```no_run
/// let cluster = slipstream_testkit::Cluster::start()?;
/// println!("connect with {}", cluster.url());
/// cluster.psql("CREATE TABLE t (id int)")?;
/// # Ok::<(), slipstream_testkit::Error>(())
/// ```
#[derive(Debug)]
pub struct Cluster {
    install: Install,
    root: tempfile::TempDir,
    data: PathBuf,
    socket_dir: PathBuf,
    port: u16,
    server: Option<Server>,
    /// The server process's extra environment ([`ClusterBuilder::env`]).
    env: Vec<(String, String)>,
}

#[derive(Debug)]
struct Server {
    child: Child,
    log: PathBuf,
}

impl Cluster {
    /// Starts a cluster with the default settings.
    ///
    /// ```no_run
    /// let cluster = slipstream_testkit::Cluster::start()?;
    /// assert_eq!(cluster.psql("SELECT 1 + 1")?, "2");
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn start() -> Result<Cluster, Error> {
        ClusterBuilder::default().start()
    }

    /// Starts a hot standby of this cluster: a `pg_basebackup -R` copy streaming from it, in a
    /// directory and on a port of its own. It accepts read-only connections
    /// (`pg_is_in_recovery()` is true) and follows the primary's changes.
    ///
    /// ```no_run
    /// let primary = slipstream_testkit::Cluster::start()?;
    /// let standby = primary.start_standby()?;
    /// assert_eq!(standby.psql("SELECT pg_is_in_recovery()")?.trim(), "t");
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn start_standby(&self) -> Result<Cluster, Error> {
        let (install, root, data) = new_root("s-", "a standby")?;
        run(
            install
                .command("pg_basebackup")
                .arg("-D")
                .arg(&data)
                .args(["-R", "-X", "stream", "-c", "fast", "-U", "postgres"])
                .arg("-h")
                .arg(&self.socket_dir)
                .args(["-p", &self.port.to_string()]),
            "pg_basebackup",
        )?;
        // The copy carries the primary's settings; only the socket directory must differ.
        let socket_dir = root.path().to_path_buf();
        append_settings(
            &data,
            [("unix_socket_directories", socket_dir.display().to_string())],
        )?;
        let mut standby = Cluster {
            install,
            root,
            data,
            socket_dir,
            port: 0,
            server: None,
            env: self.env.clone(),
        };
        live().insert(standby.root.path().to_path_buf(), None);
        standby.start_server()?;
        Ok(standby)
    }

    /// Options for a cluster.
    ///
    /// ```no_run
    /// let cluster = slipstream_testkit::Cluster::builder().setting("fsync", "on").start()?;
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// The TCP port on 127.0.0.1.
    ///
    /// ```no_run
    /// let cluster = slipstream_testkit::Cluster::start()?;
    /// let addr = std::net::SocketAddr::from(([127, 0, 0, 1], cluster.port()));
    /// assert!(std::net::TcpStream::connect(addr).is_ok());
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding the Unix socket.
    ///
    /// ```no_run
    /// let cluster = slipstream_testkit::Cluster::start()?;
    /// let socket = cluster.socket_dir().join(format!(".s.PGSQL.{}", cluster.port()));
    /// assert!(socket.exists());
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The data directory.
    ///
    /// ```no_run
    /// let cluster = slipstream_testkit::Cluster::start()?;
    /// assert!(cluster.data_dir().join("PG_VERSION").exists());
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The installation the cluster runs from.
    ///
    /// ```no_run
    /// let cluster = slipstream_testkit::Cluster::start()?;
    /// let status = cluster.install().command("pg_isready")
    ///     .args(["-h", "127.0.0.1", "-p", &cluster.port().to_string()])
    ///     .status()
    ///     .expect("pg_isready runs");
    /// assert!(status.success());
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn install(&self) -> &Install {
        &self.install
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`
    ///
    /// ```no_run
    /// let cluster = slipstream_testkit::Cluster::start()?;
    /// assert_eq!(cluster.url(), format!("postgres://postgres@127.0.0.1:{}/postgres", cluster.port()));
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// A URL for another user, with an optional password (plain characters only).
    ///
    /// ```no_run
    /// let cluster = slipstream_testkit::Cluster::start()?;
    /// cluster.psql("CREATE ROLE app LOGIN PASSWORD 'secret'")?;
    /// let url = cluster.url_for("app", Some("secret"));
    /// assert_eq!(url, format!("postgres://app:secret@127.0.0.1:{}/postgres", cluster.port()));
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn url_for(&self, user: &str, password: Option<&str>) -> String {
        match password {
            Some(pw) => format!("postgres://{user}:{pw}@127.0.0.1:{}/postgres", self.port),
            None => format!("postgres://{user}@127.0.0.1:{}/postgres", self.port),
        }
    }

    /// A libpq key=value string for the Unix socket.
    ///
    /// ```no_run
    /// let cluster = slipstream_testkit::Cluster::start()?;
    /// let conninfo = cluster.socket_conninfo(); // "host=/tmp/... port=... user=postgres dbname=postgres"
    /// assert!(conninfo.starts_with(&format!("host={}", cluster.socket_dir().display())));
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn socket_conninfo(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.socket_dir.display(),
            self.port
        )
    }

    /// Runs SQL with `psql` as the superuser over the Unix socket and returns its unaligned,
    /// tuples-only output. Stops at the first error.
    ///
    /// ```no_run
    /// let cluster = slipstream_testkit::Cluster::start()?;
    /// cluster.psql("CREATE TABLE t (id int); INSERT INTO t VALUES (1), (2)")?;
    /// assert_eq!(cluster.psql("SELECT id, id * 10 FROM t ORDER BY id")?, "1|10\n2|20");
    /// assert!(cluster.psql("SELECT * FROM missing").is_err());
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn psql(&self, sql: &str) -> Result<String, Error> {
        let out = run(
            self.install
                .command("psql")
                .args([
                    "-X",
                    "-q",
                    "-A",
                    "-t",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-U",
                    "postgres",
                    "-d",
                    "postgres",
                    "-h",
                ])
                .arg(&self.socket_dir)
                .args(["-p", &self.port.to_string(), "-c", sql]),
            "psql",
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_string())
    }

    /// Waits until the server has no backend with process id `pid` (`pg_stat_activity`),
    /// polling with `psql`; `Ok(false)` when it is still there after `timeout`.
    ///
    /// ```no_run
    /// # let cluster = slipstream_testkit::Cluster::start()?;
    /// # let pid = 4242;
    /// assert!(cluster.backend_gone_within(pid, std::time::Duration::from_secs(10))?);
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn backend_gone_within(&self, pid: i32, timeout: Duration) -> Result<bool, Error> {
        let deadline = std::time::Instant::now() + timeout;
        let sql = format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}");
        loop {
            if self.psql(&sql)?.trim() == "0" {
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server log so far.
    ///
    /// ```no_run
    /// let cluster = slipstream_testkit::Cluster::start()?;
    /// assert!(cluster.log().contains("database system is ready to accept connections"));
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn log(&self) -> String {
        self.server
            .as_ref()
            .and_then(|s| std::fs::read_to_string(&s.log).ok())
            .unwrap_or_default()
    }

    /// The postmaster's process id, if the server runs.
    ///
    /// ```no_run
    /// let mut cluster = slipstream_testkit::Cluster::start()?;
    /// assert!(cluster.server_pid().is_some());
    /// cluster.stop()?;
    /// assert_eq!(cluster.server_pid(), None);
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn server_pid(&self) -> Option<u32> {
        self.server.as_ref().map(|s| s.child.id())
    }

    /// Restricts the server to the given CPUs. Backends forked afterwards inherit it, so call
    /// this before connecting. Benchmarks use it to fix where client and server run: on a
    /// small VM a same-CPU round trip and a cross-CPU one differ several-fold.
    ///
    /// ```no_run
    /// let cluster = slipstream_testkit::Cluster::start()?;
    /// cluster.pin_server(&[1])?; // the server on CPU 1,
    /// slipstream_testkit::pin_current_thread(&[0])?; // this client on CPU 0
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn pin_server(&self, cpus: &[usize]) -> Result<(), Error> {
        let pid = self
            .server_pid()
            .ok_or_else(|| Error::new("the server is not running"))?;
        crate::pin::pin_process(pid, cpus)
    }

    /// True while the server process runs.
    ///
    /// ```no_run
    /// let mut cluster = slipstream_testkit::Cluster::start()?;
    /// assert!(cluster.is_running());
    /// cluster.stop()?;
    /// assert!(!cluster.is_running());
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn is_running(&mut self) -> bool {
        self.server
            .as_mut()
            .is_some_and(|s| matches!(s.child.try_wait(), Ok(None)))
    }

    /// Stops the server (fast shutdown: sessions are terminated, a checkpoint is written) and
    /// waits for it to exit. The data stays; [`Cluster::restart`] starts it again.
    ///
    /// ```no_run
    /// let mut cluster = slipstream_testkit::Cluster::start()?;
    /// cluster.psql("CREATE TABLE kept (id int)")?;
    /// cluster.stop()?;
    /// assert!(cluster.psql("SELECT 1").is_err()); // no server now
    /// cluster.restart()?;
    /// assert_eq!(cluster.psql("SELECT count(*) FROM kept")?, "0"); // the data stayed
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn stop(&mut self) -> Result<(), Error> {
        self.stop_with(Signal::SIGINT)
    }

    /// Starts the server again on the same port after [`Cluster::stop`], or stops and starts it.
    ///
    /// ```no_run
    /// let mut cluster = slipstream_testkit::Cluster::start()?;
    /// let port = cluster.port();
    /// cluster.psql("ALTER SYSTEM SET max_connections = 50")?;
    /// cluster.restart()?; // a setting that needs a restart
    /// assert_eq!((cluster.port(), cluster.psql("SHOW max_connections")?), (port, "50".into()));
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn restart(&mut self) -> Result<(), Error> {
        self.stop()?;
        self.start_server()
    }

    fn stop_with(&mut self, signal: Signal) -> Result<(), Error> {
        let Some(mut server) = self.server.take() else {
            return Ok(());
        };
        let pid = Pid::from_raw(server.child.id() as i32);
        let _ = kill(pid, signal);
        // Block on the exit itself (in a helper thread, so that we can also bound the wait).
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(server.child.wait());
        });
        let stopped = match rx.recv_timeout(STOP_TIMEOUT) {
            Ok(_) => Ok(()),
            Err(_) => {
                let _ = kill(pid, Signal::SIGKILL);
                let _ = rx.recv_timeout(STOP_TIMEOUT);
                Err(Error::new("the server did not stop in time and was killed"))
            }
        };
        // Reaped (or beyond reach): its PID may now go to another process.
        record_server(self.root.path(), None);
        stopped
    }

    fn start_server(&mut self) -> Result<(), Error> {
        let keep_port = self.port != 0;
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = if keep_port { self.port } else { free_port()? };
            match self.spawn(port) {
                Ok(server) => {
                    self.port = port;
                    self.server = Some(server);
                    return Ok(());
                }
                Err((e, port_taken)) if port_taken && !keep_port => last = Some(e),
                Err((e, _)) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::new("could not start the server")))
    }

    /// Starts `postgres` and waits for its "ready" log line. On failure, says whether the
    /// port was taken (worth retrying on another).
    fn spawn(&self, port: u16) -> Result<Server, (Error, bool)> {
        let log = self.root.path().join(format!("server-{port}.log"));
        let mut child = self
            .install
            .command("postgres")
            .arg("-D")
            .arg(&self.data)
            .args(["-p", &port.to_string()])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| (Error::io("could not run postgres", e), false))?;
        if !record_server(self.root.path(), Some(child.id())) {
            let _ = child.kill();
            let _ = child.wait();
            return Err((
                Error::new("the cluster is being stopped (stop_every_cluster)"),
                false,
            ));
        }
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| (Error::new("no stderr pipe"), false))?;
        let (ready_tx, ready_rx) = mpsc::channel();
        let mut file = std::fs::File::create(&log)
            .map_err(|e| (Error::io("could not create the server log", e), false))?;
        // The reader keeps draining stderr for the server's whole life: a full pipe would stall it.
        std::thread::spawn(move || {
            let mut ready_tx = Some(ready_tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(file, "{line}");
                if line.contains(READY_LINE)
                    && let Some(tx) = ready_tx.take()
                {
                    let _ = tx.send(true);
                }
            }
            if let Some(tx) = ready_tx.take() {
                let _ = tx.send(false);
            }
        });
        let ready = ready_rx.recv_timeout(START_TIMEOUT).unwrap_or(false);
        if ready {
            return Ok(Server { child, log });
        }
        let _ = child.kill();
        let _ = child.wait();
        record_server(self.root.path(), None);
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let port_taken = text.contains("could not bind") || text.contains("Address already in use");
        Err((
            Error::new(format!(
                "postgres did not start on port {port}; its log:\n{text}"
            )),
            port_taken,
        ))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Immediate shutdown: nothing in a throwaway cluster is worth a checkpoint.
        let _ = self.stop_with(Signal::SIGQUIT);
        // The directory goes with `root` right after this.
        live().remove(self.root.path());
    }
}

/// The directories of this process's clusters not yet dropped, for [`stop_every_cluster`],
/// each with the PID of the server this process spawned for it while that server may run
/// (`None` before its first start and once it has been stopped and reaped): a stop must find
/// a server that has not yet written its `postmaster.pid`.
fn live() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<PathBuf, Option<u32>>> {
    static LIVE: Mutex<std::collections::BTreeMap<PathBuf, Option<u32>>> =
        Mutex::new(std::collections::BTreeMap::new());
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records `server` as the server of the cluster in `root`, or clears it. `false` when the
/// cluster is no longer listed: [`stop_every_cluster`] has taken it, so the process is on its
/// way out and a server started now would run on as an orphan.
fn record_server(root: &Path, server: Option<u32>) -> bool {
    match live().get_mut(root) {
        Some(entry) => {
            *entry = server;
            true
        }
        None => false,
    }
}

/// Stops every cluster this process started and has not dropped (immediate shutdown) and
/// removes its directory; returns how many. For a process about to exit without running
/// destructors: a command stopped by Ctrl-C or SIGTERM calls it before it exits, so its
/// throwaway servers do not run on as orphans until the next process's sweep. The clusters'
/// handles are left dangling: call it only on the way out.
///
/// ```no_run
/// let cluster = slipstream_testkit::Cluster::start()?;
/// let data = cluster.data_dir().to_path_buf();
/// std::mem::forget(cluster); // as a process killed by a signal would
/// assert_eq!(slipstream_testkit::stop_every_cluster(), 1);
/// assert!(!data.exists());
/// # Ok::<(), slipstream_testkit::Error>(())
/// ```
pub fn stop_every_cluster() -> usize {
    let dirs = std::mem::take(&mut *live());
    for (dir, server) in &dirs {
        stop_and_remove(dir, *server);
    }
    dirs.len()
}

/// A fresh directory owned by the server's OS user for a cluster (`what` names it in errors),
/// and the path its data directory will have.
///
/// Marked with the process that made it (`OWNER_FILE`), so that a later process can tell a
/// cluster whose test process was killed (SIGKILL skips `Drop`) and remove it (`sweep`).
fn new_root(prefix: &str, what: &str) -> Result<(Install, tempfile::TempDir, PathBuf), Error> {
    let install = Install::find()?;
    let base = base_dir()?;
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| sweep(&base));
    let root = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&base)
        .map_err(|e| Error::io(format!("could not create {what} directory"), e))?;
    if let Some(me) = ProcessMark::current() {
        let _ = std::fs::write(root.path().join(OWNER_FILE), me.to_text());
    }
    install.owner().chown(root.path())?;
    let data = root.path().join("data");
    Ok((install, root, data))
}

/// The file in a cluster's directory naming the process that made it.
const OWNER_FILE: &str = "owner";
/// Prefixes of the directories `new_root` makes.
const ROOT_PREFIXES: [&str; 2] = ["c-", "s-"];

/// Removes the clusters whose making process has died without dropping them, stopping their
/// servers first (immediate shutdown). A directory without an owner file (being made, or
/// older) or whose server cannot be told for sure (`LockFile::Unknown`) is left alone.
fn sweep(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !ROOT_PREFIXES
            .iter()
            .any(|p| name.to_string_lossy().starts_with(p))
        {
            continue;
        }
        let dir = entry.path();
        let owner = std::fs::read_to_string(dir.join(OWNER_FILE))
            .ok()
            .and_then(|t| ProcessMark::parse(&t));
        if owner.is_none_or(|o| o.is_alive()) {
            continue;
        }
        stop_and_remove(&dir, None);
    }
}

/// Stops the server of the cluster directory `dir` (immediate shutdown, waiting for it to
/// exit) and removes the directory. `spawned` is the server this process started for it, if
/// any: one still starting has no whole `postmaster.pid` yet. A directory whose server cannot
/// be told for sure (`LockFile::Unknown`, and not this process's child) is left alone.
fn stop_and_remove(dir: &Path, spawned: Option<u32>) {
    let server = match lock_file(&dir.join("data")) {
        LockFile::Live { pid, .. } => Some(pid),
        // An unreaped child of this process is the server it spawned, whatever the file says.
        _ if spawned.is_some_and(is_own_child) => spawned,
        LockFile::Unknown => return,
        LockFile::Stale => None,
    };
    if let Some(server) = server {
        let pid = Pid::from_raw(server as i32);
        let _ = kill(pid, Signal::SIGQUIT);
        let deadline = std::time::Instant::now() + STOP_TIMEOUT;
        // A server this process spawned stays a zombie once it exits: it is not reaped here,
        // since its `Child` handle may still be waited on or killed, which must not reach a
        // process that reused the PID. The zombie goes when this process exits.
        while !has_exited(server) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

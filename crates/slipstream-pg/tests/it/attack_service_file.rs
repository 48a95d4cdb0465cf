//! Attacks on "connection service files are read exactly as libpq 15 reads them"
//! (docs/client.md, "Connection service files"; `src/service_file.rs`).
//!
//! Method: a differential against the installed libpq. Each case is a connection string, a
//! user service file (named by `PGSERVICEFILE`, or found as `$HOME/.pg_service.conf`), a
//! system one (`$PGSYSCONFDIR/pg_service.conf`) and some `PG*` variables, all in a temporary
//! directory. libpq's answer comes from `attack_service_file/oracle.c` (`PQconnectStart` then
//! `PQconninfo`: the options after the string, the service and the environment), a process
//! of its own whose environment is emptied and set to the case's before each; slipstream's from `Config::apply_vars` with
//! the same variables given by a closure, so no test touches this process's environment. The
//! hosts are socket directories that do not exist, so neither side reaches anything.
//!
//! Hand-written cases cover each rule (the priority order, both files, the system file
//! fallback, every parsing rule, the errors); a generated differential draws random files,
//! strings and environments from the same pieces: 200 cases with a fixed seed in the normal
//! run, 5000 under `SLIPSTREAM_ATTACK_LONG=1`; `SLIPSTREAM_SERVICE_SEED` replays another seed.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use slipstream_pg::{Config, Host, SslMode};

use crate::seeded::Rng;

const ORACLE_C: &str = include_str!("attack_service_file/oracle.c");

/// Where the user's service file is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Via {
    /// `PGSERVICEFILE` names it.
    ServiceFile,
    /// `$HOME/.pg_service.conf`, no `PGSERVICEFILE`.
    Home,
    /// `PGSERVICEFILE` names a file that does not exist.
    MissingServiceFile,
}

/// One case: what both clients are given.
#[derive(Debug, Clone)]
struct Case {
    string: String,
    user_file: Option<String>,
    via: Via,
    sys_file: Option<String>,
    env: Vec<(String, String)>,
}

impl Case {
    fn new(string: &str) -> Case {
        Case {
            string: string.into(),
            user_file: None,
            via: Via::ServiceFile,
            sys_file: None,
            env: Vec::new(),
        }
    }
    fn user(mut self, file: &str) -> Case {
        self.user_file = Some(file.to_string());
        self
    }
    fn sys(mut self, file: &str) -> Case {
        self.sys_file = Some(file.to_string());
        self
    }
    fn via(mut self, via: Via) -> Case {
        self.via = via;
        self
    }
    fn env(mut self, name: &str, value: &str) -> Case {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Writes the files under `dir`; the variables both clients get.
    fn setup(&self, dir: &Path) -> Vec<(String, String)> {
        let home = dir.join("home");
        let sys = dir.join("sys");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&sys).unwrap();
        let user_path = match self.via {
            Via::Home => home.join(".pg_service.conf"),
            _ => dir.join("user.conf"),
        };
        if let (Some(f), false) = (&self.user_file, self.via == Via::MissingServiceFile) {
            std::fs::write(&user_path, f).unwrap();
        }
        if let Some(f) = &self.sys_file {
            std::fs::write(sys.join("pg_service.conf"), f).unwrap();
        }
        let mut env = vec![
            ("HOME".to_string(), home.display().to_string()),
            ("PGSYSCONFDIR".to_string(), sys.display().to_string()),
        ];
        if self.via != Via::Home {
            env.push(("PGSERVICEFILE".into(), user_path.display().to_string()));
        }
        env.extend(self.env.iter().cloned());
        env
    }
}

/// libpq's verdict.
#[derive(Debug)]
enum Theirs {
    /// Refused, with its message: the service lookup, or a value it checks before connecting.
    Refused(String),
    /// The options it would connect with.
    Read(BTreeMap<String, String>),
}

fn unhex(h: &str) -> String {
    let h = h.strip_prefix('h').unwrap_or(h);
    let bytes: Vec<u8> = (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The oracle process, one per thread (the tests run in parallel), kept for the run.
struct Oracle {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Drop for Oracle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

thread_local! {
    static ORACLE: RefCell<Option<Oracle>> = const { RefCell::new(None) };
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// libpq's answer for `string` under exactly the variables `env`.
fn ask(string: &str, env: &[(String, String)]) -> String {
    ORACLE.with(|slot| {
        let mut slot = slot.borrow_mut();
        let o = slot.get_or_insert_with(|| {
            let mut child = Command::new(crate::libpq_program::libpq_program(
                "service_oracle",
                ORACLE_C,
            ))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the service oracle");
            Oracle {
                stdin: child.stdin.take().unwrap(),
                stdout: BufReader::new(child.stdout.take().unwrap()),
                child,
            }
        });
        let mut req = String::from("CLEAR\n");
        for (k, v) in env {
            req += &format!("SET {k} {}\n", hex(v.as_bytes()));
        }
        req += &format!("RUN {}\n", hex(string.as_bytes()));
        o.stdin.write_all(req.as_bytes()).unwrap();
        o.stdin.flush().unwrap();
        let mut out = String::new();
        loop {
            let mut line = String::new();
            let n = o.stdout.read_line(&mut line).unwrap();
            assert!(n > 0, "the service oracle stopped");
            if line == "END\n" {
                return out;
            }
            out += &line;
        }
    })
}

fn theirs(case: &Case, env: &[(String, String)]) -> Theirs {
    let stdout = ask(&case.string, env);
    let mut msg = String::new();
    let mut opts = BTreeMap::new();
    for line in stdout.lines() {
        let (k, v) = line.split_once(' ').unwrap();
        if k == "MSG" {
            msg = unhex(v);
        } else {
            opts.insert(k.to_string(), unhex(v));
        }
    }
    // The hosts are socket directories that do not exist: that failure is expected.
    if msg.is_empty() || msg.starts_with("connection to server on socket") {
        Theirs::Read(opts)
    } else {
        Theirs::Refused(msg.trim().to_string())
    }
}

fn ours(case: &Case, env: &[(String, String)]) -> Result<Config, String> {
    let var = |name: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    case.string
        .parse::<Config>()
        .and_then(|c| c.apply_vars(var))
        .map_err(|e| e.to_string())
}

/// libpq's user when none is given (the effective user's name), as libpq shows it.
fn os_user() -> String {
    static USER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    USER.get_or_init(|| match run(&Case::new("host=/nonexistent-h67-base")).0 {
        Theirs::Read(opts) => opts["user"].clone(),
        other => panic!("libpq with nothing given: {other:?}"),
    })
    .clone()
}

fn run(case: &Case) -> (Theirs, Result<Config, String>) {
    let dir = tempfile::tempdir().unwrap();
    let env = case.setup(dir.path());
    (theirs(case, &env), ours(case, &env))
}

/// The parameters compared, as libpq shows them after defaults, from slipstream's config.
fn effective(c: &Config) -> BTreeMap<&'static str, String> {
    let hosts = c
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(n) => n.clone(),
            Host::Unix(p) => p.display().to_string(),
        })
        .collect::<Vec<_>>()
        .join(",");
    let ports = match c.get_ports() {
        [] => "5432".to_string(),
        p => p.iter().map(u16::to_string).collect::<Vec<_>>().join(","),
    };
    let user = c
        .get_user()
        .filter(|u| !u.is_empty())
        .map_or_else(os_user, str::to_string);
    let dbname = c
        .get_dbname()
        .filter(|d| !d.is_empty())
        .map_or_else(|| user.clone(), str::to_string);
    let debug = format!("{c:?}");
    let options = debug
        .split_once("options: Some(\"")
        .map_or("", |(_, rest)| rest.split_once("\")").unwrap().0)
        .to_string();
    let mut m = BTreeMap::from([
        ("port", ports),
        ("user", user),
        ("dbname", dbname),
        ("options", options),
        ("sslmode", format!("{:?}", c.get_ssl_mode())),
    ]);
    if !c.get_hosts().is_empty() {
        m.insert("host", hosts);
    }
    if let Some(a) = c.get_application_name() {
        m.insert("application_name", a.to_string());
    }
    m
}

/// The same parameters from libpq's options.
fn libpq_effective(opts: &BTreeMap<String, String>) -> BTreeMap<&'static str, String> {
    let get = |k: &str| opts.get(k).cloned().unwrap_or_default();
    let port = Some(get("port"))
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "5432".into());
    let sslmode: SslMode = get("sslmode").parse().unwrap();
    let mut m = BTreeMap::from([
        ("port", port),
        ("user", get("user")),
        ("dbname", get("dbname")),
        ("options", get("options")),
        ("sslmode", format!("{sslmode:?}")),
    ]);
    for k in ["host", "application_name"] {
        if let Some(v) = opts.get(k) {
            m.insert(k, v.clone());
        }
    }
    m
}

/// `Err(what differs)` unless slipstream reads the case as libpq does; else whether it read
/// it (`false`: both refused, or the documented difference). The one documented
/// difference: a parameter libpq 15 knows and slipstream does not support (`hostaddr`,
/// `sslcrl`, ...), which libpq takes from the file and slipstream refuses, naming it.
fn differ(case: &Case) -> Result<bool, String> {
    let (t, o) = run(case);
    match (&t, &o) {
        // slipstream refuses a bad value in the string itself before it looks for the
        // service; libpq reads the service first and may report its file's error instead.
        (Theirs::Refused(_), Err(_)) if case.string.parse::<Config>().is_err() => Ok(false),
        (Theirs::Refused(t), Err(e)) => {
            // Where libpq names the file's line, so must slipstream.
            if let Some((_, line)) = t.split_once("\", line ") {
                let line = line.split_whitespace().next().unwrap_or(line);
                if !e.contains(&format!("line {line}")) {
                    return Err(format!("libpq: {t}\n  ours does not name line {line}: {e}"));
                }
            }
            if t.contains("too long") && !e.contains("too long") {
                return Err(format!("libpq: {t}\n  ours: {e}"));
            }
            Ok(false)
        }
        (Theirs::Read(opts), Err(e)) => {
            let unsupported = [
                "hostaddr",
                "sslcrl",
                "sslcrldir",
                "requirepeer",
                "krbsrvname",
            ];
            if unsupported
                .iter()
                .any(|k| opts.contains_key(*k) && e.contains(&format!("`{k}`")))
                && e.contains("service file")
            {
                return Ok(false);
            }
            Err(format!("libpq reads {opts:?}\n  ours refuses: {e}"))
        }
        (Theirs::Refused(t), Ok(c)) => Err(format!("libpq refuses: {t}\n  ours reads {c:?}")),
        (Theirs::Read(opts), Ok(c)) => {
            let (want, got) = (libpq_effective(opts), effective(c));
            if want == got {
                Ok(true)
            } else {
                Err(format!("libpq: {want:?}\n  ours:  {got:?}"))
            }
        }
    }
}

#[track_caller]
fn same(case: Case) {
    if let Err(e) = differ(&case) {
        panic!("{case:?}\n  {e}");
    }
}

/// The error slipstream gives, checked to be a refusal libpq also makes.
#[track_caller]
fn refused(case: Case) -> String {
    let (t, o) = run(&case);
    assert!(matches!(t, Theirs::Refused(_)), "libpq: {t:?} for {case:?}");
    same(case);
    o.unwrap_err()
}

/// Holds: the string's values beat the service's, which beat the `PG*` variables, which fill
/// what neither gives; `service=` (string or URL) beats `PGSERVICE`.
#[test]
fn holds_priority_string_then_service_then_environment() {
    let file = "[a]\nhost=/svc-a\nport=6000\nuser=svcuser\n[b]\nhost=/svc-b\n";
    let base = Case::new("service=a")
        .user(file)
        .env("PGHOST", "/env-h")
        .env("PGPORT", "7000")
        .env("PGUSER", "envuser")
        .env("PGDATABASE", "envdb");
    same(base.clone());
    let (_, o) = run(&base);
    let c = o.unwrap();
    assert_eq!(c.get_hosts(), &[Host::Unix("/svc-a".into())]);
    assert_eq!(
        (c.get_ports(), c.get_dbname()),
        (&[6000][..], Some("envdb"))
    );
    same(Case {
        string: "service=a host=/str-h user=''".into(),
        ..base.clone()
    });
    same(base.clone().env("PGSERVICE", "b"));
    same(Case {
        string: String::new(),
        ..base.clone().env("PGSERVICE", "b")
    });
    same(Case {
        string: "postgresql:///strdb?service=b".into(),
        ..base.clone().env("PGSERVICE", "a")
    });
    // A value the section gives empty keeps the variable out, as a string's would.
    same(
        Case::new("service=a")
            .user("[a]\nuser=\n")
            .env("PGUSER", "envuser"),
    );
}

/// Holds: the user file first, the system file only when the user file lacks the service
/// (not when its section is empty), `~/.pg_service.conf` when `PGSERVICEFILE` is unset, a
/// missing home file skipped, and a missing `PGSERVICEFILE` an error.
#[test]
fn holds_which_file_is_read() {
    let sys = "[a]\nhost=/sys-a\n[s]\nhost=/sys-s\nport=6001\n";
    for via in [Via::ServiceFile, Via::Home] {
        let user = Case::new("")
            .user("[a]\nhost=/user-a\n[e]\n")
            .sys(sys)
            .via(via);
        for service in ["a", "s", "e"] {
            same(user.clone().env("PGSERVICE", service));
        }
        let e = refused(user.clone().env("PGSERVICE", "nowhere"));
        assert!(
            e.contains("definition of service \"nowhere\" not found"),
            "{e}"
        );
        assert!(e.contains("PGSERVICE=nowhere"), "{e}");
    }
    // No user file in the home directory: the system file is read.
    same(Case::new("service=s").sys(sys).via(Via::Home));
    let e = refused(
        Case::new("service=s")
            .user("[s]\n")
            .sys(sys)
            .via(Via::MissingServiceFile),
    );
    assert!(e.contains("user.conf") && e.contains("not found"), "{e}");
    // An empty PGSERVICE is the service named "".
    same(
        Case::new("")
            .user("[]\nhost=/empty-name\n")
            .env("PGSERVICE", ""),
    );
    same(
        Case::new("service=")
            .user("[]\nhost=/empty-name\n")
            .env("PGSERVICE", "a"),
    );
}

/// Holds: every parsing rule of libpq 15's `parseServiceFile`, compared case by case.
#[test]
fn holds_parsing_rules_as_libpq() {
    let long = |n: usize| format!("application_name={}", "x".repeat(n - 17));
    let files = [
        // Comments, blank lines, leading and trailing white space, CR LF line ends.
        "# top\n\n[a]\n  # host=/comment\n\t host=/a \r\n\x0bport=6000\x0c\r\n".to_string(),
        // A value keeps inner and leading white space after `=`, and a `#` inside it.
        "[a]\napplication_name= my app #1\n".into(),
        // Junk before any section and in other sections is not read.
        "junk\nfoo=bar\n[b]\nnot a pair\n[a]\nhost=/a\n".into(),
        // `[a]junk` is section a; `[A]` is not.
        "[A]\nhost=/upper\n[a]junk\nhost=/a-junk\n".into(),
        // The section ends at the next header: a second [a] is never read.
        "[a]\nhost=/first\n[b]\n[a]\nport=6000\n".into(),
        // A keyword given twice keeps its first value.
        "[a]\nport=6000\nport=7000\nhost=/a\nhost=/b\n".into(),
        // An empty section defines the service.
        "[a]\n[b]\nhost=/b\n".into(),
        // A NUL ends what libpq sees of a line (C strings).
        "[a]\nhost=/nul\0junk\nport=6000\0\n".into(),
        // Lines of 1021 bytes (plus the newline) fit; a 1022-byte one does not.
        format!("[a]\n{}\n", long(1021)),
        format!("[a]\n{}", long(1022)),
    ];
    for file in &files {
        same(Case::new("service=a").user(file).sys("[a]\nhost=/sys\n"));
    }
    for (file, says) in [
        ("[a]\nhost = /a\n", "syntax error"),
        ("[a]\nhost =/a\n", "syntax error"),
        ("[a]\nHOST=/a\n", "syntax error"),
        ("[a]\nno pair here\n", "syntax error"),
        ("[a]\n=value\n", "syntax error"),
        ("[a]\nfoo=bar\n", "syntax error"),
        // A no-break space is not white space to C's isspace: part of the keyword.
        ("[a]\n\u{a0}host=/a\n", "syntax error"),
        ("[a]\nrequiressl=1\n", "syntax error"),
        ("[a]\nrequire_auth=md5\n", "syntax error"),
        ("[a]\nstatement_cache_size=0\n", "syntax error"),
        ("[a]\nservice=b\n[b]\n", "nested service"),
        ("[a]\nldapx=1\n", "LDAP"),
        ("[a]\nhost=/a\nport=6000\nport\n", "line 4"),
    ] {
        let e = refused(Case::new("service=a").user(file));
        assert!(
            e.contains(says) && e.contains("user.conf\", line"),
            "{file:?}: {e}"
        );
    }
    for file in [
        format!("[a]\n{}\n", long(1022)),
        format!("[b]\n{}\n[a]\nhost=/a\n", "x".repeat(5000)),
    ] {
        let e = refused(Case::new("service=a").user(&file));
        assert!(e.contains("line 2 too long"), "{e}");
    }
    // A value libpq refuses when connecting is refused, naming the file and line.
    let e = refused(Case::new("service=a").user("[a]\nsslmode=bogus\n"));
    assert!(
        e.contains("user.conf\", line 2") && e.contains("sslmode"),
        "{e}"
    );
    // ...unless the string gives that parameter: then the file's value is not read.
    same(Case::new("service=a sslmode=disable").user("[a]\nsslmode=bogus\n"));
}

/// Holds: a parameter libpq 15 takes from a service file but slipstream does not support is
/// refused, naming it, the file and the line, as the same parameter in a string is refused;
/// never dropped in silence.
#[test]
fn holds_unsupported_parameters_are_refused_not_dropped() {
    for key in ["sslcrl=/x.crl", "requirepeer=postgres", "krbsrvname=pg"] {
        let case = Case::new("service=a host=/nonexistent-h67").user(&format!("[a]\n{key}\n"));
        let (t, o) = run(&case);
        assert!(matches!(t, Theirs::Read(_)), "libpq reads {key}: {t:?}");
        let e = o.unwrap_err();
        let name = key.split('=').next().unwrap();
        assert!(
            e.contains(&format!("`{name}`")) && e.contains("user.conf\", line 2"),
            "{key}: {e}"
        );
        same(case);
    }
}

const NAMES: [&str; 3] = ["a", "b", ""];

/// A keyword and a value libpq and slipstream can both take (no name that needs DNS).
fn pair(rng: &mut Rng, origin: &str) -> (&'static str, String) {
    let key = rng.pick(&[
        "host",
        "port",
        "user",
        "dbname",
        "application_name",
        "options",
        "sslmode",
    ]);
    let value = match key {
        "host" => format!("/{origin}-h{}", rng.below(2)),
        "port" => rng.pick(&["5433", "6000", "7001", "", "bogus"]).into(),
        "user" => rng.pick(&["alice", "bob", ""]).into(),
        "dbname" => rng.pick(&["db1", "db2", ""]).into(),
        "application_name" => rng.pick(&["app1", "app 2", ""]).into(),
        "options" => rng.pick(&["-c geqo=off", ""]).into(),
        _ => rng
            .pick(&["disable", "require", "prefer", "allow", "bogus"])
            .into(),
    };
    (key, value)
}

fn file(rng: &mut Rng) -> String {
    let mut out = String::new();
    // Mostly a section of a service the case may name, so that lookups often succeed.
    if rng.chance(70) {
        out += &format!("[{}]\n", rng.pick(&NAMES));
    }
    for _ in 0..rng.below(10) {
        let line = match rng.below(40) {
            0..=4 => {
                let name = rng.pick(&["a", "b", "", "c", "A"]);
                let junk = rng.pick(&["", "", "", "junk", " "]);
                let pad = rng.pick(&["", "", " ", "\t"]);
                format!("{pad}[{name}]{junk}")
            }
            5..=30 => {
                let (k, v) = pair(rng, "svc");
                let pad = rng.pick(&["", "", "", " ", "\t"]);
                let tail = rng.pick(&["", "", "", " ", "\r"]);
                format!("{pad}{k}={v}{tail}")
            }
            31 => rng.pick(&["", "#c", "  # host=/c"]).into(),
            32 => rng
                .pick(&["host = /sp", "HOST=/up", "junk", "foo=bar", "=x"])
                .into(),
            33 => rng.pick(&["service=a", "ldapx", "requiressl=1"]).into(),
            34 => rng.pick(&["sslcrl=/x.crl", "krbsrvname=pg"]).into(),
            35 => format!("application_name={}", "l".repeat(1003 + rng.below(3))),
            _ => {
                let (k, v) = pair(rng, "dup");
                format!("{k}={v}")
            }
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn case(rng: &mut Rng) -> Case {
    let mut string = Vec::new();
    for _ in 0..rng.below(3) {
        let (k, v) = pair(rng, "str");
        string.push(format!("{k}='{v}'"));
    }
    if rng.chance(50) {
        string.push(format!("service='{}'", rng.pick(&NAMES)));
    }
    let string = if rng.chance(10) {
        format!("postgresql:///?service={}", rng.pick(&NAMES))
    } else {
        string.join(" ")
    };
    let mut c = Case::new(&string);
    c.via = match rng.below(20) {
        0 => Via::MissingServiceFile,
        1..=9 => Via::Home,
        _ => Via::ServiceFile,
    };
    if rng.chance(80) {
        c.user_file = Some(file(rng));
    }
    if rng.chance(50) {
        c.sys_file = Some(file(rng));
    }
    if rng.chance(60) {
        c = c.env("PGSERVICE", rng.pick(&NAMES));
    }
    for (name, value) in [
        ("PGHOST", "/env-h"),
        ("PGPORT", "7000"),
        ("PGUSER", "envuser"),
        ("PGDATABASE", "envdb"),
        ("PGAPPNAME", "envapp"),
        ("PGSSLMODE", "disable"),
        ("PGOPTIONS", "-c geqo=on"),
    ] {
        if rng.chance(25) {
            c = c.env(name, value);
        }
    }
    c
}

/// Holds: random service files, strings and environments, each read by slipstream as libpq
/// reads it (or refused where libpq refuses, or for a parameter slipstream does not support).
#[test]
fn holds_generated_cases_read_as_libpq() {
    let long = std::env::var_os("SLIPSTREAM_ATTACK_LONG").is_some();
    let cases = if long { 5000 } else { 200 };
    let seed = std::env::var("SLIPSTREAM_SERVICE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5e41_1ce5_f11e_u64);
    let mut rng = Rng(seed);
    let (mut read, mut refused) = (0, 0);
    for i in 0..cases {
        let c = case(&mut rng);
        match differ(&c) {
            Ok(true) => read += 1,
            Ok(false) => refused += 1,
            Err(e) => panic!("seed {seed}, case {i}: {c:?}\n  {e}"),
        }
    }
    println!("{cases} cases (seed {seed}): {read} read alike, {refused} refused by both");
    // The generator must reach both outcomes, or it tests little.
    assert!(
        read > cases / 10 && refused > cases / 10,
        "read {read}, refused {refused}"
    );
}

/// Promise: "bad input gets a clear error, never silent loss". A configuration naming a
/// service whose file was never read (built with `Config::service` or parsed from a string,
/// then given to `connect_config` or a pool without `apply_env`) would connect without the
/// service's parameters, to the default host as the default user. It is refused, saying what
/// to call; once applied, it connects to where the service says.
#[tokio::test]
async fn holds_a_service_never_read_is_refused_not_ignored() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    for config in [
        Config::new().service("real"),
        "service=real".parse::<Config>().unwrap(),
        // Another service named after the environment was applied is not read either.
        Config::new()
            .host("/nonexistent-h67")
            .apply_vars(|_| None)
            .unwrap()
            .service("real"),
    ] {
        let e = slipstream_pg::connect_config(&config).await.unwrap_err();
        assert!(
            e.to_string().contains("apply_env") && e.to_string().contains("\"real\""),
            "{e}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("services.conf");
    std::fs::write(
        &file,
        format!(
            "[real]\nhost=127.0.0.1\nport={}\nuser=postgres\ndbname=postgres\nsslmode=disable\n",
            cluster.port()
        ),
    )
    .unwrap();
    let file = file.display().to_string();
    let config = Config::new()
        .service("real")
        .apply_vars(|name| (name == "PGSERVICEFILE").then(|| file.clone()))
        .unwrap();
    let mut client = slipstream_pg::connect_config(&config).await.unwrap();
    let port: String = client
        .query_one("SELECT current_setting('port')", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(port, cluster.port().to_string());
}

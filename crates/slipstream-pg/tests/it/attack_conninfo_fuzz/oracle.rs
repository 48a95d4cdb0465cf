//! libpq's reading of a connection string: `oracle.c` (see its header), built once against the
//! installed libpq-dev and run as a child process that answers one string per line.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use super::ORACLE_LIMIT_SECS;

const ORACLE_C: &str = include_str!("oracle.c");

/// libpq's verdict on one string.
#[derive(Debug)]
pub(super) enum Theirs {
    /// `PQconninfoParse` refused it.
    Refused(String),
    /// It read these options; `refusal` is the first complaint about a value that libpq made
    /// when asked to connect with them (a bad port, sslmode, connect_timeout...), if any.
    Read {
        opts: BTreeMap<String, Vec<u8>>,
        refusal: Option<String>,
    },
}

/// The oracle process: one string in, one verdict out, over pipes.
pub(super) struct Oracle {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// The oracle's executable.
fn oracle_exe() -> PathBuf {
    crate::libpq_program::libpq_program("conninfo_oracle", ORACLE_C)
}

/// The oracle's environment: no PG* variable of this process, no home directory (no
/// ~/.pgpass, no ~/.postgresql), the C locale for libpq's messages.
fn scrubbed(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars() {
        if k.starts_with("PG") {
            cmd.env_remove(k);
        }
    }
    cmd.env("HOME", "/nonexistent-attack-home")
        .env("LC_ALL", "C")
        .env("KRB5CCNAME", "FILE:/nonexistent-attack-home/krb5cc")
}

impl Oracle {
    pub(super) fn start() -> Oracle {
        let mut cmd = Command::new("timeout");
        cmd.arg(ORACLE_LIMIT_SECS)
            .arg(crate::libpq_program::libpq_program(
                "conninfo_oracle",
                ORACLE_C,
            ));
        let mut child = scrubbed(&mut cmd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the libpq oracle");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Oracle {
            child,
            stdin,
            stdout,
        }
    }

    /// The keywords libpq 15 knows (`PQconndefaults`).
    pub(super) fn keywords() -> Vec<String> {
        let mut cmd = Command::new(oracle_exe());
        let out = scrubbed(&mut cmd).arg("--keys").output().unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    pub(super) fn read(&mut self, s: &str) -> Theirs {
        writeln!(self.stdin, "{}", hex(s.as_bytes())).unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let mut words = line.split_whitespace();
        match words.next() {
            Some("ERR") => Theirs::Refused(unhex_text(words.next().unwrap())),
            Some("OK") => {
                let attempts = [
                    unhex_text(words.next().unwrap()),
                    unhex_text(words.next().unwrap()),
                ];
                let opts = words
                    .map(|w| {
                        let (k, v) = w.split_once("=h").unwrap();
                        (k.to_string(), unhex(v))
                    })
                    .collect();
                Theirs::Read {
                    opts,
                    refusal: value_refusal(&attempts),
                }
            }
            _ => panic!("the libpq oracle stopped (killed after {ORACLE_LIMIT_SECS} s?): {line:?}"),
        }
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(h: &str) -> Vec<u8> {
    let h = h.strip_prefix('h').unwrap_or(h);
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
        .collect()
}

fn unhex_text(h: &str) -> String {
    String::from_utf8_lossy(&unhex(h)).into_owned()
}

/// The first line of the oracle's connection attempts that is a complaint about a value.
/// Not one: the attempts failing as they were made to (no socket in the directory, the
/// listener closing at once, libpq's continuation lines); GSSAPI encryption being impossible
/// here (it needs a Kerberos ticket; slipstream refuses `gssencmode=require` by name, see
/// [`Known::GssEncRequire`]).
fn value_refusal(attempts: &[String]) -> Option<String> {
    const AS_MADE_TO_FAIL: [&str; 8] = [
        "No such file or directory",
        "server closed the connection unexpectedly",
        "SSL SYSCALL error",
        "SSL error",
        "Connection reset by peer",
        "could not send",
        "could not receive data",
        "GSSAPI encryption required but was impossible",
    ];
    attempts
        .iter()
        .flat_map(|a| a.lines())
        .filter(|line| !line.is_empty() && !line.starts_with('\t'))
        .find(|line| {
            let reason = line.split_once(" failed: ").map_or(*line, |(_, r)| r);
            !AS_MADE_TO_FAIL.iter().any(|benign| reason.contains(benign))
        })
        .map(str::to_string)
}

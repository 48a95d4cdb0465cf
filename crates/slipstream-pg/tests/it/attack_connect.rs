//! Attacks on the *connecting* promises of docs/client.md ("Connecting", "Routing between
//! hosts", "The password file", "require_auth", "Channel binding", "TLS").
//!
//! Method: differential testing against libpq itself. The same connection string (and the same
//! environment / password file) is given to `psql` (libpq 15 on this machine) and to
//! slipstream-pg, and the server each lands on (`port|user|database`, read from the server) or
//! the refusal is compared. Every call is bounded (`timeout` for psql, a tokio timeout for
//! slipstream), so a hang fails instead of hanging.
//!
//! Tests named `break_*` demonstrated a broken promise and FAILED on the commit they were
//! written against (0b9aa8f; all 29 pass since the fixes that followed); tests named `holds_*`
//! were tried and passed; tests named `differs_*` pin a difference from libpq that
//! docs/client.md documents. Each says the promise, what libpq does and what slipstream does.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use slipstream_testkit::Cluster;

use super::tls::{pki, tls_cluster_with as tls_cluster};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Every connection attempt of ours must end within this.
const LIMIT: Duration = Duration::from_secs(10);
/// Where a session landed: the server's port (also for Unix sockets), user and database.
const WHERE: &str =
    "SELECT current_setting('port') || '|' || current_user || '|' || current_database()";

// ---- the two clients ----------------------------------------------------------------------

/// libpq's verdict: `Ok("port|user|db")` or `Err(stderr)`. No PG* variable of this process
/// leaks in; `env` is added; HOME points nowhere so that no ~/.pgpass is read by accident.
pub(super) async fn libpq(conninfo: &str, env: &[(&str, &str)]) -> Result<String, String> {
    let mut cmd = tokio::process::Command::new("timeout");
    cmd.args(["6", "psql", "-X", "-w", "-At", "-c", WHERE, "-d", conninfo]);
    scrub_env(cmd.as_std_mut(), env);
    let out = cmd.output().await.expect("run psql");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else if out.status.code() == Some(124) {
        Err("HANG: psql had not finished after 6 s".into())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The C program `pq_client` runs.
const PQ_CLIENT_C: &str = r#"#include <stdio.h>
#include <libpq-fe.h>
int main(int argc, char **argv) {
    PGconn *c = PQconnectdb(argv[1]);
    if (PQstatus(c) != CONNECTION_OK) { fprintf(stderr, "%s", PQerrorMessage(c)); return 1; }
    PGresult *r = PQexec(c, argv[2]);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) { fprintf(stderr, "%s", PQerrorMessage(c)); return 1; }
    printf("%s\n", PQgetvalue(r, 0, 0));
    PQfinish(c);
    return 0;
}
"#;

/// libpq without psql in between: a tiny C program around PQconnectdb (built once with gcc
/// against the installed libpq-dev) that prints the first value of `query`.
async fn pq_client(conninfo: &str, query: &str) -> Result<String, String> {
    let exe = crate::libpq_program::libpq_program("attack_pq_client", PQ_CLIENT_C);
    let mut cmd = tokio::process::Command::new("timeout");
    cmd.arg("6").arg(exe).args([conninfo, query]);
    scrub_env(cmd.as_std_mut(), &[]);
    let out = cmd.output().await.unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// No PG* variable of this process leaks into a child; `env` is added.
pub(super) fn scrub_env(cmd: &mut std::process::Command, env: &[(&str, &str)]) {
    for (k, _) in std::env::vars() {
        if k.starts_with("PG") {
            cmd.env_remove(k);
        }
    }
    cmd.env("HOME", "/nonexistent-attack-home");
    cmd.env("LC_ALL", "C");
    cmd.envs(env.iter().copied());
}

/// slipstream's verdict for `conninfo` with this process's environment (which has no PG*
/// variables; see `ours_env` for tests that need some).
pub(super) async fn ours(conninfo: &str) -> Result<String, String> {
    let attempt = async {
        let mut client = slipstream_pg::connect(conninfo)
            .await
            .map_err(|e| e.to_string())?;
        let row = client
            .query_one(WHERE, &[])
            .await
            .map_err(|e| e.to_string())?;
        Ok(row.get::<_, String>(0).unwrap())
    };
    match tokio::time::timeout(LIMIT, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!("HANG: no answer within {LIMIT:?}")),
    }
}

/// slipstream's verdict with environment variables, in a child process (this test binary,
/// running only `child_connect`), so that no other test sees them.
pub(super) async fn ours_env(conninfo: &str, env: &[(&str, &str)]) -> Result<String, String> {
    in_child(
        "attack_connect::child_connect",
        "ATTACK_CONNECT_CHILD",
        conninfo,
        env,
    )
    .await
}

/// Runs this test binary's test `child` alone in a child process with only the PG*
/// variables `env` and `conninfo` in `var` (so that no other test sees them), and returns
/// the verdict it printed on its `ATTACK_RESULT` line.
pub(super) async fn in_child(
    child: &str,
    var: &str,
    conninfo: &str,
    env: &[(&str, &str)],
) -> Result<String, String> {
    let mut cmd = tokio::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([child, "--exact", "--nocapture", "--test-threads=1"]);
    scrub_env(cmd.as_std_mut(), env);
    cmd.env(var, conninfo);
    let out = cmd.output().await.expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("ATTACK_RESULT ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("child printed no result: {stdout}"))
        .to_string();
    match line.strip_prefix("ok ") {
        Some(r) => Ok(r.to_string()),
        None => Err(line.trim_start_matches("err ").to_string()),
    }
}

/// Not an attack: the child half of `ours_env`. Does nothing when run normally.
#[tokio::test]
async fn child_connect() {
    let Ok(conninfo) = std::env::var("ATTACK_CONNECT_CHILD") else {
        return;
    };
    let limit = std::env::var("ATTACK_LIMIT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(LIMIT);
    let r = match tokio::time::timeout(limit, ours(&conninfo)).await {
        Ok(r) => r,
        Err(_) => Err(format!("HANG: no answer within {limit:?}")),
    };
    let text = match r {
        Ok(s) => format!("ok {s}"),
        Err(e) => format!("err {e}"),
    };
    println!("ATTACK_RESULT {}", text.replace('\n', " "));
}

pub(super) fn landed(port: u16, user: &str) -> String {
    format!("{port}|{user}|postgres")
}

// ---- fixtures -----------------------------------------------------------------------------

/// A directory of symlinked sockets: `<dir>/.s.PGSQL.<alias>` -> the socket of `cluster`. A
/// Unix-socket "host" whose ports we choose freely, so that which port libpq and slipstream
/// pair with which host shows as which server they land on.
pub(super) fn socket_alias_dir(links: &[(u16, &Cluster)]) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("atk")
        .tempdir_in("/tmp")
        .unwrap();
    for (alias, cluster) in links {
        std::os::unix::fs::symlink(
            cluster
                .socket_dir()
                .join(format!(".s.PGSQL.{}", cluster.port())),
            dir.path().join(format!(".s.PGSQL.{alias}")),
        )
        .unwrap();
    }
    dir
}

fn enc(p: &Path) -> String {
    p.display().to_string().replace('/', "%2F")
}

/// A free port with nothing listening on it.
fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Roles with distinct passwords, reachable over TCP and the socket with password methods.
const HBA: &str = "local all u_scram scram-sha-256
local all u_md5 md5
local all all trust
host all u_scram 127.0.0.1/32 scram-sha-256
host all u_md5 127.0.0.1/32 md5
host all u_pw 127.0.0.1/32 password
host all all 127.0.0.1/32 trust
";

fn password_cluster() -> Cluster {
    let c = Cluster::builder().hba(HBA).start().unwrap();
    c.psql(
        r"SET password_encryption = 'md5';
          CREATE ROLE u_md5 LOGIN PASSWORD 'md5-pw';
          SET password_encryption = 'scram-sha-256';
          CREATE ROLE u_scram LOGIN PASSWORD 'sc:ram\pw';
          CREATE ROLE u_pw LOGIN PASSWORD 'clear-pw';",
    )
    .unwrap();
    c
}

fn passfile(contents: &str, mode: u32) -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pgpass");
    std::fs::write(&path, contents).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    (dir, path)
}

/// A fake server on 127.0.0.1 that answers every SSL/GSS request with `N` and every startup
/// packet with `error` (a whole ErrorResponse), then closes. Serves any number of connections.
async fn fake_refuser(error: Vec<u8>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let error = error.clone();
            tokio::spawn(async move {
                loop {
                    let Ok(len) = s.read_u32().await else { return };
                    let mut body = vec![0u8; (len as usize).saturating_sub(4)];
                    if s.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let code = u32::from_be_bytes(body[..4].try_into().unwrap());
                    if code == 80877103 || code == 80877104 {
                        let _ = s.write_all(b"N").await;
                        continue;
                    }
                    let _ = s.write_all(&error).await;
                    return;
                }
            });
        }
    });
    port
}

fn error_response(sqlstate: &str, message: &str) -> Vec<u8> {
    let mut fields = Vec::new();
    for (t, v) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', sqlstate),
        (b'M', message),
    ] {
        fields.push(t);
        fields.extend_from_slice(v.as_bytes());
        fields.push(0);
    }
    fields.push(0);
    let mut m = vec![b'E'];
    m.extend_from_slice(&((fields.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(&fields);
    m
}

/// A TCP server that accepts and then never says anything.
async fn black_hole() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    port
}

// ---- host and port lists ------------------------------------------------------------------

/// Promise: "comma host lists with one port or one per host", libpq's URL form.
/// Input: `postgresql://%2Fdir,%2Fdir:7777/postgres?user=postgres` (socket dir `dir` holds
/// `.s.PGSQL.5432` -> server A and `.s.PGSQL.7777` -> server B).
/// libpq: a URL's port belongs to the host it is written after; the first host has none, so it
/// gets 5432 -> lands on A. slipstream: collects the one port `7777` and, since there is one
/// port, applies it to *every* host -> lands on B. Wrong server.
#[tokio::test]
async fn break_url_port_written_after_second_host_is_applied_to_the_first() {
    let (a, b) = (Cluster::start().unwrap(), Cluster::start().unwrap());
    let dir = socket_alias_dir(&[(5432, &a), (7777, &b)]);
    let d = enc(dir.path());
    let url = format!("postgresql://{d},{d}:7777/postgres?user=postgres");
    let theirs = libpq(&url, &[]).await;
    assert_eq!(theirs, Ok(landed(a.port(), "postgres")), "libpq");
    assert_eq!(
        ours(&url).await,
        theirs,
        "slipstream must land where libpq does"
    );
}

/// Same flaw, the other way round: `postgresql://%2Fempty:7777,%2Fdir/postgres`.
/// libpq: `empty` has no server; the second host has no port written, so 5432 -> A.
/// slipstream: the single port 7777 applies to both hosts -> `dir:7777` -> B. Wrong server.
#[tokio::test]
async fn break_url_port_written_after_first_host_is_applied_to_the_second() {
    let (a, b) = (Cluster::start().unwrap(), Cluster::start().unwrap());
    let dir = socket_alias_dir(&[(5432, &a), (7777, &b)]);
    let empty = tempfile::tempdir_in("/tmp").unwrap();
    let url = format!(
        "postgresql://{}:7777,{}/postgres?user=postgres",
        enc(empty.path()),
        enc(dir.path())
    );
    let theirs = libpq(&url, &[]).await;
    assert_eq!(theirs, Ok(landed(a.port(), "postgres")), "libpq");
    assert_eq!(
        ours(&url).await,
        theirs,
        "slipstream must land where libpq does"
    );
}

/// Promise: one port per host, libpq's rules. Input: `host=<empty>,<dir> port=7777,` (an empty
/// port entry). libpq: an empty port is the default 5432 -> second host `dir:5432` -> A.
/// slipstream: refuses the string ("invalid port ``").
#[tokio::test]
async fn break_empty_entry_in_port_list_is_refused() {
    let a = Cluster::start().unwrap();
    let dir = socket_alias_dir(&[(5432, &a)]);
    let empty = tempfile::tempdir_in("/tmp").unwrap();
    let kv = format!(
        "host={},{} port=7777, user=postgres dbname=postgres",
        empty.path().display(),
        dir.path().display()
    );
    let theirs = libpq(&kv, &[]).await;
    assert_eq!(theirs, Ok(landed(a.port(), "postgres")), "libpq");
    assert_eq!(ours(&kv).await, theirs);
}

/// Input: `postgresql://%2Fdir:/postgres` (a URL host with an empty port).
/// libpq: empty port = 5432 -> A. slipstream: refuses ("invalid port ``").
#[tokio::test]
async fn break_url_empty_port_is_refused() {
    let a = Cluster::start().unwrap();
    let dir = socket_alias_dir(&[(5432, &a)]);
    let url = format!("postgresql://{}:/postgres?user=postgres", enc(dir.path()));
    let theirs = libpq(&url, &[]).await;
    assert_eq!(theirs, Ok(landed(a.port(), "postgres")), "libpq");
    assert_eq!(ours(&url).await, theirs);
}

/// Input: `host=,<dir> port=1,<port>` (an empty host entry: libpq's "default host").
/// libpq: two hosts (the default socket directory, then `dir`), two ports -> lands on A.
/// slipstream: drops the empty entry, then "1 hosts but 2 ports" and refuses.
#[tokio::test]
async fn break_empty_entry_in_host_list_is_dropped() {
    let a = Cluster::start().unwrap();
    let kv = format!(
        "host=,{} port=1,{} user=postgres dbname=postgres",
        a.socket_dir().display(),
        a.port()
    );
    let theirs = libpq(&kv, &[]).await;
    assert_eq!(theirs, Ok(landed(a.port(), "postgres")), "libpq");
    assert_eq!(ours(&kv).await, theirs);
}

/// Holds: a URL with a port after each host, IPv4 literal, and query params.
#[tokio::test]
async fn holds_url_one_port_per_host_and_query_overrides() {
    let a = Cluster::start().unwrap();
    let dead = dead_port();
    for url in [
        format!(
            "postgresql://127.0.0.1:{dead},127.0.0.1:{}/postgres?user=postgres",
            a.port()
        ),
        format!(
            "postgres://nobody@127.0.0.1:{}/x?user=postgres&dbname=postgres",
            a.port()
        ),
        format!(
            "postgres://127.0.0.1/postgres?port={}&user=postgres",
            a.port()
        ),
        format!(
            "postgres:///postgres?host={}&port={}&user=postgres",
            a.socket_dir().display(),
            a.port()
        ),
        format!(
            "postgres://%2F{}:{}/postgres?user=postgres",
            enc(a.socket_dir()).trim_start_matches("%2F"),
            a.port()
        ),
    ] {
        let theirs = libpq(&url, &[]).await;
        assert_eq!(theirs, Ok(landed(a.port(), "postgres")), "libpq {url}");
        assert_eq!(ours(&url).await, theirs, "{url}");
    }
}

/// Holds: key=value quoting, escapes, spaces around `=`, repeated keys (the last wins).
#[tokio::test]
async fn holds_key_value_quoting_and_repeats() {
    let a = Cluster::start().unwrap();
    let p = a.port();
    for kv in [
        format!("host = 127.0.0.1 port = {p} user=postgres dbname='postgres'"),
        format!("host=127.0.0.1 port=1 port={p} user=nobody user=postgres dbname=postgres"),
        format!("host='127.0.0.1' port='{p}' user=post\\gres dbname=postgres"),
        format!("  host=127.0.0.1\tport={p}\nuser=postgres dbname=postgres  "),
    ] {
        let theirs = libpq(&kv, &[]).await;
        assert_eq!(theirs, Ok(landed(p, "postgres")), "libpq {kv}");
        assert_eq!(ours(&kv).await, theirs, "{kv}");
    }
}

/// Holds: both refuse these (the message wording differs, which is fine).
#[tokio::test]
async fn holds_both_refuse_bad_strings() {
    let a = Cluster::start().unwrap();
    let p = a.port();
    for bad in [
        format!("host=127.0.0.1 port={p} user=postgres bogus=1"),
        "host=127.0.0.1 port=65536 user=postgres".to_string(),
        "host=127.0.0.1 port=5x user=postgres".to_string(),
        format!("host=127.0.0.1,127.0.0.1,127.0.0.1 port={p},{p} user=postgres"),
        format!("host=127.0.0.1 port={p} user=postgres dbname"),
        format!("host=127.0.0.1 port={p} user='postgres"),
        format!("HOST=127.0.0.1 port={p} user=postgres"),
        format!("postgres://postgres%00x@127.0.0.1:{p}/postgres"),
        format!("postgres://postgres@127.0.0.1:{p}/postgres?application_name=a%00b"),
        format!("host=127.0.0.1 port={p} user=postgres connect_timeout=abc"),
        format!("host=127.0.0.1 port={p} user=postgres sslmode=maybe"),
        format!("host=127.0.0.1 port={p} user=postgres target_session_attrs=master"),
    ] {
        let theirs = libpq(&bad, &[]).await;
        assert!(theirs.is_err(), "libpq accepted {bad}: {theirs:?}");
        let o = ours(&bad).await;
        assert!(o.is_err(), "slipstream accepted {bad}: {o:?}");
        assert!(!o.as_ref().unwrap_err().contains("HANG"), "{bad}: {o:?}");
    }
}

/// Promise (key=value syntax as libpq): `application_name='abc\` (a quoted value whose closing
/// quote is escaped away) is an unterminated quoted string. libpq: refuses ("unterminated
/// quoted string in connection info string"). slipstream: accepts it silently as `abc`.
#[tokio::test]
async fn break_unterminated_quote_after_backslash_is_accepted() {
    let a = Cluster::start().unwrap();
    let kv = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres application_name='abc\\",
        a.port()
    );
    let theirs = libpq(&kv, &[]).await;
    assert!(theirs.is_err(), "libpq: {theirs:?}");
    let o = ours(&kv).await;
    assert!(
        o.is_err(),
        "slipstream accepted an unterminated quoted value: {o:?}"
    );
}

// ---- routing: which failures move on to the next host -------------------------------------

/// Promise: "Hosts are tried in order; one that is down is skipped" with libpq's semantics.
/// Input: `host=127.0.0.1,127.0.0.1 port=<fake>,<A>` where the first server answers the startup
/// packet with FATAL 57P03 "the database system is starting up" (what a restarting or
/// recovering standby says; also "...is shutting down", "...not accepting connections").
/// libpq (fe-connect.c: ERRCODE_CANNOT_CONNECT_NOW -> try_next_host) skips it -> lands on A.
/// slipstream: treats the ErrorResponse as an authentication failure ("fails at once") and gives
/// up without trying A.
#[tokio::test]
async fn break_cannot_connect_now_on_first_host_stops_instead_of_trying_the_next() {
    let a = Cluster::start().unwrap();
    let fake = fake_refuser(error_response(
        "57P03",
        "the database system is starting up",
    ))
    .await;
    let kv = format!(
        "host=127.0.0.1,127.0.0.1 port={fake},{} user=postgres dbname=postgres sslmode=disable",
        a.port()
    );
    let theirs = libpq(&kv, &[]).await;
    assert_eq!(theirs, Ok(landed(a.port(), "postgres")), "libpq");
    assert_eq!(ours(&kv).await, theirs);
}

/// Promise: libpq's routing rules. Input: `host=127.0.0.1,127.0.0.1 port=<A>,<B>
/// dbname=only_on_b`: on A the database does not exist (FATAL 3D000, which the server sends
/// *after* AuthenticationOk). libpq: a FATAL after AuthenticationOk is final ("error_return"),
/// it does not try the second host. slipstream: an error after AuthenticationOk is not of kind
/// Authentication, so it moves on and lands on B: a different server than libpq would accept.
#[tokio::test]
async fn break_fatal_after_authentication_ok_moves_on_to_next_host() {
    let (a, b) = (Cluster::start().unwrap(), Cluster::start().unwrap());
    b.psql("CREATE DATABASE only_on_b").unwrap();
    let kv = format!(
        "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=only_on_b sslmode=disable",
        a.port(),
        b.port()
    );
    let theirs = libpq(&kv, &[]).await;
    assert!(
        theirs.as_ref().is_err_and(|e| e.contains("does not exist")),
        "libpq: {theirs:?}"
    );
    let o = ours(&kv).await;
    assert!(o.is_err(), "slipstream went on to the second host: {o:?}");
}

/// Holds: "A wrong password fails at once ... without trying the remaining hosts" (libpq too).
#[tokio::test]
async fn holds_wrong_password_on_first_host_is_final() {
    let a = password_cluster();
    let b = Cluster::start().unwrap();
    for user in ["u_scram", "u_md5", "u_pw"] {
        let kv = format!(
            "host=127.0.0.1,127.0.0.1 port={},{} user={user} password=wrong dbname=postgres sslmode=disable",
            a.port(),
            b.port()
        );
        let theirs = libpq(&kv, &[]).await;
        assert!(
            theirs
                .as_ref()
                .is_err_and(|e| e.contains("password authentication failed")),
            "libpq {user}: {theirs:?}"
        );
        let o = ours(&kv).await;
        assert!(
            o.as_ref()
                .is_err_and(|e| e.contains("password authentication failed")),
            "{user}: {o:?}"
        );
    }
}

/// Holds: a host that accepts TCP but never answers is bounded by connect_timeout and the next
/// host is used; an unresolvable name and a refused port are skipped.
#[tokio::test]
async fn holds_black_hole_and_bad_names_are_skipped_within_connect_timeout() {
    let a = Cluster::start().unwrap();
    let hole = black_hole().await;
    let dead = dead_port();
    let kv = format!(
        "host=127.0.0.1,no-such-host.invalid,127.0.0.1,127.0.0.1 port={hole},{dead},{dead},{} \
         user=postgres dbname=postgres connect_timeout=1",
        a.port()
    );
    let started = Instant::now();
    let o = ours(&kv).await;
    let took = started.elapsed();
    assert_eq!(o, Ok(landed(a.port(), "postgres")));
    // connect_timeout=1 is raised to 2 s (as libpq does).
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    let started = Instant::now();
    let theirs = libpq(&kv, &[]).await;
    assert_eq!(theirs, o, "libpq took {:?}", started.elapsed());
}

// ---- the password file --------------------------------------------------------------------

/// Holds: the password file read "as libpq reads it": for each (file, conninfo) both clients
/// must agree on success or failure.
#[tokio::test]
async fn holds_passfile_matching_rules_agree_with_libpq() {
    let c = password_cluster();
    let p = c.port();
    let sock = c.socket_dir().display().to_string();
    let alias = socket_alias_dir(&[(5432, &c)]);
    let alias_dir = alias.path().display().to_string();
    let tcp =
        |user: &str| format!("host=127.0.0.1 port={p} user={user} dbname=postgres sslmode=disable");
    let cases: Vec<(String, String, bool)> = vec![
        // escapes in the password: \: and \\
        (
            format!("127.0.0.1:{p}:postgres:u_scram:sc\\:ram\\\\pw\n"),
            tcp("u_scram"),
            true,
        ),
        // CRLF line ends
        (
            format!("127.0.0.1:{p}:*:u_md5:md5-pw\r\n"),
            tcp("u_md5"),
            true,
        ),
        // the first matching line wins, even with a wrong password
        (
            format!("*:*:*:u_md5:wrong\n127.0.0.1:{p}:*:u_md5:md5-pw\n"),
            tcp("u_md5"),
            false,
        ),
        // comments; a leading space is not a comment and does not match
        (
            format!("#127.0.0.1:{p}:*:u_md5:md5-pw\n 127.0.0.1:{p}:*:u_md5:md5-pw\n"),
            tcp("u_md5"),
            false,
        ),
        // an unescaped ':' ends the password
        (
            "*:*:*:u_pw:clear-pw:trailing junk\n".to_string(),
            tcp("u_pw"),
            true,
        ),
        // a line with only four fields never matches
        (
            "*:*:*:u_pw\n*:*:*:u_pw:clear-pw\n".to_string(),
            tcp("u_pw"),
            true,
        ),
        // a trailing backslash is kept in the password (so it is wrong)
        ("*:*:*:u_pw:clear-pw\\\n".to_string(), tcp("u_pw"), false),
        // host is matched as written: localhost is not 127.0.0.1
        (
            format!("localhost:{p}:*:u_pw:clear-pw\n"),
            tcp("u_pw"),
            false,
        ),
        // a non-default socket directory matches by its path, not as localhost
        (
            format!("{sock}:{p}:*:u_scram:sc\\:ram\\\\pw\n"),
            format!("host={sock} port={p} user=u_scram dbname=postgres"),
            true,
        ),
        (
            format!("localhost:{p}:*:u_scram:sc\\:ram\\\\pw\n"),
            format!("host={sock} port={p} user=u_scram dbname=postgres"),
            false,
        ),
        // no port given: the key is 5432
        (
            format!("{alias_dir}:5432:*:u_md5:md5-pw\n"),
            format!("host={alias_dir} user=u_md5 dbname=postgres"),
            true,
        ),
        // dbname defaults to the user name for the match (the login then fails: no such db)
        (
            format!("127.0.0.1:{p}:postgres:u_md5:md5-pw\n"),
            format!("host=127.0.0.1 port={p} user=u_md5 sslmode=disable"),
            false,
        ),
    ];
    let mut disagreements = Vec::new();
    for (contents, conninfo, expect_ok) in cases {
        let (_d, path) = passfile(&contents, 0o600);
        let conninfo = format!("{conninfo} passfile={}", path.display());
        let theirs = libpq(&conninfo, &[]).await;
        assert_eq!(
            theirs.is_ok(),
            expect_ok,
            "libpq on {contents:?} {conninfo}: {theirs:?}"
        );
        let o = ours(&conninfo).await;
        if o.is_ok() != theirs.is_ok() {
            disagreements.push(format!(
                "{contents:?} {conninfo}: libpq {theirs:?}, ours {o:?}"
            ));
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");
}

/// Holds: permissions and file kinds (0640 ignored, 0400 read, a symlink to a 0600 file read, a
/// directory ignored) agree with libpq, and our error carries the warning.
#[tokio::test]
async fn holds_passfile_permissions_agree_with_libpq() {
    use std::os::unix::fs::PermissionsExt;
    let c = password_cluster();
    let line = format!("127.0.0.1:{}:*:u_md5:md5-pw\n", c.port());
    let base = format!(
        "host=127.0.0.1 port={} user=u_md5 dbname=postgres sslmode=disable",
        c.port()
    );
    for (mode, ok) in [
        (0o600, true),
        (0o400, true),
        (0o640, false),
        (0o604, false),
        (0o700, true),
    ] {
        let (_d, path) = passfile(&line, mode);
        let conninfo = format!("{base} passfile={}", path.display());
        let theirs = libpq(&conninfo, &[]).await;
        assert_eq!(theirs.is_ok(), ok, "libpq {mode:o}: {theirs:?}");
        let o = ours(&conninfo).await;
        assert_eq!(o.is_ok(), ok, "{mode:o}: {o:?}");
        if !ok {
            assert!(o.unwrap_err().contains("group or world access"));
        }
    }
    let (d, path) = passfile(&line, 0o600);
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for (file, ok) in [(link, true), (d.path().to_path_buf(), false)] {
        let conninfo = format!("{base} passfile={}", file.display());
        let theirs = libpq(&conninfo, &[]).await;
        assert_eq!(theirs.is_ok(), ok, "libpq {file:?}: {theirs:?}");
        assert_eq!(ours(&conninfo).await.is_ok(), ok, "{file:?}");
    }
}

/// Promise: "When no password is given ... the password file is read as libpq reads it".
/// Input: `password=''` (key=value) or `postgres://u_scram:@host/...` (URL with an empty
/// password) plus a passfile holding the right password.
/// libpq: an empty password counts as none (`conn->pgpass[0] == '\0'`), so the file is read ->
/// connects. slipstream: sends the empty password and fails authentication.
#[tokio::test]
async fn break_empty_password_does_not_fall_back_to_the_password_file() {
    let c = password_cluster();
    let (_d, path) = passfile("*:*:*:u_scram:sc\\:ram\\\\pw\n", 0o600);
    let pf = path.display().to_string();
    for conninfo in [
        format!(
            "host=127.0.0.1 port={} user=u_scram password='' dbname=postgres sslmode=disable passfile={pf}",
            c.port()
        ),
        format!(
            "postgres://u_scram:@127.0.0.1:{}/postgres?sslmode=disable&passfile={pf}",
            c.port()
        ),
    ] {
        let theirs = libpq(&conninfo, &[]).await;
        assert_eq!(theirs, Ok(landed(c.port(), "u_scram")), "libpq {conninfo}");
        assert_eq!(ours(&conninfo).await, theirs, "{conninfo}");
    }
}

/// Holds: PGPASSWORD set but empty also means "none" and the file is read (libpq the same).
#[tokio::test]
async fn holds_empty_pgpassword_falls_back_to_the_password_file() {
    let c = password_cluster();
    let (_d, path) = passfile("*:*:*:u_scram:sc\\:ram\\\\pw\n", 0o600);
    let conninfo = format!(
        "host=127.0.0.1 port={} user=u_scram dbname=postgres sslmode=disable",
        c.port()
    );
    let env = [("PGPASSWORD", ""), ("PGPASSFILE", path.to_str().unwrap())];
    let theirs = libpq(&conninfo, &env).await;
    assert_eq!(theirs, Ok(landed(c.port(), "u_scram")), "libpq");
    assert_eq!(ours_env(&conninfo, &env).await, theirs);
}

/// Promise: the file is matched "as libpq reads it". libpq matches the port *as written* in the
/// connection string (`conn->connhost[i].port`, a string), so `port=0<p>` does not match a
/// line for `<p>`: libpq finds no password and refuses. slipstream matches the number, finds
/// the line and connects. (Low: the other client is more lenient; `*` is the usual answer.)
///
/// A documented difference (docs/client.md, "Where slipstream differs from libpq"): ports are
/// numbers here, so `05432` is the port 5432. This test holds both sides to it.
#[tokio::test]
async fn differs_passfile_port_is_matched_as_a_number_not_as_written() {
    let c = password_cluster();
    let (_d, path) = passfile(&format!("127.0.0.1:{}:*:u_md5:md5-pw\n", c.port()), 0o600);
    let conninfo = format!(
        "host=127.0.0.1 port=0{} user=u_md5 dbname=postgres sslmode=disable passfile={}",
        c.port(),
        path.display()
    );
    let theirs = libpq(&conninfo, &[]).await;
    assert!(
        theirs
            .as_ref()
            .is_err_and(|e| e.contains("no password supplied")),
        "libpq: {theirs:?}"
    );
    let o = ours(&conninfo).await;
    assert_eq!(
        o,
        Ok(landed(c.port(), "u_md5")),
        "slipstream matches the number"
    );
}

// ---- environment --------------------------------------------------------------------------

/// Holds: PG* variables fill what the string leaves out, lists included.
#[tokio::test]
async fn holds_env_lists_fill_what_the_string_leaves_out() {
    let a = Cluster::start().unwrap();
    let (p, dead) = (a.port().to_string(), dead_port().to_string());
    let ports = format!("{dead},{p}");
    let cases: Vec<(String, Vec<(&str, &str)>)> = vec![
        (
            "user=postgres dbname=postgres".into(),
            vec![("PGHOST", "127.0.0.1,127.0.0.1"), ("PGPORT", &ports)],
        ),
        (
            "host=127.0.0.1,127.0.0.1 user=postgres".into(),
            vec![("PGPORT", &ports), ("PGDATABASE", "postgres")],
        ),
        (
            format!("host=127.0.0.1 port={p}"),
            vec![
                ("PGUSER", "postgres"),
                ("PGHOST", "10.255.255.1"),
                ("PGPORT", "1"),
            ],
        ),
        (
            format!("postgres://127.0.0.1:{p}"),
            vec![
                ("PGUSER", "postgres"),
                ("PGDATABASE", "postgres"),
                ("PGHOST", ""),
                ("PGPORT", ""),
            ],
        ),
    ];
    for (conninfo, env) in cases {
        let theirs = libpq(&conninfo, &env).await;
        assert_eq!(
            theirs,
            Ok(landed(a.port(), "postgres")),
            "libpq {conninfo} {env:?}"
        );
        assert_eq!(
            ours_env(&conninfo, &env).await,
            theirs,
            "{conninfo} {env:?}"
        );
    }
}

/// Promise: "PG* variables fill what the string leaves out". Input: `connect_timeout=0` in the
/// string (libpq: wait forever) with PGCONNECT_TIMEOUT=2, against a server that never answers.
/// libpq: the string's 0 wins -> still waiting when killed. slipstream: 0 is stored as "unset",
/// so the environment's 2 s applies and it gives up after 2 s. (Low.)
#[tokio::test]
async fn break_connect_timeout_zero_in_string_is_overridden_by_env() {
    let hole = black_hole().await;
    let conninfo =
        format!("host=127.0.0.1 port={hole} user=postgres connect_timeout=0 sslmode=disable");
    let env = [("PGCONNECT_TIMEOUT", "2"), ("ATTACK_LIMIT_SECS", "4")];
    // Both at once: libpq is given 6 s, slipstream 4 s.
    let (theirs, o) = tokio::join!(libpq(&conninfo, &env), ours_env(&conninfo, &env));
    assert!(
        theirs.as_ref().is_err_and(|e| e.starts_with("HANG")),
        "libpq: {theirs:?}"
    );
    assert!(
        o.as_ref().is_err_and(|e| e.starts_with("HANG")),
        "slipstream gave up early: {o:?}"
    );
}

/// Promise: same. Input: `host=''` in the string with PGHOST/PGPORT set. libpq: the string set
/// host (to empty: the default socket directory), so PGHOST is not used -> no server there,
/// refused. slipstream: an empty host counts as unset and PGHOST is used -> connects to
/// 127.0.0.1. (Low.)
#[tokio::test]
async fn break_empty_host_in_string_lets_pghost_in() {
    let a = Cluster::start().unwrap();
    let p = a.port().to_string();
    let conninfo = "host='' user=postgres dbname=postgres";
    let env = [("PGHOST", "127.0.0.1"), ("PGPORT", p.as_str())];
    let theirs = libpq(conninfo, &env).await;
    assert!(theirs.is_err(), "libpq: {theirs:?}");
    let o = ours_env(conninfo, &env).await;
    assert!(
        o.is_err(),
        "slipstream used PGHOST although the string set host: {o:?}"
    );
}

/// Promise: PG* variables as libpq reads them. Input: PGCONNECT_TIMEOUT set but empty.
/// libpq: uses the empty value and refuses ("invalid integer value "" for connection option
/// "connect_timeout""). slipstream: skips empty variables and connects. (Low.)
#[tokio::test]
async fn break_empty_pgconnect_timeout_is_ignored() {
    let a = Cluster::start().unwrap();
    let conninfo = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        a.port()
    );
    let env = [("PGCONNECT_TIMEOUT", "")];
    let theirs = libpq(&conninfo, &env).await;
    assert!(
        theirs
            .as_ref()
            .is_err_and(|e| e.contains("invalid integer value")),
        "libpq: {theirs:?}"
    );
    let o = ours_env(&conninfo, &env).await;
    assert!(o.is_err(), "slipstream ignored the empty variable: {o:?}");
}

// ---- TLS ----------------------------------------------------------------------------------

/// Promise: sslmode `prefer` (the default) and `allow` "as libpq". Server: ssl=on, but
/// pg_hba.conf only has `hostnossl` for TCP (a common setup: TLS terminated elsewhere).
/// libpq: with `prefer` it tries TLS, is rejected by pg_hba, and retries once without TLS ->
/// connects; with `allow` it tries without TLS first -> connects. slipstream: TLS only, the
/// pg_hba rejection is final ("no pg_hba.conf entry ... SSL encryption") for both modes.
#[tokio::test]
async fn break_sslmode_prefer_and_allow_do_not_fall_back_to_plaintext() {
    let pki = pki();
    let c = tls_cluster(
        &pki,
        "local all all trust\nhostnossl all all 127.0.0.1/32 trust\n",
    );
    for mode in ["prefer", "allow"] {
        let kv = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode={mode}",
            c.port()
        );
        let theirs = libpq(&kv, &[]).await;
        assert_eq!(theirs, Ok(landed(c.port(), "postgres")), "libpq {mode}");
        assert_eq!(ours(&kv).await, theirs, "sslmode={mode}");
    }
}

/// Holds: with `hostssl` only, prefer/allow/require all connect over TLS in both clients, and
/// `disable` is refused by both.
#[tokio::test]
async fn holds_sslmodes_against_a_hostssl_only_server() {
    let pki = pki();
    let c = tls_cluster(
        &pki,
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    );
    for (mode, ok) in [
        ("prefer", true),
        ("allow", true),
        ("require", true),
        ("disable", false),
    ] {
        let kv = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode={mode}",
            c.port()
        );
        let theirs = libpq(&kv, &[]).await;
        assert_eq!(theirs.is_ok(), ok, "libpq {mode}: {theirs:?}");
        let o = ours(&kv).await;
        assert_eq!(o.is_ok(), ok, "{mode}: {o:?}");
    }
}

/// Promise: hosts tried "with libpq's rules"; "one that is down is skipped". Input: a host list
/// whose first server has no TLS under sslmode=require, or fails verify-full's name check.
/// libpq 15 (verified here): a TLS failure is final ("server does not support SSL, but SSL was
/// required" / "server certificate ... does not match host name"), the next host is not tried.
/// slipstream: moves on and connects to the second host. (Low: more lenient, and the second
/// host is still verified; libpq 16 not available here to confirm it is unchanged.)
///
/// A documented difference (docs/client.md, "Where slipstream differs from libpq"): a host
/// that fails TLS is skipped like a host that is down. This test holds both sides to it.
#[tokio::test]
async fn differs_tls_failure_on_first_host_moves_on_unlike_libpq() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let plain = Cluster::start().unwrap();
    let tls = tls_cluster(
        &pki,
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    );
    let cases = [
        format!(
            "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=postgres sslmode=require",
            plain.port(),
            tls.port()
        ),
        // the first name is not in the certificate: verify-full fails there
        format!(
            "host=127.0.0.1,localhost port={},{} user=postgres dbname=postgres sslmode=verify-full sslrootcert={}",
            tls.port(),
            tls.port(),
            ca.display()
        ),
    ];
    for kv in cases {
        let theirs = libpq(&kv, &[]).await;
        assert!(
            theirs.is_err(),
            "libpq 15 stops at the first host: {kv}: {theirs:?}"
        );
        let o = ours(&kv).await;
        assert_eq!(o, Ok(landed(tls.port(), "postgres")), "ours moves on: {kv}");
    }
}

// ---- defaults -----------------------------------------------------------------------------

/// Promise: `user` defaults to "the OS user" (libpq: the name of the effective uid, from the
/// passwd entry; it never reads $USER). Input: no user in the string, run as root with
/// USER=postgres in the environment (after `su` without `-`, `sudo -E`, a Dockerfile ENV...).
/// libpq: logs in as `root`. slipstream: takes $USER and logs in as `postgres`: wrong user.
/// With USER and LOGNAME unset (common in containers) libpq still logs in as root while
/// slipstream refuses ("no user name").
#[tokio::test]
async fn break_default_user_is_taken_from_the_user_variable_not_the_os_user() {
    let a = Cluster::start().unwrap();
    a.psql("CREATE ROLE root LOGIN SUPERUSER").unwrap();
    let me = nix_user_name();
    assert_eq!(
        me, "root",
        "this test expects to run as root (as the testkit does)"
    );
    let conninfo = format!("host=127.0.0.1 port={} dbname=postgres", a.port());
    let env = [("USER", "postgres"), ("LOGNAME", "postgres")];
    let theirs = libpq(&conninfo, &env).await;
    assert_eq!(theirs, Ok(landed(a.port(), "root")), "libpq");
    assert_eq!(ours_env(&conninfo, &env).await, theirs, "USER=postgres");
    // And with neither variable set.
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "attack_connect::child_connect",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ]);
    scrub_env(&mut cmd, &[]);
    cmd.env_remove("USER")
        .env_remove("LOGNAME")
        .env("ATTACK_CONNECT_CHILD", &conninfo);
    let out = String::from_utf8_lossy(&cmd.output().unwrap().stdout).into_owned();
    assert!(
        out.contains(&format!("ATTACK_RESULT ok {}", landed(a.port(), "root"))),
        "without USER/LOGNAME: {out}"
    );
}

fn nix_user_name() -> String {
    let out = std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

// ---- hostile values: no panic, no hang ----------------------------------------------------

/// Holds: extreme numeric values give a connection or an error, never a panic or a hang.
#[tokio::test]
async fn holds_extreme_numbers_neither_panic_nor_hang() {
    let a = Cluster::start().unwrap();
    let p = a.port();
    for extra in [
        "connect_timeout=9223372036854775807",
        "connect_timeout=-9223372036854775808",
        "keepalives_idle=18446744073709551615 keepalives_interval=18446744073709551615 keepalives_count=4294967295",
        "tcp_user_timeout=18446744073709551615",
        "statement_cache_size=18446744073709551615",
        "fetch_size=18446744073709551615",
        "max_result_buffer=18446744073709551615GB",
    ] {
        let kv = format!("host=127.0.0.1 port={p} user=postgres dbname=postgres {extra}");
        let o = tokio::spawn(async move { ours(&kv).await }).await;
        let o = o.unwrap_or_else(|e| panic!("{extra}: panicked: {e}"));
        assert!(
            !o.as_ref().is_err_and(|e| e.starts_with("HANG")),
            "{extra}: {o:?}"
        );
    }
}

/// Promise: URL syntax as libpq. Input: `postgres://[::1]junk:6000/postgres`: characters after
/// an IPv6 literal's `]` that are neither `:` nor `,` nor `/`.
/// libpq: "unexpected character "j" at position N in URI (expected ":" or "/")". slipstream:
/// drops them silently (and the port with them) and connects to the default port.
#[tokio::test]
async fn break_url_junk_after_bracketed_host_is_ignored() {
    let c: Result<slipstream_pg::Config, _> = "postgres://[::1]junk:6000/postgres".parse();
    let theirs = libpq("postgres://[::1]junk:6000/postgres?connect_timeout=2", &[]).await;
    assert!(
        theirs
            .as_ref()
            .is_err_and(|e| e.contains("unexpected character")),
        "libpq: {theirs:?}"
    );
    assert!(
        c.is_err(),
        "slipstream parsed it: {:?}",
        c.map(|c| (c.get_hosts().to_vec(), c.get_ports().to_vec()))
    );
}

/// Promise: `require_auth` as libpq 16. libpq 16 (`connectOptions2`: `if (conn->require_auth &&
/// conn->require_auth[0])`) treats an empty `require_auth=''` as not set. slipstream refuses the
/// string ("invalid require_auth method ``"). Not verified against libpq 16 (only libpq 15 is
/// installed here, which has no require_auth); from its source. (Low.)
#[tokio::test]
async fn break_empty_require_auth_is_refused() {
    let r: Result<slipstream_pg::Config, _> = "host=h require_auth=''".parse();
    assert!(r.is_ok(), "{:?}", r.err().map(|e| e.to_string()));
}

// ---- parameters libpq honours that slipstream accepts but drops ---------------------------

/// Promise: `fallback_application_name` is "accepted so that libpq strings work unchanged"
/// (conninfo.rs). libpq: it becomes the application_name when none is given. slipstream:
/// accepted and silently dropped (application_name stays empty). (Low.)
#[tokio::test]
async fn break_fallback_application_name_is_dropped() {
    let a = Cluster::start().unwrap();
    let kv = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres fallback_application_name=fb",
        a.port()
    );
    // psql always passes its own fallback ("psql"), so ask libpq directly (PQconnectdb).
    let theirs = pq_client(&kv, "SHOW application_name").await;
    assert_eq!(theirs, Ok("fb".to_string()), "libpq");
    let theirs = theirs.unwrap();
    let mut client = tokio::time::timeout(LIMIT, slipstream_pg::connect(&kv))
        .await
        .unwrap()
        .unwrap();
    let ours: String = client
        .query_one("SHOW application_name", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(ours, theirs);
}

/// Promise: "PG* variables fill what the string leaves out". libpq honours PGHOSTADDR (and
/// PGSERVICE, PGSSLCRL, PGREQUIREPEER, ...). slipstream silently ignores the ones it does not
/// support, where the same parameter in the string is an error. Input: PGHOSTADDR=127.0.0.1,
/// PGPORT=<A>, no host. libpq: TCP to 127.0.0.1:<A> -> A. slipstream: ignores PGHOSTADDR,
/// tries the default socket directory and fails (with a libpq-style string it would be told
/// "unknown connection parameter `hostaddr`"). (Low/Medium.)
#[tokio::test]
async fn break_pghostaddr_is_silently_ignored() {
    let a = Cluster::start().unwrap();
    let p = a.port().to_string();
    let env = [("PGHOSTADDR", "127.0.0.1"), ("PGPORT", p.as_str())];
    let conninfo = "user=postgres dbname=postgres";
    let theirs = libpq(conninfo, &env).await;
    assert_eq!(theirs, Ok(landed(a.port(), "postgres")), "libpq");
    let o = ours_env(conninfo, &env).await;
    assert!(
        o == theirs || o.as_ref().is_err_and(|e| e.contains("PGHOSTADDR")),
        "slipstream neither honoured nor refused PGHOSTADDR: {o:?}"
    );
}

/// Holds: a server that answers the SSLRequest with an ErrorResponse (what a postmaster that
/// cannot fork a backend does) is refused by both, promptly, without a panic. (Neither shows
/// the server's message: libpq 15 says "server sent an error response during SSL exchange".)
#[tokio::test]
async fn holds_error_response_to_ssl_request_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 8];
                if s.read_exact(&mut buf).await.is_ok() {
                    let _ = s
                        .write_all(&error_response(
                            "53300",
                            "could not fork new process for connection",
                        ))
                        .await;
                }
            });
        }
    });
    let kv = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=prefer");
    let theirs = libpq(&kv, &[]).await;
    assert!(
        theirs.as_ref().is_err_and(|e| !e.starts_with("HANG")),
        "libpq: {theirs:?}"
    );
    let o = ours(&kv).await;
    assert!(
        o.as_ref().is_err_and(|e| !e.starts_with("HANG")),
        "slipstream: {o:?}"
    );
}

/// Promise: libpq's routing rules. Input: a host list whose first server reads the startup
/// packet and closes the connection (a backend that crashed, a pooler at its limit).
/// libpq 15: "server closed the connection unexpectedly" is final; the second host is not
/// tried. slipstream: an I/O error during authentication is not of kind Authentication, so it
/// moves on and connects to the second host. (Low: more lenient than libpq.)
///
/// A documented difference (docs/client.md, "Where slipstream differs from libpq"): a server
/// that drops the connection before answering is skipped like one that is down. This test holds
/// both sides to it.
#[tokio::test]
async fn differs_server_closing_after_startup_on_first_host_moves_on_unlike_libpq() {
    let a = Cluster::start().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(len) = s.read_u32().await else { return };
                let mut body = vec![0u8; (len as usize).saturating_sub(4)];
                let _ = s.read_exact(&mut body).await;
            });
        }
    });
    let kv = format!(
        "host=127.0.0.1,127.0.0.1 port={port},{} user=postgres dbname=postgres sslmode=disable",
        a.port()
    );
    let theirs = libpq(&kv, &[]).await;
    assert!(
        theirs.is_err(),
        "libpq 15 stops at the first host: {theirs:?}"
    );
    assert_eq!(ours(&kv).await, Ok(landed(a.port(), "postgres")));
}

/// Holds: a wrong password from the file says so, as libpq does.
#[tokio::test]
async fn holds_wrong_password_from_file_names_the_file() {
    let c = password_cluster();
    let (_d, path) = passfile("*:*:*:u_md5:not-it\n", 0o600);
    let kv = format!(
        "host=127.0.0.1 port={} user=u_md5 dbname=postgres sslmode=disable passfile={}",
        c.port(),
        path.display()
    );
    let theirs = libpq(&kv, &[]).await;
    assert!(
        theirs
            .as_ref()
            .is_err_and(|e| e.contains("password retrieved from file")),
        "libpq: {theirs:?}"
    );
    let o = ours(&kv).await;
    assert!(
        o.as_ref()
            .is_err_and(|e| e.contains("password retrieved from file")),
        "{o:?}"
    );
}

/// Holds (security): `sslmode=require` checks the chain when `~/.postgresql/root.crt` exists,
/// and `verify-ca` does not check the host name, as libpq. Each case: libpq and slipstream
/// agree on success or refusal.
#[tokio::test]
async fn holds_root_crt_and_verify_ca_agree_with_libpq() {
    let right = pki();
    let other = pki();
    let c = tls_cluster(
        &right,
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    );
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".postgresql")).unwrap();
    let root = home.path().join(".postgresql/root.crt");
    let h = home.path().to_str().unwrap().to_string();
    let ca = home.path().join("ca.pem");
    std::fs::write(&ca, &right.ca_pem).unwrap();
    let base = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        c.port()
    );
    let mut disagreements = Vec::new();
    for (root_pem, extra, ok) in [
        (Some(&other.ca_pem), "sslmode=require", false),
        (Some(&right.ca_pem), "sslmode=require", true),
        (None, "sslmode=require", true),
        (
            None,
            &*format!("sslmode=verify-ca sslrootcert={}", ca.display()),
            true,
        ),
        (
            None,
            &*format!("sslmode=verify-full sslrootcert={}", ca.display()),
            false,
        ),
        (Some(&right.ca_pem), "sslmode=prefer", true),
    ] {
        match root_pem {
            Some(pem) => std::fs::write(&root, pem).unwrap(),
            None => {
                let _ = std::fs::remove_file(&root);
            }
        }
        let kv = format!("{base} {extra}");
        let env = [("HOME", h.as_str())];
        let theirs = libpq(&kv, &env).await;
        let o = ours_env(&kv, &env).await;
        if theirs.is_ok() != ok || o.is_ok() != ok {
            disagreements.push(format!(
                "root.crt={} {extra}: expected ok={ok}, libpq {theirs:?}, ours {o:?}",
                root_pem.is_some()
            ));
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");
}

/// Promise: TLS table, `prefer`: "what is checked: nothing (as libpq)". libpq loads
/// `~/.postgresql/root.crt` whenever it exists, whatever the sslmode, and then verifies the
/// chain: under `prefer` a server certificate from another CA fails the handshake ("SSL error:
/// ..."), libpq retries without TLS, and a `hostssl`-only server refuses that. slipstream under
/// `prefer` ignores root.crt and connects over TLS to the server with the unknown certificate.
/// (Low: prefer can be downgraded to plaintext anyway; but the doc's "as libpq" is wrong.)
#[tokio::test]
async fn break_prefer_ignores_root_crt_that_libpq_verifies() {
    let right = pki();
    let other = pki();
    let c = tls_cluster(
        &right,
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    );
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".postgresql")).unwrap();
    std::fs::write(home.path().join(".postgresql/root.crt"), &other.ca_pem).unwrap();
    let h = home.path().to_str().unwrap().to_string();
    let kv = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=prefer",
        c.port()
    );
    let env = [("HOME", h.as_str())];
    let theirs = libpq(&kv, &env).await;
    assert!(
        theirs.as_ref().is_err_and(|e| e.contains("SSL error")),
        "libpq: {theirs:?}"
    );
    let o = ours_env(&kv, &env).await;
    assert!(
        o.is_err(),
        "slipstream accepted a certificate root.crt does not sign: {o:?}"
    );
}

/// Promise: `sslmode=prefer` (the default) "checks nothing". Input: `host=127.1` (a host name
/// the resolver maps to 127.0.0.1, as it does `2130706433`; a name with `_` from DNS, or an
/// IPv6 address with a `%zone`, is the same case) against a server *without* TLS.
/// libpq: connects (the name is only resolved). slipstream: computes a rustls ServerName
/// before even asking the server for TLS, fails ("`127.1` is not a valid host name for TLS")
/// and refuses, although no TLS would be used and nothing would be checked.
#[tokio::test]
async fn break_prefer_refuses_host_names_rustls_cannot_represent() {
    let a = Cluster::start().unwrap();
    for host in ["127.1", "2130706433"] {
        let kv = format!(
            "host={host} port={} user=postgres dbname=postgres",
            a.port()
        );
        let theirs = libpq(&kv, &[]).await;
        assert_eq!(theirs, Ok(landed(a.port(), "postgres")), "libpq {host}");
        assert_eq!(ours(&kv).await, theirs, "host={host}");
    }
}

/// Promise: `sslcert`, `sslkey` ... as libpq (the doc's table gives no default for them, but
/// "libpq strings work unchanged" is the claim of the whole section). libpq: without
/// `sslcert`/`sslkey` it sends `~/.postgresql/postgresql.crt` + `postgresql.key` when they
/// exist, so a server with `cert` authentication accepts it. slipstream: sends no client
/// certificate unless both are given -> "connection requires a valid client certificate".
#[tokio::test]
async fn break_default_client_certificate_is_not_sent() {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "attack CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let mut sp = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    sp.distinguished_name.push(DnType::CommonName, "localhost");
    let server_cert = sp.signed_by(&server_key, &ca).unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut cp = CertificateParams::new(Vec::<String>::new()).unwrap();
    cp.distinguished_name.push(DnType::CommonName, "postgres");
    let client_cert = cp.signed_by(&client_key, &ca).unwrap();

    let c = Cluster::builder()
        .tls(server_cert.pem(), server_key.serialize_pem())
        .file("ca.crt", ca.pem())
        .setting("ssl_ca_file", "ca.crt")
        .hba("local all all trust\nhostssl all all 127.0.0.1/32 cert\n")
        .start()
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let dot = home.path().join(".postgresql");
    std::fs::create_dir(&dot).unwrap();
    std::fs::write(dot.join("postgresql.crt"), client_cert.pem()).unwrap();
    std::fs::write(dot.join("postgresql.key"), client_key.serialize_pem()).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dot.join("postgresql.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
    }
    let h = home.path().to_str().unwrap().to_string();
    let env = [("HOME", h.as_str())];
    let kv = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=require",
        c.port()
    );
    let theirs = libpq(&kv, &env).await;
    assert_eq!(theirs, Ok(landed(c.port(), "postgres")), "libpq");
    assert_eq!(ours_env(&kv, &env).await, theirs);
}

/// Promise: `user` defaults to the OS user. Input: `user=''` (an empty user in the string).
/// libpq: an empty user is no user (`pguser[0] == '\0'`) -> the OS user (root here).
/// slipstream: sends an empty user name; the server refuses ("no PostgreSQL user name
/// specified in startup packet").
#[tokio::test]
async fn break_empty_user_is_sent_instead_of_the_default() {
    let a = Cluster::start().unwrap();
    a.psql("CREATE ROLE root LOGIN SUPERUSER").unwrap();
    let kv = format!("host=127.0.0.1 port={} user='' dbname=postgres", a.port());
    let env = [("USER", "root"), ("LOGNAME", "root")];
    let theirs = libpq(&kv, &env).await;
    assert_eq!(theirs, Ok(landed(a.port(), "root")), "libpq");
    assert_eq!(ours_env(&kv, &env).await, theirs);
}

/// Holds: a password file full of junk (invalid UTF-8, NUL bytes, a 1 MB line, lone `\`)
/// neither panics nor hangs, and a good line after the junk is still found.
#[tokio::test]
async fn holds_junk_password_file_is_survived() {
    use std::os::unix::fs::PermissionsExt;
    let c = password_cluster();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pgpass");
    let mut junk: Vec<u8> = vec![0xff, 0xfe, b':', 0, b'\\', b'\n', b'\\', b'\r', b'\n'];
    junk.extend(std::iter::repeat_n(b'x', 1 << 20));
    junk.extend_from_slice(b"\n*:*:*:u_md5:md5-pw\n");
    std::fs::write(&path, &junk).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let kv = format!(
        "host=127.0.0.1 port={} user=u_md5 dbname=postgres sslmode=disable passfile={}",
        c.port(),
        path.display()
    );
    let theirs = libpq(&kv, &[]).await;
    assert_eq!(theirs, Ok(landed(c.port(), "u_md5")), "libpq");
    assert_eq!(ours(&kv).await, theirs);
}

/// Promise: "When no host fits, the error has kind `ErrorKind::TargetSessionAttrs` and names
/// the last host and the reason". Input: `target_session_attrs=standby` over [a primary, a
/// host that is down]. No host fits, but the error is the down host's I/O error (kind Io):
/// the reason the primary was refused is lost. libpq reports every host's failure in order
/// ("server is not in hot standby mode" for the first, "Connection refused" for the second).
/// (Low: error kind/wording.)
#[tokio::test]
async fn break_no_fitting_host_error_loses_the_reason_when_last_host_is_down() {
    let a = Cluster::start().unwrap();
    let kv = format!(
        "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=postgres sslmode=disable target_session_attrs=standby",
        a.port(),
        dead_port()
    );
    let theirs = libpq(&kv, &[]).await;
    assert!(
        theirs
            .as_ref()
            .is_err_and(|e| e.contains("not in hot standby mode")),
        "libpq: {theirs:?}"
    );
    let e = tokio::time::timeout(LIMIT, slipstream_pg::connect(&kv))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        e.kind() == slipstream_pg::ErrorKind::TargetSessionAttrs
            || e.to_string().contains("not in hot standby mode"),
        "kind {:?}: {e}",
        e.kind()
    );
}

/// Promise: key=value strings as libpq parses them. libpq separates pairs on ASCII whitespace
/// only (`isspace` on bytes); slipstream on any Unicode whitespace (`char::is_whitespace`:
/// U+00A0, U+0085, U+2028, U+3000 ...). Input: `... user=nobody<U+00A0>user=postgres ...`.
/// libpq: one value, user "nobody\u{a0}user=postgres" -> no such role, refused. slipstream: a
/// second pair `user=postgres` -> logs in as postgres. An application that builds a string from
/// a value it checked for spaces (ASCII) can thus be made to set other parameters (host,
/// user, sslmode...). (Medium: parameter injection; wrong user.)
#[tokio::test]
async fn break_unicode_whitespace_splits_key_value_pairs() {
    let a = Cluster::start().unwrap();
    for sep in ['\u{a0}', '\u{85}', '\u{2028}', '\u{3000}'] {
        let kv = format!(
            "host=127.0.0.1 port={} dbname=postgres sslmode=disable user=nobody{sep}user=postgres",
            a.port()
        );
        let theirs = libpq(&kv, &[]).await;
        assert!(
            theirs.as_ref().is_err_and(|e| e.contains("does not exist")),
            "libpq {sep:?}: {theirs:?}"
        );
        let o = ours(&kv).await;
        assert!(o.is_err(), "separator {sep:?}: slipstream logged in: {o:?}");
    }
}

/// Promise: libpq's parameter syntax. `keepalives` is an integer in libpq (non-zero = on);
/// `keepalives=2` connects there. slipstream refuses ("use 1 or 0"). (Low.)
#[tokio::test]
async fn break_keepalives_non_binary_integer_is_refused() {
    let a = Cluster::start().unwrap();
    let kv = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres keepalives=2",
        a.port()
    );
    let theirs = libpq(&kv, &[]).await;
    assert_eq!(theirs, Ok(landed(a.port(), "postgres")), "libpq");
    assert_eq!(ours(&kv).await, theirs);
}

/// The same flaw as `break_cannot_connect_now_on_first_host_stops_instead_of_trying_the_next`,
/// with a real server: A is in a smart shutdown (SIGTERM while a session is still open), so it
/// answers every new connection with FATAL 57P03 "the database system is shutting down" (a
/// planned switchover). Host list [A, B]. libpq: skips A -> lands on B. slipstream: gives up.
#[tokio::test]
async fn break_server_shutting_down_on_first_host_stops_instead_of_trying_the_next() {
    let a = Cluster::start().unwrap();
    let b = Cluster::start().unwrap();
    let mut held = slipstream_pg::connect(&a.url()).await.unwrap();
    let pid = a.server_pid().unwrap();
    // Smart shutdown of the cluster this test started (by its own postmaster pid).
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let kv = format!(
        "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=postgres sslmode=disable",
        a.port(),
        b.port()
    );
    // Wait until A refuses new connections with 57P03.
    let only_a = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable",
        a.port()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match ours(&only_a).await {
            Err(e) if e.contains("shutting down") => break,
            other => assert!(
                Instant::now() < deadline,
                "A did not start refusing: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let theirs = libpq(&kv, &[]).await;
    assert_eq!(theirs, Ok(landed(b.port(), "postgres")), "libpq");
    let o = ours(&kv).await;
    let _ = held.simple_query("SELECT 1").await;
    assert_eq!(o, theirs);
}

/// Promise: the password file: "`passfile=...`, else `PGPASSFILE`, else `~/.pgpass`".
/// Input: `passfile=''` with a good `~/.pgpass`. libpq: an empty passfile is no passfile
/// (`pgpassfile[0] == '\0'`) -> reads ~/.pgpass -> connects. slipstream: looks for a file
/// named "" and finds no password. (Low.)
#[tokio::test]
async fn break_empty_passfile_does_not_fall_back_to_home_pgpass() {
    use std::os::unix::fs::PermissionsExt;
    let c = password_cluster();
    let home = tempfile::tempdir().unwrap();
    let pgpass = home.path().join(".pgpass");
    std::fs::write(&pgpass, "*:*:*:u_md5:md5-pw\n").unwrap();
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    let h = home.path().to_str().unwrap().to_string();
    let env = [("HOME", h.as_str())];
    let kv = format!(
        "host=127.0.0.1 port={} user=u_md5 dbname=postgres sslmode=disable passfile=''",
        c.port()
    );
    let theirs = libpq(&kv, &env).await;
    assert_eq!(theirs, Ok(landed(c.port(), "u_md5")), "libpq");
    assert_eq!(ours_env(&kv, &env).await, theirs);
}

/// Holds: target_session_attrs over host lists with a down host, a standby and a primary in
/// several orders: slipstream lands where libpq (15, same rules as 16 here) lands.
#[tokio::test]
async fn holds_target_session_attrs_with_down_hosts_agree_with_libpq() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let (p, s, d) = (primary.port(), standby.port(), dead_port());
    let mut disagreements = Vec::new();
    for order in [[d, s, p], [s, p, d]] {
        for attrs in [
            "any",
            "read-write",
            "read-only",
            "primary",
            "standby",
            "prefer-standby",
        ] {
            let ports: Vec<String> = order.iter().map(u16::to_string).collect();
            let kv = format!(
                "host=127.0.0.1,127.0.0.1,127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable target_session_attrs={attrs}",
                ports.join(",")
            );
            let theirs = libpq(&kv, &[]).await;
            let o = ours(&kv).await;
            if theirs.is_ok() != o.is_ok() || (theirs.is_ok() && theirs != o) {
                disagreements.push(format!("{order:?} {attrs}: libpq {theirs:?}, ours {o:?}"));
            }
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");
}

/// Promise: TLS table / "as libpq". TLS is never used over a Unix socket, so libpq connects to
/// a socket host with `sslmode=verify-full` (or verify-ca) without needing any root
/// certificate. slipstream builds the TLS configuration before looking at the hosts and
/// refuses ("could not open <HOME>/.postgresql/root.crt: No such file or directory"; with
/// sslrootcert given, the same for that file), although no TLS would be used. (Medium: a string
/// that works with libpq is refused; typical for a config shared between TCP and local use.)
#[tokio::test]
async fn break_verify_full_over_unix_socket_demands_a_root_certificate() {
    let a = Cluster::start().unwrap();
    let home = tempfile::tempdir().unwrap();
    let h = home.path().to_str().unwrap().to_string();
    let env = [("HOME", h.as_str())];
    for mode in ["verify-full", "verify-ca"] {
        let kv = format!("{} sslmode={mode}", a.socket_conninfo());
        let theirs = libpq(&kv, &env).await;
        assert_eq!(theirs, Ok(landed(a.port(), "postgres")), "libpq {mode}");
        assert_eq!(ours_env(&kv, &env).await, theirs, "{mode}");
    }
}

/// Holds: SCRAM passwords that SASLprep changes (soft hyphen mapped to nothing, NFKC
/// compatibility characters, a prohibited control character that makes both sides fall back
/// to the raw bytes): slipstream logs in exactly when libpq does.
#[tokio::test]
async fn holds_scram_saslprep_passwords_agree_with_libpq() {
    let c = Cluster::builder()
        .hba("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        .start()
        .unwrap();
    let passwords = [
        "a\u{ad}b",
        "\u{2168}x",
        "e\u{301}t\u{e9}",
        "\u{fb01}n",
        "ctl\u{7}x",
        "sp\u{a0}ace",
        "\u{1f600}",
    ];
    for (i, pw) in passwords.iter().enumerate() {
        c.psql(&format!(
            "SET password_encryption='scram-sha-256'; CREATE ROLE r{i} LOGIN PASSWORD '{pw}'"
        ))
        .unwrap();
        let kv = format!(
            "host=127.0.0.1 port={} user=r{i} dbname=postgres sslmode=disable password='{pw}'",
            c.port()
        );
        let theirs = libpq(&kv, &[]).await;
        assert_eq!(
            theirs,
            Ok(format!("{}|r{i}|postgres", c.port())),
            "libpq {pw:?}"
        );
        assert_eq!(ours(&kv).await, theirs, "{pw:?}");
    }
}

/// Holds: the connection-string parser never panics (200k random strings over an alphabet of
/// the characters that matter: quotes, escapes, separators, percent signs, brackets, Unicode).
#[test]
fn holds_parser_never_panics_on_random_strings() {
    let alphabet: Vec<char> =
        "postgres:/@[]%2F,=' \\\t\n?&hostportuserdbname0159\u{a0}\u{2028}é\u{0}xyz!"
            .chars()
            .collect();
    let prefixes = ["", "postgres://", "postgresql://", "host=", "port="];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..200_000 {
        let mut s = prefixes[(next() % prefixes.len() as u64) as usize].to_string();
        for _ in 0..(next() % 24) {
            s.push(alphabet[(next() % alphabet.len() as u64) as usize]);
        }
        let r = std::panic::catch_unwind(|| {
            if let Ok(c) = s.parse::<slipstream_pg::Config>() {
                let _ = c.per_host();
            }
        });
        assert!(r.is_ok(), "panicked on {s:?}");
    }
}

/// Debatable (libpq quirk vs the doc's wording). Input: `postgresql://%2Fdir,%2Fdir/postgres`
/// (two hosts, no port) with PGPORT=7777; `dir` holds 5432 -> A and 7777 -> B.
/// libpq: its URL parser stores the port list "," for two port-less hosts, so `port` counts as
/// set, PGPORT is not used, each host gets 5432 -> lands on A. With ONE port-less host PGPORT
/// is used. slipstream: applies PGPORT in both cases -> lands on B. The doc's "PG* variables
/// fill what the string leaves out" supports slipstream; "libpq's semantics" supports A.
#[tokio::test]
async fn break_url_two_portless_hosts_take_pgport_where_libpq_does_not() {
    let (a, b) = (Cluster::start().unwrap(), Cluster::start().unwrap());
    let dir = socket_alias_dir(&[(5432, &a), (7777, &b)]);
    let d = enc(dir.path());
    let env = [("PGPORT", "7777")];
    let one = format!("postgresql://{d}/postgres?user=postgres");
    let theirs = libpq(&one, &env).await;
    assert_eq!(theirs, Ok(landed(b.port(), "postgres")), "libpq, one host");
    assert_eq!(ours_env(&one, &env).await, theirs, "one host");
    let two = format!("postgresql://{d},{d}/postgres?user=postgres");
    let theirs = libpq(&two, &env).await;
    assert_eq!(theirs, Ok(landed(a.port(), "postgres")), "libpq, two hosts");
    assert_eq!(ours_env(&two, &env).await, theirs, "two hosts");
}

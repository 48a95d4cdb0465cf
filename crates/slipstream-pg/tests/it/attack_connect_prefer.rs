//! Second attack on the connecting change (8ecbb12): sslmode=prefer's retry without TLS, and
//! empty values meaning libpq's defaults. `break_*` tests FAIL on 40bb2e7.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use slipstream_testkit::Cluster;

use super::tls::{pki, tls_cluster_with as tls_cluster};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const LIMIT: Duration = Duration::from_secs(10);

/// A TCP relay in front of `port` that records every byte the client sends, and counts
/// connections. What a passive eavesdropper on the client's network sees.
struct Sniffer {
    port: u16,
    seen: Arc<Mutex<Vec<u8>>>,
    connections: Arc<Mutex<usize>>,
}

async fn sniffer(target: u16) -> Sniffer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let connections = Arc::new(Mutex::new(0));
    let (s, n) = (seen.clone(), connections.clone());
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            *n.lock().unwrap() += 1;
            let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                continue;
            };
            let s = s.clone();
            tokio::spawn(async move {
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = async {
                    let mut buf = [0u8; 8192];
                    loop {
                        match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(k) => {
                                s.lock().unwrap().extend_from_slice(&buf[..k]);
                                if sw.write_all(&buf[..k]).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = sw.shutdown().await;
                };
                let down = async {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                    let _ = cw.shutdown().await;
                };
                tokio::join!(up, down);
            });
        }
    });
    Sniffer {
        port,
        seen,
        connections,
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// libpq's verdict through psql (no PG* variables, no HOME).
async fn psql(conninfo: &str, query: &str) -> Result<String, String> {
    let mut cmd = tokio::process::Command::new("timeout");
    cmd.args(["6", "psql", "-X", "-w", "-At", "-c", query, "-d", conninfo]);
    for (k, _) in std::env::vars() {
        if k.starts_with("PG") {
            cmd.env_remove(k);
        }
    }
    cmd.env("HOME", "/nonexistent-attack-home")
        .env("LC_ALL", "C");
    let out = cmd.output().await.expect("run psql");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// Promise (docs/client.md "TLS", commit 8ecbb12): under `sslmode=prefer` "a TLS connection
/// that failed, in its handshake or because the server refused it, is tried once more without
/// TLS, as libpq does".
///
/// libpq retries without TLS only on an ErrorResponse *while authenticating*
/// (CONNECTION_AWAITING_RESPONSE); once the server has said AuthenticationOk, a FATAL (database
/// does not exist, role may not log in, too many connections for the role) is final.
/// slipstream retries on *any* server error over TLS (`over_tls && error.as_db_error()`),
/// including errors after AuthenticationOk — i.e. after the password was accepted.
///
/// Steps: server with ssl=on and `password` (cleartext) auth for both hostssl and hostnossl;
/// a sniffing relay in front; connect with sslmode=prefer, the right password, and a database
/// that does not exist.
/// Observed: libpq opens 1 connection (TLS) and the password never crosses the wire in clear;
/// slipstream opens 2, and the second sends the (correct!) password in plaintext. A typo in a
/// database name thus leaks a valid password to anyone on the path, although the server offered
/// TLS and the TLS session worked. The final error is also the plain attempt's.
#[tokio::test]
async fn break_prefer_resends_the_password_in_plaintext_after_authentication_ok() {
    let pki = pki();
    let c = tls_cluster(
        &pki,
        "local all all trust\nhostssl all all 127.0.0.1/32 password\nhostnossl all all 127.0.0.1/32 password\n",
    );
    c.psql("CREATE ROLE leaky LOGIN PASSWORD 'Secret-Pw-4711'")
        .unwrap();
    let conninfo = |port: u16| {
        format!(
            "host=127.0.0.1 port={port} user=leaky password=Secret-Pw-4711 dbname=no_such_db sslmode=prefer"
        )
    };

    // libpq, the reference.
    let theirs = sniffer(c.port()).await;
    let r = psql(&conninfo(theirs.port), "SELECT 1").await;
    assert!(r.is_err(), "{r:?}");
    assert!(r.as_ref().unwrap_err().contains("does not exist"), "{r:?}");
    let libpq_conns = *theirs.connections.lock().unwrap();
    let libpq_leaked = contains(&theirs.seen.lock().unwrap(), b"Secret-Pw-4711");
    assert!(!libpq_leaked, "libpq never sends it in clear");

    // slipstream.
    let ours = sniffer(c.port()).await;
    let r = tokio::time::timeout(LIMIT, slipstream_pg::connect(&conninfo(ours.port)))
        .await
        .expect("no hang");
    let err = r.expect_err("the database does not exist");
    let leaked = contains(&ours.seen.lock().unwrap(), b"Secret-Pw-4711");
    let conns = *ours.connections.lock().unwrap();
    assert!(
        !leaked && conns == libpq_conns,
        "slipstream sent the password in plaintext: {leaked}; connections: ours {conns}, libpq {libpq_conns}; error: {err}"
    );
}

/// Same root cause, observable without a sniffer: the final error is the *plain* attempt's.
/// Server: hostssl trust only. Database missing. libpq: `database "no_such_db" does not exist`
/// (SQLSTATE 3D000). slipstream: retries without TLS after the 3D000 and reports pg_hba's
/// refusal of the plain attempt (28000) as the error's code, so an application checking
/// `code() == INVALID_CATALOG_NAME` (e.g. to create the database) gets 28000 instead.
#[tokio::test]
async fn break_prefer_reports_the_plain_retry_instead_of_the_servers_final_error() {
    let pki = pki();
    let c = tls_cluster(
        &pki,
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    );
    let conninfo = format!(
        "host=127.0.0.1 port={} user=postgres dbname=no_such_db sslmode=prefer",
        c.port()
    );
    let theirs = psql(&conninfo, "SELECT 1").await.unwrap_err();
    assert!(theirs.contains("does not exist"), "{theirs}");
    assert!(!theirs.contains("pg_hba.conf"), "{theirs}");
    let err = tokio::time::timeout(LIMIT, slipstream_pg::connect(&conninfo))
        .await
        .expect("no hang")
        .expect_err("missing database");
    let code = err.as_db_error().map(|d| d.code().code().to_string());
    assert_eq!(
        code.as_deref(),
        Some("3D000"),
        "libpq: {theirs}\nslipstream: {err}"
    );
}

/// Promise (docs/client.md, "Where slipstream differs from libpq"): "a `PGHOSTADDR` in the
/// environment is refused with a message rather than ignored (ignoring it would connect
/// somewhere else than libpq does)".
///
/// The refusal only happens when no host is given (`!self.is_set("host")`). But libpq uses
/// hostaddr for the connection *also when host is set* (host then only names the server for
/// TLS, the password file and Kerberos), which is the usual way PGHOSTADDR is used.
///
/// Steps: clusters A and B; a socket directory whose `.s.PGSQL.<A's port>` is B's socket;
/// `host=<that dir> port=<A>` and PGHOSTADDR=127.0.0.1 in the environment.
/// Observed: libpq connects by TCP to 127.0.0.1:<A> and lands on A; slipstream silently
/// ignores PGHOSTADDR and lands on B: another server, exactly what the refusal was for.
#[tokio::test]
async fn break_pghostaddr_ignored_when_host_is_given() {
    use super::attack_connect::{landed, libpq, ours_env, socket_alias_dir};
    let a = Cluster::start().unwrap();
    let b = Cluster::start().unwrap();
    let dir = socket_alias_dir(&[(a.port(), &b)]);
    let conninfo = format!(
        "host={} port={} user=postgres dbname=postgres",
        dir.path().display(),
        a.port()
    );
    let env = [("PGHOSTADDR", "127.0.0.1")];
    let theirs = libpq(&conninfo, &env).await;
    assert_eq!(
        theirs,
        Ok(landed(a.port(), "postgres")),
        "libpq uses hostaddr"
    );
    let o = ours_env(&conninfo, &env).await;
    assert!(
        o == theirs || o.as_ref().is_err_and(|e| e.contains("PGHOSTADDR")),
        "slipstream neither honoured nor refused PGHOSTADDR: {o:?} (A is port {}, B is port {})",
        a.port(),
        b.port()
    );
}

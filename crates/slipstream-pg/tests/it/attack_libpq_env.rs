//! Attacks on "PG* variables fill what the string leaves out" (docs/client.md, "Connecting")
//! and "Where slipstream differs from libpq" (helper h63): the environment variables libpq 15
//! reads that slipstream had no entry for. The same parameter in a connection string is an
//! unknown parameter, refused by name; in the environment it was ignored without a word, so
//! the same environment connected somewhere else, with less protection, or to a session set
//! up differently than libpq's.
//!
//! Method: the differential of `attack_connect.rs`: `psql` (libpq 15) and slipstream-pg, each
//! in a process of its own with only the variables given, against a trust cluster; what each
//! reads from the server, or that each refuses, is compared. slipstream must read the
//! variable as libpq does, or refuse it naming the variable.

use super::attack_connect::{in_child, libpq, scrub_env};
use slipstream_testkit::Cluster;
use std::time::Duration;

/// Every connection attempt of ours must end within this.
const LIMIT: Duration = Duration::from_secs(10);

/// What the session reads back: where it landed, the settings libpq takes from `PGTZ`,
/// `PGDATESTYLE` and `PGGEQO`, and a setting only `options` sets here.
const SESSION: &str = "SELECT current_setting('port') || '|' || current_user || '|' || \
     current_setting('TimeZone') || '|' || current_setting('DateStyle') || '|' || \
     current_setting('geqo') || '|' || current_setting('search_path')";

/// libpq's reading of `SESSION`, or its refusal.
async fn theirs(conninfo: &str, env: &[(&str, &str)]) -> Result<String, String> {
    let mut cmd = tokio::process::Command::new("timeout");
    cmd.args([
        "6", "psql", "-X", "-w", "-At", "-c", SESSION, "-d", conninfo,
    ]);
    scrub_env(cmd.as_std_mut(), env);
    let out = cmd.output().await.expect("run psql");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// slipstream's reading of `SESSION` with `env`, in a child process (this test binary running
/// only `child_session`), so that no other test sees the variables.
async fn ours(conninfo: &str, env: &[(&str, &str)]) -> Result<String, String> {
    in_child(
        "attack_libpq_env::child_session",
        "ATTACK_ENV_CHILD",
        conninfo,
        env,
    )
    .await
}

/// Not an attack: the child half of `ours`. Does nothing when run normally.
#[tokio::test]
async fn child_session() {
    let Ok(conninfo) = std::env::var("ATTACK_ENV_CHILD") else {
        return;
    };
    let attempt = async {
        let mut c = slipstream_pg::connect(&conninfo)
            .await
            .map_err(|e| e.to_string())?;
        let row = c.query_one(SESSION, &[]).await.map_err(|e| e.to_string())?;
        Ok::<String, String>(row.get(0).unwrap())
    };
    let text = match tokio::time::timeout(LIMIT, attempt).await {
        Ok(Ok(s)) => format!("ok {s}"),
        Ok(Err(e)) => format!("err {e}"),
        Err(_) => format!("err HANG: no answer within {LIMIT:?}"),
    };
    println!("ATTACK_RESULT {}", text.replace('\n', " "));
}

/// Promise: PG* variables are read as libpq reads them, or refused by name (as `PGHOSTADDR`
/// is). libpq sends `PGTZ`, `PGDATESTYLE` and `PGGEQO` as the session's `TimeZone`,
/// `DateStyle` and `geqo` (fe-protocol3.c, `EnvironmentOptions`; the value `default` sends
/// nothing). slipstream ignored them: under `PGTZ=Asia/Tokyo` every `timestamptz` the server
/// printed, and every `now()::date`, was in the server's zone instead.
///
/// Before the fix: `libpq: Ok("<port>|postgres|Asia/Tokyo|German, DMY|off")`, `ours:
/// Ok("<port>|postgres|Etc/UTC|ISO, MDY|on")` (the cluster's own settings).
#[tokio::test]
async fn break_pgtz_pgdatestyle_and_pggeqo_are_ignored() {
    let cluster = Cluster::start().unwrap();
    let conninfo = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable",
        cluster.port()
    );
    let env = [
        ("PGTZ", "Asia/Tokyo"),
        ("PGDATESTYLE", "German"),
        ("PGGEQO", "off"),
    ];
    let t = theirs(&conninfo, &env).await;
    assert!(
        t.as_ref()
            .is_ok_and(|s| s.contains("Asia/Tokyo|German, DMY|off")),
        "libpq: {t:?}"
    );
    assert_eq!(ours(&conninfo, &env).await, t);
    // `default` (any case) means "send nothing", as in libpq.
    let env = [("PGTZ", "DEFAULT"), ("PGDATESTYLE", "default")];
    assert_eq!(ours(&conninfo, &env).await, theirs(&conninfo, &env).await);
    // A value the server refuses fails the connection in both.
    let env = [("PGTZ", "Not/AZone")];
    let (t, o) = (theirs(&conninfo, &env).await, ours(&conninfo, &env).await);
    assert!(t.is_err(), "libpq: {t:?}");
    assert!(
        o.as_ref().is_err_and(|e| e.contains("Not/AZone")),
        "ours: {o:?}"
    );
}

/// Promise as above. `PGSERVICE` makes libpq read the named section of the service file
/// (`PGSERVICEFILE`, else `~/.pg_service.conf`, else the system one) for every parameter the
/// string leaves out: here the port, so libpq lands on the cluster and slipstream, ignoring
/// it, tried port 5432. `PGGSSENCMODE=require` makes libpq refuse any connection that is not
/// GSSAPI-encrypted; slipstream refuses `gssencmode=require` in a string, but connected in
/// clear under the variable. `PGREQUIRESSL=1` (libpq 15's old spelling of
/// `sslmode=require`) makes libpq refuse a server without TLS; slipstream connected in clear.
/// `PGSSLCRL`/`PGSSLCRLDIR` (a revoked server certificate must be refused) and
/// `PGREQUIREPEER` (the Unix socket's server must run as that OS user) are checks slipstream
/// cannot make: ignoring them accepts a server libpq would refuse.
///
/// Before the fix: each variable was ignored: `PGSERVICE`: `libpq: Ok("<port>|...")`, `ours:
/// Err("...127.0.0.1:5432...Connection refused...")`; `PGGSSENCMODE=require`: `libpq: Err("psql:
/// error: gssencmode value \"require\" invalid when GSSAPI support is not compiled in")` or a
/// refused connection, `ours: Ok(...)`; the others likewise `Ok` where they must refuse.
#[tokio::test]
async fn break_pgservice_pggssencmode_and_unsupported_checks_are_ignored() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let services = dir.path().join("pg_service.conf");
    std::fs::write(&services, format!("[attack]\nport={}\n", cluster.port())).unwrap();
    let services = services.display().to_string();
    let no_port = "host=127.0.0.1 user=postgres dbname=postgres sslmode=disable";
    // Since helper h67 slipstream reads the service file itself: it must land where libpq does.
    let env = [
        ("PGSERVICE", "attack"),
        ("PGSERVICEFILE", services.as_str()),
    ];
    let t = theirs(no_port, &env).await;
    assert!(t.is_ok(), "libpq: {t:?}");
    assert_eq!(ours(no_port, &env).await, t, "PGSERVICE");
    let conninfo = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        cluster.port()
    );
    for (var, value) in [
        ("PGGSSENCMODE", "require"),
        // libpq looks for a service named "" and fails; so does slipstream, naming the
        // variable the name came from.
        ("PGSERVICE", ""),
        ("PGSSLCRL", "/nonexistent/root.crl"),
        ("PGSSLCRLDIR", "/nonexistent/crls"),
    ] {
        let o = ours(&conninfo, &[(var, value)]).await;
        assert!(
            o.as_ref().is_err_and(|e| e.contains(var)),
            "{var}={value}: slipstream connected without the check libpq makes: {o:?}"
        );
    }
    // What slipstream can do is not refused: `PGGSSENCMODE=disable`/`prefer` are honoured
    // (no GSSAPI encryption either way), `PGREQUIRESSL=0` asks nothing, and an empty
    // variable is no request. libpq connects under each as well.
    for (var, value) in [
        ("PGGSSENCMODE", "disable"),
        ("PGGSSENCMODE", "prefer"),
        ("PGREQUIRESSL", "0"),
        ("PGSSLCRL", ""),
    ] {
        let t = theirs(&conninfo, &[(var, value)]).await;
        assert!(t.is_ok(), "libpq under {var}={value}: {t:?}");
        assert_eq!(ours(&conninfo, &[(var, value)]).await, t, "{var}={value}");
    }
    // The string's gssencmode wins over PGGSSENCMODE, as in libpq. Before session 48
    // `PGGSSENCMODE=require` was refused even under `gssencmode=disable`.
    let plain = format!("{conninfo} gssencmode=disable");
    let env = [("PGGSSENCMODE", "require")];
    let t = theirs(&plain, &env).await;
    assert!(t.is_ok(), "libpq under gssencmode=disable: {t:?}");
    assert_eq!(
        ours(&plain, &env).await,
        t,
        "gssencmode=disable, PGGSSENCMODE=require"
    );
    // Where libpq would not use them, neither check is refused: a revocation list without
    // TLS, `requirepeer` over TCP. Before session 48 both were refused whatever the
    // connection, turning away what libpq connects ("PGREQUIREPEER=nobody is set, but ...").
    let no_tls = format!("{conninfo} sslmode=disable");
    for (target, var, value) in [
        (&no_tls, "PGSSLCRL", "/nonexistent/root.crl"),
        (&no_tls, "PGSSLCRLDIR", "/nonexistent/crls"),
        (&conninfo, "PGREQUIREPEER", "nobody"),
    ] {
        let t = theirs(target, &[(var, value)]).await;
        assert!(t.is_ok(), "libpq under {var}={value}: {t:?}");
        assert_eq!(ours(target, &[(var, value)]).await, t, "{var}={value}");
    }
    // Over the Unix socket libpq checks the peer (the server runs as another OS user than
    // `nobody`) and refuses; slipstream cannot check it, and refuses by name.
    let socket = format!(
        "host={} port={} user=postgres dbname=postgres",
        cluster.socket_dir().display(),
        cluster.port()
    );
    let env = [("PGREQUIREPEER", "nobody")];
    let t = libpq(&socket, &env).await;
    assert!(
        t.is_err(),
        "libpq over the socket under requirepeer=nobody: {t:?}"
    );
    let o = ours(&socket, &env).await;
    assert!(
        o.as_ref().is_err_and(|e| e.contains("PGREQUIREPEER")),
        "ours over the socket: {o:?}"
    );
    // PGREQUIRESSL=1 is read as libpq reads it: `sslmode=require` unless the string or
    // PGSSLMODE says otherwise, so against this server without TLS both refuse.
    let env = [("PGREQUIRESSL", "1")];
    let (t, o) = (libpq(&conninfo, &env).await, ours(&conninfo, &env).await);
    assert!(t.is_err(), "libpq under PGREQUIRESSL=1 connected: {t:?}");
    assert!(
        o.as_ref()
            .is_err_and(|e| e.contains("TLS") || e.contains("SSL")),
        "ours under PGREQUIRESSL=1: {o:?}"
    );
    let env = [("PGREQUIRESSL", "1"), ("PGSSLMODE", "disable")];
    let t = theirs(&conninfo, &env).await;
    assert!(t.is_ok(), "libpq: {t:?}");
    assert_eq!(ours(&conninfo, &env).await, t);
    // libpq refuses PGGSSENCMODE=require too (no GSSAPI here, or no credentials).
    let t = libpq(&conninfo, &[("PGGSSENCMODE", "require")]).await;
    assert!(
        t.is_err(),
        "libpq under PGGSSENCMODE=require connected: {t:?}"
    );
}

/// Holds. Promise: `options` (string, URL, `PGOPTIONS`) reaches the server as libpq sends it,
/// whatever its spelling: `-c name=value` and `--name=value`, several separated by spaces or a
/// tab, a backslash-escaped space inside a value, percent-encoded in a URL; and the
/// environment's `PGTZ` wins over an `options` setting the same thing, as in libpq (the server
/// applies `options` first). Each is compared with what libpq's session reads.
#[tokio::test]
async fn holds_options_in_every_spelling_reach_the_server_as_from_libpq() {
    let cluster = Cluster::start().unwrap();
    let p = cluster.port();
    let kv = format!("host=127.0.0.1 port={p} user=postgres dbname=postgres sslmode=disable");
    let url = format!("postgres://postgres@127.0.0.1:{p}/postgres?sslmode=disable");
    // As written in the string; libpq and slipstream take `\\` in a quoted value as `\`,
    // and the server splits `options` at unescaped white space.
    let cases = [
        format!(r"{kv} options='-csearch_path=x -c geqo=off'"),
        format!(r"{kv} options='--search_path=y  --DateStyle=SQL'"),
        format!("{kv} options='-c search_path=a,b\t-c geqo=off'"),
        format!(r#"{kv} options='-c search_path="a\\ b"'"#),
        format!(r"{kv} options=' '"),
        format!(r"{url}&options=--search_path%3Dq%20--geqo%3Doff"),
        format!(r"{url}&options=-c%20search_path%3D%22q%5C%20r%22"),
    ];
    for conninfo in &cases {
        let t = theirs(conninfo, &[]).await;
        assert!(t.is_ok(), "libpq: {conninfo}: {t:?}");
        assert_eq!(ours(conninfo, &[]).await, t, "{conninfo}");
    }
    let both = format!("{kv} options='-c TimeZone=UTC'");
    let env = [("PGTZ", "Asia/Tokyo"), ("PGOPTIONS", "-c geqo=off")];
    let t = theirs(&both, &env).await;
    assert!(
        t.as_ref().is_ok_and(|s| s.contains("Asia/Tokyo")),
        "libpq: {t:?}"
    );
    assert_eq!(ours(&both, &env).await, t);
}

/// Promise as above. libpq 15 holds to `PGSSLMINPROTOCOLVERSION` and
/// `PGSSLMAXPROTOCOLVERSION`: under a TLS 1.3 floor it refuses a server that speaks TLS 1.2
/// at most. slipstream (rustls: TLS 1.2 and 1.3) ignored the variable and connected over
/// TLS 1.2. A floor of 1.2 or lower is what it does anyway, and connects as libpq does.
///
/// Before the fix: libpq failed the TLS handshake, and `ours under a TLS 1.3 floor:
/// Ok("<port>|postgres|Etc/UTC|...")`.
#[tokio::test]
async fn break_pgsslminprotocolversion_is_ignored() {
    let pki = super::tls::pki();
    let cluster = Cluster::builder()
        .tls(&pki.cert_pem, &pki.key_pem)
        .setting("ssl_max_protocol_version", "TLSv1.2")
        .start()
        .unwrap();
    let conninfo = format!(
        "host=localhost port={} user=postgres dbname=postgres sslmode=require",
        cluster.port()
    );
    let env = [("PGSSLMINPROTOCOLVERSION", "TLSv1.3")];
    let t = theirs(&conninfo, &env).await;
    assert!(t.is_err(), "libpq under a TLS 1.3 floor: {t:?}");
    let o = ours(&conninfo, &env).await;
    assert!(
        o.as_ref()
            .is_err_and(|e| e.contains("PGSSLMINPROTOCOLVERSION")),
        "ours under a TLS 1.3 floor: {o:?}"
    );
    for (var, value) in [
        ("PGSSLMINPROTOCOLVERSION", "TLSv1.2"),
        ("PGSSLMINPROTOCOLVERSION", "tlsv1"),
        ("PGSSLMAXPROTOCOLVERSION", "TLSv1.3"),
    ] {
        let env = [(var, value)];
        let t = theirs(&conninfo, &env).await;
        assert!(t.is_ok(), "libpq under {var}={value}: {t:?}");
        assert_eq!(ours(&conninfo, &env).await, t, "{var}={value}");
    }
    // A ceiling below 1.3 cannot be held to either: refused by name.
    let env = [("PGSSLMAXPROTOCOLVERSION", "TLSv1.2")];
    let o = ours(&conninfo, &env).await;
    assert!(
        o.as_ref()
            .is_err_and(|e| e.contains("PGSSLMAXPROTOCOLVERSION")),
        "{o:?}"
    );
}

/// The first TLS record (the ClientHello) a client sent to a listener that answers its
/// `SSLRequest` with `S` and then hangs up; `None` if the client sent no TLS.
async fn client_hello(
    connect: impl std::future::Future<Output = Result<String, String>>,
    listener: tokio::net::TcpListener,
) -> Option<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let serve = async {
        let (mut socket, _) = listener.accept().await.ok()?;
        let mut request = [0u8; 8];
        socket.read_exact(&mut request).await.ok()?;
        // SSLRequest: length 8, code 80877103.
        if request != [0, 0, 0, 8, 4, 210, 22, 47] {
            return None;
        }
        socket.write_all(b"S").await.ok()?;
        let mut header = [0u8; 5];
        socket.read_exact(&mut header).await.ok()?;
        let mut record = vec![0u8; usize::from(u16::from_be_bytes([header[3], header[4]]))];
        socket.read_exact(&mut record).await.ok()?;
        Some(record)
    };
    let (hello, _) = tokio::join!(tokio::time::timeout(LIMIT, serve), connect);
    hello.ok().flatten()
}

/// Promise: parameters and PG* variables are read as libpq reads them, or refused by name.
/// libpq 15 names the server in its TLS handshake (SNI) unless `sslsni` (or `PGSSLSNI`) says
/// otherwise, and never for an address. Checked on the ClientHello each client sends.
///
/// Before the fix: `sslsni=0` in a string was an unknown parameter ("libpq names the server:
/// Some(false), ours: None"), and under `PGSSLSNI=0` ours sent `localhost` in the ClientHello
/// where libpq sent no name ("libpq names the server: Some(false), ours: Some(true)").
#[tokio::test]
async fn break_sslsni_and_pgsslsni_are_refused_or_ignored() {
    // `None`: the client sent no ClientHello (it refused the string).
    let names = |hello: &Option<Vec<u8>>| {
        hello
            .as_ref()
            .map(|h| h.windows(9).any(|w| w == b"localhost"))
    };
    for (extra, env, sni) in [
        ("", &[][..], true),
        ("sslsni=0", &[][..], false),
        ("sslsni=1", &[("PGSSLSNI", "0")][..], true),
        ("", &[("PGSSLSNI", "0")][..], false),
        ("", &[("PGSSLSNI", "yes")][..], false),
        ("", &[("PGSSLSNI", "1")][..], true),
    ] {
        let what = format!("{extra} {env:?}");
        let mut seen = Vec::new();
        for libpq in [true, false] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let conninfo = format!(
                "host=localhost port={} user=postgres sslmode=require gssencmode=disable {extra}",
                listener.local_addr().unwrap().port()
            );
            let hello = if libpq {
                client_hello(theirs(&conninfo, env), listener).await
            } else {
                client_hello(ours(&conninfo, env), listener).await
            };
            seen.push(names(&hello));
        }
        assert_eq!(
            seen,
            [Some(sni), Some(sni)],
            "{what}: libpq names the server: {:?}, ours: {:?}",
            seen[0],
            seen[1]
        );
    }
    // An address is never named, whatever sslsni says.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let conninfo = format!(
        "host=127.0.0.1 port={} user=postgres sslmode=require sslsni=1",
        listener.local_addr().unwrap().port()
    );
    let hello = client_hello(ours(&conninfo, &[]), listener).await;
    assert_eq!(names(&hello), Some(false));
}

/// Promise as above: libpq 15 still reads `requiressl` in a string, as `sslmode` in its place
/// (the later of the two wins): `1...` is `require`, anything else `prefer`. And it accepts
/// `sslcompression`, which no current OpenSSL honours. Each string is compared with libpq's
/// verdict against a server without TLS.
///
/// Before the fix: every one was "unknown connection parameter `requiressl`" (or
/// `sslcompression`), where libpq connected or refused the plain server.
#[tokio::test]
async fn requiressl_and_sslcompression_in_a_string_read_as_libpq() {
    let cluster = Cluster::start().unwrap();
    for extra in [
        "requiressl=1",
        "requiressl=10",
        "requiressl=yes",
        "requiressl=",
        "sslmode=disable requiressl=1",
        "requiressl=1 sslmode=disable",
        "sslmode=require requiressl=0",
        "sslcompression=1",
        "sslcompression=0 sslmode=disable",
    ] {
        let conninfo = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres gssencmode=disable {extra}",
            cluster.port()
        );
        let t = theirs(&conninfo, &[]).await;
        let o = ours(&conninfo, &[]).await;
        assert_eq!(o.is_ok(), t.is_ok(), "{extra}: libpq {t:?}, ours {o:?}");
        if let (Ok(o), Ok(t)) = (&o, &t) {
            assert_eq!(o, t, "{extra}");
        }
    }
}

/// Promise (helper h67): "a connection service (`service=`, `PGSERVICE`) fills what the
/// string leaves unset from its section of the service file, before the `PG*` variables, as
/// libpq 15 does" (docs/client.md, "Connection service files"). Each form is compared with
/// what psql's session reads: `PGSERVICE`, `service=` in a key=value string and in a URL
/// query, the string's value beating the service's, the service's beating `PGHOST`/`PGPORT`,
/// the system file (`PGSYSCONFDIR`) when `PGSERVICEFILE` lacks the service, and a service no
/// file defines.
///
/// Before the fix: `service=` was "unknown connection parameter `service`" and `PGSERVICE`
/// "PGSERVICE=real is set, but slipstream-pg does not support connection service files", where
/// libpq connected (`libpq: Ok("<port>|postgres|...")`).
#[tokio::test]
async fn break_service_files_were_refused() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = cluster.port();
    let user_file = dir.path().join("services.conf");
    std::fs::write(
        &user_file,
        format!(
            "# the cluster\n[real]\nhost=127.0.0.1\nport={p}\nuser=postgres\n\
             options=-c search_path=from_service\n[wrong]\nhost=/nonexistent-h67\n"
        ),
    )
    .unwrap();
    let sys = dir.path().join("sys");
    std::fs::create_dir(&sys).unwrap();
    std::fs::write(
        sys.join("pg_service.conf"),
        format!("[system]\nhost=127.0.0.1\nport={p}\ndbname=postgres\n"),
    )
    .unwrap();
    let (user_file, sys) = (user_file.display().to_string(), sys.display().to_string());
    let files = [
        ("PGSERVICEFILE", user_file.as_str()),
        ("PGSYSCONFDIR", sys.as_str()),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut env = files.to_vec();
        env.extend_from_slice(extra);
        env
    };
    for (conninfo, env) in [
        (
            "dbname=postgres sslmode=disable",
            with(&[("PGSERVICE", "real")]),
        ),
        ("service=real dbname=postgres sslmode=disable", with(&[])),
        (
            "postgres:///postgres?service=real&sslmode=disable",
            with(&[]),
        ),
        // The string's options beat the service's.
        (
            "service=real dbname=postgres sslmode=disable options='-c search_path=from_string'",
            with(&[]),
        ),
        // The service's host and port beat PGHOST and PGPORT; PGUSER is beaten too.
        (
            "service=real dbname=postgres sslmode=disable",
            with(&[
                ("PGHOST", "/nonexistent-h67"),
                ("PGPORT", "1"),
                ("PGUSER", "nobody"),
            ]),
        ),
        // Found only in the system file; PGUSER fills what it leaves out.
        (
            "service=system sslmode=disable",
            with(&[("PGUSER", "postgres")]),
        ),
        // The string's `service=` beats PGSERVICE.
        (
            "service=real dbname=postgres sslmode=disable",
            with(&[("PGSERVICE", "wrong")]),
        ),
    ] {
        let t = theirs(conninfo, &env).await;
        assert!(t.is_ok(), "libpq {conninfo:?} {env:?}: {t:?}");
        assert_eq!(ours(conninfo, &env).await, t, "{conninfo:?} {env:?}");
    }
    // A service no file defines: both refuse; ours names it.
    let env = with(&[]);
    let t = theirs("service=nowhere", &env).await;
    assert!(t.is_err(), "libpq: {t:?}");
    let o = ours("service=nowhere", &env).await;
    assert!(
        o.as_ref()
            .is_err_and(|e| e.contains("definition of service \"nowhere\" not found")),
        "ours: {o:?}"
    );
}

/// Promise: a parameter the string gives, even empty, keeps its variable and a service's value
/// out, as in libpq (its `conninfo_add_defaults` fills only what is unset, and `''` is set).
/// `passfile=''` is the default file, but slipstream took its field for unset and filled it
/// from `PGPASSFILE` or from the service's `passfile=`, so it logged in with a password libpq
/// never read (found by helper h65). Before the fix: "passfile='' with PGPASSFILE: libpq
/// Err(\"...no password supplied\"), ours Ok(...)".
#[tokio::test]
async fn break_an_empty_value_in_the_string_let_a_variable_or_a_service_fill_it() {
    let cluster = Cluster::builder()
        .hba("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        .start()
        .unwrap();
    cluster
        .psql("ALTER ROLE postgres PASSWORD 'from-the-file'")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pass = dir.path().join("pgpass");
    std::fs::write(&pass, "*:*:*:*:from-the-file\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pass, std::fs::Permissions::from_mode(0o600)).unwrap();
    let services = dir.path().join("services.conf");
    std::fs::write(&services, format!("[a]\npassfile={}\n", pass.display())).unwrap();
    let (pass, services) = (pass.display().to_string(), services.display().to_string());
    let base = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable",
        cluster.port()
    );
    for (what, extra, env) in [
        ("PGPASSFILE", "", [("PGPASSFILE", pass.as_str())]),
        (
            "the service",
            "service=a",
            [("PGSERVICEFILE", services.as_str())],
        ),
    ] {
        // Without the empty value both read the file and log in: the case can fail.
        let given = format!("{base} {extra}");
        let t = theirs(&given, &env).await;
        assert!(t.is_ok(), "libpq, {what}: {t:?}");
        assert_eq!(ours(&given, &env).await, t, "{what}");
        let empty = format!("{base} {extra} passfile=''");
        let t = theirs(&empty, &env).await;
        let o = ours(&empty, &env).await;
        assert!(t.is_err(), "libpq, passfile='' with {what}: {t:?}");
        assert!(
            o.is_err(),
            "passfile='' with {what}: libpq {t:?}, ours {o:?}"
        );
    }
}

/// Promise (docs/client.md, "Connecting"): PG* variables fill what the string leaves out, as
/// libpq reads them, or are refused by name; never ignored without a word. A variable's value
/// need not be UTF-8 (a Latin-1 locale's `PGUSER=josé`), and libpq sends its bytes as they
/// are.
///
/// Steps: a string that names no user, and `PGUSER` set to the Latin-1 bytes of `josé`, in a
/// child process. The connection must fail naming `PGUSER`.
///
/// Before the fix: the value was read as unset (`env::var(..).ok()`), and the connection
/// went on as the OS user (`root` here: "role \"root\" does not exist"; where the OS user has
/// a role, it connected as that role, someone other than the one asked for).
#[tokio::test]
async fn a_pg_variable_that_is_not_utf8_is_refused_by_name_not_ignored() {
    let cluster = Cluster::start().unwrap();
    let conninfo = format!(
        "host=127.0.0.1 port={} dbname=postgres sslmode=disable",
        cluster.port()
    );
    let line = ours_with_bytes(&conninfo, "PGUSER", b"jos\xe9").await;
    assert!(
        line.starts_with("err ") && line.contains("PGUSER") && line.contains("UTF-8"),
        "{line}"
    );
}

/// Promise (docs/client.md, "Connecting"): a PG* variable fills only what the string leaves
/// out, as libpq reads it. A variable whose parameter the string gives is never read, so its
/// bytes cannot matter.
///
/// Steps: a string that names its user, and `PGUSER` set to the Latin-1 bytes of `josé`, in a
/// child process; libpq (`psql`) connects as the string's user.
///
/// Before the fix: refused, "environment variable PGUSER is not valid UTF-8", though nothing
/// would have read it (every PG* variable was checked before any was read).
#[tokio::test]
async fn a_pg_variable_that_is_not_utf8_is_not_read_when_the_string_gives_its_parameter() {
    let cluster = Cluster::start().unwrap();
    let conninfo = format!(
        "host=127.0.0.1 port={} dbname=postgres user=postgres sslmode=disable",
        cluster.port()
    );
    let line = ours_with_bytes(&conninfo, "PGUSER", b"jos\xe9").await;
    assert!(
        line.starts_with("ok ") && line.contains("|postgres|"),
        "{line}"
    );
}

/// `child_session`'s result line for `conninfo` with only `name` set, to raw `bytes`.
async fn ours_with_bytes(conninfo: &str, name: &str, bytes: &[u8]) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut cmd = tokio::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "attack_libpq_env::child_session",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ]);
    scrub_env(cmd.as_std_mut(), &[]);
    cmd.env(name, std::ffi::OsStr::from_bytes(bytes));
    cmd.env("ATTACK_ENV_CHILD", conninfo);
    let out = cmd.output().await.expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.split_once("ATTACK_RESULT ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| panic!("child printed no result: {stdout}"))
}

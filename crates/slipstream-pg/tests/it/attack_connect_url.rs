//! Attacks on the URL form of connection strings: docs/client.md promises "URL or libpq
//! key=value" strings read as libpq reads them. libpq's URL reader (`conninfo_uri_parse` in
//! fe-connect.c) is strict about the parts a URL is made of (percent-encoding, query pairs,
//! host brackets), and knows one JDBC spelling (`ssl=true`).
//!
//! Method: the differential of `attack_connect.rs`: the same URL is given to `psql` (libpq 15)
//! and to slipstream-pg against a trust cluster, and where each lands (`port|user|database`) or
//! that each refuses is compared. Against a trust server a mangled password is never used, so a
//! string libpq refuses and slipstream reads differently shows up as a connection that works.
//!
//! Tests named `break_*` FAILED on the commit they were written against (30d9a0a) and pass
//! since the fix that followed each; `holds_*` passed as written.

use slipstream_pg::{Config, ErrorKind};
use slipstream_testkit::Cluster;

use super::attack_connect::{libpq, ours};
use super::tls::{pki, tls_cluster_with};

/// What `WHERE` of attack_connect.rs reads on the cluster at `port` as `postgres`.
fn landed(port: u16) -> String {
    format!("{port}|postgres|postgres")
}

/// Asserts that libpq and slipstream both refuse `url`, slipstream with a `Config` error that
/// contains `says` and none of `secret` (a password must never be echoed).
async fn both_refuse(url: &str, says: &str, secret: Option<&str>) {
    let theirs = libpq(url, &[]).await;
    assert!(theirs.is_err(), "libpq accepted {url}: {theirs:?}");
    let o = ours(url).await;
    assert!(
        o.is_err(),
        "slipstream accepted {url} (libpq: {theirs:?}): {o:?}"
    );
    let e = url.parse::<Config>().expect_err(url);
    assert_eq!(e.kind(), ErrorKind::Config, "{url}: {e}");
    let msg = e.to_string();
    assert!(msg.contains(says), "{url}: expected `{says}` in: {msg}");
    if let Some(secret) = secret {
        assert!(
            !msg.contains(secret),
            "{url}: the password is echoed: {msg}"
        );
    }
}

/// Promise: URLs as libpq reads them, percent-encoding included ("A URL query value that is
/// not valid UTF-8 is refused naming the parameter, never echoing the value").
/// libpq (`conninfo_uri_decode`): a `%` not followed by two hex digits is "invalid
/// percent-encoded token", and `%00` is a "forbidden value": the string is refused before any
/// connection is made, wherever the token is (userinfo, host, path, query).
/// Steps: each URL below against a trust cluster, with libpq and slipstream.
/// Before the fix: slipstream connected with every one of them: a bad token was kept as
/// written (the password `100%` or `p%zz`, the application_name `50%`) and `%00` became a
/// NUL byte (a password that a trust server never asks for; in other places an "invalid
/// startup parameter" only once a server was reached).
#[tokio::test]
async fn break_url_invalid_percent_encoding_is_read_literally() {
    let a = Cluster::start().unwrap();
    let p = a.port();
    for (url, secret) in [
        (
            format!("postgres://postgres:100%@127.0.0.1:{p}/postgres"),
            Some("100%"),
        ),
        (
            format!("postgres://postgres:p%zz@127.0.0.1:{p}/postgres"),
            Some("p%zz"),
        ),
        (
            format!("postgres://postgres:p%00w@127.0.0.1:{p}/postgres"),
            Some("p%00w"),
        ),
        (
            format!("postgres://postgres:s%4@127.0.0.1:{p}/postgres"),
            Some("s%4"),
        ),
        (
            format!("postgres://postgres@127.0.0.1:{p}/postgres?password=pw%g1"),
            Some("pw%g1"),
        ),
        (
            format!("postgres://postgres@127.0.0.1:{p}/postgres?application_name=50%"),
            None,
        ),
        (
            format!("postgres://postgres@127.0.0.1:{p}/postgres?application_name=a%00b"),
            None,
        ),
        // `+` is not a hex digit, though Rust's `from_str_radix` takes a leading sign.
        (
            format!("postgres://postgres@127.0.0.1:{p}/postgres?application_name=%+1"),
            None,
        ),
        (format!("postgres://postgres@127.0.0.1:{p}/post%"), None),
        (format!("postgres://post%gres@127.0.0.1:{p}/postgres"), None),
    ] {
        both_refuse(&url, "percent-encod", secret).await;
    }
}

/// Holds: well-formed percent-encoding still decodes everywhere, in either case of hex digit,
/// and a literal `%` written as `%25` is one.
#[tokio::test]
async fn holds_url_valid_percent_encoding_decodes_as_in_libpq() {
    let a = Cluster::start().unwrap();
    let p = a.port();
    for url in [
        format!("postgres://post%67res@127.0.0.1:{p}/post%67res"),
        format!("postgres://postgres:100%25@127.0.0.1:{p}/postgres?application_name=50%25"),
        format!("postgres://%70ostgres@%31%32%37.0.0.1:{p}/postgres"),
        format!(
            "postgres://postgres@127.0.0.1:{p}/postgres?us%65r=postgres&application_name=%e2%82%AC"
        ),
    ] {
        let theirs = libpq(&url, &[]).await;
        assert_eq!(theirs, Ok(landed(p)), "libpq {url}");
        assert_eq!(ours(&url).await, theirs, "{url}");
    }
}

/// Promise: URL query parameters as libpq reads them (`conninfo_uri_parse_params`): each pair
/// is `key=value` with exactly one `=`, and pairs are separated by one `&` (a single trailing
/// `&` is allowed). libpq refuses `?application_name=a=b` ("extra key/value separator"),
/// `?&user=...` and `...&&...` ("missing key/value separator").
/// Steps: each URL below against a trust cluster, with libpq and slipstream.
/// Before the fix: slipstream connected with all three (the application name `a=b`; empty
/// pairs skipped).
#[tokio::test]
async fn break_url_query_pairs_libpq_refuses_are_accepted() {
    let a = Cluster::start().unwrap();
    let p = a.port();
    let base = format!("postgres://127.0.0.1:{p}/postgres");
    for (url, says) in [
        (
            format!("{base}?user=postgres&application_name=a=b"),
            "second `=`",
        ),
        (
            format!("{base}?&user=postgres"),
            "empty URL query parameter",
        ),
        (
            format!("{base}?user=postgres&&application_name=x"),
            "empty URL query parameter",
        ),
        // The value of a second `=` may be a secret: the key is named, the value not shown.
        (
            format!("{base}?user=postgres&password=se=cret"),
            "second `=`",
        ),
    ] {
        both_refuse(&url, says, Some("cret")).await;
    }
    // Holds: a bare `?` and one trailing `&` are fine for both.
    for url in [
        format!("postgres://postgres@127.0.0.1:{p}/postgres?"),
        format!("{base}?user=postgres&"),
    ] {
        let theirs = libpq(&url, &[]).await;
        assert_eq!(theirs, Ok(landed(p)), "libpq {url}");
        assert_eq!(ours(&url).await, theirs, "{url}");
    }
}

/// Promise: URL hosts as libpq reads them. libpq: an IPv6 address goes in brackets, and `[]`
/// is refused ("IPv6 host address may not be empty in URI"); without brackets the host ends at
/// the *first* `:`, so `h:1:2` or `::1` leave a port that is not a number and are refused.
/// Steps: parse each string; the libpq verdict is checked live (a parse error, before any
/// connection is tried).
/// Before the fix: slipstream took `[]` as "no host" (the default host: the Unix socket
/// directory), and split an unbracketed host at its *last* `:`, so `127.0.0.1:<p>:<p>` was the
/// host `127.0.0.1:<p>` (a DNS failure later) and `::1` the host `:` on port 1.
#[tokio::test]
async fn break_url_hosts_libpq_refuses_are_read() {
    let a = Cluster::start().unwrap();
    let p = a.port();
    for (url, says) in [
        (
            format!("postgres://postgres@[]:{p}/postgres"),
            "empty IPv6 address",
        ),
        (
            format!("postgres://postgres@127.0.0.1,[]:{p}/postgres"),
            "empty IPv6 address",
        ),
        (
            format!("postgres://postgres@127.0.0.1:{p}:{p}/postgres"),
            "in brackets",
        ),
        (
            "postgres://postgres@::1/postgres".to_string(),
            "in brackets",
        ),
        (
            format!("postgres://postgres@fe80::1:{p}/postgres"),
            "in brackets",
        ),
    ] {
        let theirs = libpq(&url, &[]).await;
        let theirs = theirs.expect_err(&url);
        assert!(
            !theirs.contains("connection to server") && !theirs.contains("translate host"),
            "libpq refuses {url} only once connecting: {theirs}"
        );
        let e = url.parse::<Config>().expect_err(&url).to_string();
        assert!(e.contains(says), "{url}: expected `{says}` in: {e}");
        assert!(ours(&url).await.is_err(), "{url}");
    }
    // Holds: bracketed IPv6 hosts with and without a port parse as before.
    for url in [
        "postgres://[::1]:5433/db",
        "postgres://[::1]/db",
        "postgres://[::1],h:7/db",
    ] {
        url.parse::<Config>()
            .unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

/// Promise: libpq-compatible URLs. libpq reads the JDBC spelling `ssl=true` in a URL's query
/// as `sslmode=require` ("special keyword handling for improved JDBC compatibility"), so a URL
/// copied from a JDBC configuration asks for TLS. Any other `ssl` value is an invalid
/// parameter to both, and so is `ssl=true` in a key=value string.
/// Steps: a server with TLS that accepts only `hostssl` lines; `?ssl=true` with libpq and
/// slipstream; then the same against a server without TLS, where `require` must fail.
/// Before the fix: slipstream refused `ssl=true` as an unknown parameter.
#[tokio::test]
async fn break_url_jdbc_ssl_true_is_refused_where_libpq_requires_tls() {
    let pki = pki();
    let tls = tls_cluster_with(
        &pki,
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    );
    let p = tls.port();
    let url = format!("postgres://postgres@127.0.0.1:{p}/postgres?ssl=true");
    let theirs = libpq(&url, &[]).await;
    assert_eq!(theirs, Ok(landed(p)), "libpq {url}");
    assert_eq!(ours(&url).await, theirs, "{url}");
    let mut client = slipstream_pg::connect(&url).await.unwrap();
    assert!(client.is_tls(), "ssl=true must mean TLS");
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0).unwrap(), "the server sees TLS");

    // Without TLS on the server, `ssl=true` is `require`: no plain-text fall back.
    let plain = Cluster::start().unwrap();
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?ssl=true",
        plain.port()
    );
    let theirs = libpq(&url, &[]).await;
    assert!(theirs.is_err(), "libpq {url}: {theirs:?}");
    let o = ours(&url).await;
    assert!(o.is_err(), "slipstream fell back to plain text: {o:?}");

    // Holds: other spellings are refused by both.
    for bad in [
        format!("postgres://postgres@127.0.0.1:{p}/postgres?ssl=false"),
        format!("postgres://postgres@127.0.0.1:{p}/postgres?ssl=TRUE"),
        format!("host=127.0.0.1 port={p} user=postgres ssl=true"),
    ] {
        let theirs = libpq(&bad, &[]).await;
        assert!(theirs.is_err(), "libpq accepted {bad}");
        let o = ours(&bad).await;
        assert!(o.is_err(), "slipstream accepted {bad}: {o:?}");
    }
    // A later sslmode wins, as with any repeated parameter.
    let c: Config = "postgres://h/db?ssl=true&sslmode=disable".parse().unwrap();
    assert_eq!(c.get_ssl_mode(), slipstream_pg::SslMode::Disable);
}

/// Promise (brief and docs/client.md "TLS", STYLE: messages name what failed and what to do):
/// a certificate file that cannot be used is a clear error, never a silent fall back. Under
/// `verify-ca`/`verify-full` a missing, empty or non-file `sslrootcert` must fail the
/// connection; so must an `sslcert`/`sslkey` that cannot be read (libpq would send no
/// certificate for a missing `sslcert`; slipstream refuses: a certificate asked for and not
/// sent is a surprise later, at pg_hba's `cert` check).
/// Steps: a TLS cluster; for each bad file, connect and read the error.
/// Before the fix: the connection failed, but the error was `could not open /x/root.crt: No
/// such file or directory` or `/etc/passwd holds no PEM certificate`: it named neither the
/// parameter to fix (the path may be the default ~/.postgresql one the user never wrote) nor
/// what to do.
#[tokio::test]
async fn break_unusable_certificate_files_do_not_say_which_parameter_or_what_to_do() {
    let pki = pki();
    let tls = tls_cluster_with(
        &pki,
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let missing = dir.path().join("missing.pem");
    let (empty, ca, missing, d) = (
        empty.display(),
        ca.display(),
        missing.display(),
        dir.path().display(),
    );
    let base = format!(
        "host=localhost port={} user=postgres dbname=postgres",
        tls.port()
    );
    for (extra, param, says) in [
        (
            format!("sslmode=verify-ca sslrootcert={missing}"),
            "sslrootcert",
            "set sslrootcert",
        ),
        (
            format!("sslmode=verify-full sslrootcert={missing}"),
            "sslrootcert",
            "set sslrootcert",
        ),
        (
            format!("sslmode=verify-ca sslrootcert={empty}"),
            "sslrootcert",
            "set sslrootcert",
        ),
        (
            format!("sslmode=verify-ca sslrootcert={d}"),
            "sslrootcert",
            "set sslrootcert",
        ),
        (
            format!("sslmode=verify-full sslrootcert={ca} sslcert={missing} sslkey={missing}"),
            "sslcert",
            "set sslcert",
        ),
        (
            format!("sslmode=verify-full sslrootcert={ca} sslcert={ca} sslkey={missing}"),
            "sslkey",
            "set sslkey",
        ),
    ] {
        let kv = format!("{base} {extra}");
        let e = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            slipstream_pg::connect(&kv),
        )
        .await
        .unwrap_or_else(|_| panic!("{extra}: hung"))
        .err()
        .unwrap_or_else(|| panic!("{extra}: connected"));
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("the {param} file")) && msg.contains(says),
            "{extra}: the error should name `{param}` and say what to do: {msg}"
        );
    }
    // Holds: the good root certificate connects, over TLS.
    let client = slipstream_pg::connect(&format!("{base} sslmode=verify-full sslrootcert={ca}"))
        .await
        .unwrap();
    assert!(client.is_tls());
}

//! Attacks on bad input from the caller (helper h63): client.md, "Errors": bad input is a
//! clear error naming what failed and what to do, and leaves the connection in step.

use postgres_types::{ToSql, Type};
use slipstream_pg::{ErrorKind, Uncached};

/// Promise: bad input is an error that names what failed and what to do. The protocol counts
/// a statement's parameters in 16 bits; PostgreSQL and libpq take up to 65535.
///
/// Steps: 65535 values through SQL text (accepted, as by libpq), then 65536 through each way
/// a statement's parameter types are sent (cached SQL, `Uncached`, `query_typed`,
/// `prepare_typed`, a pipeline); each must be refused naming the count and the limit, and
/// the next call must get its own answer.
///
/// Before the fix: `cannot send this statement: value too large to transmit`, which names
/// neither the parameters nor the limit.
#[tokio::test]
async fn too_many_parameters_is_refused_naming_the_count_and_the_limit() {
    let (_cluster, mut c) = super::setup().await;
    let array = |n: usize| {
        let list: Vec<String> = (1..=n).map(|i| format!("${i}")).collect();
        format!("SELECT cardinality(ARRAY[{}]::int4[])", list.join(","))
    };
    let values: Vec<i32> = (0..65536).collect();
    let params: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as _).collect();
    let most = u16::MAX as usize;
    let n: i32 = c
        .query_one(&*array(most), &params[..most])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(n, 65535);

    let sql = array(most + 1);
    let typed: Vec<(&(dyn ToSql + Sync), Type)> = params.iter().map(|p| (*p, Type::INT4)).collect();
    let types = vec![Type::INT4; most + 1];
    let refusals = vec![
        ("cached", c.query(&*sql, &params).await.map(drop)),
        (
            "uncached",
            c.query(&Uncached(&sql), &params).await.map(drop),
        ),
        ("query_typed", c.query_typed(&sql, &typed).await.map(drop)),
        (
            "prepare_typed",
            c.prepare_typed(&sql, &types).await.map(drop),
        ),
        ("pipeline", {
            let mut p = c.pipeline();
            p.query(&*sql, &params).await.map(drop)
        }),
    ];
    for (how, r) in refusals {
        let e = r.expect_err(how);
        assert_eq!(e.kind(), ErrorKind::Usage, "{how}: {e}");
        let text = e.to_string();
        assert!(
            text.contains("65536 parameter values") && text.contains("65535"),
            "{how}: {text}"
        );
        let n: i32 = super::scalar(&mut c, "SELECT 7").await;
        assert_eq!(n, 7, "{how}: the next call gets its own answer");
    }
}

/// Promise (client.md, "Limits": "Error messages never contain the password"; "Connecting": a
/// URL is read as libpq reads it). libpq refuses each of these strings too; the refusal must
/// not carry the password, which the caller's logs would then hold.
///
/// - A URL scheme in capitals (`POSTGRES://`) is not a URL to libpq or to slipstream, so the
///   string is read as key=value and refused with `missing "=" after` the whole string.
/// - A password with an unencoded `/` ends the host list early, as in libpq: `u:` and the
///   password's first part are read as `host:port`, and refused as an invalid port. (A `?`
///   does not: libpq reads `u:zq9?xk7@h` as the password `zq9?xk7`, and so does slipstream
///   since h64's differential against `PQconninfoParse`; psql's refusal of it here was its
///   failing to reach the host `h`.)
///
/// Before the fix: ``missing `=` after `POSTGRES://u:zq9xk7@h/db` in connection string: ...``
/// and ``invalid port `zq9`: expected a number 1-65535``.
#[tokio::test]
async fn refused_urls_do_not_echo_their_password() {
    for (url, says) in [
        ("POSTGRES://u:zq9xk7@h/db", "lower case"),
        ("Postgresql://u:zq9xk7@h/db", "lower case"),
        ("postgres://u:zq9/xk7@h/db", "percent-encode"),
        ("postgres://u:zq9/xk7@h1,h2/db", "percent-encode"),
    ] {
        let theirs = super::attack_connect::libpq(url, &[]).await;
        assert!(theirs.is_err(), "libpq read {url}: {theirs:?}");
        let e = url
            .parse::<slipstream_pg::Config>()
            .expect_err("refused as by libpq");
        assert_eq!(e.kind(), ErrorKind::Config, "{e}");
        let text = e.to_string();
        assert!(
            !text.contains("zq9") && !text.contains("xk7"),
            "{url}: the error shows the password: {text}"
        );
        assert!(text.contains(says), "{url}: {text}");
        let shown = slipstream_pg::redact_password(url);
        assert!(
            !shown.contains("zq9") && !shown.contains("xk7"),
            "{url}: {shown}"
        );
    }
    let c: slipstream_pg::Config = "postgres://u:zq9?xk7@h/db".parse().unwrap();
    assert_eq!((c.get_user(), c.get_dbname()), (Some("u"), Some("db")));
    let shown = slipstream_pg::redact_password("postgres://u:zq9?xk7@h/db");
    assert_eq!(shown, "postgres://u:***@h/db");
    // A valid URL with an `@` after its hosts keeps it as written.
    let url = "postgres://u:zq9@h:5432/db?application_name=me@x";
    assert_eq!(
        slipstream_pg::redact_password(url),
        "postgres://u:***@h:5432/db?application_name=me@x"
    );
    let url = "postgres://h:5432/db?application_name=me@x";
    assert_eq!(slipstream_pg::redact_password(url), url);
    // A port that is wrong for its own sake is still named.
    let e = "postgres://u@h:54x2/db"
        .parse::<slipstream_pg::Config>()
        .unwrap_err();
    assert!(e.to_string().contains("54x2"), "{e}");
}

/// Promise: bad input is an error that names what failed and what to do. Keepalive and
/// `tcp_user_timeout` values the kernel refuses (it answers a bare EINVAL) are refused by
/// libpq naming the socket option; the error must name the parameter and its value, and say
/// which values work.
///
/// Before the fix: `could not set TCP keepalive options: Invalid argument (os error 22)` for
/// each, also for `tcp_user_timeout`, which is not a keepalive option.
#[tokio::test]
async fn keepalive_values_the_kernel_refuses_are_named() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let base = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable",
        cluster.port()
    );
    for (extra, named) in [
        ("keepalives_idle=0", "keepalives_idle=0"),
        ("keepalives_interval=40000", "keepalives_interval=40000"),
        (
            "keepalives_idle=60 keepalives_count=200",
            "keepalives_count=200",
        ),
    ] {
        let conninfo = format!("{base} {extra}");
        let theirs = super::attack_connect::libpq(&conninfo, &[]).await;
        assert!(theirs.is_err(), "libpq took {extra}: {theirs:?}");
        let e = slipstream_pg::connect(&conninfo)
            .await
            .expect_err("refused as by libpq");
        let text = e.to_string();
        assert!(
            text.contains(named) && text.contains("1-32767"),
            "{extra}: {text}"
        );
    }
    // A timeout past a C int is refused when read, as libpq's parse_int_param refuses it,
    // naming the parameter and the limit (the kernel takes any int; a negative one is 0).
    let conninfo = format!("{base} tcp_user_timeout=99999999999");
    let theirs = super::attack_connect::libpq(&conninfo, &[]).await;
    assert!(theirs.is_err(), "libpq took it: {theirs:?}");
    let e = slipstream_pg::connect(&conninfo)
        .await
        .expect_err("refused as by libpq");
    let text = e.to_string();
    assert!(
        text.contains("tcp_user_timeout") && text.contains("2147483647"),
        "{text}"
    );
}

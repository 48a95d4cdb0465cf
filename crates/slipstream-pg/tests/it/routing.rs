//! `target_session_attrs` and `load_balance_hosts` against the testkit's primary and a hot
//! standby streaming from it, and a standby promoted to primary.

use slipstream_pg::{Client, ErrorKind};
use slipstream_testkit::Cluster;

/// A conninfo listing the given servers in that order.
fn conninfo(ports: &[u16], extra: &str) -> String {
    let hosts = vec!["127.0.0.1"; ports.len()].join(",");
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    format!(
        "host={hosts} port={} user=postgres dbname=postgres sslmode=disable {extra}",
        ports.join(",")
    )
}

/// The port of the server a client landed on.
async fn port_of(client: &mut Client) -> u16 {
    super::scalar::<i32>(client, "SELECT inet_server_port()").await as u16
}

async fn lands_on(ports: &[u16], extra: &str) -> Result<u16, slipstream_pg::Error> {
    let mut client = slipstream_pg::connect(&conninfo(ports, extra)).await?;
    Ok(port_of(&mut client).await)
}

#[tokio::test]
async fn each_target_session_attrs_value_picks_the_right_server() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let (p, s) = (primary.port(), standby.port());

    for order in [[p, s], [s, p]] {
        for (attrs, expected) in [
            ("any", order[0]),
            ("read-write", p),
            ("read-only", s),
            ("primary", p),
            ("standby", s),
            ("prefer-standby", s),
        ] {
            let got = lands_on(&order, &format!("target_session_attrs={attrs}"))
                .await
                .unwrap_or_else(|e| panic!("{attrs} over {order:?}: {e}"));
            assert_eq!(got, expected, "{attrs} over {order:?}");
        }
    }

    // prefer-standby settles for the primary when no host is a standby.
    assert_eq!(
        lands_on(&[p], "target_session_attrs=prefer-standby")
            .await
            .unwrap(),
        p
    );

    // No host fits: the error names the reason per host and has its own kind.
    for (only, attrs, says) in [
        (p, "standby", "server is not in hot standby mode"),
        (p, "read-only", "session is not read-only"),
        (s, "read-write", "session is read-only"),
        (s, "primary", "server is in hot standby mode"),
    ] {
        let e = lands_on(&[only], &format!("target_session_attrs={attrs}"))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TargetSessionAttrs, "{attrs}: {e}");
        assert!(e.to_string().contains(says), "{attrs}: {e}");
        assert!(
            e.to_string().contains(&only.to_string()),
            "names the host: {e}"
        );
    }

    // read-only / read-write follow default_transaction_read_only too, not only recovery: a
    // primary session made read-only by its options is a read-only session.
    let ro_opts = "options='-c default_transaction_read_only=on'";
    assert_eq!(
        lands_on(&[p], &format!("target_session_attrs=read-only {ro_opts}"))
            .await
            .unwrap(),
        p
    );
    let e = lands_on(&[p], &format!("target_session_attrs=read-write {ro_opts}"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("session is read-only"), "{e}");
    // ...while primary/standby look at recovery only.
    assert_eq!(
        lands_on(&[s, p], &format!("target_session_attrs=primary {ro_opts}"))
            .await
            .unwrap(),
        p
    );

    // A host that is down is skipped on the way to one that fits.
    let dead = slipstream_testkit::free_port().unwrap();
    assert_eq!(
        lands_on(&[dead, s, p], "target_session_attrs=read-write")
            .await
            .unwrap(),
        p
    );
}

#[tokio::test]
async fn load_balance_hosts_random_spreads_and_disable_keeps_the_order() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let (p, s) = (primary.port(), standby.port());

    for _ in 0..10 {
        assert_eq!(
            lands_on(&[s, p], "load_balance_hosts=disable")
                .await
                .unwrap(),
            s
        );
    }
    // Random order: with two hosts each connection lands on either with probability 1/2, so 64
    // connections that all land on one host (p = 2^-63) mean the order is not shuffled.
    let mut seen = std::collections::HashSet::new();
    for _ in 0..64 {
        seen.insert(
            lands_on(&[s, p], "load_balance_hosts=random")
                .await
                .unwrap(),
        );
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(
        seen.len(),
        2,
        "random order never tried the second host first"
    );
    // Balancing does not override the routing requirement.
    for _ in 0..10 {
        assert_eq!(
            lands_on(
                &[s, p],
                "load_balance_hosts=random target_session_attrs=primary"
            )
            .await
            .unwrap(),
            p
        );
    }
}

#[tokio::test]
async fn a_promoted_standby_becomes_the_read_write_target() {
    let mut primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let (p, s) = (primary.port(), standby.port());
    let hosts = [p, s];
    assert_eq!(
        lands_on(&hosts, "target_session_attrs=read-write")
            .await
            .unwrap(),
        p
    );
    // An open session on the standby learns of the promotion through ParameterStatus.
    let mut watcher = slipstream_pg::connect(&conninfo(&[s], "")).await.unwrap();
    assert_eq!(watcher.parameter("in_hot_standby"), Some("on"));

    primary.stop().unwrap();
    // pg_promote() waits (up to 60 s by default) until the promotion is done.
    assert_eq!(standby.psql("SELECT pg_promote()").unwrap().trim(), "t");

    assert_eq!(
        lands_on(&hosts, "target_session_attrs=read-write")
            .await
            .unwrap(),
        s
    );
    assert_eq!(
        lands_on(&hosts, "target_session_attrs=primary")
            .await
            .unwrap(),
        s
    );
    let e = lands_on(&hosts, "target_session_attrs=standby")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TargetSessionAttrs, "{e}");
    // prefer-standby: no standby any more, so the second pass takes the new primary.
    assert_eq!(
        lands_on(&hosts, "target_session_attrs=prefer-standby")
            .await
            .unwrap(),
        s
    );
    watcher.batch_execute("SELECT 1").await.unwrap();
    assert_eq!(watcher.parameter("in_hot_standby"), Some("off"));
}

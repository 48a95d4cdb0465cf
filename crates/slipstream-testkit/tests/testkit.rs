//! The testkit against a real PostgreSQL.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use slipstream_testkit::{Cluster, DelayProxy, measure_overhead};

#[test]
fn cluster_starts_answers_and_is_removed_on_drop() {
    let cluster = Cluster::builder()
        .setting("work_mem", "7MB")
        .start()
        .unwrap();
    assert_eq!(cluster.psql("SHOW work_mem").unwrap(), "7MB");
    assert_eq!(cluster.psql("SELECT 1 + 1").unwrap(), "2");
    TcpStream::connect(("127.0.0.1", cluster.port())).expect("listens on TCP");
    assert!(
        cluster
            .socket_dir()
            .join(format!(".s.PGSQL.{}", cluster.port()))
            .exists(),
        "listens on a Unix socket"
    );
    let dir = cluster.data_dir().to_path_buf();
    drop(cluster);
    assert!(!dir.exists(), "data directory removed on drop");
}

#[test]
fn cluster_is_removed_when_a_test_panics() {
    let (tx, rx) = std::sync::mpsc::channel();
    let result = std::thread::spawn(move || {
        let cluster = Cluster::start().unwrap();
        tx.send(cluster.data_dir().to_path_buf()).unwrap();
        panic!("test failure while the cluster runs");
    })
    .join();
    assert!(result.is_err());
    let dir = rx.recv().unwrap();
    assert!(!dir.exists(), "unwinding removed {}", dir.display());
}

#[test]
fn restart_keeps_port_and_data() {
    let mut cluster = Cluster::start().unwrap();
    cluster
        .psql("CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)")
        .unwrap();
    let port = cluster.port();
    cluster.restart().unwrap();
    assert_eq!(cluster.port(), port);
    assert_eq!(cluster.psql("SELECT x FROM kept").unwrap(), "42");
}

#[test]
fn a_standby_streams_the_primarys_changes_and_is_read_only() {
    let primary = Cluster::start().unwrap();
    primary
        .psql("CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
        .unwrap();
    let standby = primary.start_standby().unwrap();
    assert_ne!(standby.port(), primary.port());
    assert_ne!(standby.data_dir(), primary.data_dir());
    assert_eq!(standby.psql("SELECT pg_is_in_recovery()").unwrap(), "t");
    assert_eq!(primary.psql("SELECT pg_is_in_recovery()").unwrap(), "f");
    assert_eq!(standby.psql("SELECT x FROM t").unwrap(), "1");
    // A later change arrives by streaming replication.
    primary.psql("INSERT INTO t VALUES (2)").unwrap();
    let start = std::time::Instant::now();
    while standby.psql("SELECT count(*) FROM t").unwrap() != "2" {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "no replication"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let err = standby.psql("INSERT INTO t VALUES (3)").unwrap_err();
    assert!(err.to_string().contains("read-only"), "{err}");
}

#[test]
fn a_bad_setting_fails_with_the_server_log() {
    let err = Cluster::builder()
        .setting("shared_buffers", "not-a-size")
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("shared_buffers"), "{err}");
}

/// An echo server for proxy tests.
fn echo() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = c.read(&mut buf) {
                    if c.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn proxy_delays_each_round_trip_without_serialising_a_burst() {
    let proxy = DelayProxy::start(echo(), Duration::from_millis(20)).unwrap();
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    s.set_nodelay(true).unwrap();
    let mut buf = [0u8; 1];
    let t = Instant::now();
    s.write_all(b"x").unwrap();
    s.read_exact(&mut buf).unwrap();
    let one = t.elapsed();
    assert!(
        one >= Duration::from_millis(20),
        "one round trip took {one:?}"
    );
    // Ten writes in a burst arrive about one RTT later, not ten RTTs.
    let t = Instant::now();
    for _ in 0..10 {
        s.write_all(b"y").unwrap();
        std::thread::sleep(Duration::from_millis(1)); // separate chunks on purpose
    }
    let mut got = [0u8; 10];
    s.read_exact(&mut got).unwrap();
    let burst = t.elapsed();
    assert_eq!(&got, b"yyyyyyyyyy", "order kept");
    assert!(
        burst < Duration::from_millis(20 * 5),
        "burst of 10 took {burst:?}: serialised"
    );
}

#[test]
fn proxy_cuts_and_refuses() {
    let proxy = DelayProxy::start(echo(), Duration::ZERO).unwrap();
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    s.write_all(b"a").unwrap();
    let mut buf = [0u8; 1];
    s.read_exact(&mut buf).unwrap();
    proxy.cut_all();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let r = s.read(&mut buf);
    assert!(matches!(r, Ok(0) | Err(_)), "a cut connection ends: {r:?}");
    proxy.set_refusing(true);
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let r = s.read(&mut buf);
    assert!(
        matches!(r, Ok(0) | Err(_)),
        "a refused connection ends: {r:?}"
    );
}

#[test]
fn proxy_stall_holds_data_until_released() {
    let proxy = DelayProxy::start(echo(), Duration::ZERO).unwrap();
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    proxy.set_stalled(true);
    s.write_all(b"held").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 4];
    assert!(
        s.read_exact(&mut buf).is_err(),
        "nothing passes while stalled"
    );
    proxy.set_stalled(false);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"held");
}

#[test]
fn proxy_overhead_is_measured() {
    let o = measure_overhead(Duration::from_micros(500), 200).unwrap();
    assert!(o.direct_us > 0.0 && o.proxied_us > o.direct_us, "{o:?}");
    assert!(
        o.proxied_us >= o.configured_us,
        "the configured delay is applied: {o:?}"
    );
}

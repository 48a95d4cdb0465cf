//! `Registry::pool` reads a connection string as `slipstream_pg::connect` does: the
//! environment and the connection service file fill what the string leaves unset. Alone in
//! its binary: it sets process environment variables.

use std::time::Duration;

use slipstream_pool::{PoolError, Registry, Role};
use slipstream_testkit::Cluster;

/// Promise (docs/pool.md, "Several servers": the registry takes a connection string, as
/// `slipstream_pg::connect` does): a string naming a connection service connects through that
/// service's entry, and one naming a service the file lacks is refused at once, naming it.
///
/// Steps: a running server; a service file (`PGSERVICEFILE`) whose `orders` entry holds its
/// host, port, user and database; `Registry::pool("service=orders")`, then a borrow and a
/// query; then `service=nosuch`.
///
/// Before the fix: the registry parsed the string without the environment, so the service
/// file was never read and every borrow failed ("call `Config::apply_env()`", which a
/// registry caller cannot do); `service=nosuch` was accepted and failed only at each borrow.
#[test]
fn a_registry_pool_reads_the_service_file_as_connect_does() {
    let cluster = Cluster::start().unwrap();
    let file =
        std::env::temp_dir().join(format!("slipstream-registry-{}.conf", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "[orders]\nhost=127.0.0.1\nport={}\nuser=postgres\ndbname=postgres\nsslmode=disable\n",
            cluster.port()
        ),
    )
    .unwrap();
    // SAFETY: this is the only test in this binary and no other thread has started yet (the
    // runtime below is built after this line), so nothing reads the environment concurrently.
    unsafe {
        std::env::set_var("PGSERVICEFILE", &file);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let registry = Registry::new();
        let pool = registry
            .pool("service=orders", |b| b.max_size(2))
            .expect("a pool for the service");
        let mut conn = tokio::time::timeout(Duration::from_secs(20), pool.get(Role::Any))
            .await
            .expect("the borrow hung")
            .expect("a connection through the service's entry");
        let row = conn
            .query_one("SELECT current_setting('port')", &[])
            .await
            .unwrap();
        let port: &str = row.get(0).unwrap();
        assert_eq!(port, cluster.port().to_string());
        drop(conn);
        let err = registry
            .pool("service=nosuch", |b| b)
            .expect_err("a service the file lacks");
        assert!(
            matches!(&err, PoolError::Config(m) if m.contains("nosuch")),
            "the refusal names the service: {err}"
        );
    });
    let _ = std::fs::remove_file(&file);
}

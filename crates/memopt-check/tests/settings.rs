//! Misconfigurations end in a clear error that says what to change, not in a crash or a
//! silently disabled store.

use slipstream_testkit::Cluster;

#[test]
fn a_pool_too_small_for_1024_rows_stops_the_server_with_the_size_to_set() {
    // 64 kB holds 256 rows of the default 256 bytes.
    let err = match memopt_check::cluster(&[("memopt.pool_size", "64kB")]) {
        Ok(_) => panic!("a server with a 64 kB memopt pool started"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("memopt.pool_size = 64 kB holds only 256 rows"),
        "{err}"
    );
    assert!(
        err.contains("Set memopt.pool_size to at least 256 kB"),
        "{err}"
    );
}

#[tokio::test]
async fn without_preloading_the_functions_say_how_to_load_memopt() {
    let cluster = Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE EXTENSION memopt; CREATE TABLE t (k int PRIMARY KEY, v text)")
        .await
        .unwrap();
    for call in [
        "SELECT memopt.enable_read('t')",
        "SELECT memopt.populate('t')",
        "SELECT * FROM memopt.stats",
    ] {
        let err = c.batch_execute(call).await.unwrap_err();
        let db = err.as_db_error().unwrap_or_else(|| panic!("{call}: {err}"));
        assert!(
            db.hint()
                .is_some_and(|h| h.contains("shared_preload_libraries")),
            "{call}: {db:?}"
        );
    }
    // Plans are unchanged: no store, no node.
    let rows = c
        .query("EXPLAIN SELECT v FROM t WHERE k = 1", &[])
        .await
        .unwrap();
    let plan: Vec<String> = rows.iter().map(|r| r.get(0).unwrap()).collect();
    assert!(!plan.iter().any(|l| l.contains("MemoptLookup")), "{plan:?}");
}

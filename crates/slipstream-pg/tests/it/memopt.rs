//! memopt's fast lookup through the protocol's FunctionCall (issue 22): `Client::memopt_get`,
//! `memopt_get_many` and their pipelined forms, against a cluster that preloads memopt (the
//! build `extension/memopt/test/run` installed, or `SLIPSTREAM_PG_BINDIR`'s).

use slipstream_pg::{
    Client, ErrorKind, PipelineMode, PipelineOptions, Row, SqlState, TransactionStatus,
};
use slipstream_testkit::Cluster;

use super::engine::bounded;

/// A cluster preloading memopt; table `m (id bigint PRIMARY KEY, name text, n int)` with ids
/// 1..=100 and `w (k text PRIMARY KEY, v int)`, both enabled; and a client.
pub(crate) async fn memopt_setup() -> (Cluster, Client) {
    let cluster = Cluster::builder()
        .setting("shared_preload_libraries", "memopt")
        .start()
        .expect("start a cluster preloading memopt");
    let mut c = slipstream_pg::connect(&cluster.url())
        .await
        .expect("connect");
    c.batch_execute(
        "CREATE EXTENSION memopt;
         CREATE TABLE m (id bigint PRIMARY KEY, name text, n int);
         INSERT INTO m SELECT g, 'name' || g, g * 10 FROM generate_series(1, 100) g;
         SELECT memopt.enable_read('m');
         CREATE TABLE w (k text PRIMARY KEY, v int);
         INSERT INTO w VALUES ('a', 1), ('b', 2);
         SELECT memopt.enable_read('w');",
    )
    .await
    .expect("create the tables");
    (cluster, c)
}

fn cells(row: &Row) -> (i64, String, i32) {
    (
        row.get("id").unwrap(),
        row.get("name").unwrap(),
        row.get("n").unwrap(),
    )
}

async fn hits(c: &mut Client) -> i64 {
    c.query_one(
        "SELECT hits FROM memopt.stats WHERE \"table\" = 'm'::regclass",
        &[],
    )
    .await
    .unwrap()
    .get(0)
    .unwrap()
}

#[tokio::test]
async fn a_lookup_returns_the_row_a_query_returns_and_hits_the_store_the_second_time() {
    let (_cluster, mut c) = memopt_setup().await;
    let m = c.memopt_table("m").await.unwrap();
    assert_eq!(
        m.columns().iter().map(|c| c.name()).collect::<Vec<_>>(),
        ["id", "name", "n"]
    );
    // The first lookup misses and fills the store from the index; the second is a hit.
    for expected_hits in [0, 1] {
        let before = hits(&mut c).await;
        let row = c.memopt_get(&m, &42i64).await.unwrap().expect("row 42");
        assert_eq!(hits(&mut c).await - before, expected_hits);
        let query = c
            .query_one("SELECT * FROM m WHERE id = 42", &[])
            .await
            .unwrap();
        assert_eq!(cells(&row), cells(&query));
        assert_eq!(row.columns()[1].type_(), query.columns()[1].type_());
    }
    // Other integer widths, an absent key, a NULL column.
    c.execute("UPDATE m SET name = NULL WHERE id = 7", &[])
        .await
        .unwrap();
    let row = c.memopt_get(&m, &7i32).await.unwrap().unwrap();
    assert_eq!(row.get::<_, Option<String>>("name").unwrap(), None);
    assert!(c.memopt_get(&m, &1000i16).await.unwrap().is_none());
    // Many keys: the rows found, in the keys' order.
    let rows = c.memopt_get_many(&m, &[3i64, 1000, 1, 3]).await.unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| r.get::<_, i64>(0).unwrap())
            .collect::<Vec<_>>(),
        [3, 1, 3]
    );
    assert!(c.memopt_get_many::<i64>(&m, &[]).await.unwrap().is_empty());
    // Text keys.
    let w = c.memopt_table("w").await.unwrap();
    let row = c.memopt_get(&w, "b").await.unwrap().unwrap();
    assert_eq!(row.get::<_, i32>("v").unwrap(), 2);
    let rows = c
        .memopt_get_many(&w, &["a".to_string(), "zz".to_string()])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    // An empty batch of text keys calls the text overload (the type says which).
    assert!(c.memopt_get_many::<&str>(&w, &[]).await.unwrap().is_empty());
}

#[tokio::test]
async fn own_writes_are_seen_and_rolled_back_rows_never_served() {
    let (_cluster, mut c) = memopt_setup().await;
    let m = c.memopt_table("m").await.unwrap();
    c.memopt_get(&m, &5i64).await.unwrap(); // fills the store
    c.batch_execute(
        "BEGIN; UPDATE m SET name = 'mine' WHERE id = 5; INSERT INTO m VALUES (500, 'new', 0)",
    )
    .await
    .unwrap();
    let row = c.memopt_get(&m, &5i64).await.unwrap().unwrap();
    assert_eq!(row.get::<_, &str>("name").unwrap(), "mine");
    assert!(c.memopt_get(&m, &500i64).await.unwrap().is_some());
    c.batch_execute("ROLLBACK").await.unwrap();
    let row = c.memopt_get(&m, &5i64).await.unwrap().unwrap();
    assert_eq!(row.get::<_, &str>("name").unwrap(), "name5");
    assert!(c.memopt_get(&m, &500i64).await.unwrap().is_none());
}

#[tokio::test]
async fn refusals_are_errors_and_the_connection_stays_usable() {
    let (_cluster, mut c) = memopt_setup().await;
    let m = c.memopt_table("m").await.unwrap();
    let e = c.memopt_get(&m, "text key").await.unwrap_err();
    assert!(e.to_string().contains("not a text or varchar key"), "{e}");
    c.batch_execute("CREATE TABLE plain (id bigint PRIMARY KEY); CREATE ROLE nobody")
        .await
        .unwrap();
    let plain = c.memopt_table("plain").await.unwrap();
    let e = c.memopt_get(&plain, &1i64).await.unwrap_err();
    assert!(
        e.to_string().contains("not enabled for memoptimized reads"),
        "{e}"
    );
    c.batch_execute("SET ROLE nobody").await.unwrap();
    let e = c.memopt_get(&m, &1i64).await.unwrap_err();
    assert!(e.to_string().contains("permission denied"), "{e}");
    c.batch_execute("RESET ROLE").await.unwrap();
    // The table changed under a resolved handle: refused by the server (memopt 1.1 checks
    // the handle's layout of the columns), not decoded wrongly.
    c.batch_execute("ALTER TABLE m ADD COLUMN extra int")
        .await
        .unwrap();
    let e = c.memopt_get(&m, &1i64).await.unwrap_err();
    assert_eq!(e.code(), Some(SqlState::FEATURE_NOT_SUPPORTED), "{e}");
    assert!(e.to_string().contains("resolve it again"), "{e}");
    let m = c.memopt_table("m").await.unwrap();
    assert_eq!(c.memopt_get(&m, &1i64).await.unwrap().unwrap().len(), 4);
    assert!(c.is_reusable());
    // Inside a transaction block an error fails it, as a statement's would.
    c.batch_execute("BEGIN").await.unwrap();
    c.memopt_get(&m, "x").await.unwrap_err();
    assert_eq!(c.transaction_status(), TransactionStatus::Failed);
    c.batch_execute("ROLLBACK").await.unwrap();
    // A handle of another connection is refused.
    let mut other = slipstream_pg::connect(&_cluster.url()).await.unwrap();
    let e = other.memopt_get(&m, &1i64).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage);
}

#[tokio::test]
async fn discard_all_forgets_the_function_oids() {
    let (_cluster, mut c) = memopt_setup().await;
    let m = c.memopt_table("m").await.unwrap();
    c.memopt_get(&m, &1i64).await.unwrap();
    // New OIDs for the functions. Inside a transaction block a stale OID cannot be retried
    // (the error fails the block): only forgetting them on DISCARD ALL makes this work.
    c.batch_execute(
        "DROP EXTENSION memopt CASCADE; CREATE EXTENSION memopt; SELECT memopt.enable_read('m')",
    )
    .await
    .unwrap();
    c.batch_execute("DISCARD ALL").await.unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    let row = c.memopt_get(&m, &1i64).await.unwrap().unwrap();
    assert_eq!(row.get::<_, i64>(0).unwrap(), 1);
    c.batch_execute("COMMIT").await.unwrap();
    // Outside a transaction block a stale OID is resolved again once.
    c.batch_execute(
        "DROP EXTENSION memopt CASCADE; CREATE EXTENSION memopt; SELECT memopt.enable_read('m')",
    )
    .await
    .unwrap();
    assert!(c.memopt_get(&m, &2i64).await.unwrap().is_some());
}

/// Promise (docs/memopt.md, Client notes): "a stale OID (the extension re-created) is resolved
/// again once outside a transaction block": a connection, a pool's too, is not left calling
/// functions that no longer exist.
///
/// Steps: C resolves `m` and looks key 1 up in a pipeline. Another session runs `DROP
/// EXTENSION memopt CASCADE; CREATE EXTENSION memopt; enable_read('m')`. C runs a pipeline
/// lookup (it may fail: the call is written before any reply could say the OID is stale),
/// then, outside any transaction block, a second pipeline, then resolves `m` again and runs a
/// third.
///
/// Before the fix: the first failed with 42883 ("function with OID ... does not exist") and
/// so did the second and the third: a pipeline kept the connection's stale OIDs, and
/// `Client::memopt_table` looks them up again only on memopt 1.0, so a pooled connection's
/// pipelined lookups failed for its life (only a lone `memopt_get` or `DISCARD ALL` mended it).
/// Key 1 of `m` looked up in a pipeline of its own.
async fn pipelined_lookup(
    c: &mut Client,
    m: &slipstream_pg::MemoptTable,
) -> Result<Vec<Row>, slipstream_pg::Error> {
    let mut p = c.pipeline();
    let op = p.memopt_get(m, &1i64).await?;
    let rows = p.process(&op).await?;
    for r in p.end().await {
        r?;
    }
    Ok(rows)
}

#[tokio::test]
async fn a_pipeline_forgets_the_function_oids_of_a_dropped_memopt() {
    let (cluster, mut c) = memopt_setup().await;
    let m = c.memopt_table("m").await.unwrap();
    assert_eq!(pipelined_lookup(&mut c, &m).await.unwrap().len(), 1);
    let mut other = slipstream_pg::connect(&cluster.url()).await.unwrap();
    other
        .batch_execute(
            "DROP EXTENSION memopt CASCADE; CREATE EXTENSION memopt; SELECT memopt.enable_read('m')",
        )
        .await
        .unwrap();
    if let Err(e) = pipelined_lookup(&mut c, &m).await {
        assert_eq!(e.code(), Some(SqlState::UNDEFINED_FUNCTION), "{e}");
    }
    assert_eq!(c.transaction_status(), TransactionStatus::Idle);
    let second = pipelined_lookup(&mut c, &m)
        .await
        .expect("the pipeline after the stale OID failed kept calling it");
    assert_eq!(cells(&second[0]).0, 1);
    let m = c.memopt_table("m").await.unwrap();
    let third = pipelined_lookup(&mut c, &m)
        .await
        .expect("a pipeline after resolving m again");
    assert_eq!(cells(&third[0]).0, 1);
}

#[tokio::test]
async fn pipelined_lookups_sit_between_other_operations_in_both_modes() {
    let (_cluster, mut c) = memopt_setup().await;
    let m = c.memopt_table("m").await.unwrap();
    // Continue on error: a failing statement between lookups affects only itself.
    let mut p = c.pipeline();
    let a = p.memopt_get(&m, &1i64).await.unwrap();
    let bad = p.execute("SELECT 1/0", &[]).await.unwrap();
    let b = p.memopt_get(&m, &2i64).await.unwrap();
    let q = p
        .query("SELECT name FROM m WHERE id = 3", &[])
        .await
        .unwrap();
    let many = p.memopt_get_many(&m, &[4i64, 5]).await.unwrap();
    let wrong = p.memopt_get(&m, "x").await.unwrap();
    let c2 = p.memopt_get(&m, &6i64).await.unwrap();
    assert_eq!(p.process(&b).await.unwrap()[0].get::<_, i64>(0).unwrap(), 2);
    assert_eq!(p.process(&a).await.unwrap()[0].get::<_, i64>(0).unwrap(), 1);
    assert!(p.process(&bad).await.is_err());
    assert_eq!(
        p.process(&q).await.unwrap()[0].get::<_, &str>(0).unwrap(),
        "name3"
    );
    assert_eq!(p.process(&many).await.unwrap().len(), 2);
    assert!(p.process(&wrong).await.is_err());
    assert_eq!(p.process(&c2).await.unwrap().len(), 1);
    for r in p.end().await {
        r.unwrap();
    }
    // Abort on error: a lookup is a sync point, so the failure before it skips the operation
    // between them but not the lookup; the statements after it run in a new group.
    let mut p = c.pipeline_with(PipelineOptions::new().mode(PipelineMode::AbortOnError));
    let fail = p.execute("SELECT 1/0", &[]).await.unwrap();
    let skipped = p.query("SELECT 1", &[]).await.unwrap();
    let look = p.memopt_get(&m, &8i64).await.unwrap();
    let after = p.query("SELECT 2", &[]).await.unwrap();
    // Written inside the open group, the call would be skipped with it and never answered.
    let results = bounded("the abort-mode block around a lookup", p.end()).await;
    assert_eq!(results.len(), 4);
    assert!(results[fail.id() as usize].is_err());
    assert_eq!(
        results[skipped.id() as usize].as_ref().unwrap_err().kind(),
        ErrorKind::Aborted
    );
    match &results[look.id() as usize] {
        Ok(slipstream_pg::Output::Rows(rows)) => assert_eq!(rows.len(), 1),
        other => panic!("lookup: {other:?}"),
    }
    assert!(results[after.id() as usize].is_ok());
    // Many lookups through a small window: the flow control counts them.
    let mut p = c.pipeline_with(PipelineOptions::new().max_in_flight(4));
    let mut ops = Vec::new();
    for id in 1..=100i64 {
        ops.push(p.memopt_get(&m, &id).await.unwrap());
    }
    for (i, op) in ops.iter().enumerate() {
        let rows = p.process(op).await.unwrap();
        assert_eq!(rows[0].get::<_, i64>(0).unwrap(), i as i64 + 1);
    }
    p.end().await;
    assert_eq!(c.transaction_status(), TransactionStatus::Idle);
    // The connection is in step afterwards.
    assert_eq!(
        c.query_one("SELECT 41 + 1", &[])
            .await
            .unwrap()
            .get::<_, i32>(0)
            .unwrap(),
        42
    );
}

//! The statement cache: round trips, LRU eviction with server-side Close, opt-out, stale
//! statements after DDL, DISCARD ALL.

use slipstream_pg::{Client, ErrorKind, SqlState, Uncached};
use slipstream_testkit::DelayProxy;

/// The names of the server-side prepared statements, oldest first (read without using the
/// cache, so reading changes nothing).
async fn prepared(c: &mut Client) -> Vec<String> {
    let rows = c
        .query(
            &Uncached("SELECT statement FROM pg_prepared_statements ORDER BY prepare_time"),
            &[],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| r.get::<_, String>(0).unwrap())
        .collect()
}

/// Round trips taken by `f`.
async fn trips<F: AsyncFnOnce(&mut Client)>(proxy: &DelayProxy, c: &mut Client, f: F) -> u64 {
    let before = proxy.round_trips();
    f(c).await;
    proxy.round_trips() - before
}

#[tokio::test]
async fn sql_with_parameters_takes_one_round_trip_cached_or_not() {
    let (_cluster, proxy, mut c) = super::behind_proxy("").await;
    let q = "SELECT $1::int4 + 1, $2::text";
    for _ in 0..2 {
        let n = trips(&proxy, &mut c, async |c| {
            let row = c.query_one(q, &[&41i32, &"x"]).await.unwrap();
            assert_eq!(row.get::<_, i32>(0).unwrap(), 42);
        })
        .await;
        assert_eq!(
            n, 1,
            "a miss prepares and runs in one request; a hit only binds"
        );
    }
    let s = c.statement_cache_stats();
    assert_eq!((s.misses, s.hits, s.size), (1, 1, 1));

    // Opting out: one round trip, nothing cached, nothing left on the server.
    let n = trips(&proxy, &mut c, async |c| {
        c.execute(&Uncached("SELECT $1::int8"), &[&7i64])
            .await
            .unwrap();
    })
    .await;
    assert_eq!(n, 1);
    assert_eq!(c.statement_cache_stats().misses, 1);
    assert_eq!(prepared(&mut c).await, vec![q.to_string()]);

    // With the cache off, SQL with parameters still takes one round trip.
    let (_cluster, proxy, mut off) = super::behind_proxy("statement_cache_size=0").await;
    let n = trips(&proxy, &mut off, async |c| {
        c.query_one(q, &[&1i32, &"y"]).await.unwrap();
    })
    .await;
    assert_eq!(n, 1);
    assert!(prepared(&mut off).await.is_empty());
}

#[tokio::test]
async fn a_type_the_client_cannot_name_costs_one_more_round_trip_and_is_still_cached() {
    let (_cluster, proxy, mut c) = super::behind_proxy("").await;
    // A value that accepts only `money`, which is not among the types tried.
    use super::Cents;
    let q = "SELECT $1::money > '1.00'::money";
    let n = trips(&proxy, &mut c, async |c| {
        let row = c.query_one(q, &[&Cents(250)]).await.unwrap();
        assert!(row.get::<_, bool>(0).unwrap());
    })
    .await;
    assert_eq!(n, 2, "Parse + Describe first, then Bind + Execute");
    let n = trips(&proxy, &mut c, async |c| {
        let row = c.query_one(q, &[&Cents(50)]).await.unwrap();
        assert!(!row.get::<_, bool>(0).unwrap());
    })
    .await;
    assert_eq!(n, 1, "then cached like any other");
    assert_eq!(c.statement_cache_stats().hits, 1);
}

#[tokio::test]
async fn the_least_recently_used_statement_is_evicted_and_closed_without_a_round_trip() {
    let (_cluster, proxy, mut c) = super::behind_proxy("statement_cache_size=2").await;
    let (a, b, d) = ("SELECT 1 AS a", "SELECT 2 AS b", "SELECT 3 AS d");
    for sql in [a, b, a] {
        c.query(sql, &[]).await.unwrap();
    }
    assert_eq!(prepared(&mut c).await, vec![a.to_string(), b.to_string()]);
    // d evicts b (a was used more recently); b's Close rides with the next request.
    c.query(d, &[]).await.unwrap();
    let n = trips(&proxy, &mut c, async |c| {
        c.query(a, &[]).await.unwrap();
    })
    .await;
    assert_eq!(n, 1);
    assert_eq!(prepared(&mut c).await, vec![a.to_string(), d.to_string()]);
    let s = c.statement_cache_stats();
    assert_eq!((s.misses, s.hits, s.evictions, s.size), (3, 2, 1, 2));
}

#[tokio::test]
async fn the_same_sql_with_other_parameter_types_is_another_statement() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TEMP TABLE t (id int4 PRIMARY KEY, day date)")
        .await
        .unwrap();
    c.execute("INSERT INTO t VALUES ($1, $2)", &[&1i32, &"2024-05-01"])
        .await
        .unwrap();
    // A string goes as text: the server reads it as the column's type, like a literal.
    let q = "SELECT id FROM t WHERE day = $1";
    assert_eq!(c.query(q, &[&"2024-05-01"]).await.unwrap().len(), 1);
    let day = chrono::NaiveDate::from_ymd_opt(2024, 5, 1).unwrap();
    assert_eq!(c.query(q, &[&day]).await.unwrap().len(), 1);
    // An i64 against an int4 key works (int4 = int8 is an indexable comparison).
    let q = "SELECT day FROM t WHERE id = $1";
    assert_eq!(c.query(q, &[&1i64]).await.unwrap().len(), 1);
    assert_eq!(c.query(q, &[&1i32]).await.unwrap().len(), 1);
    let s = c.statement_cache_stats();
    assert_eq!((s.misses, s.hits, s.size), (5, 0, 5));
}

#[tokio::test]
async fn ddl_outside_a_transaction_is_handled_transparently() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    reprepares_after_ddl(&mut c).await;
}

/// A cached `SELECT * FROM t WHERE id = $1` (table `t (id int PRIMARY KEY)` holding row 1),
/// read after an `ALTER TABLE` by `query_one` and after another by a row stream: the server
/// answers each with 0A000 and the client prepares it again, transparently. Leaves the query
/// cached with columns `id`, `note`, `more`.
pub(crate) async fn reprepares_after_ddl(c: &mut slipstream_pg::Client) {
    let q = "SELECT * FROM t WHERE id = $1";
    assert_eq!(c.query_one(q, &[&1i32]).await.unwrap().columns().len(), 1);
    c.batch_execute("ALTER TABLE t ADD COLUMN note text DEFAULT 'x'")
        .await
        .unwrap();
    // The server answers the cached statement with 0A000; the client prepares it again.
    let row = c.query_one(q, &[&1i32]).await.unwrap();
    assert_eq!(row.get::<_, &str>("note").unwrap(), "x");
    assert_eq!(c.statement_cache_stats().reprepares, 1);

    // The same through a row stream.
    c.batch_execute("ALTER TABLE t ADD COLUMN more int DEFAULT 7")
        .await
        .unwrap();
    let mut rows = c.query_stream(q, &[&1i32]).await.unwrap();
    let row = rows.next().await.unwrap().unwrap();
    assert_eq!(row.get::<_, i32>("more").unwrap(), 7);
    assert!(rows.next().await.unwrap().is_none());
    drop(rows);
    assert_eq!(c.statement_cache_stats().reprepares, 2);
}

/// The counters count lookups, as `CacheStats` says: a refused `Parse` is a miss that caches
/// nothing, and a re-prepare after DDL is a hit and then a miss, so `hits + misses` is the
/// executions plus the re-prepares.
#[tokio::test]
async fn the_counters_count_lookups() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    let before = c.statement_cache_stats();
    let q = "SELECT * FROM t WHERE id = $1";
    c.query_one(q, &[&1i32]).await.unwrap();
    c.batch_execute("ALTER TABLE t ADD COLUMN note text")
        .await
        .unwrap();
    c.query_one(q, &[&1i32]).await.unwrap();
    c.query("SELEKT 1", &[]).await.unwrap_err();
    let s = c.statement_cache_stats();
    let (hits, misses, reprepares) = (
        s.hits - before.hits,
        s.misses - before.misses,
        s.reprepares - before.reprepares,
    );
    assert_eq!((hits, misses, reprepares), (1, 3, 1), "{s:?}");
    assert_eq!(hits + misses, 3 + reprepares);
    assert_eq!(
        s.size,
        before.size + 1,
        "the refused statement is not cached"
    );
}

#[tokio::test]
async fn ddl_inside_a_transaction_is_a_clear_error() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    let q = "SELECT * FROM t WHERE id = $1";
    c.query_one(q, &[&1i32]).await.unwrap();
    let tx = c.transaction().await.unwrap();
    let mut tx = tx;
    tx.batch_execute("ALTER TABLE t ADD COLUMN note text")
        .await
        .unwrap();
    let e = tx.query_one(q, &[&1i32]).await.unwrap_err();
    assert_eq!(e.code(), Some(SqlState::FEATURE_NOT_SUPPORTED), "{e}");
    let text = e.to_string();
    assert!(text.contains("inside a transaction"), "{text}");
    assert!(text.contains("roll back"), "{text}");
    tx.rollback().await.unwrap();
    // After the rollback the statement is prepared afresh.
    assert_eq!(c.query_one(q, &[&1i32]).await.unwrap().columns().len(), 1);
}

#[tokio::test]
async fn discard_all_and_deallocate_invalidate_the_cache() {
    let (_cluster, mut c) = super::setup().await;
    let q = "SELECT $1::int4 * 2";
    c.query_one(q, &[&1i32]).await.unwrap();
    for reset in ["DISCARD ALL", "DEALLOCATE ALL"] {
        c.batch_execute(reset).await.unwrap();
        assert!(prepared(&mut c).await.is_empty());
        let row = c.query_one(q, &[&2i32]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0).unwrap(), 4, "after {reset}");
        assert_eq!(c.statement_cache_stats().size, 1);
    }
    // A cached statement deallocated by name behind the cache's back (26000) is prepared again.
    let name: String = c
        .query_one(&Uncached("SELECT name FROM pg_prepared_statements"), &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    c.batch_execute(&format!("DEALLOCATE \"{name}\""))
        .await
        .unwrap();
    let row = c.query_one(q, &[&3i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0).unwrap(), 6);
    assert_eq!(c.statement_cache_stats().reprepares, 1);
}

#[tokio::test]
async fn sql_with_parameters_can_be_pipelined_now() {
    let (_cluster, proxy, mut c) = super::behind_proxy("").await;
    let n = trips(&proxy, &mut c, async |c| {
        let mut p = c.pipeline_with(crate::continue_on_error());
        let ops: Vec<_> = {
            let mut ops = Vec::new();
            for i in 0..10i64 {
                ops.push(p.query("SELECT $1 + 1", &[&i]).await.unwrap());
            }
            ops
        };
        for (i, op) in ops.iter().enumerate() {
            let rows = p.process(op).await.unwrap();
            assert_eq!(rows[0].get::<_, i64>(0).unwrap(), i as i64 + 1);
        }
        p.end().await;
    })
    .await;
    assert!(n <= 2, "{n} round trips for a pipeline of 10");
}

#[tokio::test]
async fn a_wrong_parameter_count_is_an_error_and_caches_nothing_broken() {
    let (_cluster, mut c) = super::setup().await;
    let q = "SELECT $1::int4 + $2::int4";
    let e = c.query(q, &[&1i32]).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Db, "{e}");
    assert_eq!(c.statement_cache_stats().size, 0);
    let row = c.query_one(q, &[&1i32, &2i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0).unwrap(), 3);
}

/// A statement without parameters sends the same `Bind` + `Execute` every time, encoded once
/// and kept with the statement: the kept bytes must name this statement, not the one it
/// replaced after `DEALLOCATE ALL` or DDL, and `query`, `execute` and a row stream of two rows
/// per `Execute` must each get what they ask for.
#[tokio::test]
async fn a_statement_without_parameters_runs_the_same_every_way_and_after_reprepares() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int); INSERT INTO t SELECT generate_series(1, 5)")
        .await
        .unwrap();
    let q = "SELECT * FROM t ORDER BY id";
    let ids = |rows: &[slipstream_pg::Row]| -> Vec<i32> {
        rows.iter().map(|r| r.get(0).unwrap()).collect()
    };
    for round in 0..3 {
        assert_eq!(
            ids(&c.query(q, &[]).await.unwrap()),
            [1, 2, 3, 4, 5],
            "{round}"
        );
        assert_eq!(c.execute(q, &[]).await.unwrap(), 5, "{round}");
        // Two rows per Execute: the portal is read in three parts, all five rows arrive once.
        let mut rows = c
            .query_stream_with(q, &[], slipstream_pg::FetchSize::Rows(2))
            .await
            .unwrap();
        let mut streamed = Vec::new();
        while let Some(row) = rows.next().await.unwrap() {
            streamed.push(row.get::<_, i32>(0).unwrap());
        }
        drop(rows);
        assert_eq!(streamed, [1, 2, 3, 4, 5], "{round}");
        match round {
            // The server drops the statement; the cache prepares another, under another name.
            0 => c.batch_execute("DEALLOCATE ALL").await.unwrap(),
            // The statement goes stale (0A000) and is prepared again.
            1 => c
                .batch_execute("ALTER TABLE t ADD COLUMN note text")
                .await
                .unwrap(),
            _ => {}
        }
    }
    assert_eq!(c.statement_cache_stats().reprepares, 1);
    // An explicitly prepared statement without parameters, run twice.
    let stmt = c.prepare("SELECT count(*) FROM t").await.unwrap();
    for _ in 0..2 {
        let n: i64 = c.query_one(&stmt, &[]).await.unwrap().get(0).unwrap();
        assert_eq!(n, 5);
    }
}

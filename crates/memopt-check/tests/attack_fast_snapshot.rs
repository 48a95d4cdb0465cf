//! Attacks on the snapshot of the fast lookup by FunctionCall (`Client::memopt_get`,
//! `memopt_get_many`). The promise (docs/memopt.md, "What it guarantees"): "exactly the row
//! `SELECT * FROM t WHERE pk = key` returns in the same transaction". A lone `SELECT` under
//! READ COMMITTED locks the table while it is parsed and only then takes its snapshot, so a
//! table rewrite (TRUNCATE and reload, `ALTER TABLE ... TYPE`) that commits while it waits for
//! the lock is seen in full. PostgreSQL's FunctionCall takes the snapshot before it calls the
//! function, which then locks the table.

use std::time::Duration;

use slipstream_pg::Client;

async fn connect(url: &str) -> Client {
    slipstream_pg::connect(url).await.unwrap()
}

/// Waits (up to 30 s) until `n` sessions wait for a lock on relation `t`.
async fn wait_for_lock_waiters(c: &mut Client, n: i64) {
    for _ in 0..300 {
        let waiting = memopt_check::scalar::<i64>(
            c,
            "SELECT count(*) FROM pg_locks WHERE relation = 't'::regclass AND NOT granted",
        )
        .await
        .unwrap();
        if waiting >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{n} sessions did not queue for the lock on t within 30 s");
}

/// A session on a cluster where `t (k bigint primary key, a text, b int)` holds keys 1..3,
/// enabled for memopt (and warmed, if `warm`).
async fn table_t(url: &str, warm: bool) -> Client {
    let mut d = connect(url).await;
    d.batch_execute(
        "CREATE EXTENSION memopt;
         CREATE TABLE t (k bigint PRIMARY KEY, a text, b int);
         INSERT INTO t SELECT g, 'a' || g, g FROM generate_series(1, 3) g;
         SELECT memopt.enable_read('t');",
    )
    .await
    .unwrap();
    if warm {
        d.batch_execute("SELECT memopt.get('t', g) FROM generate_series(1, 3) g")
            .await
            .unwrap();
    }
    d
}

/// Rewrites `t` (TRUNCATE and reload) in a transaction left open, which holds the table's
/// AccessExclusiveLock until it commits.
const TRUNCATE_AND_RELOAD: &str = "BEGIN; CREATE TEMP TABLE keep ON COMMIT DROP AS SELECT * FROM t; \
     TRUNCATE t; INSERT INTO t SELECT * FROM keep";

/// `(k, a)` of a fast lookup's row.
fn ka(row: &slipstream_pg::Row) -> (i64, String) {
    (row.get(0).unwrap(), row.get(1).unwrap())
}

/// Steps: `t (k bigint primary key, a text, b int)` holds keys 1..3, enabled and warmed. For
/// each rewrite, session D runs it in an open transaction (holding the table's
/// AccessExclusiveLock); session S sends `SELECT k, a FROM t WHERE k = 2`, session F
/// `memopt_get(2)` and session M `memopt_get_many([1, 2, 3])`; all three queue for the lock;
/// D commits. The SELECT returns key 2's row; so must the fast lookups.
///
/// Before the fix: F and M read under the snapshot FunctionCall took before they queued, which
/// does not see the rewritten table's rows (a rewrite writes them under its own xid): F
/// returned no row and M an empty list, where the SELECT returned the row.
#[tokio::test]
async fn a_fast_lookup_that_waited_for_a_rewrite_sees_it_as_select_does() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let url = cluster.url();
    let mut d = table_t(&url, true).await;
    let rewrites = [
        TRUNCATE_AND_RELOAD,
        "BEGIN; ALTER TABLE t ALTER COLUMN b TYPE bigint",
        "BEGIN; ALTER TABLE t ALTER COLUMN b TYPE int",
    ];
    for rewrite in rewrites {
        let mut f = connect(&url).await;
        let mut m = connect(&url).await;
        let mut s = connect(&url).await;
        let ft = f.memopt_table("t").await.unwrap();
        let mt = m.memopt_table("t").await.unwrap();
        d.batch_execute(rewrite).await.unwrap();
        let select = tokio::spawn(async move {
            s.query_opt("SELECT k, a FROM t WHERE k = 2", &[])
                .await
                .map(|r| r.map(|r| ka(&r)))
        });
        let one =
            tokio::spawn(async move { f.memopt_get(&ft, &2i64).await.map(|r| r.map(|r| ka(&r))) });
        let many = tokio::spawn(async move {
            m.memopt_get_many(&mt, &[1i64, 2, 3])
                .await
                .map(|rows| rows.iter().map(ka).collect::<Vec<_>>())
        });
        wait_for_lock_waiters(&mut d, 3).await;
        d.batch_execute("COMMIT").await.unwrap();
        let guard = Duration::from_secs(30);
        let select = tokio::time::timeout(guard, select).await.unwrap().unwrap();
        let one = tokio::time::timeout(guard, one).await.unwrap().unwrap();
        let many = tokio::time::timeout(guard, many).await.unwrap();
        let row2 = (2, "a2".to_string());
        assert_eq!(select.unwrap(), Some(row2.clone()), "{rewrite}: SELECT");
        // A column type change makes the resolved table stale: a usage error, not a wrong row.
        match one {
            Ok(row) => assert_eq!(row, Some(row2.clone()), "{rewrite}: memopt_get"),
            Err(e) => assert!(e.to_string().contains("resolve it again"), "{rewrite}: {e}"),
        }
        match many.unwrap() {
            Ok(rows) => assert_eq!(
                rows,
                (1..=3).map(|k| (k, format!("a{k}"))).collect::<Vec<_>>(),
                "{rewrite}: memopt_get_many"
            ),
            Err(e) => assert!(e.to_string().contains("resolve it again"), "{rewrite}: {e}"),
        }
    }
}

/// Documented (docs/memopt.md, "What it guarantees"): called from SQL, `memopt.get` reads
/// under its statement's snapshot, like any function that reads a table, and a statement
/// that names the table only in a `regclass` literal does not lock it before that snapshot
/// is taken. Steps: D truncates and reloads `t` in an open transaction; S runs
/// `SELECT memopt.get('t', 2)` alone and `SELECT memopt.get('t', 2) FROM t WHERE k = 2`
/// (which locks `t` while it is parsed), both queue for the lock; D commits. The first sees
/// the table as the rewrite left it to earlier snapshots, empty; the second, the row, as the
/// normal plan does.
#[tokio::test]
async fn a_sql_call_reads_under_its_statements_snapshot_as_documented() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let url = cluster.url();
    let mut d = table_t(&url, false).await;
    d.batch_execute(TRUNCATE_AND_RELOAD).await.unwrap();
    let mut lone = connect(&url).await;
    let mut named = connect(&url).await;
    let lone = tokio::spawn(async move {
        let v: Option<String> = memopt_check::scalar(&mut lone, "SELECT memopt.get('t', 2)::text")
            .await
            .unwrap();
        v
    });
    let named = tokio::spawn(async move {
        let v: Option<String> = memopt_check::scalar(
            &mut named,
            "SELECT memopt.get('t', 2)::text FROM t WHERE k = 2",
        )
        .await
        .unwrap();
        v
    });
    wait_for_lock_waiters(&mut d, 2).await;
    d.batch_execute("COMMIT").await.unwrap();
    let guard = Duration::from_secs(30);
    let lone = tokio::time::timeout(guard, lone).await.unwrap().unwrap();
    let named = tokio::time::timeout(guard, named).await.unwrap().unwrap();
    assert_eq!(lone, None);
    assert_eq!(named.as_deref(), Some("(2,a2,2)"));
}

/// Holds. Under REPEATABLE READ the transaction's snapshot stands, for a SELECT as for a
/// FunctionCall: a SELECT that opens the transaction takes it before parse analysis locks the
/// table. With `default_transaction_isolation = 'repeatable read'`, a SELECT and a
/// `memopt_get` that waited behind a TRUNCATE and reload both find no row; the next of each,
/// a transaction of its own, finds it.
#[tokio::test]
async fn a_repeatable_read_call_that_waited_for_a_rewrite_agrees_with_select_holds() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let url = cluster.url();
    let mut d = table_t(&url, false).await;
    let rr = "SET default_transaction_isolation = 'repeatable read'";
    let mut f = connect(&url).await;
    f.batch_execute(rr).await.unwrap();
    let mut s = connect(&url).await;
    s.batch_execute(rr).await.unwrap();
    let table = f.memopt_table("t").await.unwrap();
    d.batch_execute(TRUNCATE_AND_RELOAD).await.unwrap();
    let fast = tokio::spawn(async move {
        let first = f.memopt_get(&table, &2i64).await.unwrap().map(|r| ka(&r));
        let second = f.memopt_get(&table, &2i64).await.unwrap().map(|r| ka(&r));
        (first, second)
    });
    let select = tokio::spawn(async move {
        let sql = "SELECT k, a FROM t WHERE k = 2";
        let first = s.query_opt(sql, &[]).await.unwrap().map(|r| ka(&r));
        let second = s.query_opt(sql, &[]).await.unwrap().map(|r| ka(&r));
        (first, second)
    });
    wait_for_lock_waiters(&mut d, 2).await;
    d.batch_execute("COMMIT").await.unwrap();
    let guard = Duration::from_secs(30);
    let fast = tokio::time::timeout(guard, fast).await.unwrap().unwrap();
    let select = tokio::time::timeout(guard, select).await.unwrap().unwrap();
    assert_eq!(fast, select);
    assert_eq!(select, (None, Some((2, "a2".to_string()))));
}

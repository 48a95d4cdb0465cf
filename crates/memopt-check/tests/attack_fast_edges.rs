//! Attacks on the edges of memopt's fast lookup (`memopt.get` / `memopt.get_many`, reached by
//! `Client::memopt_get`) and of the store: a table dropped under a waiting lookup, a schema
//! the caller may not use, NULL and oddly shaped key arrays, a hot standby and its promotion.
//! The promise (docs/memopt.md): "exactly the row `SELECT * FROM t WHERE pk = key` returns in
//! the same transaction", every refusal "an error naming the table and what to do".

use std::time::Duration;

use slipstream_pg::{Client, SqlState};

async fn connect(url: &str) -> Client {
    slipstream_pg::connect(url).await.unwrap()
}

/// 42501, which `SqlState` has no name for.
fn insufficient_privilege() -> SqlState {
    SqlState::from_code("42501")
}

/// Waits (up to 30 s) until some session waits for a lock on the relation with OID `oid`.
async fn wait_for_lock_waiter(c: &mut Client, oid: u32) {
    for _ in 0..300 {
        let waiting = memopt_check::scalar::<i64>(
            c,
            &format!("SELECT count(*) FROM pg_locks WHERE relation = {oid} AND NOT granted"),
        )
        .await
        .unwrap();
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no session queued for the lock on relation {oid} within 30 s");
}

/// Promise: a refusal is "an error naming the table and what to do"; a table that does not
/// exist is `relation with OID % does not exist` (42P01), as the regress suite shows for an
/// OID that never existed.
///
/// Steps: session B resolves `t` for fast lookups; session A drops `t` in an open transaction
/// (holding its AccessExclusiveLock); B's `memopt_get` queues for the table's lock; A commits.
///
/// Before the fix: B had checked the table's kind and privileges while the DROP was not yet
/// committed, then `table_open` found the relation gone once the lock was granted and raised
/// PostgreSQL's internal `could not open relation with OID %u` (XX000), an error that reads
/// as a server bug and names neither memopt nor the remedy.
#[tokio::test]
async fn a_table_dropped_while_a_lookup_waits_for_its_lock_is_a_clear_error() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let url = cluster.url();
    let mut a = connect(&url).await;
    memopt_check::table(&mut a, "t", 10).await.unwrap();
    let mut b = connect(&url).await;
    let table = b.memopt_table("t").await.unwrap();
    assert!(b.memopt_get(&table, &1i64).await.unwrap().is_some());

    let oid = table.oid();
    a.batch_execute("BEGIN; DROP TABLE t").await.unwrap();
    let lookup = tokio::spawn(async move { b.memopt_get(&table, &1i64).await });
    let mut watcher = connect(&url).await;
    wait_for_lock_waiter(&mut watcher, oid).await;
    a.batch_execute("COMMIT").await.unwrap();

    let err = tokio::time::timeout(Duration::from_secs(30), lookup)
        .await
        .expect("the lookup did not end within 30 s of the DROP's commit")
        .unwrap()
        .expect_err("a lookup of a dropped table returned a row");
    let db = err.as_db_error().expect("a server error");
    assert_eq!(
        db.code(),
        SqlState::UNDEFINED_TABLE,
        "wrong SQLSTATE for a dropped table: {db:?}"
    );
    assert!(
        db.message().starts_with("memopt.get: relation with OID"),
        "the error does not say which call failed: {}",
        db.message()
    );
    assert!(
        db.hint().is_some_and(|h| h.contains("dropped")),
        "the error does not say what to do: {db:?}"
    );
}

/// Promise: "exactly the row `SELECT * FROM t WHERE pk = key` returns"; "what SQL would check,
/// the function checks in C". SQL needs USAGE on the table's schema to reach the table at all.
///
/// Steps: table `s.t` in schema `s`; role `r` gets SELECT on `s.t` but no USAGE on `s`. Under
/// `SET ROLE r`, `SELECT * FROM s.t WHERE k = 1` is refused (42501); then `memopt.get` is
/// called by OID (`Client::memopt_get` with the table resolved before the `SET ROLE`, and from
/// SQL with the OID as a number).
///
/// Before the fix: both lookups returned the row: the fast path checked only the table's
/// privileges, so a role the schema shuts out read every row by key.
#[tokio::test]
async fn a_table_in_a_schema_the_caller_cannot_use_is_refused_as_sql_refuses_it() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let mut c = connect(&cluster.url()).await;
    c.batch_execute(
        "CREATE EXTENSION memopt;
         CREATE SCHEMA s;
         CREATE TABLE s.t (k int PRIMARY KEY, v text);
         INSERT INTO s.t VALUES (1, 'secret');
         SELECT memopt.enable_read('s.t');
         CREATE ROLE r;
         GRANT SELECT ON s.t TO r;",
    )
    .await
    .unwrap();
    let table = c.memopt_table("s.t").await.unwrap();
    assert!(c.memopt_get(&table, &1i64).await.unwrap().is_some());

    c.batch_execute("SET ROLE r").await.unwrap();
    let sql = c
        .query_opt("SELECT v FROM s.t WHERE k = 1", &[])
        .await
        .expect_err("SQL reached a table in a schema without USAGE");
    assert_eq!(sql.code(), Some(insufficient_privilege()));

    let fast = c.memopt_get(&table, &1i64).await;
    let err = fast.expect_err("memopt_get read a row SQL refuses to read");
    let db = err.as_db_error().expect("a server error");
    assert_eq!(db.code(), insufficient_privilege(), "{db:?}");
    assert!(
        db.message().contains("schema s"),
        "the refusal does not name the schema: {}",
        db.message()
    );
    let by_oid = c
        .query_one(
            &format!("SELECT memopt.get_many({}, '{{1}}'::bigint[])", table.oid()),
            &[],
        )
        .await;
    assert_eq!(
        by_oid
            .expect_err("get_many read a row SQL refuses to read")
            .code(),
        Some(insufficient_privilege())
    );

    // USAGE granted: the lookup is served, as SQL is.
    c.batch_execute("RESET ROLE; GRANT USAGE ON SCHEMA s TO r; SET ROLE r")
        .await
        .unwrap();
    let row = c.memopt_get(&table, &1i64).await.unwrap().unwrap();
    assert_eq!(row.get::<_, &str>("v").unwrap(), "secret");
}

/// The per-table counters of `t`: (lookups, hits, misses, misses_uncacheable).
async fn counters(c: &mut Client) -> (i64, i64, i64, i64) {
    let r = c
        .query_one(
            "SELECT lookups, hits, misses, misses_uncacheable FROM memopt.stats
              WHERE \"table\" = 't'::regclass",
            &[],
        )
        .await
        .unwrap();
    (
        r.get(0).unwrap(),
        r.get(1).unwrap(),
        r.get(2).unwrap(),
        r.get(3).unwrap(),
    )
}

/// Promise: `memopt.get_many` answers "one element per key, NULL for a miss", its lookups are
/// "counted in `memopt.stats` with the scan's", and `misses_uncacheable` counts "a NULL key"
/// (lookup.h: "a NULL key is MISS_UNCACHEABLE", the rule the scan follows).
///
/// Steps: `get_many('t', '{1,NULL,2}')` on a warm store, then the counters' change is read.
///
/// Before the fix: the NULL element was answered (a NULL row) but not counted at all: three
/// keys looked up, two lookups in `memopt.stats`, and `misses_uncacheable` unchanged.
#[tokio::test]
async fn a_null_key_in_get_many_is_counted_as_an_uncacheable_lookup() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let mut c = connect(&cluster.url()).await;
    memopt_check::table(&mut c, "t", 10).await.unwrap();
    c.batch_execute("SELECT memopt.get_many('t', '{1,2}'::bigint[])")
        .await
        .unwrap();

    let before = counters(&mut c).await;
    let n: i64 = memopt_check::scalar::<i64>(
        &mut c,
        "SELECT cardinality(memopt.get_many('t', '{1,NULL,2}'::bigint[]))::bigint",
    )
    .await
    .unwrap();
    assert_eq!(n, 3, "one element per key");
    let after = counters(&mut c).await;
    let delta = (
        after.0 - before.0,
        after.1 - before.1,
        after.2 - before.2,
        after.3 - before.3,
    );
    assert_eq!(
        delta,
        (3, 2, 1, 1),
        "(lookups, hits, misses, misses_uncacheable) for keys 1, NULL, 2"
    );
}

/// Holds: `get_many` takes any one-dimensional array whatever its lower bound and answers in
/// the keys' order (element i of the answer is key i's row, a duplicate gets its row each
/// time); a two-dimensional array is refused with an error that says so.
#[tokio::test]
async fn get_many_answers_in_key_order_whatever_the_lower_bound_holds() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let mut c = connect(&cluster.url()).await;
    memopt_check::table(&mut c, "t", 10).await.unwrap();
    for _ in 0..2 {
        // The first pass misses and fills, the second hits.
        let r = c
            .query_one(
                "SELECT array_lower(a, 1), array_to_string(ARRAY(
                        SELECT coalesce(e.v, '-') FROM unnest(a::text::t[]) e), ',')
                   FROM (SELECT memopt.get_many('t', '[-2:2]={3,11,3,NULL,1}'::bigint[]) a) s",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(r.get::<_, i32>(0).unwrap(), 1);
        assert_eq!(r.get::<_, &str>(1).unwrap(), "v3,-,v3,-,v1");
    }
    let err = c
        .query_one(
            "SELECT memopt.get_many('t', '{{1,2},{3,4}}'::bigint[])",
            &[],
        )
        .await
        .expect_err("a two-dimensional array of keys was taken");
    let db = err.as_db_error().unwrap();
    assert!(db.message().contains("one-dimensional"), "{}", db.message());
}

/// Waits (up to 30 s) until `standby` has replayed everything `primary` has written so far.
async fn wait_for_replay(primary: &mut Client, standby: &mut Client) {
    let lsn: String = memopt_check::scalar(primary, "SELECT pg_current_wal_insert_lsn()::text")
        .await
        .unwrap();
    for _ in 0..300 {
        let done: bool = standby
            .query_one(
                "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                &[&lsn],
            )
            .await
            .unwrap()
            .get(0)
            .unwrap();
        if done {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the standby did not replay up to {lsn} within 30 s");
}

/// `v` of every key 1..=rows, read on `c` through the scan and `memopt.get` (one statement per
/// key, sharing its snapshot) and through the normal plan (`memopt.enabled = off`); panics at
/// the first key where they differ. Returns the normal plan's values. The caller's writes are
/// all committed before, so the three see the same rows.
async fn all_three_agree(c: &mut Client, rows: i32, when: &str) -> Vec<Option<String>> {
    let plain: Vec<Option<String>> = {
        c.batch_execute("SET memopt.enabled = off").await.unwrap();
        let r = c
            .query(
                "SELECT (SELECT v FROM t WHERE t.k = g) FROM generate_series(1, $1) g ORDER BY g",
                &[&rows],
            )
            .await
            .unwrap();
        c.batch_execute("SET memopt.enabled = on").await.unwrap();
        r.iter().map(|r| r.get(0).unwrap()).collect()
    };
    // One statement per key: a correlated subquery's key would not be offered to the scan.
    for (k, want) in (1..=rows).zip(&plain) {
        let row = c
            .query_one(
                "SELECT (SELECT v FROM t WHERE k = $1), (memopt.get('t', $1::bigint)::text::t).v",
                &[&k],
            )
            .await
            .unwrap();
        let scan: Option<String> = row.get(0).unwrap();
        let get: Option<String> = row.get(1).unwrap();
        assert_eq!(&scan, want, "{when}: the scan's v of key {k}");
        assert_eq!(&get, want, "{when}: memopt.get's v of key {k}");
    }
    plain
}

/// Promise: hot standbys are not served ("writes arrive by WAL replay, which fires no
/// trigger, so nothing could fence them"): a lookup on a standby while the primary writes
/// never returns a row replay has changed, and `misses_recovery` counts them. After
/// promotion the store serves again, and must still agree with the normal plan.
///
/// Steps: primary with `t` populated; a standby; 20 rounds of an update on the primary, a
/// wait for replay, and every key read on the standby through the scan, `memopt.get` and
/// `Client::memopt_get`, each compared with the normal plan and with the primary's value.
/// `memopt.populate` is asked on the standby too. Then the standby is promoted, written and
/// read the same way.
///
/// Holds.
#[tokio::test]
async fn a_hot_standby_never_serves_a_row_replay_changed_and_its_promotion_stays_right_holds() {
    const ROWS: i32 = 20;
    let primary = memopt_check::cluster(&[]).unwrap();
    let mut p = connect(&primary.url()).await;
    memopt_check::table(&mut p, "t", ROWS).await.unwrap();
    memopt_check::populate(&mut p, "t").await.unwrap();
    let standby = primary.start_standby().unwrap();
    let mut s = connect(&standby.url()).await;
    let mut fast = connect(&standby.url()).await;
    let table = fast.memopt_table("t").await.unwrap();
    wait_for_replay(&mut p, &mut s).await;

    // A populate asked on the standby is queued: its worker starts only after promotion
    // (BgWorkerStart_RecoveryFinished), so it never fills from rows replay may change.
    let queued: bool = memopt_check::scalar(&mut s, "SELECT memopt.populate('t')")
        .await
        .unwrap();
    assert!(queued);

    for i in 1..=20 {
        let k = (i * 7) % ROWS + 1;
        p.execute("UPDATE t SET v = $1 WHERE k = $2", &[&format!("u{i}"), &k])
            .await
            .unwrap();
        wait_for_replay(&mut p, &mut s).await;
        let on_primary = all_three_agree(&mut p, ROWS, &format!("primary, round {i}")).await;
        let on_standby = all_three_agree(&mut s, ROWS, &format!("standby, round {i}")).await;
        assert_eq!(on_standby, on_primary, "round {i}: the standby's rows");
        let row = fast
            .memopt_get(&table, &i64::from(k))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.get::<_, &str>("v").unwrap(), format!("u{i}"));
    }
    let (hits, recovery): (i64, i64) = {
        let r = s
            .query_one(
                "SELECT hits, misses_recovery FROM memopt.stats WHERE \"table\" = 't'::regclass",
                &[],
            )
            .await
            .unwrap();
        (r.get(0).unwrap(), r.get(1).unwrap())
    };
    assert_eq!(hits, 0, "a hot standby served lookups from its store");
    // Each round looks every key up twice (the scan, memopt.get), and once more by the client.
    assert_eq!(recovery, 20 * (2 * i64::from(ROWS) + 1), "misses_recovery");

    // Promotion: the store may serve from now on, and must stay right.
    let promoted: bool = memopt_check::scalar(&mut s, "SELECT pg_promote(true, 60)")
        .await
        .unwrap();
    assert!(promoted, "the standby was not promoted within 60 s");
    let mut w = connect(&standby.url()).await;
    for i in 1..=20 {
        all_three_agree(&mut s, ROWS, &format!("promoted, before write {i}")).await;
        let k = (i * 3) % ROWS + 1;
        w.execute("UPDATE t SET v = $1 WHERE k = $2", &[&format!("p{i}"), &k])
            .await
            .unwrap();
        let now = all_three_agree(&mut s, ROWS, &format!("promoted, after write {i}")).await;
        assert_eq!(
            now[(k - 1) as usize].as_deref(),
            Some(format!("p{i}").as_str())
        );
        let row = fast
            .memopt_get(&table, &i64::from(k))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.get::<_, &str>("v").unwrap(), format!("p{i}"));
    }
    let hits: i64 = memopt_check::scalar::<i64>(
        &mut s,
        "SELECT hits FROM memopt.stats WHERE \"table\" = 't'::regclass",
    )
    .await
    .unwrap();
    assert!(hits > 0, "the promoted server never served from its store");
}

/// Promise: bad input gives a clear error, never a hang: a `get_many` of two million keys is
/// one FunctionCall the server runs to the end unless it checks for interrupts, so
/// `statement_timeout` (which PostgreSQL arms for a FunctionCall too) must end it with 57014
/// and leave the connection usable.
///
/// Holds (`get_one` checks for interrupts before each key).
#[tokio::test]
async fn a_huge_get_many_is_ended_by_statement_timeout_holds() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let mut c = connect(&cluster.url()).await;
    memopt_check::table(&mut c, "t", 1000).await.unwrap();
    let table = c.memopt_table("t").await.unwrap();
    let keys: Vec<i64> = (0..2_000_000).map(|i| i % 1000 + 1).collect();
    c.batch_execute("SET statement_timeout = '100ms'")
        .await
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(60), c.memopt_get_many(&table, &keys))
        .await
        .expect("a huge get_many outlived statement_timeout by a minute")
        .expect_err("two million lookups finished within 100 ms");
    assert_eq!(err.code(), Some(SqlState::QUERY_CANCELED), "{err:?}");
    c.batch_execute("RESET statement_timeout").await.unwrap();
    let rows = c.memopt_get_many(&table, &keys[..3]).await.unwrap();
    assert_eq!(rows.len(), 3);
}

//! Attacks on memopt's promise that a query "returns exactly what it would without the
//! extension" (docs/memopt.md): every lookup, through the MemoptLookup scan and through
//! `memopt.get`, is compared with the normal plan (`memopt.enabled = off`) on the same data.

use slipstream_pg::Client;

async fn connect(url: &str) -> Client {
    slipstream_pg::connect(url).await.unwrap()
}

/// `v` of key `k` in `t`, through whatever plan the session picks (`memopt.enabled` as set).
async fn v_of(c: &mut Client, k: i32) -> Option<String> {
    c.query_opt("SELECT v FROM t WHERE k = $1", &[&k])
        .await
        .unwrap()
        .map(|r| r.get(0).unwrap())
}

/// `v` of key `k` through `memopt.get`.
async fn get_v(c: &mut Client, k: i64) -> Option<String> {
    c.query_one("SELECT (memopt.get('t', $1::bigint)::text::t).v", &[&k])
        .await
        .unwrap()
        .get(0)
        .unwrap()
}

/// `v` of key `k` through `memopt.get`, or its refusal, inside an open transaction (under a
/// savepoint, so that a refusal leaves the transaction usable).
async fn try_get_v(c: &mut Client, k: i64) -> Result<Option<String>, slipstream_pg::Error> {
    c.batch_execute("SAVEPOINT get").await.unwrap();
    let v = c
        .query_one("SELECT (memopt.get('t', $1::bigint)::text::t).v", &[&k])
        .await;
    let end = if v.is_ok() { "RELEASE" } else { "ROLLBACK TO" };
    c.batch_execute(&format!("{end} SAVEPOINT get"))
        .await
        .unwrap();
    Ok(v?.get(0).unwrap())
}

/// The same lookup through the normal plan, in the same session and transaction.
async fn normal_v(c: &mut Client, k: i32) -> Option<String> {
    c.batch_execute("SET memopt.enabled = off").await.unwrap();
    let v = v_of(c, k).await;
    c.batch_execute("SET memopt.enabled = on").await.unwrap();
    v
}

/// Promise: `ALTER TABLE ... DISABLE TRIGGER` "stops the table from being served until the
/// trigger is enabled again" (docs/memopt.md, "Why a hit is never wrong"): writes made while
/// the sync trigger is off raise no fence, so no session may serve the table meanwhile.
///
/// Steps: session R opens a READ COMMITTED transaction and reads key 1 (so it holds the
/// table's AccessShareLock). Session D disables the sync trigger (ShareRowExclusiveLock, which
/// does not wait for R) and updates key 1 twice, each in its own transaction; R reads key 1
/// after each update, through the scan and through `memopt.get`, and compares with the
/// normal plan (`memopt.get` may instead refuse the table, as it refuses any table whose
/// sync trigger is off).
///
/// Before the fix: R had taken its table lock before the ALTER committed, so it never
/// processed the invalidation and its relcache still showed the trigger firing ALWAYS. Its
/// first read after the first update refilled the store (the ALTER had emptied it) with that
/// version; the second update fired no trigger and removed nothing, and R's scan was then
/// served the first update's value ('one') where the normal plan returned 'two'.
#[tokio::test]
async fn a_trigger_disabled_by_another_session_is_seen_inside_an_open_transaction() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let url = cluster.url();
    let mut d = connect(&url).await;
    memopt_check::table(&mut d, "t", 10).await.unwrap();
    let mut r = connect(&url).await;

    r.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        .await
        .unwrap();
    assert_eq!(v_of(&mut r, 1).await.as_deref(), Some("v1"));
    assert_eq!(get_v(&mut r, 1).await.as_deref(), Some("v1"));

    d.batch_execute("ALTER TABLE t DISABLE TRIGGER memopt_sync")
        .await
        .unwrap();
    for value in ["one", "two", "three"] {
        d.execute("UPDATE t SET v = $1 WHERE k = 1", &[&value])
            .await
            .unwrap();
        let normal = normal_v(&mut r, 1).await;
        assert_eq!(normal.as_deref(), Some(value), "the normal plan itself");
        // Twice each: the first read may refill the store, the second is then a hit.
        for round in 0..2 {
            assert_eq!(
                v_of(&mut r, 1).await,
                normal,
                "scan, round {round}, after the update to {value:?} with the trigger disabled"
            );
            // memopt.get refuses a table whose trigger is off (a documented refusal), or
            // answers; never with another row.
            match try_get_v(&mut r, 1).await {
                Ok(v) => assert_eq!(
                    v, normal,
                    "memopt.get, round {round}, after the update to {value:?} with the trigger disabled"
                ),
                Err(e) => assert!(
                    e.to_string()
                        .contains("is not enabled for memoptimized reads"),
                    "{e}"
                ),
            }
        }
    }
    r.batch_execute("COMMIT").await.unwrap();

    // Re-enabled, the table is served again and right.
    d.batch_execute("ALTER TABLE t ENABLE ALWAYS TRIGGER memopt_sync")
        .await
        .unwrap();
    for _ in 0..2 {
        assert_eq!(v_of(&mut r, 1).await.as_deref(), Some("three"));
        assert_eq!(get_v(&mut r, 1).await.as_deref(), Some("three"));
    }
}

/// Promise: as above, writes made with the sync trigger off are never served over, and
/// "a reader whose snapshot sees the commit ... finds the fence or no entry" (docs/memopt.md).
/// Here the writer disables the trigger and updates the row in one transaction, and the
/// reader comes in the window after that commit is visible to snapshots but before the
/// server has sent the ALTER's invalidation (PostgreSQL sends it after the commit callbacks;
/// `memopt.test_cleanup_delay` holds the writer there, which needs a fenced key: the writer
/// also updates a row of a second enabled table).
///
/// Steps: D begins, updates `u`, disables `t`'s sync trigger. R (autocommit) reads key 1 of
/// `t` twice: the trigger still fires for R (D has not committed), so the first read refills
/// the store, which the ALTER emptied, and the second is a hit. D updates key 1 (no trigger)
/// and commits with a 5 s cleanup delay. As soon as R's normal plan sees D's value, R reads
/// key 1 through the scan and through `memopt.get` while D is still in its commit.
///
/// Before the fix: R's relcache still showed the trigger, nothing fenced `t` (D had recorded
/// no key of it), and R was served the stored 'v1' where the normal plan returned 'new'.
#[tokio::test]
async fn a_trigger_disabled_and_a_write_in_one_transaction_are_fenced_through_its_commit() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let url = cluster.url();
    let mut d = connect(&url).await;
    memopt_check::table(&mut d, "t", 10).await.unwrap();
    memopt_check::table(&mut d, "u", 10).await.unwrap();
    let mut r = connect(&url).await;

    d.batch_execute(
        "BEGIN;
         UPDATE u SET v = 'fenced' WHERE k = 1;
         ALTER TABLE t DISABLE TRIGGER memopt_sync;",
    )
    .await
    .unwrap();
    for _ in 0..2 {
        assert_eq!(v_of(&mut r, 1).await.as_deref(), Some("v1"));
    }
    let hits: i64 = memopt_check::scalar(
        &mut r,
        "SELECT hits FROM memopt.stats WHERE \"table\" = 't'::regclass",
    )
    .await
    .unwrap();
    assert!(
        hits >= 1,
        "the second read of key 1 was no hit: the setup did not refill the store"
    );

    d.batch_execute(
        "UPDATE t SET v = 'new' WHERE k = 1;
         SET memopt.test_cleanup_delay = 5000;",
    )
    .await
    .unwrap();
    let commit = tokio::spawn(async move {
        d.batch_execute("COMMIT").await.unwrap();
        d
    });
    let mut seen = None;
    for _ in 0..400 {
        if normal_v(&mut r, 1).await.as_deref() == Some("new") {
            seen = Some((v_of(&mut r, 1).await, get_v(&mut r, 1).await));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (scan, get) = seen.expect("D's commit did not become visible within 4 s");
    assert!(
        !commit.is_finished(),
        "D's commit ended before the reads: the window was missed (raise the delay)"
    );
    assert_eq!(scan.as_deref(), Some("new"), "scan, during D's commit");
    assert_eq!(get.as_deref(), Some("new"), "memopt.get, during D's commit");

    let mut d = commit.await.unwrap();
    d.batch_execute("ALTER TABLE t ENABLE ALWAYS TRIGGER memopt_sync")
        .await
        .unwrap();
    for _ in 0..2 {
        assert_eq!(v_of(&mut r, 1).await.as_deref(), Some("new"));
        assert_eq!(get_v(&mut r, 1).await.as_deref(), Some("new"));
    }
}

/// The rows of `cursor`: `(g, v through the scan, v through memopt.get)` per key.
async fn fetch_all(c: &mut Client, cursor: &str) -> Vec<(i32, Option<String>, Option<String>)> {
    c.query(&format!("FETCH ALL FROM {cursor}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0).unwrap(), r.get(1).unwrap(), r.get(2).unwrap()))
        .collect()
}

/// Holds. Promise: a hit is "never a row version the snapshot cannot see" (docs/memopt.md,
/// condition 5), here for a snapshot older than the store's contents: a cursor's.
///
/// Steps: the store holds keys 1..10. R opens, in one READ COMMITTED transaction, a cursor
/// that looks every key 1..12 up through a STABLE PL/pgSQL function (whose query runs under
/// the cursor's snapshot, with the key as a parameter: served by the scan) and through
/// `memopt.get`, and the same cursor planned and run with `memopt.enabled = off`. D then
/// updates key 1, deletes key 2, inserts key 11 and reads keys 1 and 11 twice, so that the
/// store holds versions the cursors' snapshot must not see. Both cursors are fetched: the
/// rows are equal, they are the ones from before D's changes, the lookups of keys 1 and 11
/// missed as `invisible`, and keys 3..10 were hits.
#[tokio::test]
async fn a_cursor_opened_before_a_commit_never_sees_its_rows_through_the_store() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let url = cluster.url();
    let mut d = connect(&url).await;
    memopt_check::table(&mut d, "t", 10).await.unwrap();
    d.batch_execute(
        "CREATE FUNCTION look(key int) RETURNS text STABLE LANGUAGE plpgsql
             AS $$ BEGIN RETURN (SELECT v FROM t WHERE k = key); END $$;
         SELECT look(g) FROM generate_series(1, 10) g;",
    )
    .await
    .unwrap();
    let mut r = connect(&url).await;
    let stats = "SELECT hits, misses_invisible FROM memopt.stats WHERE \"table\" = 't'::regclass";
    let cursor = "CURSOR FOR SELECT g, look(g), (memopt.get('t', g)::text::t).v
                    FROM generate_series(1, 12) g";
    r.batch_execute(&format!(
        "BEGIN ISOLATION LEVEL READ COMMITTED;
         DECLARE c_on {cursor};
         SET memopt.enabled = off;
         DECLARE c_off {cursor};
         SET memopt.enabled = on;"
    ))
    .await
    .unwrap();

    for sql in [
        "UPDATE t SET v = 'new1' WHERE k = 1",
        "DELETE FROM t WHERE k = 2",
        "INSERT INTO t VALUES (11, 'v11')",
    ] {
        d.batch_execute(sql).await.unwrap();
    }
    for k in [1, 11, 1, 11] {
        assert!(v_of(&mut d, k).await.is_some());
    }
    let before = r.query_one(stats, &[]).await.unwrap();
    let (hits0, invisible0): (i64, i64) = (before.get(0).unwrap(), before.get(1).unwrap());

    let served = fetch_all(&mut r, "c_on").await;
    let after = r.query_one(stats, &[]).await.unwrap();
    let (hits1, invisible1): (i64, i64) = (after.get(0).unwrap(), after.get(1).unwrap());
    r.batch_execute("SET memopt.enabled = off").await.unwrap();
    let normal = fetch_all(&mut r, "c_off").await;
    r.batch_execute("COMMIT; SET memopt.enabled = on")
        .await
        .unwrap();

    assert_eq!(served, normal);
    for (g, scan, get) in &normal {
        let old = (*g <= 10).then(|| format!("v{g}"));
        assert_eq!((scan, get), (&old, &old), "key {g}");
    }
    assert_eq!(invisible1 - invisible0, 4, "keys 1 and 11, scan and get");
    assert!(
        hits1 - hits0 >= 16,
        "keys 3..10 were not hits: {hits0} -> {hits1}"
    );
}

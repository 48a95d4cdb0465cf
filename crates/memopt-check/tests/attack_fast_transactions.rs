//! Attacks on the fast lookup by FunctionCall (`Client::memopt_get`) inside transaction
//! blocks while another session commits: REPEATABLE READ and SERIALIZABLE snapshots, READ
//! COMMITTED statements, the transaction's own uncommitted writes, a subtransaction rolled back
//! (which releases the table lock its write took), and another session's uncommitted and
//! rolled-back insert. The promise (docs/memopt.md, "What it guarantees"): exactly the row
//! `SELECT * FROM t WHERE pk = key` returns in the same transaction. Each lookup is compared
//! with that SELECT under `memopt.enabled = off`, in the same transaction, with no write
//! committed in between.

use slipstream_pg::{Client, MemoptTable};

async fn connect(url: &str) -> Client {
    slipstream_pg::connect(url).await.unwrap()
}

/// `v` of key `k` by FunctionCall.
async fn fast(c: &mut Client, t: &MemoptTable, k: i32) -> Option<String> {
    c.memopt_get(t, &i64::from(k)).await.unwrap().map(|r| {
        assert_eq!(r.get::<_, i32>(0).unwrap(), k);
        r.get(1).unwrap()
    })
}

/// `v` of key `k` through the normal plan, in the session's transaction.
async fn normal(c: &mut Client, k: i32) -> Option<String> {
    c.batch_execute("SET memopt.enabled = off").await.unwrap();
    let v = c
        .query_opt("SELECT v FROM t WHERE k = $1", &[&k])
        .await
        .unwrap()
        .map(|r| r.get(0).unwrap());
    c.batch_execute("SET memopt.enabled = on").await.unwrap();
    v
}

/// The fast lookup of `k`, asserted equal to the normal plan's and to `want`.
async fn check(c: &mut Client, t: &MemoptTable, k: i32, want: Option<&str>, when: &str) {
    let f = fast(c, t, k).await;
    let n = normal(c, k).await;
    assert_eq!(f, n, "{when}: key {k}, fast lookup against the normal plan");
    assert_eq!(f.as_deref(), want, "{when}: key {k}");
}

async fn write(w: &mut Client, sql: &str) {
    w.batch_execute(sql).await.unwrap();
}

/// Holds. Steps, with the store warm (keys 1..10 read twice by FunctionCall, hits counted):
/// 1. for REPEATABLE READ and SERIALIZABLE, R reads keys 1, 2 and 11 in a transaction block;
///    W updates 1, deletes 2, inserts 11 and reads them through the store (so the store holds
///    the new versions); R reads again: the old rows; after COMMIT, the new ones;
/// 2. READ COMMITTED in a block: each lookup sees what W committed before it;
/// 3. R updates key 3 in a savepoint, reads it (its own row), rolls the savepoint back (the
///    table lock goes with it), reads it (the committed row); W updates key 3 and commits; R
///    reads it again; R deletes key 4 and reads it (none); R rolls back;
/// 4. R inserts key 100 and reads it; W reads it (none) twice; R rolls back; W reads it
///    (none) twice.
///
/// Every lookup equals the normal plan's in the same transaction.
#[tokio::test]
async fn fast_lookups_in_transaction_blocks_match_the_normal_plan_holds() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let url = cluster.url();
    let mut w = connect(&url).await;
    memopt_check::table(&mut w, "t", 10).await.unwrap();
    let mut r = connect(&url).await;
    let rt = r.memopt_table("t").await.unwrap();
    let wt = w.memopt_table("t").await.unwrap();
    for k in (1..=10).chain(1..=10) {
        assert_eq!(fast(&mut r, &rt, k).await, Some(format!("v{k}")));
    }
    let hits = "SELECT hits FROM memopt.stats WHERE \"table\" = 't'::regclass";
    assert!(memopt_check::scalar::<i64>(&mut r, hits).await.unwrap() >= 10);

    // 1. Transaction snapshots.
    for (round, level) in [(0, "REPEATABLE READ"), (1, "SERIALIZABLE")] {
        let (old1, old2) = if round == 0 {
            ("v1".to_string(), Some("v2".to_string()))
        } else {
            ("new1-0".to_string(), None)
        };
        r.batch_execute(&format!("BEGIN ISOLATION LEVEL {level}"))
            .await
            .unwrap();
        check(&mut r, &rt, 1, Some(&old1), level).await;
        check(&mut r, &rt, 2, old2.as_deref(), level).await;
        check(&mut r, &rt, 11 + round, None, level).await;
        write(
            &mut w,
            &format!(
                "UPDATE t SET v = 'new1-{round}' WHERE k = 1; DELETE FROM t WHERE k = 2;
                 INSERT INTO t VALUES ({}, 'ins')",
                11 + round
            ),
        )
        .await;
        for _ in 0..2 {
            assert_eq!(fast(&mut w, &wt, 1).await, Some(format!("new1-{round}")));
            assert_eq!(fast(&mut w, &wt, 11 + round).await.as_deref(), Some("ins"));
        }
        check(&mut r, &rt, 1, Some(&old1), level).await;
        check(&mut r, &rt, 2, old2.as_deref(), level).await;
        check(&mut r, &rt, 11 + round, None, level).await;
        r.batch_execute("COMMIT").await.unwrap();
        check(&mut r, &rt, 1, Some(&format!("new1-{round}")), level).await;
        check(&mut r, &rt, 11 + round, Some("ins"), level).await;
    }

    // 2. READ COMMITTED in a block: each call a statement of its own.
    r.batch_execute("BEGIN").await.unwrap();
    check(&mut r, &rt, 5, Some("v5"), "read committed").await;
    write(&mut w, "UPDATE t SET v = 'new5' WHERE k = 5").await;
    assert_eq!(fast(&mut w, &wt, 5).await.as_deref(), Some("new5"));
    check(&mut r, &rt, 5, Some("new5"), "read committed").await;
    r.batch_execute("COMMIT").await.unwrap();

    // 3. Own writes, a savepoint rolled back.
    r.batch_execute("BEGIN; SAVEPOINT s; UPDATE t SET v = 'mine' WHERE k = 3")
        .await
        .unwrap();
    check(&mut r, &rt, 3, Some("mine"), "own update").await;
    r.batch_execute("ROLLBACK TO SAVEPOINT s").await.unwrap();
    check(&mut r, &rt, 3, Some("v3"), "own update rolled back").await;
    write(&mut w, "UPDATE t SET v = 'new3' WHERE k = 3").await;
    for _ in 0..2 {
        assert_eq!(fast(&mut w, &wt, 3).await.as_deref(), Some("new3"));
    }
    check(&mut r, &rt, 3, Some("new3"), "after the savepoint").await;
    r.batch_execute("DELETE FROM t WHERE k = 4").await.unwrap();
    check(&mut r, &rt, 4, None, "own delete").await;
    r.batch_execute("ROLLBACK").await.unwrap();
    check(&mut r, &rt, 4, Some("v4"), "own delete rolled back").await;

    // 4. Another session's uncommitted insert, rolled back.
    r.batch_execute("BEGIN; INSERT INTO t VALUES (100, 'ghost')")
        .await
        .unwrap();
    check(&mut r, &rt, 100, Some("ghost"), "own insert").await;
    for _ in 0..2 {
        check(&mut w, &wt, 100, None, "another's uncommitted insert").await;
    }
    r.batch_execute("ROLLBACK").await.unwrap();
    for c in [&mut r, &mut w] {
        let t = c.memopt_table("t").await.unwrap();
        for _ in 0..2 {
            check(c, &t, 100, None, "rolled-back insert").await;
        }
    }
}

/// Holds. Promise: a lookup in SERIALIZABLE is the normal plan's index scan, predicate locks
/// included ("SERIALIZABLE needs the predicate locks the index scan takes"). Write skew: A
/// and B each read one key by FunctionCall (a present key, then an absent one) and write the
/// other; the second commit fails with a serialization failure (40001), as with SELECT.
#[tokio::test]
async fn serializable_fast_lookups_take_predicate_locks_holds() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let url = cluster.url();
    let mut a = connect(&url).await;
    memopt_check::table(&mut a, "t", 10).await.unwrap();
    let mut b = connect(&url).await;
    let at = a.memopt_table("t").await.unwrap();
    let bt = b.memopt_table("t").await.unwrap();
    for _ in 0..2 {
        fast(&mut a, &at, 1).await;
        fast(&mut a, &at, 2).await;
    }
    for (ka, kb) in [(1, 2), (50, 60)] {
        a.batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
            .await
            .unwrap();
        b.batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
            .await
            .unwrap();
        let va = fast(&mut a, &at, ka).await;
        let vb = fast(&mut b, &bt, kb).await;
        let (wa, wb) = if ka == 1 {
            (
                format!("UPDATE t SET v = 'a' WHERE k = {kb}"),
                format!("UPDATE t SET v = 'b' WHERE k = {ka}"),
            )
        } else {
            (
                format!("INSERT INTO t VALUES ({kb}, 'a')"),
                format!("INSERT INTO t VALUES ({ka}, 'b')"),
            )
        };
        assert_eq!((va.is_some(), vb.is_some()), (ka == 1, ka == 1));
        a.batch_execute(&wa).await.unwrap();
        b.batch_execute(&wb).await.unwrap();
        a.batch_execute("COMMIT").await.unwrap();
        let err = b
            .batch_execute("COMMIT")
            .await
            .expect_err("write skew committed: no predicate lock from memopt_get");
        assert_eq!(
            err.code().map(|c| c.code().to_string()).as_deref(),
            Some("40001"),
            "{err}"
        );
    }
}

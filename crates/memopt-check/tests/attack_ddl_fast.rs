//! Attacks on the fast lookup (`memopt.get`, `memopt.get_many`, `Client::memopt_get`) while
//! another session changes the table's definition and storage under it: columns added with a
//! DEFAULT that old tuples do not store (`atthasmissing`), dropped columns left in stored
//! tuples, a non-key column's type changed (a rewrite), renames, `VACUUM FULL`, `CLUSTER`,
//! `REINDEX` of the primary key, a TRUNCATE and reload in one transaction, and keys moved by
//! UPDATE and moved back. The promise (docs/memopt.md, "What it guarantees"): exactly the row
//! `SELECT * FROM t WHERE pk = key` returns in the same transaction.
//!
//! Every check reads the fast lookup and the normal plan in one statement, so on one
//! snapshot: the normal plan is the inner side of a join, which memopt never serves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use slipstream_pg::Client;

async fn connect(url: &str) -> Client {
    slipstream_pg::connect(url).await.unwrap()
}

/// Keys 1..=ROWS exist; keys 1..=MOVED are moved away and back by the DDL session.
const ROWS: i64 = 200;
const MOVED: i64 = 10;

/// Keys whose `memopt.get`, `memopt.get_many`, MemoptLookup scan (`look`, a STABLE function:
/// the statement's snapshot) and normal-plan rows (as text) differ, read in one statement.
async fn differences(c: &mut Client) -> Vec<String> {
    let sql = format!(
        "SELECT g::text || ': get ' || coalesce(memopt.get('t', g)::text, 'none')
                || ', get_many ' || coalesce(m.rows[g]::text, 'none')
                || ', scan ' || coalesce(look(g), 'none')
                || ', normal ' || coalesce(n.row, 'none')
           FROM generate_series(1, {ROWS}) g
           CROSS JOIN (SELECT memopt.get_many('t', array(SELECT generate_series(1, {ROWS})::bigint))
                          AS rows) m
           LEFT JOIN (SELECT k, row(t.*)::text AS row FROM t) n ON n.k = g
          WHERE memopt.get('t', g)::text IS DISTINCT FROM n.row
             OR m.rows[g]::text IS DISTINCT FROM n.row
             OR look(g) IS DISTINCT FROM n.row"
    );
    c.query(&sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0).unwrap())
        .collect()
}

/// The DDL and rewrites, each its own transaction; none changes the values of `k` and `a`
/// for keys above MOVED.
fn ddl(round: usize) -> Vec<String> {
    let i = round;
    vec![
        format!("ALTER TABLE t ADD COLUMN c{i} int DEFAULT {i}"),
        format!("UPDATE t SET b = b WHERE k % 5 = {}", i % 5),
        format!("ALTER TABLE t ADD COLUMN d{i} text DEFAULT 'd{i}' NOT NULL"),
        format!("ALTER TABLE t DROP COLUMN c{i}"),
        "ALTER TABLE t RENAME COLUMN a TO a_renamed".into(),
        "ALTER TABLE t RENAME COLUMN a_renamed TO a".into(),
        format!("UPDATE t SET k = -k WHERE k BETWEEN 1 AND {MOVED}"),
        "ALTER TABLE t ALTER COLUMN b TYPE bigint".into(),
        format!("UPDATE t SET k = -k WHERE k BETWEEN -{MOVED} AND -1"),
        "VACUUM FULL t".into(),
        "ALTER TABLE t ALTER COLUMN b TYPE int".into(),
        "CLUSTER t USING t_pkey".into(),
        "REINDEX INDEX t_pkey".into(),
        format!("ALTER TABLE t DROP COLUMN d{i}"),
        "BEGIN; CREATE TEMP TABLE keep ON COMMIT DROP AS SELECT * FROM t; TRUNCATE t; \
         INSERT INTO t SELECT * FROM keep; COMMIT"
            .into(),
        "VACUUM t".into(),
    ]
}

/// Holds. Steps: `t (k bigint primary key, a text, b int)` with 200 rows, enabled and warmed.
/// Session D runs the statements of `ddl` four times over. Session R, meanwhile, compares in
/// one statement, for every key, `memopt.get`, `memopt.get_many`, the MemoptLookup scan and
/// the normal plan; session
/// F looks keys up by FunctionCall (`Client::memopt_get` and `memopt_get_many`), resolving the
/// table again when its columns changed, and checks `k` and `a`, which no DDL changes. No
/// difference, every FunctionCall row right, and the store served hits throughout.
#[tokio::test]
async fn fast_lookups_racing_ddl_and_rewrites_match_the_normal_plan_holds() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let url = cluster.url();
    let mut d = connect(&url).await;
    d.batch_execute(&format!(
        "CREATE EXTENSION memopt;
         CREATE TABLE t (k bigint PRIMARY KEY, a text, b int);
         INSERT INTO t SELECT g, 'a' || g, g FROM generate_series(1, {ROWS}) g;
         SELECT memopt.enable_read('t');
         CREATE FUNCTION look(key bigint) RETURNS text STABLE LANGUAGE plpgsql
             AS $$ BEGIN RETURN (SELECT row(t.*)::text FROM t WHERE k = key); END $$;"
    ))
    .await
    .unwrap();
    let mut r = connect(&url).await;
    assert_eq!(differences(&mut r).await, Vec::<String>::new());
    let hits = "SELECT hits FROM memopt.stats WHERE \"table\" = 't'::regclass";
    let hits0: i64 = memopt_check::scalar(&mut r, hits).await.unwrap();
    assert_eq!(differences(&mut r).await, Vec::<String>::new());
    let hits1: i64 = memopt_check::scalar(&mut r, hits).await.unwrap();
    assert!(
        hits1 - hits0 >= 3 * ROWS,
        "the store was not warm: {hits0} -> {hits1}"
    );

    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let done = done.clone();
        tokio::spawn(async move {
            let mut checks = 0;
            while !done.load(Ordering::Acquire) || checks < 3 {
                let diff = differences(&mut r).await;
                assert_eq!(diff, Vec::<String>::new(), "after {checks} checks");
                checks += 1;
            }
            checks
        })
    };
    let fast = {
        let done = done.clone();
        let url = url.clone();
        tokio::spawn(async move {
            let mut f = connect(&url).await;
            let mut table = f.memopt_table("t").await.unwrap();
            let keys: Vec<i64> = (MOVED + 1..=ROWS).collect();
            let mut calls = 0;
            while !done.load(Ordering::Acquire) || calls < 3 {
                let k = MOVED + 1 + (calls % (ROWS - MOVED));
                let got = match f.memopt_get(&table, &k).await {
                    Ok(row) => row,
                    Err(e) if e.to_string().contains("resolve it again") => {
                        table = f.memopt_table("t").await.unwrap();
                        continue;
                    }
                    Err(e) => panic!("memopt_get({k}): {e}"),
                };
                let row = got.unwrap_or_else(|| panic!("key {k} not found"));
                assert_eq!(row.get::<_, i64>(0).unwrap(), k);
                assert_eq!(row.get::<_, String>(1).unwrap(), format!("a{k}"));
                if calls % 16 == 0 {
                    match f.memopt_get_many(&table, &keys).await {
                        Ok(rows) => {
                            assert_eq!(rows.len(), keys.len(), "get_many lost rows");
                            for (row, k) in rows.iter().zip(&keys) {
                                assert_eq!(row.get::<_, i64>(0).unwrap(), *k);
                                assert_eq!(row.get::<_, String>(1).unwrap(), format!("a{k}"));
                            }
                        }
                        Err(e) if e.to_string().contains("resolve it again") => {
                            table = f.memopt_table("t").await.unwrap();
                            continue;
                        }
                        Err(e) => panic!("memopt_get_many: {e}"),
                    }
                }
                calls += 1;
            }
            calls
        })
    };

    for round in 0..4 {
        for sql in ddl(round) {
            d.batch_execute(&sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }
    done.store(true, Ordering::Release);
    let checks = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .expect("the reader hung")
        .unwrap();
    let calls = tokio::time::timeout(Duration::from_secs(60), fast)
        .await
        .expect("the FunctionCall reader hung")
        .unwrap();
    assert!(checks >= 3 && calls >= 3, "{checks} checks, {calls} calls");

    let mut r = connect(&url).await;
    assert!(
        memopt_check::scalar::<bool>(&mut r, "SELECT memopt.is_enabled('t')")
            .await
            .unwrap()
    );
    assert_eq!(differences(&mut r).await, Vec::<String>::new());
    let hits2: i64 = memopt_check::scalar(&mut r, hits).await.unwrap();
    assert_eq!(differences(&mut r).await, Vec::<String>::new());
    let hits3: i64 = memopt_check::scalar(&mut r, hits).await.unwrap();
    assert!(
        hits3 - hits2 >= 3 * ROWS,
        "not served after the DDL: {hits2} -> {hits3}"
    );
}

/// The columns of `t` after `ddl`, each resolved before it, then a lookup of key 1 by every
/// path a client has: a lone call, `get_many`, and a pipeline's coalesced run. Each must be
/// refused ("resolve it again"), never decoded under the names resolved before; the table
/// resolved again gives `want` (column name, value) for key 1.
async fn refused_until_resolved_again(ddl: &str, want: &[(&str, &str)]) {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let url = cluster.url();
    let mut c = connect(&url).await;
    c.batch_execute(
        "CREATE EXTENSION memopt;
         CREATE TABLE t (k bigint PRIMARY KEY, a text, b text);
         INSERT INTO t VALUES (1, 'old a', 'b'), (2, 'a2', 'b2');
         SELECT memopt.enable_read('t');",
    )
    .await
    .unwrap();
    let table = c.memopt_table("t").await.unwrap();
    let row = c.memopt_get(&table, &1i64).await.unwrap().unwrap();
    assert_eq!(row.get::<_, &str>("a").unwrap(), "old a");
    c.batch_execute(ddl).await.unwrap();

    let stale = |what: &str, got: Result<Vec<slipstream_pg::Row>, slipstream_pg::Error>| match got {
        Err(e) => assert!(
            e.to_string().contains("resolve it again"),
            "{ddl}: {what}: {e}"
        ),
        Ok(rows) => {
            let names: Vec<String> = rows
                .iter()
                .flat_map(|r| {
                    r.columns()
                        .iter()
                        .enumerate()
                        .map(|(i, col)| {
                            format!("{}={:?}", col.name(), r.get::<_, Option<String>>(i).ok())
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            panic!("{ddl}: {what} answered under the names resolved before: {names:?}")
        }
    };
    stale(
        "memopt_get",
        c.memopt_get(&table, &1i64)
            .await
            .map(|r| r.into_iter().collect()),
    );
    stale(
        "memopt_get_many",
        c.memopt_get_many(&table, &[1i64, 2]).await,
    );
    let mut p = c.pipeline();
    let one = p.memopt_get(&table, &1i64).await.unwrap();
    let two = p.memopt_get(&table, &2i64).await.unwrap();
    stale("a pipeline's coalesced run", p.process(&one).await);
    stale("the run's second lookup", p.process(&two).await);
    drop(p.end().await);

    let table = c.memopt_table("t").await.unwrap();
    let row = c.memopt_get(&table, &1i64).await.unwrap().unwrap();
    for (name, value) in want {
        assert_eq!(row.get::<_, &str>(*name).unwrap(), *value, "{ddl}: {name}");
    }
    assert_eq!(row.columns().len(), want.len() + 1, "{ddl}");
}

/// Failed before memopt 1.1 (it was documented: docs/memopt.md, "Client notes"). A reply
/// carries each column's type, not its name or number. `a` dropped and a new `a` of the same
/// type added gives columns `k, b, a` of types `bigint, text, text`, as `k, a, b` were, and
/// the row came back under the names resolved before: old `b`'s value as `a`, the new `a` as
/// `b`. Now the server compares the layout the client resolved with the table's and refuses.
#[tokio::test]
async fn a_dropped_and_re_added_column_of_the_same_type_is_refused_until_resolved_again() {
    refused_until_resolved_again(
        "ALTER TABLE t DROP COLUMN a; ALTER TABLE t ADD COLUMN a text DEFAULT 'new a'",
        &[("a", "new a"), ("b", "b")],
    )
    .await;
}

/// Failed before memopt 1.1: a renamed column kept its old name in every row (`b` read
/// through a handle resolved before `RENAME COLUMN b TO c`). Two renames that swap the names
/// of two columns of one type returned each value under the other's name.
#[tokio::test]
async fn renamed_columns_are_refused_until_resolved_again() {
    refused_until_resolved_again(
        "ALTER TABLE t RENAME COLUMN a TO tmp; ALTER TABLE t RENAME COLUMN b TO a; \
         ALTER TABLE t RENAME COLUMN tmp TO b",
        &[("a", "b"), ("b", "old a")],
    )
    .await;
}

/// The client on memopt 1.0 (no `memopt.columns`, no three-argument forms) calls the
/// two-argument forms and works as before; after `ALTER EXTENSION memopt UPDATE` a new
/// connection resolves the layout and is refused after a rename.
#[tokio::test]
async fn the_client_works_on_memopt_1_0_and_checks_once_updated() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let url = cluster.url();
    let mut c = connect(&url).await;
    c.batch_execute(
        "CREATE EXTENSION memopt VERSION '1.0';
         CREATE TABLE t (k bigint PRIMARY KEY, a text, b text);
         INSERT INTO t VALUES (1, 'a', 'b');
         SELECT memopt.enable_read('t');",
    )
    .await
    .unwrap();
    let table = c.memopt_table("t").await.unwrap();
    let row = c.memopt_get(&table, &1i64).await.unwrap().unwrap();
    assert_eq!(row.get::<_, &str>("a").unwrap(), "a");
    let rows = c.memopt_get_many(&table, &[1i64]).await.unwrap();
    assert_eq!(rows[0].get::<_, &str>("b").unwrap(), "b");

    c.batch_execute("ALTER EXTENSION memopt UPDATE")
        .await
        .unwrap();
    let version: String = memopt_check::scalar(
        &mut c,
        "SELECT extversion FROM pg_extension WHERE extname = 'memopt'",
    )
    .await
    .unwrap();
    assert_eq!(version, "1.1");
    // This connection resolved the 1.0 functions: still served, unchecked.
    assert!(c.memopt_get(&table, &1i64).await.unwrap().is_some());
    let mut d = connect(&url).await;
    let table = d.memopt_table("t").await.unwrap();
    assert!(d.memopt_get(&table, &1i64).await.unwrap().is_some());
    d.batch_execute("ALTER TABLE t RENAME COLUMN a TO a2")
        .await
        .unwrap();
    let e = d.memopt_get(&table, &1i64).await.unwrap_err();
    assert!(e.to_string().contains("resolve it again"), "{e}");
}

/// Holds. `t` is warmed (every key a hit), dropped and created again with the same name, the
/// same columns and other values, and enabled. The handle resolved before is refused with
/// 42P01 (the old OID), not answered from the old table's entries; resolved again, and through
/// SQL, every key gives the new table's row, first as a fill, then as a hit.
#[tokio::test]
async fn a_table_dropped_and_created_again_under_its_name_never_serves_the_old_rows_holds() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let url = cluster.url();
    let mut c = connect(&url).await;
    let create = |v: &str| {
        format!(
            "CREATE TABLE t (k bigint PRIMARY KEY, a text, b int);
             INSERT INTO t SELECT g, '{v}' || g, g FROM generate_series(1, {ROWS}) g;
             SELECT memopt.enable_read('t');"
        )
    };
    c.batch_execute(&format!("CREATE EXTENSION memopt; {}", create("old")))
        .await
        .unwrap();
    let old = c.memopt_table("t").await.unwrap();
    let keys: Vec<i64> = (1..=ROWS).collect();
    for _ in 0..2 {
        assert_eq!(
            c.memopt_get_many(&old, &keys).await.unwrap().len(),
            keys.len()
        );
    }
    c.batch_execute(&format!("DROP TABLE t; {}", create("new")))
        .await
        .unwrap();
    let err = c
        .memopt_get(&old, &1i64)
        .await
        .expect_err("a dropped table's OID answered");
    assert_eq!(
        err.code().map(|s| s.code().to_string()).as_deref(),
        Some("42P01"),
        "{err}"
    );
    let new = c.memopt_table("t").await.unwrap();
    let hits = "SELECT hits FROM memopt.stats WHERE \"table\" = 't'::regclass";
    for pass in 0..2 {
        let hits0: i64 = memopt_check::scalar(&mut c, hits).await.unwrap();
        let rows = c.memopt_get_many(&new, &keys).await.unwrap();
        let a: Vec<String> = rows.iter().map(|r| r.get(1).unwrap()).collect();
        let want: Vec<String> = keys.iter().map(|k| format!("new{k}")).collect();
        assert_eq!(a, want, "pass {pass}");
        let v: Option<String> =
            memopt_check::scalar(&mut c, "SELECT (memopt.get('t', 7)::text::t).a")
                .await
                .unwrap();
        assert_eq!(v.as_deref(), Some("new7"));
        let hits1: i64 = memopt_check::scalar(&mut c, hits).await.unwrap();
        if pass == 1 {
            assert!(
                hits1 - hits0 > ROWS,
                "the new table is not served: {hits0} -> {hits1}"
            );
        }
    }
}

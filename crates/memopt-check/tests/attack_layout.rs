//! Attacks on memopt 1.1's column-layout check (docs/memopt.md, "Columns changed since the
//! table was resolved"): `memopt.columns` returns a table's live columns and their layout, and
//! the three-argument `memopt.get`/`get_many` refuse a call whose layout is not the table's.
//! The promise: a fast lookup never hands a value out under a name `SELECT * FROM t WHERE pk =
//! key` would not give it; after DDL that changes the live columns a handle resolved before is
//! refused, never decoded under stale names; a handle resolved again works.
//!
//! The server caches each table's layout per backend (`src/key.c`, `cache_entry`), dropped on
//! the table's relcache invalidation. These tests attack that cache and the client around it.

use slipstream_pg::{Client, Error};

async fn connect(url: &str) -> Client {
    slipstream_pg::connect(url).await.unwrap()
}

/// A cluster with memopt (and `settings`), its URL and a session that ran [`SETUP`]. Keep
/// the cluster: it stops when dropped.
async fn started(settings: &[(&str, &str)]) -> (slipstream_testkit::Cluster, String, Client) {
    let cluster = memopt_check::cluster(settings).unwrap();
    let url = cluster.url();
    let mut c = connect(&url).await;
    c.batch_execute(SETUP).await.unwrap();
    (cluster, url, c)
}

/// Whether backend `pid` waits for a lock within 10 s, asked through `watch`.
async fn waits_for_a_lock(watch: &mut Client, pid: i32) -> bool {
    let waiting = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = {pid} AND wait_event_type = 'Lock'"
    );
    for _ in 0..200 {
        if memopt_check::scalar::<i64>(watch, &waiting).await.unwrap() == 1 {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    false
}

fn sqlstate(e: &Error) -> Option<String> {
    e.code().map(|s| s.code().to_string())
}

/// `t (k bigint primary key, a text, b text)` holding `(1, 'a', 'b')`, enabled.
const SETUP: &str = "CREATE EXTENSION IF NOT EXISTS memopt;
     CREATE TABLE t (k bigint PRIMARY KEY, a text, b text);
     INSERT INTO t VALUES (1, 'a', 'b');
     SELECT memopt.enable_read('t');";

/// Swaps the names of `a` and `b` (one transaction): the types stay in the same order, so
/// only the layout tells a handle resolved before from the table.
const SWAP: &str = "ALTER TABLE t RENAME COLUMN a TO tmp; ALTER TABLE t RENAME COLUMN b TO a; \
     ALTER TABLE t RENAME COLUMN tmp TO b";

/// Promise: after a rename a handle resolved before is refused (0A000), never decoded under
/// the old names, also when the backend failed while it read the table's layout again.
///
/// Steps: session C resolves `t` and looks key 1 up (its backend caches the layout). Session D
/// swaps the names of `a` and `b`, then holds `pg_index` locked (ACCESS EXCLUSIVE, as a
/// `VACUUM FULL pg_index` or `REINDEX` does). C, under `lock_timeout`, calls through its old
/// handle: the call fails while the server re-reads the table's primary key (55P03). D lets go
/// and C calls through the old handle again.
///
/// Before the fix the second call was answered, and `a`'s value came back as `b` and `b`'s as
/// `a`: `cache_entry` had entered the table in the backend's hash before reading its layouts,
/// the error left the entry there, and the entry was the element the invalidation had just
/// freed, still holding the pre-rename layout, so the check passed for the rest of the
/// backend's life (until the table's next invalidation).
#[tokio::test]
async fn an_error_while_the_layout_is_read_again_leaves_no_stale_layout() {
    let (_cluster, url, mut c) = started(&[]).await;
    let old = c.memopt_table("t").await.unwrap();
    let row = c.memopt_get(&old, &1i64).await.unwrap().unwrap();
    assert_eq!(row.get::<_, &str>("a").unwrap(), "a");
    c.batch_execute("SET lock_timeout = '500ms'").await.unwrap();

    let mut d = connect(&url).await;
    d.batch_execute(SWAP).await.unwrap();
    d.batch_execute("BEGIN; LOCK TABLE pg_catalog.pg_index IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let e = c
        .memopt_get(&old, &1i64)
        .await
        .expect_err("answered while pg_index was locked");
    assert_eq!(sqlstate(&e).as_deref(), Some("55P03"), "{e}");
    d.batch_execute("ROLLBACK").await.unwrap();
    c.batch_execute("RESET lock_timeout").await.unwrap();

    match c.memopt_get(&old, &1i64).await {
        Err(e) => {
            assert_eq!(sqlstate(&e).as_deref(), Some("0A000"), "{e}");
            assert!(e.to_string().contains("resolve it again"), "{e}");
        }
        Ok(row) => panic!(
            "a handle resolved before the rename was answered: a = {:?}, b = {:?} \
             (the table has a = 'b', b = 'a')",
            row.as_ref().map(|r| r.get::<_, String>("a").unwrap()),
            row.as_ref().map(|r| r.get::<_, String>("b").unwrap()),
        ),
    }
    let e = c
        .memopt_get_many(&old, &[1i64])
        .await
        .expect_err("get_many through the old handle was answered");
    assert_eq!(sqlstate(&e).as_deref(), Some("0A000"), "{e}");

    // Resolved again: the new names, served. And the layout C's backend gives is the one
    // a backend that never cached the table computes (a stale cached layout would be given
    // with the new names, and would pass the old handles' calls).
    let new = c.memopt_table("t").await.unwrap();
    let row = c.memopt_get(&new, &1i64).await.unwrap().unwrap();
    assert_eq!(row.get::<_, &str>("a").unwrap(), "b");
    assert_eq!(row.get::<_, &str>("b").unwrap(), "a");
    let layout = "SELECT layout FROM memopt.columns('t') LIMIT 1";
    let here: i64 = memopt_check::scalar(&mut c, layout).await.unwrap();
    let mut e = connect(&url).await;
    let fresh: i64 = memopt_check::scalar(&mut e, layout).await.unwrap();
    assert_eq!(here, fresh, "the backend that failed gives a stale layout");
}

/// Promise: in a pipeline, a lookup through a handle resolved before a rename is refused and
/// one through a handle resolved after it is answered, whatever their order.
///
/// Steps: C resolves `t` (`old`), D swaps the names of `a` and `b`, C resolves `t` again
/// (`new`). One pipeline block queues `memopt_get` through `new` then `old`, another `old`
/// then `new`, each on key 1; consecutive lookups on one table are coalesced into one
/// `get_many`.
///
/// Before the fix the run was keyed by the table's OID alone and called with the first
/// handle's layout and decoded with its names: `new` then `old` answered the old handle (its
/// row decoded under the new handle's columns, not refused), and `old` then `new` refused the
/// new handle with "resolve it again", which resolving again could not cure while a stale
/// handle led the run.
#[tokio::test]
async fn a_pipeline_run_never_mixes_handles_of_different_layouts() {
    let (_cluster, url, mut c) = started(&[]).await;
    let old = c.memopt_table("t").await.unwrap();
    connect(&url).await.batch_execute(SWAP).await.unwrap();
    let new = c.memopt_table("t").await.unwrap();

    let check = |what: &str, h: &str, got: Result<Vec<slipstream_pg::Row>, Error>| match h {
        "old" => match got {
            Err(e) => assert!(e.to_string().contains("resolve it again"), "{what}: {e}"),
            Ok(rows) => panic!(
                "{what}: the handle resolved before the rename was answered: {:?}",
                rows.iter()
                    .map(|r| r.columns().iter().map(|c| c.name().to_string()).collect())
                    .collect::<Vec<Vec<String>>>()
            ),
        },
        _ => {
            let rows = got.unwrap_or_else(|e| panic!("{what}: the new handle was refused: {e}"));
            assert_eq!(rows.len(), 1, "{what}");
            assert_eq!(rows[0].get::<_, &str>("a").unwrap(), "b", "{what}");
            assert_eq!(rows[0].get::<_, &str>("b").unwrap(), "a", "{what}");
        }
    };
    for order in [["new", "old"], ["old", "new"]] {
        let mut p = c.pipeline();
        let mut ops = Vec::new();
        for h in order {
            let table = if h == "old" { &old } else { &new };
            ops.push((h, p.memopt_get(table, &1i64).await.unwrap()));
        }
        for (h, op) in &ops {
            let got = p.process(op).await;
            check(&format!("{order:?}, {h}"), h, got);
        }
        drop(p.end().await);
    }
}

/// The values of `a` and `b` a lookup through `h` returns for key 1, or the refusal.
async fn a_b(c: &mut Client, h: &slipstream_pg::MemoptTable) -> Result<(String, String), Error> {
    let row = c.memopt_get(h, &1i64).await?.expect("key 1 exists");
    Ok((row.get("a")?, row.get("b")?))
}

fn refused(what: &str, got: Result<(String, String), Error>) {
    match got {
        Err(e) => assert_eq!(sqlstate(&e).as_deref(), Some("0A000"), "{what}: {e}"),
        Ok(v) => panic!("{what}: answered {v:?} through a handle of other columns"),
    }
}

fn answered(what: &str, got: Result<(String, String), Error>, a: &str, b: &str) {
    let got = got.unwrap_or_else(|e| panic!("{what}: refused: {e}"));
    assert_eq!(got, (a.to_string(), b.to_string()), "{what}");
}

/// Held. Promise: the backend's cached layout follows the table's columns inside transactions
/// too: DDL in the caller's own transaction refuses its old handle at once, and a rollback of
/// that DDL, whole or to a savepoint, makes the old handle work again and refuses a handle
/// resolved inside the rolled-back part. `DISCARD ALL` (the client resolves its functions
/// again) changes neither.
///
/// Steps on one connection, `t (k, a, b)` = `(1, 'a', 'b')`: (1) BEGIN, swap the names of `a`
/// and `b`, call through the handle resolved before: refused; ROLLBACK; call: answered
/// `('a', 'b')`. (2) BEGIN, SAVEPOINT, swap, resolve `inner` and call through it: answered
/// under the swapped names `('b', 'a')`; ROLLBACK TO the savepoint; `inner` is refused, and
/// (after another ROLLBACK TO) the old handle answered, in the same transaction. (3) DISCARD
/// ALL, then the old handle answers; another session swaps the names; refused.
#[tokio::test]
async fn the_cached_layout_follows_ddl_and_its_rollback_in_the_callers_transaction_holds() {
    let (_cluster, url, mut c) = started(&[]).await;
    let old = c.memopt_table("t").await.unwrap();
    answered("before", a_b(&mut c, &old).await, "a", "b");

    c.batch_execute(&format!("BEGIN; {SWAP}")).await.unwrap();
    refused(
        "after the swap in the caller's transaction",
        a_b(&mut c, &old).await,
    );
    c.batch_execute("ROLLBACK").await.unwrap();
    answered("after ROLLBACK", a_b(&mut c, &old).await, "a", "b");

    c.batch_execute(&format!("BEGIN; SAVEPOINT s; {SWAP}"))
        .await
        .unwrap();
    let inner = c.memopt_table("t").await.unwrap();
    answered(
        "inner, in the savepoint",
        a_b(&mut c, &inner).await,
        "b",
        "a",
    );
    c.batch_execute("ROLLBACK TO s").await.unwrap();
    refused("inner, after ROLLBACK TO", a_b(&mut c, &inner).await);
    c.batch_execute("ROLLBACK TO s").await.unwrap();
    answered("old, after ROLLBACK TO", a_b(&mut c, &old).await, "a", "b");
    c.batch_execute("COMMIT").await.unwrap();
    answered("old, after COMMIT", a_b(&mut c, &old).await, "a", "b");

    c.batch_execute("DISCARD ALL").await.unwrap();
    answered("old, after DISCARD ALL", a_b(&mut c, &old).await, "a", "b");
    connect(&url).await.batch_execute(SWAP).await.unwrap();
    refused("old, after DISCARD ALL and a swap", a_b(&mut c, &old).await);
    let new = c.memopt_table("t").await.unwrap();
    answered("resolved again", a_b(&mut c, &new).await, "b", "a");
}

/// Held. Promise: a call that waits for the table's lock held by a prepared transaction that
/// renames columns is checked against the columns that transaction committed.
///
/// Steps: C resolves `t`; D begins, swaps the names of `a` and `b`, and `PREPARE TRANSACTION`s;
/// C calls through its handle and waits for the lock (seen in `pg_stat_activity`); D runs
/// `COMMIT PREPARED`. C's call is refused (within 10 s), and a handle resolved again answers
/// under the new names.
#[tokio::test]
async fn a_call_waiting_behind_a_prepared_rename_is_refused_holds() {
    let (_cluster, url, mut c) = started(&[("max_prepared_transactions", "2")]).await;
    let old = c.memopt_table("t").await.unwrap();
    answered("before", a_b(&mut c, &old).await, "a", "b");
    let pid = c.backend_pid();

    let mut d = connect(&url).await;
    d.batch_execute(&format!("BEGIN; {SWAP}; PREPARE TRANSACTION 'swap'"))
        .await
        .unwrap();
    let call = tokio::spawn(async move {
        let got = a_b(&mut c, &old).await;
        (c, got)
    });
    assert!(
        waits_for_a_lock(&mut d, pid).await,
        "the call never waited for the prepared transaction's lock"
    );
    d.batch_execute("COMMIT PREPARED 'swap'").await.unwrap();
    let (mut c, got) = tokio::time::timeout(std::time::Duration::from_secs(10), call)
        .await
        .expect("the call did not answer within 10 s of COMMIT PREPARED")
        .unwrap();
    refused("the call that waited", got);
    let new = c.memopt_table("t").await.unwrap();
    answered("resolved again", a_b(&mut c, &new).await, "b", "a");
}

/// Held. Promise: `memopt.columns` answers only for a table the caller may read, and refuses
/// anything else with an error naming it, never an internal error or another relation's
/// columns.
///
/// Steps: as superuser, `memopt.columns` of a view, the primary key's index, a sequence, a
/// partitioned table, a composite type's relation, `t`'s TOAST table, a dropped table's OID and
/// OID 0; as a role without privileges, of `t` (no SELECT), of a table in a schema it has no
/// USAGE on, and of `pg_authid`. Each is refused with the SQLSTATE below; `t` with SELECT
/// granted on every column answers, with the layout the owner gets.
#[tokio::test]
async fn memopt_columns_refuses_what_is_not_a_readable_table_holds() {
    let (cluster, _url, mut c) = started(&[]).await;
    c.batch_execute(
        "CREATE VIEW v AS SELECT * FROM t;
         CREATE SEQUENCE s;
         CREATE TABLE p (k int PRIMARY KEY) PARTITION BY RANGE (k);
         CREATE TYPE comp AS (x int);
         CREATE TABLE gone (k int);
         CREATE SCHEMA hidden;
         CREATE TABLE hidden.h (k int PRIMARY KEY);
         GRANT ALL ON hidden.h TO PUBLIC;
         CREATE ROLE nobody LOGIN;",
    )
    .await
    .unwrap();
    let gone: u32 = memopt_check::scalar(&mut c, "SELECT 'gone'::regclass::oid")
        .await
        .unwrap();
    c.batch_execute("DROP TABLE gone").await.unwrap();
    let toast: u32 = memopt_check::scalar(
        &mut c,
        "SELECT reltoastrelid::oid FROM pg_class WHERE oid = 't'::regclass",
    )
    .await
    .unwrap();
    let columns = |rel: String| format!("SELECT count(*) FROM memopt.columns({rel})");
    let cases = [
        ("'v'".to_string(), "42809"),
        ("'t_pkey'".to_string(), "42809"),
        ("'s'".to_string(), "42809"),
        ("'p'".to_string(), "42809"),
        (
            "(SELECT typrelid FROM pg_type WHERE typname = 'comp')::regclass".to_string(),
            "42809",
        ),
        (format!("{toast}::oid::regclass"), "42809"),
        (format!("{gone}::oid::regclass"), "42P01"),
        ("0::oid::regclass".to_string(), "42P01"),
    ];
    for (rel, want) in &cases {
        let e = c
            .query(&columns(rel.clone()), &[])
            .await
            .expect_err(&format!("memopt.columns({rel}) answered"));
        assert_eq!(sqlstate(&e).as_deref(), Some(*want), "{rel}: {e}");
    }

    let mut n = connect(&cluster.url_for("nobody", None)).await;
    for rel in ["'t'", "'hidden.h'", "'pg_authid'"] {
        let e = n
            .query(&columns(rel.to_string()), &[])
            .await
            .expect_err(&format!("nobody read memopt.columns({rel})"));
        assert_eq!(sqlstate(&e).as_deref(), Some("42501"), "{rel}: {e}");
    }
    c.batch_execute("GRANT SELECT (k, a, b) ON t TO nobody")
        .await
        .unwrap();
    let layout = "SELECT layout FROM memopt.columns('t') LIMIT 1";
    let theirs: i64 = memopt_check::scalar(&mut n, layout).await.unwrap();
    let ours: i64 = memopt_check::scalar(&mut c, layout).await.unwrap();
    assert_eq!(theirs, ours);
}

/// Promise: a handle resolved once the extension is 1.1 is checked, also on a connection that
/// first used memopt 1.0 (a pooled connection outlives an `ALTER EXTENSION memopt UPDATE`).
///
/// Steps: memopt 1.0; C resolves `t` (the client resolves the 1.0 functions) and looks key 1
/// up. `ALTER EXTENSION memopt UPDATE` (to 1.1). C resolves `t` again (`after`); another
/// session swaps the names of `a` and `b`; C calls through `after`.
///
/// Before the fix the call was answered with `a`'s value as `b` and `b`'s as `a`: the
/// connection kept the function OIDs it resolved on 1.0, so `memopt_table` read the columns
/// from the catalog with no layout and every call went to the unchecked two-argument form.
#[tokio::test]
async fn a_handle_resolved_after_the_update_to_1_1_is_checked_on_a_connection_from_1_0() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let url = cluster.url();
    let mut c = connect(&url).await;
    c.batch_execute(&SETUP.replace(
        "CREATE EXTENSION IF NOT EXISTS memopt;",
        "CREATE EXTENSION memopt VERSION '1.0';",
    ))
    .await
    .unwrap();
    let before = c.memopt_table("t").await.unwrap();
    answered("on 1.0", a_b(&mut c, &before).await, "a", "b");

    c.batch_execute("ALTER EXTENSION memopt UPDATE TO '1.1'")
        .await
        .unwrap();
    let after = c.memopt_table("t").await.unwrap();
    answered("after the update", a_b(&mut c, &after).await, "a", "b");
    connect(&url).await.batch_execute(SWAP).await.unwrap();
    refused(
        "resolved after the update, then a swap",
        a_b(&mut c, &after).await,
    );
    let again = c.memopt_table("t").await.unwrap();
    answered("resolved again", a_b(&mut c, &again).await, "b", "a");
}

/// Held. Promise: in a pipeline block, in either error mode, a refused run of lookups through
/// a stale handle fails each of its lookups with the refusal and nothing else: the statements
/// around it and a lookup through a handle resolved again are answered, and the connection
/// stays usable.
///
/// Steps: C resolves `t` (`old`), another session swaps `a` and `b`, C resolves `new`. One
/// block per mode queues `SELECT 1`, two `memopt_get` through `old` (one coalesced run),
/// `SELECT 2`, `memopt_get` through `new`, `memopt_get_many` through `old`, `SELECT 3`.
#[tokio::test]
async fn a_refused_run_mid_block_fails_only_its_lookups_holds() {
    use slipstream_pg::{PipelineMode, PipelineOptions};
    let (_cluster, url, mut c) = started(&[]).await;
    let old = c.memopt_table("t").await.unwrap();
    connect(&url).await.batch_execute(SWAP).await.unwrap();
    let new = c.memopt_table("t").await.unwrap();

    for mode in [PipelineMode::ContinueOnError, PipelineMode::AbortOnError] {
        let mut p = c.pipeline_with(PipelineOptions::new().mode(mode));
        let s1 = p.query("SELECT 1", &[]).await.unwrap();
        let o1 = p.memopt_get(&old, &1i64).await.unwrap();
        let o2 = p.memopt_get(&old, &1i64).await.unwrap();
        let s2 = p.query("SELECT 2", &[]).await.unwrap();
        let n1 = p.memopt_get(&new, &1i64).await.unwrap();
        let om = p.memopt_get_many(&old, &[1i64]).await.unwrap();
        let s3 = p.query("SELECT 3", &[]).await.unwrap();
        for (i, s) in [(1, &s1), (2, &s2), (3, &s3)] {
            let rows = p
                .process(s)
                .await
                .unwrap_or_else(|e| panic!("{mode:?}: SELECT {i}: {e}"));
            assert_eq!(rows[0].get::<_, i32>(0).unwrap(), i, "{mode:?}");
        }
        for (what, op) in [
            ("first of run", &o1),
            ("second of run", &o2),
            ("get_many", &om),
        ] {
            match p.process(op).await {
                Err(e) => assert_eq!(
                    sqlstate(&e).as_deref(),
                    Some("0A000"),
                    "{mode:?}: {what}: {e}"
                ),
                Ok(rows) => panic!(
                    "{mode:?}: {what} through the old handle answered {} rows",
                    rows.len()
                ),
            }
        }
        let rows = p
            .process(&n1)
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: new: {e}"));
        assert_eq!(rows[0].get::<_, &str>("a").unwrap(), "b", "{mode:?}");
        drop(p.end().await);
        answered("after the block", a_b(&mut c, &new).await, "b", "a");
    }
}

/// Promise: a handle resolved with a layout is never called unchecked: when the extension is
/// dropped and created again at 1.0 (no three-argument forms), a call through it fails with
/// "resolve it again" rather than decode under the names it was resolved with.
///
/// Steps: memopt 1.1; C resolves `t` and looks key 1 up. `DROP EXTENSION memopt CASCADE`,
/// `CREATE EXTENSION memopt VERSION '1.0'`, `enable_read('t')`; another session swaps the
/// names of `a` and `b`; C calls through its handle.
///
/// Before the fix the call was answered with `a`'s value as `b` and `b`'s as `a`: the client
/// resolved the functions again after 42883 (the old OIDs were gone), found only the
/// two-argument forms and called them for the handle, unchecked.
#[tokio::test]
async fn a_handle_with_a_layout_is_not_called_unchecked_after_a_downgrade_to_1_0() {
    let (_cluster, url, mut c) = started(&[]).await;
    let old = c.memopt_table("t").await.unwrap();
    answered("on 1.1", a_b(&mut c, &old).await, "a", "b");
    c.batch_execute(
        "DROP EXTENSION memopt CASCADE;
         CREATE EXTENSION memopt VERSION '1.0';
         SELECT memopt.enable_read('t');",
    )
    .await
    .unwrap();
    connect(&url).await.batch_execute(SWAP).await.unwrap();
    match a_b(&mut c, &old).await {
        Err(e) => assert!(e.to_string().contains("resolve it again"), "{e}"),
        Ok(v) => panic!("answered {v:?} unchecked through a handle resolved on 1.1"),
    }
    let again = c.memopt_table("t").await.unwrap();
    answered("resolved again on 1.0", a_b(&mut c, &again).await, "b", "a");
}

/// Held. Promise: DDL that leaves every live column's number, name, type and typmod as they
/// were is not refused, and the values served after it are the normal plan's: a rewrite of
/// `a` to the same type with `USING upper(a)` (new values, same layout) on a warm store, a
/// collation change of `b`, a value added to an enum column's type, a constraint added to a
/// domain column's type, and an index.
///
/// Steps: `t (k, a text, b text, e mood, d posint)`, key 1, looked up until the store serves
/// it; then each DDL from another session, and after each a call through the handle resolved
/// first, compared with `SELECT * FROM t WHERE k = 1` read as text.
#[tokio::test]
async fn ddl_that_keeps_the_columns_is_not_refused_and_serves_new_values_holds() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let url = cluster.url();
    let mut c = connect(&url).await;
    c.batch_execute(
        "CREATE EXTENSION memopt;
         CREATE TYPE mood AS ENUM ('ok');
         CREATE DOMAIN posint AS int;
         CREATE TABLE t (k bigint PRIMARY KEY, a text, b text, e mood, d posint);
         INSERT INTO t VALUES (1, 'a', 'b', 'ok', 1);
         SELECT memopt.enable_read('t');",
    )
    .await
    .unwrap();
    let h = c.memopt_table("t").await.unwrap();
    let hits = "SELECT hits FROM memopt.stats WHERE \"table\" = 't'::regclass";
    for _ in 0..3 {
        c.memopt_get(&h, &1i64).await.unwrap().unwrap();
    }
    let served: i64 = memopt_check::scalar(&mut c, hits).await.unwrap();
    assert!(served > 0, "the store never served key 1");

    let mut d = connect(&url).await;
    for ddl in [
        "ALTER TABLE t ALTER COLUMN a TYPE text USING upper(a)",
        "ALTER TABLE t ALTER COLUMN b TYPE text COLLATE \"C\"",
        "ALTER TYPE mood ADD VALUE 'great'",
        "ALTER DOMAIN posint ADD CONSTRAINT positive CHECK (VALUE > 0)",
        "CREATE INDEX ON t (b)",
    ] {
        d.batch_execute(ddl).await.unwrap();
        for pass in 0..2 {
            let row = c
                .memopt_get(&h, &1i64)
                .await
                .unwrap_or_else(|e| panic!("{ddl}: refused: {e}"))
                .expect("key 1 exists");
            let got = (
                row.get::<_, String>("a").unwrap(),
                row.get::<_, String>("b").unwrap(),
            );
            let want = c
                .query_one("SELECT a, b FROM t WHERE k = 1", &[])
                .await
                .unwrap();
            let want = (
                want.get::<_, String>(0).unwrap(),
                want.get::<_, String>(1).unwrap(),
            );
            assert_eq!(got, want, "{ddl}, pass {pass}");
            assert_eq!(got.0, "A", "{ddl}, pass {pass}");
        }
    }
}

/// Held. Promise: a call in a transaction that holds the table's lock while another session's
/// DDL waits for it is answered as that transaction's `SELECT` would be, and refused once the
/// DDL committed; a column dropped and added again inside the caller's transaction is seen by
/// a handle resolved in it, which still works after the commit.
///
/// Steps: C begins and calls through `h`; D drops `a` and adds it again, and waits for C's
/// lock (seen in `pg_stat_activity`); C calls again (answered `('a', 'b')`) and commits; D
/// finishes (within 10 s); C's call through `h` is refused. C begins, drops `b` and adds it
/// again with a default, resolves `inner` and calls through it (the new `b`), commits, and
/// calls through `inner` again (answered) and `h` (refused).
#[tokio::test]
async fn a_lock_holding_transaction_and_ddl_in_the_callers_transaction_holds() {
    let (_cluster, url, mut c) = started(&[]).await;
    let h = c.memopt_table("t").await.unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    answered("in C's transaction", a_b(&mut c, &h).await, "a", "b");

    let mut d = connect(&url).await;
    let d_pid = d.backend_pid();
    let ddl = tokio::spawn(async move {
        d.batch_execute(
            "ALTER TABLE t DROP COLUMN a; ALTER TABLE t ADD COLUMN a text DEFAULT 'new a'",
        )
        .await
    });
    let mut watch = connect(&url).await;
    assert!(
        waits_for_a_lock(&mut watch, d_pid).await,
        "the DDL never waited for C's lock"
    );
    answered("while the DDL waits", a_b(&mut c, &h).await, "a", "b");
    c.batch_execute("COMMIT").await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), ddl)
        .await
        .expect("the DDL did not finish within 10 s of C's commit")
        .unwrap()
        .unwrap();
    refused("after the DDL committed", a_b(&mut c, &h).await);

    c.batch_execute(
        "BEGIN; ALTER TABLE t DROP COLUMN b; ALTER TABLE t ADD COLUMN b text DEFAULT 'new b'",
    )
    .await
    .unwrap();
    let inner = c.memopt_table("t").await.unwrap();
    answered(
        "inner, in the transaction",
        a_b(&mut c, &inner).await,
        "new a",
        "new b",
    );
    c.batch_execute("COMMIT").await.unwrap();
    answered(
        "inner, after COMMIT",
        a_b(&mut c, &inner).await,
        "new a",
        "new b",
    );
    refused("h, after both", a_b(&mut c, &h).await);
}

/// Promise: resolving a table by name finds the table the name has once the resolve holds its
/// lock, as `SELECT * FROM t` does (PostgreSQL looks a name up again after waiting for its
/// lock): a table dropped and created again under the name while the resolve waited is the
/// one resolved, not an error.
///
/// Steps: D begins, drops `t`, creates it again with other values and enables it, and holds
/// the transaction open; C calls `memopt_table("t")`, which waits for the lock (seen in
/// `pg_stat_activity`); D commits. C's resolve must answer (within 10 s) with the new table,
/// and a lookup through it returns the new row.
///
/// Before the fix the resolve failed with 42P01 ("relation with OID ... does not exist"): the
/// name was looked up before the lock, `memopt.columns` waited for the old OID's lock and
/// then found no relation.
#[tokio::test]
async fn a_resolve_that_waited_behind_drop_and_create_finds_the_new_table() {
    let (_cluster, url, mut c) = started(&[]).await;
    let pid = c.backend_pid();
    let mut d = connect(&url).await;
    d.batch_execute(
        "BEGIN; DROP TABLE t;
         CREATE TABLE t (k bigint PRIMARY KEY, a text, b text);
         INSERT INTO t VALUES (1, 'new a', 'new b');
         SELECT memopt.enable_read('t');",
    )
    .await
    .unwrap();
    let resolve = tokio::spawn(async move {
        let got = c.memopt_table("t").await;
        (c, got)
    });
    let mut watch = connect(&url).await;
    assert!(
        waits_for_a_lock(&mut watch, pid).await,
        "the resolve never waited for the lock"
    );
    d.batch_execute("COMMIT").await.unwrap();
    let (mut c, got) = tokio::time::timeout(std::time::Duration::from_secs(10), resolve)
        .await
        .expect("the resolve did not answer within 10 s of the commit")
        .unwrap();
    let t = got.unwrap_or_else(|e| panic!("the resolve failed: {e}"));
    answered("the new table", a_b(&mut c, &t).await, "new a", "new b");
}

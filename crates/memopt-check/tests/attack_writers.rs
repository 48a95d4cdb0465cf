//! Attacks on memopt by writers that bypass ordinary triggers or come from elsewhere: the
//! logical replication apply worker (which runs with `session_replication_role = replica`)
//! and foreign-key actions fired from a parent table (`ON DELETE CASCADE`, `SET NULL`, and
//! `ON UPDATE CASCADE` moving an enabled table's primary key), and catalog moves after which
//! the table is written by other paths (`REINDEX CONCURRENTLY`, `SET TABLESPACE`, `SET
//! SCHEMA`, `ATTACH PARTITION` and writes through the new parent). The promise (docs/memopt.md,
//! "Why a hit is never wrong"): memopt never returns a row the normal plan would not. Each
//! test warms the store first (every key read twice, and the hits counted) so that a stale
//! entry, if one were left, would be served; then compares every key with the normal plan.

use std::time::Duration;

use slipstream_pg::Client;

async fn connect(url: &str) -> Client {
    slipstream_pg::connect(url).await.unwrap()
}

/// The rows of `table` for keys `keys` as text, each looked up alone (so memopt may serve it),
/// with memopt on or off. `row(t.*)`, not the whole-row `t::text`, which memopt does not serve.
async fn rows(c: &mut Client, table: &str, keys: &[i32], memopt: bool) -> Vec<String> {
    let setting = if memopt { "on" } else { "off" };
    c.batch_execute(&format!("SET memopt.enabled = {setting}"))
        .await
        .unwrap();
    let mut out = Vec::new();
    for &k in keys {
        let row = c
            .query_opt(
                &format!("SELECT row({table}.*)::text FROM {table} WHERE k = $1"),
                &[&k],
            )
            .await
            .unwrap();
        out.push(match row {
            Some(r) => r.get(0).unwrap(),
            None => format!("no row {k}"),
        });
    }
    c.batch_execute("SET memopt.enabled = on").await.unwrap();
    out
}

/// Hits on `table` so far.
async fn hits(c: &mut Client, table: &str) -> i64 {
    memopt_check::scalar::<i64>(
        c,
        &format!("SELECT hits FROM memopt.stats WHERE \"table\" = '{table}'::regclass"),
    )
    .await
    .unwrap()
}

/// Reads every key twice through memopt and asserts the second pass hit, so the store holds
/// entries a later write must not leave stale.
/// The reads are plain literal queries (a fresh plan each), so that they measure the store
/// rather than the plan a cached prepared statement may hold.
async fn warm(c: &mut Client, table: &str, keys: &[i32]) {
    let reads: String = keys
        .iter()
        .map(|k| format!("SELECT * FROM {table} WHERE k = {k};"))
        .collect();
    c.batch_execute(&reads).await.unwrap();
    let before = hits(c, table).await;
    c.batch_execute(&reads).await.unwrap();
    if hits(c, table).await <= before {
        let stats: String = memopt_check::scalar(
            c,
            &format!("SELECT s::text FROM memopt.stats s WHERE \"table\" = '{table}'::regclass"),
        )
        .await
        .unwrap();
        panic!("the store served none of {table}'s keys: the attack would prove nothing ({stats})");
    }
}

/// Holds. The apply worker of a subscription writes with `session_replication_role =
/// replica`, under which ordinary triggers do not fire.
///
/// Steps: database `sub` of the same cluster subscribes to table `lr` of `postgres`; `lr` is
/// enabled in `sub` and its rows are read until served from the store. The publisher updates
/// key 1, deletes key 2 and moves key 3 to 20; once the subscriber shows the delete through the
/// normal plan, every key is compared with memopt on and off.
#[tokio::test]
async fn logical_replication_apply_never_leaves_a_stale_row() {
    let cluster = memopt_check::cluster(&[("wal_level", "logical")]).unwrap();
    let url = cluster.url();
    let mut publisher = connect(&url).await;
    // One statement a call: a slot cannot be created in a transaction that wrote, nor a
    // database inside a transaction block.
    for sql in [
        "CREATE TABLE lr (k int PRIMARY KEY, v text)",
        "INSERT INTO lr SELECT g, 'v' || g FROM generate_series(1, 5) g",
        "CREATE PUBLICATION pub FOR TABLE lr",
        "SELECT pg_create_logical_replication_slot('h62_slot', 'pgoutput')",
        "CREATE DATABASE sub",
    ] {
        publisher.batch_execute(sql).await.unwrap();
    }
    let sub_url = format!("postgres://postgres@127.0.0.1:{}/sub", cluster.port());
    let mut s = connect(&sub_url).await;
    s.batch_execute(
        "CREATE EXTENSION memopt;
         CREATE TABLE lr (k int PRIMARY KEY, v text);
         SELECT memopt.enable_read('lr');",
    )
    .await
    .unwrap();
    s.batch_execute(&format!(
        "CREATE SUBSCRIPTION s CONNECTION '{} dbname=postgres' PUBLICATION pub
             WITH (create_slot = false, slot_name = 'h62_slot');",
        cluster.socket_conninfo().replace(" dbname=postgres", "")
    ))
    .await
    .unwrap();
    let keys = [1, 2, 3, 4, 5, 20];
    for _ in 0..300 {
        if memopt_check::scalar::<i64>(&mut s, "SELECT count(*) FROM lr")
            .await
            .unwrap()
            == 5
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    warm(&mut s, "lr", &keys).await;

    publisher
        .batch_execute(
            "UPDATE lr SET v = 'applied' WHERE k = 1;
             DELETE FROM lr WHERE k = 2;
             UPDATE lr SET k = 20 WHERE k = 3;",
        )
        .await
        .unwrap();
    let mut applied = false;
    for _ in 0..300 {
        s.batch_execute("SET memopt.enabled = off").await.unwrap();
        let n = memopt_check::scalar::<i64>(&mut s, "SELECT count(*) FROM lr WHERE k = 20")
            .await
            .unwrap();
        s.batch_execute("SET memopt.enabled = on").await.unwrap();
        if n == 1 {
            applied = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        applied,
        "the subscriber did not apply the changes within 30 s"
    );
    let normal = rows(&mut s, "lr", &keys, false).await;
    assert_eq!(normal[0], "(1,applied)");
    assert_eq!(rows(&mut s, "lr", &keys, true).await, normal);
    s.batch_execute("DROP SUBSCRIPTION s").await.unwrap();
}

/// Holds. Foreign-key actions run as internal triggers of the parent's write, inside the
/// same statement, and write the enabled child as the table owner would.
///
/// Steps: `c` (k, pid REFERENCES p ON DELETE CASCADE ON UPDATE CASCADE), `n` (pid REFERENCES p
/// ON DELETE SET NULL) and `kc` (k REFERENCES p ON UPDATE CASCADE ON DELETE CASCADE: its
/// primary key itself follows the parent) are enabled and warmed; then the parent deletes key 1
/// and moves keys 2 and 3 to 12 and 13, and every key of each child is compared with the normal
/// plan. A last write comes from a PL/pgSQL EXCEPTION block whose subtransaction is rolled back
/// after the row was read inside it.
#[tokio::test]
async fn foreign_key_actions_and_aborted_subtransactions_never_leave_a_stale_row() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let mut c = connect(&cluster.url()).await;
    c.batch_execute(
        "CREATE EXTENSION memopt;
         CREATE TABLE p (id int PRIMARY KEY);
         INSERT INTO p SELECT g FROM generate_series(1, 5) g;
         CREATE TABLE c (k int PRIMARY KEY,
                         pid int REFERENCES p ON DELETE CASCADE ON UPDATE CASCADE, v text);
         INSERT INTO c SELECT g, g, 'v' || g FROM generate_series(1, 5) g;
         CREATE TABLE n (k int PRIMARY KEY,
                         pid int REFERENCES p ON DELETE SET NULL ON UPDATE SET NULL, v text);
         INSERT INTO n SELECT g, g, 'v' || g FROM generate_series(1, 5) g;
         CREATE TABLE kc (k int PRIMARY KEY REFERENCES p ON UPDATE CASCADE ON DELETE CASCADE,
                          v text);
         INSERT INTO kc SELECT g, 'v' || g FROM generate_series(1, 5) g;
         SELECT memopt.enable_read('c'), memopt.enable_read('n'), memopt.enable_read('kc');",
    )
    .await
    .unwrap();
    let keys = [1, 2, 3, 4, 5, 12, 13];
    for t in ["c", "n", "kc"] {
        warm(&mut c, t, &keys).await;
    }
    c.batch_execute(
        "DELETE FROM p WHERE id = 1;
         UPDATE p SET id = 12 WHERE id = 2;
         UPDATE p SET id = 13 WHERE id = 3;",
    )
    .await
    .unwrap();
    for t in ["c", "n", "kc"] {
        let normal = rows(&mut c, t, &keys, false).await;
        assert_eq!(rows(&mut c, t, &keys, true).await, normal, "table {t}");
    }
    assert_eq!(
        rows(&mut c, "kc", &[3, 13], false).await,
        ["no row 3", "(13,v3)"]
    );

    warm(&mut c, "c", &[4]).await;
    c.batch_execute(
        "DO $$ BEGIN
             BEGIN
                 UPDATE c SET v = 'aborted' WHERE k = 4;
                 PERFORM * FROM c WHERE k = 4;
                 PERFORM * FROM c WHERE k = 4;
                 RAISE EXCEPTION 'roll the subtransaction back';
             EXCEPTION WHEN raise_exception THEN NULL;
             END;
         END $$;",
    )
    .await
    .unwrap();
    assert_eq!(rows(&mut c, "c", &[4], false).await, ["(4,4,v4)"]);
    assert_eq!(rows(&mut c, "c", &[4], true).await, ["(4,4,v4)"]);
}

/// Holds. Catalog moves that change an enabled table's storage, index or place without the
/// DDL memopt fences by name: `REINDEX CONCURRENTLY` (the primary key's index swapped for a
/// new OID), `SET TABLESPACE`, a move to another schema, and `ATTACH PARTITION`, after which
/// the table is written through its new parent (a cross-partition `UPDATE` moving a key out,
/// a `MERGE`) and emptied by the parent's `TRUNCATE`.
///
/// Steps: each move happens on a warmed store; then keys are written and every key compared
/// with the normal plan, through SQL and through `memopt.get`.
#[tokio::test]
async fn catalog_moves_then_writes_never_leave_a_stale_row() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let mut c = connect(&cluster.url()).await;
    memopt_check::table(&mut c, "t", 5).await.unwrap();
    let keys = [1, 2, 3, 4, 5, 150];
    let tablespace = cluster.data_dir().join("h62_ts");
    std::fs::create_dir_all(&tablespace).unwrap();
    // The server runs as `postgres`; the directory must be its own.
    let status = std::process::Command::new("chown")
        .arg("postgres")
        .arg(&tablespace)
        .status()
        .unwrap();
    assert!(status.success());
    c.batch_execute(&format!(
        "CREATE TABLESPACE h62_ts LOCATION '{}'",
        tablespace.display()
    ))
    .await
    .unwrap();
    for (label, moves, write) in [
        (
            "REINDEX CONCURRENTLY",
            "REINDEX TABLE CONCURRENTLY t",
            "UPDATE t SET v = 'reindexed' WHERE k = 1",
        ),
        (
            "SET TABLESPACE",
            "ALTER TABLE t SET TABLESPACE h62_ts; ALTER INDEX t_pkey SET TABLESPACE h62_ts",
            "UPDATE t SET v = 'moved' WHERE k = 2",
        ),
        (
            "SET SCHEMA",
            "CREATE SCHEMA s; ALTER TABLE t SET SCHEMA s; ALTER TABLE s.t SET SCHEMA public",
            "DELETE FROM t WHERE k = 5",
        ),
        (
            "ATTACH PARTITION, cross-partition UPDATE",
            "CREATE TABLE pt (k int PRIMARY KEY, v text) PARTITION BY RANGE (k);
             ALTER TABLE pt ATTACH PARTITION t FOR VALUES FROM (0) TO (100);
             CREATE TABLE pt2 PARTITION OF pt FOR VALUES FROM (100) TO (200);",
            "UPDATE pt SET k = 150 WHERE k = 3",
        ),
        (
            "MERGE through the parent",
            "",
            "MERGE INTO pt USING (SELECT 4 AS k) s ON pt.k = s.k
                 WHEN MATCHED THEN UPDATE SET v = 'merged'",
        ),
        ("TRUNCATE of the parent", "", "TRUNCATE pt"),
    ] {
        warm(&mut c, "t", &[1, 2, 3, 4]).await;
        if !moves.is_empty() {
            c.batch_execute(moves).await.unwrap();
        }
        c.batch_execute(write).await.unwrap();
        let normal = rows(&mut c, "t", &keys, false).await;
        assert_eq!(
            rows(&mut c, "t", &keys, true).await,
            normal,
            "after {label}"
        );
        assert_eq!(
            rows(&mut c, "t", &keys, true).await,
            normal,
            "after {label}, again"
        );
        for &k in &keys {
            let got: Option<String> = c
                .query_one("SELECT memopt.get('t', $1::bigint)::text", &[&i64::from(k)])
                .await
                .unwrap()
                .get(0)
                .unwrap();
            let want = normal[keys.iter().position(|&x| x == k).unwrap()].clone();
            assert_eq!(
                got.unwrap_or_else(|| format!("no row {k}")),
                want,
                "memopt.get of key {k} after {label}"
            );
        }
        if label.starts_with("TRUNCATE") {
            break;
        }
        c.batch_execute("INSERT INTO t VALUES (5, 'v5') ON CONFLICT DO NOTHING")
            .await
            .unwrap();
    }
}

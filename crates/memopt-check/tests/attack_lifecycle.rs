//! Attacks on memopt's lifecycle: a database copied from a template that has memopt enabled
//! and warmed, a dump restored by another superuser than the dump's, and the extension dropped
//! and created again under a live client connection. The promise (docs/memopt.md): a hit is
//! never a row the normal plan would not return; the store is per cluster, the extension per
//! database.

use slipstream_pg::Client;
use slipstream_testkit::Cluster;

const ROWS: i64 = 40;

async fn connect(url: &str) -> Client {
    slipstream_pg::connect(url).await.unwrap()
}

fn url_of(cluster: &Cluster, user: &str, db: &str) -> String {
    format!("postgres://{user}@127.0.0.1:{}/{db}", cluster.port())
}

/// Reads every key of `t` three ways (all rows without a key restriction, which memopt never
/// serves, as the truth; `SELECT v FROM t WHERE k = $1`, twice, so that the second may be a hit; and
/// `Client::memopt_get`) and panics on any difference. Returns the hits counted meanwhile,
/// so that a caller can tell the store was used at all.
async fn compare_every_key(c: &mut Client, what: &str) -> i64 {
    let before = hits(c).await;
    let table = c.memopt_table("t").await.unwrap();
    // No key restriction: memopt never serves this, whatever plan reads it.
    let truth: Vec<(i64, String)> = c
        .query("SELECT k::bigint, v FROM t ORDER BY k", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, i64>(0).unwrap(), r.get::<_, String>(1).unwrap()))
        .collect();
    assert_eq!(truth.len() as i64, ROWS, "{what}: rows missing from t");
    for (k, v) in &truth {
        for round in 0..2 {
            let got: Option<String> = c
                .query_opt("SELECT v FROM t WHERE k = $1::bigint", &[k])
                .await
                .unwrap()
                .map(|r| r.get(0).unwrap());
            assert_eq!(
                got.as_deref(),
                Some(v.as_str()),
                "{what}: SELECT of key {k}, round {round}"
            );
        }
        let fast = c.memopt_get(&table, k).await.unwrap().expect("a row");
        assert_eq!(
            fast.get::<_, &str>("v").unwrap(),
            v,
            "{what}: memopt.get of key {k}"
        );
    }
    hits(c).await - before
}

/// Hits of every table of the database so far.
async fn hits(c: &mut Client) -> i64 {
    memopt_check::scalar(c, "SELECT coalesce(sum(hits), 0)::bigint FROM memopt.stats")
        .await
        .unwrap()
}

/// Promise: the store is per cluster and keyed by database; a database created FROM a
/// template that has a table enabled and warmed is a new database, whose lookups are never
/// served the template's rows, before or after either side writes.
///
/// Steps: in `a`, `t` (40 rows) enabled, populated and read (hits); `CREATE DATABASE d
/// TEMPLATE a`; `a` updates every row, `d` updates every other row to other values; every key
/// of each database is read through SELECT and `memopt.get`, twice, against the whole table read without a key.
///
/// Held (helper h95): entries and registry slots carry the database's OID, so `d`'s first
/// lookup claims a slot of its own and fills it from its own heap.
#[tokio::test]
async fn a_database_copied_from_a_warmed_template_serves_only_its_own_rows() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    cluster.psql("CREATE DATABASE a").unwrap();
    {
        let mut a = connect(&url_of(&cluster, "postgres", "a")).await;
        memopt_check::table(&mut a, "t", ROWS as i32).await.unwrap();
        memopt_check::populate(&mut a, "t").await.unwrap();
        assert!(compare_every_key(&mut a, "template before the copy").await > 0);
    }
    // CREATE DATABASE needs the template without sessions: the one above has ended.
    let mut copied = false;
    for _ in 0..100 {
        if cluster.psql("CREATE DATABASE d TEMPLATE a").is_ok() {
            copied = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(copied, "CREATE DATABASE d TEMPLATE a failed for 10 s");
    let mut a = connect(&url_of(&cluster, "postgres", "a")).await;
    let mut d = connect(&url_of(&cluster, "postgres", "d")).await;
    a.batch_execute("UPDATE t SET v = v || '-a'").await.unwrap();
    d.batch_execute("UPDATE t SET v = v || '-d' WHERE k % 2 = 0")
        .await
        .unwrap();
    assert!(compare_every_key(&mut d, "copy").await > 0);
    assert!(compare_every_key(&mut a, "template after the copy").await > 0);
    let odd: String = memopt_check::scalar(&mut d, "SELECT v FROM t WHERE k = 3")
        .await
        .unwrap();
    assert_eq!(odd, "v3");
}

/// Promise: pg_dump / pg_restore of a database using memopt works, and the restored tables
/// serve exactly their rows. `pg_restore` by another superuser than the dump's must work too:
/// the dump creates schema `memopt`, gives it to its old owner, then runs `CREATE EXTENSION`.
///
/// Steps: in `a`, `t` enabled, populated and read; `pg_dump -Fc a`; a second superuser
/// `admin` restores it into `r` (owned by `admin`) with `--exit-on-error`; in `r`, `t` must be
/// enabled and every key read through SELECT and `memopt.get` against the whole table read without a key.
///
/// Before the fix (30e4259): the restore stopped at `CREATE EXTENSION` with 42501 ("schema
/// memopt belongs to role postgres, not to admin"); without `--exit-on-error` it went on and
/// every `CREATE TRIGGER ... memopt.sync_row()` failed, leaving the tables not enabled.
#[tokio::test]
async fn a_dump_restored_by_another_superuser_serves_exactly_its_rows() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    cluster.psql("CREATE DATABASE a").unwrap();
    cluster.psql("CREATE ROLE admin SUPERUSER LOGIN").unwrap();
    cluster.psql("CREATE DATABASE r OWNER admin").unwrap();
    let mut a = connect(&url_of(&cluster, "postgres", "a")).await;
    memopt_check::table(&mut a, "t", ROWS as i32).await.unwrap();
    memopt_check::populate(&mut a, "t").await.unwrap();
    assert!(compare_every_key(&mut a, "dumped database").await > 0);

    let port = cluster.port().to_string();
    let dump = cluster
        .install()
        .command("pg_dump")
        .args(["-Fc", "-h", "127.0.0.1", "-p", &port, "-U", "postgres", "a"])
        .output()
        .expect("run pg_dump");
    assert!(
        dump.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let mut restore = cluster
        .install()
        .command("pg_restore")
        .args([
            "--exit-on-error",
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "admin",
            "-d",
            "r",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run pg_restore");
    {
        use std::io::Write;
        let mut stdin = restore.stdin.take().unwrap();
        stdin.write_all(&dump.stdout).unwrap();
    }
    let out = restore.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "pg_restore as another superuser failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut r = connect(&url_of(&cluster, "postgres", "r")).await;
    let enabled: bool = memopt_check::scalar(&mut r, "SELECT memopt.is_enabled('t')")
        .await
        .unwrap();
    assert!(enabled, "the restored t is not enabled");
    // The dumped database changes after the dump; the restored one must not see it.
    a.batch_execute("UPDATE t SET v = 'after the dump'")
        .await
        .unwrap();
    r.batch_execute("UPDATE t SET v = v || '-r' WHERE k % 3 = 0")
        .await
        .unwrap();
    assert!(compare_every_key(&mut r, "restored database").await > 0);
}

/// Promise (docs/memopt.md, Client notes): "a stale OID (the extension re-created) is resolved
/// again once outside a transaction block", and a hit is never a row the normal plan would not
/// return.
///
/// Steps: C resolves `t` and reads every key (hits). Another session runs `DROP EXTENSION
/// memopt CASCADE`, updates every row while memopt is gone (no trigger sees it), `CREATE
/// EXTENSION memopt` and `enable_read('t')`. C, on the same connection with its kept function
/// OIDs and handle, reads every key again through SELECT and `memopt_get`.
///
/// Held (helper h95): the stale OID fails with 42883 and is resolved again; the dropped
/// triggers emptied the table's entries, so no row from before the drop is served.
#[tokio::test]
async fn memopt_dropped_and_created_again_under_a_live_connection_serves_the_new_rows() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let mut c = connect(&cluster.url()).await;
    memopt_check::table(&mut c, "t", ROWS as i32).await.unwrap();
    assert!(compare_every_key(&mut c, "before the drop").await > 0);
    let table = c.memopt_table("t").await.unwrap();
    let mut other = connect(&cluster.url()).await;
    other
        .batch_execute(
            "DROP EXTENSION memopt CASCADE;
             UPDATE t SET v = v || '-while-dropped';
             CREATE EXTENSION memopt;
             SELECT memopt.enable_read('t');",
        )
        .await
        .unwrap();
    // Through the handle resolved before the drop, on the same connection.
    for k in 1..=ROWS {
        let row = c.memopt_get(&table, &k).await.unwrap().expect("a row");
        assert_eq!(
            row.get::<_, &str>("v").unwrap(),
            format!("v{k}-while-dropped")
        );
    }
    assert!(compare_every_key(&mut c, "after the drop").await > 0);
}

/// Promise: `ALTER EXTENSION memopt UPDATE` from 1.0 with an enabled, warmed table keeps every
/// answer right (the update adds functions, the triggers and the store stay); `DROP SCHEMA
/// memopt CASCADE` drops the extension and the table's sync triggers, its entries and, when it
/// commits, its registry slot, so that memopt created again starts the table afresh.
///
/// Steps: memopt 1.0; `t` enabled, populated, every key read (hits); rows updated; `ALTER
/// EXTENSION memopt UPDATE`; every key read; `DROP SCHEMA memopt CASCADE`; rows updated while
/// memopt is gone; `CREATE EXTENSION memopt`, `enable_read('t')`; every key read, and the
/// table's statistics are those reads' alone.
///
/// The update held (helper h95). Before d2770e7 the schema's drop left the slot: after
/// `enable_read` the table's `lookups` carried the old install's 240 on top of the new 120.
#[tokio::test]
async fn an_update_from_1_0_and_a_dropped_schema_keep_every_answer_right() {
    let cluster = memopt_check::cluster(&[]).unwrap();
    let mut c = connect(&cluster.url()).await;
    c.batch_execute("CREATE EXTENSION memopt VERSION '1.0'")
        .await
        .unwrap();
    memopt_check::table(&mut c, "t", ROWS as i32).await.unwrap();
    memopt_check::populate(&mut c, "t").await.unwrap();
    assert!(compare_every_key(&mut c, "memopt 1.0").await > 0);
    c.batch_execute("UPDATE t SET v = v || '-10' WHERE k % 2 = 1; ALTER EXTENSION memopt UPDATE")
        .await
        .unwrap();
    let version: String = memopt_check::scalar(
        &mut c,
        "SELECT extversion FROM pg_extension WHERE extname = 'memopt'",
    )
    .await
    .unwrap();
    assert_eq!(version, "1.1");
    assert!(compare_every_key(&mut c, "updated to 1.1").await > 0);

    // Each its own transaction: one that creates the triggers again before it commits keeps
    // the slot (enable_read drops and creates them in one).
    for sql in [
        "DROP SCHEMA memopt CASCADE",
        "UPDATE t SET v = v || '-gone'",
        "CREATE EXTENSION memopt",
        "SELECT memopt.enable_read('t')",
    ] {
        c.batch_execute(sql).await.unwrap();
    }
    let mut fresh = connect(&cluster.url()).await;
    assert!(compare_every_key(&mut fresh, "created again").await > 0);
    let lookups: i64 = memopt_check::scalar(
        &mut fresh,
        "SELECT lookups FROM memopt.stats WHERE \"table\" = 't'::regclass",
    )
    .await
    .unwrap();
    assert_eq!(
        lookups,
        3 * ROWS,
        "t's statistics carry lookups from before memopt was dropped"
    );
}

//! Attacks on memopt's promise (docs/memopt.md: "a hit is never wrong") with the key types the
//! differential fuzzer leaves out (it uses integer keys only): text under a deterministic ICU
//! collation, varchar, uuid, and a composite key of text, smallint and uuid, while writers
//! commit. The text keys take the shapes where a byte form could go wrong: the empty string,
//! trailing spaces, keys that differ only in case or only after a 300-byte common prefix,
//! non-ASCII, keys compressed inline by pglz, keys moved out of line to TOAST, and keys whose
//! row ends within a few bytes of `memopt.entry_size` on either side.
//!
//! Readers compare the scan and `memopt.get` with the normal plan (`memopt.enabled = off`) on
//! the same snapshot in every way a snapshot can be older than the newest commit: one
//! statement, a cursor fetched in pieces while writers commit (also `WITH HOLD`, fetched
//! after its transaction ends), a STABLE PL/pgSQL loop that sleeps between keys (one snapshot
//! for the whole loop), and a VOLATILE one (a snapshot per statement). Writers update, move
//! keys, delete, insert and upsert; some write inside a PL/pgSQL `EXCEPTION` block that rolls
//! back before the outer transaction commits, and some prepare a transaction that read the
//! table and wrote only another one and commit (or roll back) the prepared transaction from
//! a second session. The four tables share a pool of 1,024 entries, so fills evict, and a
//! chaos task empties (`drop_object`) and refills (`populate`) the tables meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slipstream_pg::Client;

/// Keys 1..=KEYS per table; half of them have a row at the start: 1,400 rows in all, more than
/// the pool's 1,024 entries.
const KEYS: i32 = 800;
/// Key comparisons (scan and normal plan, plus `memopt.get` where it applies) before the
/// readers stop.
const LOOKUPS: u64 = 120_000;
/// Random keys per reader operation.
const PER_READ: i32 = 120;

/// One enabled table: how its key is computed from an integer `X`, for reads and writes.
struct Table {
    name: &'static str,
    columns: &'static str,
    /// The WHERE clause for key X.
    cond: &'static str,
    /// The SET list that gives a row key X.
    set: &'static str,
    /// The key's values for an INSERT.
    values: &'static str,
    /// `memopt.get`'s call for key X, when the key has one column.
    get: Option<&'static str>,
}

const TABLES: [Table; 4] = [
    Table {
        name: "tx",
        columns: "k text COLLATE \"und-x-icu\" PRIMARY KEY, v text",
        cond: "k = kt(X)",
        set: "k = kt(X)",
        values: "kt(X)",
        get: Some("memopt.get('tx', kt(X))"),
    },
    Table {
        name: "vc",
        columns: "k varchar(3000) PRIMARY KEY, v text",
        cond: "k = kt(X)",
        set: "k = kt(X)",
        values: "kt(X)",
        get: Some("memopt.get('vc', kt(X))"),
    },
    Table {
        name: "uu",
        columns: "k uuid PRIMARY KEY, v text",
        cond: "k = ku(X)",
        set: "k = ku(X)",
        values: "ku(X)",
        get: Some("memopt.get('uu', ku(X))"),
    },
    Table {
        name: "cp",
        columns: "a text, b smallint, c uuid, v text, PRIMARY KEY (a, b, c)",
        cond: "a = kt(X) AND b = (X % 5)::int2 AND c = ku(X % 3)",
        set: "a = kt(X), b = (X % 5)::int2, c = ku(X % 3)",
        values: "kt(X), (X % 5)::int2, ku(X % 3)",
        get: None,
    },
];

/// The key shapes (seven, by `i % 7`), and uuids. PL/pgSQL, so that a key expression stays
/// one function call, which the scan serves (a CASE would not be).
const KEY_FUNCTIONS: &str = r#"
CREATE FUNCTION kt(i int) RETURNS text IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN
    RETURN CASE i % 7
        WHEN 0 THEN CASE WHEN i = 7 THEN '' ELSE 'k' || i END
        WHEN 1 THEN 'k' || i || repeat(' ', 1 + i % 3)
        -- 1,930..2,009 bytes of md5 hex: the row ends just under or over the entry's room,
        -- and the longest are moved out of line to TOAST.
        WHEN 2 THEN (SELECT left(string_agg(md5(i || '.' || g), ''), 1930 + i % 80)
                       FROM generate_series(1, 64) g)
        WHEN 3 THEN repeat('ab', 1000 + i % 100) || i   -- compressed inline by pglz
        WHEN 4 THEN repeat('y', 300) || chr(65 + i % 26) || i
        WHEN 5 THEN 'é' || i || 'ß'
        ELSE 'K' || i                                   -- 'k' || i but for the case
    END;
END $$;
CREATE FUNCTION ku(i int) RETURNS uuid IMMUTABLE LANGUAGE sql AS 'SELECT md5($1::text)::uuid';
CREATE TABLE journal (n bigint);
"#;

fn sql(template: &str, x: &str) -> String {
    template.replace('X', x)
}

async fn setup(c: &mut Client) {
    c.batch_execute("CREATE EXTENSION IF NOT EXISTS memopt;")
        .await
        .unwrap();
    c.batch_execute(KEY_FUNCTIONS).await.unwrap();
    for t in &TABLES {
        let n = t.name;
        let get = match t.get {
            Some(g) => sql(g, "$1") + "::text",
            None => format!("fast_{n}($1)"),
        };
        c.batch_execute(&format!(
            "CREATE TABLE {n} ({cols});
             INSERT INTO {n} SELECT {vals}, 'v' || g FROM generate_series(2, {KEYS}, 2) g;
             ANALYZE {n};
             SELECT memopt.enable_read('{n}');
             CREATE FUNCTION fast_{n}(int) RETURNS text STABLE LANGUAGE sql
                 AS $f$ SELECT row({n}.*)::text FROM {n} WHERE {cond} $f$;
             CREATE FUNCTION slow_{n}(int) RETURNS text STABLE LANGUAGE sql
                 SET memopt.enabled = off
                 AS $f$ SELECT row({n}.*)::text FROM {n} WHERE {cond} $f$;
             CREATE FUNCTION get_{n}(int) RETURNS text STABLE LANGUAGE sql
                 AS $f$ SELECT {get} $f$;
             -- One snapshot for the whole loop (the caller's), while writers commit.
             CREATE FUNCTION stable_loop_{n}(keys int[]) RETURNS int STABLE LANGUAGE plpgsql
             AS $f$
             DECLARE
                 i int;
                 bad int := 0;
                 r text;
             BEGIN
                 FOREACH i IN ARRAY keys LOOP
                     SELECT row({n}.*)::text INTO r FROM {n} WHERE {cond_i};
                     IF r IS DISTINCT FROM slow_{n}(i) OR get_{n}(i) IS DISTINCT FROM slow_{n}(i)
                     THEN
                         RAISE WARNING 'stable loop {n}: key % gave %, normal plan %',
                             i, r, slow_{n}(i);
                         bad := bad + 1;
                     END IF;
                     IF i % 8 = 0 THEN PERFORM pg_sleep(0.0005); END IF;
                 END LOOP;
                 RETURN bad;
             END $f$;
             -- A snapshot per statement; each comparison within one statement.
             CREATE FUNCTION volatile_loop_{n}(keys int[]) RETURNS int VOLATILE
                 LANGUAGE plpgsql
             AS $f$
             DECLARE
                 i int;
                 bad int := 0;
                 fast text;
                 slow text;
                 got text;
             BEGIN
                 FOREACH i IN ARRAY keys LOOP
                     SELECT (SELECT row({n}.*)::text FROM {n} WHERE {cond_i}), slow_{n}(i),
                            get_{n}(i)
                       INTO fast, slow, got;
                     IF fast IS DISTINCT FROM slow OR got IS DISTINCT FROM slow THEN
                         RAISE WARNING 'volatile loop {n}: key % gave % / %, normal plan %',
                             i, fast, got, slow;
                         bad := bad + 1;
                     END IF;
                 END LOOP;
                 RETURN bad;
             END $f$;",
            cols = t.columns,
            vals = sql(t.values, "g"),
            cond = sql(t.cond, "$1"),
            cond_i = sql(t.cond, "i"),
        ))
        .await
        .unwrap();
    }
}

/// One random write to `t` (a statement, without the semicolon).
fn write(rng: &mut SmallRng, t: &Table) -> String {
    let k = rng.random_range(1..=KEYS).to_string();
    let other = rng.random_range(1..=KEYS).to_string();
    let n: u32 = rng.random();
    let name = t.name;
    let cond = sql(t.cond, &k);
    match rng.random_range(0..5) {
        0 => format!("UPDATE {name} SET v = 'u{n}' WHERE {cond}"),
        1 => format!("UPDATE {name} SET {} WHERE {cond}", sql(t.set, &other)),
        2 => format!("DELETE FROM {name} WHERE {cond}"),
        3 => format!(
            "INSERT INTO {name} VALUES ({}, 'i{n}') ON CONFLICT DO NOTHING",
            sql(t.values, &k)
        ),
        _ => {
            let key_columns = if t.name == "cp" { "a, b, c" } else { "k" };
            format!(
                "INSERT INTO {name} VALUES ({}, 'x{n}') \
                 ON CONFLICT ({key_columns}) DO UPDATE SET v = excluded.v",
                sql(t.values, &k)
            )
        }
    }
}

/// Counts of what the writers did, to check that each kind of transaction ran.
#[derive(Default)]
struct Writes {
    plain: AtomicU64,
    exception_blocks: AtomicU64,
    prepared: AtomicU64,
    prepare_refused: AtomicU64,
}

/// Until `stop`: plain transactions (commit, or one in five rolled back), writes in a
/// PL/pgSQL EXCEPTION block rolled back before a committed write, and prepared transactions
/// that read an enabled table and wrote `journal`, finished from `finisher`. Every commit
/// holds its fences 1 ms after it becomes visible.
async fn writer(url: String, seed: u64, stop: Arc<AtomicBool>, writes: Arc<Writes>) {
    let mut c = slipstream_pg::connect(&url).await.unwrap();
    let mut finisher = slipstream_pg::connect(&url).await.unwrap();
    c.batch_execute("SET memopt.test_cleanup_delay = '1ms'")
        .await
        .unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut gid = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let t = &TABLES[rng.random_range(0..TABLES.len())];
        match rng.random_range(0..10) {
            0 => {
                // Written and rolled back inside the block; the outer write commits.
                let inner: Vec<String> = (0..rng.random_range(1..=3))
                    .map(|_| write(&mut rng, t) + ";")
                    .collect();
                let outer = write(&mut rng, t);
                let block = format!(
                    "DO $d$ BEGIN
                         BEGIN {} RAISE EXCEPTION 'undo'; EXCEPTION WHEN OTHERS THEN NULL; END;
                         {outer};
                     END $d$",
                    inner.concat()
                );
                if let Err(e) = c.batch_execute(&block).await {
                    assert!(!e.is_closed(), "writer lost its connection: {e}");
                }
                writes.exception_blocks.fetch_add(1, Ordering::Relaxed);
            }
            1 => {
                // Read the enabled table (filling the store), write only journal, prepare,
                // and finish from another session.
                gid += 1;
                let name = format!("h68_{seed}_{gid}");
                let k = rng.random_range(1..=KEYS);
                let reads = format!(
                    "SELECT fast_{n}({k}), fast_{n}({k2}), get_{n}({k});",
                    n = t.name,
                    k2 = k % KEYS + 1
                );
                c.batch_execute(&format!(
                    "BEGIN; {reads} INSERT INTO journal VALUES ({gid}); \
                     PREPARE TRANSACTION '{name}'"
                ))
                .await
                .unwrap();
                let finish = if rng.random_bool(0.8) {
                    "COMMIT"
                } else {
                    "ROLLBACK"
                };
                finisher
                    .batch_execute(&format!("{finish} PREPARED '{name}'"))
                    .await
                    .unwrap();
                writes.prepared.fetch_add(1, Ordering::Relaxed);
            }
            2 if rng.random_bool(0.2) => {
                // A prepared transaction that wrote the enabled table is refused.
                let w = write(&mut rng, t);
                let name = format!("h68_refused_{seed}");
                let r = c
                    .batch_execute(&format!("BEGIN; {w}; PREPARE TRANSACTION '{name}'"))
                    .await;
                match r {
                    Err(e) => {
                        assert!(!e.is_closed(), "writer lost its connection: {e}");
                        c.batch_execute("ROLLBACK").await.unwrap();
                    }
                    // Prepared: the write changed no row (an UPDATE or DELETE of a missing
                    // key, a conflicting INSERT ... DO NOTHING), so nothing was recorded.
                    Ok(()) => {
                        let n: i64 = memopt_check::scalar(
                            &mut finisher,
                            &format!("SELECT count(*) FROM pg_prepared_xacts WHERE gid = '{name}'"),
                        )
                        .await
                        .unwrap();
                        if n > 0 {
                            finisher
                                .batch_execute(&format!("ROLLBACK PREPARED '{name}'"))
                                .await
                                .unwrap();
                        }
                    }
                }
                writes.prepare_refused.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                let mut block = String::from("BEGIN;");
                for _ in 0..rng.random_range(1..=4) {
                    block.push_str(&write(&mut rng, t));
                    block.push(';');
                }
                block.push_str(if rng.random_bool(0.2) {
                    "ROLLBACK;"
                } else {
                    "COMMIT;"
                });
                // Moved keys collide and writers deadlock at times: rolled back, as intended.
                if let Err(e) = c.batch_execute(&block).await {
                    assert!(!e.is_closed(), "writer lost its connection: {e}");
                    c.batch_execute("ROLLBACK").await.unwrap();
                }
                writes.plain.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn random_keys(rng: &mut SmallRng) -> Vec<i32> {
    (0..PER_READ).map(|_| rng.random_range(1..=KEYS)).collect()
}

fn array(keys: &[i32]) -> String {
    let items: Vec<String> = keys.iter().map(i32::to_string).collect();
    format!("'{{{}}}'::int[]", items.join(","))
}

/// Compares rows (key, scan, normal plan, memopt.get) fetched from a cursor.
fn cursor_mismatches(table: &str, rows: &[slipstream_pg::Row], how: &str) -> u64 {
    let mut bad = 0;
    for r in rows {
        let k: i32 = r.get(0).unwrap();
        let (fast, slow, got): (Option<String>, Option<String>, Option<String>) =
            (r.get(1).unwrap(), r.get(2).unwrap(), r.get(3).unwrap());
        if fast != slow || got != slow {
            eprintln!("{how} {table}: key {k}: scan {fast:?}, get {got:?}, normal plan {slow:?}");
            bad += 1;
        }
    }
    bad
}

/// Until `compared` reaches LOOKUPS: comparisons in one of five shapes, counting mismatches.
async fn reader(url: String, seed: u64, compared: Arc<AtomicU64>) -> u64 {
    let mut c = slipstream_pg::connect(&url).await.unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut bad = 0u64;
    while compared.load(Ordering::Relaxed) < LOOKUPS {
        let t = &TABLES[rng.random_range(0..TABLES.len())];
        let n = t.name;
        let keys = random_keys(&mut rng);
        let keys_sql = array(&keys);
        let listed =
            format!("SELECT k, fast_{n}(k), slow_{n}(k), get_{n}(k) FROM unnest({keys_sql}) k");
        match rng.random_range(0..5) {
            0 => {
                let rows = c.query(&listed, &[]).await.unwrap();
                bad += cursor_mismatches(n, &rows, "statement");
            }
            1 => {
                // Fetched in pieces while writers commit: the cursor's snapshot grows old.
                c.batch_execute(&format!("BEGIN; DECLARE c NO SCROLL CURSOR FOR {listed}"))
                    .await
                    .unwrap();
                for _ in 0..4 {
                    let rows = c
                        .query(&format!("FETCH {} FROM c", PER_READ / 4), &[])
                        .await
                        .unwrap();
                    bad += cursor_mismatches(n, &rows, "cursor");
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                c.batch_execute("COMMIT").await.unwrap();
            }
            2 => {
                // WITH HOLD: part fetched in the transaction, the rest after its commit.
                c.batch_execute(&format!(
                    "BEGIN; DECLARE h SCROLL CURSOR WITH HOLD FOR {listed}"
                ))
                .await
                .unwrap();
                let rows = c.query("FETCH 30 FROM h", &[]).await.unwrap();
                bad += cursor_mismatches(n, &rows, "held cursor");
                tokio::time::sleep(Duration::from_millis(2)).await;
                c.batch_execute("COMMIT").await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                let rows = c.query("FETCH ALL FROM h", &[]).await.unwrap();
                bad += cursor_mismatches(n, &rows, "held cursor after commit");
                let rows = c.query("FETCH BACKWARD 10 FROM h", &[]).await.unwrap();
                bad += cursor_mismatches(n, &rows, "held cursor backwards");
                c.batch_execute("CLOSE h").await.unwrap();
            }
            3 => {
                let b: i32 =
                    memopt_check::scalar(&mut c, &format!("SELECT stable_loop_{n}({keys_sql})"))
                        .await
                        .unwrap();
                bad += b as u64;
            }
            _ => {
                let b: i32 =
                    memopt_check::scalar(&mut c, &format!("SELECT volatile_loop_{n}({keys_sql})"))
                        .await
                        .unwrap();
                bad += b as u64;
            }
        }
        compared.fetch_add(keys.len() as u64, Ordering::Relaxed);
    }
    bad
}

async fn table_hits(c: &mut Client, table: &str) -> i64 {
    let sql = format!("SELECT hits FROM memopt.stats WHERE \"table\" = '{table}'::regclass");
    memopt_check::scalar(c, &sql).await.unwrap()
}

/// Reads the rows of each key shape twice, with nothing else running, and asserts that the
/// second pass hit for every shape: the shapes are served, so a wrong byte form would show.
async fn every_shape_hits(c: &mut Client, table: &str) {
    let mut served = Vec::new();
    for shape in 0..7 {
        let keys: Vec<i32> = (2..=KEYS).step_by(2).filter(|i| i % 7 == shape).collect();
        let read = format!(
            "SELECT count(fast_{table}(k)) FROM unnest({}) k",
            array(&keys)
        );
        let found: i64 = memopt_check::scalar(c, &read).await.unwrap();
        assert_eq!(
            found,
            keys.len() as i64,
            "{table}: rows of shape {shape} missing"
        );
        let before = table_hits(c, table).await;
        memopt_check::scalar::<i64>(c, &read).await.unwrap();
        served.push(table_hits(c, table).await - before);
    }
    eprintln!("{table}: second-pass hits by key shape: {served:?}");
    assert!(
        served.iter().all(|&h| h > 0),
        "{table}: a key shape is never served: {served:?}"
    );
}

/// Holds: on text (ICU), varchar, uuid and composite keys of every awkward shape, under
/// concurrent writers, rolled-back EXCEPTION blocks, prepared transactions, eviction and
/// drop_object/populate, the scan and memopt.get return what the normal plan returns on the
/// same snapshot, through statements, cursors (also held past their transaction) and
/// PL/pgSQL loops whose snapshot is older than the newest commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn awkward_keys_under_writers_cursors_and_prepared_transactions_match_the_normal_plan() {
    let cluster = memopt_check::cluster(&[
        ("memopt.entry_size", "4000"),
        ("memopt.pool_size", "4000kB"),
        ("max_prepared_transactions", "10"),
    ])
    .unwrap();
    let url = cluster.url();
    let mut admin = slipstream_pg::connect(&url).await.unwrap();
    setup(&mut admin).await;

    for t in &TABLES {
        every_shape_hits(&mut admin, t.name).await;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(Writes::default());
    let mut tasks = Vec::new();
    for seed in 0..2u64 {
        tasks.push(tokio::spawn(writer(
            url.clone(),
            seed,
            stop.clone(),
            writes.clone(),
        )));
    }
    {
        let (url, stop) = (url.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = slipstream_pg::connect(&url).await.unwrap();
            let mut round = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let n = TABLES[round % TABLES.len()].name;
                let call = if round.is_multiple_of(3) {
                    "drop_object"
                } else {
                    "populate"
                };
                // populate may be rejected (one still running): a WARNING, not an error.
                c.batch_execute(&format!("SELECT memopt.{call}('{n}')"))
                    .await
                    .unwrap();
                round += 1;
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        }));
    }

    let compared = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2u64)
        .map(|seed| tokio::spawn(reader(url.clone(), 100 + seed, compared.clone())))
        .collect();
    let mut mismatches = 0;
    for r in readers {
        mismatches += r.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }

    let stats = admin
        .query(
            "SELECT \"table\"::text, lookups, hits, misses, misses_uncacheable, evictions,
                    invalidations
               FROM memopt.stats ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    for r in &stats {
        let (name, lookups, hits, misses): (String, i64, i64, i64) = (
            r.get(0).unwrap(),
            r.get(1).unwrap(),
            r.get(2).unwrap(),
            r.get(3).unwrap(),
        );
        let (uncacheable, evictions, invalidations): (i64, i64, i64) =
            (r.get(4).unwrap(), r.get(5).unwrap(), r.get(6).unwrap());
        eprintln!(
            "{name}: lookups {lookups}, hits {hits}, misses {misses} \
             (uncacheable {uncacheable}), evictions {evictions}, invalidations {invalidations}"
        );
        assert_eq!(lookups, hits + misses);
        // A table whose lookups only missed would prove nothing.
        assert!(hits > 2_000, "{name}: only {hits} hits");
    }
    let prepared = writes.prepared.load(Ordering::Relaxed);
    eprintln!(
        "compared {} keys; writes: plain {}, exception blocks {}, prepared {prepared}, \
         prepare refused {}",
        compared.load(Ordering::Relaxed),
        writes.plain.load(Ordering::Relaxed),
        writes.exception_blocks.load(Ordering::Relaxed),
        writes.prepare_refused.load(Ordering::Relaxed),
    );
    assert_eq!(
        mismatches, 0,
        "memopt answered differently from the normal plan"
    );
    assert!(prepared > 10, "only {prepared} prepared transactions");
    assert!(writes.exception_blocks.load(Ordering::Relaxed) > 10);
}

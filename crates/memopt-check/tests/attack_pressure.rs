//! Shared-memory pressure: the smallest pool memopt accepts (1,024 entries) shared by two
//! tables of more keys than it holds, so that nearly every fill evicts, while writers change
//! rows (their commits held 1 ms inside the fence window), `drop_object` empties a table and
//! `populate` refills one, and readers compare every answer of the scan and of `memopt.get`
//! with the normal plan's in the same statement. The promise (docs/memopt.md): "a query
//! returns exactly what it would without the extension"; a full pool means misses and
//! evictions, "never errors".

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const KEYS: i32 = 1500;
const LOOKUPS: u64 = 300_000;
const PER_STATEMENT: i32 = 1000;
const TABLES: [&str; 2] = ["a", "b"];

/// Holds: eviction racing fills, lookups, fenced commits, `drop_object` and `populate` on a
/// full pool never serves a row the normal plan does not return.
///
/// Steps: pool of 1,024 entries; tables `a` and `b` of 750 rows each on keys up to 1,500
/// (writers insert, update, move keys, delete, roll back); a chaos task alternates
/// `drop_object` and `populate` on both; two readers look up random keys of both tables
/// through the scan and `memopt.get` against `memopt.enabled = off`, 300,000 lookups in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eviction_on_a_full_pool_racing_writes_drops_and_populates_stays_right_holds() {
    let cluster = memopt_check::cluster(&[("memopt.pool_size", "256kB")]).unwrap();
    let url = cluster.url();
    let mut setup = slipstream_pg::connect(&url).await.unwrap();
    for t in TABLES {
        memopt_check::table(&mut setup, t, KEYS / 2).await.unwrap();
        setup
            .batch_execute(&format!(
                "CREATE FUNCTION fast_{t}(int) RETURNS text STABLE LANGUAGE sql
                     AS 'SELECT v FROM {t} WHERE k = $1';
                 CREATE FUNCTION slow_{t}(int) RETURNS text STABLE LANGUAGE sql
                     SET memopt.enabled = off AS 'SELECT v FROM {t} WHERE k = $1';
                 CREATE FUNCTION get_{t}(int) RETURNS text STABLE LANGUAGE sql
                     AS 'SELECT (memopt.get(''{t}'', $1::bigint)::text::{t}).v';"
            ))
            .await
            .unwrap();
    }

    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for seed in 0..2u64 {
        tasks.push(tokio::spawn(memopt_check::write_randomly(
            url.clone(),
            &TABLES,
            KEYS,
            seed,
            stop.clone(),
            writes.clone(),
        )));
    }
    {
        let (url, stop) = (url.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = slipstream_pg::connect(&url).await?;
            let mut round = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let t = TABLES[round % 2];
                // populate may be rejected (one already running): a WARNING, not an error.
                let sql = if round.is_multiple_of(3) {
                    format!("SELECT memopt.drop_object('{t}')")
                } else {
                    format!("SELECT memopt.populate('{t}')")
                };
                c.batch_execute(&sql).await?;
                round += 1;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Ok(())
        }));
    }

    let looked_up = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for _ in 0..2 {
        let (url, looked_up) = (url.clone(), looked_up.clone());
        readers.push(tokio::spawn(async move {
            let mut c = slipstream_pg::connect(&url).await.unwrap();
            let mut checks = Vec::new();
            for t in TABLES {
                checks.push(
                    c.prepare(&format!(
                        "SELECT count(*) FILTER (WHERE fast_{t}(k) IS DISTINCT FROM slow_{t}(k)
                                                    OR get_{t}(k) IS DISTINCT FROM slow_{t}(k)),
                                count(*),
                                min(k) FILTER (WHERE fast_{t}(k) IS DISTINCT FROM slow_{t}(k)
                                                  OR get_{t}(k) IS DISTINCT FROM slow_{t}(k))
                           FROM (SELECT (random() * {KEYS})::int + 1 AS k
                                   FROM generate_series(1, {PER_STATEMENT})) keys"
                    ))
                    .await
                    .unwrap(),
                );
            }
            let mut mismatches = 0i64;
            let mut i = 0usize;
            while looked_up.load(Ordering::Relaxed) < LOOKUPS {
                let row = c.query_one(&checks[i % 2], &[]).await.unwrap();
                let bad: i64 = row.get(0).unwrap();
                if bad > 0 {
                    let k: Option<i32> = row.get(2).unwrap();
                    eprintln!(
                        "table {}: {bad} mismatches, first at key {k:?}",
                        TABLES[i % 2]
                    );
                }
                mismatches += bad;
                looked_up.fetch_add(2 * row.get::<_, i64>(1).unwrap() as u64, Ordering::Relaxed);
                i += 1;
            }
            mismatches
        }));
    }

    let mut mismatches = 0;
    for r in readers {
        mismatches += r.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap().unwrap();
    }

    let row = setup
        .query_one(
            "SELECT sum(lookups)::bigint, sum(hits)::bigint, sum(misses)::bigint,
                    sum(evictions)::bigint, sum(invalidations)::bigint
               FROM memopt.stats",
            &[],
        )
        .await
        .unwrap();
    let (lookups, hits, misses, evictions, invalidations): (i64, i64, i64, i64, i64) = (
        row.get(0).unwrap(),
        row.get(1).unwrap(),
        row.get(2).unwrap(),
        row.get(3).unwrap(),
        row.get(4).unwrap(),
    );
    eprintln!(
        "lookups {lookups}, hits {hits}, misses {misses}, evictions {evictions}, \
         invalidations {invalidations}, write transactions {}",
        writes.load(Ordering::Relaxed)
    );
    assert_eq!(
        mismatches, 0,
        "memopt answered differently from the normal plan"
    );
    assert_eq!(lookups, hits + misses);
    // The run means something only if the pool was full and the store served.
    assert!(evictions > 1000, "only {evictions} evictions");
    assert!(hits > 10_000, "only {hits} hits");
    assert!(invalidations > 2, "drop_object hardly ran");
    assert!(
        writes.load(Ordering::Relaxed) > 100,
        "the writers hardly ran"
    );
}

//! Randomized consistency: writers insert, update (including the key), delete and upsert in
//! transactions that commit or roll back, while readers compare every memopt answer with the
//! answer of the normal plan (`memopt.enabled = off`) on the same snapshot.  Both lookups run
//! in one statement, inside STABLE functions, which use the statement's snapshot.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const KEYS: i32 = 3000;
const LOOKUPS: u64 = 1_000_000;
const PER_STATEMENT: i32 = 2000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memopt_answers_match_the_normal_plan_under_concurrent_writes() {
    let cluster = memopt_check::cluster(&[("memopt.pool_size", "2MB")]).unwrap();
    let url = cluster.url();
    let mut setup = slipstream_pg::connect(&url).await.unwrap();
    memopt_check::table(&mut setup, "s", KEYS / 2)
        .await
        .unwrap();
    memopt_check::populate(&mut setup, "s").await.unwrap();
    setup
        .batch_execute(
            "CREATE FUNCTION fast(int) RETURNS text STABLE LANGUAGE sql
                 AS 'SELECT v FROM s WHERE k = $1';
             CREATE FUNCTION slow(int) RETURNS text STABLE LANGUAGE sql
                 SET memopt.enabled = off AS 'SELECT v FROM s WHERE k = $1';",
        )
        .await
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for seed in 0..2u64 {
        writers.push(tokio::spawn(memopt_check::write_randomly(
            url.clone(),
            &["s"],
            KEYS,
            seed,
            stop.clone(),
            writes.clone(),
        )));
    }

    let looked_up = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for _ in 0..2 {
        let (url, looked_up) = (url.clone(), looked_up.clone());
        readers.push(tokio::spawn(async move {
            let mut c = slipstream_pg::connect(&url).await.unwrap();
            let check = c
                .prepare(&format!(
                    "SELECT count(*) FILTER (WHERE fast(k) IS DISTINCT FROM slow(k)), count(*),
                            min(k) FILTER (WHERE fast(k) IS DISTINCT FROM slow(k))
                       FROM (SELECT (random() * {KEYS})::int + 1 AS k
                               FROM generate_series(1, {PER_STATEMENT})) keys"
                ))
                .await
                .unwrap();
            let mut mismatches = 0i64;
            while looked_up.load(Ordering::Relaxed) < LOOKUPS {
                let row = c.query_one(&check, &[]).await.unwrap();
                let bad: i64 = row.get(0).unwrap();
                let n: i64 = row.get(1).unwrap();
                if bad > 0 {
                    let k: Option<i32> = row.get(2).unwrap();
                    eprintln!("{bad} mismatches in a statement, first at key {k:?}");
                }
                mismatches += bad;
                looked_up.fetch_add(n as u64, Ordering::Relaxed);
            }
            mismatches
        }));
    }

    let mut mismatches = 0;
    for r in readers {
        mismatches += r.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap().unwrap();
    }

    let row = setup
        .query_one(
            "SELECT lookups, hits, misses, misses_fenced, misses_not_cached
               FROM memopt.stats WHERE \"table\" = 's'::regclass",
            &[],
        )
        .await
        .unwrap();
    let (lookups, hits, misses): (i64, i64, i64) = (
        row.get(0).unwrap(),
        row.get(1).unwrap(),
        row.get(2).unwrap(),
    );
    let fenced: i64 = row.get(3).unwrap();
    let not_cached: i64 = row.get(4).unwrap();
    eprintln!(
        "lookups {lookups}, hits {hits}, misses {misses} (fenced {fenced}, not cached \
         {not_cached}), write transactions {}",
        writes.load(Ordering::Relaxed)
    );
    assert_eq!(
        mismatches, 0,
        "memopt answered differently from the normal plan"
    );
    assert!(
        lookups as u64 >= LOOKUPS,
        "only {lookups} lookups went through memopt"
    );
    assert_eq!(lookups, hits + misses);
    // The comparison means something only if most answers came from the store.
    assert!(
        hits * 2 > lookups,
        "only {hits} of {lookups} lookups were hits"
    );
    assert!(
        writes.load(Ordering::Relaxed) > 100,
        "the writers hardly ran"
    );
}

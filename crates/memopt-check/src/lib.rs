//! Shared setup for the memopt end-to-end checks in `tests/`, and the differential fuzzer
//! ([`fuzz`]).
//!
//! The extension must be installed into the server's directories first
//! (`extension/memopt/test/run` does it, and `make test` runs that before the Rust tests).
//!
//! ```no_run
//! # async fn demo() {
//! let cluster = memopt_check::cluster(&[]).unwrap();
//! let mut client = slipstream_pg::connect(&cluster.url()).await.unwrap();
//! memopt_check::table(&mut client, "t", 1000).await.unwrap();
//! # }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slipstream_pg::{Client, Error};
use slipstream_testkit::Cluster;

/// A throwaway cluster that preloads memopt, with extra `settings`.
pub fn cluster(settings: &[(&str, &str)]) -> Result<Cluster, slipstream_testkit::Error> {
    let mut builder = Cluster::builder().setting("shared_preload_libraries", "memopt");
    for (name, value) in settings {
        builder = builder.setting(name, value);
    }
    builder.start()
}

/// Creates the extension (if needed) and table `name (k int primary key, v text)` holding
/// keys 1..=rows with values `v<k>`, enabled for memoptimized reads.
pub async fn table(client: &mut Client, name: &str, rows: i32) -> Result<(), Error> {
    client
        .batch_execute(&format!(
            "CREATE EXTENSION IF NOT EXISTS memopt;
             CREATE TABLE {name} (k int PRIMARY KEY, v text);
             INSERT INTO {name} SELECT g, 'v' || g FROM generate_series(1, {rows}) g;
             ANALYZE {name};
             SELECT memopt.enable_read('{name}');"
        ))
        .await
}

/// Starts a populate of `name` and waits (up to a minute) until it is done.
pub async fn populate(client: &mut Client, name: &str) -> Result<(), Error> {
    client
        .batch_execute(&format!(
            "SELECT memopt.populate('{name}');
             DO $$
             BEGIN
                 FOR i IN 1..1200 LOOP
                     EXIT WHEN (SELECT populate_state FROM memopt.stats
                                 WHERE \"table\" = '{name}'::regclass) IN ('done', 'failed');
                     PERFORM pg_sleep(0.05);
                 END LOOP;
             END
             $$;"
        ))
        .await
}

/// The one value of a query that returns one row of one column.
pub async fn scalar<T>(client: &mut Client, sql: &str) -> Result<T, Error>
where
    T: for<'a> slipstream_pg::types::FromSql<'a>,
{
    client.query_one(sql, &[]).await?.get(0)
}

/// A writer for the stress tests: until `stop`, transactions of one to four random writes to
/// one of `tables` (built by [`table`], keys drawn from 1..=`keys`) that update a value, move a
/// key, delete, insert or upsert, and then commit or (one in five) roll back; each counted in
/// `writes`. Every commit is held 1 ms between becoming visible and ending its fences
/// (`memopt.test_cleanup_delay`), so that readers land in that window often: only the fences
/// keep them from stale rows.
///
/// # Errors
/// The connect or the `SET` failing (no server, memopt not loaded), or the connection lost
/// mid-run: a writer that could only count failures would pass the stress tests' "the writers
/// ran" check without writing.
///
/// ```no_run
/// # use std::sync::{Arc, atomic::{AtomicBool, AtomicU64}};
/// # async fn demo(url: String) {
/// let (stop, writes) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
/// let writer = tokio::spawn(memopt_check::write_randomly(url, &["t"], 1000, 7, stop, writes));
/// // ... later: stop it, then
/// writer.await.expect("the writer did not panic").expect("the writer kept its connection");
/// # }
/// ```
pub async fn write_randomly(
    url: String,
    tables: &'static [&'static str],
    keys: i32,
    seed: u64,
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
) -> Result<(), Error> {
    let mut c = slipstream_pg::connect(&url).await?;
    c.batch_execute("SET memopt.test_cleanup_delay = '1ms'")
        .await?;
    let mut rng = SmallRng::seed_from_u64(seed);
    while !stop.load(Ordering::Relaxed) {
        let t = tables[rng.random_range(0..tables.len())];
        let mut sql = String::from("BEGIN;");
        for _ in 0..rng.random_range(1..=4) {
            let k = rng.random_range(1..=keys);
            let other = rng.random_range(1..=keys);
            let n: u32 = rng.random();
            sql.push_str(&match rng.random_range(0..5) {
                0 => format!("UPDATE {t} SET v = 'u{n}' WHERE k = {k};"),
                1 => format!("UPDATE {t} SET k = {other} WHERE k = {k};"),
                2 => format!("DELETE FROM {t} WHERE k = {k};"),
                3 => format!("INSERT INTO {t} VALUES ({k}, 'i{n}') ON CONFLICT DO NOTHING;"),
                _ => format!(
                    "INSERT INTO {t} VALUES ({k}, 'x{n}') \
                     ON CONFLICT (k) DO UPDATE SET v = excluded.v;"
                ),
            });
        }
        sql.push_str(if rng.random_bool(0.2) {
            "ROLLBACK;"
        } else {
            "COMMIT;"
        });
        // Key moves collide (unique violations) and writers deadlock at times: the transaction
        // is then rolled back, which is part of what is being tested. A lost connection is not.
        if let Err(e) = c.batch_execute(&sql).await {
            if e.is_closed() {
                return Err(e);
            }
            let _ = c.batch_execute("ROLLBACK").await;
        }
        writes.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

pub mod fuzz;

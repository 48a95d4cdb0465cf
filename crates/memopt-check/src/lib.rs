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

pub mod fuzz;

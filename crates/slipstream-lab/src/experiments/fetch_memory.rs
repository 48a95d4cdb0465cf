//! `fetch-memory`: a few very wide rows among many narrow ones. With a fixed row count the
//! client's peak memory grows with the widest rows a fetch happens to catch (the JDBC 12c
//! story in article 004: memory = rows x row size); byte mode stays under its cap.

use anyhow::Context as _;
use slipstream_pg::FetchSize;
use slipstream_testkit::CountingAllocator;

use super::fetch_table::{WIDE_SPACING, ensure_fetch_memory_test};
use super::{Stopwatch, bytes_cell, runtime, without_tls};
use crate::{Context, ExperimentResult, Table};

pub(crate) const TITLE: &str = "Fetch memory: fixed row counts versus byte mode with a cap";

const SQL: &str = "SELECT id, data FROM fetch_memory_test ORDER BY id";
/// What the read buffer and the row queue may add beyond the cap and one row (the same
/// allowance the crate's memory-cap test uses).
const OVERHEAD: usize = 512 * 1024;

pub(crate) fn run(ctx: &Context) -> anyhow::Result<ExperimentResult> {
    let (narrow, wide, wide_bytes) = if ctx.quick {
        (10_000, 5, 2_000_000)
    } else {
        (50_000, 10, 4_000_000)
    };
    let settings = [
        FetchSize::Rows(100),
        FetchSize::Rows(1000),
        FetchSize::Rows(10_000),
        FetchSize::Bytes(64 * 1024),
        FetchSize::Bytes(1 << 20),
    ];
    let url = without_tls(&ctx.url);
    let mut r = ExperimentResult::new("fetch-memory", TITLE, ctx.quick);
    r.param("rows", narrow);
    r.param("wide_rows", wide);
    r.param("wide_row_bytes", wide_bytes);

    let rt = runtime()?;
    let (measured, peers, server_version) = rt.block_on(async {
        let mut c = slipstream_pg::connect(&url)
            .await
            .context("connecting to the database")?;
        let server_version = c.parameter("server_version").map(str::to_string);
        ensure_fetch_memory_test(&mut c, narrow, wide, wide_bytes).await?;
        let mut measured = Vec::new();
        for fetch in settings {
            let read = read_fresh(&url, fetch).await?;
            anyhow::ensure!(
                read.rows == narrow as usize,
                "read {} rows of {narrow}",
                read.rows
            );
            anyhow::ensure!(
                read.prepared_in_timer == 0,
                "slipstream-pg prepared a statement inside its timed read; the peer's is prepared before"
            );
            measured.push((
                fetch,
                read.seconds,
                read.heap,
                read.round_trips,
                read.widest,
            ));
        }

        let mut peers = Vec::new();
        for per_fetch in [1000i32, 0] {
            let read = read_fresh_tokio_postgres(&url, per_fetch).await?;
            anyhow::ensure!(
                read.rows == narrow as usize,
                "tokio-postgres read {} rows of {narrow}",
                read.rows
            );
            peers.push((per_fetch, read.seconds, read.heap));
        }
        anyhow::Ok((measured, peers, server_version))
    })?;
    r.environment = slipstream_bench::capture_environment(&ctx.url, server_version);

    let mut table = Table::new(&[
        "client",
        "fetch size",
        "seconds",
        "round trips",
        "peak heap",
        "cap",
        "within cap + one row",
    ]);
    for &(fetch, seconds, heap, round_trips, widest) in &measured {
        let cap = match fetch {
            FetchSize::Bytes(b) => Some(b),
            FetchSize::Rows(_) => None,
        };
        let within = match (cap, heap) {
            (Some(cap), Some(heap)) => {
                let ok = heap <= cap + widest + OVERHEAD;
                r.ratios.insert(
                    format!("bytes_{}k_peak_over_cap_plus_row", cap / 1024),
                    heap as f64 / (cap + widest) as f64,
                );
                if ok { "yes" } else { "NO" }.to_string()
            }
            _ => "—".into(),
        };
        if let (FetchSize::Rows(n), Some(heap)) = (fetch, heap) {
            r.ratios.insert(
                format!("rows_{n}_peak_over_widest_row"),
                heap as f64 / widest as f64,
            );
        }
        table.row(vec![
            "slipstream-pg".into(),
            fetch.to_string(),
            format!("{seconds:.3}"),
            round_trips.to_string(),
            bytes_cell(heap),
            cap.map_or("none".into(), |c| bytes_cell(Some(c))),
            within,
        ]);
    }
    for &(per_fetch, seconds, heap) in &peers {
        table.row(vec![
            "tokio-postgres".into(),
            match per_fetch {
                0 => "all at once".into(),
                n => format!("{n} rows"),
            },
            format!("{seconds:.3}"),
            "—".into(),
            bytes_cell(heap),
            "none".into(),
            "—".into(),
        ]);
    }
    r.table = table;
    r.notes.push(format!(
        "{narrow} rows of ~40 bytes, {wide} of them {wide_bytes} bytes wide, {WIDE_SPACING} rows apart in the middle; read in id order"
    ));
    r.notes.push("byte mode: the fetch size is also the cap unless max_result_buffer sets one; the buffer holds at most the cap plus one row, so a wide row costs its own size, not the fetch's row count times it".into());
    r.notes.push("each read on a fresh connection, its statement prepared before the timer and the heap count start, every row's data decoded as text (both clients); tokio-postgres reads its portal in a transaction (it needs one), slipstream-pg in autocommit".into());
    r.notes.push(format!(
        "'within cap + one row' allows {} KiB for the read buffer and row queue",
        OVERHEAD / 1024
    ));
    Ok(r)
}

/// What one timed read of the table gave.
struct Read {
    rows: usize,
    seconds: f64,
    /// Peak heap growth during the read (`None` without the counting allocator).
    heap: Option<usize>,
    /// Round trips the row stream made (its fetches).
    round_trips: u64,
    /// The widest `data` value read, in bytes.
    widest: usize,
    /// Statements the client prepared while the timer ran (none: the peer prepares first).
    prepared_in_timer: u64,
}

/// Reads the whole table once through slipstream-pg's row stream on a fresh connection
/// (nothing a previous setting left allocated counts), timed and heap-measured.
///
/// The statement is prepared before the timer and the heap count start, as tokio-postgres's
/// is in [`run`]: both measure the read alone. Given the text, the statement cache would
/// prepare it inside the timer on the fresh connection (a Parse and Describe sent with the
/// first Execute, the server's parse and plan, the cache's entry), work the peer does not pay.
async fn read_fresh(url: &str, fetch: FetchSize) -> anyhow::Result<Read> {
    let mut c = slipstream_pg::connect(url).await?;
    let stmt = c.prepare(SQL).await?;
    let misses = c.statement_cache_stats().misses;
    let growth = CountingAllocator::measure();
    let sw = Stopwatch::start();
    let mut stream = c.query_stream_with(&stmt, &[], fetch).await?;
    let (mut rows, mut widest) = (0usize, 0usize);
    while let Some(row) = stream.next().await? {
        widest = widest.max(row.get::<_, &str>(1)?.len());
        rows += 1;
    }
    let round_trips = stream.round_trips();
    drop(stream);
    let t = sw.stop();
    Ok(Read {
        prepared_in_timer: c.statement_cache_stats().misses - misses,
        rows,
        seconds: t.wall.as_secs_f64(),
        heap: growth.peak(),
        round_trips,
        widest,
    })
}

/// Reads the whole table once through tokio-postgres's portal, `per_fetch` rows at a time (0:
/// all at once), on a fresh connection, in a transaction (portals need one), its statement
/// prepared before the timer and the heap count start, as [`read_fresh`] does.
async fn read_fresh_tokio_postgres(url: &str, per_fetch: i32) -> anyhow::Result<Read> {
    let mut tp = super::client_config::connect_tokio_postgres(url).await?;
    let stmt = tp.prepare(SQL).await?;
    let growth = CountingAllocator::measure();
    let sw = Stopwatch::start();
    let tx = tp.transaction().await?;
    let portal = tx.bind(&stmt, &[]).await?;
    let (mut n, mut widest) = (0, 0);
    loop {
        let batch = tx.query_portal(&portal, per_fetch).await?;
        // Every row's `data` decoded as text (UTF-8 checked), as slipstream-pg's read does.
        for row in &batch {
            widest = widest.max(row.try_get::<_, &str>(1)?.len());
        }
        n += batch.len();
        if per_fetch == 0 || batch.len() < per_fetch as usize {
            break;
        }
    }
    tx.commit().await?;
    let t = sw.stop();
    Ok(Read {
        rows: n,
        seconds: t.wall.as_secs_f64(),
        heap: growth.peak(),
        round_trips: 0,
        widest,
        prepared_in_timer: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::runtime;

    /// docs/lab.md: the clients are measured side by side on the same work. tokio-postgres
    /// prepares its statement before its timer starts, so slipstream-pg's timed read must not
    /// prepare either. Steps: one read as `run` measures each setting; the statements the
    /// client's cache prepared while the timer ran. Before the fix the read passed the SQL
    /// text, and the statement cache prepared it (Parse + Describe with the first Execute,
    /// the server's parse and plan) inside the timer and the heap count: 1, not 0.
    #[test]
    fn the_timed_read_prepares_nothing() {
        let cluster = slipstream_testkit::Cluster::start().unwrap();
        let url = without_tls(&cluster.url());
        let read = runtime()
            .unwrap()
            .block_on(async {
                let mut setup = slipstream_pg::connect(&url).await?;
                ensure_fetch_memory_test(&mut setup, 1000, 2, 10_000).await?;
                read_fresh(&url, FetchSize::Rows(100)).await
            })
            .unwrap();
        assert_eq!(read.rows, 1000);
        assert_eq!(read.widest, 10_000);
        assert_eq!(
            read.prepared_in_timer, 0,
            "the timed read prepared its statement"
        );
    }

    /// docs/lab.md: peers do the same work. slipstream-pg's timed read decodes every row's
    /// `data` as text (UTF-8 checked: megabytes per wide row), as an application reading it
    /// would; the peer's must too. Steps: the tokio-postgres read `run` times, on a table with
    /// two 10,000-byte rows; the widest value it decoded. Before the fix it counted the rows
    /// and decoded nothing (widest 0): its seconds, printed beside slipstream-pg's, left out
    /// the work slipstream-pg's included.
    #[test]
    fn the_peers_timed_read_decodes_what_slipstream_pgs_does() {
        let cluster = slipstream_testkit::Cluster::start().unwrap();
        let url = without_tls(&cluster.url());
        let reads = runtime()
            .unwrap()
            .block_on(async {
                let mut setup = slipstream_pg::connect(&url).await?;
                ensure_fetch_memory_test(&mut setup, 1000, 2, 10_000).await?;
                let ours = read_fresh(&url, FetchSize::Rows(1000)).await?;
                let mut theirs = Vec::new();
                for per_fetch in [1000, 0] {
                    theirs.push(read_fresh_tokio_postgres(&url, per_fetch).await?);
                }
                anyhow::Ok((ours, theirs))
            })
            .unwrap();
        let (ours, theirs) = reads;
        assert_eq!((ours.rows, ours.widest), (1000, 10_000));
        for read in theirs {
            assert_eq!(
                (read.rows, read.widest),
                (1000, 10_000),
                "rows read and the widest value decoded by tokio-postgres"
            );
        }
    }
}

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
            // A fresh connection each time: nothing a previous setting left allocated counts.
            let mut c = slipstream_pg::connect(&url).await?;
            let growth = CountingAllocator::measure();
            let sw = Stopwatch::start();
            let mut stream = c.query_stream_with(SQL, &[], fetch).await?;
            let (mut n, mut widest) = (0usize, 0usize);
            while let Some(row) = stream.next().await? {
                widest = widest.max(row.get::<_, &str>(1)?.len());
                n += 1;
            }
            let round_trips = stream.round_trips();
            drop(stream);
            let t = sw.stop();
            anyhow::ensure!(n == narrow as usize, "read {n} rows of {narrow}");
            measured.push((
                fetch,
                t.wall.as_secs_f64(),
                growth.peak(),
                round_trips,
                widest,
            ));
        }

        let mut peers = Vec::new();
        for per_fetch in [1000i32, 0] {
            let (mut tp, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
            tokio::spawn(connection);
            let stmt = tp.prepare(SQL).await?;
            let growth = CountingAllocator::measure();
            let sw = Stopwatch::start();
            let tx = tp.transaction().await?;
            let portal = tx.bind(&stmt, &[]).await?;
            let mut n = 0;
            loop {
                let batch = tx.query_portal(&portal, per_fetch).await?;
                n += batch.len();
                if per_fetch == 0 || batch.len() < per_fetch as usize {
                    break;
                }
            }
            tx.commit().await?;
            let t = sw.stop();
            anyhow::ensure!(
                n == narrow as usize,
                "tokio-postgres read {n} rows of {narrow}"
            );
            peers.push((per_fetch, t.wall.as_secs_f64(), growth.peak()));
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
    r.notes.push(format!(
        "'within cap + one row' allows {} KiB for the read buffer and row queue",
        OVERHEAD / 1024
    ));
    Ok(r)
}

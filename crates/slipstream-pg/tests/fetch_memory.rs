//! The memory cap of a row stream, measured with a counting allocator: a test binary of its
//! own, so that no other test's allocations are counted.

use slipstream_pg::{Client, FetchSize};
use slipstream_testkit::{Cluster, CountingAllocator};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

const MB: usize = 1 << 20;
/// Heap beyond the rows' own bytes: the read buffer and its partly used 16 KiB chunks, the
/// queue of buffered rows.
const OVERHEAD: usize = 512 * 1024;

/// One test measures at a time: the counting allocator counts every thread's allocations.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Streams `SELECT id, data FROM wide ORDER BY id` and returns the peak heap growth while doing
/// it, and the widest row.
async fn peak_while_streaming(c: &mut Client, fetch: FetchSize) -> (usize, usize) {
    let growth = CountingAllocator::measure();
    let mut rows = c
        .query_stream_with("SELECT id, data FROM wide ORDER BY id", &[], fetch)
        .await
        .unwrap();
    let (mut n, mut widest) = (0, 0);
    while let Some(row) = rows.next().await.unwrap() {
        widest = widest.max(row.get::<_, &str>(1).unwrap().len());
        n += 1;
    }
    drop(rows);
    assert_eq!(n, 2130, "{fetch}");
    (
        growth.peak().expect("the counting allocator is installed"),
        widest,
    )
}

#[tokio::test(flavor = "current_thread")]
async fn the_memory_cap_holds_with_rows_of_1_kb_to_10_mb() {
    let _measuring = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let mut setup = slipstream_pg::connect(&url).await.unwrap();
    // 2000 rows of 1 KB with wider ones among them: 100 of 100 KB, 27 of 1 MB, 3 of 10 MB.
    setup
        .batch_execute(
            "CREATE TABLE wide (id int PRIMARY KEY, data text);
             ALTER TABLE wide ALTER data SET STORAGE EXTERNAL;
             INSERT INTO wide SELECT g, repeat('n', 1000) FROM generate_series(1, 2000) g;
             INSERT INTO wide SELECT 2000 + g, repeat('m', 100000) FROM generate_series(1, 100) g;
             INSERT INTO wide SELECT 2100 + g, repeat('w', 1000000) FROM generate_series(1, 27) g;
             INSERT INTO wide SELECT 2127 + g, repeat('W', 10000000) FROM generate_series(1, 3) g;
             UPDATE wide SET id = -id WHERE id % 7 = 0;",
        )
        .await
        .unwrap();
    setup.close().await.unwrap();

    // Bytes mode: the fetch size is the cap.
    let mut c = slipstream_pg::connect(&url).await.unwrap();
    let (peak, widest) = peak_while_streaming(&mut c, FetchSize::Bytes(64 * 1024)).await;
    assert_eq!(widest, 10_000_000);
    let allowed = 64 * 1024 + widest + OVERHEAD;
    assert!(
        peak <= allowed,
        "bytes mode peaked at {peak} bytes; cap + one row + overhead = {allowed}"
    );

    // Rows mode with an explicit cap.
    let mut capped = slipstream_pg::connect(&format!("{url}?max_result_buffer=1MB"))
        .await
        .unwrap();
    let (peak, widest) = peak_while_streaming(&mut capped, FetchSize::Rows(1000)).await;
    let allowed = MB + widest + OVERHEAD;
    assert!(
        peak <= allowed,
        "1000 rows per fetch capped at 1 MB peaked at {peak} bytes; allowed {allowed}"
    );

    // Without a cap, a fixed row count holds whatever 1000 rows weigh: the cap is what bounds.
    let (peak, _) = peak_while_streaming(&mut c, FetchSize::Rows(1000)).await;
    assert!(
        peak > 30 * MB,
        "1000 uncapped rows including the wide ones should take far more: {peak} bytes"
    );
}

/// Promise (fetch-size.md, "The cap"): "Peak client memory is the cap plus one row, whatever
/// the rows look like", and a big row "is read into an allocation of its own size, not a
/// doubled buffer". A value past the 16 MiB that one length prefix is trusted for
/// (client.md, Limits) gets memory as its bytes arrive; that growth must not hold its bytes
/// twice.
///
/// Steps: one 100 MB value through a row stream at 64 KiB, and through `query`.
///
/// Before the fix the heap peaked at 167 MB: each step of the growth (16, 32, 64 MiB, then
/// the whole message) allocated the new buffer and copied into it while the old one was
/// still held.
#[tokio::test(flavor = "current_thread")]
async fn a_value_past_the_trusted_length_is_held_once() {
    let _measuring = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let size = 100_000_000;
    let sql = format!("SELECT repeat('x', {size})");
    let allowed = size + 64 * 1024 + OVERHEAD;

    let growth = CountingAllocator::measure();
    let mut rows = c
        .query_stream_with(&sql, &[], FetchSize::Bytes(64 * 1024))
        .await
        .unwrap();
    let row = rows.next().await.unwrap().unwrap();
    assert_eq!(row.get::<_, &str>(0).unwrap().len(), size);
    drop(row);
    assert!(rows.next().await.unwrap().is_none());
    drop(rows);
    let peak = growth.peak().expect("the counting allocator is installed");
    drop(growth);
    assert!(
        peak <= allowed,
        "a row stream over one {size}-byte value peaked at {peak} bytes; cap + one row + \
         overhead = {allowed}"
    );

    let growth = CountingAllocator::measure();
    let rows = c.query(&sql, &[]).await.unwrap();
    assert_eq!(rows[0].get::<_, &str>(0).unwrap().len(), size);
    drop(rows);
    let peak = growth.peak().expect("the counting allocator is installed");
    assert!(
        peak <= allowed,
        "query over one {size}-byte value peaked at {peak} bytes; one row + overhead = \
         {allowed}"
    );
}

//! `execute` returns a count, so it must not hold the rows it counts: measured with a counting
//! allocator, in a test binary of its own so that no other test's allocations are counted.

use slipstream_testkit::{Cluster, CountingAllocator};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

const MB: usize = 1 << 20;

/// 200,000 rows of about 110 bytes (22 MB on the wire) counted by `execute`, through the
/// statement cache (a parameter) and through the unnamed statement (none), with the heap
/// growing by at most the read buffer's chunks. It grew by the whole result (well over 22 MB)
/// when `execute` built every row and dropped them at the end.
#[tokio::test(flavor = "current_thread")]
async fn execute_counts_rows_without_holding_them() {
    let cluster = Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let sql = "SELECT g, repeat('x', 100) FROM generate_series(1, $1::int) g";
    // The first run prepares and caches the statement; the ones measured hit the cache.
    assert_eq!(c.execute(sql, &[&10i32]).await.unwrap(), 10);
    for round in 0..2 {
        let growth = CountingAllocator::measure();
        let n = c.execute(sql, &[&200_000i32]).await.unwrap();
        let peak = growth.peak().expect("the counting allocator is installed");
        drop(growth);
        assert_eq!(n, 200_000);
        assert!(
            peak < 2 * MB,
            "round {round}: execute's heap grew {peak} bytes for 200,000 rows it only counts"
        );
    }
    let growth = CountingAllocator::measure();
    let n = c
        .execute(
            "SELECT g, repeat('x', 100) FROM generate_series(1, 200000) g",
            &[],
        )
        .await
        .unwrap();
    let peak = growth.peak().unwrap();
    drop(growth);
    assert_eq!(n, 200_000);
    assert!(
        peak < 2 * MB,
        "without parameters the heap grew {peak} bytes"
    );
    // The same statement still returns its rows to `query`.
    let rows = c.query(sql, &[&3i32]).await.unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[2].get::<_, i32>(0).unwrap(), 3);
}

//! What the pool tells the outside: metrics through the `metrics` facade (a debugging
//! recorder stands in for an exporter) and the leak warning (a `tracing` subscriber captures
//! it). The connection type is a trivial in-memory one: these tests are about the pool's
//! bookkeeping, not PostgreSQL.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use slipstream_pool::{Manager, Pool, PoolError};

mod common;

struct Numbers;
impl Manager for Numbers {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        Ok(1)
    }
}

/// The one process-wide recorder (the `metrics` facade takes one per process).
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: std::sync::OnceLock<Snapshotter> = std::sync::OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this test binary");
        snapshotter
    })
}

type Snapshot = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// Every metric now. The debugging recorder hands values over: a snapshot resets counters
/// and gauges to 0 (the pool's task sets them again) and drains histograms.
fn snapshot() -> Snapshot {
    snapshotter().snapshot().into_vec()
}

/// The value of metric `name` for pool `pool` (and `state`, if given) in `snapshot`.
fn value(snapshot: &Snapshot, name: &str, pool: &str, state: Option<&str>) -> Option<DebugValue> {
    snapshot
        .iter()
        .find(|(key, ..)| {
            let key = key.key();
            let label = |k: &str| {
                key.labels()
                    .find(|l| l.key() == k)
                    .map(|l| l.value().to_string())
            };
            key.name() == name
                && label("pool").as_deref() == Some(pool)
                && state.is_none_or(|s| label("state").as_deref() == Some(s))
        })
        .map(|(.., v)| match v {
            DebugValue::Counter(c) => DebugValue::Counter(*c),
            DebugValue::Gauge(g) => DebugValue::Gauge(*g),
            DebugValue::Histogram(h) => DebugValue::Histogram(h.clone()),
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gauges_counters_and_the_wait_histogram_reach_the_recorder() {
    snapshotter();
    // min_size 1: the connection is open before the first borrow, whose 30 ms timeout must
    // not cover an open on a loaded machine (it once did).
    let pool = Pool::builder(Numbers)
        .max_size(1)
        .min_size(1)
        .borrow_timeout(Duration::from_millis(30))
        .metrics("orders")
        .build_ready()
        .await
        .unwrap();
    let held = pool.get().await.unwrap();
    // A borrow that times out, and one that waits and then gets the connection.
    assert!(matches!(pool.get().await, Err(PoolError::Timeout { .. })));
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.get().await.map(|c| *c) })
    };
    // Returned once the waiter is queued (not after a fixed sleep, which a loaded machine can
    // outlast before the waiter even runs).
    common::until_waiting(&pool, 1).await;
    drop(held);
    assert_eq!(waiter.await.unwrap().unwrap(), 1);
    let _held_again = pool.get().await.unwrap();

    let waits = Mutex::new(Vec::new());
    let last = common::until(
        Duration::from_secs(5),
        "the pool's task publishes",
        || {
            let s = snapshot();
            if let Some(DebugValue::Histogram(w)) =
                value(&s, "slipstream_pool_wait_seconds", "orders", None)
            {
                waits.lock().unwrap().extend(w);
            }
            (
                value(&s, "slipstream_pool_timeouts_total", "orders", None),
                value(
                    &s,
                    "slipstream_pool_connections",
                    "orders",
                    Some("borrowed"),
                ),
                value(&s, "slipstream_pool_borrows_total", "orders", None),
                value(&s, "slipstream_pool_max_size", "orders", None),
            )
        },
        |(timeouts, borrowed, borrows, max_size)| {
            matches!(timeouts, Some(DebugValue::Counter(1)))
                && matches!(borrowed, Some(DebugValue::Gauge(g)) if g.into_inner() == 1.0)
                && matches!(borrows, Some(DebugValue::Counter(3)))
                && matches!(max_size, Some(DebugValue::Gauge(g)) if g.into_inner() == 1.0)
        },
    )
    .await;
    eprintln!("published within {last:?}");
    let waits = waits.into_inner().unwrap();
    // The one that waited and got the connection; the timed-out borrow counts in
    // timeouts_total instead, and borrows that found a connection idle are not recorded. (This
    // said 2 while the first borrow had to wait for the pool to open the connection.)
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert!(waits.iter().all(|w| w.into_inner() > 0.0), "{waits:?}");
}

/// Captures what `tracing` writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);
impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Borrows and returns the connection, with the place of the borrow as a backtrace shows it
/// (`file:line`): with full debug info a frame also carries this function's name, but a
/// release build's line tables name an inlined async body only `{closure#0}`.
#[inline(never)]
async fn borrow_and_forget(pool: &Pool<Numbers>) -> (slipstream_pool::Pooled<Numbers>, String) {
    let site = format!("tests/observe.rs:{}", line!() + 1);
    let conn = pool.get().await.unwrap();
    (conn, site)
}

// One thread: the pool's task runs where the subscriber is the default.
#[tokio::test(flavor = "current_thread")]
async fn a_connection_held_past_the_leak_threshold_is_reported_once_with_its_borrow_site() {
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let pool = Pool::builder(Numbers)
        .leak_warning(Duration::from_millis(50))
        .build();
    let quick = pool.get().await.unwrap();
    drop(quick);
    let (held, site) = borrow_and_forget(&pool).await;
    common::until(
        Duration::from_secs(5),
        "the leak is reported",
        || pool.stats().leaks_suspected,
        |&n| n >= 1,
    )
    .await;
    // Reported once, not at every pass of the pool's task.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(pool.stats().leaks_suspected, 1);
    let text = out.text();
    assert!(text.contains("WARN"), "{text}");
    assert!(
        text.contains("over the pool's leak_warning (50ms)"),
        "{text}"
    );
    assert!(
        text.contains("borrow_and_forget") || text.contains(&site),
        "the warning names where the connection was borrowed ({site}): {text}"
    );
    drop(held);
    let text = out.text();
    assert!(text.contains("came back after"), "{text}");
}

/// The waits are timed with the CPU's counter (`quanta`), not `Instant`: a wait known to last
/// at least 60 ms is recorded as at least that, by a task and by a thread, in the pool's own
/// histogram (entry k: 2^k to 2^(k+1) µs) and in the published one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_is_recorded_at_least_as_long_as_it_lasted() {
    snapshotter();
    let pool = Pool::builder(Numbers)
        .max_size(1)
        .min_size(1)
        .metrics("timed")
        .build_ready()
        .await
        .unwrap();
    const HELD: Duration = Duration::from_millis(60);
    // 60,000 µs lies in entry 15 (32,768 to 65,535 µs).
    let lowest = (HELD.as_micros() as u64).ilog2() as usize;
    for (round, blocking) in [false, true].into_iter().enumerate() {
        let held = pool.get().await.unwrap();
        let waiter = {
            let pool = pool.clone();
            if blocking {
                tokio::task::spawn_blocking(move || pool.get_blocking().map(|c| *c))
            } else {
                tokio::spawn(async move { pool.get().await.map(|c| *c) })
            }
        };
        common::until_waiting(&pool, 1).await;
        // The wait began before it was counted as waiting, so it lasts at least this sleep.
        tokio::time::sleep(HELD).await;
        drop(held);
        assert_eq!(waiter.await.unwrap().unwrap(), 1);
        let histogram = pool.stats().wait_histogram_us;
        assert_eq!(
            histogram.iter().sum::<u64>(),
            round as u64 + 1,
            "{histogram:?}"
        );
        assert_eq!(
            histogram[..lowest].iter().sum::<u64>(),
            0,
            "a wait of at least {HELD:?} recorded shorter: {histogram:?}"
        );
    }
    let waits = Mutex::new(Vec::new());
    common::until(
        Duration::from_secs(5),
        "the pool's task publishes both waits",
        || {
            if let Some(DebugValue::Histogram(w)) =
                value(&snapshot(), "slipstream_pool_wait_seconds", "timed", None)
            {
                waits.lock().unwrap().extend(w);
            }
            waits.lock().unwrap().len()
        },
        |n| *n >= 2,
    )
    .await;
    let waits = waits.into_inner().unwrap();
    assert_eq!(waits.len(), 2, "{waits:?}");
    assert!(
        waits.iter().all(|w| w.into_inner() >= HELD.as_secs_f64()),
        "{waits:?}"
    );
}

//! An open-loop rate far beyond what the users can start (found by an attacker: `-r 1e9` held
//! every arrival in memory, 0.7 GB per second of window, until the run was OOM-killed). Heap
//! growth is measured with a counting allocator: a test binary of its own, so that no other
//! test's allocations are counted.

mod common;

use std::future::pending;
use std::time::Duration;

use common::{rt, sleeping};
use slipstream_bench::{self as bench, RunConfig};
use slipstream_testkit::CountingAllocator;

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

const MB: usize = 1 << 20;
/// The runner's queue at its limit (arrivals of about 26 bytes each, in tokio's blocks) plus
/// the run's own figures, with room to spare. An unbounded queue passed it within the first
/// second at this rate, even in a debug build (205 MB for 8.6 million arrivals in this run).
const HEAP_LIMIT: usize = 2 * 26 * bench::QUEUE_LIMIT + 8 * MB;

/// A billion arrivals a second for one user that needs a millisecond each: nearly all are
/// never started. The heap stays bounded whatever the rate, every arrival of the window is
/// counted once (done, or censored as never started), and the run says it could not keep up.
#[test]
fn a_rate_beyond_the_users_keeps_memory_bounded_and_counts_every_arrival() {
    let mut c = RunConfig::new(None);
    (c.threads, c.users, c.seed) = (1, 1, 5);
    c.rate = Some(1e9);
    c.duration = Duration::from_secs(2);
    c.grace = Duration::from_millis(200);
    let rt = rt();
    let growth = CountingAllocator::measure();
    let run = rt
        .block_on(bench::run(&sleeping(1), &c, pending::<()>()))
        .unwrap();
    let peak = growth.peak().expect("the counting allocator is installed");
    drop(growth);

    let schedule = run.schedule.as_ref().expect("an open-loop run");
    let t = &run.transactions[0];
    assert!(
        peak < HEAP_LIMIT,
        "the heap grew {} MB for {} arrivals",
        peak / MB,
        schedule.arrivals
    );
    assert!(schedule.arrivals > 1_000_000, "{}", schedule.arrivals);
    assert_eq!(
        t.ok + t.failed + t.censored,
        schedule.arrivals,
        "arrivals lost without a trace"
    );
    assert_eq!(t.censored, run.unfinished);
    let never = schedule.never_started.expect("counted apart");
    assert!(
        never <= run.unfinished && run.unfinished - never <= 1,
        "at most the one user's transaction in flight: {never} of {}",
        run.unfinished
    );
    // Both limits were hit: the queue (the users) and the arrival thread's own pace.
    let warnings = run
        .context
        .as_ref()
        .map(|c| c.warnings.clone())
        .unwrap_or_default();
    let warned = |what: &str| warnings.iter().any(|w| w.contains(what));
    assert!(
        warned("the users could not keep up") && warned("--users"),
        "{warnings:?}"
    );
    assert!(
        warned("the load generator could not keep up"),
        "{warnings:?}"
    );
    let said = bench::report::describe(&run).join("\n");
    assert!(said.contains("turned away by a full queue"), "{said}");
}

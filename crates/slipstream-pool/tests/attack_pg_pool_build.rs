//! Attacks on building a `PgPool` where it cannot run (session 45, helper-55).
//! `PgPoolBuilder::build` and `Registry::pool` return `Result`, and their `# Errors` sections
//! name what goes wrong; neither documents a panic.

use slipstream_pool::{PgPool, PoolError, Registry};

/// Whether `e` is a `PoolError::Config` that says a tokio runtime is needed and how to get one.
fn says_runtime(e: &PoolError) -> bool {
    let text = e.to_string();
    matches!(e, PoolError::Config(_)) && text.contains("tokio runtime") && text.contains("inside")
}

/// Promise: `PgPoolBuilder::build` fails with an error, not a panic (it returns `Result`, and
/// its docs name no panic), when there is no runtime to run the pool's tasks on.
///
/// Steps: build a pool from a plain test thread, outside any tokio runtime.
///
/// Before the fix it panicked in tokio ("there is no reactor running, must be called from the
/// context of a Tokio 1.x runtime") from inside the first sub-pool's build.
#[test]
fn build_outside_a_runtime_is_an_error_that_says_so() {
    let config = "host=127.0.0.1,127.0.0.2 port=1 user=app".parse().unwrap();
    let built = std::panic::catch_unwind(|| PgPool::builder(config).build())
        .expect("PgPoolBuilder::build panicked outside a tokio runtime instead of failing");
    let err = built.expect_err("a pool built with no runtime to run its tasks");
    assert!(says_runtime(&err), "{err}");
}

/// Promise: `Registry::pool` fails with an error, not a panic, outside a runtime, and the
/// registry keeps working for a caller inside one afterwards (nothing half-inserted, its lock
/// not poisoned into a state that matters).
///
/// Before the fix the first call panicked (see above) while holding the registry's lock.
#[test]
fn a_registry_pool_outside_a_runtime_is_an_error_and_the_registry_still_works() {
    let registry = Registry::new();
    let url = "postgres://app@127.0.0.1:1/orders";
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| registry.pool(url, |b| b)))
        .expect("Registry::pool panicked outside a tokio runtime instead of failing");
    let err = got.expect_err("a registry pool built with no runtime");
    assert!(says_runtime(&err), "{err}");
    assert!(
        registry.is_empty(),
        "nothing is kept for a pool that was not built"
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let pool = runtime.block_on(async { registry.pool(url, |b| b) });
    assert!(pool.is_ok(), "{pool:?}");
    assert_eq!(registry.len(), 1);
}

//! Attacks on sizes a generic pool cannot hold (helper h71). `PgPool` refuses a `max_size`
//! or `resize_limit` over 65,536 at build, naming the limit; `Pool::build` returns no
//! `Result`, and bad input must never cause a panic.

use std::time::Duration;

use slipstream_pool::{Manager, Pool};

struct Numbers;

impl Manager for Numbers {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        Ok(1)
    }
}

/// Promise: a pool built with `max_size(usize::MAX)` ("no limit", as one might write it)
/// builds and lends; it does not panic.
///
/// Before the fix: `build` allocated a slot for each of the `usize::MAX` connections and
/// panicked with "capacity overflow".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_usize_max_connections_builds_and_lends() {
    let built = tokio::spawn(async {
        let pool = Pool::builder(Numbers)
            .max_size(usize::MAX)
            .borrow_timeout(Duration::from_secs(30))
            .build();
        let got = *pool.get().await.unwrap();
        (got, pool.stats().max_size)
    })
    .await;
    let (got, max_size) = built.expect("build does not panic");
    assert_eq!(got, 1);
    eprintln!("max_size taken as {max_size}");
}

/// The same for `resize_limit(usize::MAX)`, and a `resize` up to it.
///
/// Before the fix: `build` panicked the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resize_limit_of_usize_max_builds_and_resizes() {
    let built = tokio::spawn(async {
        let pool = Pool::builder(Numbers)
            .max_size(2)
            .resize_limit(usize::MAX)
            .build();
        let set = pool.resize(usize::MAX);
        let got = *pool.get().await.unwrap();
        (got, set)
    })
    .await;
    let (got, set) = built.expect("build does not panic");
    assert_eq!(got, 1);
    eprintln!("resize set {set}");
}

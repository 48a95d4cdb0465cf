//! Uncontended borrow + return: one borrower, one connection, each pool on the same trivial
//! in-memory connection type (a number). Async pools run inside one runtime per measurement
//! (criterion's `to_async`). `cargo bench -p slipstream-pool --bench uncontended`.

use std::convert::Infallible;
use std::sync::{Condvar, Mutex};

use criterion::{Criterion, criterion_group, criterion_main};

struct Ours;
impl slipstream_pool::Manager for Ours {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        Ok(0)
    }
}

struct Dead;
impl deadpool::managed::Manager for Dead {
    type Type = u64;
    type Error = Infallible;
    async fn create(&self) -> Result<u64, Infallible> {
        Ok(0)
    }
    async fn recycle(
        &self,
        _: &mut u64,
        _: &deadpool::managed::Metrics,
    ) -> deadpool::managed::RecycleResult<Infallible> {
        Ok(())
    }
}

struct B8;
impl bb8::ManageConnection for B8 {
    type Connection = u64;
    type Error = Infallible;
    async fn connect(&self) -> Result<u64, Infallible> {
        Ok(0)
    }
    async fn is_valid(&self, _: &mut u64) -> Result<(), Infallible> {
        Ok(())
    }
    fn has_broken(&self, _: &mut u64) -> bool {
        false
    }
}

#[derive(Debug)]
struct Never;
impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}
impl std::error::Error for Never {}

struct R2;
impl r2d2::ManageConnection for R2 {
    type Connection = u64;
    type Error = Never;
    fn connect(&self) -> Result<u64, Never> {
        Ok(0)
    }
    fn is_valid(&self, _: &mut u64) -> Result<(), Never> {
        Ok(())
    }
    fn has_broken(&self, _: &mut u64) -> bool {
        false
    }
}

fn uncontended(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut g = c.benchmark_group("uncontended borrow+return");

    let ours = rt.block_on(async {
        slipstream_pool::Pool::builder(Ours)
            .max_size(1)
            .min_size(1)
            .build_ready()
            .await
            .expect("one connection")
    });
    g.bench_function("slipstream-pool get (async)", |b| {
        b.to_async(&rt)
            .iter(|| async { drop(ours.get().await.expect("idle")) })
    });
    g.bench_function("slipstream-pool get_blocking", |b| {
        b.iter(|| drop(ours.get_blocking().expect("idle")))
    });
    g.bench_function("slipstream-pool try_get", |b| {
        b.iter(|| drop(ours.try_get().expect("idle")))
    });

    let dead: deadpool::managed::Pool<Dead> = deadpool::managed::Pool::builder(Dead)
        .max_size(1)
        .build()
        .expect("deadpool");
    g.bench_function("deadpool get (async)", |b| {
        b.to_async(&rt)
            .iter(|| async { drop(dead.get().await.expect("idle")) })
    });

    let b8 = rt
        .block_on(
            bb8::Pool::builder()
                .max_size(1)
                .test_on_check_out(false)
                .build(B8),
        )
        .expect("bb8");
    g.bench_function("bb8 get (async)", |b| {
        b.to_async(&rt)
            .iter(|| async { drop(b8.get().await.expect("idle")) })
    });

    let r2 = r2d2::Pool::builder()
        .max_size(1)
        .test_on_check_out(false)
        .build(R2)
        .expect("r2d2");
    g.bench_function("r2d2 get", |b| b.iter(|| drop(r2.get().expect("idle"))));

    let free = Mutex::new(vec![0u64]);
    let freed = Condvar::new();
    g.bench_function("Mutex + Condvar", |b| {
        b.iter(|| {
            let mut guard = free.lock().unwrap_or_else(|p| p.into_inner());
            let conn = loop {
                if let Some(c) = guard.pop() {
                    break c;
                }
                guard = freed.wait(guard).unwrap_or_else(|p| p.into_inner());
            };
            drop(guard);
            free.lock().unwrap_or_else(|p| p.into_inner()).push(conn);
            freed.notify_one();
        })
    });

    // What the async harness itself costs per iteration.
    g.bench_function("a ready future (async baseline)", |b| {
        b.to_async(&rt).iter(|| async { std::hint::black_box(1) })
    });
    g.finish();
}

criterion_group!(benches, uncontended);
criterion_main!(benches);

//! Uncontended borrow + return: one borrower, one connection, each pool on the same trivial
//! in-memory connection type (a number). Async pools run inside one runtime per measurement
//! (criterion's `to_async`). `cargo bench -p slipstream-lab --bench pool_uncontended`.

use criterion::{Criterion, criterion_group, criterion_main};
use slipstream_lab::pool_peers::{B8, Dead, MutexPool, Ours, R2};

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

    let old = MutexPool::new(1);
    g.bench_function("Mutex + Condvar", |b| {
        b.iter(|| {
            let conn = old.get();
            old.put(conn);
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

//! Attack tests (review of issue 19's rewritten core): threads and tasks borrowing at once,
//! cancelled async borrows, timeouts, resize and evict during waits. Each test is bounded, and
//! checks at the end that every borrow completed and the pool's counts add up (nothing lost).

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::{Numbers, join_threads, numbers, two_workers};
use slipstream_pool::{Pool, PoolError};

/// The whole test's bound: a lost wake-up shows as this timeout, not a hang.
const LIMIT: Duration = Duration::from_secs(60);

/// Polls the future `polls` times at most, then drops it; `None` if it was dropped pending.
struct DropAfter<'a, T> {
    fut: Pin<Box<dyn Future<Output = T> + Send + 'a>>,
    left: usize,
}
impl<T> Future for DropAfter<'_, T> {
    type Output = Option<T>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        match self.fut.as_mut().poll(cx) {
            Poll::Ready(v) => Poll::Ready(Some(v)),
            Poll::Pending if self.left <= 1 => Poll::Ready(None),
            Poll::Pending => {
                self.left -= 1;
                Poll::Pending
            }
        }
    }
}

/// After the storm: every slot idle, nobody waiting, and all `max` connections borrowable at
/// once without waiting (a slot lost to a cancelled borrow would make one of these fail).
async fn all_slots_back(pool: &Pool<Numbers>, max: usize) {
    // Returns settle on the pool's task; wait for the condition, bounded.
    let settled = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let s = pool.stats();
            if s.borrowed == 0 && s.waiting == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let s = pool.stats();
    assert!(settled.is_ok(), "slots never came back: {s:?}");
    assert_eq!(s.idle, s.open, "open but neither idle nor borrowed: {s:?}");
    assert!(s.open <= max, "more open than max_size: {s:?}");
    let mut held = Vec::new();
    for i in 0..s.open {
        match pool.try_get() {
            Some(c) => held.push(c),
            None => panic!(
                "idle connection {i} of {} could not be borrowed: {s:?}",
                s.open
            ),
        }
    }
    // The rest are opened on demand (retried: a short borrow timeout races the opener).
    for i in s.open..max {
        let mut got = None;
        for _ in 0..200 {
            if let Ok(Ok(c)) = tokio::time::timeout(Duration::from_secs(5), pool.get()).await {
                got = Some(c);
                break;
            }
        }
        held.push(got.unwrap_or_else(|| panic!("borrow {i} of {max} never succeeded: {s:?}")));
    }
}

// Threads (get_blocking) and tasks (get) on a small pool for ~2 s; a third of the task
// borrows are cancelled after a few polls. Every borrow that was not cancelled must succeed
// (the borrow timeout is far above any hold), and at the end every slot is back.
#[test]
fn threads_and_tasks_with_cancelled_borrows_lose_no_slot_and_no_wake_up() {
    const MAX: usize = 3;
    let rt = two_workers();
    let pool = rt.block_on(async {
        Pool::builder(numbers())
            .max_size(MAX)
            .borrow_timeout(Duration::from_secs(20))
            .build()
    });
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut threads = Vec::new();
    for _ in 0..4 {
        let (pool, stop, done, failures) =
            (pool.clone(), stop.clone(), done.clone(), failures.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match pool.get_blocking() {
                    Ok(c) => {
                        std::hint::black_box(*c);
                        std::thread::yield_now();
                        drop(c);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => failures.lock().unwrap().push(format!("thread: {e}")),
                }
            }
        }));
    }
    let cancelled = Arc::new(AtomicU64::new(0));
    rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..8u64 {
            let (pool, stop, done, failures, cancelled) = (
                pool.clone(),
                stop.clone(),
                done.clone(),
                failures.clone(),
                cancelled.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    if (i + t).is_multiple_of(3) {
                        let polls = 1 + (i % 4) as usize;
                        let r = DropAfter {
                            fut: Box::pin(pool.get()),
                            left: polls,
                        }
                        .await;
                        if r.is_none() {
                            cancelled.fetch_add(1, Ordering::Relaxed);
                        }
                        // A borrow that completed is returned here, dropped.
                        tokio::task::yield_now().await;
                        continue;
                    }
                    match pool.get().await {
                        Ok(c) => {
                            tokio::task::yield_now().await;
                            drop(c);
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => failures.lock().unwrap().push(format!("task: {e}")),
                    }
                }
            }));
        }
        let run = async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            stop.store(true, Ordering::Relaxed);
            for t in tasks {
                t.await.unwrap();
            }
        };
        tokio::time::timeout(LIMIT, run)
            .await
            .unwrap_or_else(|_| panic!("tasks hung: {:?}", pool.stats()));
    });
    join_threads(&pool, threads, Instant::now() + LIMIT);
    let failures = failures.lock().unwrap().clone();
    assert!(failures.is_empty(), "borrows failed: {failures:?}");
    assert!(
        cancelled.load(Ordering::Relaxed) > 0,
        "no borrow was cancelled: the test proved nothing"
    );
    assert!(done.load(Ordering::Relaxed) > 0);
    rt.block_on(all_slots_back(&pool, MAX));
    let s = pool.stats();
    assert_eq!(
        s.timeouts, 0,
        "a borrow timed out with slots turning over: {s:?}"
    );
}

// Borrowers wait on a full pool while it is resized down, up, and evicted; a holder returns.
// Every waiter must be served (no wait for ever while a slot is idle) and the counts add up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_and_evict_during_waits_serve_every_waiter() {
    let pool = Pool::builder(numbers())
        .max_size(2)
        .borrow_timeout(Duration::from_secs(20))
        .build();
    let a = pool.get().await.unwrap();
    let b = pool.get().await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..6 {
        let pool = pool.clone();
        waiters.push(tokio::spawn(async move {
            let c = pool.get().await?;
            tokio::task::yield_now().await;
            drop(c);
            Ok::<_, PoolError>(())
        }));
    }
    // Let the waiters queue (the condition: the pool counts them), bounded.
    tokio::time::timeout(Duration::from_secs(10), async {
        while pool.stats().waiting < 6 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("six waiters queued");
    pool.resize(1);
    pool.evict();
    drop(a);
    pool.resize(4);
    drop(b);
    for w in waiters {
        tokio::time::timeout(LIMIT, w)
            .await
            .unwrap_or_else(|_| panic!("a waiter was never served: {:?}", pool.stats()))
            .unwrap()
            .unwrap();
    }
    all_slots_back(&pool, 4).await;
}

// A borrow that times out is honoured (an error, not a hang) and leaves nothing behind; a
// cancelled waiter at the head of the queue passes the slot on to the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_head_waiter_passes_the_slot_on() {
    let pool = Pool::builder(numbers())
        .max_size(1)
        .borrow_timeout(Duration::from_secs(20))
        .build();
    let held = pool.get().await.unwrap();
    // The head waiter: polled until queued, then dropped once the release is under way.
    let head = pool.clone();
    let mut head_fut: Pin<Box<dyn Future<Output = _> + Send>> =
        Box::pin(async move { head.get().await });
    assert!(futures_poll_once(&mut head_fut).await.is_none());
    let second = pool.clone();
    let second = tokio::spawn(async move { second.get().await.map(drop) });
    tokio::time::timeout(Duration::from_secs(10), async {
        while pool.stats().waiting < 2 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("both waiters queued");
    drop(held); // hands the slot to the head, which is dropped without being polled again
    drop(head_fut);
    tokio::time::timeout(LIMIT, second)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the slot handed to a dropped waiter was lost: {:?}",
                pool.stats()
            )
        })
        .unwrap()
        .unwrap();
    all_slots_back(&pool, 1).await;

    // And a plain timeout is honoured.
    let quick = Pool::builder(numbers())
        .max_size(1)
        .borrow_timeout(Duration::from_millis(50))
        .build();
    // The first open races the 50 ms bound on a loaded machine; retry it, bounded.
    let mut held = None;
    for _ in 0..200 {
        if let Ok(c) = quick.get().await {
            held = Some(c);
            break;
        }
    }
    let held = held.expect("the first borrow of an empty pool never succeeded");
    let r = tokio::time::timeout(LIMIT, quick.get())
        .await
        .expect("timeout honoured");
    assert!(
        matches!(r, Err(PoolError::Timeout { .. })),
        "{:?}",
        r.map(|_| ())
    );
    drop(held);
    all_slots_back(&quick, 1).await;
}

/// Polls once; `Some` if it completed.
async fn futures_poll_once<T>(f: &mut Pin<Box<dyn Future<Output = T> + Send>>) -> Option<T> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match f.as_mut().poll(cx) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        })
    })
    .await
}

// Timeouts racing hand-offs: a 1 ms borrow timeout with slots turning over all the time, so
// waiters time out at the moment a release hands them a slot. Timeouts are expected; a slot
// handed to a waiter that had just timed out must not be lost.
#[test]
fn timeouts_racing_hand_offs_lose_no_slot() {
    const MAX: usize = 2;
    let rt = two_workers();
    let pool = rt.block_on(async {
        Pool::builder(numbers())
            .max_size(MAX)
            .borrow_timeout(Duration::from_millis(1))
            .build()
    });
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let (pool, stop) = (pool.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(c) = pool.get_blocking() {
                        std::thread::yield_now();
                        drop(c);
                    }
                }
            })
        })
        .collect();
    rt.block_on(async {
        let tasks: Vec<_> = (0..6)
            .map(|_| {
                let (pool, stop) = (pool.clone(), stop.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok(c) = pool.get().await {
                            tokio::task::yield_now().await;
                            drop(c);
                        }
                    }
                })
            })
            .collect();
        // 2 s, or on until a borrow has timed out (once seen none in 2 s): the race must
        // have happened for the check below to mean anything.
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_secs(2)
            || (pool.stats().timeouts == 0 && start.elapsed() < Duration::from_secs(10))
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            tokio::time::timeout(LIMIT, t)
                .await
                .expect("a task hung")
                .unwrap();
        }
    });
    for t in threads {
        t.join().unwrap();
    }
    let s = pool.stats();
    eprintln!("after the storm: {s:?}");
    assert!(
        s.timeouts > 0,
        "no borrow timed out: the race was not exercised"
    );
    rt.block_on(all_slots_back(&pool, MAX));
}

// A borrow cancelled at every poll while the pool validates the connection it picked (a round
// trip on a real server), with Reset::None: the connection goes back owing the validation's
// reply; the next borrower's autocommit writes must all be kept and nothing may hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrow_cancelled_during_validation_loses_no_slot_and_no_write() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    watcher
        .batch_execute("CREATE TABLE t (x int)")
        .await
        .unwrap();
    let config = cluster.url().parse().unwrap();
    let pool = Pool::builder(
        slipstream_pool::PgManager::new(config).reset_on_return(slipstream_pool::Reset::None),
    )
    .max_size(1)
    .validate_after(Duration::ZERO)
    .borrow_timeout(Duration::from_secs(20))
    .build();
    let run = async {
        let mut abandoned = 0;
        for i in 0..24i32 {
            let k = 1 + (i as usize % 6);
            let cancelled = DropAfter {
                fut: Box::pin(pool.get()),
                left: k,
            };
            if cancelled.await.is_none() {
                abandoned += 1;
            }
            let mut conn = pool.get().await.unwrap();
            conn.execute("INSERT INTO t VALUES ($1)", &[&i])
                .await
                .unwrap();
        }
        abandoned
    };
    let abandoned = tokio::time::timeout(LIMIT, run)
        .await
        .unwrap_or_else(|_| panic!("hung: {:?}", pool.stats()));
    assert!(abandoned > 0, "no borrow was cancelled");
    let kept: i64 = watcher
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(kept, 24, "writes were lost");
    let s = pool.stats();
    assert!(s.open <= 1 && s.borrowed == 0, "{s:?}");
}

/// A pool of `max` slots (5 s borrow timeout) on its own two-worker runtime.
fn hogged_pool(max: usize) -> (tokio::runtime::Runtime, Pool<Numbers>) {
    let rt = two_workers();
    let pool = rt.block_on(async {
        Pool::builder(numbers())
            .max_size(max)
            .borrow_timeout(Duration::from_secs(5))
            .build()
    });
    (rt, pool)
}

/// `n` threads re-borrowing in a tight loop until `stop`; each returns its borrow count.
fn spawn_hogs(
    pool: &Pool<Numbers>,
    n: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<u64>> {
    (0..n)
        .map(|_| {
            let (pool, stop) = (pool.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(c) = pool.get_blocking() {
                        std::hint::black_box(*c);
                        n += 1;
                    }
                }
                n
            })
        })
        .collect()
}

// Slices without starvation: a thread handed a slot may keep re-borrowing it for a slice (a
// count and a time bound) before its return hands over. Four hogs re-borrow two slots in a
// tight loop, so they are handed slots and run slices back to back, while 64 threads each need
// 20 borrows: every one of those borrows must complete within its 5 s borrow timeout, and
// every slot comes back.
#[test]
fn slices_let_every_queued_thread_through() {
    let (rt, pool) = hogged_pool(2);
    let stop = Arc::new(AtomicBool::new(false));
    let hogs = spawn_hogs(&pool, 4, &stop);
    let waiters: Vec<_> = (0..64)
        .map(|_| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                (0..20)
                    .map(|_| pool.get_blocking().map(drop).map_err(|e| e.to_string()))
                    .filter(|r| r.is_err())
                    .count()
            })
        })
        .collect();
    let deadline = Instant::now() + LIMIT;
    while !waiters.iter().all(|w| w.is_finished()) {
        assert!(
            Instant::now() < deadline,
            "a waiting thread hung: {:?}",
            pool.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let failures: usize = waiters.into_iter().map(|w| w.join().unwrap()).sum();
    stop.store(true, Ordering::Relaxed);
    let hogged: u64 = hogs.into_iter().map(|h| h.join().unwrap()).sum();
    eprintln!("hogs borrowed {hogged} times; {:?}", pool.stats());
    assert_eq!(failures, 0, "waiting threads timed out: {:?}", pool.stats());
    rt.block_on(all_slots_back(&pool, 2));
}

// Barging without starvation: two threads re-borrow the only slot in a tight loop (each release
// may barge past waiters), while a task and a third thread each need 30 borrows. The fairness
// bound must let the waiters through: every one of their borrows completes within its (long,
// 5 s) borrow timeout.
#[test]
fn tight_re_borrowers_do_not_starve_waiters() {
    let (rt, pool) = hogged_pool(1);
    let stop = Arc::new(AtomicBool::new(false));
    let hogs = spawn_hogs(&pool, 2, &stop);
    let waiter_thread = {
        let pool = pool.clone();
        std::thread::spawn(move || {
            (0..30)
                .map(|_| pool.get_blocking().map(drop).map_err(|e| e.to_string()))
                .filter(|r| r.is_err())
                .count()
        })
    };
    let task_failures = rt.block_on(async {
        let mut failures = 0;
        for _ in 0..30 {
            if pool.get().await.is_err() {
                failures += 1;
            }
        }
        failures
    });
    let [thread_failures] = join_threads(&pool, vec![waiter_thread], Instant::now() + LIMIT)[..]
    else {
        unreachable!("join_threads returns one result per thread")
    };
    stop.store(true, Ordering::Relaxed);
    let hogged: u64 = hogs.into_iter().map(|h| h.join().unwrap()).sum();
    eprintln!("hogs borrowed {hogged} times; {:?}", pool.stats());
    assert_eq!(task_failures, 0, "the task starved: {:?}", pool.stats());
    assert_eq!(
        thread_failures,
        0,
        "the waiting thread starved: {:?}",
        pool.stats()
    );
    rt.block_on(all_slots_back(&pool, 1));
}

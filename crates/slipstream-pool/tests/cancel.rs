//! Cancelled calls on pooled connections (issue 17): a future dropped part-way never makes the
//! pool lend a connection inside a transaction its next borrower did not open, so no write of
//! that borrower is lost.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use slipstream_pg::{PipelineMode, PipelineOptions};
use slipstream_pool::{PgManager, Pool, Reset};
use slipstream_testkit::Cluster;

const LIMIT: Duration = Duration::from_secs(120);

fn pool(cluster: &Cluster, reset: Reset) -> Pool<PgManager> {
    let config = cluster.url().parse().expect("the testkit's URL parses");
    Pool::builder(PgManager::new(config).reset_on_return(reset))
        .max_size(1)
        .borrow_timeout(Duration::from_secs(30))
        .build()
}

/// Polls a future once, only; `true` if it was still pending (and is now dropped).
struct OnePoll<'a, T>(Pin<Box<dyn Future<Output = T> + Send + 'a>>);
impl<T> Future for OnePoll<'_, T> {
    type Output = bool;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        Poll::Ready(self.0.as_mut().poll(cx).is_pending())
    }
}

/// `cycles` times: borrow, start `cancelled` and drop it after one poll, return; borrow,
/// autocommit INSERT, return. Every INSERT must be visible from another connection.
async fn no_write_lost<F>(reset: Reset, cycles: i32, cancelled: F)
where
    F: for<'c> Fn(&'c mut slipstream_pg::Client) -> Pin<Box<dyn Future<Output = ()> + Send + 'c>>,
{
    let cluster = Cluster::start().unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    watcher
        .batch_execute("CREATE TABLE t (x int)")
        .await
        .unwrap();
    let pool = pool(&cluster, reset);
    let run = async {
        let mut abandoned = 0;
        for i in 0..cycles {
            {
                let mut conn = pool.get().await.unwrap();
                if OnePoll(cancelled(&mut conn)).await {
                    abandoned += 1;
                }
            }
            {
                let mut conn = pool.get().await.unwrap();
                conn.execute("INSERT INTO t VALUES ($1)", &[&i])
                    .await
                    .unwrap();
            }
        }
        abandoned
    };
    let abandoned = tokio::time::timeout(LIMIT, run)
        .await
        .expect("no hang within the limit");
    assert!(
        abandoned > 0,
        "no call was ever abandoned: the test proved nothing"
    );
    let kept: i64 = watcher
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(
        kept,
        cycles as i64,
        "{} of {cycles} writes were lost",
        cycles as i64 - kept
    );
}

#[tokio::test]
async fn a_dropped_transaction_future_loses_no_later_write() {
    no_write_lost(Reset::Rollback, 200, |c| {
        Box::pin(async move {
            let _ = c.transaction().await;
        })
    })
    .await;
}

#[tokio::test]
async fn a_dropped_batch_execute_begin_loses_no_later_write() {
    for reset in [Reset::Rollback, Reset::Session, Reset::None] {
        no_write_lost(reset, 30, |c| {
            Box::pin(async move {
                let _ = c.batch_execute("BEGIN").await;
            })
        })
        .await;
    }
}

#[tokio::test]
async fn a_dropped_pipeline_holding_a_begin_loses_no_later_write() {
    for mode in [PipelineMode::ContinueOnError, PipelineMode::AbortOnError] {
        no_write_lost(Reset::Rollback, 30, move |c| {
            Box::pin(async move {
                let mut p = c.pipeline_with(PipelineOptions::new().mode(mode));
                p.execute("BEGIN", &[]).await.unwrap();
                p.execute("SELECT 1", &[]).await.unwrap();
                let _ = p.end().await;
            })
        })
        .await;
    }
}

/// Drops `fut` after its `polls`-th poll (polled only when woken); `None` if it was dropped.
struct DropAfter<'a, T> {
    fut: Pin<Box<dyn Future<Output = T> + Send + 'a>>,
    left: usize,
}
impl<T> Future for DropAfter<'_, T> {
    type Output = Option<T>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        match self.fut.as_mut().poll(cx) {
            Poll::Ready(v) => Poll::Ready(Some(v)),
            Poll::Pending => {
                self.left -= 1;
                match self.left {
                    0 => Poll::Ready(None),
                    _ => Poll::Pending,
                }
            }
        }
    }
}

type Call =
    for<'a> fn(
        &'a mut slipstream_pg::Client,
    ) -> Pin<Box<dyn Future<Output = Result<(), slipstream_pg::Error>> + Send + 'a>>;

/// The cancellation harness through the pool: each call that writes or opens a transaction is
/// dropped after its k-th poll for every k until it completes, on a one-connection pool; after
/// each, the next borrower's autocommit write must be kept. A call that completed keeps its own
/// write too.
#[tokio::test]
async fn through_the_pool_no_write_is_lost_whatever_poll_a_call_is_dropped_at() {
    let calls: Vec<(&str, Call)> = vec![
        ("transaction + commit", |c| {
            Box::pin(async move {
                let mut tx = c.transaction().await?;
                tx.execute("INSERT INTO done VALUES ('transaction + commit')", &[])
                    .await?;
                tx.commit().await
            })
        }),
        ("transaction left open", |c| {
            Box::pin(async move {
                let mut tx = c.transaction().await?;
                tx.execute("SELECT 1", &[]).await?;
                std::mem::forget(tx.savepoint("s").await?);
                Ok(())
            })
        }),
        ("batch_execute BEGIN", |c| {
            Box::pin(async move { c.batch_execute("BEGIN; SELECT 1").await })
        }),
        ("execute", |c| {
            Box::pin(async move {
                c.execute("INSERT INTO done VALUES ('execute')", &[])
                    .await
                    .map(drop)
            })
        }),
        ("copy_in", |c| {
            Box::pin(async move {
                let mut copy = c.copy_in("COPY done FROM STDIN").await?;
                copy.write(b"copy_in\n").await?;
                copy.finish().await.map(drop)
            })
        }),
        ("pipeline holding a BEGIN", |c| {
            Box::pin(async move {
                let mut p =
                    c.pipeline_with(PipelineOptions::new().mode(PipelineMode::AbortOnError));
                p.execute("BEGIN", &[]).await?;
                p.execute("SELECT 1", &[]).await?;
                let q = p.query("SELECT 2", &[]).await?;
                p.process(&q).await?;
                p.end().await;
                Ok(())
            })
        }),
    ];
    let cluster = Cluster::start().unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    watcher
        .batch_execute("CREATE TABLE t (x int); CREATE TABLE done (name text)")
        .await
        .unwrap();
    for reset in [Reset::Rollback, Reset::Session, Reset::None] {
        let pool = pool(&cluster, reset);
        watcher.batch_execute("TRUNCATE t, done").await.unwrap();
        let mut markers = 0i64;
        let mut completed = Vec::new();
        for (name, call) in &calls {
            for k in 1..=400 {
                let outcome = {
                    let mut conn = pool.get().await.unwrap();
                    tokio::time::timeout(
                        LIMIT,
                        DropAfter {
                            fut: call(&mut conn),
                            left: k,
                        },
                    )
                    .await
                    .expect("no hang")
                };
                {
                    let mut conn = pool.get().await.unwrap();
                    tokio::time::timeout(
                        LIMIT,
                        conn.execute("INSERT INTO t VALUES ($1)", &[&(k as i32)]),
                    )
                    .await
                    .expect("no hang")
                    .unwrap_or_else(|e| panic!("{reset:?} {name} at poll {k}: next borrower: {e}"));
                    markers += 1;
                }
                let kept: i64 = watcher
                    .query_one("SELECT count(*) FROM t", &[])
                    .await
                    .unwrap()
                    .get(0)
                    .unwrap();
                assert_eq!(
                    kept, markers,
                    "{reset:?}: {name} dropped at poll {k} lost a write"
                );
                if let Some(result) = outcome {
                    result.unwrap_or_else(|e| panic!("{name}: {e}"));
                    completed.push(*name);
                    break;
                }
            }
        }
        assert_eq!(
            completed.len(),
            calls.len(),
            "every call completed: {completed:?}"
        );
        // A completed call's own write was kept as well (the ones that write one).
        for name in ["transaction + commit", "execute", "copy_in"] {
            let n: i64 = watcher
                .query_one("SELECT count(*) FROM done WHERE name = $1", &[&name])
                .await
                .unwrap()
                .get(0)
                .unwrap();
            assert!(n >= 1, "{reset:?}: the completed {name} was kept");
        }
    }
}

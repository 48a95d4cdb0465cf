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

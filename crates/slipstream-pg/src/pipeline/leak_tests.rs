//! A pipeline block leaked (`std::mem::forget`) after its open abort-mode group reached the
//! server all but its last bytes: which bytes a socket takes cannot be chosen from outside,
//! so these tests set where the socket stopped by hand ([`Connection::send_now`]) and run
//! the rest against a real server (pipelining.md, "Leaking a pipeline").

use postgres_protocol::message::frontend;

use crate::{Client, PipelineMode, PipelineOptions};

async fn setup() -> (slipstream_testkit::Cluster, Client, Client) {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = crate::connect(&cluster.url()).await.unwrap();
    let watcher = crate::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE given_up (n int)")
        .await
        .unwrap();
    (cluster, c, watcher)
}

fn abort_mode() -> PipelineOptions {
    PipelineOptions::new().mode(PipelineMode::AbortOnError)
}

/// The next call after the leak answers `7` on a connection still open, within 10 s, and
/// nothing of the block committed.
async fn check_given_up(c: &mut Client, watcher: &mut Client, what: &str) {
    let next = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        c.query_one("SELECT 7", &[]),
    )
    .await
    .unwrap_or_else(|_| panic!("{what}: the next call did not answer within 10 s"));
    let row = next.unwrap_or_else(|e| panic!("{what}: the next call failed: {e}"));
    assert_eq!(row.get::<_, i32>(0).unwrap(), 7, "{what}");
    assert!(!c.is_broken(), "{what}");
    assert_eq!(
        c.transaction_status(),
        crate::TransactionStatus::Idle,
        "{what}"
    );
    let n: i64 = watcher
        .query_one("SELECT count(*) FROM given_up", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(n, 0, "{what}: the leaked block's INSERT committed");
}

/// Promise (pipelining.md, "Leaking a pipeline": the open group is "failed on purpose before
/// its `Sync` if all of it was" sent). A group whose operations all reached the server but
/// whose trailing `Flush` (the one `process` or the sliding window appends) did not, is all
/// of it as far as the server's work goes: a `Flush` runs nothing.
///
/// Steps: an abort-mode block runs `INSERT` and `SELECT 42`, `process` reads the `SELECT`
/// (the group stays open); a `Flush` is left in the write buffer, as a write the socket took
/// all but its last five bytes of leaves it; the block is leaked. `SELECT 7` must answer on
/// the same connection and the `INSERT` must not commit.
///
/// Before the fix: any byte of the group left in the buffer closed the connection: `SELECT
/// 7` failed with "a pipeline block was leaked ... the connection is closed".
#[tokio::test]
async fn a_leaked_block_with_only_its_flush_unsent_is_failed_and_the_connection_kept() {
    let (_cluster, mut c, mut watcher) = setup().await;
    {
        let mut p = c.pipeline_with(abort_mode());
        p.execute("INSERT INTO given_up VALUES (1)", &[])
            .await
            .unwrap();
        let sel = p.query("SELECT 42", &[]).await.unwrap();
        assert_eq!(
            p.process(&sel).await.unwrap()[0].get::<_, i32>(0).unwrap(),
            42
        );
        assert!(p.client.conn.wbuf.is_empty());
        frontend::flush(&mut p.client.conn.wbuf);
        std::mem::forget(p);
    }
    check_given_up(&mut c, &mut watcher, "only the Flush unsent").await;
}

/// Promise (as above): the socket stopped inside the group's last operation, every earlier
/// one sent. That operation's rest can go whole (as the block's `Drop` sends one the socket
/// has begun) and the group then be failed on purpose; and one the socket has not begun yet
/// can be taken back.
///
/// Steps: an abort-mode block runs `INSERT 1`, `process` sends it; `INSERT 2` is queued;
/// the socket is given the first `part` bytes of the buffer (half of `INSERT 2`, or none of
/// it); the block is leaked. `SELECT 7` must answer and neither `INSERT` commit.
///
/// Before the fix: the connection was closed, as above.
#[tokio::test]
async fn a_leaked_block_stopped_in_or_before_its_last_operation_is_failed_and_kept() {
    let (_cluster, mut c, mut watcher) = setup().await;
    for half in [true, false] {
        {
            let mut p = c.pipeline_with(abort_mode());
            let first = p
                .execute("INSERT INTO given_up VALUES (1)", &[])
                .await
                .unwrap();
            assert_eq!(p.process(&first).await.unwrap(), 1);
            p.execute("INSERT INTO given_up VALUES (2)", &[])
                .await
                .unwrap();
            let queued = p.client.conn.wbuf.len();
            assert!(queued > 0, "the second INSERT was sent at once");
            let part = if half { queued / 2 } else { 0 };
            p.client.conn.send_now(part).await.unwrap();
            std::mem::forget(p);
        }
        let what = if half {
            "the last operation begun"
        } else {
            "the last operation unsent"
        };
        check_given_up(&mut c, &mut watcher, what).await;
    }
}

/// Held (the rule pipelining.md keeps): the socket stopped inside an operation before the
/// group's last one; only the block knew where the operations after it begin, so the
/// connection is closed, and the next call says why. Nothing commits.
#[tokio::test]
async fn held_a_leaked_block_stopped_before_its_last_operation_closes_the_connection() {
    let (_cluster, mut c, mut watcher) = setup().await;
    {
        let mut p = c.pipeline_with(abort_mode());
        p.execute("INSERT INTO given_up VALUES (1)", &[])
            .await
            .unwrap();
        p.execute("INSERT INTO given_up VALUES (2)", &[])
            .await
            .unwrap();
        let queued = p.client.conn.wbuf.len();
        p.client.conn.send_now(queued / 4).await.unwrap();
        std::mem::forget(p);
    }
    let e = c.query_one("SELECT 7", &[]).await.unwrap_err();
    assert!(c.is_broken() && e.to_string().contains("leaked"), "{e}");
    let n: i64 = watcher
        .query_one("SELECT count(*) FROM given_up", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(n, 0);
}

//! A backend crash and a server restart: the store comes back empty (shared memory is
//! reinitialized), every answer is still right, and lookups refill it.

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use slipstream_pg::Client;

async fn entries(c: &mut Client) -> i64 {
    memopt_check::scalar(c, "SELECT entries FROM memopt.stats_total")
        .await
        .unwrap()
}

async fn check_all(c: &mut Client, rows: i32) {
    let wrong: i64 = c
        .query_one(
            &format!(
                "SELECT count(*) FROM generate_series(1, {rows}) k
                  WHERE (SELECT v FROM t WHERE t.k = k.k) IS DISTINCT FROM 'v' || k"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(wrong, 0);
    for k in 1..=50 {
        let v: String = c
            .query_one("SELECT v FROM t WHERE k = $1", &[&k])
            .await
            .unwrap()
            .get(0)
            .unwrap();
        assert_eq!(v, format!("v{k}"));
    }
}

async fn reconnect(url: &str) -> Client {
    for _ in 0..100 {
        if let Ok(c) = slipstream_pg::connect(url).await {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the server did not come back within 10 s");
}

#[tokio::test]
async fn a_backend_crash_and_a_restart_leave_an_empty_store_and_right_answers() {
    // The testkit's default synchronous_commit = off would lose the setup's commits with the
    // WAL buffers in the crash.
    let mut cluster =
        memopt_check::cluster(&[("restart_after_crash", "on"), ("synchronous_commit", "on")])
            .unwrap();
    let url = cluster.url();
    let mut c = slipstream_pg::connect(&url).await.unwrap();
    memopt_check::table(&mut c, "t", 1000).await.unwrap();
    memopt_check::populate(&mut c, "t").await.unwrap();
    assert_eq!(entries(&mut c).await, 1000);

    // SIGKILL one backend: the postmaster resets shared memory for everyone.
    let mut victim = slipstream_pg::connect(&url).await.unwrap();
    let pid: i32 = memopt_check::scalar(&mut victim, "SELECT pg_backend_pid()")
        .await
        .unwrap();
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    drop(victim);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut c = reconnect(&url).await;
    assert_eq!(
        entries(&mut c).await,
        0,
        "the store survived a crash restart"
    );
    check_all(&mut c, 1000).await;
    assert!(
        entries(&mut c).await >= 50,
        "lookups did not refill the store"
    );

    // A clean restart starts from an empty store too.
    drop(c);
    cluster.restart().unwrap();
    let mut c = reconnect(&url).await;
    assert_eq!(entries(&mut c).await, 0, "the store survived a restart");
    check_all(&mut c, 1000).await;
}

/// Promise: "A crashed backend cannot leave a fence up: the postmaster resets shared memory
/// after a backend crash", and after recovery every lookup agrees with the normal plan.
///
/// Steps: a writer updates key 1 with its commit's cleanup held 10 s
/// (`memopt.test_cleanup_delay`): the commit is durable and visible, the key's fence is up.
/// A reader looks key 1 up meanwhile (through the scan and `memopt.get`: the new value, a
/// `fenced` miss), then the writer is killed with SIGKILL inside that window. After the
/// restart every key agrees with the normal plan, key 1 has the committed value, and the key
/// is served from the store again (no fence survived).
///
/// Holds.
#[tokio::test]
async fn a_writer_killed_with_its_fence_up_leaves_right_answers_after_the_restart_holds() {
    let cluster =
        memopt_check::cluster(&[("restart_after_crash", "on"), ("synchronous_commit", "on")])
            .unwrap();
    let url = cluster.url();
    let mut c = slipstream_pg::connect(&url).await.unwrap();
    memopt_check::table(&mut c, "t", 1000).await.unwrap();
    memopt_check::populate(&mut c, "t").await.unwrap();

    let mut writer = slipstream_pg::connect(&url).await.unwrap();
    let pid: i32 = memopt_check::scalar(&mut writer, "SELECT pg_backend_pid()")
        .await
        .unwrap();
    writer
        .batch_execute("SET memopt.test_cleanup_delay = '10s'")
        .await
        .unwrap();
    let commit = tokio::spawn(async move {
        writer
            .batch_execute("UPDATE t SET v = 'new' WHERE k = 1")
            .await
    });
    // Wait (bounded) until the commit is visible: the writer is then in its cleanup delay.
    let mut seen = false;
    for _ in 0..100 {
        let v: String = memopt_check::scalar(&mut c, "SELECT v FROM t WHERE k = 1")
            .await
            .unwrap();
        if v == "new" {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen, "the update did not become visible within 5 s");
    let fenced: i64 = memopt_check::scalar(
        &mut c,
        "SELECT misses_fenced FROM memopt.stats WHERE \"table\" = 't'::regclass",
    )
    .await
    .unwrap();
    assert!(
        fenced > 0,
        "the reader was not held off by the writer's fence"
    );
    let got: String = memopt_check::scalar(&mut c, "SELECT (memopt.get('t', 1)::text::t).v")
        .await
        .unwrap();
    assert_eq!(got, "new");

    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    let _ = commit.await.unwrap();
    drop(c);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut c = reconnect(&url).await;
    let row = c
        .query_one(
            "SELECT (SELECT v FROM t WHERE k = 1), (memopt.get('t', 1)::text::t).v",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, &str>(0).unwrap(),
        "new",
        "the committed update"
    );
    assert_eq!(
        row.get::<_, &str>(1).unwrap(),
        "new",
        "memopt.get after the crash"
    );
    let wrong: i64 = memopt_check::scalar(
        &mut c,
        "SELECT count(*) FROM generate_series(1, 1000) k
              WHERE (SELECT v FROM t WHERE t.k = k.k)
                    IS DISTINCT FROM CASE WHEN k = 1 THEN 'new' ELSE 'v' || k END",
    )
    .await
    .unwrap();
    assert_eq!(wrong, 0);
    // The key fills and is served: no fence outlived the crash.
    let hits_before: i64 = memopt_check::scalar(
        &mut c,
        "SELECT hits FROM memopt.stats WHERE \"table\" = 't'::regclass",
    )
    .await
    .unwrap();
    for _ in 0..3 {
        let v: String = memopt_check::scalar(&mut c, "SELECT v FROM t WHERE k = 1")
            .await
            .unwrap();
        assert_eq!(v, "new");
    }
    let hits_after: i64 = memopt_check::scalar(
        &mut c,
        "SELECT hits FROM memopt.stats WHERE \"table\" = 't'::regclass",
    )
    .await
    .unwrap();
    assert!(
        hits_after >= hits_before + 2,
        "key 1 is not served after the restart"
    );
}

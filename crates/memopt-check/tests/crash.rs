//! A backend crash and a server restart: the store comes back empty (shared memory is
//! reinitialized), every answer is still right, and lookups refill it.

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use slipstream_pg::Client;

async fn entries(c: &mut Client) -> i64 {
    c.query_one("SELECT entries FROM memopt.stats_total", &[])
        .await
        .unwrap()
        .get(0)
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
    let pid: i32 = victim
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
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

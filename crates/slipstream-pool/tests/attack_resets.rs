//! Attack tests (review of issue 17) on the pool's reset on return.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use slipstream_pool::{PgManager, Pool, Reset};
use slipstream_testkit::Cluster;

fn pool(cluster: &Cluster, reset: Reset, borrow_timeout: Duration) -> Pool<PgManager> {
    let config = cluster.url().parse().expect("the testkit's URL parses");
    Pool::builder(PgManager::new(config).reset_on_return(reset))
        .max_size(1)
        .borrow_timeout(borrow_timeout)
        .build()
}

// P1. A borrower times out a long statement and returns the connection: the reset settles it
// on the pool's task with no bound, so the slot is out of reach for the statement's whole
// remaining run time (for ever, if it waits on a lock), and borrowers time out.
#[tokio::test]
async fn attack_reset_after_a_timed_out_long_statement_is_bounded() {
    let cluster = Cluster::start().unwrap();
    let pool = pool(&cluster, Reset::Rollback, Duration::from_secs(5));
    {
        let mut conn = pool.get().await.unwrap();
        let r = tokio::time::timeout(
            Duration::from_millis(200),
            conn.query("SELECT pg_sleep(30)", &[]),
        )
        .await;
        assert!(r.is_err(), "expected the timeout");
    }
    let start = Instant::now();
    let r = pool.get().await;
    let waited = start.elapsed();
    eprintln!(
        "next borrow after {waited:?}: {:?}",
        r.as_ref().map(|_| ()).map_err(|e| e.to_string())
    );
    assert!(
        r.is_ok(),
        "the only connection was held by its reset for the abandoned statement's run: {}",
        r.err().unwrap()
    );
}

// P2. Client-side session state outlives the borrow even with Reset::Session: the previous
// borrower's queued notifications and its notice handler.
#[tokio::test]
async fn attack_session_reset_clears_client_side_state() {
    let cluster = Cluster::start().unwrap();
    let pool = pool(&cluster, Reset::Session, Duration::from_secs(30));
    let seen_by_a = Arc::new(Mutex::new(Vec::<String>::new()));
    {
        let mut a = pool.get().await.unwrap();
        let sink = seen_by_a.clone();
        a.set_notice_handler(move |n| sink.lock().unwrap().push(n.message().to_string()));
        a.batch_execute("LISTEN ch; NOTIFY ch, 'secret-of-a'")
            .await
            .unwrap();
    }
    let mut b = pool.get().await.unwrap();
    let inherited: Vec<String> = b
        .take_notifications()
        .into_iter()
        .map(|n| n.payload().to_string())
        .collect();
    b.batch_execute("DO $$ BEGIN RAISE NOTICE 'secret-of-b'; END $$")
        .await
        .unwrap();
    let leaked = seen_by_a.lock().unwrap().clone();
    eprintln!("b inherited notifications {inherited:?}; a's handler saw {leaked:?}");
    assert!(
        inherited.is_empty() && leaked.is_empty(),
        "state crossed borrowers: b got {inherited:?}, a's notice handler got {leaked:?}"
    );
}

// P3. Reset::Session is documented as "DISCARD ALL without DEALLOCATE ALL", but DISCARD ALL
// also runs SET SESSION AUTHORIZATION DEFAULT; RESET ALL does not reset the role (GUC_NO_RESET_ALL).
#[tokio::test]
async fn attack_session_reset_resets_the_role() {
    let cluster = Cluster::start().unwrap();
    let pool = pool(&cluster, Reset::Session, Duration::from_secs(30));
    {
        let mut a = pool.get().await.unwrap();
        a.batch_execute("CREATE ROLE lowpriv NOLOGIN")
            .await
            .unwrap();
    }
    let original: String = {
        let mut b = pool.get().await.unwrap();
        b.query_one("SELECT current_user::text", &[])
            .await
            .unwrap()
            .get(0)
            .unwrap()
    };
    {
        let mut a = pool.get().await.unwrap();
        a.batch_execute("SET ROLE lowpriv").await.unwrap();
    }
    let mut b = pool.get().await.unwrap();
    let now: String = b
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    eprintln!("before: {original}, next borrower after SET ROLE: {now}");
    assert_eq!(
        now, original,
        "the next borrower runs as the previous one's role"
    );
}

//! A randomised attack (helper h71; holds) on `Reset::Session`'s promise that no session state
//! reaches the next borrower (docs/pool.md: roles, settings, cursors, LISTEN, advisory locks,
//! temp tables, and any transaction, however its borrow ended), while the pool resizes,
//! evicts, retires, validates and (for a `PgPool`) drains and resumes under the borrowers.
//! Every borrow first checks the session it was lent, then writes a row in autocommit, then
//! leaves state behind at random. At the end every autocommit write is there and no write of
//! an abandoned transaction is.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use slipstream_pg::{Client, TransactionStatus};
use slipstream_pool::{PgManager, PgPool, Pool, Reset, Role};
use slipstream_testkit::Cluster;

const TASKS: u64 = 8;
const RUN: Duration = Duration::from_secs(4);
/// Only against a hang.
const HANG: Duration = Duration::from_secs(120);

fn setup(cluster: &Cluster) {
    cluster
        .psql(
            "CREATE ROLE fuzz_role; CREATE SCHEMA a; GRANT ALL ON SCHEMA a, public TO fuzz_role; \
             CREATE TABLE w (x bigint); GRANT ALL ON w TO fuzz_role;",
        )
        .unwrap();
}

/// xorshift64*, seeded per task: the same run each time.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const PROBE: &str = "SELECT session_user::text, current_user::text, \
     current_setting('search_path'), current_setting('statement_timeout'), \
     (SELECT count(*) FROM pg_listening_channels()), \
     (SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'), \
     (SELECT count(*) FROM pg_cursors WHERE name <> ''), \
     (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema())";

/// What the session looked like when lent, if not clean.
async fn dirt(conn: &mut Client) -> Option<String> {
    let notes = conn.take_notifications().len();
    let before = conn.transaction_status();
    let row = match conn.query_one(PROBE, &[]).await {
        Ok(row) => row,
        Err(e) => return Some(format!("the probe failed: {e} (status before {before:?})")),
    };
    let after = conn.transaction_status();
    let su: String = row.get(0).unwrap();
    let cu: String = row.get(1).unwrap();
    let path: String = row.get(2).unwrap();
    let timeout: String = row.get(3).unwrap();
    let counts: Vec<i64> = (4..8).map(|i| row.get(i).unwrap()).collect();
    let clean = su == "postgres"
        && cu == "postgres"
        && path == "\"$user\", public"
        && timeout == "0"
        && counts.iter().all(|&c| c == 0)
        && notes == 0
        && before == TransactionStatus::Idle
        && after == TransactionStatus::Idle;
    (!clean).then(|| {
        format!(
            "session {su} current {cu} search_path {path} statement_timeout {timeout} \
             listens/advisory/cursors/temp {counts:?} notifications {notes} status \
             {before:?}/{after:?}"
        )
    })
}

/// Leaves some state behind, or drops a call part-way.
async fn mess(conn: &mut Client, rng: &mut Rng, task: u64) {
    for _ in 0..=rng.below(3) {
        let sql = match rng.below(13) {
            0 => "SET ROLE fuzz_role".to_string(),
            1 => "SET search_path = a".to_string(),
            2 => "CREATE TEMP TABLE IF NOT EXISTS tt (x int)".to_string(),
            3 => "LISTEN ch; NOTIFY ch".to_string(),
            4 => format!("SELECT pg_try_advisory_lock({})", 1000 + task),
            5 => "BEGIN; DECLARE c CURSOR WITH HOLD FOR SELECT 1; COMMIT".to_string(),
            6 => "SET statement_timeout = '30s'".to_string(),
            7 => "SET SESSION AUTHORIZATION fuzz_role".to_string(),
            8 => "BEGIN; INSERT INTO w VALUES (-1)".to_string(),
            9 => "BEGIN; SELECT 1/0".to_string(),
            10 => {
                let wait = Duration::from_micros(rng.below(3000));
                let _ = tokio::time::timeout(
                    wait,
                    conn.batch_execute("SELECT pg_sleep(0.003); INSERT INTO w VALUES (-2)"),
                )
                .await;
                // -2 is written in autocommit if it ran: not abandoned, not checked.
                return;
            }
            11 => {
                let _ = tokio::time::timeout(Duration::ZERO, conn.batch_execute("BEGIN")).await;
                return;
            }
            _ => {
                if let Ok(mut tx) = conn.transaction().await {
                    let _ = tx.batch_execute("INSERT INTO w VALUES (-1)").await;
                }
                return;
            }
        };
        let _ = conn.batch_execute(&sql).await;
        if sql.starts_with("BEGIN; INSERT") || sql.starts_with("BEGIN; SELECT 1/0") {
            // Left open: a later COMMIT of ours would keep the abandoned write.
            return;
        }
    }
}

/// One borrower's turn on `conn`: check, write `id`, mess. The dirt found, if any.
async fn turn(conn: &mut Client, rng: &mut Rng, task: u64, id: i64) -> Option<String> {
    let found = dirt(conn).await;
    if found.is_none() {
        conn.execute("INSERT INTO w VALUES ($1)", &[&id])
            .await
            .unwrap();
    }
    mess(conn, rng, task).await;
    found
}

async fn written(clusters: &[&Cluster]) -> (i64, i64) {
    let (mut good, mut abandoned) = (0, 0);
    for c in clusters {
        let mut conn = slipstream_pg::connect(&c.url()).await.unwrap();
        let row = conn
            .query_one(
                "SELECT count(*) FILTER (WHERE x > 0), count(*) FILTER (WHERE x = -1) FROM w",
                &[],
            )
            .await
            .unwrap();
        good += row.get::<_, i64>(0).unwrap();
        abandoned += row.get::<_, i64>(1).unwrap();
    }
    (good, abandoned)
}

/// Promise: under `Reset::Session`, whatever a borrower leaves (a role, a setting, a temp
/// table, LISTEN and a queued notification, an advisory lock, a held cursor, an open or
/// failed transaction, a call dropped part-way), the next borrower of that connection gets
/// a clean session; no autocommit write is lost, no abandoned one kept. Meanwhile the pool
/// is resized between 1 and 4, evicted, and its connections retire (200 ms lifetime) and
/// validate (20 ms window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_reset_pool_lends_only_clean_sessions_under_churn() {
    let cluster = Cluster::start().unwrap();
    setup(&cluster);
    let config = cluster.url().parse().unwrap();
    let pool = Pool::builder(PgManager::new(config).reset_on_return(Reset::Session))
        .max_size(3)
        .resize_limit(4)
        .max_lifetime(Duration::from_millis(200))
        .validate_after(Duration::from_millis(20))
        .borrow_timeout(Duration::from_secs(30))
        .build();
    let stop = Arc::new(AtomicBool::new(false));
    let ids = Arc::new(AtomicU64::new(1));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (pool, stop, ids) = (pool.clone(), stop.clone(), ids.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (task + 1));
            let mut dirty = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let mut conn = pool.get().await.unwrap();
                let id = ids.fetch_add(1, Ordering::Relaxed) as i64;
                if let Some(d) = turn(&mut conn, &mut rng, task, id).await {
                    dirty.push(d);
                }
            }
            dirty
        }));
    }
    let chaos = {
        let (pool, stop) = (pool.clone(), stop.clone());
        tokio::spawn(async move {
            let mut rng = Rng(7);
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(30)).await;
                match rng.below(4) {
                    0 => pool.evict(),
                    _ => {
                        pool.resize(1 + rng.below(4) as usize);
                    }
                }
            }
            pool.resize(3);
        })
    };
    tokio::time::sleep(RUN).await;
    stop.store(true, Ordering::Relaxed);
    let mut dirty = Vec::new();
    for t in tasks {
        dirty.extend(
            tokio::time::timeout(HANG, t)
                .await
                .expect("no hang")
                .unwrap(),
        );
    }
    chaos.await.unwrap();
    drop(pool);
    let (good, abandoned) = written(&[&cluster]).await;
    let attempted = ids.load(Ordering::Relaxed) as i64 - 1 - dirty.len() as i64;
    eprintln!("{attempted} borrows, {good} written, {} dirty", dirty.len());
    assert!(
        dirty.is_empty(),
        "lent dirty: {:?}",
        &dirty[..dirty.len().min(10)]
    );
    assert_eq!(good, attempted, "autocommit writes lost");
    assert_eq!(abandoned, 0, "writes of abandoned transactions kept");
}

/// The same through a `PgPool` over two servers, drained and resumed at random, resized
/// between 2 and 6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_reset_pg_pool_lends_only_clean_sessions_under_drains() {
    let a = Cluster::start().unwrap();
    let b = Cluster::start().unwrap();
    setup(&a);
    setup(&b);
    let pool = PgPool::builder(common::two_primaries_url(&a, &b).parse().unwrap())
        .reset_on_return(Reset::Session)
        .pool_config(slipstream_pool::Config {
            max_size: 4,
            resize_limit: 6,
            borrow_timeout: Duration::from_secs(30),
            max_lifetime: Some(Duration::from_millis(200)),
            validate_after: Some(Duration::from_millis(20)),
            ..slipstream_pool::Config::default()
        })
        .build_ready()
        .await
        .unwrap();
    let names: Vec<String> = pool.servers().into_iter().map(|s| s.name).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let ids = Arc::new(AtomicU64::new(1));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (pool, stop, ids) = (pool.clone(), stop.clone(), ids.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (task + 1));
            let mut dirty = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let mut conn = pool.get(Role::Any).await.unwrap();
                let id = ids.fetch_add(1, Ordering::Relaxed) as i64;
                if let Some(d) = turn(&mut conn, &mut rng, task, id).await {
                    dirty.push(format!("{}: {d}", conn.server()));
                }
            }
            dirty
        }));
    }
    let chaos = {
        let (pool, stop) = (pool.clone(), stop.clone());
        tokio::spawn(async move {
            let mut rng = Rng(7);
            let mut drained: Option<String> = None;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(30)).await;
                match rng.below(3) {
                    0 => {
                        if let Some(s) = drained.take() {
                            pool.resume(&s).unwrap();
                        } else {
                            let s = names[rng.below(2) as usize].clone();
                            pool.drain(&s).unwrap();
                            drained = Some(s);
                        }
                    }
                    _ => {
                        pool.resize(2 + rng.below(5) as usize);
                    }
                }
            }
            if let Some(s) = drained {
                pool.resume(&s).unwrap();
            }
        })
    };
    tokio::time::sleep(RUN).await;
    stop.store(true, Ordering::Relaxed);
    let mut dirty = Vec::new();
    for t in tasks {
        dirty.extend(
            tokio::time::timeout(HANG, t)
                .await
                .expect("no hang")
                .unwrap(),
        );
    }
    chaos.await.unwrap();
    drop(pool);
    let (good, abandoned) = written(&[&a, &b]).await;
    let attempted = ids.load(Ordering::Relaxed) as i64 - 1 - dirty.len() as i64;
    eprintln!("{attempted} borrows, {good} written, {} dirty", dirty.len());
    assert!(
        dirty.is_empty(),
        "lent dirty: {:?}",
        &dirty[..dirty.len().min(10)]
    );
    assert_eq!(good, attempted, "autocommit writes lost");
    assert_eq!(abandoned, 0, "writes of abandoned transactions kept");
}

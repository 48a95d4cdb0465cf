//! A run's shape against a real cluster: a ramp-up starts its users over the period, stages
//! change the user count and are reported on their own, users run on the threads asked for,
//! and a run stopped during its ramp-up still returns a result.

mod common;

use std::collections::BTreeSet;
use std::future::pending;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::rt;
use slipstream_bench::{self as bench, RunConfig, Session, Transaction, TxError, Workload};
use slipstream_testkit::Cluster;

/// Every start: (user, when, the OS thread it ran on).
type Starts = Arc<Mutex<Vec<(usize, Instant, String)>>>;

/// `SELECT 1`, noting who ran it, when and where.
struct Noted(Starts);

impl Transaction for Noted {
    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        let thread = std::thread::current().name().unwrap_or("?").to_string();
        self.0
            .lock()
            .unwrap()
            .push((s.user(), Instant::now(), thread));
        s.client()?.simple_query("SELECT 1").await?;
        s.count().selects += 1;
        Ok(())
    }
}

fn noted() -> (Workload, Starts) {
    let starts: Starts = Arc::default();
    let s = starts.clone();
    let w = Workload::new("noted").transaction("select-1", 1, move || Noted(s.clone()));
    (w, starts)
}

fn config(url: &str) -> RunConfig {
    let mut c = RunConfig::new(Some(url.into()));
    c.warmup = Duration::ZERO;
    c.seed = 5;
    c
}

/// The first start of each user, in seconds after the first start of all.
fn first_starts(starts: &Starts) -> Vec<f64> {
    let s = starts.lock().unwrap();
    let origin = s.iter().map(|x| x.1).min().unwrap();
    let users = s.iter().map(|x| x.0).max().unwrap() + 1;
    (0..users)
        .map(|u| {
            s.iter()
                .filter(|x| x.0 == u)
                .map(|x| (x.1 - origin).as_secs_f64())
                .fold(f64::INFINITY, f64::min)
        })
        .collect()
}

#[test]
fn a_ramp_up_starts_its_users_over_the_period() {
    let cluster = Cluster::start().unwrap();
    let (w, starts) = noted();
    let mut c = config(&cluster.url());
    c.ramp_up = Duration::from_secs(2);
    c.stages = vec!["1s:4".parse().unwrap()];
    let run = rt().block_on(bench::run(&w, &c, pending::<()>())).unwrap();
    // User i is due at 2 s * i / 4: each later than the one before, the last 1.5 s after the
    // first (less any lateness of the first; never earlier than due).
    let first = first_starts(&starts);
    assert_eq!(first.len(), 4, "{first:?}");
    assert!(first.windows(2).all(|p| p[0] < p[1]), "{first:?}");
    assert!(first[3] >= 1.0, "{first:?}");
    assert_eq!(run.users, 4);
    let names: Vec<&str> = run.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["ramp-up", "stage 1"]);
    assert_eq!((run.stages[0].start_s, run.stages[0].end_s), (0.0, 2.0));
    assert_eq!((run.stages[1].start_s, run.stages[1].end_s), (2.0, 3.0));
    // Each stage's counts add up to the run's (every transaction in exactly one stage).
    let by_stage: u64 = run.stages.iter().map(|s| s.transactions[0].ok).sum();
    assert_eq!(by_stage, run.transactions[0].ok);
    assert!(run.stages.iter().all(|s| s.transactions[0].ok > 0));
    // The first second of the ramp-up runs fewer users than the last: the per-second
    // intervals see one user, then two, ... (counted by users, not by speed).
    let users_in = |from: f64, to: f64| -> usize {
        let s = starts.lock().unwrap();
        let origin = s.iter().map(|x| x.1).min().unwrap();
        s.iter()
            .filter(|x| {
                let t = (x.1 - origin).as_secs_f64();
                t >= from && t < to
            })
            .map(|x| x.0)
            .collect::<BTreeSet<_>>()
            .len()
    };
    assert!(users_in(0.0, 0.4) < users_in(2.2, 3.0), "no rise");
    assert_eq!(users_in(2.2, 3.0), 4);
}

#[test]
fn two_stages_report_their_own_figures_and_users() {
    let cluster = Cluster::start().unwrap();
    let (w, starts) = noted();
    let mut c = config(&cluster.url());
    c.stages = vec!["2s:3".parse().unwrap(), "2s:1".parse().unwrap()];
    let run = rt().block_on(bench::run(&w, &c, pending::<()>())).unwrap();
    assert_eq!(run.users, 3);
    assert_eq!(run.duration_s, 4.0);
    let s: Vec<(usize, &str, Option<usize>)> = run
        .stages
        .iter()
        .map(|s| (s.index, s.name.as_str(), s.users))
        .collect();
    assert_eq!(s, [(0, "stage 1", Some(3)), (1, "stage 2", Some(1))]);
    assert!(run.stages.iter().all(|s| s.transactions[0].ok > 0));
    assert!(run.stages[1].transactions[0].latency_ms.p50 > 0.0);
    // Stage 1 ran all three users; well into stage 2, only the first one starts anything.
    let st = starts.lock().unwrap();
    let origin = st.iter().map(|x| x.1).min().unwrap();
    let users = |from: f64, to: f64| -> BTreeSet<usize> {
        st.iter()
            .filter(|x| {
                let t = (x.1 - origin).as_secs_f64();
                t >= from && t < to
            })
            .map(|x| x.0)
            .collect()
    };
    assert_eq!(users(0.0, 2.0), BTreeSet::from([0, 1, 2]));
    assert_eq!(users(2.5, 10.0), BTreeSet::from([0]));
    // The text table has a row per stage.
    let table = bench::stage_table(&run).unwrap().render();
    assert!(
        table.contains("stage 1") && table.contains("3 users") && table.contains("1 user "),
        "{table}"
    );
}

#[test]
fn users_run_on_the_threads_asked_for() {
    let cluster = Cluster::start().unwrap();
    let (w, starts) = noted();
    let mut c = config(&cluster.url());
    c.users = 4;
    c.threads = 2;
    c.duration = Duration::from_millis(500);
    let run = rt().block_on(bench::run(&w, &c, pending::<()>())).unwrap();
    assert!(run.transactions[0].ok > 0);
    let threads: BTreeSet<String> = starts.lock().unwrap().iter().map(|x| x.2.clone()).collect();
    assert_eq!(
        threads,
        BTreeSet::from(["bench-users-0".to_string(), "bench-users-1".to_string()])
    );
    // Users are dealt out round robin: user 0 and 2 share a thread, 1 and 3 the other.
    let st = starts.lock().unwrap();
    for x in st.iter() {
        assert_eq!(x.2, format!("bench-users-{}", x.0 % 2));
    }
}

#[test]
fn stopping_during_the_ramp_up_returns_what_ran() {
    let cluster = Cluster::start().unwrap();
    let (w, _) = noted();
    let mut c = config(&cluster.url());
    c.ramp_up = Duration::from_secs(20);
    c.stages = vec!["20s:4".parse().unwrap()];
    let run = rt()
        .block_on(async { bench::run(&w, &c, tokio::time::sleep(Duration::from_secs(2))).await })
        .unwrap();
    assert!(run.interrupted);
    assert!(run.measured_s < 20.0, "{}", run.measured_s);
    // Only the ramp-up had started; it ends where the run was stopped.
    assert_eq!(run.stages.len(), 1, "{:?}", run.stages);
    assert_eq!(run.stages[0].name, "ramp-up");
    assert_eq!(run.stages[0].end_s, run.measured_s);
    assert_eq!(run.stages[0].transactions[0].ok, run.transactions[0].ok);
    assert_eq!(run.unfinished, 0);
}

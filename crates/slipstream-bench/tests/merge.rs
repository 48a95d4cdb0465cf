//! Results one can combine, against a real server: two load generators merged, censored
//! transactions, failure messages, the run's context, and the report that shows them.

use std::future::pending;
use std::time::Duration;

use hdrhistogram::Histogram;
use slipstream_bench::{
    self as bench, BenchRun, RunConfig, Session, Transaction, TxError, Workload, report,
};
use slipstream_testkit::Cluster;

struct Ping;
impl Transaction for Ping {
    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        s.client()?.simple_query("SELECT 1").await?;
        s.count().selects += 1;
        Ok(())
    }
}

/// Fails every time, with the server's own message.
struct DivideByZero;
impl Transaction for DivideByZero {
    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        s.count().selects += 1;
        s.client()?.simple_query("SELECT 1/0").await?;
        Ok(())
    }
}

struct Sleep;
impl Transaction for Sleep {
    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        s.client()?.simple_query("SELECT pg_sleep(30)").await?;
        Ok(())
    }
}

fn mixed() -> Workload {
    Workload::new("mixed")
        .transaction("ping", 9, || Ping)
        .transaction("divide", 1, || DivideByZero)
}

fn run_on_own_runtime(workload: Workload, config: RunConfig) -> BenchRun {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench::run(&workload, &config, pending::<()>()))
        .unwrap()
}

fn config(url: &str, users: usize, seed: u64) -> RunConfig {
    let mut c = RunConfig::new(Some(url.into()));
    c.users = users;
    c.threads = 1;
    c.duration = Duration::from_millis(1500);
    c.seed = seed;
    c
}

fn hist(text: &str) -> Histogram<u64> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap();
    let mut h: Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut &bytes[..])
        .unwrap();
    // A decoded histogram is sized to what it holds; adding a wider one needs room to grow.
    h.auto(true);
    h
}

/// Two load generators (two threads with their own runtimes, different seeds, one server),
/// as two processes would be: the merge must be the exact sum of what each measured. A
/// comparison with one process running both users' worth of load would be a timing test (the
/// two measure different transactions); the merge is held to what it can promise instead:
/// counts are the sums, the histogram is the exact HDR sum, and each merged percentile lies
/// between the parts' (a percentile of a mixture cannot leave its components' range).
#[test]
fn two_load_generators_merged_are_the_sum_of_their_parts() {
    let cluster = Cluster::builder()
        .setting("shared_preload_libraries", "pg_stat_statements")
        .start()
        .unwrap();
    let url = cluster.url();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut c = slipstream_pg::connect(&url).await.unwrap();
            c.simple_query("CREATE EXTENSION pg_stat_statements")
                .await
                .unwrap();
        });
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| run_on_own_runtime(mixed(), config(&url, 2, 1)));
        let b = s.spawn(|| run_on_own_runtime(mixed(), config(&url, 2, 2)));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_ne!(a.seed, b.seed);
    let merged = bench::merge(&[("a".into(), a.clone()), ("b".into(), b.clone())]).unwrap();
    assert_eq!(merged.users, 4);
    assert_eq!(merged.merged_from.len(), 2);

    for m in &merged.transactions {
        let pa = a.transactions.iter().find(|t| t.name == m.name).unwrap();
        let pb = b.transactions.iter().find(|t| t.name == m.name).unwrap();
        assert_eq!(m.ok, pa.ok + pb.ok, "{}", m.name);
        assert_eq!(m.failed, pa.failed + pb.failed, "{}", m.name);
        assert_eq!(
            m.latency_stats.sufficient.n,
            pa.latency_stats.sufficient.n + pb.latency_stats.sufficient.n
        );
        assert_eq!(
            m.statements.selects,
            pa.statements.selects + pb.statements.selects
        );
        if m.ok == 0 {
            continue;
        }
        // The merged histogram is the exact sum of the parts'.
        let mut sum = hist(&pa.histogram);
        sum.add(hist(&pb.histogram)).unwrap();
        let mh = hist(&m.histogram);
        assert_eq!(mh, sum, "{}", m.name);
        assert_eq!(mh.len(), m.ok);
        // Each percentile of the merge is read from the sum and lies between the parts'.
        for (q, got) in [(0.5, m.latency_ms.p50), (0.99, m.latency_ms.p99)] {
            assert_eq!(got, sum.value_at_quantile(q) as f64 / 1e3);
            let (x, y) = (
                hist(&pa.histogram).value_at_quantile(q) as f64 / 1e3,
                hist(&pb.histogram).value_at_quantile(q) as f64 / 1e3,
            );
            assert!(
                x.min(y) <= got && got <= x.max(y),
                "{} p{q}: {got} not within [{x}, {y}]",
                m.name
            );
        }
        // The intervals plus what ended after the window add up to the totals, and each
        // interval's percentiles are its histogram's.
        let series = &merged.intervals.per_transaction[&m.name];
        let in_series: u64 = series.iter().map(|i| i.sufficient.n).sum();
        let after = merged
            .intervals
            .after_window
            .get(&m.name)
            .map_or(0, |i| i.sufficient.n);
        assert_eq!(in_series + after, m.ok, "{}", m.name);
        for iv in series.iter().filter(|i| i.sufficient.n > 0) {
            let h = hist(&iv.histogram);
            assert_eq!(h.len(), iv.sufficient.n);
            assert_eq!(iv.p99_ms, h.value_at_quantile(0.99) as f64 / 1e3);
        }
    }
    let ping = |r: &BenchRun| r.transactions.iter().find(|t| t.name == "ping").unwrap().ok;
    assert!(ping(&a) > 0 && ping(&b) > 0);

    // One sample message per failure code.
    let divide = merged
        .transactions
        .iter()
        .find(|t| t.name == "divide")
        .unwrap();
    assert!(divide.failed > 0);
    assert_eq!(divide.failures.get("22012"), Some(&divide.failed));
    let msg = &divide.failure_messages["22012"];
    assert!(msg.contains("division by zero"), "{msg}");

    // The merged result survives its file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.json");
    merged.write_json(&path).unwrap();
    let back = BenchRun::read_json(&path).unwrap();
    // Counts and histograms come back exactly (floats may differ in their last digit: JSON
    // number parsing is not bit-exact).
    for (x, y) in back.transactions.iter().zip(&merged.transactions) {
        assert_eq!(
            (
                x.ok,
                x.failed,
                &x.failures,
                &x.failure_messages,
                &x.histogram
            ),
            (
                y.ok,
                y.failed,
                &y.failures,
                &y.failure_messages,
                &y.histogram
            )
        );
        assert_eq!(x.latency_ms.p99, y.latency_ms.p99);
    }
    for (name, series) in &merged.intervals.per_transaction {
        let again = &back.intervals.per_transaction[name];
        let key = |v: &[bench::Interval]| -> Vec<(u64, u64, String)> {
            v.iter()
                .map(|i| (i.sufficient.n, i.failed, i.histogram.clone()))
                .collect()
        };
        assert_eq!(key(again), key(series));
    }
    assert_eq!(back.merged_from.len(), 2);

    // The context: read before and after, wait events sampled during the window.
    let ctx = a
        .context
        .as_ref()
        .expect("a run on a database has a context");
    assert!(ctx.warnings.is_empty(), "{:?}", ctx.warnings);
    assert!(
        ctx.server_version
            .as_deref()
            .unwrap()
            .starts_with("PostgreSQL")
    );
    assert!(
        ctx.settings
            .iter()
            .any(|s| s.name == "shared_preload_libraries"),
        "{:?}",
        ctx.settings
    );
    assert!(ctx.database_delta("xact_commit").unwrap() > 0.0);
    assert!(ctx.wait_samples > 0);
    assert!(ctx.wait_events.iter().any(|w| w.count > 0));
    let stmts = ctx.after.as_ref().unwrap().statements.as_ref().unwrap();
    assert!(
        stmts
            .iter()
            // pg_stat_statements normalizes constants: SELECT 1 is SELECT $1.
            .any(|s| s["query"] == "SELECT $1" && s["calls"].as_u64() > Some(0)),
        "{stmts:?}"
    );

    // The report shows the summary, the context and the charts over time.
    let html_path = dir.path().join("r.html");
    report::write_html(
        &[report::Labeled {
            label: "all".into(),
            run: merged.clone(),
        }],
        &html_path,
    )
    .unwrap();
    let html = std::fs::read_to_string(&html_path).unwrap();
    for needle in [
        "Summary",
        "Context",
        "pg_stat_statements after the run",
        "Throughput over time, all types",
        "all: throughput per type",
        "ping: latency p50 / p99 per second",
        "all: errors over time",
        "22012 x",
        "division by zero",
        "merged from 2 load generators",
    ] {
        assert!(html.contains(needle), "the report lacks {needle:?}");
    }
    let lines = report::describe(&merged);
    assert!(lines.iter().any(|l| l.starts_with("server: PostgreSQL")));
    // The "all" row has percentiles.
    let all = report::all_percentiles(&merged).unwrap();
    assert!(all.p50 > 0.0 && all.p99 >= all.p50);

    // Runs of different workloads are refused.
    let mut other = b.clone();
    other.workload = "other".into();
    let err = bench::merge(&[("a".into(), a), ("other".into(), other)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("different workloads"), "{err}");
}

/// Work still running when the run stops waiting is counted as censored, per type, not
/// dropped: closed loop (users in flight) and open loop (arrivals still queued too).
#[test]
fn unfinished_transactions_are_censored_at_the_grace_limit() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let workload = || {
        Workload::new("sleepy")
            .transaction("sleep", 1, || Sleep)
            .transaction("never", 0, || Ping)
    };
    let short = |mut c: RunConfig| {
        c.duration = Duration::from_millis(300);
        c.grace = Duration::from_millis(300);
        c
    };
    let closed = run_on_own_runtime(workload(), short(config(&url, 3, 5)));
    let sleep = &closed.transactions[0];
    assert_eq!((sleep.ok, sleep.failed, sleep.censored), (0, 0, 3));
    assert_eq!(closed.unfinished, 3);
    assert_eq!(closed.transactions[1].censored, 0);
    assert!(
        report::describe(&closed)
            .iter()
            .any(|l| l.contains("3 transactions censored") && l.contains("sleep 3")),
        "{:?}",
        report::describe(&closed)
    );

    let mut open = short(config(&url, 1, 6));
    open.rate = Some(100.0);
    let open = run_on_own_runtime(workload(), open);
    let schedule = open.schedule.as_ref().unwrap();
    assert!(schedule.arrivals > 1, "{schedule:?}");
    // One in flight, the rest queued behind it: every arrival is censored.
    assert_eq!(open.transactions[0].censored, schedule.arrivals);
    assert_eq!(open.unfinished, schedule.arrivals);
}

/// A version 1 file (before histograms) is still read and reported; merging it is refused
/// with a reason, since its percentiles cannot be added.
#[test]
fn version_1_results_are_read_but_not_merged() {
    let mut w = Workload::new("noop").without_database();
    w = w.transaction("ping", 1, || NoDb);
    let mut c = RunConfig::new(None);
    c.duration = Duration::from_millis(200);
    c.threads = 1;
    let run = run_on_own_runtime(w, c);
    let mut v = serde_json::to_value(&run).unwrap();
    let o = v.as_object_mut().unwrap();
    o.insert("schema_version".into(), 1.into());
    for k in ["grace_s", "context"] {
        o.remove(k);
    }
    for t in o["transactions"].as_array_mut().unwrap() {
        let t = t.as_object_mut().unwrap();
        let stats = t.remove("latency_stats").unwrap();
        t.insert("stats".into(), stats);
        for k in ["histogram", "censored", "failure_messages"] {
            t.remove(k);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.json");
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let old = BenchRun::read_json(&path).unwrap();
    assert_eq!(old.schema_version, 1);
    assert_eq!(old.transactions[0].ok, run.transactions[0].ok);
    // Read from the old field name; floats to JSON's parsing precision.
    let (x, y) = (
        &old.transactions[0].latency_stats,
        &run.transactions[0].latency_stats,
    );
    assert_eq!(x.sufficient.n, y.sufficient.n);
    assert!((x.sufficient.sum - y.sufficient.sum).abs() <= 1e-9 * y.sufficient.sum.abs());
    assert!(report::all_percentiles(&old).is_none());
    // A second generator's file (another seed: the same run twice is refused first).
    let mut other = old.clone();
    other.seed ^= 1;
    let err = bench::merge(&[("v1.json".into(), old), ("v1b.json".into(), other)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("version 1") && err.contains("re-run"), "{err}");

    // A corrupt histogram is named when the file is read (before, `report` showed blank
    // percentiles and exited 0; found by session 32's attacker).
    let mut corrupt = serde_json::to_value(&run).unwrap();
    corrupt["transactions"][0]["histogram"] = "not a histogram".into();
    std::fs::write(&path, serde_json::to_vec(&corrupt).unwrap()).unwrap();
    let err = BenchRun::read_json(&path).unwrap_err().to_string();
    assert!(
        err.contains("histogram of ping") && err.contains("corrupt"),
        "{err}"
    );

    v["schema_version"] = 99.into();
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let err = BenchRun::read_json(&path).unwrap_err().to_string();
    assert!(err.contains("update slipstream"), "{err}");
}

/// Hostile or mismatched files given to a merge: a clear error, never a panic or an
/// allocation the size of the gap between them (found by session 32's attacker: a file
/// started in 1971 asked for 42 GB, intervals of 0 s for 48 GB, and a count of `u64::MAX`
/// panicked on the addition).
#[test]
fn a_merge_of_corrupt_or_unrelated_runs_is_an_error() {
    let w = Workload::new("noop")
        .without_database()
        .transaction("ping", 1, || NoDb);
    let mut c = RunConfig::new(None);
    c.duration = Duration::from_millis(200);
    c.threads = 1;
    let run = run_on_own_runtime(w, c);
    // Two generators of one test differ in their seeds (else `merge` refuses them as one
    // run given twice, before any check below).
    let merge = |a: BenchRun, mut b: BenchRun| {
        b.seed ^= 1;
        bench::merge(&[("a.json".into(), a), ("b.json".into(), b)])
            .unwrap_err()
            .to_string()
    };

    let mut stale = run.clone();
    stale.started_at = "1971-01-01T00:00:00Z".into();
    let err = merge(run.clone(), stale);
    assert!(err.contains("did not run together"), "{err}");

    let (mut zero_a, mut zero_b) = (run.clone(), run.clone());
    zero_a.intervals.seconds = 0.0;
    zero_b.intervals.seconds = 0.0;
    let err = merge(zero_a, zero_b);
    assert!(err.contains("positive length"), "{err}");

    let mut huge = run.clone();
    huge.transactions[0].ok = u64::MAX;
    let err = merge(run.clone(), huge);
    assert!(err.contains("overflows"), "{err}");

    // Counts that were added unchecked until session 33 (a panic in debug, a wrap in release).
    type Corrupt = (&'static str, fn(&mut BenchRun));
    let corrupt: [Corrupt; 4] = [
        ("statements", |r| {
            r.transactions[0].statements.selects = u64::MAX
        }),
        ("latency", |r| {
            r.transactions[0].latency_stats.sufficient.n = u64::MAX
        }),
        ("an interval's failures", |r| {
            let iv = &mut r.intervals.per_transaction.get_mut("ping").unwrap()[0];
            iv.failed = u64::MAX;
        }),
        ("a stage's count", |r| {
            r.stages[0].transactions[0].ok = u64::MAX
        }),
    ];
    for (what, corrupt) in corrupt {
        let mut huge = run.clone();
        corrupt(&mut huge);
        let mut other = huge.clone();
        other.seed ^= 1;
        let err = bench::merge(&[("a.json".into(), huge), ("b.json".into(), other)])
            .map(|_| "merged".to_string())
            .unwrap_or_else(|e| e.to_string());
        assert!(err.contains("overflows"), "{what}: {err}");
    }
}

/// Two load generators that ran the same stages: the merged stages are the sums of the
/// parts' (counts, users, and the latency histograms), stage by stage. Before, the merged
/// `stages[]` was the first file's alone. Parts of different phases are refused.
#[test]
fn the_stages_of_two_load_generators_add() {
    let w = || {
        Workload::new("noop")
            .without_database()
            .transaction("ping", 1, || NoDb)
    };
    let config = |seed: u64, users: usize| {
        let mut c = RunConfig::new(None);
        c.threads = 1;
        c.seed = seed;
        c.warmup = Duration::ZERO;
        // The same phases on both parts: the second stage doubles the first's users.
        c.stages = vec![
            format!("300ms:{users}").parse().unwrap(),
            format!("300ms:{}", users * 2).parse().unwrap(),
        ];
        c
    };
    let a = std::thread::spawn(move || run_on_own_runtime(w(), config(1, 1)));
    let b = run_on_own_runtime(w(), config(2, 2));
    let a = a.join().unwrap();
    let all = bench::merge(&[("a.json".into(), a.clone()), ("b.json".into(), b.clone())]).unwrap();
    assert_eq!(all.stages.len(), 2);
    for (i, s) in all.stages.iter().enumerate() {
        let (pa, pb) = (&a.stages[i].transactions[0], &b.stages[i].transactions[0]);
        let t = &s.transactions[0];
        assert_eq!(
            (t.ok, t.failed),
            (pa.ok + pb.ok, pa.failed + pb.failed),
            "stage {i}"
        );
        assert_eq!(
            hist(&t.histogram).len(),
            t.ok,
            "stage {i}'s histogram holds its successes"
        );
        assert_eq!(
            s.users,
            Some(a.stages[i].users.unwrap() + b.stages[i].users.unwrap())
        );
        let (lo, hi) = (
            pa.latency_ms.p50.min(pb.latency_ms.p50),
            pa.latency_ms.p50.max(pb.latency_ms.p50),
        );
        // HDR's 3 significant digits: a merged median may sit one bucket outside the parts'.
        assert!(
            t.latency_ms.p50 >= lo * 0.999 && t.latency_ms.p50 <= hi * 1.001,
            "stage {i}: {} not in {lo}..{hi}",
            t.latency_ms.p50
        );
    }
    let by_stage: u64 = all.stages.iter().map(|s| s.transactions[0].ok).sum();
    assert_eq!(by_stage, all.transactions[0].ok);

    let mut other = b.clone();
    other.stages[0].name = "ramp-up".into();
    let err = bench::merge(&[("a.json".into(), a.clone()), ("b.json".into(), other)]).unwrap_err();
    assert!(err.to_string().contains("different phases"), "{err}");

    let mut old = b.clone();
    old.stages[0].transactions[0].histogram.clear();
    let err = bench::merge(&[("a.json".into(), a.clone()), ("b.json".into(), old)]).unwrap_err();
    assert!(err.to_string().contains("re-run it"), "{err}");

    // A file from before stages were saved: added by position, the merged stages would hold
    // only the other part's transactions. Before (found by the attack of 2026-11-27) it
    // merged, with stages short of the totals.
    let mut none = b;
    none.stages.clear();
    let err = bench::merge(&[("a.json".into(), a), ("b.json".into(), none)]).unwrap_err();
    assert!(err.to_string().contains("re-run it"), "{err}");
}

/// Parts run with different `--mix` weights: the merged file can state no one mix. Before
/// (found by the attack of 2026-11-27) it silently stated the first part's.
#[test]
fn runs_of_different_mixes_are_not_merged() {
    let w = |weight: u32| {
        Workload::new("noop")
            .without_database()
            .transaction("a", weight, || NoDb)
            .transaction("b", 1, || NoDb)
    };
    let config = |seed: u64| {
        let mut c = RunConfig::new(None);
        c.threads = 1;
        c.seed = seed;
        c.warmup = Duration::ZERO;
        c.duration = Duration::from_millis(300);
        c
    };
    let a = std::thread::spawn(move || run_on_own_runtime(w(1), config(1)));
    let b = run_on_own_runtime(w(3), config(2));
    let a = a.join().unwrap();
    let err = bench::merge(&[("a.json".into(), a), ("b.json".into(), b)]).unwrap_err();
    let e = err.to_string();
    assert!(
        e.contains("different mixes") && e.contains("a.json") && e.contains("b.json"),
        "{e}"
    );
}

struct NoDb;
impl Transaction for NoDb {
    async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
        Ok(())
    }
}

/// What cannot be read of the server's context is a warning in the result, never a failed
/// run: here pg_stat_statements is installed but not preloaded, so reading it fails.
#[test]
fn an_unreadable_context_is_a_warning_not_a_failed_run() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut c = slipstream_pg::connect(&url).await.unwrap();
            c.simple_query("CREATE EXTENSION pg_stat_statements")
                .await
                .unwrap();
        });
    let mut c = config(&url, 1, 3);
    c.duration = Duration::from_millis(300);
    let run = run_on_own_runtime(Workload::new("ping").transaction("ping", 1, || Ping), c);
    assert!(run.transactions[0].ok > 0);
    let ctx = run.context.as_ref().unwrap();
    assert!(
        ctx.warnings
            .iter()
            .any(|w| w.contains("pg_stat_statements") && w.contains("shared_preload_libraries")),
        "{:?}",
        ctx.warnings
    );
    assert!(ctx.after.as_ref().unwrap().statements.is_none());
    // The rest was still read.
    assert!(ctx.database_delta("xact_commit").is_some());
    assert!(
        report::describe(&run)
            .iter()
            .any(|l| l.starts_with("context warning: pg_stat_statements"))
    );
}

/// A late start is one more than `--late-after` after its intended start: counts taken at two
/// thresholds do not add into a count at either. Before, the merge added them and said they
/// were late by the larger threshold, so a generator run at `--late-after 1ms` passed its
/// late starts off as later than 50 ms (found by the attack of 2026-11-27).
#[test]
fn open_loop_runs_late_by_different_thresholds_are_not_merged() {
    let open = |seed: u64, late_after_ms: u64| {
        let w = Workload::new("noop")
            .without_database()
            .transaction("ping", 1, || NoDb);
        let mut c = RunConfig::new(None);
        c.threads = 1;
        c.seed = seed;
        c.warmup = Duration::ZERO;
        c.duration = Duration::from_millis(300);
        c.rate = Some(200.0);
        c.late_after = Duration::from_millis(late_after_ms);
        run_on_own_runtime(w, c)
    };
    let (a, b) = (open(1, 1), open(2, 50));
    let err = bench::merge(&[("a.json".into(), a.clone()), ("b.json".into(), b)])
        .map(|m| format!("merged: {:?}", m.schedule))
        .unwrap_or_else(|e| e.to_string());
    assert!(
        err.contains("--late-after") && err.contains("1 ms") && err.contains("50 ms"),
        "{err}"
    );
    // The same threshold still merges.
    let same = bench::merge(&[("a.json".into(), a), ("c.json".into(), open(3, 1))]).unwrap();
    assert_eq!(same.schedule.unwrap().late_after_ms, 1.0);
}

/// Parts must have run the same phases: as many stages, of the same lengths, with the load
/// rising and falling alike (each part's users or rate the same multiple of the other's,
/// stage by stage). Before (found by the attack of 2026-11-28), only the stages' names were
/// compared by position: a part with a stage fewer, a shorter stage, or its stages' users the
/// other way round merged silently, its figures added into stages it never ran. A part a stop
/// cut short (marked `interrupted`) may still have fewer stages and a shorter last one.
#[test]
fn parts_that_ran_other_phases_are_not_merged() {
    let staged = |seed: u64, stages: &[&str]| {
        let w = Workload::new("noop")
            .without_database()
            .transaction("ping", 1, || NoDb);
        let mut c = RunConfig::new(None);
        c.threads = 1;
        c.seed = seed;
        c.warmup = Duration::ZERO;
        c.stages = stages.iter().map(|s| s.parse().unwrap()).collect();
        run_on_own_runtime(w, c)
    };
    let a = staged(1, &["300ms:1", "300ms:2"]);
    let refused = |b: BenchRun, what: &[&str]| {
        let err = bench::merge(&[("a.json".into(), a.clone()), ("b.json".into(), b.clone())])
            .map(|m| format!("merged into {} stages", m.stages.len()))
            .unwrap_or_else(|e| e.to_string());
        assert!(
            err.contains("a.json")
                && err.contains("b.json")
                && what.iter().all(|w| err.contains(w)),
            "{what:?}: {err}"
        );
    };
    // A stage fewer, though not cut short.
    refused(staged(2, &["300ms:1"]), &["1 stage", "2 stages"]);
    // A stage of another length.
    refused(
        staged(3, &["300ms:1", "200ms:2"]),
        &["stage 2", "0.3 s", "0.2 s"],
    );
    // The load the other way round: 3 users falling to 1, where a.json's rose from 1 to 2.
    refused(staged(4, &["300ms:3", "300ms:1"]), &["stage 2", "users"]);
    // The same phases at twice the load (a bigger load generator) merge.
    let big = staged(5, &["300ms:2", "300ms:4"]);
    let all = bench::merge(&[("a.json".into(), a.clone()), ("big.json".into(), big)]).unwrap();
    assert_eq!(all.stages.len(), 2);
    // A part stopped early (a Ctrl-C in its first stage) has fewer stages, and says so.
    let w = Workload::new("noop")
        .without_database()
        .transaction("ping", 1, || NoDb);
    let mut c = RunConfig::new(None);
    c.threads = 1;
    c.seed = 6;
    c.warmup = Duration::ZERO;
    c.stages = vec!["300ms:1".parse().unwrap(), "300ms:2".parse().unwrap()];
    let cut = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench::run(&w, &c, async {
            tokio::time::sleep(Duration::from_millis(100)).await
        }))
        .unwrap();
    assert!(cut.interrupted);
    let all = bench::merge(&[("a.json".into(), a.clone()), ("cut.json".into(), cut)]).unwrap();
    assert_eq!(all.stages.len(), 2);
}

/// A context query that times out ends the capture: it is still queued on the server, so each
/// later query on the connection would wait behind it and time out too. Here Order Entry's
/// `soe.meta` is locked by another session, so reading the scale waits on the lock. Before
/// (found by the attack of 2026-11-28), the capture went on to the snapshot's queries, each
/// timing out after its own 5 s (a stalled server held a run's start for 35 s).
#[test]
fn the_context_capture_stops_at_its_first_timeout() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ctx = rt.block_on(async {
        let mut lock = slipstream_pg::connect(&url).await.unwrap();
        lock.simple_query(
            "CREATE SCHEMA soe; CREATE TABLE soe.meta (scale float8); \
             INSERT INTO soe.meta VALUES (0.1)",
        )
        .await
        .unwrap();
        lock.simple_query("BEGIN; LOCK TABLE soe.meta IN ACCESS EXCLUSIVE MODE")
            .await
            .unwrap();
        let capture = bench::context::before(&url, bench::order_entry::NAME).await;
        drop(lock);
        capture.after().await
    });
    let timeouts: Vec<&String> = ctx
        .warnings
        .iter()
        .filter(|w| w.contains("timed out"))
        .collect();
    assert_eq!(timeouts.len(), 1, "{:?}", ctx.warnings);
    assert!(
        timeouts[0].contains("soe.meta") && timeouts[0].contains("was not read"),
        "{timeouts:?}"
    );
    // What came before the timeout was read; the snapshot after it was not taken.
    assert!(ctx.server_version.is_some() && !ctx.settings.is_empty());
    assert!(ctx.before.is_none(), "{:?}", ctx.before);
    // The capture after the run, on a connection of its own, still reads its snapshot.
    assert!(ctx.after.is_some());
}

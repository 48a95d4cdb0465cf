//! Result files are input: `report`, `compare` and `merge` read them, and a corrupt or
//! hand-edited one must be refused when read, naming what is wrong, rather than shown as
//! confident figures (found by session 33's attacker: a count that wrapped hid a type and
//! lowered the total, an empty histogram showed a 0 ms p99, a duplicated type was compared
//! as one, a negative window gave an infinite TPS). No database: the transactions do nothing.

mod common;

use std::future::pending;
use std::time::Duration;

use common::rt;
use serde_json::{Value, json};
use slipstream_bench::{
    self as bench, BenchRun, RunConfig, Session, Transaction, TxError, Workload,
};

struct NoOp;
impl Transaction for NoOp {
    async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
        tokio::task::yield_now().await;
        Ok(())
    }
}

fn run() -> Value {
    let w = Workload::new("noop")
        .without_database()
        .transaction("a", 1, || NoOp)
        .transaction("b", 1, || NoOp);
    let mut c = RunConfig::new(None);
    c.duration = Duration::from_millis(300);
    c.warmup = Duration::ZERO;
    c.threads = 1;
    let run = rt().block_on(bench::run(&w, &c, pending::<()>())).unwrap();
    serde_json::to_value(&run).unwrap()
}

fn read(dir: &std::path::Path, v: &Value) -> anyhow::Result<BenchRun> {
    let path = dir.join("r.json");
    std::fs::write(&path, serde_json::to_vec(v).unwrap()).unwrap();
    BenchRun::read_json(&path)
}

/// `good` with `edit` applied is refused when read, with an error that says `says`; returns
/// the error.
fn refused(
    dir: &std::path::Path,
    good: &Value,
    what: &str,
    edit: impl FnOnce(&mut Value),
    says: &str,
) -> String {
    let mut v = good.clone();
    edit(&mut v);
    let e = read(dir, &v).map(|_| ()).expect_err(what).to_string();
    assert!(e.contains(says), "{what}: {e}");
    e
}

#[test]
fn corrupt_or_edited_results_are_refused_when_read() {
    let dir = tempfile::tempdir().unwrap();
    let good = run();
    read(dir.path(), &good).expect("an honest file reads");
    type Edit = (&'static str, fn(&mut Value), &'static str);
    let edits: [Edit; 17] = [
        (
            "a count that overflows the total",
            |v| v["transactions"][1]["ok"] = json!(u64::MAX),
            "overflows",
        ),
        (
            "a histogram short of the successes",
            |v| v["transactions"][0]["histogram"] = json!(""),
            "successes",
        ),
        (
            "statistics short of the successes",
            |v| v["transactions"][0]["latency_stats"]["n"] = json!(0),
            "successes",
        ),
        (
            "a type listed twice",
            |v| {
                let a = v["transactions"][0].clone();
                v["transactions"].as_array_mut().unwrap().push(a);
            },
            "twice",
        ),
        (
            "a negative window",
            |v| v["measured_s"] = json!(-5.0),
            "measured_s",
        ),
        (
            "intervals of no length",
            |v| v["intervals"]["seconds"] = json!(0.0),
            "positive length",
        ),
        (
            "a negative percentile",
            |v| v["transactions"][0]["latency_ms"]["p50"] = json!(-1.0),
            "latency",
        ),
        (
            "a stage that ends before it starts",
            |v| v["stages"][0]["end_s"] = json!(-1.0),
            "stage",
        ),
        (
            "interval counts that overflow",
            |v| v["intervals"]["per_transaction"]["a"][0]["failed"] = json!(u64::MAX),
            "overflows",
        ),
        // Interval and stage histograms: before, only `--merge` decoded them, so `report` and
        // `compare` passed these.
        (
            "an interval histogram that is not base64",
            |v| v["intervals"]["per_transaction"]["a"][0]["histogram"] = json!("!!"),
            "interval 1 is not valid base64",
        ),
        (
            "an interval histogram short of its successes",
            |v| {
                let n = &mut v["intervals"]["per_transaction"]["a"][0]["n"];
                *n = json!(n.as_u64().unwrap() + 1);
            },
            "interval 1 counts",
        ),
        (
            "a stage histogram short of its successes",
            |v| {
                let ok = &mut v["stages"][0]["transactions"][0]["ok"];
                *ok = json!(ok.as_u64().unwrap() + 1);
            },
            "but its histogram holds",
        ),
        (
            "a newer schema",
            |v| v["schema_version"] = json!(3),
            "schema version 3;",
        ),
        // Session 37's attacker: these read, and gave a TPS of `inf` or 300 digits, and a
        // negative sum moved the "all" mean.
        (
            "transactions in a window of no length",
            |v| v["measured_s"] = json!(0.0),
            "measured_s",
        ),
        (
            "transactions in a window of 1e-300 s",
            |v| v["measured_s"] = json!(1e-300),
            "measured_s",
        ),
        (
            "a negative sum of latencies",
            |v| v["transactions"][0]["latency_stats"]["sum"] = json!(-3.0),
            "statistics",
        ),
        (
            "a negative sum in an interval",
            |v| v["intervals"]["per_transaction"]["a"][0]["sum_sq"] = json!(-1.0),
            "statistics",
        ),
    ];
    for (what, edit, says) in edits {
        refused(dir.path(), &good, what, edit, says);
    }
    let path = dir.path().join("bytes.json");
    std::fs::write(&path, b"{\"schema\": \"\xff\"}").unwrap();
    let e = BenchRun::read_json(&path).unwrap_err().to_string();
    assert!(e.contains("not UTF-8 text (byte 12"), "{e}");
}

/// `intervals.after_window` holds, per type, what ended in the drain. An entry whose type has
/// no per-second series was never checked: a count of `u64::MAX` read, and `report` added it
/// (a panic in debug, a wrap in release), and a histogram that is not one read too (found by
/// the attack of 2026-11-27).
#[test]
fn completions_after_the_window_are_checked_for_a_type_without_a_series() {
    let dir = tempfile::tempdir().unwrap();
    let good = run();
    let mut after = good["intervals"]["per_transaction"]["a"][0].clone();
    after["failed"] = json!(u64::MAX);
    type Edit = (&'static str, Value, &'static str);
    let mut not_base64 = good["intervals"]["per_transaction"]["a"][0].clone();
    not_base64["histogram"] = json!("!!");
    let edits: [Edit; 2] = [
        ("a count that overflows the total", after, "overflows"),
        (
            "a histogram that is not base64",
            not_base64,
            "not valid base64",
        ),
    ];
    for (what, interval, says) in edits {
        let ghost = |v: &mut Value| v["intervals"]["after_window"]["ghost"] = interval;
        let e = refused(dir.path(), &good, what, ghost, says);
        assert!(e.contains("ghost"), "{what}: {e}");
    }
}

/// "A percentile below 0" and "times that are negative" are refused wherever a file holds
/// them, not only in a type's summary and the run's window: the per-second p50 and p99 (the
/// report's latency charts), a stage's percentiles and start (the `by stage:` table), the
/// extremes beside the statistics (the "all" row's max) and the percentile curve (found by
/// the attack of 2026-11-27: each of these read, and was drawn or printed as it stood). A
/// percentile curve's percentiles lie in 0..=100 and rise (before 2026-11-28, 150 and a
/// falling curve were read and drawn, and `compare` takes the p99's error from the curve).
#[test]
fn negative_latencies_and_times_are_refused_wherever_the_file_holds_them() {
    let dir = tempfile::tempdir().unwrap();
    let good = run();
    type Edit = (&'static str, fn(&mut Value), &'static str);
    let edits: [Edit; 9] = [
        (
            "an interval's p50",
            |v| v["intervals"]["per_transaction"]["a"][0]["p50_ms"] = json!(-1.0),
            "-1 ms",
        ),
        (
            "an interval's p99",
            |v| v["intervals"]["per_transaction"]["a"][0]["p99_ms"] = json!(-1.0),
            "-1 ms",
        ),
        (
            "a stage's p99",
            |v| v["stages"][0]["transactions"][0]["latency_ms"]["p99"] = json!(-1.0),
            "-1 ms",
        ),
        (
            "the largest latency",
            |v| v["transactions"][0]["latency_stats"]["max"] = json!(-1.0),
            "-1 ms",
        ),
        (
            "the smallest latency",
            |v| v["transactions"][0]["latency_stats"]["min"] = json!(-1.0),
            "-1 ms",
        ),
        (
            "a point of the percentile curve",
            |v| v["transactions"][0]["percentile_curve"][0][1] = json!(-1.0),
            "-1 ms",
        ),
        (
            "a percentile above 100",
            |v| v["transactions"][0]["percentile_curve"][0][0] = json!(150.0),
            "percentile 150",
        ),
        (
            "percentiles that fall",
            |v| {
                let c = v["transactions"][0]["percentile_curve"]
                    .as_array_mut()
                    .unwrap();
                let last = c.len() - 1;
                c[last][0] = json!(0.0);
            },
            "percentile 0",
        ),
        (
            "a stage that starts before the window",
            |v| v["stages"][0]["start_s"] = json!(-1.0),
            "-1 s",
        ),
    ];
    for (what, edit, says) in edits {
        refused(dir.path(), &good, what, edit, says);
    }
}

/// `weights` lists every type of `transactions`, in order, with its weight: a run writes both
/// from one workload. `--merge` takes the types from `weights`, so a file whose `weights`
/// left a type out read, and merging it dropped that type's counts from the result without
/// a word (found by the attack of 2026-11-27).
#[test]
fn weights_that_do_not_list_the_types_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let good = run();
    type Edit = (&'static str, fn(&mut Value));
    let edits: [Edit; 4] = [
        ("no weights", |v| v["weights"] = json!([])),
        ("a type left out", |v| {
            v["weights"].as_array_mut().unwrap().pop();
        }),
        ("a type that did not run", |v| {
            v["weights"].as_array_mut().unwrap().push(json!(["c", 1]))
        }),
        ("another weight", |v| v["weights"][0][1] = json!(7)),
    ];
    // What the refusal prevents: a merge of such a file, holding none of its transactions.
    let mut v = good.clone();
    v["weights"] = json!([]);
    let path = dir.path().join("r.json");
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    if let Ok(a) = BenchRun::read_json(&path) {
        let mut b = a.clone();
        b.seed ^= 1;
        let ok: u64 = a.transactions.iter().map(|t| t.ok).sum();
        let all = bench::merge(&[("a.json".into(), a), ("b.json".into(), b)]).unwrap();
        let merged: u64 = all.transactions.iter().map(|t| t.ok).sum();
        assert_eq!(merged, 2 * ok, "the merge lost transactions");
    }
    for (what, edit) in edits {
        refused(dir.path(), &good, what, edit, "weights");
    }
}

/// A workload (Rust API) with two types of one name: refused before the run. Before (found
/// by the attack of 2026-11-27) it ran, the second type's per-second series replaced the
/// first's, and the result it wrote was refused by `report` and `compare` as "listed twice".
#[test]
fn a_workload_with_a_type_named_twice_is_refused_before_it_runs() {
    let w = Workload::new("noop")
        .without_database()
        .transaction("a", 1, || NoOp)
        .transaction("b", 1, || NoOp)
        .transaction("a", 1, || NoOp);
    let mut c = RunConfig::new(None);
    c.duration = Duration::from_millis(100);
    c.warmup = Duration::ZERO;
    c.threads = 1;
    let e = rt()
        .block_on(bench::run(&w, &c, pending::<()>()))
        .map(|r| format!("ran: {:?}", r.weights))
        .unwrap_or_else(|e| e.to_string());
    assert!(e.contains("two transaction types named \"a\""), "{e}");
}

/// The table's max is the exact slowest success in every row. Before (found by the attack of
/// 2026-11-28), a one-type run's "all" row showed the exact max (18.68 ms) and the type's row
/// the histogram's (18.69 ms: the top of the HDR bucket holding it), so one figure read two
/// ways in one table.
#[test]
fn the_tables_max_is_the_exact_one_in_every_row() {
    let mut c = RunConfig::new(None);
    c.duration = Duration::from_millis(200);
    c.warmup = Duration::ZERO;
    c.threads = 1;
    let mut run = rt()
        .block_on(bench::run(&common::sleeping(0), &c, pending::<()>()))
        .unwrap();
    // As a run whose slowest success took 18.68 ms records it.
    run.transactions[0].latency_stats.max = 18.68;
    run.transactions[0].latency_ms.max = 18.69;
    let table = bench::report::table(&[bench::report::Labeled {
        label: "r.json".into(),
        run,
    }])
    .render();
    let max = |row: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(row))
            .and_then(|l| l.split_whitespace().last())
            .map(str::to_owned)
    };
    assert_eq!(max("sleep").as_deref(), Some("18.68"), "{table}");
    assert_eq!(max("all").as_deref(), Some("18.68"), "{table}");
}

/// Promise (docs/bench.md, "The result file"): a file with "a latency or percentile below 0
/// anywhere in the file (..., the open-loop lag)" is refused when read, and (from version 2)
/// a histogram must hold its interval's count.
///
/// Steps: an open-loop run (it has `intervals.schedule_lag`, the report's "schedule lag"
/// chart), each edit below applied to its first second, then read.
///
/// Before the fix: the per-second lag series was never checked, only the run's lag summary
/// (`schedule.lag_ms`). Each edit read as a valid run; `report --html` drew the negative
/// p99, and a p99 of -1e300 (found by fuzzing result files) made it panic in the chart's
/// axis code ("attempt to add with overflow", exit 101).
#[test]
fn the_open_loop_lag_per_second_is_checked_as_the_latencies_are() {
    let dir = tempfile::tempdir().unwrap();
    let w = Workload::new("noop")
        .without_database()
        .transaction("a", 1, || NoOp);
    let mut c = RunConfig::new(None);
    c.duration = Duration::from_millis(300);
    c.warmup = Duration::ZERO;
    c.threads = 1;
    c.rate = Some(2000.0);
    let run = rt().block_on(bench::run(&w, &c, pending::<()>())).unwrap();
    let good = serde_json::to_value(&run).unwrap();
    assert!(
        good["intervals"]["schedule_lag"][0]["sum"].is_number(),
        "an open-loop run has a lag series: {}",
        good["intervals"]
    );
    read(dir.path(), &good).expect("the run as written reads");
    type Edit = (&'static str, fn(&mut Value), &'static str);
    let edits: [Edit; 5] = [
        (
            "a second's lag p99",
            |v| v["intervals"]["schedule_lag"][0]["p99_ms"] = json!(-1.0),
            "-1 ms",
        ),
        (
            "a second's lag p99, absurdly negative",
            |v| v["intervals"]["schedule_lag"][0]["p99_ms"] = json!(-1e300),
            "ms",
        ),
        (
            "a second's lag p50",
            |v| v["intervals"]["schedule_lag"][0]["p50_ms"] = json!(-1.0),
            "-1 ms",
        ),
        (
            "a second's lag sum",
            |v| v["intervals"]["schedule_lag"][0]["sum"] = json!(-1.0),
            "statistics",
        ),
        (
            "a second's lag count beside its histogram",
            |v| {
                let n = v["intervals"]["schedule_lag"][0]["n"].as_u64().unwrap();
                v["intervals"]["schedule_lag"][0]["n"] = json!(n + 1);
            },
            "histogram",
        ),
    ];
    for (what, edit, says) in edits {
        let e = refused(dir.path(), &good, what, edit, says);
        assert!(
            e.contains("lag"),
            "{what}: the error does not name the lag: {e}"
        );
    }
}

/// Every field of a result file set to each of a dozen hostile values (negative, zero, huge,
/// beyond `u64`, wrong type, null, empty containers, a truncated histogram) is read or
/// refused, and what is read goes through the report's table, its description, its TPS
/// series and a merge with the good run: never a panic (holds; the same mutations through
/// the CLI's `report`, `report --merge` and `compare`, 11,376 runs, found no panic or hang
/// either, session 45).
#[test]
fn every_field_set_to_a_hostile_value_is_read_or_refused_never_a_panic() {
    fn leaves(v: &Value, path: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    path.push(json!(k));
                    leaves(x, path, out);
                    path.pop();
                }
            }
            // The first two elements: the rest have the same shape.
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate().take(2) {
                    path.push(json!(i));
                    leaves(x, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
        out.push(path.clone());
    }
    fn at<'a>(v: &'a mut Value, path: &[Value]) -> &'a mut Value {
        path.iter().fold(v, |v, k| match k {
            Value::String(k) => &mut v[k.as_str()],
            k => &mut v[k.as_u64().unwrap() as usize],
        })
    }
    let good = run();
    let dir = tempfile::tempdir().unwrap();
    let good_run = read(dir.path(), &good).unwrap();
    let mut paths = Vec::new();
    leaves(&good, &mut Vec::new(), &mut paths);
    paths.retain(|p| !p.is_empty());
    assert!(paths.len() > 100, "only {} fields", paths.len());
    let hostile = [
        json!(-1),
        json!(0),
        json!(1e300),
        json!(-1e300),
        json!(u64::MAX),
        // 2^64, one past `u64`: serde_json's `Value` cannot hold it, so the text is spliced.
        json!("2^64"),
        json!("x"),
        Value::Null,
        json!([]),
        json!({}),
        json!(true),
        json!("HISTFAAAAA"),
    ];
    let (mut read_ok, mut refused) = (0, 0);
    for path in &paths {
        for h in &hostile {
            let mut v = good.clone();
            *at(&mut v, path) = h.clone();
            let text = serde_json::to_string(&v)
                .unwrap()
                .replace("\"2^64\"", "18446744073709551616");
            let file = dir.path().join("edited.json");
            std::fs::write(&file, text).unwrap();
            let outcome = std::panic::catch_unwind(|| {
                let Ok(r) = BenchRun::read_json(&file) else {
                    return false;
                };
                let labeled = [bench::report::Labeled {
                    label: "edited".into(),
                    run: r.clone(),
                }];
                let _ = bench::report::table(&labeled).render();
                let _ = bench::report::describe(&r);
                let _ = bench::report::tps_series(&labeled);
                let _ = bench::merge(&[("good".into(), good_run.clone()), ("edited".into(), r)]);
                true
            });
            match outcome {
                Ok(true) => read_ok += 1,
                Ok(false) => refused += 1,
                Err(_) => panic!("{path:?} = {h}: a panic reading or reporting the file"),
            }
        }
    }
    // Both outcomes happen: the mutations reach fields that are checked and fields that
    // are free text.
    assert!(
        read_ok > 0 && refused > 0,
        "{read_ok} read, {refused} refused"
    );
}

/// A result file cut short at any byte (a copy interrupted, a full disk) or with a byte
/// changed (a digit, a quote, a bracket, a letter of a histogram) is read or refused, and
/// what is read goes through the report and a merge: never a panic. A cut file is always
/// refused, saying it may be truncated (holds; 25,000 changes under another seed held too).
#[test]
fn a_truncated_or_corrupted_result_file_is_refused_or_read_never_a_panic() {
    use rand::{Rng, SeedableRng, rngs::SmallRng};
    let good = run();
    let text = serde_json::to_string_pretty(&good).unwrap().into_bytes();
    let dir = tempfile::tempdir().unwrap();
    let good_run = read(dir.path(), &good).unwrap();
    let file = dir.path().join("cut.json");
    let through_the_report = |r: BenchRun| {
        let labeled = [bench::report::Labeled {
            label: "cut".into(),
            run: r.clone(),
        }];
        let _ = bench::report::table(&labeled).render();
        let _ = bench::report::describe(&r);
        let _ = bench::report::tps_series(&labeled);
        let _ = bench::merge(&[("good".into(), good_run.clone()), ("cut".into(), r)]);
    };
    // Every cut of the last 2 KB (where the closing brackets are) and every 13th before.
    let step = |i: usize| if i + 2048 < text.len() { 13 } else { 1 };
    let mut i = 0;
    while i < text.len() {
        std::fs::write(&file, &text[..i]).unwrap();
        let got = std::panic::catch_unwind(|| BenchRun::read_json(&file).map(drop));
        match got {
            Err(_) => panic!("a panic reading the file cut at byte {i}"),
            Ok(Ok(())) if !text[i..].iter().all(u8::is_ascii_whitespace) => {
                panic!("the file cut at byte {i} of {} was read", text.len())
            }
            Ok(Err(e)) => assert!(
                e.to_string().contains("truncated") || text[..i].is_empty(),
                "cut at {i}: {e}"
            ),
            Ok(Ok(())) => {}
        }
        i += step(i);
    }
    let mut rng = SmallRng::seed_from_u64(61);
    let (mut read_ok, mut refused) = (0, 0);
    for _ in 0..1500 {
        let mut bytes = text.clone();
        for _ in 0..rng.random_range(1..=3) {
            let at = rng.random_range(0..bytes.len());
            const BYTES: &[u8] = b"0123456789\"{}[],:-.eE+ abzAZ/";
            bytes[at] = BYTES[rng.random_range(0..BYTES.len())];
        }
        std::fs::write(&file, &bytes).unwrap();
        let got = std::panic::catch_unwind(|| match BenchRun::read_json(&file) {
            Ok(r) => {
                through_the_report(r);
                true
            }
            Err(_) => false,
        });
        match got {
            Err(_) => panic!(
                "a panic on the file changed to {:?}",
                String::from_utf8_lossy(&bytes)
            ),
            Ok(true) => read_ok += 1,
            Ok(false) => refused += 1,
        }
    }
    assert!(
        read_ok > 0 && refused > 0,
        "{read_ok} read, {refused} refused"
    );
}

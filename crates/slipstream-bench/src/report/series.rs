//! The time series the HTML report draws, from a result's per-second intervals.

use super::Labeled;
use crate::Series;
use crate::run_result::{BenchRun, Interval};

/// A point for interval `i` of `r`: x at its end, in seconds from the start of measuring, and
/// `n` per second of the time it covers. The last interval may cover part of one (the window
/// ended in it, and it holds only what ended before): over a whole one it drew a false drop.
fn point(r: &BenchRun, i: usize, n: u64) -> (f64, f64) {
    let (end, length) = r.interval_span(i);
    (end, n as f64 / length.max(1e-9))
}

/// Successful transactions per second over time, all types together: one series per run.
///
/// ```
/// # fn main() -> anyhow::Result<()> {
/// # use slipstream_bench::{RunConfig, Session, Transaction, TxError, Workload};
/// # struct Nap;
/// # impl Transaction for Nap {
/// #     async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
/// #         tokio::time::sleep(std::time::Duration::from_millis(2)).await;
/// #         s.count().selects += 1;
/// #         Ok(())
/// #     }
/// # }
/// # let workload = Workload::new("nap").transaction("nap", 1, || Nap).without_database();
/// # let mut config = RunConfig::new(None);
/// # config.users = 2;
/// # config.duration = std::time::Duration::from_millis(300);
/// # let run = tokio::runtime::Runtime::new()?
/// #     .block_on(slipstream_bench::run(&workload, &config, std::future::pending::<()>()))?;
/// use slipstream_bench::report::{Labeled, tps_series};
/// let series = tps_series(&[Labeled { label: "a".into(), run }]);
/// assert_eq!((series.len(), series[0].name.as_str()), (1, "a"));
/// // x: the end of the first one-second interval, here the window's, 0.3 s into it
/// assert_eq!(series[0].points[0].0, 0.3);
/// # Ok(()) }
/// ```
pub fn tps_series(runs: &[Labeled]) -> Vec<Series> {
    runs.iter()
        .map(|l| {
            let iv = &l.run.intervals;
            let len = iv.per_transaction.values().map(Vec::len).max().unwrap_or(0);
            let points = (0..len)
                .map(|i| {
                    let n: u64 = iv
                        .per_transaction
                        .values()
                        .filter_map(|v| v.get(i))
                        .map(|x| x.sufficient.n)
                        .sum();
                    point(&l.run, i, n)
                })
                .collect();
            Series {
                name: l.label.clone(),
                x_label: "seconds".into(),
                y_label: "transactions/s".into(),
                points,
            }
        })
        .collect()
}

/// Types that ran, in the workload's order.
pub(super) fn active_types(r: &BenchRun) -> Vec<&str> {
    r.transactions
        .iter()
        .filter(|t| t.ok + t.failed > 0)
        .map(|t| t.name.as_str())
        .collect()
}

/// One run's throughput per type over time (successes per second).
pub(super) fn tps_per_type(r: &BenchRun) -> Vec<Series> {
    active_types(r)
        .into_iter()
        .filter_map(|name| {
            let v = r.intervals.per_transaction.get(name)?;
            Some(Series {
                name: name.to_string(),
                x_label: "seconds".into(),
                y_label: "transactions/s".into(),
                points: v
                    .iter()
                    .enumerate()
                    .map(|(i, iv)| point(r, i, iv.sufficient.n))
                    .collect(),
            })
        })
        .collect()
}

/// One run's failures per second over time, per type that failed.
pub(super) fn errors_per_type(r: &BenchRun) -> Vec<Series> {
    r.transactions
        .iter()
        .filter(|t| t.failed > 0)
        .filter_map(|t| {
            let v = r.intervals.per_transaction.get(&t.name)?;
            Some(Series {
                name: t.name.clone(),
                x_label: "seconds".into(),
                y_label: "failures/s".into(),
                points: v
                    .iter()
                    .enumerate()
                    .map(|(i, iv)| point(r, i, iv.failed))
                    .collect(),
            })
        })
        .collect()
}

/// p50 and p99 per interval of `series` (one of `r`'s), skipping intervals with no success (a
/// latency of 0 there would read as "fast", not "nothing").
pub(super) fn p50_p99(label: &str, series: &[Interval], r: &BenchRun) -> [Series; 2] {
    let line = |which: &str, f: fn(&Interval) -> f64| Series {
        name: if label.is_empty() {
            which.to_string()
        } else {
            format!("{label} {which}")
        },
        x_label: "seconds".into(),
        y_label: "latency (ms)".into(),
        points: series
            .iter()
            .enumerate()
            .filter(|(_, iv)| iv.sufficient.n > 0 && !iv.histogram.is_empty())
            .map(|(i, iv)| (r.interval_span(i).0, f(iv)))
            .collect(),
    };
    [line("p50", |iv| iv.p50_ms), line("p99", |iv| iv.p99_ms)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipstream_stats::Suff;

    /// A recorded run (one type, `a`), its window `measured_s` long and its series `ivs`.
    fn recorded(measured_s: f64, ivs: Vec<Interval>) -> BenchRun {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/aa");
        let mut r = BenchRun::read_json(&dir.join("run1.json")).unwrap();
        r.measured_s = measured_s;
        r.merged_from.clear();
        r.intervals.seconds = 1.0;
        let mut t = r.transactions[0].clone();
        t.name = "a".into();
        t.ok = ivs.iter().map(|iv| iv.sufficient.n).sum();
        t.failed = ivs.iter().map(|iv| iv.failed).sum();
        r.transactions = vec![t];
        r.intervals.per_transaction = [("a".to_string(), ivs)].into();
        r
    }

    fn busy(n: u64, failed: u64) -> Interval {
        let mut iv = Interval {
            sufficient: Suff::default(),
            failed,
            p50_ms: 2.0,
            p99_ms: 9.0,
            histogram: "x".into(),
        };
        for _ in 0..n {
            iv.sufficient.add(2.0);
        }
        iv
    }

    #[test]
    fn empty_intervals_leave_gaps_in_latency_not_zeros() {
        let series = [busy(1, 0), Interval::default(), busy(1, 0)];
        let r = recorded(3.0, series.to_vec());
        let [p50, p99] = p50_p99("a", &series, &r);
        assert_eq!(p50.points, vec![(1.0, 2.0), (3.0, 2.0)]);
        assert_eq!(p99.points, vec![(1.0, 9.0), (3.0, 9.0)]);
    }

    /// docs/bench.md: the window's last interval, when it is part of a second, holds only what
    /// ended before the end. Every chart over time gives it its count over the part it covers,
    /// at the window's end: a 2.5 s window of 100 successes and 10 failures a second draws 100
    /// and 10 a second to the end, not a drop to 50 and 5 at x = 3 (before the fix).
    #[test]
    fn every_chart_over_time_gives_the_last_part_second_its_own_rate() {
        let series = vec![busy(100, 10), busy(100, 10), busy(50, 5)];
        let r = recorded(2.5, series.clone());
        let whole = vec![(1.0, 100.0), (2.0, 100.0), (2.5, 100.0)];
        assert_eq!(tps_per_type(&r)[0].points, whole);
        let failed = vec![(1.0, 10.0), (2.0, 10.0), (2.5, 10.0)];
        assert_eq!(errors_per_type(&r)[0].points, failed);
        let [p50, _] = p50_p99("", &series, &r);
        assert_eq!(p50.points.last(), Some(&(2.5, 2.0)));
    }
}

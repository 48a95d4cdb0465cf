//! The time series the HTML report draws, from a result's per-second intervals.

use super::Labeled;
use crate::Series;
use crate::run_result::{BenchRun, Interval};

/// x of interval `i`: the end of it, in seconds from the start of measuring.
fn x(i: usize, seconds: f64) -> f64 {
    (i as f64 + 1.0) * seconds
}

fn per_second(n: u64, seconds: f64) -> f64 {
    n as f64 / seconds.max(1e-9)
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
/// assert_eq!(series[0].points[0].0, 1.0); // x: the end of the first one-second interval
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
                    (x(i, iv.seconds), per_second(n, iv.seconds))
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
    let seconds = r.intervals.seconds;
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
                    .map(|(i, iv)| (x(i, seconds), per_second(iv.sufficient.n, seconds)))
                    .collect(),
            })
        })
        .collect()
}

/// One run's failures per second over time, per type that failed.
pub(super) fn errors_per_type(r: &BenchRun) -> Vec<Series> {
    let seconds = r.intervals.seconds;
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
                    .map(|(i, iv)| (x(i, seconds), per_second(iv.failed, seconds)))
                    .collect(),
            })
        })
        .collect()
}

/// p50 and p99 per interval of `series`, skipping intervals with no success (a latency of 0
/// there would read as "fast", not "nothing").
pub(super) fn p50_p99(label: &str, series: &[Interval], seconds: f64) -> [Series; 2] {
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
            .map(|(i, iv)| (x(i, seconds), f(iv)))
            .collect(),
    };
    [line("p50", |iv| iv.p50_ms), line("p99", |iv| iv.p99_ms)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipstream_stats::Suff;

    #[test]
    fn empty_intervals_leave_gaps_in_latency_not_zeros() {
        let mut busy = Interval {
            sufficient: Suff::default(),
            failed: 0,
            p50_ms: 2.0,
            p99_ms: 9.0,
            histogram: "x".into(),
        };
        busy.sufficient.add(2.0);
        let idle = Interval::default();
        let [p50, p99] = p50_p99("a", &[busy.clone(), idle, busy], 1.0);
        assert_eq!(p50.points, vec![(1.0, 2.0), (3.0, 2.0)]);
        assert_eq!(p99.points, vec![(1.0, 9.0), (3.0, 9.0)]);
    }
}

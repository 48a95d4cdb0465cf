//! Failure rates: B's against A's, from the counts of failed and successful transactions.
//!
//! With runs as the unit (two or more runs a side), each run's rate is one value and the spread
//! between runs widens the interval, as for latency ([`compare_run_rates`]). Otherwise (one
//! run a side) each side's rate gets the Jeffreys posterior Beta(f + ½, ok + ½) of its counts,
//! so failures are taken as independent: a burst of failures from one cause makes the
//! interval too narrow, which is why the ROPE below is not zero.

use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand_distr::{Beta, Distribution};
use slipstream_stats::{Estimate, HDI_MASS, Verdict, hdi};

/// Differences in failure rate smaller than this (0.1 percentage point, one transaction in a
/// thousand) do not matter for a benchmark's verdict.
pub const FAILURE_ROPE: f64 = 0.001;

/// B's failure rate against A's.
///
/// ```no_run
/// use slipstream_bench::{BenchRun, compare::{self, Outcome}};
/// let read = |p: &str| BenchRun::read_json(p.as_ref());
/// let report = compare::compare_sides(&[read("a.json")?], &[read("b.json")?], None,
///     compare::Unit::Auto, &Default::default())?;
/// for row in &report.rows {
///     if let Outcome::Rates(r) = &row.outcome {
///         println!("{}: {} of {} failed against {} of {}", row.scope(), r.b.0, r.b.1, r.a.0, r.a.1);
///     }
/// }
/// # Ok::<(), anyhow::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct RateComparison {
    /// A's failed and total transactions.
    pub a: (u64, u64),
    /// B's failed and total transactions.
    pub b: (u64, u64),
    /// B's rate − A's rate (a share, not percent), with its 95% HDI.
    pub diff: Estimate,
    /// P(B's rate > A's rate).
    pub p_b_more: f64,
    /// `CrediblySlower` reads "credibly more failures".
    pub verdict: Verdict,
}

/// Compares failure counts `(failed, total)`.
pub(crate) fn compare_rates(
    a: (u64, u64),
    b: (u64, u64),
    draws: usize,
    seed: u64,
) -> RateComparison {
    let mut rng = SmallRng::seed_from_u64(seed);
    // Cannot fail: both shape parameters are at least 0.5 (Jeffreys' prior); `saturating_sub`
    // keeps a total smaller than its failures (a hand-edited file) from wrapping.
    let beta = |(f, n): (u64, u64)| {
        Beta::new(f as f64 + 0.5, n.saturating_sub(f) as f64 + 0.5)
            .expect("positive Jeffreys parameters")
    };
    let (ba, bb) = (beta(a), beta(b));
    let diff: Vec<f64> = (0..draws)
        .map(|_| bb.sample(&mut rng) - ba.sample(&mut rng))
        .collect();
    judge(a, b, diff)
}

/// Compares failure rates with runs as the unit: `runs_a` and `runs_b` hold each run's
/// `(failed, total)`, `a` and `b` their sums (for display). Each run's rate is one value, so
/// the spread between runs (contention differs from run to run) widens the interval as it
/// does for latency; see [`slipstream_stats::run_rate_means`].
pub(crate) fn compare_run_rates(
    (a, b): ((u64, u64), (u64, u64)),
    runs_a: &[(u64, u64)],
    runs_b: &[(u64, u64)],
    draws: usize,
    seed: u64,
) -> Result<RateComparison, String> {
    let [ra, rb] = slipstream_stats::run_rate_means(runs_a, runs_b, draws, seed)
        .map_err(|e| format!("{e} with the type (its failures are compared run by run)"))?;
    let diff: Vec<f64> = rb.iter().zip(&ra).map(|(b, a)| b - a).collect();
    Ok(judge(a, b, diff))
}

/// The verdict from draws of B's rate − A's.
fn judge(a: (u64, u64), b: (u64, u64), diff: Vec<f64>) -> RateComparison {
    let mean = diff.iter().sum::<f64>() / diff.len() as f64;
    let (lo, hi) = hdi(&diff, HDI_MASS).unwrap_or((f64::NAN, f64::NAN));
    let verdict = if lo > FAILURE_ROPE {
        Verdict::CrediblySlower
    } else if hi < -FAILURE_ROPE {
        Verdict::CrediblyFaster
    } else if lo >= -FAILURE_ROPE && hi <= FAILURE_ROPE {
        Verdict::PracticallyEquivalent
    } else {
        Verdict::Undecided
    };
    RateComparison {
        a,
        b,
        diff: Estimate {
            mean,
            hdi: (lo, hi),
        },
        p_b_more: diff.iter().filter(|d| **d > 0.0).count() as f64 / diff.len() as f64,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clear_rise_in_failures_is_found_and_none_against_none_is_equivalent() {
        let c = compare_rates((5, 10_000), (300, 10_000), 4000, 1);
        assert_eq!(c.verdict, Verdict::CrediblySlower);
        let c = compare_rates((0, 50_000), (0, 50_000), 4000, 1);
        assert_eq!(c.verdict, Verdict::PracticallyEquivalent);
        let c = compare_rates((0, 20), (1, 20), 4000, 1);
        assert_eq!(c.verdict, Verdict::Undecided);
    }
}

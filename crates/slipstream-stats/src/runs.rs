//! Runs as the unit: each run contributes one value (its mean latency, its p99, its
//! throughput), and the spread between runs, which no single run can see, sets the width of
//! the interval.
//!
//! The model, on the log scale (a ratio is what a reader asks about, and run values are
//! positive and right-skewed):
//!
//! ```text
//! ln y_Ai ~ Normal(μ_A, σ²),  ln y_Bj ~ Normal(μ_B, σ²),  p(μ_A, μ_B, σ²) ∝ 1/σ²
//! ```
//!
//! One σ for both sides: with two or three runs a side, each side's own spread rests on one
//! or two degrees of freedom, and the pooled one on n_A + n_B − 2 (Student's choice). Under this
//! prior the posterior is known exactly,
//!
//! ```text
//! σ² | y ~ ν·s²_p / χ²(ν),  μ_k | σ², y ~ Normal(mean of ln y_k, σ²/n_k),  ν = n_A + n_B − 2
//! ```
//!
//! so it is drawn directly: no sampler, nothing to diverge.
//!
//! Three runs can agree by chance far more closely than their own noise allows (three means
//! of 40 transactions each, within 1% of each other), and then s²_p, and the interval, is too
//! small. When each run's own standard error e_i (on the log scale) is known, it is a floor:
//!
//! ```text
//! ln y_i ~ Normal(μ_side, τ² + e_i²),  p(μ_A, μ_B) ∝ 1,  p(τ² + ē²) ∝ 1/(τ² + ē²)
//! ```
//!
//! (τ the between-run sd, ē² the mean e_i²: the same Jeffreys prior on the total variance,
//! which starts at the runs' own noise instead of at zero). This hierarchical form is drawn
//! from a fine grid over ln τ (μ_A and μ_B integrate out exactly given τ), then μ | τ.
//!
//! The model is checked against its data by a posterior predictive check of the most extreme
//! run (a stalled run is an outlier that the normal model does not expect).

use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand_distr::{ChiSquared, Distribution, Normal};

use crate::compare::{CompareError, Comparison, judge_log};
use crate::{CompareSettings, Diagnostics};

/// The fewest runs a side needs for the run unit: one run has no between-run spread.
pub const MIN_RUNS: usize = 2;
/// A posterior predictive p-value below this flags a run the model does not expect.
pub const PPC_ALPHA: f64 = 0.01;

/// One run's value and its own uncertainty.
///
/// ```
/// use slipstream_stats::{CompareSettings, RunValue, compare_run_values, compare_runs};
/// // Runs' mean latencies; an error of 0 means "unknown": Student's closed form.
/// let run = |value| RunValue { value, se_log: 0.0 };
/// let s = CompareSettings::default();
/// let c = compare_runs(&[run(10.0), run(10.2)], &[run(12.0), run(12.1)], &s).unwrap();
/// let same = compare_run_values(&[10.0, 10.2], &[12.0, 12.1], &s).unwrap();
/// assert_eq!(c.ratio, same.ratio);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunValue {
    /// The value (positive; larger is slower).
    pub value: f64,
    /// The value's standard error from inside the run, on the log scale (the coefficient of
    /// variation of the value): 0 when unknown. A lower bound is fine; it only keeps the
    /// interval from being narrower than the runs' own noise.
    pub se_log: f64,
}

/// Points of the grid over ln τ.
const TAU_GRID: usize = 600;

/// Compares B's run values against A's (each value one run's, positive, larger = slower),
/// with no within-run uncertainty known: Student's model above, in closed form.
///
/// ```
/// use slipstream_stats::{CompareSettings, Verdict, compare_run_values};
/// let a = [10.0, 10.2, 9.9];
/// let b = [12.1, 11.9, 12.0];
/// let c = compare_run_values(&a, &b, &CompareSettings::default()).unwrap();
/// assert_eq!(c.verdict, Verdict::CrediblySlower);
/// assert!(c.ratio.hdi.0 > 1.05);
/// ```
pub fn compare_run_values(
    a: &[f64],
    b: &[f64],
    settings: &CompareSettings,
) -> Result<Comparison, CompareError> {
    let plain = |v: &[f64]| -> Vec<RunValue> {
        v.iter()
            .map(|&value| RunValue { value, se_log: 0.0 })
            .collect()
    };
    compare_runs(&plain(a), &plain(b), settings)
}

/// Compares B's runs against A's, each run's own standard error a floor under the spread
/// between runs (the hierarchical model above; Student's closed form when every error is 0).
///
/// ```
/// use slipstream_stats::{CompareSettings, RunValue, Verdict, compare_runs};
/// // Three runs a side that agree closely, but each is the mean of few, noisy transactions.
/// let run = |value| RunValue { value, se_log: 0.15 };
/// let a = [run(10.0), run(10.05), run(9.95)];
/// let b = [run(11.5), run(11.45), run(11.55)];
/// let c = compare_runs(&a, &b, &CompareSettings::default()).unwrap();
/// assert_ne!(c.verdict, Verdict::CrediblySlower);
/// ```
pub fn compare_runs(
    a: &[RunValue],
    b: &[RunValue],
    settings: &CompareSettings,
) -> Result<Comparison, CompareError> {
    for (name, v) in [("A", a), ("B", b)] {
        if v.len() < MIN_RUNS {
            return Err(CompareError(format!(
                "side {name} has {} run(s); the run unit needs at least {MIN_RUNS} per side (add runs, or compare single runs by their per-second series)",
                v.len()
            )));
        }
        if let Some(bad) = v.iter().find(|x| !(x.value.is_finite() && x.value > 0.0)) {
            return Err(CompareError(format!(
                "side {name} has a run value of {}: run values must be positive and finite",
                bad.value
            )));
        }
        if let Some(bad) = v
            .iter()
            .find(|x| !(x.se_log.is_finite() && x.se_log >= 0.0))
        {
            return Err(CompareError(format!(
                "side {name} has a run whose standard error is {}: it must be finite and not negative",
                bad.se_log
            )));
        }
    }
    let s = settings.sampler;
    if s.chains < 2 || s.draws < 10 {
        return Err(CompareError(format!(
            "at least 2 chains of 10 draws are needed (got {} of {}) for the diagnostics",
            s.chains, s.draws
        )));
    }
    let la: Vec<f64> = a.iter().map(|x| x.value.ln()).collect();
    let lb: Vec<f64> = b.iter().map(|x| x.value.ln()).collect();
    let (ea, eb): (Vec<f64>, Vec<f64>) = (
        a.iter().map(|x| x.se_log * x.se_log).collect(),
        b.iter().map(|x| x.se_log * x.se_log).collect(),
    );
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let ss = |v: &[f64]| {
        let m = mean(v);
        v.iter().map(|x| (x - m).powi(2)).sum::<f64>()
    };
    let total = s.chains * s.draws as usize;
    let mut rng = SmallRng::seed_from_u64(s.seed);
    let [mu_a, mu_b, sigma] = draw_means((&la, &ea), (&lb, &eb), total, &mut rng)?;
    // Cannot fail: a mean of 0 and a standard deviation of 1 are valid.
    let std_normal = Normal::new(0.0, 1.0).expect("unit normal");
    let nu = (la.len() + lb.len() - 2) as f64;
    // Posterior predictive check: the run furthest from its side's mean, in units of the
    // pooled sd, observed against data replicated from the posterior. The statistic uses the
    // data's own means and sd (not the draw's), so an outlier cannot hide by inflating σ.
    let furthest = |va: &[f64], vb: &[f64]| -> f64 {
        let (ca, cb) = (mean(va), mean(vb));
        let sp = ((ss(va) + ss(vb)) / nu).sqrt();
        va.iter()
            .map(|x| (x - ca).abs())
            .chain(vb.iter().map(|x| (x - cb).abs()))
            .fold(0.0, f64::max)
            / sp
    };
    let observed = furthest(&la, &lb);
    let mut extreme = 0usize;
    for i in 0..total {
        let rep = |mu: f64, n: usize, rng: &mut SmallRng| -> Vec<f64> {
            (0..n)
                .map(|_| mu + sigma[i] * std_normal.sample(rng))
                .collect()
        };
        let (ra, rb) = (
            rep(mu_a[i], la.len(), &mut rng),
            rep(mu_b[i], lb.len(), &mut rng),
        );
        // Identical observed runs give 0/0: no run stands out.
        if !observed.is_finite() || furthest(&ra, &rb) >= observed {
            extreme += 1;
        }
    }
    let ppc = extreme as f64 / total as f64;
    let mut warnings = Vec::new();
    if ppc < PPC_ALPHA {
        warnings.push(format!(
            "one run lies further from its side than the model expects (posterior predictive p = {ppc:.3}): look for a stalled or disturbed run, and re-run it"
        ));
    }
    let per = s.draws as usize;
    let chains = |v: &[f64]| -> Vec<Vec<f64>> { v.chunks(per).map(<[f64]>::to_vec).collect() };
    let diagnostics = [
        Diagnostics::of(&chains(&mu_a)),
        Diagnostics::of(&chains(&mu_b)),
    ];
    let sd_diag = Diagnostics::of(&chains(&sigma));
    let draws_a: Vec<f64> = mu_a.iter().map(|m| m.exp()).collect();
    let draws_b: Vec<f64> = mu_b.iter().map(|m| m.exp()).collect();
    // ln(B/A) from μ directly: with two or three runs a side μ has Student tails, and for run
    // values far from 1 (1e300, or spread over many orders of magnitude) a draw's exp() is
    // inf or 0, and inf / inf a NaN ratio.
    let log_ratio: Vec<f64> = mu_b.iter().zip(&mu_a).map(|(b, a)| b - a).collect();
    let mut c = judge_log(
        draws_a,
        draws_b,
        log_ratio,
        diagnostics,
        [sd_diag, sd_diag],
        (0, 2 * total),
        settings,
    );
    // With two or three runs a side μ's posterior has Student tails, and the mean of exp(μ)
    // is then dominated by a few extreme draws (or infinite): report each side by exp of μ's
    // posterior mean, the runs' geometric mean, on the scale the verdict is taken on.
    let centre = |mu: &[f64]| (mu.iter().sum::<f64>() / mu.len() as f64).exp();
    c.a.mean = centre(&mu_a);
    c.b.mean = centre(&mu_b);
    c.ppc = Some(ppc);
    c.warnings.extend(warnings);
    Ok(c)
}

/// Draws of the mean failure rate of A's runs and of B's, runs as the unit: each run's
/// `(failed, total)` gives its rate, with the Jeffreys posterior's variance as the floor under
/// the between-run spread (the model above, on the rate itself rather than its log, since a
/// rate can be 0).
///
/// Counts pooled over a side's runs take every transaction's failure as independent; but
/// contention, and with it serialization failures and deadlocks, differs from run to run as
/// latency does, and the pooled interval cannot see that: identical runs whose failure rate
/// varied by 10% between runs (2%, 20,000 transactions each, three a side) were called
/// different in 15% of pairs.
///
/// ```
/// // Three runs a side, B's failing at about twice A's rate.
/// let a = [(200, 20_000), (230, 20_000), (210, 20_000)];
/// let b = [(420, 20_000), (390, 20_000), (450, 20_000)];
/// let [ra, rb] = slipstream_stats::run_rate_means(&a, &b, 4000, 1).unwrap();
/// let higher = ra.iter().zip(&rb).filter(|(a, b)| b > a).count();
/// assert!(higher > 3900);
/// ```
pub fn run_rate_means(
    a: &[(u64, u64)],
    b: &[(u64, u64)],
    draws: usize,
    seed: u64,
) -> Result<[Vec<f64>; 2], CompareError> {
    let side = |name: &str, runs: &[(u64, u64)]| -> Result<(Vec<f64>, Vec<f64>), CompareError> {
        if runs.len() < MIN_RUNS {
            return Err(CompareError(format!(
                "side {name} has {} run(s); the run unit needs at least {MIN_RUNS} per side",
                runs.len()
            )));
        }
        if let Some((f, n)) = runs.iter().find(|(f, n)| f > n) {
            return Err(CompareError(format!(
                "side {name} has a run with {f} failures of {n} transactions"
            )));
        }
        // Jeffreys' Beta(f + ½, n − f + ½): its mean and its variance.
        Ok(runs
            .iter()
            .map(|&(f, n)| {
                let (f, n) = (f as f64, n as f64);
                let r = (f + 0.5) / (n + 1.0);
                (r, r * (1.0 - r) / (n + 2.0))
            })
            .unzip())
    };
    let ((xa, ea), (xb, eb)) = (side("A", a)?, side("B", b)?);
    let mut rng = SmallRng::seed_from_u64(seed);
    let [ra, rb, _] = draw_means((&xa, &ea), (&xb, &eb), draws.max(1), &mut rng)?;
    Ok([ra, rb])
}

/// Draws of μ_A, μ_B and the between-run sd from the model above, given each side's values
/// `x` (on the scale the model is normal on) and their own variances `e` (the floor).
fn draw_means(
    (la, ea): (&[f64], &[f64]),
    (lb, eb): (&[f64], &[f64]),
    total: usize,
    rng: &mut SmallRng,
) -> Result<[Vec<f64>; 3], CompareError> {
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let ss = |v: &[f64]| {
        let m = mean(v);
        v.iter().map(|x| (x - m).powi(2)).sum::<f64>()
    };
    let (na, nb) = (la.len() as f64, lb.len() as f64);
    let nu = na + nb - 2.0;
    let (ma, mb) = (mean(la), mean(lb));
    // Identical runs (all values equal) leave no spread: a floor of 1e-6 (a millionth on the
    // log scale; for rates, 0.0001 percentage point) keeps the draws finite and the interval
    // honest about "no visible spread".
    let sp2 = ((ss(la) + ss(lb)) / nu).max(1e-12);
    let chi = ChiSquared::new(nu).map_err(|e| CompareError(e.to_string()))?;
    let (mut mu_a, mut mu_b, mut sigma) = (
        Vec::with_capacity(total),
        Vec::with_capacity(total),
        Vec::with_capacity(total),
    );
    // Cannot fail: a mean of 0 and a standard deviation of 1 are valid.
    let std_normal = Normal::new(0.0, 1.0).expect("unit normal");
    if ea.iter().chain(eb).all(|e| *e == 0.0) {
        for _ in 0..total {
            let s2 = nu * sp2 / chi.sample(rng);
            mu_a.push(ma + (s2 / na).sqrt() * std_normal.sample(rng));
            mu_b.push(mb + (s2 / nb).sqrt() * std_normal.sample(rng));
            sigma.push(s2.sqrt());
        }
    } else {
        let grid = TauGrid::new(la, ea, lb, eb, sp2);
        for _ in 0..total {
            let tau = grid.draw(rng);
            let ((ca, wa), (cb, wb)) = (weighted(la, ea, tau), weighted(lb, eb, tau));
            mu_a.push(ca + wa.recip().sqrt() * std_normal.sample(rng));
            mu_b.push(cb + wb.recip().sqrt() * std_normal.sample(rng));
            sigma.push(tau);
        }
    }
    Ok([mu_a, mu_b, sigma])
}

/// The precision-weighted mean of `x` (variances τ² + e_i²) and the total weight.
fn weighted(x: &[f64], e: &[f64], tau: f64) -> (f64, f64) {
    let (mut w_sum, mut wx) = (0.0, 0.0);
    for (x, e) in x.iter().zip(e) {
        let w = 1.0 / (tau * tau + e);
        w_sum += w;
        wx += w * x;
    }
    (wx / w_sum, w_sum)
}

/// The marginal posterior of τ on a grid over ln τ, drawn by its cumulative distribution.
struct TauGrid {
    /// ln τ at each cell's centre.
    ln_tau: Vec<f64>,
    /// Cumulative posterior mass, ending at 1.
    cdf: Vec<f64>,
    /// Cell width on ln τ.
    step: f64,
}

impl TauGrid {
    fn new(la: &[f64], ea: &[f64], lb: &[f64], eb: &[f64], sp2: f64) -> TauGrid {
        let all: Vec<f64> = ea.iter().chain(eb).copied().collect();
        let e_mean = all.iter().sum::<f64>() / all.len() as f64;
        // From far below anything the data can tell apart to far above the observed spread:
        // the posterior's tail falls like τ^-(n-2), so 10^4 times the spread holds it all.
        let scale = sp2.sqrt().max(e_mean.sqrt()).max(1e-9);
        let (lo, hi) = ((scale * 1e-4).ln(), (scale * 1e4).ln());
        let step = (hi - lo) / TAU_GRID as f64;
        let ln_tau: Vec<f64> = (0..TAU_GRID)
            .map(|j| lo + (j as f64 + 0.5) * step)
            .collect();
        let log_post: Vec<f64> = ln_tau
            .iter()
            .map(|&lt| {
                let tau = lt.exp();
                let side = |x: &[f64], e: &[f64]| -> f64 {
                    let (c, w_sum) = weighted(x, e, tau);
                    let mut l = -0.5 * w_sum.ln();
                    for (x, e) in x.iter().zip(e) {
                        let w = 1.0 / (tau * tau + e);
                        l += 0.5 * w.ln() - 0.5 * w * (x - c) * (x - c);
                    }
                    l
                };
                // p(v) ∝ 1/v with v = τ² + ē², in the measure d ln τ: τ² / (τ² + ē²).
                let prior = (tau * tau / (tau * tau + e_mean)).ln();
                side(la, ea) + side(lb, eb) + prior
            })
            .collect();
        let top = log_post.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut cdf = Vec::with_capacity(TAU_GRID);
        let mut total = 0.0;
        for lp in &log_post {
            total += (lp - top).exp();
            cdf.push(total);
        }
        cdf.iter_mut().for_each(|c| *c /= total);
        TauGrid { ln_tau, cdf, step }
    }

    fn draw(&self, rng: &mut SmallRng) -> f64 {
        use rand::Rng;
        let u: f64 = rng.random();
        let j = self.cdf.partition_point(|c| *c < u).min(self.cdf.len() - 1);
        // Uniform within the cell, so the draws are not stuck on the grid's points.
        (self.ln_tau[j] + (rng.random::<f64>() - 0.5) * self.step).exp()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;

    #[test]
    fn one_run_a_side_or_a_bad_value_is_refused() {
        let s = CompareSettings::default();
        let e = compare_run_values(&[1.0], &[1.0, 2.0], &s).unwrap_err();
        assert!(e.to_string().contains("side A has 1 run"), "{e}");
        let e = compare_run_values(&[1.0, 2.0], &[1.0, f64::NAN], &s).unwrap_err();
        assert!(e.to_string().contains("side B"), "{e}");
    }

    #[test]
    fn the_interval_matches_students_t() {
        // Closed form: δ ~ t_ν(mb − ma, s_p·sqrt(1/na + 1/nb)); for ν = 4, t_0.975 = 2.776.
        let a = [10.0f64, 10.4, 9.7];
        let b = [11.0f64, 10.6, 11.3];
        let mut s = CompareSettings::default();
        s.sampler.draws = 20_000;
        let c = compare_run_values(&a, &b, &s).unwrap();
        let l = |v: &[f64]| v.iter().map(|x| x.ln()).collect::<Vec<_>>();
        let (la, lb) = (l(&a), l(&b));
        let m = |v: &[f64]| v.iter().sum::<f64>() / 3.0;
        let ss = |v: &[f64]| v.iter().map(|x| (x - m(v)).powi(2)).sum::<f64>();
        let sp = ((ss(&la) + ss(&lb)) / 4.0).sqrt();
        let half = 2.776 * sp * (2.0f64 / 3.0).sqrt();
        let centre = m(&lb) - m(&la);
        let (lo, hi) = c.log_ratio.hdi;
        // The width of a sampled HDI is precise; where it sits is not (the narrowest window
        // slides along a flat top), so the centre gets a looser bound.
        let width = hi - lo;
        assert!(
            (width - 2.0 * half).abs() < 0.03 * 2.0 * half,
            "width {width}, t gives {}",
            2.0 * half
        );
        assert!(
            ((lo + hi) / 2.0 - centre).abs() < 0.1 * half,
            "({lo}, {hi}) around {centre}"
        );
        assert!(c.ppc.unwrap() > PPC_ALPHA);
    }

    #[test]
    fn runs_that_agree_by_chance_cannot_beat_their_own_noise() {
        // Three close runs a side, 15% apart: Student's model alone calls it; with each run's
        // own standard error of 10%, the 95% interval of the ratio is at least as wide as
        // those errors allow (about ±2 x 10% x sqrt(2/3) on the log scale).
        let v = |x: &[f64], se_log: f64| -> Vec<RunValue> {
            x.iter().map(|&value| RunValue { value, se_log }).collect()
        };
        let (a, b) = ([10.0, 10.05, 9.95], [11.5, 11.45, 11.55]);
        let s = CompareSettings::default();
        let plain = compare_runs(&v(&a, 0.0), &v(&b, 0.0), &s).unwrap();
        assert_eq!(plain.verdict, Verdict::CrediblySlower);
        let floored = compare_runs(&v(&a, 0.1), &v(&b, 0.1), &s).unwrap();
        let (lo, hi) = floored.log_ratio.hdi;
        assert!(
            hi - lo > 2.0 * 1.96 * 0.1 * (2.0f64 / 3.0).sqrt(),
            "({lo}, {hi})"
        );
        assert_ne!(floored.verdict, Verdict::CrediblySlower);
        // Tiny errors change nothing: the grid agrees with the closed form.
        let tiny = compare_runs(&v(&a, 1e-6), &v(&b, 1e-6), &s).unwrap();
        let w = |c: &Comparison| c.log_ratio.hdi.1 - c.log_ratio.hdi.0;
        assert!(
            (w(&tiny) - w(&plain)).abs() < 0.05 * w(&plain),
            "{} vs {}",
            w(&tiny),
            w(&plain)
        );
    }

    #[test]
    fn a_wild_run_is_flagged_by_the_predictive_check() {
        let a = [10.0, 10.01, 9.99, 10.0, 10.02, 9.98, 30.0];
        let b = [10.0, 10.01, 9.99, 10.0, 10.02, 9.98, 10.01];
        let c = compare_run_values(&a, &b, &CompareSettings::default()).unwrap();
        assert!(c.ppc.unwrap() < PPC_ALPHA, "{:?}", c.ppc);
        assert!(
            c.warnings.iter().any(|w| w.contains("stalled")),
            "{:?}",
            c.warnings
        );
    }
}

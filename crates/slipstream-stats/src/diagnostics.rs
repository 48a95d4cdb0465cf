//! Convergence diagnostics after Vehtari, Gelman, Simpson, Carpenter and Bürkner (2021),
//! "Rank-normalization, folding, and localization": split R-hat on rank-normalised and folded
//! draws, bulk ESS, and tail ESS (from the 5% and 95% quantile indicators).

use statrs::distribution::{ContinuousCDF, Normal};

/// R-hat above this says the chains disagree (the paper's threshold).
pub const RHAT_MAX: f64 = 1.01;
/// Fewer effective draws than this per chain, times the chains, is too few to trust an HDI.
pub const ESS_MIN_PER_CHAIN: f64 = 100.0;

/// How well a set of chains mixed.
///
/// ```
/// use slipstream_stats::Diagnostics;
/// // Two chains stuck in different places: R-hat far above 1.
/// let chains = vec![(0..200).map(|i| (i % 7) as f64).collect::<Vec<_>>(),
///                   (0..200).map(|i| 100.0 + (i % 7) as f64).collect()];
/// let d = Diagnostics::of(&chains);
/// assert!(d.rhat > 1.5, "{d:?}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Diagnostics {
    /// Rank-normalised split R-hat: the larger of the bulk and the folded (tail) value.
    pub rhat: f64,
    /// Bulk effective sample size.
    pub ess_bulk: f64,
    /// Tail effective sample size.
    pub ess_tail: f64,
}

impl Diagnostics {
    /// Computes the diagnostics of `chains` (each the draws of one chain, equal lengths).
    ///
    /// ```
    /// // Four well-mixed "chains" of independent draws.
    /// let chains: Vec<Vec<f64>> = (0..4)
    ///     .map(|c| (0..500).map(|i| ((i * 7919 + c * 104729) % 1000) as f64).collect())
    ///     .collect();
    /// let d = slipstream_stats::Diagnostics::of(&chains);
    /// assert!(d.rhat < 1.01, "{d:?}");
    /// ```
    pub fn of(chains: &[Vec<f64>]) -> Diagnostics {
        if chains.is_empty() || chains.iter().any(|c| c.len() < 4) {
            // Nothing to judge: NaN fails every check in `problem`.
            return Diagnostics {
                rhat: f64::NAN,
                ess_bulk: f64::NAN,
                ess_tail: f64::NAN,
            };
        }
        let halves = split(chains);
        let z = rank_normalise(&halves);
        let median = {
            let mut all: Vec<f64> = halves.iter().flatten().copied().collect();
            all.sort_by(f64::total_cmp);
            all[all.len() / 2]
        };
        let folded: Vec<Vec<f64>> = halves
            .iter()
            .map(|c| c.iter().map(|x| (x - median).abs()).collect())
            .collect();
        let rhat = rhat(&z).max(rhat(&rank_normalise(&folded)));
        let ess_bulk = ess(&z);
        let (q05, q95) = {
            let mut all: Vec<f64> = halves.iter().flatten().copied().collect();
            all.sort_by(f64::total_cmp);
            let at = |q: f64| all[((all.len() - 1) as f64 * q).round() as usize];
            (at(0.05), at(0.95))
        };
        let indicator = |q: f64| -> Vec<Vec<f64>> {
            halves
                .iter()
                .map(|c| c.iter().map(|&x| if x <= q { 1.0 } else { 0.0 }).collect())
                .collect()
        };
        let ess_tail = ess(&indicator(q05)).min(ess(&indicator(q95)));
        Diagnostics {
            rhat,
            ess_bulk,
            ess_tail,
        }
    }

    /// What is wrong, if anything, for `chains` chains.
    ///
    /// ```
    /// use slipstream_stats::Diagnostics;
    /// let good = Diagnostics { rhat: 1.001, ess_bulk: 900.0, ess_tail: 800.0 };
    /// assert_eq!(good.problem(4), None);
    /// let few = Diagnostics { rhat: 1.001, ess_bulk: 300.0, ess_tail: 800.0 };
    /// assert!(few.problem(4).unwrap().starts_with("too few effective draws"));
    /// let split = Diagnostics { rhat: 1.2, ..good };
    /// assert!(split.problem(4).unwrap().starts_with("the chains disagree"));
    /// ```
    pub fn problem(&self, chains: usize) -> Option<String> {
        let need = ESS_MIN_PER_CHAIN * chains as f64;
        // NaN (a chain of constant draws) counts as failing.
        if self.rhat.is_nan() || self.rhat > RHAT_MAX {
            Some(format!(
                "the chains disagree (R-hat {:.3} > {RHAT_MAX})",
                self.rhat
            ))
        } else if self.ess_bulk.is_nan()
            || self.ess_tail.is_nan()
            || self.ess_bulk.min(self.ess_tail) < need
        {
            Some(format!(
                "too few effective draws (bulk {:.0}, tail {:.0}; need {need:.0})",
                self.ess_bulk, self.ess_tail
            ))
        } else {
            None
        }
    }
}

/// Each chain cut in two halves (a trend within a chain then shows as disagreement).
fn split(chains: &[Vec<f64>]) -> Vec<Vec<f64>> {
    chains
        .iter()
        .flat_map(|c| {
            let h = c.len() / 2;
            [c[..h].to_vec(), c[c.len() - h..].to_vec()]
        })
        .collect()
}

/// Replaces each draw by the normal quantile of its pooled rank (ties averaged).
fn rank_normalise(chains: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let all: Vec<(f64, usize, usize)> = chains
        .iter()
        .enumerate()
        .flat_map(|(c, v)| v.iter().enumerate().map(move |(i, &x)| (x, c, i)))
        .collect();
    let s = all.len();
    let mut order: Vec<usize> = (0..s).collect();
    order.sort_by(|&a, &b| all[a].0.total_cmp(&all[b].0));
    let mut ranks = vec![0.0; s];
    let mut i = 0;
    while i < s {
        let mut j = i;
        while j + 1 < s && all[order[j + 1]].0 == all[order[i]].0 {
            j += 1;
        }
        let r = (i + j) as f64 / 2.0 + 1.0;
        for k in i..=j {
            ranks[order[k]] = r;
        }
        i = j + 1;
    }
    let normal = Normal::standard();
    let mut out: Vec<Vec<f64>> = chains.iter().map(|c| vec![0.0; c.len()]).collect();
    for (k, &(_, c, i)) in all.iter().enumerate() {
        out[c][i] = normal.inverse_cdf((ranks[k] - 0.375) / (s as f64 + 0.25));
    }
    out
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn variance(v: &[f64]) -> f64 {
    let m = mean(v);
    v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() as f64 - 1.0)
}

/// Within-chain variance W and the pooled estimate var⁺.
fn variances(chains: &[Vec<f64>]) -> (f64, f64) {
    let n = chains[0].len() as f64;
    let m = chains.len() as f64;
    let means: Vec<f64> = chains.iter().map(|c| mean(c)).collect();
    let grand = mean(&means);
    let b = n / (m - 1.0) * means.iter().map(|x| (x - grand).powi(2)).sum::<f64>();
    let w = mean(&chains.iter().map(|c| variance(c)).collect::<Vec<_>>());
    (w, (n - 1.0) / n * w + b / n)
}

fn rhat(chains: &[Vec<f64>]) -> f64 {
    let (w, var_plus) = variances(chains);
    if w <= 0.0 {
        return if var_plus <= 0.0 { 1.0 } else { f64::INFINITY };
    }
    (var_plus / w).sqrt()
}

/// Effective sample size from the chains' combined autocorrelation, with Geyer's initial
/// monotone positive sequence.
fn ess(chains: &[Vec<f64>]) -> f64 {
    let n = chains[0].len();
    let total = (n * chains.len()) as f64;
    let (w, var_plus) = variances(chains);
    if w <= 0.0 || var_plus <= 0.0 {
        // Constant draws (an indicator that is always 0 or 1): nothing to learn from them.
        return total;
    }
    let autocov = |c: &[f64], t: usize| -> f64 {
        let m = mean(c);
        (0..n - t).map(|i| (c[i] - m) * (c[i + t] - m)).sum::<f64>() / n as f64
    };
    let rho = |t: usize| -> f64 {
        let mean_cov = mean(&chains.iter().map(|c| autocov(c, t)).collect::<Vec<_>>());
        1.0 - (w - mean_cov) / var_plus
    };
    let tau = geyer_tau(n, rho);
    total / tau.max(1.0 / total.log10().max(1.0))
}

/// The integrated autocorrelation time of a series of length `n` whose lag-t autocorrelation
/// is `rho(t)`, by Geyer's initial monotone positive sequence: sums of adjacent pairs while
/// they are positive, each no larger than the one before. The effective sample size is
/// n / tau.
pub(crate) fn geyer_tau(n: usize, rho: impl Fn(usize) -> f64) -> f64 {
    let mut tau = -1.0;
    let mut previous = f64::INFINITY;
    let mut t = 0;
    while t + 1 < n {
        let pair = rho(t) + rho(t + 1);
        if pair <= 0.0 {
            break;
        }
        let pair = pair.min(previous);
        tau += 2.0 * pair;
        previous = pair;
        t += 2;
    }
    tau
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic AR(1)-like sequence with correlation `phi`.
    fn ar1(n: usize, phi: f64, seed: u64) -> Vec<f64> {
        let mut x = 0.0;
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
                x = phi * x + u;
                x
            })
            .collect()
    }

    #[test]
    fn independent_chains_pass_and_stuck_ones_do_not() {
        let good: Vec<Vec<f64>> = (0..4).map(|c| ar1(1000, 0.0, c + 1)).collect();
        let d = Diagnostics::of(&good);
        assert!(d.rhat < RHAT_MAX, "{d:?}");
        assert!(d.ess_bulk > 2500.0, "{d:?}");
        assert_eq!(d.problem(4), None);

        // One chain stuck elsewhere.
        let mut bad = good.clone();
        bad[3].iter_mut().for_each(|x| *x += 5.0);
        let d = Diagnostics::of(&bad);
        assert!(d.rhat > 1.1, "{d:?}");
        assert!(d.problem(4).unwrap().contains("R-hat"));

        // Strongly autocorrelated chains: few effective draws.
        let sticky: Vec<Vec<f64>> = (0..4).map(|c| ar1(1000, 0.99, c + 10)).collect();
        let d = Diagnostics::of(&sticky);
        assert!(d.ess_bulk < 400.0, "{d:?}");
        assert!(d.problem(4).is_some());

        // No draws, or too few to split: a failing result, not a panic.
        assert!(Diagnostics::of(&[]).problem(0).is_some());
        assert!(Diagnostics::of(&[vec![1.0, 2.0]]).problem(1).is_some());
    }
}

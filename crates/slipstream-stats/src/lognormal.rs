//! The lognormal alternative, in closed form: ln y ~ Normal(μ, σ²) with the Jeffreys prior
//! p(μ, σ²) ∝ 1/σ² gives
//!
//! ```text
//! σ² | y ~ (n − 1)·v / χ²(n − 1),   μ | σ², y ~ Normal(mean of ln y, σ²/n)
//! ```
//!
//! (v the sample variance of ln y), so the mean latency exp(μ + σ²/2) is drawn exactly,
//! without a sampler.

use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand_distr::{ChiSquared, Distribution, Normal};

use crate::Suff;

/// `count` independent posterior draws of the mean of a lognormal fitted to `g`.
///
/// ```
/// let g = slipstream_stats::Suff::of(&[1.0, 1.2, 0.9, 1.1, 1.05]);
/// let m = slipstream_stats::lognormal_means(&g, 2000, 1).unwrap();
/// let mean = m.iter().sum::<f64>() / m.len() as f64;
/// assert!((mean - g.mean()).abs() < 0.05);
/// ```
pub fn lognormal_means(g: &Suff, count: usize, seed: u64) -> Result<Vec<f64>, String> {
    if g.n < 2 {
        return Err("the lognormal model needs at least 2 values".into());
    }
    if g.sum_ln_sq == 0.0 && g.sum_ln != 0.0 {
        return Err(
            "these statistics have no Σ(ln y)², which the lognormal model needs (result files written before it was recorded); re-run, or use the gamma model"
                .into(),
        );
    }
    let n = g.n as f64;
    let mean_log = g.sum_ln / n;
    let var_log = ((g.sum_ln_sq - g.sum_ln * g.sum_ln / n) / (n - 1.0)).max(0.0);
    if !(var_log > 0.0 && var_log.is_finite()) {
        return Err(
            "the values' logarithms do not vary: the lognormal model has no spread to fit".into(),
        );
    }
    let chi = ChiSquared::new(n - 1.0).map_err(|e| e.to_string())?;
    let mut rng = SmallRng::seed_from_u64(seed);
    Ok((0..count)
        .map(|_| {
            let sigma2 = (n - 1.0) * var_log / chi.sample(&mut rng);
            let mu = Normal::new(mean_log, (sigma2 / n).sqrt())
                .map(|d| d.sample(&mut rng))
                .unwrap_or(mean_log);
            (mu + sigma2 / 2.0).exp()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_distr::{Distribution, LogNormal};

    use super::*;

    #[test]
    fn the_posterior_mean_recovers_a_known_lognormal_mean() {
        // ln y ~ N(1, 0.5²): mean exp(1 + 0.125).
        let truth = (1.125f64).exp();
        let d = LogNormal::new(1.0, 0.5).unwrap();
        let mut rng = SmallRng::seed_from_u64(5);
        let g = Suff::of(&(0..5000).map(|_| d.sample(&mut rng)).collect::<Vec<_>>());
        let draws = lognormal_means(&g, 4000, 2).unwrap();
        let (lo, hi) = crate::hdi(&draws, 0.95).unwrap();
        assert!(lo < truth && truth < hi, "({lo}, {hi}) misses {truth}");
        assert!(hi - lo < 0.1 * truth, "({lo}, {hi}) is too wide");
    }

    #[test]
    fn missing_or_degenerate_statistics_are_refused() {
        let mut g = Suff::of(&[1.0, 2.0, 3.0]);
        g.sum_ln_sq = 0.0;
        assert!(lognormal_means(&g, 10, 1).unwrap_err().contains("re-run"));
        assert!(
            lognormal_means(&Suff::of(&[2.0, 2.0]), 10, 1)
                .unwrap_err()
                .contains("spread")
        );
        assert!(lognormal_means(&Suff::of(&[2.0]), 10, 1).is_err());
    }
}

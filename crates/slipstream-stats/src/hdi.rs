//! Highest-density intervals from draws.

/// The narrowest interval holding `mass` (e.g. 0.95) of the draws: for a unimodal posterior,
/// the highest-density interval. `None` for no draws or a mass outside (0, 1].
///
/// ```
/// let draws: Vec<f64> = (0..=100).map(f64::from).collect();
/// let (lo, hi) = slipstream_stats::hdi(&draws, 0.9).unwrap();
/// assert_eq!(hi - lo, 90.0);
/// ```
pub fn hdi(draws: &[f64], mass: f64) -> Option<(f64, f64)> {
    if draws.is_empty() || !(mass > 0.0 && mass <= 1.0) {
        return None;
    }
    let mut sorted: Vec<f64> = draws.iter().copied().filter(|x| x.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    // The interval covers `keep` consecutive draws; slide it and keep the narrowest.
    let keep = ((mass * n as f64).ceil() as usize).clamp(1, n);
    (0..=n - keep)
        .map(|i| (sorted[i], sorted[i + keep - 1]))
        .min_by(|a, b| (a.1 - a.0).total_cmp(&(b.1 - b.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skewed_sample_gets_the_narrow_side() {
        // Exponential quantiles: the 90% HDI starts at the minimum, not at the 5th percentile.
        let draws: Vec<f64> = (1..1000).map(|i| -(1.0 - i as f64 / 1000.0).ln()).collect();
        let (lo, hi) = hdi(&draws, 0.9).unwrap();
        assert!(lo < 0.01, "{lo}");
        assert!((hi - (10f64).ln()).abs() < 0.05, "{hi}");
        assert_eq!(hdi(&[], 0.9), None);
        assert_eq!(hdi(&[1.0], 1.5), None);
        assert_eq!(hdi(&[f64::NAN], 0.5), None);
    }
}

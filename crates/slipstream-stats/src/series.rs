//! One run's per-second series as honest values: consecutive seconds are correlated (a
//! checkpoint, autovacuum, a noisy neighbour last longer than a second), so n seconds carry
//! fewer than n values' worth of information. Batch means restore near-independence: seconds
//! are averaged in consecutive batches as long as the series' autocorrelation reaches.

use crate::Suff;

/// The fewest batches a series is cut into (the model needs at least 3 values).
pub const MIN_BATCHES: usize = 3;

/// The effective sample size of one series: n / τ, τ the integrated autocorrelation time,
/// summed with Geyer's initial monotone positive sequence (as for MCMC chains). At most n.
///
/// ```
/// // An alternating series is anti-correlated: no less information than its length.
/// let s: Vec<f64> = (0..100).map(|i| if i % 2 == 0 { 1.0 } else { 2.0 }).collect();
/// assert_eq!(slipstream_stats::effective_size(&s), 100.0);
/// ```
pub fn effective_size(series: &[f64]) -> f64 {
    let n = series.len();
    if n < 4 {
        return n as f64;
    }
    let mean = series.iter().sum::<f64>() / n as f64;
    let cov = |t: usize| -> f64 {
        (0..n - t)
            .map(|i| (series[i] - mean) * (series[i + t] - mean))
            .sum::<f64>()
            / n as f64
    };
    let var = cov(0);
    // NaN (a non-finite value) counts as no spread too.
    if var.is_nan() || var <= 0.0 {
        return n as f64;
    }
    let rho = |t: usize| cov(t) / var;
    let tau = crate::diagnostics::geyer_tau(n, rho);
    (n as f64 / tau.max(1.0)).min(n as f64)
}

/// A series cut into batches whose means are close to independent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchMeans {
    /// The batch means' statistics.
    pub values: Suff,
    /// Seconds (values) per batch.
    pub batch: usize,
    /// The series' effective sample size.
    pub effective: f64,
    /// True when the autocorrelation asked for fewer than [`MIN_BATCHES`] batches and the batches
    /// were made shorter than it reaches: the result may be overconfident.
    pub short: bool,
}

/// Cuts `series` (positive values in time order) into batches of ⌈n / ESS⌉ consecutive values,
/// so each batch spans about one autocorrelation time, and returns their means. A trailing
/// partial batch is dropped (it would weigh as much as a full one). `None` for fewer than
/// [`MIN_BATCHES`] values.
///
/// ```
/// let series: Vec<f64> = (0..60).map(|i| 10.0 + ((i / 10) % 2) as f64).collect();
/// let b = slipstream_stats::batch_means(&series).unwrap();
/// assert!(b.batch > 1 && b.values.n >= 3);
/// ```
pub fn batch_means(series: &[f64]) -> Option<BatchMeans> {
    let n = series.len();
    if n < MIN_BATCHES {
        return None;
    }
    let effective = effective_size(series);
    let wanted = (n as f64 / effective.max(1.0)).ceil() as usize;
    let batch = wanted.clamp(1, n / MIN_BATCHES);
    let mut values = Suff::default();
    for chunk in series.chunks_exact(batch) {
        values.add(chunk.iter().sum::<f64>() / batch as f64);
    }
    Some(BatchMeans {
        values,
        batch,
        effective,
        short: batch < wanted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_drift_gets_long_batches_and_noise_gets_none() {
        // A sine with a 40-value period: strongly correlated over ~10 values.
        let wave: Vec<f64> = (0..400)
            .map(|i| 10.0 + (i as f64 * std::f64::consts::TAU / 40.0).sin())
            .collect();
        let b = batch_means(&wave).unwrap();
        assert!(b.batch >= 5, "{b:?}");
        // A deterministic scramble: no autocorrelation worth the name.
        let noise: Vec<f64> = (0..400u64)
            .map(|i| 10.0 + ((i.wrapping_mul(2654435761) % 1000) as f64) / 1000.0)
            .collect();
        let b = batch_means(&noise).unwrap();
        assert!(b.batch <= 2, "{b:?}");
        assert!(batch_means(&[1.0, 2.0]).is_none());
        // A steady trend: one autocorrelation time is about a third of the series or more, so
        // three batches are as long as they can be, and may still be too short: it says so.
        let trend: Vec<f64> = (1..=30).map(f64::from).collect();
        let b = batch_means(&trend).unwrap();
        assert_eq!((b.values.n, b.batch), (3, 10));
        assert!(b.short, "{b:?}");
    }
}

//! Summaries of repeated measurements, printed so a reader can judge the noise.

use serde::{Deserialize, Serialize};

/// Mean, spread and order statistics of a sample.
///
/// ```
/// let s = slipstream_lab::Summary::of(&[1.0, 2.0, 3.0, 4.0]);
/// assert_eq!(s.mean, 2.5);
/// assert_eq!(s.min, 1.0);
/// ```
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (n - 1).
    pub sd: f64,
    /// Smallest sample.
    pub min: f64,
    /// Median: the middle sample, or the mean of the middle two when `n` is even.
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

impl Summary {
    /// Summarises `samples` (empty gives zeros).
    /// ```
    /// let s = slipstream_lab::Summary::of(&[3.0, 1.0, 2.0, 10.0]);
    /// assert_eq!((s.n, s.min, s.max), (4, 1.0, 10.0));
    /// assert_eq!(s.p50, 2.5); // the mean of the middle two
    /// assert_eq!(slipstream_lab::Summary::of(&[]).n, 0);
    /// ```
    pub fn of(samples: &[f64]) -> Summary {
        if samples.is_empty() {
            return Summary::default();
        }
        let n = samples.len();
        let mean = samples.iter().sum::<f64>() / n as f64;
        let sd = if n > 1 {
            (samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank = |q: f64| sorted[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        // Not the nearest rank: for an even count that is the lower of the middle two, the
        // minimum of two runs (the quick forms repeat twice) and the third of the runner's six
        // paired rounds, a "median" below half of what was measured.
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Summary {
            n,
            mean,
            sd,
            min: sorted[0],
            p50: median,
            p99: rank(0.99),
            max: sorted[n - 1],
        }
    }

    /// Coefficient of variation (sd / mean).
    /// ```
    /// let s = slipstream_lab::Summary::of(&[90.0, 100.0, 110.0]);
    /// assert!((s.cv() - 0.1).abs() < 1e-12); // sd 10 over mean 100
    /// ```
    pub fn cv(&self) -> f64 {
        if self.mean == 0.0 {
            0.0
        } else {
            self.sd / self.mean
        }
    }

    /// `mean ± sd` with `digits` decimals. One sample has no spread to show, and says so
    /// rather than "± 0", which reads as a measurement without noise.
    /// ```
    /// let s = slipstream_lab::Summary::of(&[90.0, 100.0, 110.0]);
    /// assert_eq!(s.mean_sd(1), "100.0 ± 10.0");
    /// assert_eq!(slipstream_lab::Summary::of(&[19526.4]).mean_sd(0), "19526 (one sample)");
    /// assert_eq!(slipstream_lab::Summary::of(&[]).mean_sd(0), "no samples");
    /// ```
    pub fn mean_sd(&self, digits: usize) -> String {
        match self.n {
            0 => "no samples".to_string(),
            1 => format!("{:.d$} (one sample)", self.mean, d = digits),
            _ => format!("{:.d$} ± {:.d$}", self.mean, self.sd, d = digits),
        }
    }

    /// `min … max` with `digits` decimals.
    /// ```
    /// let s = slipstream_lab::Summary::of(&[90.0, 100.0, 110.0]);
    /// assert_eq!(s.range(0), "90 … 110");
    /// ```
    pub fn range(&self, digits: usize) -> String {
        format!("{:.d$} … {:.d$}", self.min, self.max, d = digits)
    }
}

/// The ratios `peer[i] / ours[i]` of paired measurements taken interleaved (ours, peer, ours,
/// peer, ...). Slow drift of the machine hits both sides of a pair alike, so the median paired
/// ratio is steadier than the ratio of means.
///
/// A pair whose `ours` is not above 0 (nothing measured to divide by) is left out. With no
/// pair left, `n` is 0 and every figure is NaN, a missing ratio (docs/lab.md): not the zeros
/// of an empty [`Summary::of`], which would read as a measured "0.00x".
///
/// ```
/// let r = slipstream_lab::paired_ratios(&[1.0, 2.0], &[2.0, 4.0]);
/// assert_eq!(r.p50, 2.0);
/// let none = slipstream_lab::paired_ratios(&[0.0], &[5.0]);
/// assert!(none.n == 0 && none.p50.is_nan());
/// ```
pub fn paired_ratios(ours: &[f64], peer: &[f64]) -> Summary {
    let ratios: Vec<f64> = ours
        .iter()
        .zip(peer)
        .filter(|(o, _)| **o > 0.0)
        .map(|(o, p)| p / o)
        .collect();
    if ratios.is_empty() {
        return Summary {
            n: 0,
            mean: f64::NAN,
            sd: f64::NAN,
            min: f64::NAN,
            p50: f64::NAN,
            p99: f64::NAN,
            max: f64::NAN,
        };
    }
    Summary::of(&ratios)
}

/// A warning with a remedy when a measurement is noisy (coefficient of variation above 10%).
/// ```
/// use slipstream_lab::{Summary, noise_warning};
/// assert!(noise_warning("rate", &Summary::of(&[99.0, 100.0, 101.0]), true).is_none());
/// let w = noise_warning("rate", &Summary::of(&[50.0, 100.0, 150.0]), true).unwrap();
/// assert!(w.starts_with("rate: the runs vary by 50%"), "{w}");
/// ```
pub fn noise_warning(what: &str, s: &Summary, quick: bool) -> Option<String> {
    // The full form has no more rounds to offer: only a quieter machine helps then.
    let remedy = if quick {
        "close other programs or run without --quick for more rounds"
    } else {
        "close other programs and run again"
    };
    (s.cv() > 0.10).then(|| {
        format!(
            "{what}: the runs vary by {:.0}% (sd/mean); {remedy}",
            s.cv() * 100.0
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The remedy fits the form that ran: before (session 44), the full form was also told
    /// to "run without --quick", which it already did.
    #[test]
    fn the_noise_warning_offers_what_the_form_lacks() {
        let noisy = Summary::of(&[50.0, 100.0, 150.0]);
        let quick = noise_warning("x", &noisy, true).unwrap();
        assert!(quick.contains("without --quick"), "{quick}");
        let full = noise_warning("x", &noisy, false).unwrap();
        assert!(!full.contains("--quick"), "{full}");
        assert!(full.contains("run again"), "{full}");
    }

    #[test]
    fn order_statistics() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&xs);
        assert_eq!((s.p50, s.p99, s.max), (50.5, 99.0, 100.0));
        assert!((s.sd - 29.011).abs() < 0.01);
        assert!(noise_warning("x", &s, true).is_some());
        assert!(noise_warning("x", &Summary::of(&[100.0, 101.0]), true).is_none());
    }

    /// docs/lab.md: "a ratio is the median of the per-pair ratios"; `Summary::p50` says
    /// "Median". Steps: two pairs whose ratios are 1 and 3 (the quick forms of fetch-size and
    /// statement-cache repeat twice), and six (the runner's full form). Before the fix p50 was
    /// the nearest rank, the lower of the middle two: 1 (the smaller pair, reported as their
    /// median) and 3 of 1..6 where the median is 3.5.
    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(paired_ratios(&[1.0, 1.0], &[1.0, 3.0]).p50, 2.0);
        assert_eq!(Summary::of(&[6.0, 1.0, 5.0, 2.0, 4.0, 3.0]).p50, 3.5);
        assert_eq!(Summary::of(&[3.0, 1.0, 2.0]).p50, 2.0);
        assert_eq!(Summary::of(&[7.0]).p50, 7.0);
    }
}

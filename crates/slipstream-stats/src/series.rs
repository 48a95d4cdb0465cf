//! One run's per-second series as honest values: consecutive seconds are correlated (a
//! checkpoint, autovacuum, a noisy neighbour last longer than a second), so n seconds carry
//! fewer than n values' worth of information. Batch means restore near-independence: seconds
//! are averaged in consecutive batches as long as the series' autocorrelation reaches.

use crate::Suff;

/// The fewest batches a series is cut into (the model needs at least 3 values).
pub const MIN_BATCHES: usize = 3;

/// How many times the busiest second's count each batch of [`batch_ratio_means`] holds.
const SHARE_OF_BUSIEST: f64 = 5.0;

/// Lags whose autocovariance [`effective_size`] sums directly, at n multiplications each;
/// past them it takes every lag from one FFT, which costs about as much as this many.
const DIRECT_LAGS: usize = 32;

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
    let centred: Vec<f64> = series.iter().map(|x| x - mean).collect();
    let cov = |t: usize| -> f64 {
        centred[..n - t]
            .iter()
            .zip(&centred[t..])
            .map(|(a, b)| a * b)
            .sum::<f64>()
            / n as f64
    };
    let var = cov(0);
    // NaN (a non-finite value) counts as no spread too.
    if var.is_nan() || var <= 0.0 {
        return n as f64;
    }
    // The first lags one by one (a series that forgets within a few seconds needs no more);
    // every lag at once, through the FFT, when Geyer's sum goes on past them.
    let all = std::cell::OnceCell::new();
    let rho = |t: usize| {
        let c = if t < DIRECT_LAGS {
            cov(t)
        } else {
            all.get_or_init(|| autocovariances(&centred))[t]
        };
        c / var
    };
    let tau = crate::diagnostics::geyer_tau(n, rho);
    (n as f64 / tau.max(1.0)).min(n as f64)
}

/// The autocovariances of `x` (its mean removed) at every lag from 0 to n - 1, each sum
/// divided by n, through the FFT (Wiener-Khinchin: the inverse transform of the power
/// spectrum of `x` padded with zeros to twice its length). Geyer's sum reads lags until
/// their pairs stop being positive, which for a drifting series (a long soak run slowing
/// down) is a good part of the series: summed lag by lag that cost n per lag, 1.6 s for one
/// series of 80,000 seconds and a minute and a half for a week's.
fn autocovariances(x: &[f64]) -> Vec<f64> {
    use rustfft::{FftPlanner, num_complex::Complex};
    let n = x.len();
    let size = (2 * n).next_power_of_two();
    let mut buf: Vec<Complex<f64>> = x.iter().map(|&v| Complex::new(v, 0.0)).collect();
    buf.resize(size, Complex::new(0.0, 0.0));
    let mut planner = FftPlanner::new();
    planner.plan_fft_forward(size).process(&mut buf);
    buf.iter_mut()
        .for_each(|c| *c = Complex::new(c.norm_sqr(), 0.0));
    planner.plan_fft_inverse(size).process(&mut buf);
    // The inverse transform's 1 / size (rustfft does not normalise), and the estimator's 1 / n.
    let scale = size as f64 * n as f64;
    buf[..n].iter().map(|c| c.re / scale).collect()
}

/// A series cut into batches whose means are close to independent.
///
/// ```
/// // A steady trend: correlated over its whole length, so three batches of ten, flagged short.
/// let trend: Vec<f64> = (1..=30).map(f64::from).collect();
/// let b = slipstream_stats::batch_means(&trend).unwrap();
/// assert_eq!((b.values.n, b.batch), (3, 10));
/// assert_eq!(b.values.mean(), 15.5);
/// assert!(b.short);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchMeans {
    /// The batch means' statistics.
    pub values: Suff,
    /// Seconds (values) per batch, at least (a batch holds this many or one more, so that
    /// none is left out); from [`batch_ratio_means`], on average (its batches are cut by count,
    /// not by time).
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
    batch(series, |range| {
        series[range.clone()].iter().sum::<f64>() / range.len() as f64
    })
}

/// [`batch_means`] of a series of means over unequal counts (each second's mean latency,
/// over however many transactions ended in it): `sums[i] / counts[i]` is the series whose
/// autocorrelation sets how many batches there are, and the batches are cut where the
/// running count reaches each equal share of the total, so each holds about as many
/// transactions as the next and its value is their mean, Σ sums / Σ counts. The mean of the
/// batch values is then the transactions' mean. Cut into equal spans of time instead, a batch
/// in which few transactions ended (a slow one, in a closed loop) weighed as much as a busy
/// one: a run that slowed down in a tenth of its seconds, ending five times fewer
/// transactions in them, was shown 45% above its mean latency. Each batch holds at least five
/// times the busiest second's count, or, in a run too short for that, at least the busiest
/// second's (three batches); when one second holds more than a third of the transactions, the
/// batches are equal spans of time after all. `None` for fewer than [`MIN_BATCHES`] values, or
/// when `sums` and `counts` differ in length or a count is not positive.
///
/// ```
/// // A latency rising over 30 s (one autocorrelation time: three batches), every other
/// // second with 100 transactions at 10 ms and the others with one at 100 ms.
/// let counts: Vec<f64> = (0..30).map(|i| if i % 2 == 0 { 100.0 } else { 1.0 }).collect();
/// let means: Vec<f64> = (0..30).map(|i| if i % 2 == 0 { 10.0 } else { 100.0 } + i as f64).collect();
/// let sums: Vec<f64> = means.iter().zip(&counts).map(|(m, c)| m * c).collect();
/// let b = slipstream_stats::batch_ratio_means(&sums, &counts).unwrap();
/// assert_eq!(b.values.n, 3);
/// // About the transactions' mean (their 15 slow ones are 1% of them), not the seconds' (70).
/// let mean = sums.iter().sum::<f64>() / counts.iter().sum::<f64>();
/// assert!((b.values.mean() / mean - 1.0).abs() < 0.02, "{} against {mean}", b.values.mean());
/// ```
pub fn batch_ratio_means(sums: &[f64], counts: &[f64]) -> Option<BatchMeans> {
    if sums.len() != counts.len() || counts.iter().any(|c| !(*c > 0.0 && c.is_finite())) {
        return None;
    }
    let means: Vec<f64> = sums.iter().zip(counts).map(|(s, c)| s / c).collect();
    let by_time = batch(&means, |range| {
        sums[range.clone()].iter().sum::<f64>() / counts[range].iter().sum::<f64>()
    })?;
    let n = means.len();
    let total: f64 = counts.iter().sum();
    let busiest = counts.iter().copied().fold(0.0, f64::max);
    // Batches close at the end of a second, so a batch may hold up to one second more than its
    // share: each share is at least SHARE_OF_BUSIEST of the busiest second's count, which keeps
    // that error to a fifth of a batch (cut at one second's grain, a lone slow second could be
    // a batch of its own, and the run above was still shown 30% high). A run too short for
    // that gets MIN_BATCHES batches of at least the busiest second each: coarser, but still
    // closer to the transactions' mean than equal spans of time.
    let fine = (total / (SHARE_OF_BUSIEST * busiest)) as usize;
    let coarse = ((total / busiest) as usize).min(MIN_BATCHES);
    let k = (n / by_time.batch).min(fine.max(coarse));
    if k < MIN_BATCHES {
        return Some(by_time);
    }
    let share = total / k as f64;
    let mut values = Suff::default();
    let (mut start, mut held) = (0, 0.0);
    for (i, c) in counts.iter().enumerate() {
        held += c;
        // The last batch takes what is left, so none is dropped or left short.
        if held >= share && values.n + 1 < k as u64 {
            values.add(sums[start..=i].iter().sum::<f64>() / held);
            (start, held) = (i + 1, 0.0);
        }
    }
    if start < n {
        values.add(sums[start..].iter().sum::<f64>() / held);
    }
    if values.n < MIN_BATCHES as u64 {
        return Some(by_time);
    }
    Some(BatchMeans {
        values,
        batch: n / values.n as usize,
        ..by_time
    })
}

/// Cuts `series` into batches of ⌈n / ESS⌉ consecutive values (at least [`MIN_BATCHES`] of
/// them, a trailing partial batch dropped) and takes `value` of each batch's index range.
fn batch(series: &[f64], value: impl Fn(std::ops::Range<usize>) -> f64) -> Option<BatchMeans> {
    let n = series.len();
    if n < MIN_BATCHES {
        return None;
    }
    let effective = effective_size(series);
    let wanted = (n as f64 / effective.max(1.0)).ceil() as usize;
    let batch = wanted.clamp(1, n / MIN_BATCHES);
    // n / batch batches sharing out all n values, each `batch` or `batch + 1` long: cut at
    // exact multiples, the remainder at the end was dropped, and with it most of a stall at
    // the end of a run (a run that committed nothing in its last 12 s of 60 was shown up to
    // 30% above the TPS it measured: tests/attack_verdicts.rs in slipstream-bench).
    let k = n / batch;
    let mut values = Suff::default();
    for i in 0..k {
        values.add(value(i * n / k..(i + 1) * n / k));
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

    /// A drifting series: Geyer's sum reads lags far into it.
    fn drift(n: usize) -> Vec<f64> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        (0..n)
            .map(|i| 1000.0 - 100.0 * i as f64 / n as f64 + 10.0 * (rng.random::<f64>() - 0.5))
            .collect()
    }

    #[test]
    fn the_transform_gives_the_autocovariances_summed_lag_by_lag() {
        let x: Vec<f64> = drift(1000).iter().map(|v| v - 950.0).collect();
        let fast = autocovariances(&x);
        for (t, c) in fast.iter().enumerate() {
            let direct = (0..x.len() - t).map(|i| x[i] * x[i + t]).sum::<f64>() / 1000.0;
            assert!(
                (c - direct).abs() <= 1e-9 * fast[0],
                "lag {t}: {c} against {direct}"
            );
        }
    }

    /// The lags were each summed over the series: quadratic in a drifting series' length
    /// (release build: 10,000 seconds 25 ms, 40,000 0.39 s, 80,000 1.6 s; 25 ms now), and a
    /// million seconds (a run of 12 days) took minutes. The timeout only tells a hang from a
    /// slow machine.
    #[test]
    fn a_long_drifting_series_is_batched_in_about_linear_time() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let b = batch_means(&drift(1_000_000)).unwrap();
            assert_eq!((b.values.n, b.batch), (3, 333_333));
            assert!(b.short, "{b:?}");
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("batching one long series took minutes");
    }
}

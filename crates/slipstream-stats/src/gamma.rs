//! The model for one group: y ~ Gamma(shape = m²/s², rate = m/s²), with m ~ Gamma centred on
//! the pooled mean (wide) and the coefficient of variation c = s/m ~ Uniform(0, C), C from the
//! data.
//!
//! Article 004 puts the flat prior on s itself (up to a bound from the data). The gamma's
//! shape m²/s² ties m to s there: with a few dispersed values (three or four batch means of a
//! run that stalled), the wide flat range of s dragged m's posterior up with it, and its median
//! sat a third above what the values' mean says (211.8 for [200, 200, 200, 40], whose mean is
//! 160: `tests/attack_edges.rs`). A flat prior on s/m leaves the shape 1/c² free of m, so m's
//! posterior is the data's (170 there, against 214 on an exact grid).
//!
//! The likelihood needs only n, Σy and Σln y:
//!
//! ```text
//! ℓ(a, b) = n·a·ln b − n·lnΓ(a) + (a − 1)·Σln y − b·Σy
//! ```
//!
//! so one evaluation costs the same for 100 or 100 million samples. The sampler works on the
//! unconstrained scale θ = (ln m, logit(s/(C·m))); [`GammaModel::logp`] includes the Jacobian of
//! that transform and returns the gradient, written out below and checked against finite
//! differences in the tests.

use statrs::function::gamma::{digamma, ln_gamma};

use crate::Suff;

/// How wide the prior on a mean is: its standard deviation in multiples of its centre.
pub const PRIOR_MEAN_SPREAD: f64 = 10.0;
/// The prior on the coefficient of variation s/m is uniform up to this many times the pooled
/// one (or 1, if larger).
pub const PRIOR_CV_SPREAD: f64 = 10.0;

/// Priors shared by both groups (the article: the same prior for A and B, so the prior never
/// favours a difference).
///
/// ```
/// use slipstream_stats::{PRIOR_CV_SPREAD, Prior, Suff};
/// let (a, b) = (Suff::of(&[1.0, 2.0, 3.0]), Suff::of(&[3.0, 4.0, 5.0]));
/// let p = Prior::pooled(&[a, b]);
/// assert!((p.mean_shape / p.mean_rate - 3.0).abs() < 1e-12); // centred on the pooled mean
/// assert_eq!(p.cv_max, PRIOR_CV_SPREAD); // the pooled sd (1.41) is under the pooled mean (3)
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prior {
    /// Gamma prior on m: shape.
    pub mean_shape: f64,
    /// Gamma prior on m: rate.
    pub mean_rate: f64,
    /// Upper bound C of the uniform prior on the coefficient of variation s/m.
    pub cv_max: f64,
}

impl Prior {
    /// Centred on the pooled mean with a standard deviation [`PRIOR_MEAN_SPREAD`] times it, and
    /// s/m uniform up to [`PRIOR_CV_SPREAD`] times the pooled coefficient of variation (or 1,
    /// if larger: a group of identical values must not get a zero bound).
    ///
    /// ```
    /// use slipstream_stats::{Prior, Suff};
    /// let a = Suff::of(&[1.0, 2.0, 3.0]);
    /// let p = Prior::pooled(&[a]);
    /// assert!((p.mean_shape / p.mean_rate - 2.0).abs() < 1e-12); // prior mean = pooled mean
    /// ```
    pub fn pooled(groups: &[Suff]) -> Prior {
        let mut all = Suff::default();
        for g in groups {
            all.merge(g);
        }
        let mean = all.mean();
        let shape = 1.0 / (PRIOR_MEAN_SPREAD * PRIOR_MEAN_SPREAD);
        Prior {
            mean_shape: shape,
            mean_rate: shape / mean,
            cv_max: PRIOR_CV_SPREAD * (all.sd() / mean).max(1.0),
        }
    }
}

/// One group's posterior, as a log density on the unconstrained scale.
///
/// ```
/// use slipstream_stats::{GammaModel, MeanSd, Prior, Suff};
/// let d = Suff::of(&[9.0, 10.0, 11.0, 10.5]);
/// let m = GammaModel::new(d, Prior::pooled(&[d]));
/// // Near the data is more probable than far from it.
/// let at = |mean| m.log_posterior(MeanSd { mean, sd: 1.0 });
/// assert!(at(10.0) > at(15.0));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct GammaModel {
    data: Suff,
    prior: Prior,
}

/// The constrained parameters.
///
/// ```
/// use slipstream_stats::{GammaModel, MeanSd, Prior, Suff};
/// let d = Suff::of(&[9.0, 10.0, 11.0]);
/// let m = GammaModel::new(d, Prior::pooled(&[d]));
/// let p = m.constrain([10f64.ln(), 0.0]);
/// assert!((p.mean - 10.0).abs() < 1e-9 && p.sd > 0.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeanSd {
    /// The mean m.
    pub mean: f64,
    /// The standard deviation s.
    pub sd: f64,
}

fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

impl GammaModel {
    /// The model of `data` under `prior`.
    ///
    /// ```
    /// use slipstream_stats::{GammaModel, Prior, Suff};
    /// let d = Suff::of(&[9.0, 10.0, 11.0]);
    /// let m = GammaModel::new(d, Prior::pooled(&[d]));
    /// assert!(m.logp([10f64.ln(), 0.0]).0.is_finite());
    /// ```
    pub fn new(data: Suff, prior: Prior) -> GammaModel {
        GammaModel { data, prior }
    }

    /// θ → (m, s).
    ///
    /// ```
    /// use slipstream_stats::{GammaModel, Prior, Suff};
    /// let d = Suff::of(&[9.0, 10.0, 11.0]);
    /// let prior = Prior::pooled(&[d]);
    /// let p = GammaModel::new(d, prior).constrain([2f64.ln(), 0.0]);
    /// // ln m = ln 2 is m = 2; logit(s / (C·m)) = 0 is s = C·m / 2.
    /// assert_eq!((p.mean, p.sd), (2.0, prior.cv_max));
    /// ```
    pub fn constrain(&self, theta: [f64; 2]) -> MeanSd {
        let mean = theta[0].exp();
        MeanSd {
            mean,
            sd: self.prior.cv_max * sigmoid(theta[1]) * mean,
        }
    }

    /// (m, s) → θ; `s/m` must lie strictly inside (0, C).
    ///
    /// ```
    /// use slipstream_stats::{GammaModel, MeanSd, Prior, Suff};
    /// let d = Suff::of(&[9.0, 10.0, 11.0]);
    /// let m = GammaModel::new(d, Prior::pooled(&[d]));
    /// let theta = m.unconstrain(MeanSd { mean: 10.0, sd: 2.0 });
    /// let back = m.constrain(theta);
    /// assert!((back.mean - 10.0).abs() < 1e-9 && (back.sd - 2.0).abs() < 1e-9);
    /// ```
    pub fn unconstrain(&self, p: MeanSd) -> [f64; 2] {
        let u = p.sd / (p.mean * self.prior.cv_max);
        [p.mean.ln(), (u / (1.0 - u)).ln()]
    }

    /// Log likelihood plus log prior at (m, s), up to a constant, on the constrained scale: what
    /// a grid over (m, s) integrates. The prior's density in s given m is uniform on (0, C·m),
    /// so 1 / (C·m).
    ///
    /// ```
    /// use slipstream_stats::{GammaModel, MeanSd, Prior, Suff};
    /// let d = Suff::of(&[9.0, 10.0, 11.0]);
    /// let m = GammaModel::new(d, Prior::pooled(&[d]));
    /// assert!(m.log_posterior(MeanSd { mean: 10.0, sd: 1.0 }).is_finite());
    /// // Outside the support (a negative sd): minus infinity.
    /// assert_eq!(m.log_posterior(MeanSd { mean: 10.0, sd: -1.0 }), f64::NEG_INFINITY);
    /// ```
    pub fn log_posterior(&self, p: MeanSd) -> f64 {
        if !(p.mean > 0.0 && p.sd > 0.0 && p.sd < self.prior.cv_max * p.mean) {
            return f64::NEG_INFINITY;
        }
        let c = p.sd / p.mean;
        self.log_likelihood(p.mean, c) + self.log_prior_mean(p.mean) - p.mean.ln()
    }

    /// ℓ at mean `m` and coefficient of variation `c`: shape a = 1/c², rate b = a/m.
    fn log_likelihood(&self, m: f64, c: f64) -> f64 {
        let a = 1.0 / (c * c);
        let b = a / m;
        let d = &self.data;
        let n = d.n as f64;
        n * a * b.ln() - n * ln_gamma(a) + (a - 1.0) * d.sum_ln - b * d.sum
    }

    /// The gamma prior on m, up to a constant.
    fn log_prior_mean(&self, m: f64) -> f64 {
        (self.prior.mean_shape - 1.0) * m.ln() - self.prior.mean_rate * m
    }

    /// The log density at θ (with the transform's Jacobian) and its gradient.
    ///
    /// ```
    /// use slipstream_stats::{GammaModel, Prior, Suff};
    /// let d = Suff::of(&[9.0, 10.0, 11.0, 10.5]);
    /// let m = GammaModel::new(d, Prior::pooled(&[d]));
    /// let (lp, grad) = m.logp([10f64.ln(), 0.0]);
    /// assert!(lp.is_finite() && grad.iter().all(|g| g.is_finite()));
    /// ```
    pub fn logp(&self, theta: [f64; 2]) -> (f64, [f64; 2]) {
        let m = theta[0].exp();
        let sig = sigmoid(theta[1]);
        let c = self.prior.cv_max * sig;
        // The density of θ: p(m)·p(c) times the Jacobian m·C·σ(1 − σ) (p(c) and C constant).
        let lp = self.log_likelihood(m, c)
            + self.log_prior_mean(m)
            + theta[0]
            + sig.ln()
            + (1.0 - sig).ln();
        if !lp.is_finite() {
            return (f64::NEG_INFINITY, [0.0, 0.0]);
        }
        let d = &self.data;
        let n = d.n as f64;
        let a = 1.0 / (c * c);
        let b = a / m;
        // ∂ℓ/∂a and ∂ℓ/∂b.
        let dl_da = n * b.ln() - n * digamma(a) + d.sum_ln;
        let dl_db = n * a / b - d.sum;
        // θ₀ = ln m moves b only (∂b/∂θ₀ = −b); the prior and the Jacobian (θ₀) add
        // k − 1 − (k/M)·m + 1.
        let g0 = -b * dl_db + self.prior.mean_shape - self.prior.mean_rate * m;
        // θ₁ = logit(c/C): ∂c/∂θ₁ = c·(1 − σ), and a, b both scale as c⁻², so ∂a/∂c = −2a/c and
        // ∂b/∂c = −2b/c; the Jacobian ln σ + ln(1 − σ) adds 1 − 2σ.
        let g1 = -2.0 * (1.0 - sig) * (a * dl_da + b * dl_db) + (1.0 - 2.0 * sig);
        (lp, [g0, g1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> Vec<Suff> {
        vec![
            Suff::of(&[9.0, 10.0, 11.0, 10.5, 9.5]),
            Suff::of(
                &(1..=200)
                    .map(|i| 5.0 + (i % 17) as f64 * 0.3)
                    .collect::<Vec<_>>(),
            ),
            Suff::of(&[0.001, 0.002, 0.0015]),
            Suff::of(&[1000.0, 5000.0, 200.0, 12000.0]),
        ]
    }

    #[test]
    fn the_gradient_matches_finite_differences() {
        for d in data() {
            let model = GammaModel::new(d, Prior::pooled(&[d]));
            let start = model.unconstrain(MeanSd {
                mean: d.mean(),
                sd: d.sd().max(d.mean() * 0.01),
            });
            for (dx, dy) in [(0.0, 0.0), (0.1, -0.3), (-0.2, 0.5), (0.05, 1.0)] {
                let t = [start[0] + dx, start[1] + dy];
                let (_, g) = model.logp(t);
                for i in 0..2 {
                    let h = 1e-6;
                    let (mut up, mut down) = (t, t);
                    up[i] += h;
                    down[i] -= h;
                    let numeric = (model.logp(up).0 - model.logp(down).0) / (2.0 * h);
                    let scale = numeric.abs().max(1.0);
                    assert!(
                        (g[i] - numeric).abs() / scale < 1e-4,
                        "{d:?} at {t:?}: d/dθ{i} analytic {} numeric {numeric}",
                        g[i]
                    );
                }
            }
        }
    }

    #[test]
    fn outside_the_support_is_minus_infinity() {
        let d = Suff::of(&[1.0, 2.0]);
        let m = GammaModel::new(d, Prior::pooled(&[d]));
        assert_eq!(
            m.log_posterior(MeanSd {
                mean: -1.0,
                sd: 1.0
            }),
            f64::NEG_INFINITY
        );
        assert_eq!(
            m.log_posterior(MeanSd { mean: 1.0, sd: 1e9 }),
            f64::NEG_INFINITY
        );
        let back = m.constrain(m.unconstrain(MeanSd { mean: 1.5, sd: 0.7 }));
        assert!((back.mean - 1.5).abs() < 1e-12 && (back.sd - 0.7).abs() < 1e-12);
    }
}

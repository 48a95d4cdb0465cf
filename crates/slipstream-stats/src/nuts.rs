//! Sampling one group's posterior with NUTS (nuts-rs, the sampler behind PyMC's nutpie): four
//! chains from dispersed starts, tuned then drawn, on the unconstrained scale. Chains that
//! start apart and end together are what R-hat can vouch for; chains from one point would
//! agree even if none had left its start's neighbourhood.

use std::collections::HashMap;
use std::fmt;

use nuts_rs::rand::SeedableRng;
use nuts_rs::rand::rngs::StdRng;
use nuts_rs::{
    Chain, CpuLogpFunc, CpuMath, CpuMathError, DiagGradNutsSettings, HasDims, LogpError, Settings,
};

use crate::{GammaModel, MeanSd};

/// How many chains, and their tuning and kept draws.
///
/// ```
/// use slipstream_stats::SamplerSettings;
/// let s = SamplerSettings::default();
/// assert_eq!((s.chains, s.tune, s.draws), (4, 1000, 1000));
/// let quick = SamplerSettings { draws: 200, tune: 200, ..s };
/// assert_eq!(quick.chains, 4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerSettings {
    /// Independent chains (R-hat needs several).
    pub chains: usize,
    /// Tuning draws per chain (step size and mass matrix), discarded.
    pub tune: u64,
    /// Kept draws per chain.
    pub draws: u64,
    /// Seed of the first chain; chain i uses seed + i.
    pub seed: u64,
}

impl Default for SamplerSettings {
    fn default() -> SamplerSettings {
        SamplerSettings {
            chains: 4,
            tune: 1000,
            draws: 1000,
            seed: 1,
        }
    }
}

/// The draws of (m, s), chain by chain, and how many transitions diverged.
///
/// ```
/// use slipstream_stats::{Draws, MeanSd};
/// let d = |mean| MeanSd { mean, sd: 1.0 };
/// let draws = Draws { chains: vec![vec![d(1.0), d(2.0)], vec![d(3.0), d(4.0)]], divergences: 0 };
/// assert_eq!(draws.chains[1][0].mean, 3.0);
/// ```
#[derive(Debug, Clone)]
pub struct Draws {
    /// `chains[c][i]` is draw i of chain c.
    pub chains: Vec<Vec<MeanSd>>,
    /// Divergent transitions after tuning, over all chains.
    pub divergences: u64,
}

impl Draws {
    /// Every draw of the mean, chains one after another.
    ///
    /// ```
    /// use slipstream_stats::{Draws, MeanSd};
    /// let d = |mean| MeanSd { mean, sd: 1.0 };
    /// let draws = Draws { chains: vec![vec![d(1.0), d(2.0)], vec![d(3.0)]], divergences: 0 };
    /// assert_eq!(draws.means(), [1.0, 2.0, 3.0]);
    /// ```
    pub fn means(&self) -> Vec<f64> {
        self.chains.iter().flatten().map(|d| d.mean).collect()
    }
}

/// Why a log density could not be evaluated: a point outside the support (recoverable: the
/// sampler treats it as a divergence).
#[derive(Debug)]
struct OutsideSupport;

impl fmt::Display for OutsideSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the log density is not finite here")
    }
}

impl std::error::Error for OutsideSupport {}

impl LogpError for OutsideSupport {
    fn is_recoverable(&self) -> bool {
        true
    }
}

#[derive(Debug, Clone, Copy)]
struct Density(GammaModel);

impl HasDims for Density {
    fn dim_sizes(&self) -> HashMap<String, u64> {
        HashMap::from([("unconstrained_parameter".to_string(), 2)])
    }
}

impl CpuLogpFunc for Density {
    type LogpError = OutsideSupport;
    type FlowParameters = ();
    type ExpandedVector = Vec<f64>;

    fn dim(&self) -> usize {
        2
    }

    fn logp(&mut self, position: &[f64], gradient: &mut [f64]) -> Result<f64, OutsideSupport> {
        let (lp, g) = self.0.logp([position[0], position[1]]);
        if !lp.is_finite() || !g.iter().all(|x| x.is_finite()) {
            return Err(OutsideSupport);
        }
        gradient.copy_from_slice(&g);
        Ok(lp)
    }

    fn expand_vector<R: nuts_rs::rand::Rng + ?Sized>(
        &mut self,
        _rng: &mut R,
        position: &[f64],
    ) -> Result<Vec<f64>, CpuMathError> {
        Ok(position.to_vec())
    }
}

/// How far apart the chains start, on the unconstrained scale: chain c starts at
/// `start + DISPERSION[c % 4]`. ±0.3 on ln m is ±35% of the mean (tens of posterior sds for
/// any run worth comparing); ±1.5 on logit(s/(C·m)) moves the sd by a factor of about 4.
/// The first chain starts a thousandth off the sample mean: there the likelihood's slope in
/// ln m is exactly zero (the sample mean is m's maximum-likelihood value whatever the shape),
/// and nuts-rs refuses a zero gradient as a start (it scales its first step by it).
const DISPERSION: [[f64; 2]; 4] = [[1e-3, 0.0], [0.3, 1.5], [-0.3, -1.5], [0.15, -0.75]];

/// Samples `model` with chains starting around `start`, each moved from it by a fixed
/// dispersion (±35% on the mean, a factor of about 4 on the sd) so that chains stuck in
/// different modes disagree. An unrecoverable sampler error is returned as text.
///
/// ```
/// use slipstream_stats::{GammaModel, MeanSd, Prior, SamplerSettings, Suff, sample};
/// let d = Suff::of(&[10.2, 9.8, 10.5, 10.1, 9.9, 10.3]);
/// let model = GammaModel::new(d, Prior::pooled(&[d]));
/// let settings = SamplerSettings { draws: 200, tune: 200, ..Default::default() };
/// let draws = sample(&model, MeanSd { mean: d.mean(), sd: d.sd() }, settings).unwrap();
/// assert_eq!(draws.chains.len(), 4);
/// ```
pub fn sample(
    model: &GammaModel,
    start: MeanSd,
    settings: SamplerSettings,
) -> Result<Draws, String> {
    let mut nuts = DiagGradNutsSettings {
        num_tune: settings.tune,
        num_draws: settings.draws,
        ..Default::default()
    };
    let init = model.unconstrain(start);
    let mut out = Draws {
        chains: Vec::with_capacity(settings.chains),
        divergences: 0,
    };
    for c in 0..settings.chains {
        let mut rng = StdRng::seed_from_u64(settings.seed.wrapping_add(c as u64));
        nuts.seed = settings.seed.wrapping_add(c as u64);
        let math = CpuMath::new(Density(*model));
        let mut chain = nuts.new_chain(c as u64, math, &mut rng);
        let d = DISPERSION[c % DISPERSION.len()];
        chain
            .set_position(&[init[0] + d[0], init[1] + d[1]])
            .map_err(|e| format!("the sampler could not start: {e}"))?;
        let mut draws = Vec::with_capacity(settings.draws as usize);
        for _ in 0..settings.tune + settings.draws {
            let (draw, info) = chain
                .draw()
                .map_err(|e| format!("the sampler failed: {e}"))?;
            if info.tuning {
                continue;
            }
            if info.diverging {
                out.divergences += 1;
            }
            draws.push(model.constrain([draw[0], draw[1]]));
        }
        out.chains.push(draws);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Prior, Suff, grid_posterior, hdi};

    /// Data sets of different sizes, spreads and units: NUTS must agree with the grid on each.
    fn datasets() -> Vec<Suff> {
        let wave = |n: usize, mean: f64, sd: f64| -> Suff {
            Suff::of(
                &(0..n)
                    .map(|i| (mean + sd * 1.41 * ((i as f64) * 0.77).sin()).max(mean * 0.01))
                    .collect::<Vec<_>>(),
            )
        };
        vec![
            wave(8, 10.0, 1.0),
            wave(60, 0.25, 0.1),
            wave(500, 1200.0, 600.0),
            wave(30, 5.0, 4.0),
        ]
    }

    #[test]
    fn nuts_matches_the_grid() {
        for d in datasets() {
            let model = GammaModel::new(d, Prior::pooled(&[d]));
            let grid = grid_posterior(&model, &d, 400);
            let draws = sample(
                &model,
                MeanSd {
                    mean: d.mean(),
                    sd: d.sd(),
                },
                SamplerSettings::default(),
            )
            .unwrap();
            let means = draws.means();
            let mean = means.iter().sum::<f64>() / means.len() as f64;
            let sd =
                (means.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / means.len() as f64).sqrt();
            // Monte Carlo error of the mean with 4000 draws at an effective size of at least
            // 1000: sd / 30; allow four of those.
            assert!(
                (mean - grid.mean).abs() < 4.0 * sd / 30.0,
                "{d:?}: NUTS mean {mean}, grid {}, posterior sd {sd}",
                grid.mean
            );
            let (lo, hi) = hdi(&means, 0.95).unwrap();
            let width = grid.hdi.1 - grid.hdi.0;
            assert!(
                (lo - grid.hdi.0).abs() < 0.1 * width && (hi - grid.hdi.1).abs() < 0.1 * width,
                "{d:?}: NUTS HDI ({lo}, {hi}), grid {:?}",
                grid.hdi
            );
            assert!(draws.divergences < 20, "{} divergences", draws.divergences);
        }
    }
}

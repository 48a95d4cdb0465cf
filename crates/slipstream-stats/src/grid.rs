//! The posterior of one group computed on a grid over (m, s): slow, but exact up to the grid,
//! so it is the oracle a sampler is checked against.

use crate::{GammaModel, MeanSd, Suff};

/// What the grid says about the mean m.
///
/// ```
/// use slipstream_stats::{GammaModel, Prior, Suff, grid_posterior};
/// let d = Suff::of(&[10.2, 9.8, 10.5, 10.1, 9.9, 10.3]);
/// let post = grid_posterior(&GammaModel::new(d, Prior::pooled(&[d])), &d, 100);
/// assert!(post.hdi.0 < post.mean && post.mean < post.hdi.1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GridPosterior {
    /// The posterior mean of m.
    pub mean: f64,
    /// The 95% highest-density interval of m's marginal.
    pub hdi: (f64, f64),
}

/// How many standard errors either side of the sample mean (and of the sample sd) the grid
/// spans at first.
const SPAN: f64 = 12.0;
/// A grid edge whose best cell is within this many log units of the peak still holds mass:
/// the grid is widened on that side.
const EDGE: f64 = 20.0;
/// Widenings before giving up (each doubles a side).
const WIDENINGS: usize = 8;

/// Integrates the posterior of `model` (fitted to `data`) on a `points` x `points` grid,
/// widening it until every edge is negligible (skewed posteriors of small samples reach far).
///
/// ```
/// use slipstream_stats::{GammaModel, Prior, Suff, grid_posterior};
/// let d = Suff::of(&[20.0, 22.0, 19.0, 21.0, 23.0, 20.5]);
/// let post = grid_posterior(&GammaModel::new(d, Prior::pooled(&[d])), &d, 200);
/// assert!((post.mean - d.mean()).abs() < 0.2);
/// assert!(post.hdi.0 > 18.0 && post.hdi.1 < 24.0);
/// ```
pub fn grid_posterior(model: &GammaModel, data: &Suff, points: usize) -> GridPosterior {
    let points = points.max(10);
    let (mean, sd) = (data.mean(), data.sd().max(data.mean() * 1e-3));
    let n = data.n.max(1) as f64;
    let se = sd / n.sqrt();
    let rel = SPAN / (2.0 * n).sqrt();
    let floor_m = mean * 1e-4;
    let (mut m_lo, mut m_hi) = ((mean - SPAN * se).max(floor_m), mean + SPAN * se);
    let (mut s_lo, mut s_hi) = (sd * (1.0 - rel).max(1e-3), sd * (1.0 + rel));
    let step = |lo: f64, hi: f64, i: usize| lo + (hi - lo) * (i as f64 + 0.5) / points as f64;
    let mut logs = vec![0.0; points * points];
    let mut top = f64::NEG_INFINITY;
    for _ in 0..=WIDENINGS {
        top = f64::NEG_INFINITY;
        for i in 0..points {
            for j in 0..points {
                let p = MeanSd {
                    mean: step(m_lo, m_hi, i),
                    sd: step(s_lo, s_hi, j),
                };
                let l = model.log_posterior(p);
                logs[i * points + j] = l;
                top = top.max(l);
            }
        }
        let edge = |cells: &mut dyn Iterator<Item = usize>| {
            cells.map(|k| logs[k]).fold(f64::NEG_INFINITY, f64::max) > top - EDGE
        };
        let last = points - 1;
        let (m_low, m_high) = (
            edge(&mut (0..points)),
            edge(&mut (0..points).map(|j| last * points + j)),
        );
        let (s_low, s_high) = (
            edge(&mut (0..points).map(|i| i * points)),
            edge(&mut (0..points).map(|i| i * points + last)),
        );
        if !(m_low && m_lo > floor_m || m_high || s_low && s_lo > sd * 1e-3 || s_high) {
            break;
        }
        let (mw, sw) = (m_hi - m_lo, s_hi - s_lo);
        if m_low {
            m_lo = (m_lo - mw).max(floor_m);
        }
        if m_high {
            m_hi += mw;
        }
        if s_low {
            s_lo = (s_lo - sw).max(sd * 1e-3);
        }
        if s_high {
            s_hi += sw;
        }
    }
    // The marginal of m: sum over s (equal cell sizes, so no weights).
    let marginal: Vec<f64> = (0..points)
        .map(|i| {
            (0..points)
                .map(|j| (logs[i * points + j] - top).exp())
                .sum()
        })
        .collect();
    let total: f64 = marginal.iter().sum();
    let post_mean = (0..points)
        .map(|i| step(m_lo, m_hi, i) * marginal[i])
        .sum::<f64>()
        / total;
    // HDI: the highest cells until 95% of the mass, then their extent.
    let mut order: Vec<usize> = (0..points).collect();
    order.sort_by(|&a, &b| marginal[b].total_cmp(&marginal[a]));
    let (mut acc, mut lo, mut hi) = (0.0, f64::MAX, f64::MIN);
    for i in order {
        if acc >= 0.95 * total {
            break;
        }
        acc += marginal[i];
        let m = step(m_lo, m_hi, i);
        lo = lo.min(m);
        hi = hi.max(m);
    }
    GridPosterior {
        mean: post_mean,
        hdi: (lo, hi),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Prior;

    #[test]
    fn with_much_data_the_posterior_sits_on_the_sample_mean() {
        // 2000 values with mean 10 and sd about 2.
        let values: Vec<f64> = (0..2000)
            .map(|i| 10.0 + 2.0 * ((i as f64) * 0.7).sin() * 1.41)
            .collect();
        let d = Suff::of(&values);
        let model = GammaModel::new(d, Prior::pooled(&[d]));
        let g = grid_posterior(&model, &d, 300);
        let se = d.sd() / (d.n as f64).sqrt();
        assert!(
            (g.mean - d.mean()).abs() < 0.1 * se,
            "{g:?} vs {}",
            d.mean()
        );
        // The 95% HDI is about ±1.96 standard errors.
        let half = (g.hdi.1 - g.hdi.0) / 2.0;
        assert!(
            (half / se - 1.96).abs() < 0.15,
            "half width {half}, se {se}"
        );
    }
}

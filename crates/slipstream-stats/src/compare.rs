//! Comparing two groups: posterior of each mean, of the difference B − A and the ratio B/A,
//! P(B slower), the mass inside a region of practical equivalence (ROPE), and a verdict by
//! Kruschke's HDI + ROPE rule — withheld when the sampler's diagnostics fail.

use std::fmt;

use crate::{Diagnostics, GammaModel, MeanSd, Prior, SamplerSettings, Suff, hdi, sample};

/// The fewest values a group needs.
pub const MIN_VALUES: u64 = 3;
/// The HDI's mass.
pub const HDI_MASS: f64 = 0.95;
/// Longer samplings tried when the diagnostics fail.
const RETRIES: usize = 1;
/// More divergent transitions than this share of the draws makes the result unreliable.
const MAX_DIVERGENT_SHARE: f64 = 0.01;

/// The likelihood of each group's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Model {
    /// The article's gamma model, sampled with NUTS.
    #[default]
    Gamma,
    /// Lognormal with the Jeffreys prior, drawn in closed form.
    Lognormal,
}

/// How to compare.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompareSettings {
    /// Half-width of the ROPE as a share of the pooled mean (0.01 = ±1%).
    pub rope: f64,
    /// The sampler's chains and draws (for the lognormal model: how many draws, in as many
    /// groups as chains for the diagnostics).
    pub sampler: SamplerSettings,
    /// The likelihood.
    pub model: Model,
}

impl Default for CompareSettings {
    fn default() -> CompareSettings {
        CompareSettings {
            rope: 0.01,
            sampler: SamplerSettings::default(),
            model: Model::Gamma,
        }
    }
}

/// A posterior mean and its 95% HDI.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Posterior mean.
    pub mean: f64,
    /// 95% highest-density interval.
    pub hdi: (f64, f64),
}

impl Estimate {
    fn of(draws: &[f64]) -> Estimate {
        Estimate {
            mean: draws.iter().sum::<f64>() / draws.len() as f64,
            hdi: hdi(draws, HDI_MASS).unwrap_or((f64::NAN, f64::NAN)),
        }
    }
}

/// What the comparison concludes about B against A (larger values are slower).
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The HDI of B − A lies wholly above the ROPE.
    CrediblySlower,
    /// The HDI of B − A lies wholly below the ROPE.
    CrediblyFaster,
    /// The HDI of B − A lies wholly inside the ROPE.
    PracticallyEquivalent,
    /// The HDI overlaps the ROPE's edge: more data needed.
    Undecided,
    /// The sampler's diagnostics failed; no verdict.
    Unreliable(String),
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::CrediblySlower => f.write_str("credibly slower"),
            Verdict::CrediblyFaster => f.write_str("credibly faster"),
            Verdict::PracticallyEquivalent => f.write_str("practically equivalent"),
            Verdict::Undecided => f.write_str("undecided"),
            Verdict::Unreliable(why) => write!(f, "no verdict: {why}"),
        }
    }
}

impl Verdict {
    /// True for the two "credibly different" verdicts.
    pub fn is_different(&self) -> bool {
        matches!(self, Verdict::CrediblySlower | Verdict::CrediblyFaster)
    }
}

/// Everything a comparison found.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// Group A's mean.
    pub a: Estimate,
    /// Group B's mean.
    pub b: Estimate,
    /// B − A.
    pub diff: Estimate,
    /// B / A.
    pub ratio: Estimate,
    /// P(mean B > mean A).
    pub p_b_slower: f64,
    /// The ROPE for B − A.
    pub rope: (f64, f64),
    /// Posterior mass of B − A inside the ROPE.
    pub in_rope: f64,
    /// The conclusion.
    pub verdict: Verdict,
    /// A's and B's sampler diagnostics.
    pub diagnostics: [Diagnostics; 2],
    /// Divergent transitions over both groups.
    pub divergences: u64,
    /// The draws of A's and B's means (for figures).
    pub draws: [Vec<f64>; 2],
}

/// Why two groups could not be compared.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareError(String);

impl fmt::Display for CompareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CompareError {}

fn check(name: &str, g: &Suff) -> Result<(), CompareError> {
    if g.n < MIN_VALUES {
        return Err(CompareError(format!(
            "group {name} has {} value(s); at least {MIN_VALUES} are needed (run longer, or use another unit)",
            g.n
        )));
    }
    if !(g.sum > 0.0 && g.sum.is_finite() && g.sum_ln.is_finite() && g.sum_sq.is_finite()) {
        return Err(CompareError(format!(
            "group {name}'s statistics are not finite positive numbers (n {}, sum {}, sum of logs {})",
            g.n, g.sum, g.sum_ln
        )));
    }
    Ok(())
}

/// Compares B against A under the gamma model.
///
/// ```
/// use slipstream_stats::{CompareSettings, Suff, Verdict, compare};
/// let a = Suff::of(&(0..60).map(|i| 10.0 + (i % 5) as f64 * 0.1).collect::<Vec<_>>());
/// let b = Suff::of(&(0..60).map(|i| 12.0 + (i % 5) as f64 * 0.1).collect::<Vec<_>>());
/// let c = compare(&a, &b, &CompareSettings::default()).unwrap();
/// assert_eq!(c.verdict, Verdict::CrediblySlower);
/// assert!(c.p_b_slower > 0.99);
/// ```
pub fn compare(a: &Suff, b: &Suff, settings: &CompareSettings) -> Result<Comparison, CompareError> {
    check("A", a)?;
    check("B", b)?;
    if settings.sampler.chains < 2 || settings.sampler.draws < 10 {
        return Err(CompareError(format!(
            "the sampler needs at least 2 chains of 10 draws (got {} of {}) for its diagnostics",
            settings.sampler.chains, settings.sampler.draws
        )));
    }
    let prior = Prior::pooled(&[*a, *b]);
    let mut pooled = *a;
    pooled.merge(b);
    let mut draws = Vec::with_capacity(2);
    let mut diagnostics = Vec::with_capacity(2);
    let mut divergences = 0;
    for (k, g) in [a, b].into_iter().enumerate() {
        if settings.model == Model::Lognormal {
            let s = settings.sampler;
            let per = s.draws as usize;
            let d = crate::lognormal_means(g, s.chains * per, s.seed.wrapping_add(1000 * k as u64))
                .map_err(|e| CompareError(format!("group {}: {e}", ["A", "B"][k])))?;
            let chains: Vec<Vec<f64>> = d.chunks(per.max(1)).map(<[f64]>::to_vec).collect();
            diagnostics.push(Diagnostics::of(&chains));
            draws.push(d);
            continue;
        }
        let model = GammaModel::new(*g, prior);
        let start = MeanSd {
            mean: g.mean(),
            sd: g.sd().max(g.mean() * 1e-3).min(prior.sd_max * 0.5),
        };
        let mut s = settings.sampler;
        s.seed = s.seed.wrapping_add(1000 * k as u64);
        // A few values leave the sd loosely pinned and its tail slow to explore: when the
        // diagnostics fail, sample once more, four times as long, before giving up.
        let mut attempt = 0;
        let (d, diag) = loop {
            let d = sample(&model, start, s).map_err(CompareError)?;
            let chains: Vec<Vec<f64>> = d
                .chains
                .iter()
                .map(|c| c.iter().map(|x| x.mean).collect())
                .collect();
            let diag = Diagnostics::of(&chains);
            attempt += 1;
            if attempt == RETRIES + 1 || diag.problem(s.chains).is_none() {
                break (d, diag);
            }
            s.tune *= 4;
            s.draws *= 4;
            s.seed = s.seed.wrapping_add(1);
        };
        divergences += d.divergences;
        diagnostics.push(diag);
        draws.push(d.means());
    }
    // After a retry one side has more draws: thin it evenly so every chain still counts.
    let paired = draws[0].len().min(draws[1].len());
    let thin = |v: &[f64]| -> Vec<f64> { (0..paired).map(|i| v[i * v.len() / paired]).collect() };
    let (da, db) = (&thin(&draws[0]), &thin(&draws[1]));
    let diff: Vec<f64> = db.iter().zip(da).map(|(b, a)| b - a).collect();
    let ratio: Vec<f64> = db.iter().zip(da).map(|(b, a)| b / a).collect();
    let half = settings.rope * pooled.mean();
    let rope = (-half, half);
    let in_rope = diff
        .iter()
        .filter(|d| **d >= rope.0 && **d <= rope.1)
        .count() as f64
        / diff.len() as f64;
    let p_b_slower = diff.iter().filter(|d| **d > 0.0).count() as f64 / diff.len() as f64;
    let diff_est = Estimate::of(&diff);
    let total_draws = (da.len() + db.len()) as f64;
    let chains = settings.sampler.chains;
    let problem = diagnostics
        .iter()
        .zip(["A", "B"])
        .find_map(|(d, g)| d.problem(chains).map(|p| format!("group {g}: {p}")))
        .or_else(|| {
            (divergences as f64 > MAX_DIVERGENT_SHARE * total_draws)
                .then(|| format!("{divergences} divergent transitions"))
        });
    let (lo, hi) = diff_est.hdi;
    let verdict = match problem {
        Some(p) => Verdict::Unreliable(p),
        None if lo > rope.1 => Verdict::CrediblySlower,
        None if hi < rope.0 => Verdict::CrediblyFaster,
        None if lo >= rope.0 && hi <= rope.1 => Verdict::PracticallyEquivalent,
        None => Verdict::Undecided,
    };
    Ok(Comparison {
        a: Estimate::of(da),
        b: Estimate::of(db),
        diff: diff_est,
        ratio: Estimate::of(&ratio),
        p_b_slower,
        rope,
        in_rope,
        verdict,
        diagnostics: [diagnostics[0], diagnostics[1]],
        divergences,
        draws: [da.clone(), db.clone()],
    })
}

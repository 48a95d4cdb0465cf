//! Bayesian comparison of benchmark runs: is run B really different from run A?
//!
//! This crate knows numbers, not databases. Its unit of data is [`Suff`], the sufficient
//! statistics of a set of positive values (latencies, or per-interval means). What is here:
//!
//! - the article's gamma model per group, as a log density with its gradient on an
//!   unconstrained scale ([`GammaModel`]), for a gradient-based sampler;
//! - the same posterior computed on a grid ([`grid_posterior`]), the correctness oracle for the
//!   sampler;
//! - NUTS sampling of it with nuts-rs ([`sample`]), checked against the grid;
//! - highest-density intervals ([`hdi`]);
//! - the unit of analysis: runs as the unit with between-run variance ([`compare_run_values`]),
//!   or one run's per-second series cut into batch means by its autocorrelation
//!   ([`batch_means`]).
//!
//! ```
//! use slipstream_stats::{GammaModel, Prior, Suff, grid_posterior};
//! let a = Suff::of(&[10.2, 9.8, 10.5, 10.1, 9.9, 10.3]);
//! let model = GammaModel::new(a, Prior::pooled(&[a]));
//! let post = grid_posterior(&model, &a, 200);
//! assert!((post.mean - a.mean()).abs() < 0.1);
//! assert!(post.hdi.0 < a.mean() && a.mean() < post.hdi.1);
//! ```
#![warn(missing_docs, rust_2018_idioms)]

mod compare;
mod diagnostics;
mod gamma;
mod grid;
mod hdi;
mod lognormal;
mod nuts;
mod runs;
mod series;
mod suff;

pub use compare::{
    CompareError, CompareSettings, Comparison, DEFAULT_ROPE, Estimate, HDI_MASS, MIN_VALUES, Model,
    Verdict, compare,
};
pub use diagnostics::{Diagnostics, ESS_MIN_PER_CHAIN, RHAT_MAX};
pub use gamma::{GammaModel, MeanSd, PRIOR_CV_SPREAD, PRIOR_MEAN_SPREAD, Prior};
pub use grid::{GridPosterior, grid_posterior};
pub use hdi::hdi;
pub use lognormal::lognormal_means;
pub use nuts::{Draws, SamplerSettings, sample};
pub use runs::{MIN_RUNS, PPC_ALPHA, RunValue, compare_run_values, compare_runs, run_rate_means};
pub use series::{BatchMeans, MIN_BATCHES, batch_means, batch_ratio_means, effective_size};
pub use suff::Suff;

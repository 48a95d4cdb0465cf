//! `slipstream compare`: two bench results, transaction type by transaction type, through
//! slipstream-stats. This module turns result files into the statistics crate's numbers (the
//! unit of analysis) and its answers into rows and figures.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use slipstream_stats::{CompareSettings, Comparison, Suff};

use super::BenchRun;
use crate::chart::{Mark, posterior_chart_svg};

/// What one value of the comparison is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unit {
    /// The mean latency of each one-second interval (default): neighbouring transactions are
    /// correlated, intervals much less.
    #[default]
    Interval,
    /// Every transaction, as the article does: overconfident when latencies are autocorrelated.
    Transaction,
}

impl FromStr for Unit {
    type Err = String;

    fn from_str(s: &str) -> Result<Unit, String> {
        match s {
            "interval" => Ok(Unit::Interval),
            "transaction" => Ok(Unit::Transaction),
            _ => Err(format!("unit `{s}`: use interval or transaction")),
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unit::Interval => "interval",
            Unit::Transaction => "transaction",
        })
    }
}

/// The values of one transaction type in one run, in `unit`.
pub fn values(run: &BenchRun, name: &str, unit: Unit) -> Option<Suff> {
    let tx = run.transactions.iter().find(|t| t.name == name)?;
    Some(match unit {
        Unit::Transaction => tx.stats.values,
        Unit::Interval => {
            let mut s = Suff::default();
            for iv in run
                .intervals
                .per_transaction
                .get(name)?
                .iter()
                .filter(|i| i.values.n > 0)
            {
                s.add(iv.values.mean());
            }
            s
        }
    })
}

/// One transaction type's outcome.
#[derive(Debug)]
pub enum Outcome {
    /// Compared.
    Compared(Box<Comparison>),
    /// Not compared, and why.
    Skipped(String),
}

/// Compares every transaction type that ran in either file (or just `only`).
///
/// ```no_run
/// use slipstream_lab::bench::{BenchRun, compare};
/// let a = BenchRun::read_json("a.json".as_ref())?;
/// let b = BenchRun::read_json("b.json".as_ref())?;
/// for (name, outcome) in compare::compare_runs(&a, &b, None, compare::Unit::Interval, &Default::default())? {
///     println!("{name}: {outcome:?}");
/// }
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn compare_runs(
    a: &BenchRun,
    b: &BenchRun,
    only: Option<&str>,
    unit: Unit,
    settings: &CompareSettings,
) -> anyhow::Result<Vec<(String, Outcome)>> {
    let ran = |r: &BenchRun| -> Vec<String> {
        r.transactions
            .iter()
            .filter(|t| t.ok > 0)
            .map(|t| t.name.clone())
            .collect()
    };
    let mut names = ran(a);
    for n in ran(b) {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    if let Some(only) = only {
        anyhow::ensure!(
            names.iter().any(|n| n == only),
            "no transaction `{only}` ran in either file; they have: {}",
            names.join(", ")
        );
        names.retain(|n| n == only);
    }
    let mut out = Vec::new();
    for name in names {
        let (va, vb) = (values(a, &name, unit), values(b, &name, unit));
        let outcome = match (va.filter(|v| v.n > 0), vb.filter(|v| v.n > 0)) {
            (None, _) => Outcome::Skipped("only in B".into()),
            (_, None) => Outcome::Skipped("only in A".into()),
            (Some(va), Some(vb)) => match slipstream_stats::compare(&va, &vb, settings) {
                Ok(c) => Outcome::Compared(Box::new(c)),
                Err(e) => Outcome::Skipped(match unit {
                    Unit::Interval => format!("{e}; intervals are seconds with a success"),
                    Unit::Transaction => e.to_string(),
                }),
            },
        };
        out.push((name, outcome));
    }
    Ok(out)
}

/// Writes, for a compared transaction type, `NAME-means.svg` (the posterior of both means) and
/// `NAME-difference.svg` (B − A with its HDI and the ROPE) into `dir`.
pub fn plot(dir: &Path, name: &str, c: &Comparison) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("could not create {}: {e}", dir.display()))?;
    let means = posterior_chart_svg(
        &format!("{name}: posterior of the mean latency"),
        "mean latency (ms)",
        &[("A", &c.draws[0]), ("B", &c.draws[1])],
        &[],
    )?;
    let diff: Vec<f64> = c.draws[1]
        .iter()
        .zip(&c.draws[0])
        .map(|(b, a)| b - a)
        .collect();
    let difference = posterior_chart_svg(
        &format!("{name}: B - A ({})", c.verdict),
        "difference of means (ms)",
        &[("B - A", &diff)],
        &[
            Mark::new("95% HDI", c.diff.hdi.0),
            Mark::new("", c.diff.hdi.1),
            Mark::new("ROPE", c.rope.0),
            Mark::new("", c.rope.1),
        ],
    )?;
    for (suffix, svg) in [("means", means), ("difference", difference)] {
        let path = dir.join(format!("{name}-{suffix}.svg"));
        std::fs::write(&path, svg)
            .map_err(|e| anyhow::anyhow!("could not write {}: {e}", path.display()))?;
    }
    Ok(())
}

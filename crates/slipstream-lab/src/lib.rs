//! The slipstream lab: experiments that measure slipstream against its peers and write what
//! they measured as versioned JSON, SVG charts and an HTML report.
//!
//! ```no_run
//! let ctx = slipstream_lab::Context { url: "postgres://postgres@127.0.0.1:5432/postgres".into(), quick: true };
//! let result = slipstream_lab::run("roundtrip", &ctx)?;
//! println!("{}", result.table.render());
//! # Ok::<(), anyhow::Error>(())
//! ```
#![warn(missing_docs, rust_2018_idioms)]

mod experiment_result;
mod experiments;
mod html_report;
mod placement;
#[doc(hidden)]
pub mod pool_peers;
mod summary;

pub use experiment_result::{ExperimentResult, SCHEMA, SCHEMA_VERSION};
pub use html_report::write_report;
/// The result parts the lab shares with the workload runner: an [`ExperimentResult`] is made of
/// them.
pub use slipstream_bench::{
    Environment, Series, Table, check_writable, line_chart, write_atomically,
};
pub use summary::{Summary, noise_warning, paired_ratios};

/// Where and how to run an experiment.
#[derive(Debug, Clone)]
/// ```
/// let ctx = slipstream_lab::Context { url: "postgres://postgres@127.0.0.1/postgres".into(), quick: true };
/// assert!(ctx.quick);
/// ```
pub struct Context {
    /// The database to run against (URL or key=value).
    pub url: String,
    /// The reduced form: fewer rounds, for smoke tests and the demo.
    pub quick: bool,
}

/// One experiment the lab can run.
#[derive(Debug, Clone, Copy)]
/// ```
/// for e in slipstream_lab::EXPERIMENTS {
///     println!("{:16} {} ({})", e.name, e.title, e.source);
/// }
/// ```
pub struct Experiment {
    /// Its name on the command line.
    pub name: &'static str,
    /// One line on what it measures.
    pub title: &'static str,
    /// Which founding article it reproduces.
    pub source: &'static str,
    run: fn(&Context) -> anyhow::Result<ExperimentResult>,
}

/// Every experiment, in the order the demo runs them.
pub const EXPERIMENTS: &[Experiment] = &[
    Experiment {
        name: "connect",
        title: experiments::connect::TITLE,
        source: "article 001, ConnectionPoolTest: fresh vs tokio-postgres, pooled by slipstream-pool",
        run: experiments::connect::run,
    },
    Experiment {
        name: "roundtrip",
        title: experiments::roundtrip::TITLE,
        source: "DESIGN.md's physical limit; slipstream-pg vs tokio-postgres vs pgbench",
        run: experiments::roundtrip::run,
    },
    Experiment {
        name: "pipeline",
        title: experiments::pipeline::TITLE,
        source: "article 000, OCI pipelining: read-only, DML and OLTP-mix workloads",
        run: experiments::pipeline::run,
    },
    Experiment {
        name: "fetch-size",
        title: experiments::fetch_size::TITLE,
        source: "article 001, FetchTest; slipstream-pg vs tokio-postgres query_portal",
        run: experiments::fetch_size::run,
    },
    Experiment {
        name: "fetch-memory",
        title: experiments::fetch_memory::TITLE,
        source: "article 004's JDBC lesson (memory = rows x row size); byte mode with a cap",
        run: experiments::fetch_memory::run,
    },
    Experiment {
        name: "statement-cache",
        title: experiments::statement_cache::TITLE,
        source: "article 001, StatementCacheTest; vs tokio-postgres prepared, query_typed, query",
        run: experiments::statement_cache::run,
    },
    Experiment {
        name: "pool-scaling",
        title: experiments::pool_scaling::TITLE,
        source: "article 002, UCP's wait-free pool; vs deadpool, bb8, r2d2, Mutex+Condvar",
        run: experiments::pool_scaling::run,
    },
    Experiment {
        name: "failover",
        title: experiments::failover::TITLE,
        source: "article 002's fast failover; vs deadpool and bb8 over tokio-postgres read-write",
        run: experiments::failover::run,
    },
    Experiment {
        name: "rebalance",
        title: experiments::rebalance::TITLE,
        source: "article 002's load balancing; vs deadpool and bb8 over tokio-postgres load_balance_hosts",
        run: experiments::rebalance::run,
    },
    Experiment {
        name: "order-entry",
        title: experiments::order_entry_demo::TITLE,
        source: "article 004's Swingbench Order Entry, run by slipstream bench",
        run: experiments::order_entry_demo::run,
    },
    Experiment {
        name: "runner",
        title: experiments::runner_cost::TITLE,
        source: "issue 6's targets: runner overhead, SELECT 1 vs pgbench at 8 users",
        run: experiments::runner_cost::run,
    },
    Experiment {
        name: "ab",
        title: experiments::ab::TITLE,
        source: "article 004's TDE on/off comparison, with synchronous_commit and an A/A control",
        run: experiments::ab::run,
    },
    Experiment {
        name: "pk-lookup",
        title: experiments::pk_lookup::TITLE,
        source: "article 003, MemOptimized RowStore; heap vs covering index vs hash index vs memopt",
        run: experiments::pk_lookup::run,
    },
    Experiment {
        name: "proxy",
        title: experiments::proxy::TITLE,
        source: "testkit calibration for the latency-injecting experiments (article 000)",
        run: experiments::proxy::run,
    },
];

/// Looks an experiment up by name.
/// ```
/// let e = slipstream_lab::find("pipeline")?;
/// assert!(e.source.contains("article 000"));
/// let unknown = slipstream_lab::find("pipelines").unwrap_err().to_string();
/// assert!(unknown.contains("available: connect, roundtrip"), "{unknown}");
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn find(name: &str) -> anyhow::Result<&'static Experiment> {
    EXPERIMENTS.iter().find(|e| e.name == name).ok_or_else(|| {
        let names: Vec<_> = EXPERIMENTS.iter().map(|e| e.name).collect();
        anyhow::anyhow!(
            "no experiment named `{name}`; available: {}",
            names.join(", ")
        )
    })
}

/// Runs an experiment by name and returns its result (nothing is written).
/// ```no_run
/// let ctx = slipstream_lab::Context { url: "postgres://postgres@127.0.0.1/postgres".into(), quick: true };
/// let result = slipstream_lab::run("statement-cache", &ctx)?;
/// for (name, ratio) in &result.ratios {
///     println!("{name}: {ratio:.2}");
/// }
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn run(name: &str, ctx: &Context) -> anyhow::Result<ExperimentResult> {
    let experiment = find(name)?;
    let start = std::time::Instant::now();
    let mut result =
        (experiment.run)(ctx).map_err(|e| e.context(format!("experiment `{name}` failed")))?;
    result.duration_s = start.elapsed().as_secs_f64();
    // Every result says what it ran on: the experiments that read the server's version capture
    // the environment themselves; for the others the machine is recorded here, or their files
    // (runner, failover, ab, ...) named no OS, CPU or version at all.
    if result.environment.os.is_empty() {
        result.environment = slipstream_bench::capture_environment(&ctx.url, None);
    }
    Ok(result)
}

/// Writes `<dir>/<name>.json` and `<dir>/<name>.svg` for a result.
/// ```
/// let dir = tempfile::tempdir()?;
/// let mut result = slipstream_lab::ExperimentResult::new("demo", "A demo", true);
/// result.series.push(slipstream_lab::Series {
///     name: "ours".into(),
///     x_label: "round".into(),
///     y_label: "ops/s".into(),
///     points: vec![(1.0, 10.0), (2.0, 12.0)],
/// });
/// slipstream_lab::write_outputs(&result, dir.path())?;
/// assert!(dir.path().join("demo.json").exists() && dir.path().join("demo.svg").exists());
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn write_outputs(result: &ExperimentResult, dir: &std::path::Path) -> anyhow::Result<()> {
    result.write_json(&dir.join(format!("{}.json", result.experiment)))?;
    if !result.series.is_empty() {
        line_chart(
            &result.title,
            &result.series,
            &dir.join(format!("{}.svg", result.experiment)),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn unknown_experiments_list_the_known_ones() {
        let e = super::find("nope").unwrap_err().to_string();
        assert!(e.contains("connect") && e.contains("roundtrip"), "{e}");
    }
}

//! Command-line definitions.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// slipstream: a PostgreSQL access stack that takes the waiting out of database work, and a lab
/// that measures it.
///
/// Commands that need a database use --url, else DATABASE_URL, else the PG* environment
/// variables, else the embedded cluster (started on demand).
#[derive(Debug, Parser)]
#[command(name = "slipstream", version, about, long_about)]
pub struct Cli {
    /// Database to use (postgres://... URL or libpq key=value string).
    #[arg(long, global = true, value_name = "URL")]
    pub url: Option<String>,

    /// State directory for the embedded cluster [default: $SLIPSTREAM_HOME if set and not
    /// empty, else the user's data directory + /slipstream].
    // Not clap's `env`: it takes an empty SLIPSTREAM_HOME for a missing `--home` value.
    #[arg(long, global = true, value_name = "DIR")]
    pub home: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage the embedded PostgreSQL cluster.
    #[command(subcommand)]
    Db(DbCommand),
    /// Run SQL and print the result as a table.
    ///
    /// Ctrl-C (or SIGTERM) cancels the statement on the server, rolling back its transaction,
    /// and exits with status 130; a second one exits at once without waiting for the cancel.
    Sql {
        /// One or more ;-separated statements.
        // SQL may start with `-` (a `-- comment` line): it is the query, not a flag.
        #[arg(allow_hyphen_values = true)]
        query: String,
    },
    /// List or run the lab's experiments.
    #[command(subcommand)]
    Lab(LabCommand),
    /// Run a workload (order-entry, or a workload file) and write its result as JSON.
    Bench(BenchArgs),
    /// Summarise bench results, several side by side; --html adds charts; --merge adds the
    /// runs of several load generators into one result.
    Report {
        /// Result files written by `slipstream bench`.
        #[arg(required = true, value_name = "RUN.json")]
        files: Vec<PathBuf>,
        /// Also write an HTML report: summary, context, charts over time and percentiles.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// Merge the files (one run per load generator, same workload) into one result:
        /// counts and histograms add, intervals align by wall-clock start.
        #[arg(long, requires = "out")]
        merge: bool,
        /// With --merge: write the merged result here.
        #[arg(short = 'o', long, value_name = "FILE", requires = "merge")]
        out: Option<PathBuf>,
    },
    /// Is run B really different from run A? A Bayesian comparison per transaction type.
    Compare(CompareArgs),
    /// Run every experiment in quick mode and write an HTML report.
    Demo {
        /// Directory for the report, JSON results and charts.
        #[arg(long, default_value = "report", value_name = "DIR")]
        out: PathBuf,
        /// Full runs instead of quick ones (slower, less noisy).
        #[arg(long)]
        full: bool,
    },
}

/// `slipstream bench`'s options (Swingbench charbench's, in pgbench's spelling where they
/// overlap).
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// `order-entry`, or a workload file (.toml).
    pub workload: String,
    /// Create and load the workload's schema instead of running it.
    #[arg(long)]
    pub setup: bool,
    /// Order Entry scale for --setup: 1 is about a million customers [default: 0.1].
    #[arg(long, value_name = "S", allow_hyphen_values = true)]
    pub scale: Option<f64>,
    /// Concurrent users, each with its own connection [default: 8]. With closed-loop stages
    /// the stages set the count; with rate stages, the users serving the arrivals.
    #[arg(long, short = 'u', value_name = "N", allow_hyphen_values = true)]
    pub users: Option<usize>,
    /// The measured window (e.g. 30s, 5m) [default: 30s; with --stage, their sum].
    // A value starting with `-` is a value here, as for every value of bench's flags: refused
    // by the parser with what to give, where clap would say to pass `-1s` after `--`, which
    // makes it the workload.
    #[arg(long, short = 'd', value_parser = duration, value_name = "D", allow_hyphen_values = true)]
    pub duration: Option<std::time::Duration>,
    /// Run this long first without recording [default: 5s, 0 with --ramp-up].
    #[arg(long, short = 'w', value_parser = duration, value_name = "W", allow_hyphen_values = true)]
    pub warmup: Option<std::time::Duration>,
    /// Start the users (or raise the rate) evenly from none to the first stage's over this
    /// period, recorded as a stage of its own (`ramp-up`). Replaces the warm-up.
    #[arg(long, value_parser = duration, value_name = "D", allow_hyphen_values = true)]
    pub ramp_up: Option<std::time::Duration>,
    /// A stage: DURATION:USERS (closed loop) or DURATION:rate=R (open loop), e.g. --stage
    /// 30s:8 --stage 30s:16. Repeat for several; they run in order, each reported on its own.
    #[arg(long = "stage", value_name = "D:LOAD", allow_hyphen_values = true)]
    pub stages: Vec<slipstream_bench::Stage>,
    /// Worker threads the users are dealt out to, round robin, each with its own event loop
    /// (pgbench's -j) [default: one per CPU].
    #[arg(long, short = 'j', value_name = "N", allow_hyphen_values = true)]
    pub threads: Option<usize>,
    /// Open loop: Poisson arrivals at R transactions per second (latency from the intended
    /// start). Without it, users run closed loop.
    #[arg(long, short = 'r', value_name = "R", allow_hyphen_values = true)]
    pub rate: Option<f64>,
    /// Closed loop: think time before each transaction, e.g. 10ms..50ms.
    #[arg(long, value_name = "MIN..MAX", allow_hyphen_values = true)]
    pub think: Option<slipstream_bench::ThinkTime>,
    /// Think time inside transactions (between their steps), not counted in latency.
    #[arg(long, value_name = "MIN..MAX", allow_hyphen_values = true)]
    pub intra_think: Option<slipstream_bench::ThinkTime>,
    /// Change weights: name=weight,name=weight (others keep theirs).
    #[arg(long, value_name = "MIX")]
    pub mix: Option<String>,
    /// Order Entry: also run the three reporting queries (weight 2 each).
    #[arg(long)]
    pub reporting: bool,
    /// Where to write the result [default: WORKLOAD-YYYYMMDD-HHMMSS.json].
    #[arg(long, short = 'o', value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Also write one CSV line per transaction here.
    #[arg(long, value_name = "FILE")]
    pub raw: Option<PathBuf>,
    /// Seed for every random choice (the same seed repeats the same choices).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub seed: Option<u64>,
    /// Open loop: a transaction starting later than this after its intended start is late
    /// [default: 1ms].
    #[arg(long, value_parser = duration, value_name = "D", allow_hyphen_values = true)]
    pub late_after: Option<std::time::Duration>,
    /// How long to wait for transactions in flight when the window ends [default: 10s].
    #[arg(long, value_parser = duration, value_name = "D", allow_hyphen_values = true)]
    pub grace: Option<std::time::Duration>,
    /// No progress line.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

fn model(s: &str) -> Result<slipstream_stats::Model, String> {
    match s {
        "gamma" => Ok(slipstream_stats::Model::Gamma),
        "lognormal" => Ok(slipstream_stats::Model::Lognormal),
        _ => Err(format!("model `{s}`: use gamma or lognormal")),
    }
}

fn percent(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('%');
    let v: f64 = t
        .parse()
        .map_err(|_| format!("`{s}` is not a percentage (e.g. 1% or 2.5%)"))?;
    if !(0.0..100.0).contains(&v) {
        return Err(format!(
            "`{s}`: use a percentage of at least 0 and below 100 (e.g. 5%)"
        ));
    }
    Ok(v / 100.0)
}

fn duration(s: &str) -> Result<std::time::Duration, String> {
    slipstream_bench::parse_duration(s)
}

/// `slipstream compare`'s options.
///
/// Side A's files, `--`, side B's files: `compare a1.json a2.json a3.json -- b1.json b2.json
/// b3.json` (quoted globs such as `'a-*.json'` are expanded too). Two files without `--` are
/// one run a side, as before. Options go before the `--`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Side A's result files (the baseline); with two files and no `--`, A then B.
    #[arg(required = true, value_name = "A.json")]
    pub a: Vec<String>,
    /// Side B's result files, after `--`.
    #[arg(last = true, value_name = "B.json")]
    pub b: Vec<String>,
    /// Only this transaction type.
    #[arg(long, value_name = "NAME")]
    pub transaction: Option<String>,
    /// Region of practical equivalence on the ratio B/A: ± this much (e.g. 5%).
    // A value starting with `-` is a value here, refused by `percent` with the range: clap
    // would say to pass `-1%` after `--`, which in `compare` is B's side.
    #[arg(
        long,
        default_value = "5%",
        value_parser = percent,
        value_name = "PCT",
        allow_hyphen_values = true
    )]
    pub rope: f64,
    /// The unit of analysis: auto (run with 2+ runs a side, else interval), run, interval
    /// (per-second batch means) or transaction (every latency).
    #[arg(long, default_value = "auto", value_name = "UNIT")]
    pub unit: slipstream_bench::compare::Unit,
    /// Write the posterior figures (SVG) into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// The sampler's seed.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,
    /// The likelihood of the per-second and transaction units: gamma (the article's, sampled
    /// with NUTS) or lognormal (closed form).
    #[arg(long, default_value = "gamma", value_parser = model, value_name = "MODEL")]
    pub model: slipstream_stats::Model,
    /// Print the report as JSON (for CI) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Exit with status 1 when a row's verdict is one of these (comma-separated): slower
    /// (slower, lower TPS or more failures), faster, different, undecided, unreliable.
    #[arg(long, value_delimiter = ',', value_parser = gate, value_name = "WHAT")]
    pub fail_if: Vec<Gate>,
    /// Whether the command line gave a `--` (clap drops one with nothing after it); set from
    /// the raw arguments by `main`.
    #[arg(skip)]
    pub double_dash: bool,
}

/// A verdict `--fail-if` can gate on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// B credibly worse: slower, lower throughput, more failures.
    Slower,
    /// B credibly better.
    Faster,
    /// Either.
    Different,
    /// The HDI straddles a ROPE edge.
    Undecided,
    /// No verdict (diagnostics failed) or a row that could not be compared.
    Unreliable,
}

fn gate(s: &str) -> Result<Gate, String> {
    match s {
        "slower" | "worse" => Ok(Gate::Slower),
        "faster" | "better" => Ok(Gate::Faster),
        "different" => Ok(Gate::Different),
        "undecided" => Ok(Gate::Undecided),
        "unreliable" => Ok(Gate::Unreliable),
        _ => Err(format!(
            "`{s}`: use slower, faster, different, undecided or unreliable"
        )),
    }
}

#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Create (on first use) and start the embedded cluster; print its URL.
    Start,
    /// Stop the embedded cluster.
    Stop,
    /// Say whether the embedded cluster exists and runs.
    Status,
    /// Print the embedded cluster's URL (starting it if needed).
    Url,
    /// Stop the embedded cluster and delete its data.
    Destroy,
}

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// List the experiments.
    List,
    /// Run one experiment and print its table.
    Run {
        /// The experiment (see `slipstream lab list`).
        experiment: String,
        /// Reduced form: fewer rounds, for a quick look.
        #[arg(long)]
        quick: bool,
        /// Write the result as JSON here.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Write the chart as SVG here [default with --json: beside it, as .svg; none when
        /// the JSON goes to a stream such as /dev/stdout].
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("slipstream").chain(args.iter().copied())).unwrap()
    }

    /// `--rope`: a percentage from 0 up to, not including, 100; a value refused is told the
    /// range it is outside of. Before (helper h74), `--rope 100%` was told "use a percentage
    /// from 0 to 100", which 100 is.
    #[test]
    fn rope_is_a_percentage_below_100_and_a_refusal_says_so() {
        assert_eq!(percent("5%"), Ok(0.05));
        assert_eq!(percent("0"), Ok(0.0));
        assert_eq!(percent("99.5%"), Ok(0.995));
        for bad in ["100%", "250%"] {
            let e = percent(bad).unwrap_err();
            assert!(e.contains("below 100"), "{bad}: {e}");
        }
        assert!(percent("nan").is_err() && percent("x").is_err());
        // A negative ROPE reaches the same refusal: clap took `-1%` for an option and said to
        // pass it as `-- -1%`, which in `compare` puts it on B's side as a file name.
        let e = Cli::try_parse_from(["slipstream", "compare", "--rope", "-1%", "a", "b"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 0") && !e.contains("-- -1"), "{e}");
    }

    #[test]
    fn definitions_are_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn url_is_global() {
        let cli = parse(&["sql", "SELECT 1", "--url", "postgres://h/db"]);
        assert_eq!(cli.url.as_deref(), Some("postgres://h/db"));
        assert!(matches!(cli.command, Command::Sql { ref query } if query == "SELECT 1"));
    }

    #[test]
    fn home_flag() {
        let cli = parse(&["--home", "/tmp/h", "db", "status"]);
        assert_eq!(cli.home, Some(PathBuf::from("/tmp/h")));
        assert!(matches!(cli.command, Command::Db(DbCommand::Status)));
    }

    #[test]
    fn lab_run_flags() {
        let cli = parse(&[
            "lab",
            "run",
            "roundtrip",
            "--quick",
            "--json",
            "r.json",
            "--svg",
            "r.svg",
        ]);
        match cli.command {
            Command::Lab(LabCommand::Run {
                experiment,
                quick,
                json,
                svg,
            }) => {
                assert_eq!(experiment, "roundtrip");
                assert!(quick);
                assert_eq!(json, Some(PathBuf::from("r.json")));
                assert_eq!(svg, Some(PathBuf::from("r.svg")));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn demo_flags() {
        match parse(&["demo", "--out", "x", "--full"]).command {
            Command::Demo { out, full } => assert_eq!((out, full), (PathBuf::from("x"), true)),
            other => panic!("{other:?}"),
        }
        match parse(&["demo"]).command {
            Command::Demo { out, full } => {
                assert_eq!((out, full), (PathBuf::from("report"), false))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn db_subcommands() {
        for (arg, want) in [
            ("start", "Start"),
            ("stop", "Stop"),
            ("status", "Status"),
            ("url", "Url"),
        ] {
            assert_eq!(
                format!("{:?}", parse(&["db", arg]).command),
                format!("Db({want})")
            );
        }
    }

    #[test]
    fn bench_flags() {
        let cli = parse(&[
            "bench",
            "order-entry",
            "-u",
            "4",
            "-d",
            "2m",
            "--rate",
            "100",
            "--mix",
            "a=1",
            "-j",
            "2",
        ]);
        match cli.command {
            Command::Bench(b) => {
                assert_eq!(b.workload, "order-entry");
                assert_eq!(b.users, Some(4));
                assert_eq!(b.duration, Some(std::time::Duration::from_secs(120)));
                assert_eq!(b.threads, Some(2));
                assert_eq!(b.rate, Some(100.0));
                assert_eq!(b.mix.as_deref(), Some("a=1"));
                // Defaults are applied by `bench`, which knows whether a ramp-up replaces them.
                assert_eq!(b.warmup, None);
                assert!(b.stages.is_empty() && b.ramp_up.is_none() && b.scale.is_none());
            }
            other => panic!("{other:?}"),
        }
        let err = Cli::try_parse_from(["slipstream", "bench", "x", "-d", "10"]).unwrap_err();
        assert!(err.to_string().contains("needs a unit"), "{err}");
        assert!(Cli::try_parse_from(["slipstream", "report"]).is_err());
    }

    #[test]
    fn report_merge_needs_an_output_and_the_reverse() {
        let cli = parse(&["report", "a.json", "b.json", "--merge", "-o", "all.json"]);
        match cli.command {
            Command::Report {
                files, merge, out, ..
            } => {
                assert_eq!(files.len(), 2);
                assert!(merge);
                assert_eq!(out, Some(PathBuf::from("all.json")));
            }
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["slipstream", "report", "a.json", "--merge"]).is_err());
        assert!(Cli::try_parse_from(["slipstream", "report", "a.json", "-o", "x.json"]).is_err());
    }

    #[test]
    fn compare_takes_sides_around_a_double_dash_and_gates() {
        match parse(&[
            "compare",
            "a1",
            "a2",
            "--json",
            "--fail-if",
            "slower,unreliable",
            "--",
            "b1",
            "b2",
        ])
        .command
        {
            Command::Compare(c) => {
                assert_eq!(
                    (c.a, c.b),
                    (
                        vec!["a1".into(), "a2".into()],
                        vec!["b1".into(), "b2".into()]
                    )
                );
                assert!(c.json);
                assert_eq!(c.fail_if, vec![Gate::Slower, Gate::Unreliable]);
                assert_eq!(c.rope, 0.05);
            }
            other => panic!("{other:?}"),
        }
        match parse(&["compare", "a.json", "b.json"]).command {
            Command::Compare(c) => assert_eq!((c.a.len(), c.b.len()), (2, 0)),
            other => panic!("{other:?}"),
        }
        let err = Cli::try_parse_from(["slipstream", "compare", "a", "b", "--fail-if", "bad"])
            .unwrap_err();
        assert!(err.to_string().contains("use slower"), "{err}");
    }

    /// Promise (README.md, "Guides": each feature has a guide; the brief of docs/: every flag a
    /// user can pass is explained somewhere a user reads). Steps: walk every subcommand's
    /// arguments and look for each `--long` name in README.md and docs/*.md. Before, `compare
    /// --transaction` and `demo --full` were in `--help` and in no doc.
    #[test]
    fn every_long_flag_is_explained_in_the_readme_or_a_guide() {
        use clap::CommandFactory;
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut docs = std::fs::read_to_string(root.join("README.md")).unwrap();
        for entry in std::fs::read_dir(root.join("docs")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                docs.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
        // `--flag` followed by something that cannot continue a flag's name.
        let mentioned = |flag: &str| {
            docs.match_indices(flag).any(|(at, _)| {
                !docs[at + flag.len()..]
                    .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-')
            })
        };
        fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<(String, String)>) {
            for arg in cmd.get_arguments() {
                if let Some(long) = arg.get_long()
                    && long != "help"
                    && long != "version"
                {
                    out.push((path.to_string(), format!("--{long}")));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), out);
            }
        }
        let mut flags = Vec::new();
        walk(&Cli::command(), "slipstream", &mut flags);
        assert!(flags.len() > 20, "walked too few flags: {flags:?}");
        let missing: Vec<String> = flags
            .iter()
            .filter(|(_, flag)| !mentioned(flag))
            .map(|(cmd, flag)| format!("{cmd} {flag}"))
            .collect();
        assert!(
            missing.is_empty(),
            "flags in --help that neither README.md nor docs/*.md explains: {missing:?}"
        );
    }

    #[test]
    fn a_missing_argument_is_an_error() {
        assert!(Cli::try_parse_from(["slipstream", "sql"]).is_err());
        assert!(Cli::try_parse_from(["slipstream", "lab", "run"]).is_err());
    }
}

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

    /// State directory for the embedded cluster [default: $SLIPSTREAM_HOME, else the user's
    /// data directory + /slipstream].
    #[arg(long, global = true, value_name = "DIR", env = "SLIPSTREAM_HOME")]
    pub home: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage the embedded PostgreSQL cluster.
    #[command(subcommand)]
    Db(DbCommand),
    /// Run SQL and print the result as a table.
    Sql {
        /// One or more ;-separated statements.
        query: String,
    },
    /// List or run the lab's experiments.
    #[command(subcommand)]
    Lab(LabCommand),
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
        /// Write the chart as SVG here [default with --json: beside it, as .svg].
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
    fn a_missing_argument_is_an_error() {
        assert!(Cli::try_parse_from(["slipstream", "sql"]).is_err());
        assert!(Cli::try_parse_from(["slipstream", "lab", "run"]).is_err());
    }
}

//! The `slipstream` command.

/// `eprintln!` for the whole crate, which never panics: std's panics when stderr's reader has
/// gone (`slipstream sql ... 2>&1 | head -1`), and a message nobody reads would then cost the
/// command its result and its exit status (101). Defined before the modules, so that it
/// shadows std's in all of them.
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod bench;
mod cli;
mod compare;
mod database;
mod interrupt;
mod sql;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use slipstream_lab::{Context, EXPERIMENTS};
use slipstream_testkit::{Embedded, Status};

use cli::{Cli, Command, DbCommand, LabCommand};

/// Measures heap growth, so the fetch experiments can report each client's peak memory. It
/// counts only during a measurement (the same for every client measured); elsewhere, e.g. in
/// `bench`'s users, an allocation costs one relaxed load more than the system allocator's.
#[global_allocator]
static ALLOC: slipstream_testkit::CountingAllocator = slipstream_testkit::CountingAllocator;

fn main() -> ExitCode {
    let outcome = run(Cli::parse());
    interrupt::defer_to_a_stop_under_way();
    match outcome {
        Ok(code) => code,
        Err(e) => {
            // A closed pipe (`slipstream ... | head`) is not a failure.
            if broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            warn_error(&e);
            ExitCode::FAILURE
        }
    }
}

/// Whether `e` is a write to a pipe whose reader has gone.
pub(crate) fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Db(cmd) => {
            // Taken for the server to act on, it would be silently ignored: `db stop --url`
            // would stop the embedded cluster instead.
            anyhow::ensure!(
                cli.url.is_none(),
                "--url names a server of your own, and `db` commands manage only the embedded cluster (its state in --home); drop --url"
            );
            db(cmd, cli.home)
        }
        Command::Sql { query } => {
            sql::check(&query)?;
            let url = database::resolve(cli.url, cli.home)?;
            match runtime()?.block_on(sql::run(&url, &query))? {
                sql::Ran::Done(reply) => {
                    // Nothing to show (an empty query, comments alone) prints nothing, as
                    // `psql -c ''` does: not an empty line.
                    let shown = sql::render(&reply)?;
                    if !shown.is_empty() {
                        say(&shown)?;
                    }
                    Ok(ExitCode::SUCCESS)
                }
                sql::Ran::Failed { reply, error } => {
                    sql::show_partial(&reply)?;
                    Err(error)
                }
                sql::Ran::Interrupted { reply, what } => {
                    sql::show_partial(&reply)?;
                    eprintln!("slipstream: {what}");
                    Ok(ExitCode::from(interrupt::INTERRUPTED))
                }
            }
        }
        Command::Lab(LabCommand::List) => {
            let mut t = slipstream_lab::Table::new(&["experiment", "measures", "reproduces"]);
            for e in EXPERIMENTS {
                t.row(vec![e.name.into(), e.title.into(), e.source.into()]);
            }
            say(&t.render())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Lab(LabCommand::Run {
            experiment,
            quick,
            json,
            svg,
        }) => {
            slipstream_lab::find(&experiment)?;
            // With --json and no --svg, the chart goes beside the JSON, unless the JSON goes
            // to a stream (`/dev/stdout`, a FIFO, /dev/null): nothing is beside one, and
            // `/dev/stdout.svg` is a file in /dev, or a refusal. Both are checked before the
            // run, the default too: a chart that cannot be written, or that would replace the
            // JSON (the chart is written second), costs the run's result.
            let beside = svg.is_none();
            let svg = svg.or_else(|| {
                json.as_ref()
                    .filter(|j| !is_stream(j))
                    .map(|j| j.with_extension("svg"))
            });
            if let (Some(j), Some(s)) = (&json, &svg) {
                anyhow::ensure!(
                    !bench::same_file(j, s),
                    "the chart would replace the result {}: {}",
                    j.display(),
                    if beside {
                        "it goes beside the JSON as .svg; give the JSON another extension (.json), or --svg"
                    } else {
                        "give --svg another name"
                    }
                );
            }
            for out in json.iter().chain(&svg) {
                slipstream_lab::check_writable(out)?;
            }
            let url = database::resolve(cli.url, cli.home)?;
            interrupt::stop_clusters_on_signal()?;
            let result = slipstream_lab::run(&experiment, &Context { url, quick })?;
            // The files first: they are the result, the table only a view of it, and a
            // stdout that cannot take the table (`> /dev/full`) must not cost the run.
            // A file sent to stdout holds it alone: the table then goes to stderr.
            let to_stderr = json.iter().chain(&svg).any(|p| bench::is_stdout(p));
            let mut wrote = Vec::new();
            let write = || -> anyhow::Result<()> {
                if let Some(path) = json.clone() {
                    result.write_json(&path)?;
                    wrote.push(path);
                }
                if let Some(path) = svg.filter(|_| !result.series.is_empty()) {
                    slipstream_lab::line_chart(&result.title, &result.series, &path)?;
                    wrote.push(path);
                }
                Ok(())
            };
            let written = write();
            let printed = print_result(&result, to_stderr);
            for path in &wrote {
                eprintln!("wrote {}", path.display());
            }
            written?;
            printed?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(args) => bench::bench(args, || database::resolve(cli.url, cli.home)),
        Command::Report {
            files,
            html,
            merge,
            out,
        } => bench::report(files, html, merge.then_some(out).flatten()),
        // A pipeline must tell "B is slower" (1, with --fail-if) from "could not compare" (2).
        Command::Compare(mut args) => {
            args.double_dash = compare::double_dash_given(std::env::args_os());
            compare::compare(&args).or_else(|e| {
                warn_error(&e);
                Ok(ExitCode::from(compare::EXIT_ERROR))
            })
        }
        Command::Demo { out, full } => {
            // The system's "Not a directory" names neither the flag nor what it wants.
            anyhow::ensure!(
                !out.exists() || out.is_dir(),
                "--out {} is not a directory: the demo writes index.html and each experiment's \
                 files into one; give a directory (made if missing)",
                out.display()
            );
            slipstream_lab::check_writable(&out.join("index.html"))?;
            let url = database::resolve(cli.url, cli.home)?;
            let ctx = Context { url, quick: !full };
            interrupt::stop_clusters_on_signal()?;
            let mut results = Vec::new();
            for e in EXPERIMENTS {
                eprintln!("running {} ...", e.name);
                let result = slipstream_lab::run(e.name, &ctx)?;
                // Written before it is printed, as `lab run` does.
                slipstream_lab::write_outputs(&result, &out)?;
                print_result(&result, false)?;
                results.push(result);
            }
            slipstream_lab::write_report(&out, &results)?;
            say(&format!("report: {}", out.join("index.html").display()))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn db(cmd: DbCommand, home: Option<std::path::PathBuf>) -> anyhow::Result<ExitCode> {
    let embedded = Embedded::new(database::home(home)?);
    match cmd {
        DbCommand::Start | DbCommand::Url => say(&embedded.start()?)?,
        DbCommand::Stop => {
            embedded.stop()?;
            say("stopped")?;
        }
        DbCommand::Destroy => {
            embedded.destroy()?;
            say("destroyed")?;
        }
        DbCommand::Status => match embedded.status()? {
            Status::NotCreated => say(&format!(
                "not created (state directory {})",
                embedded.home().display()
            ))?,
            Status::Stopped { data } => say(&format!("stopped (data {})", data.display()))?,
            Status::Running { data, port } => say(&format!(
                "running at {} (data {})",
                Embedded::url_for_port(port),
                data.display()
            ))?,
        },
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether `path` is a stream rather than a file in a directory: stdout (however named), or
/// an existing path that is not a regular file (a device, a FIFO).
fn is_stream(path: &std::path::Path) -> bool {
    bench::is_stdout(path) || std::fs::metadata(path).is_ok_and(|m| !m.is_file())
}

/// Prints an experiment's table and notes: to stdout, or to stderr when its result file went
/// to stdout (`--json /dev/stdout`), which then holds the JSON alone.
fn print_result(result: &slipstream_lab::ExperimentResult, to_stderr: bool) -> anyhow::Result<()> {
    let mut text = format!(
        "\n{}: {}\n\n{}\n",
        result.experiment,
        result.title,
        result.table.render()
    );
    for note in &result.notes {
        text.push_str(&format!("note: {note}\n"));
    }
    if to_stderr {
        eprintln!("{}", slipstream_bench::table::printable_lines(&text));
        return Ok(());
    }
    say(&text)
}

/// Prints an error to stderr. Its control characters are printed escaped, as [`say`] prints
/// them: an error names what it could not use, often a name from a result or workload file.
fn warn_error(e: &anyhow::Error) {
    eprintln!(
        "slipstream: error: {}",
        slipstream_bench::table::printable_lines(&format!("{e:#}"))
    );
}

/// Prints a line to stdout. A reader that has gone (`| head -1` done) is not a failure, nor a
/// reason to stop: what the command writes to files, and its exit status (a failed statement,
/// a run in which every transaction failed), still stand. Other write errors (`> /dev/full`)
/// are returned. Control characters other than line breaks and tabs are printed escaped: names and
/// messages come from result and workload files, and an escape sequence in one could clear
/// the screen or overwrite a verdict.
pub(crate) fn say(text: &str) -> anyhow::Result<()> {
    let text = slipstream_bench::table::printable_lines(text);
    match writeln!(std::io::stdout(), "{text}") {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        written => written.context("writing to stdout"),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

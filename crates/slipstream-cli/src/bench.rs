//! `slipstream bench` and `slipstream report`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use slipstream_bench::report::{self, Labeled};
use slipstream_bench::{BenchRun, RunConfig, Style, Workload, order_entry, workload_file};
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::BenchArgs;
use crate::interrupt::{CANCEL_WAIT, Cancelled, CtrlC, INTERRUPTED, SAME_STOP};
use crate::say;

/// What `bench` was asked to run.
// Made once per run: boxing the parsed file would save nothing worth an indirection.
#[allow(clippy::large_enum_variant)]
enum Source {
    OrderEntry,
    File(workload_file::WorkloadFile),
}

fn source(name: &str) -> anyhow::Result<Source> {
    if name == order_entry::NAME {
        return Ok(Source::OrderEntry);
    }
    let path = Path::new(name);
    if path.extension().is_some_and(|e| e == "toml") || path.exists() {
        return Ok(Source::File(workload_file::load(path)?));
    }
    anyhow::bail!(
        "unknown workload `{name}`: use `order-entry` or a workload file (.toml); see docs/custom-transactions.md"
    )
}

/// Runs `bench`. `url` resolves the database (starting the embedded cluster if it is the
/// one): called only once the arguments have been checked, so that a refusal starts nothing.
pub fn bench(
    args: BenchArgs,
    url: impl FnOnce() -> anyhow::Result<String>,
) -> anyhow::Result<ExitCode> {
    let source = source(&args.workload)?;
    // Users get threads of their own (RunConfig::threads); this runtime only keeps the clock.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if args.setup {
        // A setup loads and stops: a flag that shapes a run would be silently ignored, and
        // whoever typed `--setup -u 64 -d 10m` would take the load for the run they asked for.
        if let Some(flag) = run_only_flags(&args).first() {
            anyhow::bail!(
                "{flag} applies to a run, not to --setup (which only loads the schema). Load with `slipstream bench {} --setup`, then run with {flag}",
                args.workload
            );
        }
        // Only Order Entry's loader has a scale: a workload file's setup is its own SQL, which
        // loads what it says, so a --scale given with one would be silently ignored.
        if let (Source::File(_), Some(scale)) = (&source, args.scale) {
            anyhow::bail!(
                "--scale {scale} applies only to Order Entry's --setup: a workload file's setup SQL loads what it says. Drop --scale, or change the sizes in the file's `setup`"
            );
        }
        let url = url()?;
        return runtime.block_on(setup(
            &source,
            &args.workload,
            &url,
            args.scale.unwrap_or(0.1),
            args.quiet,
        ));
    }
    if let Some(scale) = args.scale {
        anyhow::bail!(
            "--scale {scale} only applies with --setup: the scale is fixed when the schema is loaded. Load it with `slipstream bench {} --setup --scale {scale}`, then run without --scale",
            args.workload
        );
    }
    let workload_file = matches!(source, Source::File(_)).then(|| PathBuf::from(&args.workload));
    let workload_sha256 = match &source {
        Source::OrderEntry => None,
        Source::File(f) => Some(f.sha256.clone()),
    };
    let (mut workload, file_think, file_intra, file_ramp, file_stages) = match source {
        Source::OrderEntry => (order_entry::workload(), None, None, None, Vec::new()),
        Source::File(f) => (f.workload, f.think, f.intra_think, f.ramp_up, f.stages),
    };
    if args.reporting {
        anyhow::ensure!(
            workload.name() == order_entry::NAME,
            "--reporting turns on Order Entry's reporting queries; use --mix for other workloads"
        );
        for q in order_entry::REPORTING {
            workload
                .set_weight(q, order_entry::REPORTING_WEIGHT)
                .map_err(anyhow::Error::msg)?;
        }
    }
    if let Some(mix) = &args.mix {
        workload.apply_mix(mix).map_err(anyhow::Error::msg)?;
    }
    check_file_settings(
        &args,
        FileSettings {
            think: file_think.filter(|t| *t != slipstream_bench::ThinkTime::NONE),
            ramp_up: file_ramp.is_some_and(|r| !r.is_zero()),
            stages: &file_stages,
        },
    )?;
    let mut config = RunConfig::new(None);
    let stages = if args.stages.is_empty() {
        file_stages
    } else {
        args.stages.clone()
    };
    if !stages.is_empty() {
        anyhow::ensure!(
            args.duration.is_none(),
            "--duration and --stage both set how long the run lasts; drop --duration (the run lasts the stages' sum)"
        );
        anyhow::ensure!(
            args.users.is_none() || matches!(stages[0].load, slipstream_bench::StageLoad::Rate(_)),
            "--users and closed-loop stages both set the user count; drop --users (each --stage D:USERS sets its own)"
        );
    }
    config.stages = stages;
    config.users = args.users.unwrap_or(8);
    config.duration = args.duration.unwrap_or(std::time::Duration::from_secs(30));
    config.ramp_up = args.ramp_up.or(file_ramp).unwrap_or_default();
    config.warmup = args.warmup.unwrap_or(if config.ramp_up.is_zero() {
        std::time::Duration::from_secs(5)
    } else {
        std::time::Duration::ZERO
    });
    if let Some(threads) = args.threads {
        config.threads = threads;
    }
    config.rate = args.rate;
    config.think = args.think.or(file_think).unwrap_or_default();
    config.intra_think = args.intra_think.or(file_intra).unwrap_or_default();
    if let Some(seed) = args.seed {
        config.seed = seed;
    }
    if let Some(late_after) = args.late_after {
        // Lateness is measured against an open loop's schedule; a closed loop has none, so
        // the flag would be accepted and change nothing.
        let open_loop = config.rate.is_some()
            || config
                .stages
                .iter()
                .any(|s| matches!(s.load, slipstream_bench::StageLoad::Rate(_)));
        anyhow::ensure!(
            open_loop,
            "--late-after applies to open-loop runs (--rate, or rate stages), where a \
             transaction has an intended start; this run is closed-loop: drop --late-after"
        );
        config.late_after = late_after;
    }
    if let Some(grace) = args.grace {
        config.grace = grace;
    }
    config.raw_csv = args.raw.clone();
    config.progress = if args.quiet {
        Style::Quiet
    } else {
        Style::Auto
    };
    let out = args.out.unwrap_or_else(|| default_out(workload.name()));
    // Before the run (the raw CSV is created when it starts): an output that replaces the
    // workload file loses the user's file, one that replaces the other output loses it.
    for (flag, path) in [("-o", Some(&out)), ("--raw", args.raw.as_ref())] {
        if let (Some(path), Some(file)) = (path, &workload_file) {
            anyhow::ensure!(
                !same_file(path, file),
                "{flag} {} is the workload file: the run would replace it; give another {flag}",
                path.display()
            );
        }
    }
    if let Some(raw) = &args.raw {
        anyhow::ensure!(
            !same_file(raw, &out),
            "--raw and -o name one file ({}): the result would replace the raw CSV; give each its own",
            out.display()
        );
    }
    // Before the run, not after it: a result that cannot be written is a run lost.
    slipstream_bench::check_writable(&out)?;
    config.url = Some(url()?);

    let mut run = match runtime.block_on(run(&workload, &config)) {
        Ok(run) => run,
        // A stop before measuring started: nothing to write, and nothing went wrong.
        Err(e) if e.downcast_ref::<slipstream_bench::Interrupted>().is_some() => {
            eprintln!("slipstream: {e}");
            return Ok(ExitCode::from(INTERRUPTED));
        }
        Err(e) => return Err(e),
    };
    if let Some(c) = run.context.as_mut() {
        c.command_line = command_line();
        c.workload_sha256 = workload_sha256;
    }
    // The figures are printed even when the write fails (a disk that filled during the
    // run): the file is lost, the run need not be.
    let written = run.write_json(&out);
    let label = out.display().to_string();
    let runs = [Labeled { label, run }];
    // A file sent to stdout (the result, or the raw CSV) holds it alone.
    let to_stderr = is_stdout(&out) || args.raw.as_deref().is_some_and(is_stdout);
    print_runs(&runs, to_stderr)?;
    if let Err(e) = written {
        // A result sent to a reader that has gone (`-o /dev/stdout | head`) is a closed
        // pipe, which `main` takes for no failure, as for any output; not a full disk.
        if crate::broken_pipe(&e) {
            return Err(e);
        }
        anyhow::bail!(
            "{e:#}: the result file was not written (the figures above are the run's); \
             free space there or give another -o, and run again to get the file"
        );
    }
    eprintln!("wrote {}", out.display());
    let run = &runs[0].run;
    if run.interrupted {
        return Ok(ExitCode::from(INTERRUPTED));
    }
    let failed: u64 = run.transactions.iter().map(|t| t.failed).sum();
    let ok: u64 = run.transactions.iter().map(|t| t.ok).sum();
    // A run in which nothing succeeded measured nothing: a script or a CI job must not take
    // it for a result (pgbench exits 2 on errors during the run). Transactions cut off at the
    // grace limit (a stalled server, a table left locked) are no result either.
    if ok == 0 && failed > 0 {
        eprintln!(
            "slipstream: error: every transaction failed ({failed}); the failures above say why"
        );
        return Ok(ExitCode::from(ALL_FAILED));
    }
    if ok == 0 && run.unfinished > 0 {
        eprintln!(
            "slipstream: error: nothing finished: the window's {} transactions were cut off at its end (censored: still running after the {:?} grace period, or never started); look for what held them on the server (a lock, a stalled server: pg_stat_activity), or raise --grace",
            run.unfinished, config.grace
        );
        return Ok(ExitCode::from(ALL_FAILED));
    }
    // Nothing started at all (a rate too low for the window, a think time longer than it):
    // no less empty than a run of failures, and the table's zeros would read as a result.
    if ok == 0 && failed == 0 && run.unfinished == 0 {
        let what = match &run.schedule {
            Some(s) => format!(
                "the open loop drew {} arrivals in the {:.3} s window ({:.3} expected at its rate); raise --rate or --duration",
                s.arrivals,
                run.measured_s,
                match run.load {
                    slipstream_bench::Load::Open { rate } => rate * run.measured_s,
                    slipstream_bench::Load::Closed => 0.0,
                }
            ),
            None => format!(
                "the users' think time outlasted the {:.3} s window; lengthen --duration or shorten --think",
                run.measured_s
            ),
        };
        eprintln!(
            "slipstream: error: no transaction started in the window, so the run measured nothing: {what}"
        );
        return Ok(ExitCode::from(ALL_FAILED));
    }
    Ok(ExitCode::SUCCESS)
}

/// The flags given that shape a run, which `--setup` has no use for (`--quiet` is not one:
/// it quiets the load's progress lines too).
fn run_only_flags(args: &BenchArgs) -> Vec<&'static str> {
    [
        ("--users", args.users.is_some()),
        ("--duration", args.duration.is_some()),
        ("--warmup", args.warmup.is_some()),
        ("--ramp-up", args.ramp_up.is_some()),
        ("--stage", !args.stages.is_empty()),
        ("--threads", args.threads.is_some()),
        ("--rate", args.rate.is_some()),
        ("--think", args.think.is_some()),
        ("--intra-think", args.intra_think.is_some()),
        ("--mix", args.mix.is_some()),
        ("--reporting", args.reporting),
        ("--out", args.out.is_some()),
        ("--raw", args.raw.is_some()),
        ("--seed", args.seed.is_some()),
        ("--late-after", args.late_after.is_some()),
        ("--grace", args.grace.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, given)| given.then_some(flag))
    .collect()
}

/// `bench`'s exit status when every transaction of the window failed (as pgbench's for
/// errors during the run), none finished, or none started.
const ALL_FAILED: u8 = 2;

/// What a workload file sets that the command line can also set.
struct FileSettings<'a> {
    think: Option<slipstream_bench::ThinkTime>,
    ramp_up: bool,
    stages: &'a [slipstream_bench::Stage],
}

/// Refuses flags that clash with what the workload file sets, naming the file's key: the
/// runner's own checks name the flags (`--think`, `--stage`), which would send a user who set
/// neither looking for them. A flag of the same kind overrides the file and clashes with
/// nothing here.
fn check_file_settings(args: &BenchArgs, file: FileSettings) -> anyhow::Result<()> {
    let file_stages = args.stages.is_empty() && !file.stages.is_empty();
    let stages = if file_stages {
        file.stages
    } else {
        &args.stages
    };
    let open = args.rate.is_some()
        || stages
            .first()
            .is_some_and(|s| matches!(s.load, slipstream_bench::StageLoad::Rate(_)));
    if file_stages {
        anyhow::ensure!(
            args.duration.is_none(),
            "the workload file's `stages` and --duration both set how long the run lasts; drop --duration (the run lasts the stages' sum), or give --stage to replace the file's stages"
        );
        anyhow::ensure!(
            args.rate.is_none(),
            "the workload file's `stages` and --rate both set the load; drop --rate, or give --stage D:rate=R to replace the file's stages"
        );
        anyhow::ensure!(
            args.users.is_none() || open,
            "the workload file's `stages` set the user count, and so does --users; drop --users, or give --stage to replace the file's stages"
        );
    }
    if let (None, Some(think)) = (&args.think, file.think) {
        anyhow::ensure!(
            !open,
            "the workload file's `think` ({think}) does not apply to an open-loop run ({}): arrivals are scheduled, not paced by users; give --think 0 to drop it for this run",
            if args.rate.is_some() {
                "--rate"
            } else if file_stages {
                "the file's rate stages"
            } else {
                "rate stages"
            }
        );
    }
    if args.ramp_up.is_none() && file.ramp_up {
        anyhow::ensure!(
            args.warmup.is_none_or(|w| w.is_zero()),
            "the workload file's `ramp_up` and --warmup both keep the start out of the steady figures; the ramp-up is recorded as a stage of its own, so drop --warmup, or give --ramp-up 0 to drop the file's ramp-up"
        );
    }
    Ok(())
}

async fn run(workload: &Workload, config: &RunConfig) -> anyhow::Result<BenchRun> {
    // The first Ctrl-C ends the window (the result is still written); a second one stops
    // waiting for what is in flight (it is censored and cancelled on the server, and the
    // result written); a third exits at once. SIGTERM (a CI job's or a container's timeout,
    // `kill`) does what two Ctrl-Cs do: whoever sent it may send SIGKILL soon, so the result
    // is written without waiting for transactions in flight.
    // Both listened for from here: `tokio::signal::ctrl_c()` would install its handler only
    // when first polled, and a Ctrl-C before that would kill the process.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (quit_tx, quit_rx) = tokio::sync::oneshot::channel::<()>();
    let stop = async move {
        let mut quit_tx = Some(quit_tx);
        let quit_now = |quit_tx: &mut Option<tokio::sync::oneshot::Sender<()>>| {
            // True in every phase: before measuring no result is written, and the runner's
            // next line says which way it ended.
            eprintln!("\nterminated: ending the run, cancelling what is in flight on the server");
            if let Some(tx) = quit_tx.take() {
                let _ = tx.send(());
            }
        };
        tokio::select! {
            r = int.recv() => {
                if r.is_none() {
                    return std::future::pending().await;
                }
            }
            _ = term.recv() => return quit_now(&mut quit_tx),
        }
        let first = std::time::Instant::now();
        // Before measuring there is nothing to finish or write, and in the drain what is in
        // flight is cut off: the runner's next line says which way the run ended.
        eprintln!(
            "\nstopping: ending the run (Ctrl-C again to stop waiting for transactions in flight)"
        );
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    r = int.recv() => {
                        if r.is_none() {
                            return;
                        }
                    }
                    _ = term.recv() => {
                        if quit_tx.is_none() {
                            std::process::exit(i32::from(INTERRUPTED));
                        }
                        quit_now(&mut quit_tx);
                        continue;
                    }
                }
                // One stop sent twice is not a second Ctrl-C: GNU `timeout -s INT` signals the
                // process and then its group, microseconds apart.
                if first.elapsed() < SAME_STOP {
                    continue;
                }
                match quit_tx.take() {
                    Some(tx) => {
                        eprintln!(
                            "quitting: cancelling what is in flight on the server and writing the result (Ctrl-C again to exit now, without it)"
                        );
                        let _ = tx.send(());
                    }
                    None => std::process::exit(i32::from(INTERRUPTED)),
                }
            }
        });
    };
    let quit = async {
        if quit_rx.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    slipstream_bench::run_until(workload, config, stop, quit).await
}

/// Loads the workload's schema. A Ctrl-C cancels the load on the server: closing the
/// connections alone would leave an index build (or the file's own SQL) running to its end.
/// `quiet` drops the load's progress lines (its summary and errors still print).
async fn setup(
    source: &Source,
    workload: &str,
    url: &str,
    scale: f64,
    quiet: bool,
) -> anyhow::Result<ExitCode> {
    let mut ctrl_c = CtrlC::listen()?;
    let ran = match source {
        Source::OrderEntry => {
            // A scale out of range is refused before anything runs (the load's own failures
            // below say to load again; this one has nothing to load again).
            order_entry::Sizes::for_scale(scale)?;
            let cancel = order_entry::SetupCancel::default();
            let progress = |line: &str| {
                if !quiet {
                    eprintln!("{line}");
                }
            };
            let load = order_entry::setup_with_cancel(url, scale, progress, &cancel);
            let ran = ctrl_c
                .cancelling("the Order Entry load", load, || cancel.cancel())
                .await;
            ran.map(|r| r.map(|r| loaded(&r)))
        }
        Source::File(f) => {
            let sql = f.setup.as_deref().ok_or_else(|| {
                anyhow::anyhow!(
                    "workload {} has no `setup` SQL to run; add setup = \"\"\"...\"\"\" to the file",
                    f.workload.name()
                )
            })?;
            let Some(client) = ctrl_c.or(slipstream_pg::connect(url)).await else {
                eprintln!("slipstream: setup interrupted while connecting; nothing ran");
                return Ok(ExitCode::from(INTERRUPTED));
            };
            let mut client = client?;
            let token = client.cancel_token();
            let ran = ctrl_c
                .cancelling("the setup SQL", client.batch_execute(sql), || {
                    token.cancel()
                })
                .await;
            ran.map(|r| {
                r.map(|()| format!("workload {} set up", f.workload.name()))
                    .map_err(|e| {
                        let at = e
                            .as_db_error()
                            .and_then(|db| match db.position() {
                                Some(slipstream_pg::ErrorPosition::Original(p)) => Some(*p),
                                _ => None,
                            })
                            .and_then(|p| setup_line(sql, p))
                            .map(|(n, line)| format!(" at its line {n} (`{}`)", line.trim()))
                            .unwrap_or_default();
                        anyhow::anyhow!("the workload's setup SQL failed{at}: {e}")
                    })
            })
        }
    };
    let again = format!("run `slipstream bench {workload} --setup` again before a run");
    let stopped = match ran {
        // Order Entry's load failed part way (the server restarted, a connection was
        // ended): what it made is incomplete, and only a new load makes it whole. A file's
        // setup SQL is the user's own: its error says what to fix.
        Cancelled::Ran(Err(e)) if matches!(source, Source::OrderEntry) => {
            anyhow::bail!("{e:#}; the Order Entry load did not finish, so {again}")
        }
        Cancelled::Ran(done) => {
            say(&done?)?;
            return Ok(ExitCode::SUCCESS);
        }
        Cancelled::AfterCancel(Ok(done)) => {
            eprintln!("the setup had finished before the cancel reached the server");
            say(&done)?;
            return Ok(ExitCode::SUCCESS);
        }
        Cancelled::AfterCancel(Err(e)) => {
            format!("setup cancelled on the server ({e:#}); {again}")
        }
        Cancelled::NotSent(e) => format!(
            "could not cancel the setup ({e}); it may still be running on the server (see pg_stat_activity); {again}"
        ),
        Cancelled::NotEnded => format!(
            "the server took the cancel but the setup had not ended {CANCEL_WAIT:?} later; it may still be running (see pg_stat_activity); {again}"
        ),
    };
    eprintln!("slipstream: {stopped}");
    Ok(ExitCode::from(INTERRUPTED))
}

/// Whether writing `a` would replace the regular file `b`: the same file when both exist
/// (however spelled: `./x`, a link), else the same absolute path. Devices and FIFOs are
/// written in place and replace nothing (`-o /dev/null --raw /dev/null` loses nothing).
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.is_file() && x.dev() == y.dev() && x.ino() == y.ino(),
        (Err(_), Err(_)) => match (std::path::absolute(a), std::path::absolute(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        },
        // One exists and the other does not: two names.
        _ => false,
    }
}

/// The line that reports a finished Order Entry load.
/// The line (1-based) of `sql` holding the server's error position `p` (1-based, in
/// characters), and its text: the setup SQL runs as one string of many statements, so the
/// server's error alone does not say which one failed.
fn setup_line(sql: &str, p: u32) -> Option<(usize, &str)> {
    let byte = sql
        .char_indices()
        .nth(usize::try_from(p).ok()?.checked_sub(1)?)
        .map(|(b, _)| b)?;
    let n = sql[..byte].matches('\n').count() + 1;
    Some((n, sql.split('\n').nth(n - 1)?))
}

fn loaded(r: &order_entry::SetupReport) -> String {
    let rows: Vec<String> = r.rows.iter().map(|(t, n)| format!("{t} {n}")).collect();
    format!(
        "Order Entry loaded at scale {} in {:.1} s (load {:.1} s, indexes {:.1} s): {}",
        r.sizes.scale,
        r.total.as_secs_f64(),
        r.load.as_secs_f64(),
        r.index.as_secs_f64(),
        rows.join(", ")
    )
}

/// The command line, with the value of a `--url` (which may hold a password) redacted.
fn command_line() -> Vec<String> {
    let mut args: Vec<String> = std::env::args().collect();
    for i in 0..args.len() {
        if let Some(v) = args[i].strip_prefix("--url=") {
            args[i] = format!("--url={}", slipstream_pg::redact_password(v));
        } else if args[i] == "--url"
            && let Some(v) = args.get(i + 1)
        {
            args[i + 1] = slipstream_pg::redact_password(v);
        }
    }
    args
}

/// `NAME-DATE.json` in the current directory, the name made a safe file name: a workload
/// file's `name` is input, and `../../x` or `/etc/x` must not choose where the result goes.
fn default_out(workload: &str) -> PathBuf {
    PathBuf::from(format!(
        "{}-{}.json",
        slipstream_bench::file_stem(workload),
        chrono::Utc::now().format("%Y%m%d-%H%M%S")
    ))
}

/// Whether `path` is this process's stdout (`-o /dev/stdout`, `/proc/self/fd/1`, or a path
/// stdout was redirected to): the result then goes there, and the table must not follow it
/// into the same stream, where `| jq` would read it as trailing garbage.
pub(crate) fn is_stdout(path: &Path) -> bool {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    match (
        std::fs::metadata(path),
        std::fs::metadata("/proc/self/fd/1"),
    ) {
        // A terminal shows both streams alike, and /dev/null keeps neither.
        (Ok(a), Ok(b)) => {
            a.dev() == b.dev() && a.ino() == b.ino() && !a.file_type().is_char_device()
        }
        _ => false,
    }
}

/// Prints the runs' descriptions and tables: to stdout, or to stderr when the result file
/// itself went to stdout.
fn print_runs(runs: &[Labeled], to_stderr: bool) -> anyhow::Result<()> {
    let mut text = String::new();
    for l in runs {
        if runs.len() > 1 {
            text.push_str(&format!("{}:\n", l.label));
        }
        for line in report::describe(&l.run) {
            text.push_str(&format!("  {line}\n"));
        }
    }
    let differ = report::differences(runs);
    if !differ.is_empty() {
        text.push_str("these runs differ in what they ran on:\n");
        for line in differ {
            text.push_str(&format!(
                "  differs: {}\n",
                slipstream_bench::table::printable(line)
            ));
        }
    }
    text.push('\n');
    text.push_str(&report::table(runs).render());
    for l in runs {
        if let Some(t) = slipstream_bench::stage_table(&l.run) {
            text.push('\n');
            if runs.len() > 1 {
                text.push_str(&format!("{} by stage:\n", l.label));
            } else {
                text.push_str("by stage:\n");
            }
            text.push_str(&t.render());
        }
    }
    if to_stderr {
        eprintln!("{}", slipstream_bench::table::printable_lines(&text));
        return Ok(());
    }
    say(&text)
}

pub fn report(
    files: Vec<PathBuf>,
    html: Option<PathBuf>,
    merge_into: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    // The page replacing a result read, or the merged result just written, would lose it.
    if let Some(html) = &html {
        for f in files.iter().chain(&merge_into) {
            anyhow::ensure!(
                !same_file(html, f),
                "--html {} would replace the result {}; give the page another name (e.g. report.html)",
                html.display(),
                f.display()
            );
        }
    }
    // The merged result replacing one of its parts would lose that generator's own result.
    if let Some(out) = &merge_into {
        for f in &files {
            anyhow::ensure!(
                !same_file(out, f),
                "-o {} would replace {}, one of the results merged; give the merged result \
                 another name (e.g. all.json)",
                out.display(),
                f.display()
            );
        }
    }
    for out in html.iter().chain(&merge_into) {
        slipstream_bench::check_writable(out)?;
    }
    let mut runs = Vec::new();
    for f in &files {
        let run = BenchRun::read_json(f)?;
        let stem = f
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| f.display().to_string());
        // Two files with one name in different directories: label them by path.
        let label = if files
            .iter()
            .filter(|g| g.file_stem() == f.file_stem())
            .count()
            > 1
        {
            f.display().to_string()
        } else {
            stem
        };
        runs.push(Labeled { label, run });
    }
    let mut table_to_stderr = false;
    if let Some(out) = merge_into {
        let parts: Vec<(String, BenchRun)> = runs.into_iter().map(|l| (l.label, l.run)).collect();
        let merged = slipstream_bench::merge(&parts)?;
        merged.write_json(&out)?;
        table_to_stderr = is_stdout(&out);
        eprintln!("wrote {} (merged from {} runs)", out.display(), parts.len());
        let label = out
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| out.display().to_string());
        runs = vec![Labeled { label, run: merged }];
    }
    let workloads: std::collections::BTreeSet<&str> =
        runs.iter().map(|l| l.run.workload.as_str()).collect();
    if workloads.len() > 1 {
        // Names from the files: printed escaped, as the tables print them.
        eprintln!(
            "{}",
            slipstream_bench::table::printable(format!(
                "note: these runs are of different workloads ({}); only same-named transactions line up",
                workloads.into_iter().collect::<Vec<_>>().join(", ")
            ))
        );
    }
    print_runs(&runs, table_to_stderr)?;
    if let Some(path) = html {
        report::write_html(&runs, &path)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod out_tests {
    use super::*;

    /// The server's position counts characters from 1; a position past the text, or 0, names
    /// no line.
    #[test]
    fn a_setup_error_position_names_its_line() {
        let sql = "CREATE TABLE a (x int);\nCREATE TABLE é (y nosuchtype);\n";
        // In characters, as the server counts: the `é` before it is two bytes.
        let p = sql[..sql.find("nosuchtype").unwrap()].chars().count() + 1;
        assert_eq!(
            setup_line(sql, p as u32),
            Some((2, "CREATE TABLE é (y nosuchtype);"))
        );
        assert_eq!(setup_line(sql, 1), Some((1, "CREATE TABLE a (x int);")));
        assert_eq!(setup_line(sql, 0), None);
        assert_eq!(setup_line(sql, 10_000), None);
    }

    /// A workload named like a path writes its result in the current directory, under a
    /// flat name. Before (session 33's attacker), `../../x` and `/tmp/a/b/x` chose the
    /// directory, and it was created.
    #[test]
    fn the_default_result_file_stays_in_the_current_directory() {
        for name in ["../../../tmp/escaped", "/tmp/abs/deep/x", "", "a\0b"] {
            let out = default_out(name);
            assert_eq!(out.components().count(), 1, "{name:?} -> {}", out.display());
            assert!(!out.to_string_lossy().starts_with('.'), "{}", out.display());
        }
    }

    /// One file however it is spelled, two names when only one exists, and a device is
    /// never a file an output would replace.
    #[test]
    fn same_file_sees_through_spellings_and_links() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.json");
        let dotted = dir.path().join(".").join("a.json");
        assert!(same_file(&a, &dotted), "neither exists yet");
        std::fs::write(&a, "{}").unwrap();
        assert!(same_file(&a, &dotted));
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        assert!(same_file(&link, &a));
        assert!(!same_file(&dir.path().join("b.json"), &a));
        let null = Path::new("/dev/null");
        assert!(!same_file(null, null));
    }
}

#[cfg(test)]
mod setup_flag_tests {
    use clap::{CommandFactory, Parser};

    use super::run_only_flags;
    use crate::cli::{Cli, Command};

    /// The arguments `bench --setup` uses; every other one must be refused beside it.
    const FOR_SETUP: [&str; 7] = ["workload", "setup", "scale", "quiet", "url", "home", "help"];

    /// `run_only_flags` is a list kept by hand: a flag added to `BenchArgs` and forgotten
    /// there would be silently ignored by `--setup` (as 16 were before session 44). Each
    /// argument clap knows must be either one `--setup` uses or one this list refuses.
    #[test]
    fn every_bench_flag_is_for_setup_or_refused_beside_it() {
        let every_run_flag = [
            "bench",
            "x",
            "-u",
            "1",
            "-d",
            "1s",
            "-w",
            "1s",
            "--ramp-up",
            "1s",
            "--stage",
            "1s:2",
            "-j",
            "1",
            "-r",
            "1",
            "--think",
            "1ms..2ms",
            "--intra-think",
            "1ms..2ms",
            "--mix",
            "a=1",
            "--reporting",
            "-o",
            "o.json",
            "--raw",
            "r.csv",
            "--seed",
            "1",
            "--late-after",
            "1s",
            "--grace",
            "1s",
        ];
        let args =
            match Cli::parse_from(std::iter::once("slipstream").chain(every_run_flag)).command {
                Command::Bench(args) => args,
                other => panic!("parsed as {other:?}"),
            };
        let refused = run_only_flags(&args);
        let cli = Cli::command();
        let bench = cli.find_subcommand("bench").expect("a bench subcommand");
        let mut unplaced = Vec::new();
        for arg in bench.get_arguments() {
            let id = arg.get_id().as_str();
            if FOR_SETUP.contains(&id) {
                continue;
            }
            let long = format!("--{}", arg.get_long().unwrap_or(id));
            if !refused.contains(&long.as_str()) {
                unplaced.push(long);
            }
        }
        assert!(
            unplaced.is_empty(),
            "{unplaced:?}: neither used by --setup (FOR_SETUP) nor refused beside it \
             (run_only_flags); place each, and give it in this test's command line"
        );
    }
}

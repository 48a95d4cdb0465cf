//! `slipstream compare`: files -> sides -> the lab's comparison -> a table (or JSON) -> the
//! exit code a pipeline gates on.
//!
//! Exit codes: 0 compared and no `--fail-if` condition met; 1 a `--fail-if` condition met;
//! 2 nothing could be compared (bad arguments, unreadable files, no common type).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use slipstream_bench::BenchRun;
use slipstream_bench::compare::{Direction, Metric, Outcome, Report, Row, compare_sides, plot_as};
use slipstream_bench::table::printable;
use slipstream_lab::Table;
use slipstream_stats::{CompareSettings, Model, SamplerSettings, Verdict};

use crate::cli::{CompareArgs, Gate};
use crate::say;

/// Status when a `--fail-if` condition holds.
pub const EXIT_GATE: u8 = 1;
/// Status when nothing could be compared.
pub const EXIT_ERROR: u8 = 2;

pub fn compare(args: &CompareArgs) -> anyhow::Result<ExitCode> {
    // Before the comparison, not after it: failing then would print the verdicts and exit 2
    // ("nothing could be compared"), hiding a --fail-if that tripped.
    if let Some(dir) = &args.plot {
        slipstream_bench::check_writable(&dir.join("figure.svg")).map_err(|e| {
            anyhow::anyhow!(
                "--plot {}: cannot write figures there ({e:#}); give another directory",
                dir.display()
            )
        })?;
    }
    let (a_files, b_files) = sides(&args.a, &args.b, args.double_dash)?;
    let read = |files: &[PathBuf]| -> anyhow::Result<Vec<BenchRun>> {
        files.iter().map(|f| BenchRun::read_json(f)).collect()
    };
    let (ra, rb) = (read(&a_files)?, read(&b_files)?);
    let labels: Vec<String> = a_files
        .iter()
        .chain(&b_files)
        .map(|f| f.display().to_string())
        .collect();
    let runs: Vec<(&str, &BenchRun)> = labels
        .iter()
        .map(String::as_str)
        .zip(ra.iter().chain(&rb))
        .collect();
    slipstream_bench::refuse_repeated_runs(&runs)?;
    let settings = CompareSettings {
        rope: args.rope,
        sampler: SamplerSettings {
            seed: args.seed,
            ..Default::default()
        },
        model: args.model,
    };
    let report = compare_sides(&ra, &rb, args.transaction.as_deref(), args.unit, &settings)?;
    let mut text = header(&a_files, &b_files, &ra, &rb, &report, args.model);
    let (table, skipped) = render(&report);
    if !table.rows.is_empty() {
        text.push('\n');
        text.push_str(&table.render());
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    // Each line whole: its names come from the files, and `say` keeps the text's line breaks,
    // so a newline in a name would start a line of its own.
    for s in skipped {
        text.push_str(&format!("{}\n", printable(s)));
    }
    for n in &report.notes {
        text.push_str(&format!("{}\n", printable(format!("note: {n}"))));
    }
    let printed = if args.json {
        say(&serde_json::to_string_pretty(&report.to_json())?)
    } else {
        say(&text)
    };
    // A reader that stopped reading (`| grep -q`) is not a failure to compare: the exit
    // status still says what the comparison found, not 2.
    if let Err(e) = printed
        && !crate::broken_pipe(&e)
    {
        return Err(e);
    }
    if let Some(dir) = &args.plot {
        // Each row its own files: two names can map to one stem (`a/b` and `a_b`, or a type
        // named `all types` and the whole mix's row), and one must not overwrite the other.
        let mut used = std::collections::HashSet::new();
        for r in &report.rows {
            if let Outcome::Compared(c) = &r.outcome {
                let name = match r.metric {
                    Metric::Mean => r.scope().to_string(),
                    m => format!("{}-{}", r.scope(), m.to_string().replace(' ', "-")),
                };
                let stem = slipstream_bench::file_stem(&name.replace(' ', "-"));
                let stem = (1..)
                    .map(|k| match k {
                        1 => stem.clone(),
                        k => format!("{stem}-{k}"),
                    })
                    .find(|s| !used.contains(s))
                    .unwrap_or(stem);
                used.insert(stem.clone());
                // Drawn as the table shows it: a TPS row, compared as milliseconds per
                // transaction, in TPS (its ratio the table's B / A), in the row's words.
                let (c, quantity) = match r.metric {
                    Metric::Tps => (c.as_ref().clone().reciprocal(1000.0), "TPS"),
                    Metric::P99 => (c.as_ref().clone(), "p99 (ms)"),
                    _ => (c.as_ref().clone(), "mean (ms)"),
                };
                plot_as(dir, &stem, &c, quantity, &r.verdict_text())?;
            }
        }
        eprintln!("wrote figures into {}", dir.display());
    }
    let compared = report
        .rows
        .iter()
        .any(|r| !matches!(r.outcome, Outcome::Skipped(_)));
    anyhow::ensure!(compared, "nothing could be compared (see the lines above)");
    let tripped: Vec<String> = report
        .rows
        .iter()
        .filter(|r| args.fail_if.iter().any(|g| trips(*g, r)))
        .map(|r| format!("{} {}: {}", r.scope(), r.metric, r.verdict_text()))
        .collect();
    if !tripped.is_empty() {
        eprintln!(
            "{}",
            printable(format!(
                "slipstream: --fail-if met by: {}",
                tripped.join("; ")
            ))
        );
        return Ok(ExitCode::from(EXIT_GATE));
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether `row` meets `gate`.
fn trips(gate: Gate, row: &Row) -> bool {
    match gate {
        Gate::Slower => row.direction() == Some(Direction::Worse),
        Gate::Faster => row.direction() == Some(Direction::Better),
        Gate::Different => row.direction().is_some(),
        Gate::Undecided => row.verdict() == Some(&Verdict::Undecided),
        Gate::Unreliable => matches!(row.verdict(), None | Some(Verdict::Unreliable(_))),
    }
}

/// Whether a command line (`std::env::args_os()`) holds a `--` after its `compare`: clap
/// drops one with nothing after it, which would make `compare a1.json a2.json --` (B's files
/// an empty variable or glob) read as one run a side.
pub fn double_dash_given(args: impl IntoIterator<Item = std::ffi::OsString>) -> bool {
    args.into_iter()
        .skip_while(|a| a != "compare")
        .any(|a| a == "--")
}

/// Splits the positional arguments into side A's and side B's files, expanding globs.
/// `double_dash`: the command line gave a `--` (see [`double_dash_given`]).
fn sides(
    a: &[String],
    b: &[String],
    double_dash: bool,
) -> anyhow::Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    if let Some(opt) = b.iter().find(|f| f.starts_with("--")) {
        anyhow::bail!(
            "`{opt}` comes after `--`, where only B's files go: put options before the `--`"
        );
    }
    if b.is_empty() && double_dash && a.len() > 1 {
        anyhow::bail!(
            "no B side: nothing came after `--`, where B's files go (a variable or a glob that \
             expanded to nothing?); A's {} files are not compared with each other",
            a.len()
        );
    }
    let (a, b) = if b.is_empty() {
        // clap drops a `--` with nothing after it, so this also reads `a.json --`: say what
        // is missing (B's files), which holds either way.
        match a {
            [x, y] => (vec![x.clone()], vec![y.clone()]),
            [_] => anyhow::bail!(
                "one file and no B side to compare it with: give B's files after `--` \
                 (slipstream compare a.json -- b.json), or two files for one run a side"
            ),
            _ => anyhow::bail!(
                "{} files and no B side: with more than one file on a side, separate A's files \
                 from B's with `--` (slipstream compare a1.json a2.json -- b1.json b2.json)",
                a.len()
            ),
        }
    } else {
        (a.to_vec(), b.to_vec())
    };
    Ok((expand(&a)?, expand(&b)?))
}

/// Each argument as a path, or, if it is a glob (`*`, `?`) that names no file itself, the
/// files it matches in its directory, sorted.
fn expand(args: &[String]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for arg in args {
        let path = Path::new(arg);
        if path.exists() || !arg.contains(['*', '?']) {
            out.push(path.to_path_buf());
            continue;
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let pattern = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        anyhow::ensure!(
            !dir.to_string_lossy().contains(['*', '?']),
            "`{arg}`: only the file name may hold a wildcard"
        );
        let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| anyhow::anyhow!("`{arg}`: could not list {}: {e}", dir.display()))?
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_str().is_some_and(|n| matches(pattern, n)))
            .map(|e| {
                if path.parent().is_some_and(|p| !p.as_os_str().is_empty()) {
                    e.path()
                } else {
                    PathBuf::from(e.file_name())
                }
            })
            .collect();
        anyhow::ensure!(!found.is_empty(), "no file matches `{arg}`");
        found.sort();
        out.extend(found);
    }
    Ok(out)
}

/// Shell-style matching of `*` (any run) and `?` (one character).
fn matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Classic two-pointer match with backtracking to the last `*`.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

fn header(
    a_files: &[PathBuf],
    b_files: &[PathBuf],
    ra: &[BenchRun],
    rb: &[BenchRun],
    report: &Report,
    model: Model,
) -> String {
    let side = |files: &[PathBuf], runs: &[BenchRun]| -> String {
        let tps: f64 = runs.iter().map(BenchRun::tps).sum::<f64>() / runs.len() as f64;
        let names = if files.len() <= 3 {
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            format!(
                "{} .. {}",
                files[0].display(),
                files[files.len() - 1].display()
            )
        };
        format!("{} run(s) ({names}; mean {tps:.0} TPS)", runs.len())
    };
    let mut text = format!(
        "A = {}\nB = {}\nunit: {}; ROPE: B/A within ±{}%\n",
        side(a_files, ra),
        side(b_files, rb),
        match report.unit {
            slipstream_bench::compare::Unit::Run => "run (one value per run)".to_string(),
            u => format!(
                "{u}; model: {}",
                match model {
                    Model::Gamma => "gamma",
                    Model::Lognormal => "lognormal",
                }
            ),
        },
        report.rope * 100.0,
    );
    for w in &report.warnings {
        text.push_str(&printable(format!("warning: {w}")));
        text.push('\n');
    }
    text
}

/// The table of compared rows, and one line per skipped row.
fn render(report: &Report) -> (Table, Vec<String>) {
    let mut table = Table::new(&[
        "transaction",
        "metric",
        "A",
        "B",
        "B / A (95% HDI)",
        "P(B worse)",
        "in ROPE",
        "verdict",
    ]);
    let mut skipped = Vec::new();
    for r in &report.rows {
        match &r.outcome {
            Outcome::Compared(c) => {
                // Throughput is compared as ms per transaction (larger is slower); show TPS.
                let (a, b, ratio) = if r.metric == Metric::Tps {
                    (
                        1000.0 / c.a.mean,
                        1000.0 / c.b.mean,
                        (1.0 / c.ratio.mean, 1.0 / c.ratio.hdi.1, 1.0 / c.ratio.hdi.0),
                    )
                } else {
                    (
                        c.a.mean,
                        c.b.mean,
                        (c.ratio.mean, c.ratio.hdi.0, c.ratio.hdi.1),
                    )
                };
                table.row(vec![
                    r.scope().into(),
                    r.metric.to_string(),
                    format!("{a:.3}"),
                    format!("{b:.3}"),
                    format!("{:.3} ({:.3} .. {:.3})", ratio.0, ratio.1, ratio.2),
                    format!("{:.3}", c.p_b_slower),
                    format!("{:.0}%", c.in_rope * 100.0),
                    r.verdict_text(),
                ]);
            }
            Outcome::Rates(x) => {
                let pct = |(f, n): (u64, u64)| 100.0 * f as f64 / n.max(1) as f64;
                table.row(vec![
                    r.scope().into(),
                    r.metric.to_string(),
                    format!("{:.2}%", pct(x.a)),
                    format!("{:.2}%", pct(x.b)),
                    format!(
                        "{:+.2} pp ({:+.2} .. {:+.2})",
                        x.diff.mean * 100.0,
                        x.diff.hdi.0 * 100.0,
                        x.diff.hdi.1 * 100.0
                    ),
                    format!("{:.3}", x.p_b_more),
                    String::new(),
                    r.verdict_text(),
                ]);
            }
            Outcome::Skipped(why) => {
                skipped.push(format!("{} {}: not compared: {why}", r.scope(), r.metric))
            }
        }
    }
    (table, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_like_a_shell() {
        assert!(matches("a-*.json", "a-1.json"));
        assert!(matches("a-?.json", "a-1.json"));
        assert!(!matches("a-?.json", "a-10.json"));
        assert!(matches("*", "x"));
        assert!(!matches("b-*.json", "a-1.json"));
        assert!(matches("*-*-x", "a-b-c-x"));
    }

    #[test]
    fn sides_need_a_double_dash_beyond_two_files() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let (a, b) = sides(&s(&["a.json", "b.json"]), &[], false).unwrap();
        // `a.json b.json --`: two of A's files and an empty B side, not one run a side.
        let e = sides(&s(&["a.json", "b.json"]), &[], true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nothing came after `--`"), "{e}");
        assert!(double_dash_given(
            ["slipstream", "compare", "a", "b", "--"].map(Into::into)
        ));
        assert!(!double_dash_given(
            ["slipstream", "compare", "a", "b"].map(Into::into)
        ));
        assert_eq!((a.len(), b.len()), (1, 1));
        let e = sides(&s(&["a1", "a2", "b1"]), &[], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("separate A's files from B's with `--`"), "{e}");
        // `compare a.json --` reaches here as one file and no B side (clap drops the `--`):
        // it said "1 file(s) and no `--`", to a user who gave one.
        let e = sides(&s(&["a1"]), &[], true).unwrap_err().to_string();
        assert!(
            e.contains("no B side") && e.contains("after `--`") && !e.contains("no `--`"),
            "{e}"
        );
        let e = sides(&s(&["a1"]), &s(&["b1", "--json"]), true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("put options before the `--`"), "{e}");
        let e = expand(&s(&["/nonexistent-dir-p20/*.json"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("could not list"), "{e}");
    }
}

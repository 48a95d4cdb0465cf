//! Combining the results of several load generators into one (Swingbench's coordinator,
//! HammerDB's primary and replicas): `slipstream report --merge`.
//!
//! What adds and how:
//!
//! - counts (successes, failures by code, censored, statements, arrivals, late) add;
//! - latency histograms add exactly (HDR, 3 significant digits), and every percentile is read
//!   from the sum, never averaged;
//! - sufficient statistics add, so means and variances are exact;
//! - intervals are aligned by wall-clock start: a part that started k intervals after the
//!   earliest one has its series shifted by k (rounded to the nearest interval), then added;
//! - completions after a part's own window add into `after_window`, which keeps no times,
//!   even where another part's window still ran (the docs ask generators to start together);
//! - the measured window is the span from the earliest start to the latest end;
//! - users add; open-loop rates add;
//! - stages add by position, each from the earliest part's start to the latest part's end.
//!   The parts must have run the same phases: as many stages, of the same names and lengths,
//!   each part's load the same multiple of the others' in every stage; only a part stopped
//!   early (`interrupted`) may have fewer stages and a shorter last one.
//!
//! Runs of different workloads, mixes, interval lengths or load models, or against servers of
//! different versions, are refused, and so are
//! open-loop runs that count late starts at different thresholds (`--late-after`), version-1
//! files (they hold no histograms to add) and, beside files with stages, files without.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use slipstream_stats::Suff;

use crate::histogram::{self, decode, encode};
use crate::phases::{StageResult, StageTx};
use crate::recorder::{curve, percentiles};
use crate::run_result::{
    BenchRun, Interval, Intervals, LatencyStats, Load, MergedPart, RUN_SCHEMA_VERSION, Schedule,
    TxResult,
};

/// A part's start, in seconds after the earliest part's (`origin`).
pub(crate) fn offset_s(
    start: chrono::DateTime<chrono::FixedOffset>,
    origin: chrono::DateTime<chrono::FixedOffset>,
) -> f64 {
    (start - origin).num_microseconds().unwrap_or(0) as f64 / 1e6
}

/// A part's offset in whole intervals of `seconds`: where its series is placed in the merged
/// one (and so where its window ends on the merged time line, [`BenchRun::interval_span`]).
pub(crate) fn shift(offset_s: f64, seconds: f64) -> usize {
    (offset_s / seconds).round() as usize
}

/// Adds the runs of several load generators (label, run) into one result.
///
/// ```no_run
/// use slipstream_bench::BenchRun;
/// let a = BenchRun::read_json("a.json".as_ref())?;
/// let b = BenchRun::read_json("b.json".as_ref())?;
/// let all = slipstream_bench::merge(&[("a.json".into(), a), ("b.json".into(), b)])?;
/// all.write_json("all.json".as_ref())?;
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn merge(parts: &[(String, BenchRun)]) -> anyhow::Result<BenchRun> {
    let Some((first_label, first)) = parts.first() else {
        anyhow::bail!("no runs to merge");
    };
    for (label, r) in parts {
        anyhow::ensure!(
            r.workload == first.workload,
            "cannot merge runs of different workloads: {first_label} ran {:?}, {label} ran {:?}",
            first.workload,
            r.workload
        );
        anyhow::ensure!(
            r.intervals.seconds == first.intervals.seconds,
            "cannot merge {first_label} and {label}: their intervals are {} s and {} s long",
            first.intervals.seconds,
            r.intervals.seconds
        );
        anyhow::ensure!(
            std::mem::discriminant(&r.load) == std::mem::discriminant(&first.load),
            "cannot merge a closed-loop run with an open-loop one ({first_label}, {label})"
        );
        // A workload file is its workload: two versions of one file share a name and a mix
        // but not their SQL or key ranges. Parts with no hash (a library run, an Order Entry
        // run, an older file) have nothing to compare.
        let sha = |r: &BenchRun| r.context.as_ref().and_then(|c| c.workload_sha256.clone());
        if let (Some(a), Some(b)) = (sha(first), sha(r)) {
            anyhow::ensure!(
                a == b,
                "cannot merge runs of different workload files: {first_label} ran a file with SHA-256 {a} and {label} one with {b}; give every load generator the same file"
            );
        }
        // Load generators of one test load one server: parts against servers of other
        // versions loaded other servers, and the merged context would describe the first.
        // Parts with no version (a run without a database) have nothing to compare.
        let version = |r: &BenchRun| r.environment.server_version.clone();
        if let (Some(a), Some(b)) = (version(first), version(r)) {
            anyhow::ensure!(
                a == b,
                "cannot merge runs against different servers: {first_label} ran against PostgreSQL {a} and {label} against PostgreSQL {b}; merge load generators that loaded one server"
            );
        }
        // Servers of one version are still other servers. The system identifier tells
        // clusters apart (a primary and its physical standbys share one), the postmaster's
        // start time clusters copied from one data directory (which share the identifier
        // too), and a database of the server is its own data.
        let identity = |r: &BenchRun| {
            r.context.as_ref().and_then(|c| {
                Some((
                    c.system_identifier.clone()?,
                    c.started_at.clone()?,
                    c.database.clone()?,
                ))
            })
        };
        if let (Some((sa, ta, da)), Some((sb, tb, db))) = (identity(first), identity(r)) {
            anyhow::ensure!(
                sa == sb,
                "cannot merge runs against different servers: {first_label} ran against the cluster with system identifier {sa} and {label} against {sb}; merge load generators that loaded one server"
            );
            anyhow::ensure!(
                same_start(&ta, &tb),
                "cannot merge runs against different servers: {first_label} ran against a server started at {ta} and {label} against one started at {tb} (another copy of the same data directory, or the server restarted between them); merge load generators that loaded one server at the same time"
            );
            anyhow::ensure!(
                da == db,
                "cannot merge runs against different databases: {first_label} ran against database {da:?} and {label} against {db:?}; merge load generators that loaded one database"
            );
        }
        // The merged file states one mix; parts of two would make it state the first's.
        anyhow::ensure!(
            r.weights == first.weights,
            "cannot merge runs of different mixes: {first_label} ran {} and {label} ran {}; merge runs of one --mix",
            mix(&first.weights),
            mix(&r.weights)
        );
        let has_hist = r
            .transactions
            .iter()
            .all(|t| t.ok == 0 || !t.histogram.is_empty());
        anyhow::ensure!(
            has_hist,
            "{label} holds no latency histograms (a schema version 1 result?), so its percentiles cannot be added; re-run it with this slipstream (schema version {RUN_SCHEMA_VERSION})"
        );
    }
    // After the checks above: runs that cannot be merged at all are told so first.
    let labelled: Vec<(&str, &BenchRun)> = parts.iter().map(|(l, r)| (l.as_str(), r)).collect();
    crate::refuse_repeated_runs(&labelled)?;
    let starts: Vec<chrono::DateTime<chrono::FixedOffset>> = parts
        .iter()
        .map(|(label, r)| {
            chrono::DateTime::parse_from_rfc3339(&r.started_at).map_err(|e| {
                anyhow::anyhow!("{label}: started_at {:?} is not a time: {e}", r.started_at)
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let Some(&origin) = starts.iter().min() else {
        anyhow::bail!("no runs to merge");
    };
    anyhow::ensure!(
        first.intervals.seconds.is_finite() && first.intervals.seconds > 0.0,
        "{first_label}: its intervals are {} s long; a result's intervals have a positive length (a corrupt file?)",
        first.intervals.seconds
    );
    let seconds = first.intervals.seconds;
    let offsets_s: Vec<f64> = starts.iter().map(|s| offset_s(*s, origin)).collect();
    let shifts: Vec<usize> = offsets_s.iter().map(|o| shift(*o, seconds)).collect();
    // Load generators that ran together start within a run's length of each other (and a
    // minute of clock skew): a merge of runs further apart is a mistake, and its series
    // would be mostly empty intervals (from files days apart, gigabytes of them).
    let longest = parts
        .iter()
        .flat_map(|(_, r)| r.intervals.per_transaction.values().map(Vec::len))
        .max()
        .unwrap_or(0);
    let allowed = longest + (60.0 / seconds).ceil() as usize;
    for ((label, _), (shift, offset)) in parts.iter().zip(shifts.iter().zip(&offsets_s)) {
        anyhow::ensure!(
            *shift <= allowed,
            "cannot merge runs that did not run together: {label} started {offset:.0} s after the earliest; merge combines load generators that ran at the same time"
        );
    }

    let mut out = first.clone();
    out.schema_version = RUN_SCHEMA_VERSION;
    out.started_at = parts[starts.iter().position(|s| *s == origin).unwrap_or(0)]
        .1
        .started_at
        .clone();
    out.users = sum(parts, "users", |r| r.users as u64)? as usize;
    out.load = match first.load {
        Load::Closed => Load::Closed,
        Load::Open { .. } => Load::Open {
            rate: parts
                .iter()
                .map(|(_, r)| match r.load {
                    Load::Open { rate } => rate,
                    Load::Closed => 0.0,
                })
                .sum(),
        },
    };
    out.measured_s = parts
        .iter()
        .zip(&offsets_s)
        .map(|((_, r), o)| o + r.measured_s)
        .fold(0.0, f64::max);
    out.duration_s = parts.iter().map(|(_, r)| r.duration_s).fold(0.0, f64::max);
    out.warmup_s = parts.iter().map(|(_, r)| r.warmup_s).fold(0.0, f64::max);
    out.grace_s = parts.iter().map(|(_, r)| r.grace_s).fold(0.0, f64::max);
    out.interrupted = parts.iter().any(|(_, r)| r.interrupted);
    out.unfinished = sum(parts, "unfinished", |r| r.unfinished)?;
    for (_, r) in parts {
        if r.think != out.think {
            out.think = "differs between the merged runs".into();
        }
        if r.intra_think != out.intra_think {
            out.intra_think = "differs between the merged runs".into();
        }
    }
    out.merged_from = parts
        .iter()
        .flat_map(|(label, r)| {
            if r.merged_from.is_empty() {
                vec![MergedPart {
                    label: label.clone(),
                    started_at: r.started_at.clone(),
                    users: r.users,
                    seed: r.seed,
                    measured_s: r.measured_s,
                    host: r.environment.cpu_model.clone().unwrap_or_default(),
                    interrupted: r.interrupted,
                }]
            } else {
                r.merged_from.clone()
            }
        })
        .collect();
    if let Some(ctx) = out.context.as_mut() {
        ctx.warnings.push(format!(
            "merged result: this context is {first_label}'s; each part's own is in its file"
        ));
    }
    // Within the start skew allowed above, parts may still not have overlapped at all (one
    // run after the other): their users never ran at once, and the TPS is over a span each
    // part was idle for part of. Said in the result, which every report shows.
    let ends = parts
        .iter()
        .zip(&offsets_s)
        .map(|((l, r), o)| (l, o + r.measured_s));
    let starts = parts.iter().zip(&offsets_s).map(|((l, _), o)| (l, *o));
    if let (Some((ended, end)), Some((started, start))) = (
        ends.min_by(|a, b| a.1.total_cmp(&b.1)),
        starts.max_by(|a, b| a.1.total_cmp(&b.1)),
    ) && start >= end
    {
        out.context
            .get_or_insert_with(Default::default)
            .warnings
            .push(format!(
                "{started} started {:.1} s after {ended} ended: these parts never ran together, so \
             their users never ran at once and the TPS is over a span each was idle for part \
             of; merge load generators that ran at the same time",
                start - end
            ));
    }

    // Transaction types by name, in the order first seen.
    let mut weights: Vec<(String, u32)> = Vec::new();
    for (_, r) in parts {
        for (name, w) in &r.weights {
            if !weights.iter().any(|(n, _)| n == name) {
                weights.push((name.clone(), *w));
            }
        }
    }
    out.transactions = weights
        .iter()
        .map(|(name, weight)| merge_type(name, *weight, parts))
        .collect::<anyhow::Result<_>>()?;
    out.weights = weights;

    let mut per_transaction = BTreeMap::new();
    let mut after_window = BTreeMap::new();
    for (name, _) in &out.weights {
        let series: Vec<(usize, &[Interval])> = parts
            .iter()
            .zip(&shifts)
            .filter_map(|((_, r), shift)| {
                Some((*shift, r.intervals.per_transaction.get(name)?.as_slice()))
            })
            .collect();
        per_transaction.insert(name.clone(), add_series(&series, name)?);
        let after: Vec<&Interval> = parts
            .iter()
            .filter_map(|(_, r)| r.intervals.after_window.get(name))
            .collect();
        if !after.is_empty() {
            after_window.insert(name.clone(), add_intervals(&after, name)?);
        }
    }
    let lag: Vec<(usize, &[Interval])> = parts
        .iter()
        .zip(&shifts)
        .map(|((_, r), shift)| (*shift, r.intervals.schedule_lag.as_slice()))
        .collect();
    out.intervals = Intervals {
        seconds: first.intervals.seconds,
        per_transaction,
        after_window,
        schedule_lag: add_series(&lag, "the schedule lag")?,
    };
    out.schedule = merge_schedule(parts)?;
    out.stages = merge_stages(parts, &offsets_s)?;
    Ok(out)
}

fn merge_type(name: &str, weight: u32, parts: &[(String, BenchRun)]) -> anyhow::Result<TxResult> {
    let mut t = TxResult {
        name: name.to_string(),
        weight,
        ok: 0,
        failed: 0,
        failures: BTreeMap::new(),
        failure_messages: BTreeMap::new(),
        censored: 0,
        statements: Default::default(),
        latency_stats: LatencyStats::default(),
        latency_ms: Default::default(),
        percentile_curve: Vec::new(),
        histogram: String::new(),
    };
    let mut hist = histogram::new();
    for (label, r) in parts {
        let Some(p) = r.transactions.iter().find(|p| p.name == name) else {
            continue;
        };
        let what = |field: &str| format!("{field} of {name} in {label}");
        add(&mut t.ok, p.ok, &what("ok"))?;
        add(&mut t.failed, p.failed, &what("failed"))?;
        add(&mut t.censored, p.censored, &what("censored"))?;
        for (code, n) in &p.failures {
            add(
                t.failures.entry(code.clone()).or_default(),
                *n,
                &what(&format!("failures {code}")),
            )?;
        }
        for (code, m) in &p.failure_messages {
            t.failure_messages
                .entry(code.clone())
                .or_insert_with(|| m.clone());
        }
        t.statements = t
            .statements
            .checked_add(&p.statements)
            .ok_or_else(|| overflow(&what("statements")))?;
        check_suff(
            &t.latency_stats.sufficient,
            &p.latency_stats.sufficient,
            &what("latency"),
        )?;
        t.latency_stats.merge(&p.latency_stats);
        let h = decode(&p.histogram, &format!("{name} in {label}"))?;
        histogram::add(&mut hist, &h)?;
    }
    t.latency_ms = percentiles(&hist, t.latency_stats.mean());
    t.percentile_curve = curve(&hist);
    t.histogram = encode(&hist);
    Ok(t)
}

/// Adds `n` to `total`; an overflow is a corrupt file's, named by `what`.
fn add(total: &mut u64, n: u64, what: &str) -> anyhow::Result<()> {
    *total = total.checked_add(n).ok_or_else(|| overflow(what))?;
    Ok(())
}

fn overflow(what: &str) -> anyhow::Error {
    anyhow::anyhow!("the merged {what} overflows a count: a corrupt file?")
}

/// Whether `o`'s count adds to `total`'s (`Suff::merge` adds unchecked).
fn check_suff(total: &Suff, o: &Suff, what: &str) -> anyhow::Result<()> {
    total.n.checked_add(o.n).ok_or_else(|| overflow(what))?;
    Ok(())
}

/// The parts' `field`, added with [`add`].
fn sum(
    parts: &[(String, BenchRun)],
    what: &str,
    field: impl Fn(&BenchRun) -> u64,
) -> anyhow::Result<u64> {
    let mut total = 0;
    for (label, r) in parts {
        add(&mut total, field(r), &format!("{what} in {label}"))?;
    }
    Ok(total)
}

/// Adds series shifted by whole intervals.
fn add_series(series: &[(usize, &[Interval])], what: &str) -> anyhow::Result<Vec<Interval>> {
    let len = series
        .iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(shift, s)| shift + s.len())
        .max()
        .unwrap_or(0);
    let mut slots: Vec<Vec<&Interval>> = vec![Vec::new(); len];
    for (shift, s) in series {
        for (i, iv) in s.iter().enumerate() {
            slots[shift + i].push(iv);
        }
    }
    slots.iter().map(|ivs| add_intervals(ivs, what)).collect()
}

fn add_intervals(ivs: &[&Interval], what: &str) -> anyhow::Result<Interval> {
    let mut sufficient = Suff::default();
    let mut failed = 0;
    let mut hist = histogram::new();
    for iv in ivs {
        check_suff(&sufficient, &iv.sufficient, what)?;
        sufficient.merge(&iv.sufficient);
        add(&mut failed, iv.failed, what)?;
        anyhow::ensure!(
            iv.sufficient.n == 0 || !iv.histogram.is_empty(),
            "an interval of {what} holds no histogram (a schema version 1 result?); re-run it with this slipstream"
        );
        histogram::add(&mut hist, &decode(&iv.histogram, what)?)?;
    }
    Ok(interval(sufficient, failed, &hist))
}

pub(crate) fn interval(sufficient: Suff, failed: u64, hist: &Histogram<u64>) -> Interval {
    let q = |q: f64| {
        if hist.is_empty() {
            0.0
        } else {
            hist.value_at_quantile(q) as f64 / 1e3
        }
    };
    Interval {
        sufficient,
        failed,
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        histogram: encode(hist),
    }
}

fn merge_schedule(parts: &[(String, BenchRun)]) -> anyhow::Result<Option<Schedule>> {
    let mut out: Option<Schedule> = None;
    let mut hist = histogram::new();
    let mut first = "";
    for (label, r) in parts {
        let Some(s) = &r.schedule else { continue };
        if let Some(o) = &out {
            // Late counts taken at two thresholds add up to a count at neither.
            anyhow::ensure!(
                o.late_after_ms == s.late_after_ms,
                "cannot merge {first} and {label}: they count a start as late after {} ms and after {} ms (--late-after); run the generators with the same --late-after",
                o.late_after_ms,
                s.late_after_ms
            );
        } else {
            first = label;
        }
        histogram::add(
            &mut hist,
            &decode(&s.lag_histogram, &format!("the schedule lag in {label}"))?,
        )?;
        let o = out.get_or_insert_with(|| Schedule {
            arrivals: 0,
            late: 0,
            late_after_ms: s.late_after_ms,
            lag_ms: Default::default(),
            lag_histogram: String::new(),
            never_started: Some(0),
        });
        add(&mut o.arrivals, s.arrivals, &format!("arrivals in {label}"))?;
        add(&mut o.late, s.late, &format!("late arrivals in {label}"))?;
        // Unknown in any part (an older file), unknown in the whole.
        o.never_started = match (o.never_started, s.never_started) {
            (Some(a), Some(b)) => Some(a.checked_add(b).ok_or_else(|| {
                anyhow::anyhow!("the never-started arrivals in {label} overflow a count when added")
            })?),
            _ => None,
        };
    }
    if let Some(o) = out.as_mut() {
        o.lag_ms = percentiles(&hist, hist.mean() / 1e3);
        o.lag_histogram = encode(&hist);
    }
    Ok(out)
}

/// The parts' stages added by position. Parts must have run the same phases: a stage's name
/// differing between them is an error. Each stage runs from the earliest part's start to the
/// latest part's end (seconds from the merged start); users and rates add.
fn merge_stages(
    parts: &[(String, BenchRun)],
    offsets_s: &[f64],
) -> anyhow::Result<Vec<StageResult>> {
    let count = parts.iter().map(|(_, r)| r.stages.len()).max().unwrap_or(0);
    // A part with fewer stages (a Ctrl-C cut it short) has all its transactions in those; a
    // file with none (written before stages were saved) would leave its transactions out of
    // the merged stages, which would then fall short of the totals.
    for (label, r) in parts {
        anyhow::ensure!(
            !r.stages.is_empty() || count == 0,
            "{label} holds no stages (written before they were saved), so the merged stages would leave its transactions out; re-run it with this slipstream"
        );
    }
    check_phases(parts)?;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let mut merged: Option<StageResult> = None;
        // Per type, in the order first seen: (successes' histogram, their latency sum in ms).
        let mut sums: Vec<(Histogram<u64>, f64)> = Vec::new();
        for ((label, r), offset) in parts.iter().zip(offsets_s) {
            let Some(s) = r.stages.get(i) else { continue };
            let m = merged.get_or_insert_with(|| StageResult {
                index: i,
                name: s.name.clone(),
                start_s: offset + s.start_s,
                end_s: offset + s.end_s,
                users: s.users.map(|_| 0),
                rate: s.rate.map(|_| 0.0),
                transactions: Vec::new(),
            });
            anyhow::ensure!(
                m.name == s.name,
                "cannot merge the stages of runs with different phases: stage {i} is {:?} in one part and {:?} in {label}",
                m.name,
                s.name
            );
            m.start_s = m.start_s.min(offset + s.start_s);
            m.end_s = m.end_s.max(offset + s.end_s);
            if let (Some(total), Some(u)) = (m.users.as_mut(), s.users) {
                *total = total
                    .checked_add(u)
                    .ok_or_else(|| overflow(&format!("users of {} in {label}", s.name)))?;
            }
            if let (Some(total), Some(r)) = (m.rate.as_mut(), s.rate) {
                *total += r;
            }
            for tx in &s.transactions {
                let what = format!("{} in {} of {label}", tx.name, s.name);
                anyhow::ensure!(
                    tx.ok == 0 || !tx.histogram.is_empty(),
                    "{label} holds no latency histograms for its stages (written before they were saved), so its stages cannot be added; re-run it with this slipstream"
                );
                let j = match m.transactions.iter().position(|t| t.name == tx.name) {
                    Some(j) => j,
                    None => {
                        m.transactions.push(StageTx {
                            name: tx.name.clone(),
                            ok: 0,
                            failed: 0,
                            latency_ms: Default::default(),
                            histogram: String::new(),
                            drained: Some(0),
                        });
                        sums.push((histogram::new(), 0.0));
                        m.transactions.len() - 1
                    }
                };
                let t = &mut m.transactions[j];
                add(&mut t.ok, tx.ok, &format!("ok of {what}"))?;
                add(&mut t.failed, tx.failed, &format!("failed of {what}"))?;
                // Each part's drain stays in the stage that part's window ended in. A part
                // that does not say (an older file) is read as it always was, its drain all in
                // its last stage listed (`StageTx::ok_in_window`): left unsaid, the merged
                // stage fell back to that reading for every part, and a part stopped early had
                // its drain taken off a stage it never ran.
                let last = i + 1 == r.stages.len();
                let n = tx.drained.unwrap_or_else(|| {
                    let after = r.intervals.after_window.get(&tx.name);
                    (if last {
                        after.map_or(0, |a| a.sufficient.n)
                    } else {
                        0
                    })
                    .min(tx.ok)
                });
                t.drained = Some(
                    t.drained
                        .unwrap_or(0)
                        .checked_add(n)
                        .ok_or_else(|| overflow(&format!("drained of {what}")))?,
                );
                let (hist, sum_ms) = &mut sums[j];
                histogram::add(hist, &decode(&tx.histogram, &what)?)?;
                *sum_ms += tx.latency_ms.mean * tx.ok as f64;
            }
        }
        if let Some(mut m) = merged {
            for (t, (hist, sum_ms)) in m.transactions.iter_mut().zip(&sums) {
                let mean = if t.ok > 0 { sum_ms / t.ok as f64 } else { 0.0 };
                t.latency_ms = percentiles(hist, mean);
                t.histogram = encode(hist);
            }
            out.push(m);
        }
    }
    Ok(out)
}

/// Two stage lengths this close (seconds) are one length: both come from the same parsed
/// `--stage` duration, so only float rounding separates them.
const SAME_LENGTH_S: f64 = 1e-3;

/// Refuses parts that did not run the same phases, naming both files and the difference:
/// another number of stages, a stage of another length, or a load that does not rise and
/// fall with the others' (each part's users or rate must be the same multiple of the
/// reference part's in every stage, so a bigger load generator merges with a smaller one).
/// A part stopped early (`interrupted`) may have fewer stages and a shorter last one; a
/// merged result's stages span its parts' start skew, so their lengths are not compared.
fn check_phases(parts: &[(String, BenchRun)]) -> anyhow::Result<()> {
    let Some((ref_label, reference)) = parts
        .iter()
        .find(|(_, r)| !r.interrupted)
        .or_else(|| parts.first())
    else {
        return Ok(());
    };
    let plural = |n: usize| if n == 1 { "stage" } else { "stages" };
    for (label, r) in parts {
        if std::ptr::eq(r, reference) {
            continue;
        }
        let differ = |what: String| {
            anyhow::anyhow!(
                "cannot merge {ref_label} and {label}: they did not run the same phases ({what}); merge load generators run with the same --stage, --ramp-up and --duration"
            )
        };
        let (n_ref, n) = (reference.stages.len(), r.stages.len());
        let fewer = match n.cmp(&n_ref) {
            std::cmp::Ordering::Less => Some(r),
            std::cmp::Ordering::Greater => Some(reference),
            std::cmp::Ordering::Equal => None,
        };
        if fewer.is_some_and(|f| !f.interrupted) {
            return Err(differ(format!(
                "{ref_label} ran {n_ref} {}, {label} {n} {}, and the one with fewer was not stopped early",
                plural(n_ref),
                plural(n)
            )));
        }
        let common = n.min(n_ref);
        let merged = !r.merged_from.is_empty() || !reference.merged_from.is_empty();
        for i in 0..common {
            let (a, b) = (&reference.stages[i], &r.stages[i]);
            let last_cut = |run: &BenchRun| run.interrupted && i + 1 == run.stages.len();
            let (len_a, len_b) = (a.end_s - a.start_s, b.end_s - b.start_s);
            if !merged
                && !last_cut(reference)
                && !last_cut(r)
                && (len_a - len_b).abs() > SAME_LENGTH_S
            {
                return Err(differ(format!(
                    "{} lasted {} s in {ref_label} and {} s in {label}",
                    a.name,
                    seconds(len_a),
                    seconds(len_b)
                )));
            }
            // Against the first stage: the same multiple of the reference's load in each.
            let (a0, b0) = (&reference.stages[0], &r.stages[0]);
            let load = |s: &StageResult| s.users.map(|u| u as f64).or(s.rate);
            let (Some(la), Some(lb), Some(la0), Some(lb0)) = (load(a), load(b), load(a0), load(b0))
            else {
                continue;
            };
            if (la * lb0 - lb * la0).abs() > 1e-9 * (la * lb0).abs().max(lb * la0).abs() {
                let unit = if a.users.is_some() {
                    "users"
                } else {
                    "arrivals/s (rate)"
                };
                return Err(differ(format!(
                    "{} has {la} {unit} where {} has {la0} in {ref_label}, but {lb} where {} has {lb0} in {label}; each part's load must be the same multiple of the other's in every stage",
                    a.name, a0.name, b0.name
                )));
            }
        }
    }
    Ok(())
}

/// Seconds to the millisecond, without trailing zeros (`0.3`, `60`).
fn seconds(s: f64) -> f64 {
    (s * 1e3).round() / 1e3
}

/// A mix as `--mix` writes it: `name=weight,...`.
fn mix(weights: &[(String, u32)]) -> String {
    weights
        .iter()
        .map(|(name, w)| format!("{name}={w}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether two contexts' `started_at` name one postmaster start. Compared as instants when
/// both read as one: RFC 3339 (written since the context stopped following the session's
/// `TimeZone` and `DateStyle`), or PostgreSQL's ISO text of a `timestamptz`
/// (`2026-11-30 02:29:12.861008+00`, what earlier versions saved under the default
/// `DateStyle`), so parts saved by either merge; other text is compared as it is.
fn same_start(a: &str, b: &str) -> bool {
    let instant = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .or_else(|_| chrono::DateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f%#z"))
            .ok()
    };
    match (instant(a), instant(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a == b,
    }
}

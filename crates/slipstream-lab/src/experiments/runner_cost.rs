//! The bench runner measured: its own cost per transaction (a no-op transaction on one core),
//! and `SELECT 1` at 8 users against pgbench on the same server, interleaved.

use std::time::Duration;

use cpu_time::ProcessTime;

use crate::{Context, ExperimentResult, Summary, Table, noise_warning, paired_ratios};
use slipstream_bench::{
    self as bench, RunConfig, Session, Transaction, TxError, Workload, workload_file,
};

pub(crate) const TITLE: &str =
    "slipstream bench: the runner's own cost, and SELECT 1 at 8 users against pgbench";

/// The bookkeeping rate the runner must sustain on one core (issue 6's target).
const TARGET_PER_CORE: f64 = 1_000_000.0;
const USERS: usize = 8;
/// Client threads of both runners at 8 users: slipstream bench's `threads` and pgbench's `-j`.
/// Left to its default, the bench runner takes one thread per CPU, so on any machine but a
/// 2-CPU one it would measure against pgbench with a different number of client threads.
const THREADS: usize = 2;

struct Noop;

impl Transaction for Noop {
    async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
        Ok(())
    }
}

const SELECT_1: &str =
    "name = \"select-1\"\n[[transaction]]\nname = \"select-1\"\nsql = \"SELECT 1\"\n";

pub(crate) fn run(ctx: &Context) -> anyhow::Result<ExperimentResult> {
    let mut result = ExperimentResult::new("runner", TITLE, ctx.quick);
    // Many short rounds, each client first in every other one: this machine's speed drifts by
    // 10-20% over minutes, and a pair run back to back sees the same machine.
    let (secs, rounds) = if ctx.quick { (2, 1) } else { (5, 6) };
    let duration = Duration::from_secs(secs);
    result.param("seconds_per_run", secs);
    result.param("rounds", rounds);
    result.param("users", USERS);
    result.param("threads", THREADS);

    // The runner alone: every transaction is ready at once, so this is pure bookkeeping
    // (pick, two clock reads, a boxed future, a buffered sample) on a one-worker runtime.
    let one_core = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let noop = Workload::new("noop")
        .transaction("noop", 1, || Noop)
        .without_database();
    let mut config = RunConfig::new(None);
    config.users = 4;
    config.threads = 1;
    config.duration = duration;
    let cpu = ProcessTime::now();
    let r = one_core.block_on(bench::run(&noop, &config, std::future::pending::<()>()))?;
    let cpu = cpu.elapsed().as_secs_f64();
    drop(one_core);
    let done = r.transactions[0].ok as f64;
    // Failures are reported, never dropped in silence: a rate of the ok transactions alone
    // read as a clean run.
    let mut failed = vec![("no-op", super::bench_failures(&r))];
    let per_cpu_second = done / cpu.max(1e-9);

    // SELECT 1 through a workload file (what users run), against pgbench -M prepared.
    let select = workload_file::parse(SELECT_1, "select-1").map_err(anyhow::Error::msg)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut config = RunConfig::new(Some(ctx.url.clone()));
    config.users = USERS;
    config.threads = THREADS;
    config.duration = duration;
    let pgbench_args: Vec<String> = ["-M", "prepared", "-c"]
        .iter()
        .map(|a| a.to_string())
        .chain([USERS.to_string(), "-j".into(), THREADS.to_string()])
        .chain(["-T".into(), secs.to_string()])
        .collect();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut select_failed = (0, None);
    for round in 0..rounds {
        let mut ours_run = || -> anyhow::Result<f64> {
            let r = rt.block_on(bench::run(
                &select.workload,
                &config,
                std::future::pending::<()>(),
            ))?;
            let (n, first) = super::bench_failures(&r);
            select_failed.0 += n;
            select_failed.1 = select_failed.1.take().or(first);
            Ok(r.tps())
        };
        let theirs_run = || -> anyhow::Result<f64> {
            let p = super::pgbench::run(&ctx.url, "SELECT 1;\n", &pgbench_args)?;
            super::pgbench::tps(&p.stdout)
        };
        // Ours first in even rounds, as every experiment orders its sides.
        for ours_now in super::round_order(round, &[true, false]) {
            match ours_now {
                true => ours.push(ours_run()?),
                false => theirs.push(theirs_run()?),
            }
        }
    }
    failed.push(("SELECT 1", select_failed));
    let (o, t) = (Summary::of(&ours), Summary::of(&theirs));
    // paired_ratios(a, b) is b/a per pair: pgbench first gives ours/pgbench.
    let ratio = paired_ratios(&theirs, &ours);

    let mut table = Table::new(&["measurement", "transactions/s", "note"]);
    table.row(vec![
        "runner, no-op transaction, 1 core".into(),
        format!("{:.0}", done / r.measured_s.max(1e-9)),
        format!(
            "{:.0} per CPU-second = {:.2}x the 1,000,000/s target",
            per_cpu_second,
            per_cpu_second / TARGET_PER_CORE
        ),
    ]);
    table.row(vec![
        format!("slipstream bench, SELECT 1, {USERS} users, {THREADS} threads"),
        o.mean_sd(0),
        format!(
            "{:.2}x pgbench (median of {} paired rounds; {:.2} … {:.2})",
            ratio.p50, ratio.n, ratio.min, ratio.max
        ),
    ]);
    table.row(vec![
        format!("pgbench -M prepared -c {USERS} -j {THREADS}, SELECT 1"),
        t.mean_sd(0),
        String::new(),
    ]);
    result.table = table;
    result.ratios.insert(
        "noop_per_core_vs_target".into(),
        per_cpu_second / TARGET_PER_CORE,
    );
    result.ratios.insert("select1_vs_pgbench".into(), ratio.p50);
    result
        .notes
        .extend(noise_warning("SELECT 1 vs pgbench", &ratio, ctx.quick));
    for (what, (n, first)) in failed {
        if n > 0 {
            result.notes.push(format!(
                "slipstream bench, {what}: {n} transactions failed (left out of its rate, so the rate and the ratio are of a run with failures){}",
                first.map_or(String::new(), |m| format!("; the first: {m}"))
            ));
        }
    }
    result.notes.push(
        "Both clients run on this machine's 2 cores together with the server, so each takes CPU from the other's server; they run one after the other, never at once."
            .into(),
    );
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/lab.md: `runner` measures `SELECT 1` at 8 users against `pgbench -M prepared -c 8
    /// -j 2`; the two must run with the same client threads, and the result must say how many.
    /// Steps: the quick form on a fresh cluster; the `threads` parameter against the `-j` the
    /// pgbench row names. Before the fix the bench runner took its default (one thread per
    /// CPU, equal to pgbench's 2 only on a 2-CPU machine) and the result did not say it.
    #[test]
    fn both_runners_use_the_threads_the_result_names() {
        let cluster = slipstream_testkit::Cluster::start().unwrap();
        let ctx = Context {
            url: cluster.url(),
            quick: true,
        };
        let r = run(&ctx).unwrap();
        let threads = r.parameters.get("threads").and_then(|v| v.as_u64());
        let pgbench_row = r
            .table
            .rows
            .iter()
            .find(|row| row[0].starts_with("pgbench"))
            .expect("a pgbench row");
        let j = pgbench_row[0]
            .split_whitespace()
            .skip_while(|w| *w != "-j")
            .nth(1)
            .and_then(|n| n.trim_end_matches(',').parse::<u64>().ok());
        assert!(j.is_some(), "{pgbench_row:?}");
        assert_eq!(threads, j, "{:?}", r.parameters);
    }
}

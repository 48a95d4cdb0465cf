//! An A/B experiment on a server setting, judged by `slipstream compare`'s own code path
//! ([`compare_sides`], runs as the unit): a private cluster with durable commits, a
//! commit-per-insert workload with `synchronous_commit` on (A), off (B), and on again (A'),
//! interleaved over several rounds, one run per arm per round. B against A must come out
//! credibly different; the A/A control, A' against A, must not.

use std::time::Duration;

use slipstream_stats::{CompareSettings, Verdict};

use crate::{Context, ExperimentResult, Table};
use slipstream_bench::compare::{Metric, Outcome, Unit, compare_sides};
use slipstream_bench::{
    self as bench, BenchRun, RunConfig, Session, Transaction, TxError, Workload,
};

pub(crate) const TITLE: &str =
    "A/B on synchronous_commit, judged by the Bayesian comparison (and an A/A control)";

const USERS: usize = 2;

/// One insert, committed on its own: the commit is what `synchronous_commit` changes.
struct InsertCommit {
    synchronous: bool,
}

impl Transaction for InsertCommit {
    async fn init(&mut self, s: &mut Session) -> Result<(), TxError> {
        let sql = format!(
            "SET synchronous_commit TO {}",
            if self.synchronous { "on" } else { "off" }
        );
        s.client()?.batch_execute(&sql).await?;
        Ok(())
    }

    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        let v: i64 = s.user() as i64;
        s.client()?
            .execute("INSERT INTO ab_log (v) VALUES ($1)", &[&v])
            .await?;
        let c = s.count();
        c.inserts += 1;
        c.commits += 1;
        Ok(())
    }
}

fn workload(synchronous: bool) -> Workload {
    Workload::new("insert-commit")
        .transaction("insert-commit", 1, move || InsertCommit { synchronous })
}

pub(crate) fn run(ctx: &Context) -> anyhow::Result<ExperimentResult> {
    let mut result = ExperimentResult::new("ab", TITLE, ctx.quick);
    // Quick: three runs a side, the fewest the run unit is calibrated for (tests/drift.rs).
    let (rounds, millis) = if ctx.quick { (3, 1500) } else { (8, 5000) };
    result.param("rounds", rounds);
    result.param("milliseconds_per_run", millis);
    result.param("users", USERS);
    // A private cluster: durable commits (the testkit's default turns fsync off for speed),
    // and no change to the user's server.
    let cluster = slipstream_testkit::Cluster::builder()
        .setting("fsync", "on")
        .setting("synchronous_commit", "on")
        .start()?;
    let url = cluster.url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut c = slipstream_pg::connect(&url).await?;
        c.batch_execute("CREATE TABLE ab_log (id bigserial PRIMARY KEY, v bigint)")
            .await?;
        anyhow::Ok(())
    })?;
    let mut config = RunConfig::new(Some(url.clone()));
    config.users = USERS;
    config.duration = Duration::from_millis(millis);
    config.warmup = Duration::from_millis(500);
    config.seed = 1;
    // Every run starts from the same state (an empty table, no dirty buffers), and the three
    // arms are interleaved round by round, so drift of the machine (the VM's fsync latency
    // wanders by 10-20% over a minute) hits every arm alike. The unit of analysis is the run:
    // within-run intervals cannot see between-run drift, and an A/A control judged by them
    // came out "credibly different" in one try of three.
    let go = |sync: bool| -> anyhow::Result<BenchRun> {
        rt.block_on(async {
            let mut c = slipstream_pg::connect(&url).await?;
            c.batch_execute("TRUNCATE ab_log; CHECKPOINT").await?;
            bench::run(&workload(sync), &config, std::future::pending::<()>()).await
        })
    };
    let mut arms: [Vec<BenchRun>; 3] = Default::default();
    let mut failed = [(0, None), (0, None), (0, None)];
    for round in 0..rounds {
        for (arm, sync) in order(round) {
            let r = go(sync)?;
            let t = &r.transactions[0];
            anyhow::ensure!(t.ok > 0, "a run committed nothing: {:?}", t.failures);
            // Latencies are of committed transactions only: failures change what an arm
            // measured, and are said.
            let (n, first) = super::bench_failures(&r);
            failed[arm].0 += n;
            failed[arm].1 = failed[arm].1.take().or(first);
            arms[arm].push(r);
        }
    }
    let tps = arms
        .each_ref()
        .map(|runs| runs.iter().map(BenchRun::tps).sum::<f64>() / runs.len() as f64);

    let settings = CompareSettings::default();
    let mut table = Table::new(&[
        "comparison",
        "A mean ms",
        "B mean ms",
        "B / A (95% HDI)",
        "P(B slower)",
        "verdict",
        "expected",
    ]);
    let mut pass = true;
    for (label, other, want_different) in [
        ("synchronous_commit on (A) vs off (B)", &arms[1], true),
        ("A/A control: on (A) vs on again (A')", &arms[2], false),
    ] {
        let report = compare_sides(&arms[0], other, None, Unit::Run, &settings)?;
        // One type: its mean-latency row is the verdict.
        let row = report
            .rows
            .iter()
            .find(|r| r.name.is_some() && r.metric == Metric::Mean)
            .ok_or_else(|| anyhow::anyhow!("no mean-latency row in the comparison"))?;
        let c = match &row.outcome {
            Outcome::Compared(c) => c,
            Outcome::Skipped(why) => anyhow::bail!("{label}: not compared: {why}"),
            Outcome::Rates(_) => unreachable!("a mean-latency row holds a latency comparison"),
        };
        let different = c.verdict.is_different();
        pass &= different == want_different;
        table.row(vec![
            label.into(),
            format!("{:.3}", c.a.mean),
            format!("{:.3}", c.b.mean),
            format!(
                "{:.3} ({:.3} .. {:.3})",
                c.ratio.mean, c.ratio.hdi.0, c.ratio.hdi.1
            ),
            format!("{:.3}", c.p_b_slower),
            c.verdict.to_string(),
            if want_different {
                "credibly different"
            } else {
                "not credibly different"
            }
            .into(),
        ]);
        if let Verdict::Unreliable(why) = &c.verdict {
            result.notes.push(format!("{label}: {why}"));
        }
        for w in &report.warnings {
            result.notes.push(format!("{label}: {w}"));
        }
        if want_different {
            result
                .ratios
                .insert("sync_off_speedup".into(), 1.0 / c.ratio.mean);
        }
    }
    result.table = table;
    result.environment =
        super::private_clusters_environment("one, with fsync and synchronous_commit on");
    result.notes.push(format!(
        "{rounds} interleaved rounds (odd rounds in reverse; {rounds} runs a side); mean TPS: A {:.0}, B {:.0}, A' {:.0}; unit: runs (`slipstream compare`'s code path), ROPE ±{:.0}%",
        tps[0], tps[1], tps[2], settings.rope * 100.0
    ));
    for (arm, (n, first)) in ["A", "B", "A'"].iter().zip(failed) {
        if n > 0 {
            result.notes.push(format!(
                "{arm}: {n} transactions failed over its runs (left out of its latencies and TPS){}",
                first.map_or(String::new(), |m| format!("; the first: {m}"))
            ));
        }
    }
    if !pass {
        result
            .notes
            .push("an outcome differs from the expected one: see the verdicts".into());
    }
    Ok(result)
}

/// The arms round `round` runs, as (index, `synchronous_commit`): A, B, A' in even rounds,
/// reversed in odd ones ([`super::round_order`]). In one fixed order A always ran first on
/// the freshly started round and A' always right after B's burst of unsynced commits: a
/// difference of position between the A/A control's two sides that no number of rounds
/// cancels.
fn order(round: usize) -> Vec<(usize, bool)> {
    super::round_order(round, &[(0, true), (1, false), (2, true)])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The A/A control compares A with A': like every pair in the lab (docs/lab.md, "Ratios
    /// are paired"), its sides must run in alternating positions. Steps: the arms of the
    /// first two rounds. Before the fix every round ran A, B, A': A always first, A' always
    /// after B.
    #[test]
    fn the_control_arms_swap_places_every_other_round() {
        assert_eq!(order(0), [(0, true), (1, false), (2, true)]);
        assert_eq!(order(1), [(2, true), (1, false), (0, true)]);
    }
}

//! `failover`: writers run against a primary and its streaming standby; the primary stops
//! and the standby is promoted. How long each pool's writers go without a primary, and how
//! many of their statements fail: slipstream-pool's `PgPool` (`Role::Primary`) against
//! deadpool and bb8 over tokio-postgres given the same two hosts with
//! `target_session_attrs=read-write` (libpq's multi-host failover, as those clients do it).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use slipstream_testkit::Cluster;

use super::two_hosts::{
    Missing, Op, Ops, PEERS, PacedLoad, Peer, Route, binned, interleaved, median_ms, ms,
};
use crate::{Context, ExperimentResult, Series, Summary, Table};

pub(crate) const TITLE: &str = "Failover: the primary stops, its standby is promoted";

/// Tasks writing at once, and each peer's pool size: every writer has a connection.
const WRITERS: usize = 4;
/// A writer's pause after each statement, ok or failed.
const PACE: Duration = Duration::from_millis(2);
/// Takes a transaction id (refused on a standby) and says which server answered.
const WRITE: &str = "SELECT current_setting('port')::int4 FROM (SELECT txid_current()) AS w";
/// Width of the chart's bins.
const BIN: Duration = Duration::from_millis(10);

/// What one failover did to one pool's writers. Times are from the moment the primary was
/// told to stop.
struct Failover {
    /// The primary's fast shutdown, until its process exited.
    stopped: Duration,
    /// The standby's promotion, seen from a session on it.
    promoted: Duration,
    /// The first write the new primary took.
    first_write: Option<Duration>,
    /// When the last writer had its first write on the new primary.
    all_writers: Option<Duration>,
    /// Writes that failed from the stop on.
    failed: usize,
    /// Writes per second before the stop.
    rate_before: f64,
    /// Writes per second on the new primary over the run's last second.
    rate_after: f64,
    /// The first failure's message, as a writer saw it.
    first_error: Option<String>,
    /// Successful writes per [`BIN`], by bin start relative to the stop (ms).
    bins: Vec<(f64, f64)>,
}

/// Runs one failover for `peer` on a fresh primary and standby.
fn one(peer: Peer, before: Duration, after: Duration) -> anyhow::Result<Failover> {
    let mut primary = Cluster::start().context("starting the primary")?;
    let standby = primary
        .start_standby()
        .context("starting the standby (pg_basebackup)")?;
    let load = PacedLoad::begin(
        peer,
        Route::Writes,
        (primary.port(), standby.port()),
        WRITERS,
        WRITE,
        PACE,
    )?;
    let start = load.start;
    let mut promoter =
        load.block_on(slipstream_pg::connect(&super::without_tls(&standby.url())))?;
    std::thread::sleep(before);

    let fault = start.elapsed();
    primary.stop().context("stopping the primary")?;
    let stopped = start.elapsed() - fault;
    // pg_promote(true) polls for the end of recovery every 100 ms; asking the session every
    // millisecond dates the promotion closer.
    let promoted = load.block_on(async {
        promoter.simple_query("SELECT pg_promote(false)").await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let row = promoter
                .query_one("SELECT pg_is_in_recovery()", &[])
                .await?;
            if !row.get::<_, bool>(0)? {
                return anyhow::Ok(start.elapsed() - fault);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the standby was not promoted within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })?;
    std::thread::sleep(after);
    drop(promoter);
    let done = load.finish()?;
    Ok(summarize(
        &done,
        standby.port(),
        fault,
        stopped,
        promoted,
        after,
    ))
}

fn summarize(
    done: &[Ops],
    standby: u16,
    fault: Duration,
    stopped: Duration,
    promoted: Duration,
    after: Duration,
) -> Failover {
    let on_new = |o: &Op| o.port == Some(i32::from(standby)) && o.end >= fault;
    let firsts: Vec<Option<Duration>> = done
        .iter()
        .map(|(ops, _)| ops.iter().find(|o| on_new(o)).map(|o| o.end - fault))
        .collect();
    let all_ops = || done.iter().flat_map(|(ops, _)| ops.iter());
    let ok_between = |from: Duration, to: Duration| {
        all_ops()
            .filter(|o| o.port.is_some() && o.end >= from && o.end < to)
            .count() as f64
    };
    let end = fault + after + promoted;
    let last_second = end.saturating_sub(Duration::from_secs(1)).max(fault);
    // The successful writes from 200 ms before the stop.
    let bins = binned(
        all_ops().copied(),
        |o| o.port.is_some(),
        (fault - Duration::from_millis(200).min(fault), end),
        fault,
        BIN,
    );
    Failover {
        stopped,
        promoted,
        first_write: firsts.iter().flatten().min().copied(),
        all_writers: if firsts.iter().all(Option::is_some) {
            firsts.iter().flatten().max().copied()
        } else {
            None
        },
        // Both from the stop to the run's end: the writers go on until told to stop, and
        // what ends while the load is torn down is outside the window.
        failed: all_ops()
            .filter(|o| o.port.is_none() && o.end >= fault && o.end < end)
            .count(),
        // Over the time from the start to the stop (the pause, and the promoter's connect).
        rate_before: ok_between(Duration::ZERO, fault) / fault.as_secs_f64().max(1e-3),
        rate_after: all_ops()
            .filter(|o| on_new(o) && o.end >= last_second && o.end < end)
            .count() as f64
            / (end - last_second).as_secs_f64().max(1e-3),
        first_error: done.iter().find_map(|(_, e)| e.clone()),
        bins,
    }
}

pub(crate) fn run(ctx: &Context) -> anyhow::Result<ExperimentResult> {
    let (rounds, before, after) = if ctx.quick {
        (1, Duration::from_millis(500), Duration::from_secs(1))
    } else {
        (5, Duration::from_secs(1), Duration::from_secs(2))
    };
    let mut r = ExperimentResult::new("failover", TITLE, ctx.quick);
    r.param("rounds", rounds);
    r.param("writers", WRITERS);
    r.param("pace_ms", ms(PACE));

    // Each run on a fresh primary and standby.
    let runs = interleaved(rounds, |peer| one(peer, before, after))?;

    let median = |v: Vec<f64>| Summary::of(&v).p50;
    let mut table = Table::new(&[
        "pool + client",
        "writes/s before",
        "promoted, ms after the stop",
        "first write, ms after the promotion",
        "every writer back, ms after the promotion",
        "failed writes",
        "writes/s after",
    ]);
    for (i, &peer) in PEERS.iter().enumerate() {
        let f = &runs[i];
        let after_promotion = |d: fn(&Failover) -> Option<Duration>| {
            median_ms(
                f.iter().map(|f| d(f).map(|d| ms(d) - ms(f.promoted))),
                Missing::Never,
            )
        };
        let first = after_promotion(|f| f.first_write);
        let all = after_promotion(|f| f.all_writers);
        let promoted = median(f.iter().map(|f| ms(f.promoted)).collect());
        let failed = median(f.iter().map(|f| f.failed as f64).collect());
        table.row(vec![
            peer.name(Route::Writes).into(),
            format!("{:.0}", median(f.iter().map(|f| f.rate_before).collect())),
            format!("{promoted:.1}"),
            format!("{first:.1}"),
            format!("{all:.1}"),
            format!("{failed:.0}"),
            format!("{:.0}", median(f.iter().map(|f| f.rate_after).collect())),
        ]);
        let key = peer.key();
        r.ratios
            .insert(format!("{key}_first_write_after_promotion_ms"), first);
        r.ratios
            .insert(format!("{key}_all_writers_after_promotion_ms"), all);
        r.ratios.insert(
            format!("{key}_all_writers_ms"),
            median_ms(f.iter().map(|f| f.all_writers.map(ms)), Missing::Never),
        );
        r.ratios.insert(format!("{key}_failed_writes"), failed);
        if let Some(e) = f.iter().find_map(|f| f.first_error.as_deref()) {
            r.notes.push(format!(
                "{}: the first failure a writer saw: {e}",
                peer.name(Route::Writes)
            ));
        }
    }
    let stops: Vec<f64> = runs.iter().flatten().map(|f| ms(f.stopped)).collect();
    r.notes.push(format!(
        "the primary's fast shutdown took {:.1} ms (median of every failover); the promotion's time is the server's, so compare the pools after it",
        median(stops)
    ));
    r.table = table;
    r.series = PEERS
        .iter()
        .enumerate()
        .map(|(i, &peer)| Series {
            name: peer.name(Route::Writes).into(),
            x_label: "ms after the primary was told to stop".into(),
            y_label: format!("writes per {} ms (first round)", BIN.as_millis()),
            points: runs[i][0].bins.clone(),
        })
        .collect();
    r.notes.push(format!(
        "{WRITERS} tasks write (`SELECT txid_current()`, refused on a standby) every {} ms, after a failure too; \
         each pool has {WRITERS} connections to the primary (PgPool: max_size {} shared evenly by the two servers)",
        PACE.as_millis(),
        2 * WRITERS
    ));
    r.notes.push("each failover runs on a fresh primary and streaming standby (private clusters, not the database under test): fast shutdown of the primary, then pg_promote() on the standby, dated by polling pg_is_in_recovery() every 1 ms".into());
    r.notes.push("the peers reconnect through tokio-postgres's host list with target_session_attrs=read-write, as libpq's multi-host failover does, and prepare the statement once per connection, as slipstream-pg's statement cache does; times are medians over the rounds, 'NaN' where a pool never wrote on the new primary".into());
    r.environment =
        super::private_clusters_environment("a primary and its standby, fresh for each failover");
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(ms: u64, port: Option<i32>) -> Op {
        Op::at(ms, port)
    }

    /// The times count from the stop, "every writer back" waits for the slowest writer's
    /// first write on the new primary, and writes on the old primary or before the stop are
    /// neither failures nor recoveries.
    #[test]
    fn a_failover_is_measured_from_the_stop_to_each_writers_first_write_on_the_new_primary() {
        let (old, new) = (5432, 5433);
        let done = vec![
            (
                vec![
                    op(10, Some(old)),
                    op(20, Some(old)),
                    op(110, None),
                    op(115, None),
                    op(150, Some(new)),
                    op(170, Some(new)),
                ],
                Some("terminating connection".to_string()),
            ),
            (
                vec![op(50, Some(old)), op(120, None), op(200, Some(new))],
                None,
            ),
        ];
        let f = summarize(
            &done,
            new as u16,
            Duration::from_millis(100),
            Duration::from_millis(5),
            Duration::from_millis(30),
            Duration::from_millis(200),
        );
        assert_eq!(f.first_write, Some(Duration::from_millis(50)));
        assert_eq!(f.all_writers, Some(Duration::from_millis(100)));
        assert_eq!(f.failed, 3);
        assert!((f.rate_before - 30.0).abs() < 1e-9, "{}", f.rate_before);
        assert_eq!(f.first_error.as_deref(), Some("terminating connection"));
        // Bins from 100 ms before the stop (the run's start) to its end, 10 ms wide: the
        // writes at 150 and 170 ms after the start land 50 and 70 ms after the stop.
        let at = |ms: f64| f.bins.iter().find(|b| (b.0 - ms).abs() < 1e-6).unwrap().1;
        assert_eq!(
            (at(-100.0), at(-90.0), at(50.0), at(70.0), at(60.0)),
            (0.0, 1.0, 1.0, 1.0, 0.0)
        );
    }

    /// The rate after and the failures count what ended before the run's end: the writers
    /// run on until told to stop, and what they do while the load is torn down is outside
    /// the window the rate divides by.
    #[test]
    fn the_drain_after_the_run_is_not_counted() {
        let (old, new) = (5432, 5433);
        // Stop at 1,000 ms, promoted 100 ms later, 1,000 ms after that: the end is 2,100 ms
        // and the last second 1,100-2,100 ms, with 10 writes on the new primary in it. Two
        // more and a failure end after 2,100, while the load is stopped.
        let mut ops = vec![op(500, Some(old)), op(1010, None)];
        ops.extend((0..10).map(|k| op(1150 + 100 * k, Some(new))));
        ops.extend([op(2102, Some(new)), op(2104, Some(new)), op(2106, None)]);
        let f = summarize(
            &[(ops, None)],
            new as u16,
            Duration::from_millis(1000),
            Duration::from_millis(5),
            Duration::from_millis(100),
            Duration::from_millis(1000),
        );
        assert!((f.rate_after - 10.0).abs() < 1e-9, "{}", f.rate_after);
        assert_eq!(f.failed, 1);
    }

    /// A writer that never wrote on the new primary leaves "every writer back" unmeasured.
    #[test]
    fn a_writer_that_never_comes_back_is_not_counted_as_back() {
        let done = vec![(vec![op(150, Some(2))], None), (vec![op(150, None)], None)];
        let d = Duration::from_millis(100);
        let f = summarize(&done, 2, d, d, d, d);
        assert_eq!(f.first_write, Some(Duration::from_millis(50)));
        assert_eq!(f.all_writers, None);
    }
}

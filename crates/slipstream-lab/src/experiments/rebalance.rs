//! `rebalance`: readers spread over a primary and its streaming standby; the standby stops,
//! then starts again. How many reads fail, for how long, and how soon the restarted standby
//! takes its share of the reads again: slipstream-pool's `PgPool` (`Role::Any`) against
//! deadpool and bb8 over tokio-postgres given both hosts with `load_balance_hosts=random`
//! (libpq 16's load balancing, as those clients do it).

use std::time::Duration;

use anyhow::Context as _;
use slipstream_testkit::Cluster;

use super::two_hosts::{
    Missing, Ops, PEERS, PacedLoad, Peer, Route, binned, interleaved, median_ms, ms,
};
use crate::{Context, ExperimentResult, Series, Summary, Table};

pub(crate) const TITLE: &str = "Rebalance: a standby stops and comes back under readers";

/// Tasks reading at once, and each pool's size: every reader has a connection.
const READERS: usize = 8;
/// A reader's pause after each statement, ok or failed.
const PACE: Duration = Duration::from_millis(2);
/// Says which server answered.
const READ: &str = "SELECT current_setting('port')::int4";
/// Width of the chart's bins, and the step of the window that dates "even again".
const BIN: Duration = Duration::from_millis(10);
/// The window in which the standby's share of the reads is looked at after its restart.
const WINDOW: Duration = Duration::from_millis(100);
/// The standby's share of the reads over a [`WINDOW`] that counts as "even again" (an even
/// split is 0.5).
const EVEN: f64 = 0.4;

/// What one stop and restart of the standby did to one pool's readers.
#[derive(Debug)]
struct Rebalance {
    /// The standby's share of the successful reads before it stopped.
    share_before: f64,
    /// Reads that failed from the stop on.
    failed: usize,
    /// The last failed read, after the stop.
    last_failure: Option<Duration>,
    /// The first read on the standby after its restart, from when it accepted connections.
    first_back: Option<Duration>,
    /// The end of the first [`WINDOW`] after the restart in which the standby took at least
    /// [`EVEN`] of the reads, from the restart.
    even_back: Option<Duration>,
    /// The standby's share of the reads over the run's last second.
    share_after: f64,
    /// The first failure's message, as a reader saw it.
    first_error: Option<String>,
    /// Reads on the standby per [`BIN`], by bin start relative to the stop (ms).
    bins: Vec<(f64, f64)>,
}

/// The moments of one run, from its start.
#[derive(Clone, Copy)]
struct Times {
    /// The standby was told to stop.
    stop: Duration,
    /// The standby accepted connections again.
    back: Duration,
    /// The readers were told to stop.
    end: Duration,
}

/// Runs one stop and restart for `peer` on a fresh primary and standby.
fn one(peer: Peer, before: Duration, down: Duration, after: Duration) -> anyhow::Result<Rebalance> {
    let primary = Cluster::start().context("starting the primary")?;
    let mut standby = primary
        .start_standby()
        .context("starting the standby (pg_basebackup)")?;
    let load = PacedLoad::begin(
        peer,
        Route::Reads,
        (primary.port(), standby.port()),
        READERS,
        READ,
        PACE,
    )?;
    let start = load.start;
    std::thread::sleep(before);
    let stopped = start.elapsed();
    standby.stop().context("stopping the standby")?;
    std::thread::sleep(down);
    standby.restart().context("starting the standby again")?;
    let back = start.elapsed();
    std::thread::sleep(after);
    let end = start.elapsed();
    let done = load.finish()?;
    Ok(summarize(
        &done,
        standby.port(),
        Times {
            stop: stopped,
            back,
            end,
        },
    ))
}

fn summarize(done: &[Ops], standby: u16, t: Times) -> Rebalance {
    let standby = Some(i32::from(standby));
    let all = || done.iter().flat_map(|(ops, _)| ops.iter());
    let ok_in = |from: Duration, to: Duration| {
        all().filter(move |o| o.port.is_some() && o.end >= from && o.end < to)
    };
    let share = |from: Duration, to: Duration| {
        let n = ok_in(from, to).count();
        let on = ok_in(from, to).filter(|o| o.port == standby).count();
        if n == 0 {
            f64::NAN
        } else {
            on as f64 / n as f64
        }
    };
    // From the stop to the run's end: the readers go on until told to stop, and what ends
    // while the load is torn down is outside the run.
    let failures = || all().filter(|o| o.port.is_none() && o.end >= t.stop && o.end < t.end);
    let first_back = ok_in(t.back, t.end)
        .filter(|o| o.port == standby)
        .map(|o| o.end)
        .min();
    let even_back = (0..)
        .map(|k| t.back + BIN * k)
        .take_while(|from| *from + WINDOW <= t.end)
        .find(|from| share(*from, *from + WINDOW) >= EVEN)
        .map(|from| from + WINDOW - t.back);
    let last_second = t.end.saturating_sub(Duration::from_secs(1)).max(t.back);
    Rebalance {
        share_before: share(Duration::ZERO, t.stop),
        failed: failures().count(),
        last_failure: failures().map(|o| o.end - t.stop).max(),
        first_back: first_back.map(|e| e - t.back),
        even_back,
        share_after: share(last_second, t.end),
        first_error: done.iter().find_map(|(_, e)| e.clone()),
        // The standby's reads from 200 ms before the stop.
        bins: binned(
            all().copied(),
            |o| o.port == standby,
            (t.stop - Duration::from_millis(200).min(t.stop), t.end),
            t.stop,
            BIN,
        ),
    }
}

pub(crate) fn run(ctx: &Context) -> anyhow::Result<ExperimentResult> {
    let (rounds, before, down, after) = if ctx.quick {
        (
            1,
            Duration::from_millis(500),
            Duration::from_millis(500),
            Duration::from_secs(1),
        )
    } else {
        (
            5,
            Duration::from_secs(1),
            Duration::from_secs(1),
            Duration::from_secs(3),
        )
    };
    let mut r = ExperimentResult::new("rebalance", TITLE, ctx.quick);
    r.param("rounds", rounds);
    r.param("readers", READERS);
    r.param("pace_ms", ms(PACE));
    r.param("down_ms", ms(down));

    // Each run on a fresh primary and standby.
    let runs = interleaved(rounds, |peer| one(peer, before, down, after))?;

    let median = |v: Vec<f64>| Summary::of(&v).p50;
    let mut table = Table::new(&[
        "pool + client",
        "standby's share before",
        "failed reads",
        "last failure, ms after the stop",
        "first read on the restarted standby, ms",
        "standby's share even again, ms",
        "standby's share, last second",
    ]);
    for (i, &peer) in PEERS.iter().enumerate() {
        let f = &runs[i];
        let share_before = median_share(f, |f| f.share_before);
        let failed = median(f.iter().map(|f| f.failed as f64).collect());
        let (last_failure, first_back, even_back) = median_times(f);
        let share_after = median_share(f, |f| f.share_after);
        for (window, share) in [
            (
                "before the stop",
                (|f: &Rebalance| f.share_before) as fn(&Rebalance) -> f64,
            ),
            ("in the last second", |f: &Rebalance| f.share_after),
        ] {
            let missing = rounds_without_share(f, share);
            if missing > 0 {
                r.notes.push(format!(
                    "{}: no read succeeded {window} in {missing} of {} rounds; its share {window} is the median of the other rounds ('NaN' when there are none)",
                    peer.name(Route::Reads),
                    f.len()
                ));
            }
        }
        table.row(vec![
            peer.name(Route::Reads).into(),
            format!("{share_before:.2}"),
            format!("{failed:.0}"),
            time_cell(last_failure, "none"),
            time_cell(first_back, "never"),
            time_cell(even_back, "never"),
            format!("{share_after:.2}"),
        ]);
        let key = peer.key();
        r.ratios.insert(format!("{key}_failed_reads"), failed);
        r.ratios
            .insert(format!("{key}_last_failure_ms"), last_failure);
        r.ratios
            .insert(format!("{key}_first_read_back_ms"), first_back);
        r.ratios.insert(format!("{key}_even_back_ms"), even_back);
        r.ratios
            .insert(format!("{key}_standby_share_after"), share_after);
        if let Some(e) = f.iter().find_map(|f| f.first_error.as_deref()) {
            r.notes.push(format!(
                "{}: the first failure a reader saw: {e}",
                peer.name(Route::Reads)
            ));
        }
    }
    r.table = table;
    r.series = PEERS
        .iter()
        .enumerate()
        .map(|(i, &peer)| Series {
            name: peer.name(Route::Reads).into(),
            x_label: "ms after the standby was told to stop".into(),
            y_label: format!(
                "reads on the standby per {} ms (first round)",
                BIN.as_millis()
            ),
            points: runs[i][0].bins.clone(),
        })
        .collect();
    r.notes.push(format!(
        "{READERS} tasks read (`SELECT current_setting('port')`) every {} ms, after a failure too, through a pool of {READERS} connections over both servers; \
         the standby stops (fast shutdown) for {} ms, then starts again",
        PACE.as_millis(),
        down.as_millis()
    ));
    r.notes.push(format!(
        "\"even again\": the end of the first {} ms window after the restart in which the standby took at least {EVEN} of the reads; 'never' where a pool never sent it a read again in the run (NaN in the JSON), 'none' where no read failed (times are medians over the rounds)",
        WINDOW.as_millis()
    ));
    r.notes.push("the peers spread their connections through tokio-postgres's host list with load_balance_hosts=random; they keep a working connection until it breaks, so connections that moved to the primary stay there; like slipstream-pg's statement cache, they prepare the statement once per connection".into());
    r.environment =
        super::private_clusters_environment("a primary and its standby, fresh for each run");
    Ok(r)
}

/// The median over the rounds of a share of the reads, over the rounds that had one; NaN
/// when none did. A round in which no read succeeded in the window has no share (NaN), and no
/// place in an order of shares (0.5 is even, and either side of it is not): `Summary::of`
/// sorted it after every share, so failed rounds moved the median up. The rounds left out are
/// reported ([`rounds_without_share`]).
fn median_share(rounds: &[Rebalance], share: fn(&Rebalance) -> f64) -> f64 {
    let present: Vec<f64> = rounds.iter().map(share).filter(|s| !s.is_nan()).collect();
    if present.is_empty() {
        return f64::NAN;
    }
    Summary::of(&present).p50
}

/// How many rounds had no share (no read succeeded in the window).
fn rounds_without_share(rounds: &[Rebalance], share: fn(&Rebalance) -> f64) -> usize {
    rounds.iter().filter(|f| share(f).is_nan()).count()
}

/// The medians over the rounds of the last failure, the first read back and "even again",
/// in ms, NaN where missing.
fn median_times(rounds: &[Rebalance]) -> (f64, f64, f64) {
    let median = |d: fn(&Rebalance) -> Option<Duration>, missing| {
        median_ms(rounds.iter().map(|f| d(f).map(ms)), missing)
    };
    // A round where no read failed has its last failure before any other's; a standby never
    // read again comes back after every round that saw it.
    (
        median(|f| f.last_failure, Missing::Earliest),
        median(|f| f.first_back, Missing::Never),
        median(|f| f.even_back, Missing::Never),
    )
}

/// A median time in ms for the table, or what its absence means there: the columns' times
/// are NaN for different reasons ("none": no read failed; "never": the pool sent the
/// restarted standby no read, or not enough of them). Printed as a bare `NaN`, the reader had
/// only the note's one explanation ("never sent it a read again"), which a pool without a
/// failed read does not fit.
fn time_cell(ms: f64, missing: &str) -> String {
    match ms.is_nan() {
        true => missing.to_string(),
        false => format!("{ms:.1}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::two_hosts::{Op, opt_ms};

    fn op(ms: u64, port: Option<i32>) -> Op {
        Op::at(ms, port)
    }

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// Failures count from the stop; "first back" and "even again" count from the restart;
    /// the shares are of successful reads only.
    #[test]
    fn a_rebalance_is_dated_from_the_stop_and_the_restart() {
        let (p, s) = (Some(5432), Some(5433));
        // Before the stop (1,000 ms): 2 of 4 reads on the standby. Failures at 1,001 and
        // 1,040. Restart at 2,000; from 2,100 a read every 10 ms, on the primary but for one
        // on the standby at 2,150; from 2,300 on every other read is on the standby.
        let mut a = vec![op(100, p), op(200, s), op(300, p), op(400, s)];
        a.extend([op(1001, None), op(1040, None), op(1500, p)]);
        for k in 0..20 {
            a.push(op(2100 + 10 * k, if k == 5 { s } else { p }));
        }
        for k in 0..60 {
            a.push(op(2300 + 10 * k, if k % 2 == 0 { s } else { p }));
        }
        let done = vec![(a, Some("terminating connection".to_string()))];
        let r = summarize(
            &done,
            5433,
            Times {
                stop: at(1000),
                back: at(2000),
                end: at(2900),
            },
        );
        assert_eq!(r.share_before, 0.5);
        assert_eq!(r.failed, 2);
        assert_eq!(r.last_failure, Some(at(40)));
        assert_eq!(r.first_back, Some(at(150)));
        // The first 100 ms window (10 ms steps from the restart) with at least 40% of its
        // reads on the standby: 2,270-2,370 (2,300, 2,320, 2,340 and 2,360 of ten).
        assert_eq!(r.even_back, Some(at(370)));
        // The last second is 2,000-2,900 here: 31 of 80 reads on the standby.
        assert_eq!(r.share_after, 31.0 / 80.0);
        assert_eq!(r.first_error.as_deref(), Some("terminating connection"));
        let bin = |ms: f64| r.bins.iter().find(|b| (b.0 - ms).abs() < 1e-6).unwrap().1;
        assert_eq!((bin(1150.0), bin(1140.0), bin(1300.0)), (1.0, 0.0, 1.0));
    }

    /// A read that fails while the load is torn down, after the run's end, is not the
    /// stop's.
    #[test]
    fn failures_after_the_end_are_not_counted() {
        let done = vec![(vec![op(100, Some(2)), op(1010, None), op(3001, None)], None)];
        let r = summarize(
            &done,
            2,
            Times {
                stop: at(1000),
                back: at(2000),
                end: at(3000),
            },
        );
        assert_eq!((r.failed, r.last_failure), (1, Some(at(10))));
    }

    /// docs/lab.md: a time a pool never reached is NaN in the file, and the table says what
    /// is missing. Steps: a run with no failed read and no read on the restarted standby,
    /// summarized, its three times put in the table's cells. Before the fix all three read
    /// `NaN`, explained by one note as "never sent it a read again", so a pool that lost no
    /// read seemed to have failed.
    #[test]
    fn the_table_says_what_a_missing_time_means() {
        let done = vec![(vec![op(100, Some(2)), op(2500, Some(1))], None)];
        let times = Times {
            stop: at(1000),
            back: at(2000),
            end: at(3000),
        };
        let r = summarize(&done, 2, times);
        assert_eq!(time_cell(opt_ms(r.last_failure), "none"), "none");
        assert_eq!(time_cell(opt_ms(r.first_back), "never"), "never");
        assert_eq!(time_cell(12.34, "never"), "12.3");
    }

    fn round(last_failure: Option<u64>, first_back: Option<u64>) -> Rebalance {
        Rebalance {
            share_before: 0.5,
            failed: usize::from(last_failure.is_some()),
            last_failure: last_failure.map(at),
            first_back: first_back.map(at),
            even_back: first_back.map(at),
            share_after: 0.5,
            first_error: None,
            bins: Vec::new(),
        }
    }

    /// A round with the given standby shares before and after (NaN: no read succeeded in
    /// that window).
    fn shares(before: f64, after: f64) -> Rebalance {
        Rebalance {
            share_before: before,
            share_after: after,
            ..round(None, None)
        }
    }

    /// Failures must never be silently dropped or counted as a figure. Steps: five rounds
    /// (the full form) in which the standby's share over the last second was 0.1, 0.1 and
    /// 0.5, and two rounds in which no read succeeded in that second at all (a pool that
    /// never recovered), whose share is NaN. Before the fix `Summary::of` sorted the NaNs
    /// after every share, so the two failed rounds moved the median from 0.1 (the middle of
    /// the rounds that read) to 0.5: "even again", made by rounds that read nothing.
    #[test]
    fn a_round_without_reads_does_not_move_the_share() {
        let rounds = [
            shares(0.5, 0.1),
            shares(0.5, f64::NAN),
            shares(0.5, 0.5),
            shares(0.5, f64::NAN),
            shares(0.5, 0.1),
        ];
        assert_eq!(median_share(&rounds, |f| f.share_after), 0.1);
        assert_eq!(median_share(&rounds, |f| f.share_before), 0.5);
        let none = [shares(f64::NAN, f64::NAN)];
        assert!(median_share(&none, |f| f.share_after).is_nan());
        assert_eq!(rounds_without_share(&rounds, |f| f.share_after), 2);
    }

    /// docs/lab.md: "none" is a pool that lost no read, "never" a standby never read again.
    /// Steps: three crafted rounds, one without a failure and one whose standby never came
    /// back. Before the fix every missing time sorted last (NaN), so the round without a
    /// failure made the median last failure the latest (300 ms, not 100 ms).
    #[test]
    fn a_round_without_a_failure_is_the_earliest_last_failure() {
        let rounds = [
            round(None, Some(50)),
            round(Some(100), None),
            round(Some(300), Some(70)),
        ];
        let (last_failure, first_back, even_back) = median_times(&rounds);
        assert_eq!(last_failure, 100.0);
        assert_eq!((first_back, even_back), (70.0, 70.0));
        // A majority without the time: the median is missing, and says which way.
        let none = [
            round(None, None),
            round(None, None),
            round(Some(5), Some(5)),
        ];
        let (last_failure, first_back, _) = median_times(&none);
        assert!(last_failure.is_nan() && first_back.is_nan());
    }

    /// A pool that never sends the restarted standby a read has neither time, and a run with
    /// no failure has no last failure.
    #[test]
    fn a_standby_never_read_again_is_not_back() {
        let done = vec![(
            vec![op(100, Some(2)), op(1500, Some(1)), op(2500, Some(1))],
            None,
        )];
        let r = summarize(
            &done,
            2,
            Times {
                stop: at(1000),
                back: at(2000),
                end: at(3000),
            },
        );
        assert_eq!(
            (r.first_back, r.even_back, r.last_failure),
            (None, None, None)
        );
        assert_eq!((r.failed, r.share_before, r.share_after), (0, 1.0, 0.0));
    }
}

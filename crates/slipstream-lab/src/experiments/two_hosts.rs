//! Pools over a primary and its standby, side by side, and the paced tasks that run one
//! statement through them: what `failover` and `rebalance` measure. slipstream-pool's `PgPool`
//! routes by role; deadpool and bb8 over tokio-postgres get both hosts in one connection
//! string, as libpq's multi-host connections do it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use slipstream_pool::{PgPool, Role};

use super::pg_peers::{B8Pg, DeadPg};

/// A statement (borrow included) that takes longer has failed.
pub(crate) const OP_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Peer {
    Slipstream,
    Deadpool,
    Bb8,
}

pub(crate) const PEERS: [Peer; 3] = [Peer::Slipstream, Peer::Deadpool, Peer::Bb8];

/// Where the statements go, and how each pool is told so.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Route {
    /// To the primary: `Role::Primary`; the peers `target_session_attrs=read-write`.
    Writes,
    /// To either server, spread: `Role::Any`; the peers `load_balance_hosts=random`.
    Reads,
}

impl Peer {
    pub(crate) fn name(self, route: Route) -> &'static str {
        match (self, route) {
            (Peer::Slipstream, Route::Writes) => "slipstream-pool (PgPool, Role::Primary)",
            (Peer::Slipstream, Route::Reads) => "slipstream-pool (PgPool, Role::Any)",
            (Peer::Deadpool, Route::Writes) => "deadpool + tokio-postgres (read-write)",
            (Peer::Deadpool, Route::Reads) => "deadpool + tokio-postgres (load_balance_hosts)",
            (Peer::Bb8, Route::Writes) => "bb8 + tokio-postgres (read-write)",
            (Peer::Bb8, Route::Reads) => "bb8 + tokio-postgres (load_balance_hosts)",
        }
    }

    pub(crate) fn key(self) -> &'static str {
        match self {
            Peer::Slipstream => "slipstream",
            Peer::Deadpool => "deadpool",
            Peer::Bb8 => "bb8",
        }
    }
}

pub(crate) enum Pool {
    Slipstream(PgPool, Role),
    Deadpool(deadpool::managed::Pool<DeadPg>),
    Bb8(bb8::Pool<B8Pg>),
}

impl Pool {
    /// A pool over both servers with `connections` for the statements' tasks: each peer's
    /// whole size. PgPool shares its `max_size` evenly over the servers, so for writes it gets
    /// twice that (the primary's share is `connections`), for reads that (half on each).
    pub(crate) async fn build(
        peer: Peer,
        route: Route,
        primary: u16,
        standby: u16,
        connections: usize,
    ) -> anyhow::Result<Pool> {
        let hosts = format!(
            "host=127.0.0.1,127.0.0.1 port={primary},{standby} user=postgres dbname=postgres connect_timeout=5"
        );
        let peer_hosts = || -> anyhow::Result<tokio_postgres::Config> {
            Ok(match route {
                Route::Writes => format!("{hosts} target_session_attrs=read-write"),
                Route::Reads => format!("{hosts} load_balance_hosts=random"),
            }
            .parse()?)
        };
        Ok(match peer {
            Peer::Slipstream => {
                let (role, size) = match route {
                    Route::Writes => (Role::Primary, 2 * connections),
                    Route::Reads => (Role::Any, connections),
                };
                let pool = PgPool::builder(format!("{hosts} sslmode=disable").parse()?)
                    .max_size(size)
                    .build_ready()
                    .await?;
                Pool::Slipstream(pool, role)
            }
            Peer::Deadpool => Pool::Deadpool(
                deadpool::managed::Pool::builder(DeadPg(peer_hosts()?))
                    .max_size(connections)
                    .runtime(deadpool::Runtime::Tokio1)
                    .build()?,
            ),
            Peer::Bb8 => Pool::Bb8(
                bb8::Pool::builder()
                    .max_size(connections as u32)
                    .connection_timeout(OP_TIMEOUT)
                    .test_on_check_out(false)
                    .build(B8Pg(peer_hosts()?))
                    .await?,
            ),
        })
    }

    /// Runs `sql`, which returns one `int4`, and gives back that value.
    async fn run(&self, sql: &str) -> Result<i32, String> {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        match self {
            Pool::Slipstream(p, role) => {
                let mut c = p.get(*role).await.map_err(|e| text(&e))?;
                let row = c.query_one(sql, &[]).await.map_err(|e| text(&e))?;
                row.get(0).map_err(|e| text(&e))
            }
            Pool::Deadpool(p) => {
                let c = p.get().await.map_err(|e| text(&e))?;
                let row = c.query_one(sql).await.map_err(|e| text(&e))?;
                row.try_get(0).map_err(|e| text(&e))
            }
            Pool::Bb8(p) => {
                let c = p.get().await.map_err(|e| text(&e))?;
                let row = c.query_one(sql).await.map_err(|e| text(&e))?;
                row.try_get(0).map_err(|e| text(&e))
            }
        }
    }
}

/// One statement's end, since the run's start, and the port of the server that ran it
/// (`None`: it failed).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Op {
    pub end: Duration,
    pub port: Option<i32>,
}

#[cfg(test)]
impl Op {
    /// A statement that ended `ms` after the start, on `port` (`None`: failed).
    pub(crate) fn at(ms: u64, port: Option<i32>) -> Op {
        Op {
            end: Duration::from_millis(ms),
            port,
        }
    }
}

/// What one task did: its statements in order, and the first failure's message.
pub(crate) type Ops = (Vec<Op>, Option<String>);

/// A task that runs `sql` (answering with the server's port), then pauses `pace`, ok or
/// failed, until told to stop: the same pace for every pool, so a pool's recovery is seen
/// within `pace` of when it happens.
pub(crate) async fn paced(
    pool: Arc<Pool>,
    sql: &'static str,
    pace: Duration,
    start: Instant,
    stop: Arc<AtomicBool>,
) -> Ops {
    let (mut ops, mut first_error) = (Vec::new(), None);
    while !stop.load(Relaxed) {
        let port = match tokio::time::timeout(OP_TIMEOUT, pool.run(sql)).await {
            Ok(Ok(port)) => Some(port),
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
                None
            }
            Err(_) => {
                first_error.get_or_insert_with(|| format!("no answer within {OP_TIMEOUT:?}"));
                None
            }
        };
        ops.push(Op {
            end: start.elapsed(),
            port,
        });
        tokio::time::sleep(pace).await;
    }
    (ops, first_error)
}

/// Paced tasks running one statement through one pool, on a two-worker runtime of their own,
/// timed from [`PacedLoad::start`].
pub(crate) struct PacedLoad {
    rt: tokio::runtime::Runtime,
    pool: Arc<Pool>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Ops>>,
    /// When the tasks started: every [`Op`]'s `end` counts from here.
    pub start: Instant,
}

impl PacedLoad {
    /// Builds `peer`'s pool over both servers with `tasks` connections and starts that many
    /// tasks running `sql` every `pace`.
    pub(crate) fn begin(
        peer: Peer,
        route: Route,
        (primary, standby): (u16, u16),
        tasks: usize,
        sql: &'static str,
        pace: Duration,
    ) -> anyhow::Result<PacedLoad> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let pool = Arc::new(rt.block_on(Pool::build(peer, route, primary, standby, tasks))?);
        let start = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..tasks)
            .map(|_| rt.spawn(paced(pool.clone(), sql, pace, start, stop.clone())))
            .collect();
        Ok(PacedLoad {
            rt,
            pool,
            stop,
            tasks,
            start,
        })
    }

    /// Runs `f` on the load's runtime (work of the experiment's own beside the tasks).
    pub(crate) fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Stops the tasks and gives back what each did.
    pub(crate) fn finish(self) -> anyhow::Result<Vec<Ops>> {
        self.stop.store(true, Relaxed);
        let done = self.rt.block_on(async {
            let mut done = Vec::new();
            for t in self.tasks {
                done.push(t.await?);
            }
            anyhow::Ok(done)
        })?;
        drop(self.pool);
        self.rt.shutdown_timeout(Duration::from_secs(1));
        Ok(done)
    }
}

/// Counts of `ops` that `keep` accepts, in `bin`-wide bins from `from` to `to`, each bin by
/// its start in ms relative to `origin`: the experiments' charts, in one pass.
pub(crate) fn binned(
    ops: impl Iterator<Item = Op>,
    keep: impl Fn(&Op) -> bool,
    (from, to): (Duration, Duration),
    origin: Duration,
    bin: Duration,
) -> Vec<(f64, f64)> {
    let width = bin.as_nanos();
    let mut counts = vec![0.0; to.saturating_sub(from).as_nanos().div_ceil(width) as usize];
    for o in ops.filter(|o| o.end >= from && o.end < to && keep(o)) {
        counts[((o.end - from).as_nanos() / width) as usize] += 1.0;
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(k, n)| (ms(from + bin * k as u32) - ms(origin), n))
        .collect()
}

/// `rounds` runs of every peer's pool, interleaved: each round runs every pool once, a few
/// seconds apart, so a slow phase of the machine falls on all of them; odd rounds in reverse
/// ([`super::round_order`]), so no pool always runs first or always after the same one.
/// Per peer, in [`PEERS`]' order.
pub(crate) fn interleaved<T>(
    rounds: usize,
    mut one: impl FnMut(Peer) -> anyhow::Result<T>,
) -> anyhow::Result<Vec<Vec<T>>> {
    let mut runs: Vec<Vec<T>> = PEERS.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for peer in super::round_order(round, &PEERS) {
            let i = PEERS.iter().position(|&p| p == peer).unwrap_or(0);
            runs[i].push(one(peer).with_context(|| format!("{peer:?}"))?);
        }
    }
    Ok(runs)
}

/// A time in ms, `NaN` when there is none (a pool that never got there): medians and tables
/// show it as such.
#[cfg(test)]
pub(crate) fn opt_ms(d: Option<Duration>) -> f64 {
    d.map_or(f64::NAN, ms)
}

/// What a round without the time (the event never happened in it) means in a median over
/// rounds. NaN has no place in an order: `Summary::of` sorts it last whatever it meant, so a
/// round where nothing failed counted as the latest last failure.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Missing {
    /// Nothing to wait for (no read failed): earlier than any time.
    Earliest,
    /// Never reached: later than any time.
    Never,
}

/// The median over rounds of a time in ms some rounds lack, each missing one sorted where
/// `missing` says; NaN when the median itself is missing (with an even count, also when the
/// middle two are one time and one missing: half the rounds lack it).
pub(crate) fn median_ms(times: impl IntoIterator<Item = Option<f64>>, missing: Missing) -> f64 {
    let stand_in = match missing {
        Missing::Earliest => f64::NEG_INFINITY,
        Missing::Never => f64::INFINITY,
    };
    let v: Vec<f64> = times.into_iter().map(|t| t.unwrap_or(stand_in)).collect();
    let m = crate::Summary::of(&v).p50;
    if m.is_finite() { m } else { f64::NAN }
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/lab.md: `failover` and `rebalance` run their pools in interleaved rounds, and
    /// "the clients run in alternating short rounds" so drift hits all alike. Steps: two
    /// rounds with a closure that records who ran when; the order and what each peer got.
    /// Before the fix every round ran slipstream-pool first and bb8 last.
    #[test]
    fn odd_rounds_run_the_pools_in_reverse() {
        let mut ran = Vec::new();
        let runs = interleaved(2, |peer| {
            ran.push(peer);
            Ok(peer)
        })
        .unwrap();
        assert_eq!(
            ran,
            [
                Peer::Slipstream,
                Peer::Deadpool,
                Peer::Bb8,
                Peer::Bb8,
                Peer::Deadpool,
                Peer::Slipstream
            ]
        );
        // Each peer's list holds its own runs.
        for (i, peer) in PEERS.iter().enumerate() {
            assert_eq!(runs[i], [*peer, *peer], "{runs:?}");
        }
    }
}

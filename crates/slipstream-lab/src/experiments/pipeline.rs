//! `pipeline`: article 000's three workloads (read-only lookups, a DML loop, an OLTP-like mix),
//! each with and without pipelining, at injected round-trip times, with tokio-postgres
//! (concurrently polled futures) and pgbench (`\startpipeline`) side by side.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::future::{join_all, try_join_all};
use slipstream_pg::{PipelineMode, PipelineOptions};
use slipstream_testkit::DelayProxy;

use super::{Stopwatch, env_list, runtime, tcp_target, via_proxy, without_tls};
use crate::{Context, ExperimentResult, Series, Summary, Table, paired_ratios};

pub(crate) const TITLE: &str =
    "Pipelining: read-only, DML and OLTP-mix workloads at injected round-trip times";

/// Rows in the lookup table.
const TABLE_ROWS: i32 = 10_000;
/// Statements per pipeline for the clients that send a batch and wait for all of it (the
/// peers, and slipstream's "batch" mode).
const BATCH: usize = 100;
/// Loops of {1 INSERT, 4 UPDATE} in one pipelined DML transaction.
const DML_LOOPS: usize = 200;
/// Loops per transaction without pipelining: a round trip per statement, whatever the size.
const DML_LOOPS_PLAIN: usize = 20;
/// Concurrent sessions in the multi-session read-only workload.
const SESSIONS: usize = 8;
/// Reads and writes in one OLTP-mix transaction (plus BEGIN and COMMIT).
const MIX_READS: usize = 7;
const MIX_WRITES: usize = 3;

const SELECT: &str = "SELECT data FROM slipstream_lab_pipeline WHERE id = $1";
const UPDATE: &str = "UPDATE slipstream_lab_pipeline SET hits = hits + 1 WHERE id = $1";
// The sequence functions are named by schema, the literal given its type: for a string
// literal a `public.nextval(text)` beats `pg_catalog.nextval(regclass)` on a default search_path,
// and ran, as the lab's role, in every measured statement (every peer runs this text).
const INSERT: &str = "INSERT INTO slipstream_lab_pipeline_dml (id, qty) \
     VALUES (pg_catalog.nextval('slipstream_lab_pipeline_dml_seq'::pg_catalog.regclass), 0)";
const UPDATE_DML: &str = "UPDATE slipstream_lab_pipeline_dml SET qty = qty + 1 \
     WHERE id = (SELECT pg_catalog.currval('slipstream_lab_pipeline_dml_seq'::pg_catalog.regclass))";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Workload {
    ReadOnly,
    ReadOnly8,
    Dml,
    Mix,
}

impl Workload {
    const ALL: [Workload; 4] = [
        Workload::ReadOnly,
        Workload::ReadOnly8,
        Workload::Dml,
        Workload::Mix,
    ];

    fn label(self) -> &'static str {
        match self {
            Workload::ReadOnly => "read-only, 1 session",
            Workload::ReadOnly8 => "read-only, 8 sessions",
            Workload::Dml => "DML loop (1 INSERT + 4 UPDATE), 1 session",
            Workload::Mix => "OLTP mix (7 reads, 3 writes), 1 session",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Workload::ReadOnly => "readonly1",
            Workload::ReadOnly8 => "readonly8",
            Workload::Dml => "dml",
            Workload::Mix => "mix",
        }
    }
}

/// How a client sends. slipstream's pipelined modes come in both error modes; a peer's
/// pipelined mode is whatever it does (see [`Cell::mode_label`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// One statement, one round trip.
    Plain,
    /// A batch (or a transaction) sent at once, waited for as a whole: slipstream in abort
    /// mode (one Sync per batch), tokio-postgres (a Sync per statement), pgbench (one Sync).
    Batch,
    /// slipstream only: one long pipeline, a sliding window of operations in flight, abort
    /// mode (a Sync every [`BATCH`]).
    Window,
    /// slipstream only: [`Mode::Batch`] in continue-on-error mode (a Sync per statement).
    BatchContinue,
    /// slipstream only: [`Mode::Window`] in continue-on-error mode.
    WindowContinue,
    /// slipstream only: [`Mode::BatchContinue`] against a session that loaded the server
    /// module pipeline_flush (extension/pipeline_flush: one flush per burst, not per `Sync`).
    BatchContinueModule,
    /// slipstream only: [`Mode::WindowContinue`] with pipeline_flush.
    WindowContinueModule,
}

impl Mode {
    fn key(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Batch => "batch",
            Mode::Window => "window",
            Mode::BatchContinue => "batch_continue",
            Mode::WindowContinue => "window_continue",
            Mode::BatchContinueModule => "batch_continue_pipeline_flush",
            Mode::WindowContinueModule => "window_continue_pipeline_flush",
        }
    }

    /// The same shape in abort-on-error mode.
    fn abort_twin(self) -> Mode {
        match self {
            Mode::BatchContinue | Mode::BatchContinueModule => Mode::Batch,
            Mode::WindowContinue | Mode::WindowContinueModule => Mode::Window,
            m => m,
        }
    }

    /// Continue on error (a `Sync` per statement).
    fn continues(self) -> bool {
        matches!(
            self,
            Mode::BatchContinue
                | Mode::WindowContinue
                | Mode::BatchContinueModule
                | Mode::WindowContinueModule
        )
    }

    /// Run against a session with pipeline_flush loaded; every other cell runs with the
    /// server's own flushing (`pipeline_flush.enabled = off`, in case the server preloads it).
    fn with_module(self) -> bool {
        matches!(self, Mode::BatchContinueModule | Mode::WindowContinueModule)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Peer {
    Slipstream,
    TokioPostgres,
    Pgbench,
}

impl Peer {
    fn label(self) -> &'static str {
        match self {
            Peer::Slipstream => "slipstream-pg",
            Peer::TokioPostgres => "tokio-postgres",
            Peer::Pgbench => "pgbench (libpq)",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Peer::Slipstream => "slipstream",
            Peer::TokioPostgres => "tokio_postgres",
            Peer::Pgbench => "pgbench",
        }
    }
}

/// One measured cell: a workload, an RTT, a client and a mode, measured once per round.
struct Cell {
    workload: Workload,
    rtt_us: u64,
    peer: Peer,
    mode: Mode,
    /// One run per round that completed (a pgbench run can fail and be skipped).
    runs: Vec<Run>,
}

/// One run of a cell: statements completed, the time they took and the client CPU they cost.
struct Run {
    /// The round it ran in: a cell's runs pair with another cell's by round.
    round: usize,
    ops: u64,
    wall: Duration,
    cpu: Duration,
}

impl Run {
    fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// CPU per statement; `None` for a run that completed none (its CPU went to nothing a
    /// statement can be charged with).
    fn cpu_us_per_op(&self) -> Option<f64> {
        (self.ops > 0).then(|| self.cpu.as_secs_f64() * 1e6 / self.ops as f64)
    }
}

impl Cell {
    /// The mode with its error mode named: what a reader needs to compare figures.
    fn mode_label(&self) -> &'static str {
        match (self.peer, self.mode) {
            (_, Mode::Plain) => "no pipelining",
            (Peer::Slipstream, Mode::Batch) => "pipeline, batches, abort on error",
            (Peer::Slipstream, Mode::Window) => "pipeline, sliding window, abort on error",
            (Peer::Slipstream, Mode::BatchContinue) => "pipeline, batches, continue on error",
            (Peer::Slipstream, Mode::WindowContinue) => {
                "pipeline, sliding window, continue on error"
            }
            (Peer::Slipstream, Mode::BatchContinueModule) => {
                "pipeline, batches, continue on error, server with pipeline_flush"
            }
            (Peer::Slipstream, Mode::WindowContinueModule) => {
                "pipeline, sliding window, continue on error, server with pipeline_flush"
            }
            (Peer::TokioPostgres, _) => "pipeline, batches, continue on error (a Sync each)",
            (Peer::Pgbench, _) => "pipeline, batches, abort on error (one Sync)",
        }
    }

    fn rates(&self) -> Vec<f64> {
        self.runs.iter().map(Run::ops_per_s).collect()
    }

    /// Median over the rounds.
    fn ops_per_s(&self) -> f64 {
        Summary::of(&self.rates()).p50
    }

    /// Median over the rounds that completed a statement; NaN when none did (a missing
    /// figure, not the zero an empty summary gives).
    fn cpu_us_per_op(&self) -> f64 {
        let cpu: Vec<f64> = self.runs.iter().filter_map(Run::cpu_us_per_op).collect();
        match cpu.is_empty() {
            true => f64::NAN,
            false => Summary::of(&cpu).p50,
        }
    }

    /// This cell's rate over `other`'s: the median of the per-round ratios, so that the
    /// machine's drift between rounds cancels within each pair (rounds only one of them
    /// completed are left out). NaN when no round gave a pair (or `other` completed nothing
    /// in every one): a missing figure, shown and written as such (`null` in the file).
    fn over(&self, other: &Cell) -> f64 {
        let (theirs, ours): (Vec<f64>, Vec<f64>) = other
            .runs
            .iter()
            .filter_map(|o| {
                let mine = self.runs.iter().find(|m| m.round == o.round)?;
                Some((o.ops_per_s(), mine.ops_per_s()))
            })
            .unzip();
        // NaN without a pair (`paired_ratios` says so itself).
        paired_ratios(&theirs, &ours).p50
    }
}

/// The read-only rate at an injected RTT over the rate on loopback: the ratio of the two
/// cells' medians, not of per-round pairs. The RTTs run one after another, so round `r` at
/// loopback and round `r` at the far RTT ran minutes apart: pairing them cancels no drift and
/// only looks paired. NaN when either cell completed nothing.
fn rtt_over_loopback(far: &Cell, loopback: &Cell) -> f64 {
    let (far, loopback) = (far.ops_per_s(), loopback.ops_per_s());
    if loopback > 0.0 && far.is_finite() {
        far / loopback
    } else {
        f64::NAN
    }
}

/// The cells of one workload at one RTT, in the order a round runs them (odd rounds in
/// reverse).
///
/// The cells a ratio divides run back to back: this VM runs in fast and slow phases that last
/// seconds (docs/benchmarks.md), so two cells 8 s apart in one round often ran at different
/// speeds, and their ratio measured the phase as much as the modes. Each continue-on-error
/// cell with the module sits next to its abort-mode twin, the stock one a cell further.
const SHAPES: [(Peer, Mode); 11] = [
    (Peer::Slipstream, Mode::Plain),
    (Peer::Slipstream, Mode::Batch),
    (Peer::Slipstream, Mode::BatchContinueModule),
    (Peer::Slipstream, Mode::BatchContinue),
    (Peer::Slipstream, Mode::Window),
    (Peer::Slipstream, Mode::WindowContinueModule),
    (Peer::Slipstream, Mode::WindowContinue),
    (Peer::TokioPostgres, Mode::Plain),
    (Peer::TokioPostgres, Mode::Batch),
    (Peer::Pgbench, Mode::Plain),
    (Peer::Pgbench, Mode::Batch),
];

pub(crate) fn run(ctx: &Context) -> anyhow::Result<ExperimentResult> {
    let mut rtts_us: Vec<u64> = if ctx.quick {
        vec![0, 1000]
    } else {
        vec![0, 200, 1000, 5000]
    };
    // A subset, for a focused look: SLIPSTREAM_PIPELINE_RTTS=0,1000 (µs) and
    // SLIPSTREAM_PIPELINE_WORKLOADS=readonly1,readonly8,dml,mix.
    if let Some(list) = env_list("SLIPSTREAM_PIPELINE_RTTS") {
        rtts_us = list
            .iter()
            .map(|s| s.parse())
            .collect::<Result<_, _>>()
            .map_err(|e| {
                anyhow::anyhow!(
                    "SLIPSTREAM_PIPELINE_RTTS must be microseconds separated by commas: {e}"
                )
            })?;
    }
    let mut workloads = Workload::ALL.to_vec();
    if let Some(list) = env_list("SLIPSTREAM_PIPELINE_WORKLOADS") {
        workloads.retain(|w| list.iter().any(|s| s == w.key()));
        if workloads.is_empty() {
            anyhow::bail!(
                "SLIPSTREAM_PIPELINE_WORKLOADS names none of readonly1, readonly8, dml, mix"
            );
        }
    }
    let rtts_us = &rtts_us[..];
    let cell_time = Duration::from_millis(if ctx.quick { 250 } else { 1200 });
    // Every cell once per round, the rounds interleaved: a 2 s cell on 2 vCPUs varies by
    // about 20%, so one run cannot decide a ratio. Five shorter rounds rather than three of
    // 2 s, in about the same time: a median of three paired ratios still fell below a target
    // about one time in ten (session 24), and more pairs narrow the median more than longer
    // cells do when the spread comes from phases of the machine rather than from the cell.
    let rounds = if ctx.quick { 1 } else { 5 };
    let pgbench_secs = if ctx.quick { 1 } else { 2 };
    let mut r = ExperimentResult::new("pipeline", TITLE, ctx.quick);
    r.param("rtts_us", format!("{rtts_us:?}"));
    r.param("seconds_per_cell", cell_time.as_secs_f64());
    r.param("rounds", rounds);
    r.param("batch_statements", BATCH);
    r.param("dml_loops_per_pipelined_transaction", DML_LOOPS);
    r.param("sessions", SESSIONS);
    r.param(
        "window",
        PipelineOptions::new().get_max_in_flight().to_string(),
    );

    let url = without_tls(&ctx.url);
    let target = tcp_target(&url);
    let pgbench = slipstream_testkit::Install::find()
        .map(|i| i.bindir().join("pgbench"))
        .ok();
    let rt = runtime()?;
    let server_version = rt.block_on(setup(&url))?;
    let module = rt.block_on(module_available(&url));
    if let Err(why) = &module {
        r.notes.push(format!(
            "the cells with the server module pipeline_flush are missing: {why}"
        ));
    }

    let mut cells = Vec::new();
    for &rtt_us in rtts_us {
        // RTT 0 is the loopback connection itself, not the proxy at zero delay.
        let (_proxy, url) = if rtt_us == 0 {
            (None, url.clone())
        } else {
            let Some(target) = target else {
                r.notes.push(format!(
                    "RTT {rtt_us} us skipped: the delay proxy needs a TCP server address"
                ));
                continue;
            };
            let proxy = DelayProxy::start(target, Duration::from_micros(rtt_us))?;
            let proxied = via_proxy(&url, proxy.port());
            (Some(proxy), proxied)
        };
        for &workload in &workloads {
            let first = cells.len();
            for round in 0..rounds {
                // Odd rounds run the cells in reverse, so no cell always follows the same one.
                for shape in super::round_order(round, &SHAPES) {
                    let run = match shape {
                        (Peer::Pgbench, _) if pgbench.is_none() => continue,
                        (Peer::Pgbench, mode) => {
                            match run_pgbench(&url, workload, mode, pgbench_secs, rtt_us, round) {
                                Ok(run) => run,
                                Err(e) => {
                                    let note = format!(
                                        "pgbench {} {} at RTT {rtt_us} us skipped: {e:#}",
                                        workload.key(),
                                        mode.key()
                                    );
                                    if !r.notes.contains(&note) {
                                        r.notes.push(note);
                                    }
                                    continue;
                                }
                            }
                        }
                        (peer, mode) => {
                            if mode.with_module() && module.is_err() {
                                continue;
                            }
                            let (ops, t) = rt
                                .block_on(measure(&url, workload, peer, mode, cell_time))
                                .with_context(|| {
                                    format!("{} {} at RTT {rtt_us} us", peer.label(), mode.key())
                                })?;
                            Run {
                                round,
                                ops,
                                wall: t.wall,
                                cpu: t.cpu,
                            }
                        }
                    };
                    let (peer, mode) = shape;
                    match cells[first..]
                        .iter_mut()
                        .find(|c: &&mut Cell| c.peer == peer && c.mode == mode)
                    {
                        Some(c) => c.runs.push(run),
                        None => cells.push(Cell {
                            workload,
                            rtt_us,
                            peer,
                            mode,
                            runs: vec![run],
                        }),
                    }
                }
            }
        }
    }
    if pgbench.is_none() {
        r.notes
            .push("pgbench was not found: its rows are missing".into());
    }
    r.environment = slipstream_bench::capture_environment(&ctx.url, server_version);
    report(&mut r, &cells, rtts_us, rounds);
    Ok(r)
}

fn report(r: &mut ExperimentResult, cells: &[Cell], rtts_us: &[u64], rounds: usize) {
    let find = |w: Workload, rtt: u64, p: Peer, m: Mode| {
        cells
            .iter()
            .find(|c| c.workload == w && c.rtt_us == rtt && c.peer == p && c.mode == m)
    };
    let mut table = Table::new(&[
        "workload",
        "RTT ms",
        "client",
        "mode",
        "statements/s",
        "min … max",
        "speed-up",
        "client CPU us/stmt",
    ]);
    for c in cells {
        let plain = find(c.workload, c.rtt_us, c.peer, Mode::Plain);
        let speedup = plain.map(|p| c.over(p));
        table.row(vec![
            c.workload.label().into(),
            format!("{}", c.rtt_us as f64 / 1000.0),
            c.peer.label().into(),
            c.mode_label().into(),
            format!("{:.0}", c.ops_per_s()),
            Summary::of(&c.rates()).range(0),
            speedup.map_or("-".into(), |s| match s.is_nan() {
                true => "NaN".into(),
                false => format!("{s:.1}x"),
            }),
            format!("{:.2}", c.cpu_us_per_op()),
        ]);
        let key = format!(
            "{}_rtt{}us_{}_{}",
            c.workload.key(),
            c.rtt_us,
            c.peer.key(),
            c.mode.key()
        );
        r.ratios
            .insert(format!("{key}_statements_per_s"), c.ops_per_s());
        r.ratios
            .insert(format!("{key}_cpu_us_per_statement"), c.cpu_us_per_op());
        if let Some(s) = speedup.filter(|_| c.mode != Mode::Plain) {
            r.ratios.insert(format!("{key}_speedup"), s);
        }
        // Continue on error beside abort on error, same shape, same run.
        if c.mode.continues()
            && let Some(abort) = find(c.workload, c.rtt_us, c.peer, c.mode.abort_twin())
        {
            r.ratios.insert(format!("{key}_over_abort"), c.over(abort));
        }
    }
    r.table = table;

    for w in Workload::ALL {
        for &rtt in rtts_us {
            for peer in [Peer::TokioPostgres, Peer::Pgbench] {
                if let Some(ratio) = head_to_head(cells, w, rtt, peer) {
                    r.ratios.insert(
                        format!(
                            "{}_rtt{rtt}us_slipstream_pipelined_over_{}_pipelined",
                            w.key(),
                            peer.key()
                        ),
                        ratio,
                    );
                }
            }
        }
    }
    if let (Some(loopback), Some(far)) = (
        find(Workload::ReadOnly, 0, Peer::Slipstream, Mode::Window),
        rtts_us
            .iter()
            .max()
            .and_then(|&rtt| find(Workload::ReadOnly, rtt, Peer::Slipstream, Mode::Window))
            .filter(|c| c.rtt_us > 0),
    ) {
        r.ratios.insert(
            format!("readonly1_window_rtt{}us_over_loopback", far.rtt_us),
            rtt_over_loopback(far, loopback),
        );
        r.notes.push(format!(
            "readonly1_window_rtt{}us_over_loopback is the ratio of the two medians, not paired: the RTTs run one after another, minutes apart",
            far.rtt_us
        ));
    }

    for (peer, mode) in [
        (Peer::Slipstream, Mode::Plain),
        (Peer::Slipstream, Mode::Window),
        (Peer::Slipstream, Mode::WindowContinue),
        (Peer::Slipstream, Mode::WindowContinueModule),
        (Peer::TokioPostgres, Mode::Batch),
        (Peer::Pgbench, Mode::Batch),
    ] {
        let points: Vec<(f64, f64)> = rtts_us
            .iter()
            .filter_map(|&rtt| find(Workload::ReadOnly, rtt, peer, mode))
            .map(|c| (c.rtt_us as f64 / 1000.0, c.ops_per_s()))
            .collect();
        if !points.is_empty() {
            let label = cells
                .iter()
                .find(|c| c.peer == peer && c.mode == mode)
                .map_or("", Cell::mode_label);
            r.series.push(Series {
                name: format!("{}, {label}", peer.label()),
                x_label: "injected RTT (ms)".into(),
                y_label: "read-only statements/s, 1 session".into(),
                points,
            });
        }
    }
    r.notes.push(format!(
        "batches: {BATCH} statements per pipeline for read-only, the whole transaction for the mix, and \
         {BATCH}-statement pipelines inside a {DML_LOOPS}-loop transaction for DML (BEGIN in the first, \
         COMMIT in the last: {} round trips a transaction for every client); the sliding window keeps \
         up to {} operations in flight in one long pipeline (a Sync every {BATCH} in abort mode). Every \
         slipstream pipelined figure names its error mode: abort on error (PipelineMode::AbortOnError, the \
         default: one Sync per batch) or continue on error (a Sync per statement, each its own implicit \
         transaction); `*_over_abort` ratios put the two side by side from the same run. Cells marked \
         \"server with pipeline_flush\" ran on sessions that loaded the project's server module \
         (extension/pipeline_flush: the server flushes once per pipelined burst instead of at every \
         Sync); every other cell ran with the server's own flushing.",
        DML_LOOPS * 5 / BATCH,
        PipelineOptions::new().get_max_in_flight()
    ));
    r.notes.push(format!(
        "each cell ran once per round, {rounds} round(s), interleaved (odd rounds in reverse order); \
         statements/s and CPU are medians over the rounds, and every ratio (speed-up, `*_over_abort`, \
         head-to-head) is the median of the per-round ratios; the head-to-head ratios \
         (`*_slipstream_pipelined_over_*_pipelined`) put slipstream's batches in the default abort \
         mode (`client.pipeline()`) against each peer's batches"
    ));
    r.notes.push(
        "RTT 0 is the direct loopback connection; other RTTs go through the testkit's delay proxy (see \
         `lab run proxy` for what it adds). Client CPU is the runtime thread's CPU time (tokio-postgres's \
         connection task runs on it too); pgbench's is its process CPU time, -j 1."
            .into(),
    );
    r.notes.push(
        "unpinned: client, proxy threads and backends share the two vCPUs as the kernel places them."
            .into(),
    );
}

/// Head-to-head: slipstream's pipeline as the README gives it (`client.pipeline()`: abort on
/// error, batches waited for as a whole, the shape the peers run) against `peer`'s, on the
/// stock server. Not the fastest of slipstream's modes in the run: picking the best of four
/// noisy medians favours us by the pick, and the ratio would not say which mode it was (each
/// mode's rate is in the JSON, beside its speed-up).
fn head_to_head(cells: &[Cell], w: Workload, rtt: u64, peer: Peer) -> Option<f64> {
    let find = |p: Peer, m: Mode| {
        cells
            .iter()
            .find(|c| c.workload == w && c.rtt_us == rtt && c.peer == p && c.mode == m)
    };
    Some(find(Peer::Slipstream, Mode::Batch)?.over(find(peer, Mode::Batch)?))
}

/// Whether sessions can load pipeline_flush (`Err`: why not, and what to do).
async fn module_available(url: &str) -> Result<(), String> {
    let mut c = slipstream_pg::connect(url)
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    c.batch_execute("LOAD 'pipeline_flush'").await.map_err(|e| {
        format!(
            "LOAD 'pipeline_flush' failed ({e}); install it with `make -C extension/pipeline_flush \
             install` (LOAD needs a superuser)"
        )
    })
}

/// Creates the tables (idempotent) and returns the server version.
async fn setup(url: &str) -> anyhow::Result<Option<String>> {
    let mut c = slipstream_pg::connect(url)
        .await
        .context("connecting to the database")?;
    // One batch, one transaction: the check follows the CREATEs and comes before any write.
    c.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS slipstream_lab_pipeline (id int PRIMARY KEY, data text NOT NULL, hits int NOT NULL DEFAULT 0);
         CREATE SEQUENCE IF NOT EXISTS slipstream_lab_pipeline_dml_seq;
         CREATE UNLOGGED TABLE IF NOT EXISTS slipstream_lab_pipeline_dml (id bigint PRIMARY KEY, qty int NOT NULL);
         {};
         INSERT INTO slipstream_lab_pipeline (id, data) SELECT i, md5(i::text) FROM generate_series(1, {TABLE_ROWS}) i
         ON CONFLICT DO NOTHING;
         TRUNCATE slipstream_lab_pipeline_dml;",
        super::fetch_table::refuse_foreign_sql(&[
            "slipstream_lab_pipeline",
            "slipstream_lab_pipeline_dml_seq",
            "slipstream_lab_pipeline_dml"
        ])
    ))
    .await?;
    c.batch_execute("VACUUM ANALYZE slipstream_lab_pipeline")
        .await?;
    Ok(c.parameter("server_version").map(str::to_string))
}

/// Runs one cell for `duration`; returns statements completed and the time they took.
async fn measure(
    url: &str,
    workload: Workload,
    peer: Peer,
    mode: Mode,
    duration: Duration,
) -> anyhow::Result<(u64, super::Timing)> {
    let sessions = if workload == Workload::ReadOnly8 {
        SESSIONS
    } else {
        1
    };
    match peer {
        Peer::Slipstream => {
            let mut clients =
                try_join_all((0..sessions).map(|_| Slip::connect(url, mode.with_module()))).await?;
            let sw = Stopwatch::start();
            let deadline = Instant::now() + duration;
            let ops = try_join_all(
                clients
                    .iter_mut()
                    .enumerate()
                    .map(|(i, c)| c.run(workload, mode, deadline, i as u64)),
            )
            .await?;
            Ok((ops.iter().sum(), sw.stop()))
        }
        Peer::TokioPostgres => {
            let clients = try_join_all((0..sessions).map(|_| Tp::connect(url))).await?;
            let sw = Stopwatch::start();
            let deadline = Instant::now() + duration;
            let ops = try_join_all(
                clients
                    .iter()
                    .enumerate()
                    .map(|(i, c)| c.run(workload, mode, deadline, i as u64)),
            )
            .await?;
            Ok((ops.iter().sum(), sw.stop()))
        }
        Peer::Pgbench => unreachable!("pgbench runs out of process"),
    }
}

/// A cheap deterministic id sequence, so every client reads the same keys.
fn next_id(state: &mut u64) -> i32 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*state >> 33) % TABLE_ROWS as u64) as i32 + 1
}

struct Slip {
    c: slipstream_pg::Client,
    select: slipstream_pg::Statement,
    update: slipstream_pg::Statement,
    insert: slipstream_pg::Statement,
    update_dml: slipstream_pg::Statement,
    begin: slipstream_pg::Statement,
    commit: slipstream_pg::Statement,
}

impl Slip {
    async fn connect(url: &str, module: bool) -> anyhow::Result<Slip> {
        let mut c = slipstream_pg::connect(url).await?;
        // Off sets a placeholder when the module is not loaded (so it holds if it is loaded
        // later), and turns it off where the server preloads it.
        c.batch_execute(if module {
            "LOAD 'pipeline_flush'"
        } else {
            "SET pipeline_flush.enabled = off"
        })
        .await?;
        Ok(Slip {
            select: c.prepare(SELECT).await?,
            update: c.prepare(UPDATE).await?,
            insert: c.prepare(INSERT).await?,
            update_dml: c.prepare(UPDATE_DML).await?,
            begin: c.prepare("BEGIN").await?,
            commit: c.prepare("COMMIT").await?,
            c,
        })
    }

    async fn run(
        &mut self,
        workload: Workload,
        mode: Mode,
        deadline: Instant,
        seed: u64,
    ) -> anyhow::Result<u64> {
        let mut rng = seed;
        let mut ops = 0u64;
        let error_mode = if mode.continues() {
            PipelineMode::ContinueOnError
        } else {
            PipelineMode::AbortOnError
        };
        let opts = PipelineOptions::new().mode(error_mode);
        // The same shapes in either error mode.
        let mode = mode.abort_twin();
        match (workload, mode) {
            (Workload::ReadOnly | Workload::ReadOnly8, Mode::Plain) => {
                while Instant::now() < deadline {
                    for _ in 0..10 {
                        let row = self
                            .c
                            .query_one(&self.select, &[&next_id(&mut rng)])
                            .await?;
                        std::hint::black_box(row.get::<_, &str>(0)?);
                    }
                    ops += 10;
                }
            }
            (Workload::ReadOnly | Workload::ReadOnly8, Mode::Batch) => {
                while Instant::now() < deadline {
                    let mut p = self.c.pipeline_with(opts.clone());
                    for _ in 0..BATCH {
                        p.query(&self.select, &[&next_id(&mut rng)]).await?;
                    }
                    for r in p.end().await {
                        std::hint::black_box(r?);
                    }
                    ops += BATCH as u64;
                }
            }
            (Workload::ReadOnly | Workload::ReadOnly8, Mode::Window) => {
                let mut p = self.c.pipeline_with(opts);
                let mut ring = VecDeque::new();
                let window = PipelineOptions::new().get_max_in_flight();
                while Instant::now() < deadline {
                    for _ in 0..BATCH {
                        ring.push_back(p.query(&self.select, &[&next_id(&mut rng)]).await?);
                        if ring.len() > 2 * window
                            && let Some(op) = ring.pop_front()
                        {
                            std::hint::black_box(p.process(&op).await?);
                        }
                    }
                    p.sync();
                    ops += BATCH as u64;
                }
                for r in p.end().await {
                    r?;
                }
            }
            (
                _,
                Mode::BatchContinue
                | Mode::WindowContinue
                | Mode::BatchContinueModule
                | Mode::WindowContinueModule,
            ) => {
                anyhow::bail!("continue-on-error modes run as their abort-mode shape")
            }
            (Workload::Dml, Mode::Plain) => {
                while Instant::now() < deadline {
                    self.c.execute(&self.begin, &[]).await?;
                    for _ in 0..DML_LOOPS_PLAIN {
                        self.c.execute(&self.insert, &[]).await?;
                        for _ in 0..4 {
                            self.c.execute(&self.update_dml, &[]).await?;
                        }
                    }
                    self.c.execute(&self.commit, &[]).await?;
                    ops += (DML_LOOPS_PLAIN * 5 + 2) as u64;
                }
            }
            (Workload::Dml, Mode::Batch | Mode::Window) => {
                while Instant::now() < deadline {
                    let mut p = self.c.pipeline_with(opts.clone());
                    p.execute(&self.begin, &[]).await?;
                    for i in 0..DML_LOOPS {
                        p.execute(&self.insert, &[]).await?;
                        let mut last = None;
                        for _ in 0..4 {
                            last = Some(p.execute(&self.update_dml, &[]).await?);
                        }
                        // Batch mode waits for each 100 statements, like the peers; the last
                        // batch is waited for with the COMMIT that ends it, as pgbench's last
                        // pipeline carries its COMMIT (a wait here would cost an extra round
                        // trip the peers do not pay).
                        let batch_ends = (i + 1) % (BATCH / 5) == 0 && i + 1 < DML_LOOPS;
                        if let (Mode::Batch, true, Some(op)) = (mode, batch_ends, last) {
                            p.process(&op).await?;
                        }
                    }
                    p.commit().await?;
                    for r in p.end().await {
                        r?;
                    }
                    ops += (DML_LOOPS * 5 + 2) as u64;
                }
            }
            (Workload::Mix, Mode::Plain) => {
                while Instant::now() < deadline {
                    self.c.execute(&self.begin, &[]).await?;
                    for _ in 0..MIX_READS {
                        let row = self
                            .c
                            .query_one(&self.select, &[&next_id(&mut rng)])
                            .await?;
                        std::hint::black_box(row.get::<_, &str>(0)?);
                    }
                    for _ in 0..MIX_WRITES {
                        self.c.execute(&self.update, &[&next_id(&mut rng)]).await?;
                    }
                    self.c.execute(&self.commit, &[]).await?;
                    ops += (MIX_READS + MIX_WRITES + 2) as u64;
                }
            }
            (Workload::Mix, Mode::Batch | Mode::Window) => {
                let mut p = self.c.pipeline_with(opts);
                while Instant::now() < deadline {
                    p.execute(&self.begin, &[]).await?;
                    for _ in 0..MIX_READS {
                        p.query(&self.select, &[&next_id(&mut rng)]).await?;
                    }
                    for _ in 0..MIX_WRITES {
                        p.execute(&self.update, &[&next_id(&mut rng)]).await?;
                    }
                    let commit = p.commit().await?;
                    p.sync();
                    if mode == Mode::Batch {
                        p.process(&commit).await?;
                    }
                    ops += (MIX_READS + MIX_WRITES + 2) as u64;
                }
                for r in p.end().await {
                    r?;
                }
            }
        }
        Ok(ops)
    }
}

struct Tp {
    c: tokio_postgres::Client,
    select: tokio_postgres::Statement,
    update: tokio_postgres::Statement,
    insert: tokio_postgres::Statement,
    update_dml: tokio_postgres::Statement,
    begin: tokio_postgres::Statement,
    commit: tokio_postgres::Statement,
}

impl Tp {
    async fn connect(url: &str) -> anyhow::Result<Tp> {
        let c = super::client_config::connect_tokio_postgres(url).await?;
        // The server's own flushing, as slipstream's cells without the module have.
        c.batch_execute("SET pipeline_flush.enabled = off").await?;
        Ok(Tp {
            select: c.prepare(SELECT).await?,
            update: c.prepare(UPDATE).await?,
            insert: c.prepare(INSERT).await?,
            update_dml: c.prepare(UPDATE_DML).await?,
            begin: c.prepare("BEGIN").await?,
            commit: c.prepare("COMMIT").await?,
            c,
        })
    }

    async fn run(
        &self,
        workload: Workload,
        mode: Mode,
        deadline: Instant,
        seed: u64,
    ) -> anyhow::Result<u64> {
        let c = &self.c;
        let mut rng = seed;
        let mut ops = 0u64;
        let ro = matches!(workload, Workload::ReadOnly | Workload::ReadOnly8);
        while Instant::now() < deadline {
            match (workload, mode) {
                (
                    _,
                    Mode::Window
                    | Mode::BatchContinue
                    | Mode::WindowContinue
                    | Mode::BatchContinueModule
                    | Mode::WindowContinueModule,
                ) => {
                    anyhow::bail!("tokio-postgres has no sliding window or error mode")
                }
                (_, Mode::Plain) if ro => {
                    for _ in 0..10 {
                        let row = c.query_one(&self.select, &[&next_id(&mut rng)]).await?;
                        std::hint::black_box(row.try_get::<_, &str>(0)?);
                    }
                    ops += 10;
                }
                (_, Mode::Batch) if ro => {
                    let ids: Vec<i32> = (0..BATCH).map(|_| next_id(&mut rng)).collect();
                    let params = one_param_each(&ids);
                    let rows =
                        try_join_all(params.iter().map(|p| c.query_one(&self.select, p))).await?;
                    std::hint::black_box(rows);
                    ops += BATCH as u64;
                }
                (Workload::Dml, Mode::Plain) => {
                    c.execute(&self.begin, &[]).await?;
                    for _ in 0..DML_LOOPS_PLAIN {
                        c.execute(&self.insert, &[]).await?;
                        for _ in 0..4 {
                            c.execute(&self.update_dml, &[]).await?;
                        }
                    }
                    c.execute(&self.commit, &[]).await?;
                    ops += (DML_LOOPS_PLAIN * 5 + 2) as u64;
                }
                (Workload::Dml, Mode::Batch) => {
                    // BEGIN rides in the first batch and COMMIT in the last, as in pgbench's
                    // script and slipstream's pipeline: sent alone, each would cost a round
                    // trip of its own. Polled together, the futures' requests go out in order.
                    let batches = DML_LOOPS / (BATCH / 5);
                    for b in 0..batches {
                        let mut stmts: Vec<&tokio_postgres::Statement> =
                            Vec::with_capacity(BATCH + 2);
                        if b == 0 {
                            stmts.push(&self.begin);
                        }
                        stmts.extend((0..BATCH).map(|i| {
                            if i % 5 == 0 {
                                &self.insert
                            } else {
                                &self.update_dml
                            }
                        }));
                        if b + 1 == batches {
                            stmts.push(&self.commit);
                        }
                        for r in join_all(stmts.into_iter().map(|s| c.execute(s, &[]))).await {
                            r?;
                        }
                    }
                    ops += (DML_LOOPS * 5 + 2) as u64;
                }
                (_, Mode::Plain) => {
                    c.execute(&self.begin, &[]).await?;
                    for _ in 0..MIX_READS {
                        let row = c.query_one(&self.select, &[&next_id(&mut rng)]).await?;
                        std::hint::black_box(row.try_get::<_, &str>(0)?);
                    }
                    for _ in 0..MIX_WRITES {
                        c.execute(&self.update, &[&next_id(&mut rng)]).await?;
                    }
                    c.execute(&self.commit, &[]).await?;
                    ops += (MIX_READS + MIX_WRITES + 2) as u64;
                }
                (_, Mode::Batch) => {
                    let reads: Vec<i32> = (0..MIX_READS).map(|_| next_id(&mut rng)).collect();
                    let writes: Vec<i32> = (0..MIX_WRITES).map(|_| next_id(&mut rng)).collect();
                    // Polled together, the futures' requests go out in this order in one write.
                    let begin = c.execute(&self.begin, &[]);
                    let (reads, writes) = (one_param_each(&reads), one_param_each(&writes));
                    let selects = join_all(reads.iter().map(|p| c.query_one(&self.select, p)));
                    let updates = join_all(writes.iter().map(|p| c.execute(&self.update, p)));
                    let commit = c.execute(&self.commit, &[]);
                    let (b, s, u, cm) = tokio::join!(begin, selects, updates, commit);
                    b?;
                    for x in s {
                        std::hint::black_box(x?);
                    }
                    for x in u {
                        x?;
                    }
                    cm?;
                    ops += (MIX_READS + MIX_WRITES + 2) as u64;
                }
            }
        }
        Ok(ops)
    }
}

type TpParam<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);

/// One parameter list per value, to pass to concurrently polled futures.
fn one_param_each(ids: &[i32]) -> Vec<[TpParam<'_>; 1]> {
    ids.iter().map(|id| [id as TpParam<'_>]).collect()
}

/// Runs pgbench for one cell; returns (statements, wall, pgbench CPU).
///
/// pgbench `-M prepared` prepares every command of the script with its own round trip during
/// each client's first transaction (a thousand for the DML script), so throughput comes from
/// its per-transaction log without each client's first transaction, and the run is long
/// enough to have later ones.
fn run_pgbench(
    url: &str,
    workload: Workload,
    mode: Mode,
    secs: u64,
    rtt_us: u64,
    round: usize,
) -> anyhow::Result<Run> {
    let pipelined = mode == Mode::Batch;
    let (start, end) = if pipelined {
        ("\\startpipeline\n", "\\endpipeline\n")
    } else {
        ("", "")
    };
    let select =
        "\\set id random(1, 10000)\nSELECT data FROM slipstream_lab_pipeline WHERE id = :id;\n";
    let mut script = String::new();
    let per_tx = match workload {
        Workload::ReadOnly | Workload::ReadOnly8 => {
            let n = if pipelined { BATCH } else { 1 };
            script.push_str(start);
            for _ in 0..n {
                script.push_str(select);
            }
            script.push_str(end);
            n
        }
        Workload::Dml => {
            let loops = if pipelined {
                DML_LOOPS
            } else {
                DML_LOOPS_PLAIN
            };
            script.push_str(start);
            script.push_str("BEGIN;\n");
            for i in 0..loops {
                script.push_str(&format!("{INSERT};\n"));
                for _ in 0..4 {
                    script.push_str(&format!("{UPDATE_DML};\n"));
                }
                // Pipelines of 100 statements inside the transaction.
                if pipelined && (i + 1) % (BATCH / 5) == 0 && i + 1 < loops {
                    script.push_str(end);
                    script.push_str(start);
                }
            }
            script.push_str("COMMIT;\n");
            script.push_str(end);
            loops * 5 + 2
        }
        Workload::Mix => {
            script.push_str(start);
            script.push_str("BEGIN;\n");
            for _ in 0..MIX_READS {
                script.push_str(select);
            }
            for _ in 0..MIX_WRITES {
                script.push_str(
                    "\\set id random(1, 10000)\nUPDATE slipstream_lab_pipeline SET hits = hits + 1 WHERE id = :id;\n",
                );
            }
            script.push_str("COMMIT;\n");
            script.push_str(end);
            MIX_READS + MIX_WRITES + 2
        }
    };
    let clients = if workload == Workload::ReadOnly8 {
        SESSIONS
    } else {
        1
    };
    // Preparing: one round trip per command per client, before the measured transactions.
    let commands = script.lines().filter(|l| !l.starts_with('\\')).count() as u64;
    let prepare_us = commands * clients as u64 * (rtt_us + 100);
    let secs = secs + prepare_us.div_ceil(1_000_000);
    let (run, log) = run_past_the_preparing(pgbench_secs(secs, per_tx, rtt_us), |t| {
        let args: Vec<String> = ["-M", "prepared", "-j", "1", "-l", "-c"]
            .iter()
            .map(|a| a.to_string())
            .chain([clients.to_string(), "-T".into(), t.to_string()])
            .collect();
        let run = pgbench_peer(url, &script, &args)?;
        let log = after_first_transactions(&run.logs, per_tx);
        Ok((run, log))
    })?;
    let wall = Duration::from_secs_f64(log.statements as f64 / log.rate);
    // CPU per statement over everything pgbench ran, first transactions included.
    let cpu_share = log.statements as f64 / (log.all_transactions * per_tx as u64).max(1) as f64;
    Ok(Run {
        round,
        ops: log.statements,
        wall,
        cpu: run.cpu.mul_f64(cpu_share),
    })
}

/// Runs pgbench as this experiment's peer: with the server's own flushing, as every cell but
/// the pipeline_flush ones (`Slip::connect`, `Tp::connect`). A server that preloads the
/// module (`session_preload_libraries`, `shared_preload_libraries`) has it on by default, and
/// pgbench's sessions would otherwise run with it while the note says they did not.
fn pgbench_peer(
    url: &str,
    script: &str,
    args: &[String],
) -> anyhow::Result<super::pgbench::PgbenchRun> {
    super::pgbench::run_with_settings(url, script, args, &[("pipeline_flush.enabled", "off")])
}

/// How long pgbench runs: `secs` after its clients' first transactions, which prepare each of
/// the script's `per_tx` commands with a round trip of its own (twice the RTT allowed for each,
/// for the proxy and the server). Only later transactions are measured: at 1 ms a pipelined
/// DML transaction (1,002 commands) prepares for over a second, so a fixed `-T 1` left no
/// later transaction and the cell was skipped on a loaded machine.
fn pgbench_secs(secs: u64, per_tx: usize, rtt_us: u64) -> u64 {
    secs + (per_tx as u64 * rtt_us * 2).div_ceil(1_000_000)
}

/// How many times [`run_past_the_preparing`] runs pgbench, each time for twice as long.
const PGBENCH_ATTEMPTS: u32 = 3;

/// Runs `attempt` with a `-T` of `secs`, and again with twice the time while it measured no
/// transaction after the preparing ones. The estimate behind `secs` takes the proxy's round
/// trip as the nominal RTT; on a loaded machine (make test runs test binaries side by side)
/// the proxy's threads wait for a CPU and each of the round trips in which `-M prepared`
/// prepares the script's commands, one client after another on pgbench's one thread, takes
/// several times that. Before: the quick form's readonly8 and DML batch cells at 1 ms ran
/// `-T 3` and `-T 6`, spent all of it preparing, and were left out of the result.
fn run_past_the_preparing<R>(
    secs: u64,
    mut attempt: impl FnMut(u64) -> anyhow::Result<(R, PgbenchLog)>,
) -> anyhow::Result<(R, PgbenchLog)> {
    let mut t = secs.max(1);
    let mut attempts = 1;
    loop {
        let (run, log) = attempt(t)?;
        if log.rate > 0.0 {
            return Ok((run, log));
        }
        anyhow::ensure!(
            attempts < PGBENCH_ATTEMPTS,
            "pgbench completed no transaction after each client's first (the one that \
             prepares every command) in {PGBENCH_ATTEMPTS} runs, the last with -T {t}: it \
             logged {} transactions; is the machine loaded, or the server's round trip far \
             longer than the delay proxy's?",
            log.all_transactions
        );
        attempts += 1;
        t *= 2;
    }
}

/// What a pgbench per-transaction log (`-l`) says once each client's first transaction is
/// left out.
#[derive(Debug, PartialEq)]
struct PgbenchLog {
    /// Statements of the transactions after each client's first.
    statements: u64,
    /// Their rate, statements per second of the clients' time in them, summed over clients.
    rate: f64,
    /// Every transaction logged, first ones included.
    all_transactions: u64,
}

/// Reads pgbench's `-l` lines (`client_id transaction_no time_us ...`), `per_tx` statements a
/// transaction, leaving out each client's first transaction (the one in which `-M prepared`
/// prepares every command). A client runs on one pgbench thread, which logs its transactions
/// in order into its own file, so a client's first line is its first transaction. Not the
/// line numbered 0: pgbench 15 counts a client's transactions from 1 (it bumps the count
/// before it logs), so a test of `transaction_no > 0` kept every first transaction in.
fn after_first_transactions(logs: &str, per_tx: usize) -> PgbenchLog {
    // Per client: transactions after its first, and the microseconds they took.
    let mut per_client: std::collections::HashMap<u64, (u64, u64)> = Default::default();
    let mut all_transactions = 0u64;
    for line in logs.lines() {
        let f: Vec<u64> = line
            .split_whitespace()
            .take(3)
            .filter_map(|v| v.parse().ok())
            .collect();
        let [client, _transaction, time_us] = f[..] else {
            continue;
        };
        all_transactions += 1;
        match per_client.entry(client) {
            std::collections::hash_map::Entry::Vacant(first) => {
                first.insert((0, 0));
            }
            std::collections::hash_map::Entry::Occupied(mut later) => {
                let e = later.get_mut();
                e.0 += 1;
                e.1 += time_us;
            }
        }
    }
    let rate: f64 = per_client
        .values()
        .filter(|(_, us)| *us > 0)
        .map(|&(n, us)| (n * per_tx as u64) as f64 / (us as f64 / 1e6))
        .sum();
    let statements = per_client.values().map(|(n, _)| n * per_tx as u64).sum();
    PgbenchLog {
        statements,
        rate,
        all_transactions,
    }
}

#[cfg(test)]
mod tests {
    use super::super::via_proxy;
    use super::*;

    #[test]
    fn every_continue_cell_runs_beside_its_abort_twin_in_both_orders() {
        for (i, &(peer, mode)) in SHAPES.iter().enumerate() {
            if !mode.continues() {
                continue;
            }
            let twin = SHAPES
                .iter()
                .position(|&s| s == (peer, mode.abort_twin()))
                .expect("every continue cell's abort twin is a cell");
            // A reversed round keeps the distance.
            let most = if mode.with_module() { 1 } else { 2 };
            assert!(
                i.abs_diff(twin) <= most,
                "{mode:?} runs {} cells from {:?}",
                i.abs_diff(twin),
                mode.abort_twin()
            );
        }
    }

    fn cell(mode: Mode, rates: &[(usize, u64)]) -> Cell {
        Cell {
            workload: Workload::ReadOnly,
            rtt_us: 0,
            peer: Peer::Slipstream,
            mode,
            runs: rates
                .iter()
                .map(|&(round, ops)| Run {
                    round,
                    ops,
                    wall: Duration::from_secs(1),
                    cpu: Duration::ZERO,
                })
                .collect(),
        }
    }

    /// docs/lab.md: ratios are paired where the runs ran side by side. Steps: a loopback cell
    /// and a far-RTT cell with three rounds each. Before the fix the ratio was the median of
    /// per-round pairs (50/100, 60/200, 90/100: 0.5), pairing runs minutes apart; it is now the
    /// ratio of the medians (60/100).
    #[test]
    fn the_rtt_over_loopback_ratio_is_of_the_medians() {
        let far = cell(Mode::Window, &[(0, 50), (1, 60), (2, 90)]);
        let loopback = cell(Mode::Window, &[(0, 100), (1, 200), (2, 100)]);
        assert!((rtt_over_loopback(&far, &loopback) - 0.6).abs() < 1e-9);
        assert!(rtt_over_loopback(&far, &cell(Mode::Window, &[])).is_nan());
    }

    #[test]
    fn ratios_pair_runs_of_the_same_round_and_take_the_median() {
        // Per round: 50/100, 60/200, 90/100.
        let continues = cell(Mode::BatchContinue, &[(0, 50), (1, 60), (2, 90)]);
        let aborts = cell(Mode::Batch, &[(0, 100), (1, 200), (2, 100)]);
        // Ratios 0.5, 0.3, 0.9: the median is 0.5, where the ratio of medians would be 0.6.
        assert_eq!(continues.over(&aborts), 0.5);
        assert_eq!(continues.ops_per_s(), 60.0);
        // A round the twin missed (a failed pgbench run) is left out, not paired with another.
        // Rounds 1 and 2 pair as 60/200 and 90/100, median (0.3 + 0.9) / 2; paired by
        // position they would be 50/200 and 60/100, median 0.425.
        let gappy = cell(Mode::Batch, &[(1, 200), (2, 100)]);
        assert_eq!(continues.over(&gappy), 0.6);
    }

    /// docs/lab.md: a ratio that does not exist is NaN (`null` in the file), never a made-up
    /// figure. Steps: a plain cell that completed nothing in its one round (a run too short
    /// for a transaction at 1 ms RTT) beside its batch cell; the report's speed-up and the
    /// plain cell's rate. Before the fix every ratio went through `.max(1e-9)`: the speed-up
    /// with no pair to divide came out as 1e-9 (a measured slow-down of a billion times, in
    /// the JSON), and the plain rate of 0 statements/s as 1e-9.
    #[test]
    fn a_ratio_without_pairs_stays_missing() {
        let cells = [cell(Mode::Plain, &[(0, 0)]), cell(Mode::Batch, &[(0, 100)])];
        let mut r = ExperimentResult::new("pipeline", TITLE, true);
        report(&mut r, &cells, &[0], 1);
        let speedup = r.ratios["readonly1_rtt0us_slipstream_batch_speedup"];
        assert!(speedup.is_nan(), "speed-up over no pairs: {speedup}");
        assert_eq!(
            r.ratios["readonly1_rtt0us_slipstream_plain_statements_per_s"],
            0.0
        );
        assert_eq!(
            r.ratios["readonly1_rtt0us_slipstream_batch_statements_per_s"],
            100.0
        );
    }

    /// docs/lab.md: a figure that does not exist stays missing. CPU per statement of a run
    /// that completed no statement is not a figure. Steps: a cell whose one run completed
    /// nothing (its CPU spent all the same), and one with such a run among others. Before the
    /// fix the run's CPU was divided by `ops.max(1)`: 0.5 s of CPU over no statement read as
    /// 500,000 µs per statement, and in the second cell it took part in the median.
    #[test]
    fn cpu_per_statement_leaves_out_runs_without_statements() {
        let run = |round, ops, cpu_ms| Run {
            round,
            ops,
            wall: Duration::from_secs(1),
            cpu: Duration::from_millis(cpu_ms),
        };
        let idle = Cell {
            runs: vec![run(0, 0, 500)],
            ..cell(Mode::Plain, &[])
        };
        let cpu = idle.cpu_us_per_op();
        assert!(cpu.is_nan(), "CPU per statement over no statement: {cpu}");
        // 10 and 20 µs per statement in the runs that did something: the median is 15.
        let mixed = Cell {
            runs: vec![run(0, 0, 500), run(1, 1000, 10), run(2, 1000, 20)],
            ..cell(Mode::Plain, &[])
        };
        assert_eq!(mixed.cpu_us_per_op(), 15.0);
    }

    /// The head-to-head ratio is the one a reader takes for "slipstream pipelined against the
    /// peer": it must be the pipeline a user gets from the README (`client.pipeline()`:
    /// batches, abort on error, the shape the peers run), not whichever of slipstream's modes
    /// came out fastest in this run, unnamed.
    #[test]
    fn the_head_to_head_compares_the_default_pipeline_with_the_peers() {
        let with = |peer: Peer, mode: Mode, rates: &[(usize, u64)]| Cell {
            peer,
            ..cell(mode, rates)
        };
        let cells = [
            with(
                Peer::Slipstream,
                Mode::Batch,
                &[(0, 100), (1, 100), (2, 100)],
            ),
            with(
                Peer::Slipstream,
                Mode::Window,
                &[(0, 300), (1, 300), (2, 300)],
            ),
            with(
                Peer::TokioPostgres,
                Mode::Batch,
                &[(0, 50), (1, 50), (2, 50)],
            ),
        ];
        assert_eq!(
            head_to_head(&cells, Workload::ReadOnly, 0, Peer::TokioPostgres),
            Some(2.0)
        );
        assert_eq!(
            head_to_head(&cells, Workload::ReadOnly, 0, Peer::Pgbench),
            None
        );
    }

    /// The pipeline experiment's note: cells other than the pipeline_flush ones ran "with the
    /// server's own flushing"; `Slip::connect` and `Tp::connect` turn the module off in case
    /// the server preloads it. Steps: a server with `session_preload_libraries =
    /// 'pipeline_flush'` (needs `make -C extension/pipeline_flush install`), pgbench run as
    /// the peer, each session recording the setting it ran with. Before the fix pgbench's
    /// sessions ran with the module on (its default) beside peers that had it off.
    #[test]
    fn pgbench_runs_with_the_servers_own_flushing_as_the_other_peers() {
        let cluster = slipstream_testkit::Cluster::builder()
            .setting("session_preload_libraries", "pipeline_flush")
            .start()
            .unwrap();
        cluster.psql("CREATE TABLE seen (enabled text)").unwrap();
        let args: Vec<String> = ["-t", "2"].iter().map(|a| a.to_string()).collect();
        pgbench_peer(
            &cluster.url(),
            "INSERT INTO seen SELECT current_setting('pipeline_flush.enabled', true);\n",
            &args,
        )
        .unwrap();
        let seen = cluster
            .psql("SELECT string_agg(coalesce(enabled, 'unset'), ',') FROM seen")
            .unwrap();
        assert_eq!(
            seen.trim(),
            "off,off",
            "pipeline_flush.enabled in pgbench's sessions"
        );
        // Each in-process peer too (holds).
        let url = without_tls(&cluster.url());
        let rt = runtime().unwrap();
        rt.block_on(setup(&url)).unwrap();
        let (slip, tp) = rt.block_on(async {
            const Q: &str = "SELECT current_setting('pipeline_flush.enabled', true)";
            let mut slip = Slip::connect(&url, false).await.unwrap();
            let s: Option<String> = slip.c.query_one(Q, &[]).await.unwrap().get(0).unwrap();
            let tp = Tp::connect(&url).await.unwrap();
            let t: Option<String> = tp.c.query_one(Q, &[]).await.unwrap().get(0);
            (s, t)
        });
        assert_eq!((slip.as_deref(), tp.as_deref()), (Some("off"), Some("off")));
    }

    /// Round trips per statement of one pipelined ("batches") iteration of `workload`, for
    /// slipstream-pg and tokio-postgres, counted by a delay proxy (its delay keeps each reply
    /// behind the whole burst it answers, so a burst counts one).
    fn batch_round_trips_per_statement(workload: Workload) -> (f64, f64) {
        let cluster = slipstream_testkit::Cluster::builder().start().unwrap();
        let url = without_tls(&cluster.url());
        let rt = runtime().unwrap();
        rt.block_on(setup(&url)).unwrap();
        let proxy =
            DelayProxy::start(tcp_target(&url).unwrap(), Duration::from_millis(20)).unwrap();
        let url = via_proxy(&url, proxy.port());
        rt.block_on(async {
            // A deadline just ahead: the loop runs its first iteration (several round trips
            // of 20 ms) and stops; `ops` says how many statements it ran.
            let soon = || Instant::now() + Duration::from_millis(5);
            let mut slip = Slip::connect(&url, false).await.unwrap();
            let before = proxy.round_trips();
            let ops = slip.run(workload, Mode::Batch, soon(), 1).await.unwrap();
            let slip_trips = (proxy.round_trips() - before) as f64 / ops as f64;
            let tp = Tp::connect(&url).await.unwrap();
            let before = proxy.round_trips();
            let ops = tp.run(workload, Mode::Batch, soon(), 1).await.unwrap();
            let tp_trips = (proxy.round_trips() - before) as f64 / ops as f64;
            (slip_trips, tp_trips)
        })
    }

    /// docs/lab.md: the pipeline experiment's "batches" are waited for as a whole, what every
    /// peer does, and the DML transaction is 100-statement pipelines inside one transaction
    /// (pgbench's script: ten pipelines, BEGIN riding in the first and COMMIT in the last).
    /// Steps: one DML transaction (1,002 statements) per client through a 20 ms delay proxy,
    /// round trips counted. Before the fix tokio-postgres sent BEGIN and COMMIT alone (12
    /// round trips) and slipstream-pg waited for its last batch before sending COMMIT (11),
    /// where pgbench sends 10: at 5 ms RTT tokio-postgres paid 20% more waiting than pgbench.
    #[test]
    fn every_client_sends_the_dml_transaction_in_the_same_round_trips() {
        let (slip, tp) = batch_round_trips_per_statement(Workload::Dml);
        let transaction = (DML_LOOPS * 5 + 2) as f64;
        let pipelines = (DML_LOOPS * 5 / BATCH) as f64;
        assert_eq!(
            (slip * transaction, tp * transaction),
            (pipelines, pipelines),
            "round trips per DML transaction (slipstream-pg, tokio-postgres); pgbench's script \
             sends {pipelines} pipelines"
        );
    }

    /// Holds: the read-only and mix batches already cost every client the same round trips
    /// (one per 100 lookups; one per mix transaction).
    #[test]
    fn read_only_and_mix_batches_cost_every_client_the_same_round_trips() {
        let (slip, tp) = batch_round_trips_per_statement(Workload::ReadOnly);
        assert_eq!((slip, tp), (1.0 / BATCH as f64, 1.0 / BATCH as f64));
        let (slip, tp) = batch_round_trips_per_statement(Workload::Mix);
        let per_tx = 1.0 / (MIX_READS + MIX_WRITES + 2) as f64;
        assert_eq!((slip, tp), (per_tx, per_tx));
    }

    /// docs/lab.md: "pgbench's first transaction is left out of its rate in `pipeline`" (with
    /// `-M prepared` it prepares every command then, a round trip each). Steps: run the real
    /// pgbench with `-l`, two clients of three transactions, and read its log as the cell
    /// does. Before the fix the reader skipped transaction number 0, which pgbench 15 never
    /// logs (it numbers from 1): it counted all 6 transactions (12 statements), every
    /// client's preparing one included.
    #[test]
    fn pgbench_rates_leave_out_each_clients_first_transaction() {
        let cluster = slipstream_testkit::Cluster::builder().start().unwrap();
        let args: Vec<String> = ["-M", "prepared", "-c", "2", "-j", "1", "-t", "3", "-l"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        let run =
            super::super::pgbench::run(&cluster.url(), "SELECT 1;\nSELECT 2;\n", &args).unwrap();
        let log = after_first_transactions(&run.logs, 2);
        assert_eq!(log.all_transactions, 6, "pgbench's log:\n{}", run.logs);
        assert_eq!(
            log.statements,
            2 * 2 * 2,
            "two later transactions of two statements per client; pgbench's log:\n{}",
            run.logs
        );
    }

    /// pgbench runs long enough for later transactions after the preparing ones, which take a
    /// round trip per command. Before (session 44's clean-clone CI): `-T 1` at 1 ms RTT for
    /// the 1,002-command DML pipeline, whose first transaction alone takes over a second, so
    /// the quick form's `dml_rtt1000us_pgbench_batch` cell had no transaction to measure.
    #[test]
    fn pgbench_outlasts_the_preparing_transaction() {
        let dml = DML_LOOPS * 5 + 2;
        let preparing_s = |per_tx: usize, rtt_us: u64| per_tx as f64 * rtt_us as f64 / 1e6;
        for (per_tx, rtt_us) in [(dml, 1000), (dml, 5000), (BATCH, 1000), (1, 1000)] {
            let total = pgbench_secs(1, per_tx, rtt_us) as f64;
            assert!(
                total >= 1.0 + 2.0 * preparing_s(per_tx, rtt_us),
                "{per_tx} commands at {rtt_us} us: {total} s"
            );
        }
        assert_eq!(pgbench_secs(2, dml, 0), 2, "no delay: no time added");
    }

    /// A pgbench cell measures even when the machine makes each round trip several times the
    /// nominal RTT. Steps: the quick form's readonly8 batch cell, told the RTT is 1 ms, through
    /// a proxy that takes 5 ms, as the proxy of a machine running test binaries side by side
    /// does. Before the fix (session 46's `make test`): "pgbench completed no transaction
    /// after its first in 2 s", and the cell was left out of the result.
    #[test]
    fn a_pgbench_cell_whose_round_trips_outlast_the_estimate_still_measures() {
        let cluster = slipstream_testkit::Cluster::builder().start().unwrap();
        let url = without_tls(&cluster.url());
        runtime().unwrap().block_on(setup(&url)).unwrap();
        let proxy = DelayProxy::start(tcp_target(&url).unwrap(), Duration::from_millis(5)).unwrap();
        let run = run_pgbench(
            &via_proxy(&url, proxy.port()),
            Workload::ReadOnly8,
            Mode::Batch,
            1,
            1000,
            0,
        )
        .unwrap();
        assert!(run.ops >= BATCH as u64, "{} statements", run.ops);
    }

    /// Each run is twice as long as the last, and the last one's failure says what pgbench
    /// logged and what to check.
    #[test]
    fn pgbench_runs_again_for_twice_as_long_and_then_says_why_it_gave_up() {
        let mut asked = Vec::new();
        let only_first = || after_first_transactions("0 1 900 0 1 2\n1 1 900 0 1 2\n", 5);
        let e = run_past_the_preparing(3, |t| {
            asked.push(t);
            Ok(((), only_first()))
        })
        .unwrap_err()
        .to_string();
        assert_eq!(asked, [3, 6, 12]);
        assert!(
            e.contains("-T 12") && e.contains("logged 2 transactions"),
            "{e}"
        );
        let mut asked = Vec::new();
        let (_, log) = run_past_the_preparing(3, |t| {
            asked.push(t);
            let logs = if t < 6 {
                "0 1 900 0 1 2\n"
            } else {
                "0 1 900 0 1 2\n0 2 100 0 1 3\n"
            };
            Ok(((), after_first_transactions(logs, 5)))
        })
        .unwrap();
        assert_eq!((asked, log.statements), (vec![3, 6], 5));
    }

    /// The rate comes from the later transactions' own times: a slow first transaction (the
    /// preparing one) changes nothing. Lines as pgbench 15 writes them, numbered from 1.
    #[test]
    fn a_slow_first_transaction_does_not_change_the_rate() {
        let logs = "0 1 90000 0 1795867317 691484\n1 1 90000 0 1795867317 691598\n\
                    0 2 100 0 1795867317 691628\n1 2 200 0 1795867317 691651\n\
                    0 3 100 0 1795867317 691673\n";
        let log = after_first_transactions(logs, 10);
        // Client 0: 20 statements in 200 us; client 1: 10 in 200 us.
        assert_eq!(
            log,
            PgbenchLog {
                statements: 30,
                rate: 100_000.0 + 50_000.0,
                all_transactions: 5,
            }
        );
    }

    #[test]
    fn connection_strings_are_pointed_at_the_proxy() {
        assert_eq!(
            via_proxy("postgres://u:p@db.example:5433/app?sslmode=disable", 9),
            "postgres://u:p@127.0.0.1:9/app?sslmode=disable"
        );
        assert_eq!(
            via_proxy("postgresql://127.0.0.1:5432", 9),
            "postgres://127.0.0.1:9"
        );
        assert_eq!(
            via_proxy("host=/tmp port=5432 user=x sslmode=disable", 9),
            "user=x sslmode=disable host=127.0.0.1 port=9"
        );
    }

    /// The experiment writes only tables the lab's role made. Steps: a role `mallory` with
    /// CREATE on `public` creates `slipstream_lab_pipeline` as the experiment would, open to
    /// all, with a trigger that notes who inserted; then the experiment's setup as the
    /// superuser. Before the fix `CREATE TABLE IF NOT EXISTS` kept her table and the setup's
    /// INSERT fired her trigger as `postgres`: her code ran with the lab's rights, and every
    /// later UPDATE of the measured loop would have run it again.
    #[test]
    fn a_table_another_role_made_under_the_experiments_name_is_refused() {
        let cluster = slipstream_testkit::Cluster::builder().start().unwrap();
        cluster
            .psql(
                "CREATE ROLE mallory LOGIN; GRANT CREATE ON SCHEMA public TO mallory;
                 SET ROLE mallory;
                 CREATE TABLE public.mallory_calls (caller text);
                 GRANT INSERT ON public.mallory_calls TO PUBLIC;
                 CREATE TABLE public.slipstream_lab_pipeline (id int PRIMARY KEY, data text NOT NULL, hits int NOT NULL DEFAULT 0);
                 GRANT ALL ON public.slipstream_lab_pipeline TO PUBLIC;
                 CREATE FUNCTION public.note() RETURNS trigger LANGUAGE plpgsql AS $$
                   BEGIN INSERT INTO public.mallory_calls VALUES (current_user); RETURN NEW; END $$;
                 CREATE TRIGGER note BEFORE INSERT OR UPDATE ON public.slipstream_lab_pipeline
                   FOR EACH STATEMENT EXECUTE FUNCTION public.note();",
            )
            .unwrap();
        let got = runtime().unwrap().block_on(setup(&cluster.url()));
        let calls = cluster
            .psql("SELECT count(*) || ' as ' || coalesce(string_agg(DISTINCT caller, ','), 'nobody') FROM public.mallory_calls")
            .unwrap();
        assert_eq!(
            calls.trim(),
            "0 as nobody",
            "the setup fired mallory's trigger"
        );
        let e = format!("{:#}", got.expect_err("the setup used mallory's table"));
        assert!(
            e.contains("slipstream_lab_pipeline") && e.contains("mallory"),
            "the error names neither the table nor its owner: {e}"
        );
    }

    /// The DML cell measures the lab's statements, not another role's code. Steps: a role
    /// `mallory` with CREATE on `public` plants `public.nextval(text)` and
    /// `public.currval(text)`, which note the call and then do what the built-ins do; one DML
    /// transaction per in-process client as the superuser. Before the fix every
    /// `nextval('slipstream_lab_pipeline_dml_seq')` (a string literal, so `text` beat
    /// `regclass`) called hers, as `postgres`, in the measured loop.
    #[test]
    fn the_dml_cell_calls_no_nextval_planted_in_public() {
        let cluster = slipstream_testkit::Cluster::builder().start().unwrap();
        let url = without_tls(&cluster.url());
        let rt = runtime().unwrap();
        rt.block_on(setup(&url)).unwrap();
        cluster
            .psql(
                "CREATE ROLE mallory LOGIN; GRANT CREATE ON SCHEMA public TO mallory;
                 SET ROLE mallory;
                 CREATE TABLE public.mallory_calls (caller text);
                 GRANT INSERT ON public.mallory_calls TO PUBLIC;
                 CREATE FUNCTION public.nextval(text) RETURNS bigint LANGUAGE sql AS $$
                   INSERT INTO public.mallory_calls VALUES (current_user);
                   SELECT pg_catalog.nextval($1::pg_catalog.regclass) $$;
                 CREATE FUNCTION public.currval(text) RETURNS bigint LANGUAGE sql AS $$
                   INSERT INTO public.mallory_calls VALUES (current_user);
                   SELECT pg_catalog.currval($1::pg_catalog.regclass) $$;",
            )
            .unwrap();
        rt.block_on(async {
            let soon = || Instant::now() + Duration::from_millis(5);
            let mut slip = Slip::connect(&url, false).await.unwrap();
            assert!(
                slip.run(Workload::Dml, Mode::Batch, soon(), 1)
                    .await
                    .unwrap()
                    > 0
            );
            let tp = Tp::connect(&url).await.unwrap();
            assert!(tp.run(Workload::Dml, Mode::Batch, soon(), 1).await.unwrap() > 0);
        });
        let calls = cluster
            .psql("SELECT count(*) || ' as ' || coalesce(string_agg(DISTINCT caller, ','), 'nobody') FROM public.mallory_calls")
            .unwrap();
        assert_eq!(
            calls.trim(),
            "0 as nobody",
            "the DML cell called mallory's functions"
        );
    }
}

//! The run's context: what the server was and did around a run, saved with the result so a
//! number can be read next to the settings and activity that produced it.
//!
//! Captured on a connection of its own (never a user's):
//!
//! - before the users connect: server version, settings not at their default
//!   (`pg_settings.source <> 'default'`), and a [`ServerSnapshot`];
//! - during the window (not the warm-up): wait events sampled from `pg_stat_activity` every
//!   [`WAIT_SAMPLE_EVERY`] (at most [`WAIT_SAMPLES_MAX`] samples), on a connection opened
//!   again when it ends (with a growing pause, up to [`RECONNECT_PAUSE_MAX`]); the periods
//!   without samples are kept as [`WaitGap`]s;
//! - after the drain: a second [`ServerSnapshot`].
//!
//! A snapshot holds this database's `pg_stat_database` row and, when the extension is
//! installed, the top [`TOP_STATEMENTS`] entries of `pg_stat_statements` by total execution
//! time. Rows are kept as JSON objects, so the columns of any PostgreSQL version are kept as
//! the server named them.
//!
//! Nothing here can fail a run: whatever cannot be read becomes a line in
//! [`RunContext::warnings`].

use std::collections::BTreeMap;
use std::time::Duration;

mod sampler;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use slipstream_pg::Client;

/// How often the wait events are sampled during the window.
pub const WAIT_SAMPLE_EVERY: Duration = Duration::from_millis(500);
/// At most this many wait-event samples are taken (about 5 minutes at the rate above); a
/// longer run keeps the first ones, enough to see what the server waits on, and its
/// result says when the sampling stopped.
pub const WAIT_SAMPLES_MAX: usize = 600;
/// `pg_stat_statements` entries kept per snapshot.
pub const TOP_STATEMENTS: usize = 10;
/// A context query that takes longer than this is abandoned (and warned about), so a stuck
/// server never holds the run.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// What the server was and did around a run.
///
/// ```no_run
/// let run = slipstream_bench::BenchRun::read_json("run.json".as_ref())?;
/// if let Some(ctx) = &run.context {
///     println!("{}", ctx.server_version.as_deref().unwrap_or("?"));
///     for s in &ctx.settings {
///         println!("{} = {} ({})", s.name, s.value, s.source);
///     }
///     println!("commits during the run: {:?}", ctx.database_delta("xact_commit"));
/// }
/// # Ok::<(), anyhow::Error>(())
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunContext {
    /// `SELECT version()`.
    pub server_version: Option<String>,
    /// The cluster's `system_identifier` (`pg_control_system()`): the same for a primary
    /// and its physical standbys, different for every other cluster, even of one version.
    pub system_identifier: Option<String>,
    /// `pg_postmaster_start_time()` in UTC, RFC 3339 to the microsecond (the same text
    /// whatever the session's `TimeZone` and `DateStyle`): tells apart clusters copied from
    /// one data directory, which share a system identifier.
    pub started_at: Option<String>,
    /// `current_database()`.
    pub database: Option<String>,
    /// Settings whose `source` is not `default`: name, value with unit, and source.
    pub settings: Vec<Setting>,
    /// The workload's scale, when it has one (Order Entry's `soe.meta.scale`).
    pub scale: Option<f64>,
    /// The command line that made the run (empty when run from a library).
    pub command_line: Vec<String>,
    /// SHA-256 of the workload file (hex), for a run of a workload file.
    pub workload_sha256: Option<String>,
    /// Before the users connected.
    pub before: Option<ServerSnapshot>,
    /// After the drain.
    pub after: Option<ServerSnapshot>,
    /// Wait events seen in `pg_stat_activity` (this database, other backends) during the
    /// window, summed over the samples.
    pub wait_events: Vec<WaitEvent>,
    /// How many wait-event samples were taken.
    pub wait_samples: u32,
    /// Sample times (one every [`WAIT_SAMPLE_EVERY`]) that have no sample: the sampler's
    /// connection had ended (a restart, `pg_terminate_backend`), the server was down, or a
    /// sample timed out. The sum of the `missed` of [`RunContext::wait_gaps`].
    #[serde(default)]
    pub wait_samples_missed: u32,
    /// The periods without samples, in order, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wait_gaps: Vec<WaitGap>,
    /// What could not be read, and why.
    pub warnings: Vec<String>,
}

/// One non-default setting.
///
/// ```
/// use slipstream_bench::context::Setting;
/// let s: Setting = serde_json::from_str(
///     r#"{"name": "shared_buffers", "value": "16384 8kB", "source": "configuration file"}"#,
/// ).unwrap();
/// assert_eq!((s.name.as_str(), s.value.as_str()), ("shared_buffers", "16384 8kB"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setting {
    /// `pg_settings.name`.
    pub name: String,
    /// `setting`, with `unit` appended when there is one (e.g. `16384 8kB`).
    pub value: String,
    /// `source` (`configuration file`, `command line`, `client`, ...).
    pub source: String,
}

/// The server's counters at one moment.
///
/// ```
/// use slipstream_bench::context::ServerSnapshot;
/// let snap = ServerSnapshot {
///     taken_at: "2026-01-05T10:00:00+00:00".into(),
///     database: Some(serde_json::json!({ "xact_commit": 1200, "blks_hit": 98000 })),
///     statements: None, // pg_stat_statements not installed
/// };
/// assert_eq!(snap.database.as_ref().unwrap()["blks_hit"], 98000);
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServerSnapshot {
    /// The server's clock (`now()`, RFC 3339).
    pub taken_at: String,
    /// This database's row of `pg_stat_database`, column by column.
    pub database: Option<serde_json::Value>,
    /// Top entries of `pg_stat_statements` by `total_exec_time` (absent when the extension
    /// is not installed in this database).
    pub statements: Option<Vec<serde_json::Value>>,
}

/// How often backends were seen in one wait state.
///
/// ```
/// use slipstream_bench::context::WaitEvent;
/// let w: WaitEvent = serde_json::from_value(serde_json::json!({
///     "state": "active", "wait_event_type": "LWLock", "wait_event": "WALWrite", "count": 37,
/// })).unwrap();
/// assert_eq!((w.wait_event.as_str(), w.count), ("WALWrite", 37));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitEvent {
    /// `state` (`active`, `idle`, `idle in transaction`, ...).
    pub state: String,
    /// `wait_event_type`, or `CPU` when an active backend waits on nothing.
    pub wait_event_type: String,
    /// `wait_event`, or `running` when an active backend waits on nothing.
    pub wait_event: String,
    /// Backends seen in this state, summed over the samples.
    pub count: u64,
}

/// A period of the wait-event sampling without a sample.
///
/// ```
/// use slipstream_bench::context::WaitGap;
/// let g: WaitGap = serde_json::from_value(serde_json::json!({
///     "from_s": 1.0, "to_s": null, "missed": 4, "reconnects_tried": 2,
///     "why": "could not connect: connection refused",
/// })).unwrap();
/// assert_eq!(g.to_s, None); // no sample from 1 s to the end of the sampling
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitGap {
    /// Seconds from the start of the sampling (in a run, the window's start: the warm-up is
    /// not sampled; files written before it count from the warm-up's start) to the
    /// last sample before the period (0 when there was none).
    pub from_s: f64,
    /// Seconds from the start of the sampling to the first sample after the period; `None`
    /// when no sample came after it (to the end of the sampling).
    pub to_s: Option<f64>,
    /// Sample times in the period that have no sample.
    pub missed: u32,
    /// Connections tried in the period (with a growing pause between them, up to
    /// [`RECONNECT_PAUSE_MAX`]).
    pub reconnects_tried: u32,
    /// What ended the sampling (the first error of the period).
    pub why: String,
}

pub use sampler::RECONNECT_PAUSE_MAX;

/// SHA-256 of `bytes`, hex.
///
/// ```
/// assert!(slipstream_bench::context::sha256_hex(b"").starts_with("e3b0c442"));
/// ```
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Why a context query gave nothing.
enum Unread {
    /// It timed out, or an earlier one on its connection did: [`Reader`] has said so.
    Stalled,
    /// The server's (or the client's) error.
    Failed(String),
}

/// The context's queries on one connection, each within [`QUERY_TIMEOUT`], until the first
/// that times out. A query given up on is still queued on the server, and a connection
/// answers in order, so every later query would wait behind it and time out in turn, 5 s
/// apiece: before this, a stalled server held a run's start for 35 s. The timeout is one
/// warning naming the query and saying that the rest of this capture was skipped.
struct Reader<'a> {
    client: &'a mut Client,
    warnings: &'a mut Vec<String>,
    /// `before the run` or `after the run`, for the warning.
    when: &'static str,
    stalled: bool,
}

impl<'a> Reader<'a> {
    fn new(client: &'a mut Client, warnings: &'a mut Vec<String>, when: &'static str) -> Self {
        Reader {
            client,
            warnings,
            when,
            stalled: false,
        }
    }

    /// Runs `sql`, which returns one text column; `what` names it in a timeout's warning.
    async fn text(&mut self, what: &str, sql: &str) -> Result<Option<String>, Unread> {
        if self.stalled {
            return Err(Unread::Stalled);
        }
        let row = match tokio::time::timeout(QUERY_TIMEOUT, self.client.query_one(sql, &[])).await {
            Ok(row) => row.map_err(|e| Unread::Failed(e.to_string()))?,
            Err(_) => {
                self.stalled = true;
                self.warnings.push(format!(
                    "reading {what} timed out after {} s, so the rest of the context {} was not read: the server did not answer, and each later query would have waited as long behind it",
                    QUERY_TIMEOUT.as_secs(),
                    self.when
                ));
                return Err(Unread::Stalled);
            }
        };
        row.get::<_, Option<String>>(0)
            .map_err(|e| Unread::Failed(e.to_string()))
    }

    /// Runs `sql` (one JSON text column) and parses it.
    async fn json<T: serde::de::DeserializeOwned>(
        &mut self,
        what: &str,
        sql: &str,
    ) -> Result<Option<T>, Unread> {
        match self.text(what, sql).await? {
            Some(t) => serde_json::from_str(&t)
                .map(Some)
                .map_err(|e| Unread::Failed(e.to_string())),
            None => Ok(None),
        }
    }

    /// `got`'s value; a failure becomes the warning `say(error)` (a timeout has its own).
    fn keep<T>(&mut self, got: Result<T, Unread>, say: impl FnOnce(&str) -> String) -> Option<T> {
        match got {
            Ok(v) => Some(v),
            Err(Unread::Failed(e)) => {
                self.warnings.push(say(&e));
                None
            }
            Err(Unread::Stalled) => None,
        }
    }
}

async fn connect(url: &str, warnings: &mut Vec<String>) -> Option<Client> {
    match tokio::time::timeout(QUERY_TIMEOUT, slipstream_pg::connect(url)).await {
        Ok(Ok(c)) => Some(c),
        Ok(Err(e)) => {
            warnings.push(format!(
                "could not connect to read the server's context: {e}"
            ));
            None
        }
        Err(_) => {
            warnings.push("connecting to read the server's context timed out".into());
            None
        }
    }
}

// Every query the context sends names each function, relation, operator and type by its
// schema: `pg_catalog` is searched first on a default search_path, but a function planted in
// `public` whose argument types match a call better than the built-in's still wins it (a
// `public.row_to_json(pg_catalog.pg_stat_database)` beats `row_to_json(record)`, a
// `public.quote_ident(name)` beats `quote_ident(text)` for a `name`), and runs with the
// bench's rights, answering what it likes; a role's or database's `search_path` may put such
// a schema before `pg_catalog` too. A name added here must be qualified the same way
// (`tests/attack_search_path.rs`).
const SETTINGS: &str = "SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_object(\
     'name', name, 'value', setting OPERATOR(pg_catalog.||) \
     coalesce(' '::pg_catalog.text OPERATOR(pg_catalog.||) unit, ''), 'source', source) \
     ORDER BY name), '[]')::pg_catalog.text FROM pg_catalog.pg_settings \
     WHERE source OPERATOR(pg_catalog.<>) 'default'";
const DATABASE: &str = "SELECT pg_catalog.row_to_json(d)::pg_catalog.text \
     FROM pg_catalog.pg_stat_database d \
     WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database()";
// The schema the extension was created in, quoted: it need not be on the search_path (a
// `CREATE EXTENSION ... SCHEMA ext`), and an unqualified name would then read as not installed.
// Its answer is spliced into SQL, so a planted `quote_ident` would also have written SQL.
const HAS_STATEMENTS: &str = "SELECT pg_catalog.quote_ident(n.nspname::pg_catalog.text) \
     FROM pg_catalog.pg_extension e \
     JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace \
     WHERE e.extname OPERATOR(pg_catalog.=) 'pg_stat_statements' UNION ALL SELECT NULL LIMIT 1";
const WAITS: &str = "SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_object(\
     'state', coalesce(state, ''), \
     'wait_event_type', coalesce(wait_event_type, \
         CASE WHEN state OPERATOR(pg_catalog.=) 'active' THEN 'CPU' ELSE '' END), \
     'wait_event', coalesce(wait_event, \
         CASE WHEN state OPERATOR(pg_catalog.=) 'active' THEN 'running' ELSE '' END), \
     'count', 1)), '[]')::pg_catalog.text \
     FROM pg_catalog.pg_stat_activity \
     WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database() \
     AND pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid() \
     AND backend_type OPERATOR(pg_catalog.=) 'client backend'";

/// Turns off, for this session, a role's or the connection string's `idle_session_timeout`
/// (PostgreSQL 14+, looked up so older servers skip it; one row either way). For the bench's
/// own connections that wait idle by design: the wait-event sampler between samples (the
/// server ended it after the first), Order Entry's loaders waiting their turn
/// (`tests/attack_session_settings.rs`). Only on those sessions: the settings read before the
/// run are the users'.
pub(crate) const NO_IDLE_TIMEOUT: &str = "SELECT coalesce((SELECT pg_catalog.set_config(name, '0', false) \
     FROM pg_catalog.pg_settings WHERE name OPERATOR(pg_catalog.=) 'idle_session_timeout'), '')";

fn statements_sql(schema: &str) -> String {
    format!(
        "SELECT coalesce(pg_catalog.json_agg(s), '[]')::pg_catalog.text FROM (SELECT queryid, \
         pg_catalog.left(query, 200) AS query, \
         calls, total_exec_time, mean_exec_time, rows, shared_blks_hit, shared_blks_read \
         FROM {schema}.pg_stat_statements WHERE dbid OPERATOR(pg_catalog.=) (SELECT oid \
         FROM pg_catalog.pg_database \
         WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database()) \
         ORDER BY total_exec_time DESC LIMIT {TOP_STATEMENTS}) s"
    )
}

/// Sets the session's `extra_float_digits` to 3, so that every `float8` read as text (the
/// scale, the snapshots' times in ms) is written exactly: a role's or the connection string's
/// setting below 1 writes fewer digits, down to one at -15, which read scale 0.125 as 0.1
/// (`tests/attack_session_settings.rs`).
async fn exact_floats(r: &mut Reader<'_>) {
    let got = r
        .text(
            "extra_float_digits",
            "SELECT pg_catalog.set_config('extra_float_digits', '3', false)",
        )
        .await;
    r.keep(got, |e| {
        format!("could not set extra_float_digits, so floating-point values may be rounded: {e}")
    });
}

async fn snapshot(r: &mut Reader<'_>) -> Option<ServerSnapshot> {
    let mut s = ServerSnapshot::default();
    let got = r
        .text(
            "the server's clock",
            "SELECT pg_catalog.to_char(pg_catalog.now() AT TIME ZONE 'UTC', \
             'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')",
        )
        .await;
    if let Some(t) = r.keep(got, |e| format!("could not read the server's clock: {e}")) {
        s.taken_at = t.unwrap_or_default();
    }
    let got = r.json("pg_stat_database", DATABASE).await;
    if let Some(d) = r.keep(got, |e| format!("could not read pg_stat_database: {e}")) {
        s.database = d;
    }
    let got = r.text("pg_extension", HAS_STATEMENTS).await;
    if let Some(Some(schema)) = r.keep(got, |e| {
        format!("could not look for pg_stat_statements: {e}")
    }) {
        let got = r.json("pg_stat_statements", &statements_sql(&schema)).await;
        if let Some(v) = r.keep(got, |e| {
            format!(
                "pg_stat_statements is installed but could not be read ({e}); is it in shared_preload_libraries?"
            )
        }) {
            s.statements = v;
        }
    }
    // A snapshot cut off by a timeout would read as the server's counters standing still.
    (!r.stalled).then_some(s)
}

/// Which cluster, which start of it, and which database a run loaded.
#[derive(Deserialize)]
struct Identity {
    system_identifier: String,
    started_at: String,
    database: String,
}

// `started_at` is compared between the parts of a merge, whose sessions may differ in
// `TimeZone` and `DateStyle` (`PGTZ`, `PGDATESTYLE`, `options=-c ...`, `ALTER ROLE ... SET`):
// `::text` writes an instant in those, so it is written here in UTC and RFC 3339, the same
// text for one instant whatever the session's settings (to_char's patterns below take
// nothing from lc_time).
const IDENTITY: &str = "SELECT pg_catalog.json_build_object(\
     'system_identifier', system_identifier::pg_catalog.text, \
     'started_at', pg_catalog.to_char(pg_catalog.pg_postmaster_start_time() AT TIME ZONE 'UTC', \
         'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), \
     'database', pg_catalog.current_database())::pg_catalog.text \
     FROM pg_catalog.pg_control_system()";

/// Reads the context before a run: version, settings, scale (for `workload`), a snapshot.
/// Keep the returned [`Capture`] to sample wait events and take the snapshot after.
///
/// ```
/// # #[tokio::main] async fn main() {
/// use slipstream_bench::context;
/// // Nothing listens on port 1: the context says so instead of failing the run.
/// let capture = context::before("postgres://postgres@127.0.0.1:1/postgres", "my-workload").await;
/// let ctx = capture.after().await;
/// assert_eq!(ctx.server_version, None);
/// assert!(ctx.warnings[0].starts_with("could not connect to read the server's context"));
/// # }
/// ```
pub async fn before(url: &str, workload: &str) -> Capture {
    let mut ctx = RunContext::default();
    let mut client = connect(url, &mut ctx.warnings).await;
    if let Some(c) = client.as_mut() {
        let mut r = Reader::new(c, &mut ctx.warnings, "before the run");
        let got = r.text("version()", "SELECT pg_catalog.version()").await;
        if let Some(v) = r.keep(got, |e| format!("could not read version(): {e}")) {
            ctx.server_version = v;
        }
        // Which server and database, so that runs against others are never merged.
        let got = r.json::<Identity>("the server's identity", IDENTITY).await;
        if let Some(Some(id)) = r.keep(got, |e| {
            format!("could not read the server's identity: {e}")
        }) {
            ctx.system_identifier = Some(id.system_identifier);
            ctx.started_at = Some(id.started_at);
            ctx.database = Some(id.database);
        }
        let got = r.json("pg_settings", SETTINGS).await;
        if let Some(v) = r.keep(got, |e| format!("could not read pg_settings: {e}")) {
            ctx.settings = v.unwrap_or_default();
        }
        // After the settings: they are the users', and this would show as the context's own.
        exact_floats(&mut r).await;
        if workload == crate::order_entry::NAME {
            let got = r
                .text(
                    "Order Entry's scale (soe.meta)",
                    "SELECT scale::pg_catalog.text FROM soe.meta LIMIT 1",
                )
                .await;
            if let Some(v) = r.keep(got, |e| {
                format!("could not read Order Entry's scale from soe.meta: {e}")
            }) {
                ctx.scale = v.and_then(|s| s.parse().ok());
            }
        }
        ctx.before = snapshot(&mut r).await;
    }
    Capture {
        url: url.to_string(),
        ctx,
        waits: BTreeMap::new(),
        samples_max: WAIT_SAMPLES_MAX,
    }
}

/// A context being captured.
///
/// ```no_run
/// # async fn f(url: &str) {
/// use slipstream_bench::context;
/// let mut capture = context::before(url, "my-workload").await;
/// let window = tokio::time::sleep(std::time::Duration::from_secs(60)); // the measured window
/// capture.sample_waits(window).await;
/// let ctx = capture.after().await;
/// println!("{} wait samples, top: {:?}", ctx.wait_samples, ctx.wait_events.first());
/// # }
/// ```
pub struct Capture {
    url: String,
    ctx: RunContext,
    /// (state, type, event) -> count.
    waits: BTreeMap<(String, String, String), u64>,
    /// The most samples taken: [`WAIT_SAMPLES_MAX`] (fewer in a test, so that reaching it
    /// takes seconds, not 5 minutes).
    samples_max: usize,
}

impl Capture {
    /// Takes the snapshot after the run and returns the whole context.
    ///
    /// ```
    /// # #[tokio::main] async fn main() {
    /// let url = "postgres://postgres@127.0.0.1:1/postgres"; // no server here
    /// let capture = slipstream_bench::context::before(url, "w").await;
    /// let ctx = capture.after().await;
    /// assert!(ctx.before.is_none() && ctx.after.is_none());
    /// assert_eq!(ctx.warnings.len(), 2); // the connect before, and the one after
    /// # }
    /// ```
    pub async fn after(mut self) -> RunContext {
        self.take_after().await;
        self.finish()
    }

    /// Takes the snapshot after the run. Dropped before it ends, it leaves the capture as it
    /// was (the runner drops it on a stop).
    pub(crate) async fn take_after(&mut self) {
        let mut warnings = Vec::new();
        if let Some(mut c) = connect(&self.url, &mut warnings).await {
            let mut r = Reader::new(&mut c, &mut warnings, "after the run");
            // The postmaster's start again: a server restarted during the run (a crash, a
            // failover, an operator) has counters that are no count of the run's work. A
            // crash resets them (commits read -320 over a run), and any restart loses what
            // its ended sessions had not yet reported.
            let got = r.json::<Identity>("the server's identity", IDENTITY).await;
            let restarted = match r.keep(got, |e| {
                format!("could not read the server's identity after the run: {e}")
            }) {
                Some(Some(now)) => self
                    .ctx
                    .started_at
                    .as_ref()
                    .filter(|before| **before != now.started_at)
                    .map(|before| (before.clone(), now.started_at)),
                _ => None,
            };
            exact_floats(&mut r).await;
            let mut after = snapshot(&mut r).await;
            // stats_reset moved during the run: the database's counters after it less those
            // before may be no count of the run's work (after pg_stat_reset(), by a monitoring
            // job or an operator, commits read short by those before it and blocks read
            // negative), so its row is left out and the result says why. A reset of one
            // table's or function's counters moves stats_reset too and leaves the database's
            // alone; the row cannot tell the two apart unless a counter went down, so the
            // warning names the cause only when it knows it.
            if restarted.is_none()
                && let Some(a) = after.as_mut()
                && let Some((before, now)) = stats_reset_changed(&self.ctx.before, a)
            {
                let lower = counter_gone_down(&self.ctx.before, a);
                a.database = None;
                warnings.push(match lower {
                    Some((col, b, n)) => format!(
                        "this database's statistics were reset during the run (pg_stat_database.stats_reset was {before} before it, {now} after it, and its {col} went from {b} to {n}: pg_stat_reset(), by a monitoring job or an operator): its counters over the run are not known, so the database's counters after the run are left out; run again without the reset for them"
                    ),
                    None => format!(
                        "pg_stat_database.stats_reset moved during the run ({before} before it, {now} after it) and none of this database's counters went down: a reset of one table's or function's counters (pg_stat_reset_single_table_counters(), pg_stat_reset_single_function_counters()) moves it and leaves the database's counters alone, while pg_stat_reset() resets them, and the row cannot tell which ran; the database's counters after the run are left out, since they may not be the run's work; run again without the reset for them"
                    ),
                });
            }
            match restarted {
                Some((before, now)) => warnings.push(format!(
                    "the server restarted during the run (its postmaster started at {before} before the run, at {now} after it): its statistics over the run are not known (a crash resets them), so the counters after the run are left out, and the failures around the restart are in the counts; run again for a measurement without it"
                )),
                None => self.ctx.after = after,
            }
        }
        self.ctx.warnings.extend(warnings);
    }

    /// Adds a warning to the context.
    pub(crate) fn warn(&mut self, warning: &str) {
        self.ctx.warnings.push(warning.into());
    }

    /// The whole context.
    pub(crate) fn finish(mut self) -> RunContext {
        let mut waits: Vec<WaitEvent> = self
            .waits
            .into_iter()
            .map(|((state, wait_event_type, wait_event), count)| WaitEvent {
                state,
                wait_event_type,
                wait_event,
                count,
            })
            .collect();
        waits.sort_by_key(|w| std::cmp::Reverse(w.count));
        self.ctx.wait_events = waits;
        self.ctx
    }
}

/// The `stats_reset` of `pg_stat_database` before the run and after it (JSON text, `null`
/// when never reset), when they differ: the statistics were reset in between.
fn stats_reset_changed(
    before: &Option<ServerSnapshot>,
    after: &ServerSnapshot,
) -> Option<(String, String)> {
    let reset = |s: Option<&ServerSnapshot>| {
        s?.database
            .as_ref()?
            .get("stats_reset")
            .cloned()
            .or(Some(serde_json::Value::Null))
    };
    let (b, a) = (reset(before.as_ref())?, reset(Some(after))?);
    (b != a).then(|| (b.to_string(), a.to_string()))
}

/// Counters of `pg_stat_database` that only a reset of the database's statistics (or a
/// crash) takes down; `numbackends` and the like are levels, not counts.
const NEVER_DOWN: &[&str] = &[
    "xact_commit",
    "xact_rollback",
    "blks_read",
    "blks_hit",
    "tup_returned",
    "tup_fetched",
];

/// The first of [`NEVER_DOWN`] lower after the run than before it (its name, before, after):
/// proof that the database's counters were reset in between.
fn counter_gone_down(
    before: &Option<ServerSnapshot>,
    after: &ServerSnapshot,
) -> Option<(&'static str, f64, f64)> {
    let (b, a) = (
        before.as_ref()?.database.as_ref()?,
        after.database.as_ref()?,
    );
    NEVER_DOWN.iter().find_map(|col| {
        let (x, y) = (b.get(*col)?.as_f64()?, a.get(*col)?.as_f64()?);
        (y < x).then_some((*col, x, y))
    })
}

impl RunContext {
    /// A `pg_stat_database` counter's change over the run (after minus before), when both
    /// snapshots have it as a number, and the statistics were not reset in between (their
    /// `stats_reset` differs; a result captured since this check leaves the row out then).
    ///
    /// ```
    /// use slipstream_bench::context::{RunContext, ServerSnapshot};
    /// let snap = |n: i64| Some(ServerSnapshot {
    ///     database: Some(serde_json::json!({ "xact_commit": n })),
    ///     ..Default::default()
    /// });
    /// let c = RunContext { before: snap(10), after: snap(25), ..Default::default() };
    /// assert_eq!(c.database_delta("xact_commit"), Some(15.0));
    /// ```
    pub fn database_delta(&self, column: &str) -> Option<f64> {
        let get = |s: &Option<ServerSnapshot>| -> Option<f64> {
            s.as_ref()?.database.as_ref()?.get(column)?.as_f64()
        };
        let after = self.after.as_ref()?;
        if stats_reset_changed(&self.before, after).is_some() {
            return None;
        }
        Some(get(&self.after)? - get(&self.before)?)
    }
}

//! What a workload is made of: transactions (Swingbench's `DatabaseTransaction`), the session
//! each user runs them in, and the error a transaction reports.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use serde::{Deserialize, Serialize};
use slipstream_pg::Client;

use crate::think::ThinkTime;

/// One transaction type of a workload. Each user gets its own instance of every type, so
/// `&mut self` can hold prepared statements and per-user state.
///
/// `init` runs once per user before the run (prepare statements, look up ranges), `execute`
/// once per transaction, and `close` once at the end. Count the statements you run with the
/// [`Session`]'s counters; they are reported per type, like Swingbench's.
///
/// ```
/// use slipstream_bench::{Session, Transaction, TxError};
///
/// struct Lookup;
///
/// impl Transaction for Lookup {
///     async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
///         let id: i32 = s.rng().random_range(1..=1000);
///         let client = s.client()?;
///         client.query_opt("SELECT $1::int4", &[&id]).await?;
///         s.count().selects += 1;
///         Ok(())
///     }
/// }
/// # use rand::Rng;
/// ```
pub trait Transaction: Send + 'static {
    /// Runs once per user before the first `execute`. A failure stops the run before it
    /// starts, naming the transaction.
    ///
    /// ```
    /// # fn main() -> anyhow::Result<()> {
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use slipstream_bench::{RunConfig, Session, Transaction, TxError, Workload};
    /// /// Counts the users it was set up for (with PostgreSQL: prepare its statements here).
    /// struct Prepared(Arc<AtomicUsize>);
    /// impl Transaction for Prepared {
    ///     async fn init(&mut self, _: &mut Session) -> Result<(), TxError> {
    ///         self.0.fetch_add(1, Ordering::Relaxed);
    ///         Ok(())
    ///     }
    ///     async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> { Ok(()) }
    /// }
    /// let inits = Arc::new(AtomicUsize::new(0));
    /// let counter = Arc::clone(&inits);
    /// let w = Workload::new("w").transaction("t", 1, move || Prepared(counter.clone())).without_database();
    /// let mut config = RunConfig::new(None);
    /// (config.users, config.duration) = (3, std::time::Duration::from_millis(100));
    /// tokio::runtime::Runtime::new()?.block_on(slipstream_bench::run(&w, &config, std::future::pending::<()>()))?;
    /// assert_eq!(inits.load(Ordering::Relaxed), 3); // once per user
    /// # Ok(()) }
    /// ```
    fn init(&mut self, session: &mut Session) -> impl Future<Output = Result<(), TxError>> + Send {
        let _ = session;
        async { Ok(()) }
    }

    /// Runs one transaction. An error is recorded as a failure of this type (by SQLSTATE) and
    /// the user goes on; the runner rolls back an open transaction and reconnects a broken
    /// connection first.
    ///
    /// ```
    /// # fn main() -> anyhow::Result<()> {
    /// use slipstream_bench::{RunConfig, Session, Transaction, TxError, Workload};
    /// /// Fails one time in four, as a serialization failure would.
    /// struct Flaky;
    /// impl Transaction for Flaky {
    ///     async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
    ///         use rand::Rng;
    ///         match s.rng().random_range(0..4) {
    ///             0 => Err(TxError::new("40001", "could not serialize access")),
    ///             _ => Ok(()),
    ///         }
    ///     }
    /// }
    /// let w = Workload::new("w").transaction("flaky", 1, || Flaky).without_database();
    /// let mut config = RunConfig::new(None);
    /// config.duration = std::time::Duration::from_millis(100);
    /// let run = tokio::runtime::Runtime::new()?
    ///     .block_on(slipstream_bench::run(&w, &config, std::future::pending::<()>()))?;
    /// let t = &run.transactions[0];
    /// assert!(t.ok > 0 && t.failures["40001"] == t.failed && t.failed > 0);
    /// # Ok(()) }
    /// ```
    fn execute(
        &mut self,
        session: &mut Session,
    ) -> impl Future<Output = Result<(), TxError>> + Send;

    /// Runs once per user after the last `execute`.
    ///
    /// ```no_run
    /// use slipstream_bench::{Session, Transaction, TxError};
    /// /// Works in a temporary table of its own, dropped when the user ends.
    /// struct Scratch;
    /// impl Transaction for Scratch {
    ///     async fn init(&mut self, s: &mut Session) -> Result<(), TxError> {
    ///         s.client()?.simple_query("CREATE TEMP TABLE scratch (n int)").await?;
    ///         Ok(())
    ///     }
    ///     async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
    ///         s.client()?.execute("INSERT INTO scratch VALUES (1)", &[]).await?;
    ///         s.count().inserts += 1;
    ///         Ok(())
    ///     }
    ///     async fn close(&mut self, s: &mut Session) -> Result<(), TxError> {
    ///         s.client()?.simple_query("DROP TABLE scratch").await?;
    ///         Ok(())
    ///     }
    /// }
    /// ```
    fn close(&mut self, session: &mut Session) -> impl Future<Output = Result<(), TxError>> + Send {
        let _ = session;
        async { Ok(()) }
    }
}

pub(crate) type TxFuture<'a> = Pin<Box<dyn Future<Output = Result<(), TxError>> + Send + 'a>>;

/// [`Transaction`] made object-safe, so a user can hold a mix of types in one `Vec`.
pub(crate) trait DynTransaction: Send {
    fn init<'a>(&'a mut self, session: &'a mut Session) -> TxFuture<'a>;
    fn execute<'a>(&'a mut self, session: &'a mut Session) -> TxFuture<'a>;
    fn close<'a>(&'a mut self, session: &'a mut Session) -> TxFuture<'a>;
}

impl<T: Transaction> DynTransaction for T {
    fn init<'a>(&'a mut self, session: &'a mut Session) -> TxFuture<'a> {
        Box::pin(Transaction::init(self, session))
    }
    fn execute<'a>(&'a mut self, session: &'a mut Session) -> TxFuture<'a> {
        Box::pin(Transaction::execute(self, session))
    }
    fn close<'a>(&'a mut self, session: &'a mut Session) -> TxFuture<'a> {
        Box::pin(Transaction::close(self, session))
    }
}

/// Statements run, by kind, as Swingbench counts them.
///
/// ```
/// let mut c = slipstream_bench::StatementCounts::default();
/// c.selects += 2;
/// c.updates += 1;
/// c.commits += 1;
/// assert_eq!(c.total(), 4);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatementCounts {
    /// SELECTs (and other statements returning rows).
    pub selects: u64,
    /// INSERTs.
    pub inserts: u64,
    /// UPDATEs.
    pub updates: u64,
    /// DELETEs.
    pub deletes: u64,
    /// COMMITs.
    pub commits: u64,
    /// ROLLBACKs.
    pub rollbacks: u64,
}

impl StatementCounts {
    pub(crate) fn add(&mut self, o: &StatementCounts) {
        self.selects += o.selects;
        self.inserts += o.inserts;
        self.updates += o.updates;
        self.deletes += o.deletes;
        self.commits += o.commits;
        self.rollbacks += o.rollbacks;
    }

    /// The sum, or `None` when a count overflows (merging corrupt result files).
    pub(crate) fn checked_add(&self, o: &StatementCounts) -> Option<StatementCounts> {
        Some(StatementCounts {
            selects: self.selects.checked_add(o.selects)?,
            inserts: self.inserts.checked_add(o.inserts)?,
            updates: self.updates.checked_add(o.updates)?,
            deletes: self.deletes.checked_add(o.deletes)?,
            commits: self.commits.checked_add(o.commits)?,
            rollbacks: self.rollbacks.checked_add(o.rollbacks)?,
        })
    }

    /// All statements.
    ///
    /// ```
    /// use slipstream_bench::StatementCounts;
    /// let c = StatementCounts { inserts: 3, commits: 1, ..Default::default() };
    /// assert_eq!(c.total(), 4);
    /// ```
    pub fn total(&self) -> u64 {
        self.selects + self.inserts + self.updates + self.deletes + self.commits + self.rollbacks
    }
}

/// A user's context: its connection, random numbers, statement counters and intra-transaction
/// think time.
///
/// ```
/// use slipstream_bench::{Session, ThinkTime};
/// // What the runner hands each user; without a connection, `client()` says so.
/// let mut s = Session::new(0, None, ThinkTime::NONE, 42);
/// assert_eq!(s.client().unwrap_err().code(), "client:no-connection");
/// ```
pub struct Session {
    client: Option<Client>,
    /// Why `client` is `None` in a workload that has a database (the last reconnect's error),
    /// so the failures that follow say what went wrong. `None` while connected, and always in
    /// a workload run without a database.
    lost: Option<String>,
    rng: SmallRng,
    counts: StatementCounts,
    think: ThinkTime,
    thought: Duration,
    user: usize,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("user", &self.user)
            .field("connected", &self.client.is_some())
            .finish_non_exhaustive()
    }
}

impl Session {
    /// A session for user `user` (seeding its random numbers from `seed` and `user`, so a run
    /// with a fixed seed repeats its choices).
    ///
    /// ```
    /// use rand::Rng;
    /// use slipstream_bench::{Session, ThinkTime};
    /// let mut a = Session::new(3, None, ThinkTime::NONE, 42);
    /// let mut b = Session::new(3, None, ThinkTime::NONE, 42);
    /// // The same seed and user: the same choices.
    /// assert_eq!(a.rng().random_range(0..1000), b.rng().random_range(0..1000));
    /// ```
    pub fn new(user: usize, client: Option<Client>, think: ThinkTime, seed: u64) -> Session {
        Session {
            client,
            lost: None,
            rng: SmallRng::seed_from_u64(seed ^ (user as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            counts: StatementCounts::default(),
            think,
            thought: Duration::ZERO,
            user,
        }
    }

    /// The user's connection. Fails with `client:no-connection` when there is none: in a
    /// workload run without a database, or after a reconnect that failed (the message is its
    /// error; the runner tries again after the failure).
    ///
    /// ```no_run
    /// # async fn f(s: &mut slipstream_bench::Session) -> Result<(), slipstream_bench::TxError> {
    /// s.client()?.execute("UPDATE t SET n = n + 1", &[]).await?;
    /// # Ok(()) }
    /// ```
    pub fn client(&mut self) -> Result<&mut Client, TxError> {
        let lost = &self.lost;
        self.client.as_mut().ok_or_else(|| {
            TxError::new(
                "client:no-connection",
                lost.as_deref()
                    .unwrap_or("this workload runs without a database connection"),
            )
        })
    }

    /// The user's random number generator.
    ///
    /// ```
    /// use rand::Rng;
    /// let mut s = slipstream_bench::Session::new(0, None, slipstream_bench::ThinkTime::NONE, 7);
    /// let product_id: u32 = s.rng().random_range(1..=1000);
    /// assert!((1..=1000).contains(&product_id));
    /// ```
    pub fn rng(&mut self) -> &mut SmallRng {
        &mut self.rng
    }

    /// The statement counters of the current transaction.
    ///
    /// ```
    /// let mut s = slipstream_bench::Session::new(0, None, slipstream_bench::ThinkTime::NONE, 7);
    /// s.count().selects += 1; // one after each statement the transaction ran
    /// s.count().commits += 1;
    /// assert_eq!(s.count().total(), 2);
    /// ```
    pub fn count(&mut self) -> &mut StatementCounts {
        &mut self.counts
    }

    /// This user's number, from 0.
    ///
    /// ```
    /// let s = slipstream_bench::Session::new(5, None, slipstream_bench::ThinkTime::NONE, 7);
    /// assert_eq!(s.user(), 5);
    /// ```
    pub fn user(&self) -> usize {
        self.user
    }

    /// Sleeps for the intra-transaction think time (a user reading a page between two steps).
    /// The sleep is not part of the transaction's recorded latency.
    ///
    /// ```
    /// # #[tokio::main] async fn main() {
    /// use std::time::{Duration, Instant};
    /// let think = "20ms".parse().unwrap();
    /// let mut s = slipstream_bench::Session::new(0, None, think, 7);
    /// let t = Instant::now();
    /// s.think().await;
    /// assert!(t.elapsed() >= Duration::from_millis(20));
    /// # }
    /// ```
    pub async fn think(&mut self) {
        let d = self.think.draw(&mut self.rng);
        if !d.is_zero() {
            // The pause as taken, not as drawn: tokio's timer wakes on its next millisecond
            // tick, so a sleep of d lasts up to a millisecond longer, and leaving that in
            // added about a millisecond per think to the latency (12 ms recorded for ten
            // 1 ms thinks and no work).
            let paused = std::time::Instant::now();
            tokio::time::sleep(d).await;
            self.thought += paused.elapsed();
        }
    }

    pub(crate) fn take_counts(&mut self) -> StatementCounts {
        std::mem::take(&mut self.counts)
    }

    pub(crate) fn take_thought(&mut self) -> Duration {
        std::mem::take(&mut self.thought)
    }

    pub(crate) fn client_slot(&mut self) -> &mut Option<Client> {
        &mut self.client
    }

    /// Puts `client` in the session (a reconnect), or takes the session's away and keeps
    /// `why` for the failures that follow until a reconnect works.
    pub(crate) fn reconnected(&mut self, client: Result<Client, String>) {
        (self.client, self.lost) = match client {
            Ok(c) => (Some(c), None),
            Err(why) => (None, Some(why)),
        };
    }

    /// Why the session has no connection, when a reconnect failed.
    pub(crate) fn lost(&self) -> Option<&str> {
        self.lost.as_deref()
    }

    pub(crate) fn draw<R>(&mut self, f: impl FnOnce(&mut SmallRng) -> R) -> R {
        f(&mut self.rng)
    }
}

/// Why a transaction failed: a SQLSTATE for server errors, `client:<kind>` otherwise.
///
/// ```
/// use slipstream_bench::TxError;
/// let e = TxError::new("23505", "duplicate key value");
/// assert_eq!(e.to_string(), "duplicate key value (23505)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxError {
    code: String,
    message: String,
}

impl TxError {
    /// An error with the given code (a SQLSTATE, or `client:<what>` for errors the server did
    /// not report) and message. A blank code (empty, or only spaces) becomes
    /// [`TxError::NO_CODE`]: the raw CSV's empty `failure` field means a success, so a failure
    /// counted under "" read there as one.
    ///
    /// ```
    /// use slipstream_bench::TxError;
    /// assert_eq!(TxError::new("40001", "serialization failure").code(), "40001");
    /// assert_eq!(TxError::new("", "no code given").code(), TxError::NO_CODE);
    /// ```
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> TxError {
        let mut code = code.into();
        if code.trim().is_empty() {
            code = TxError::NO_CODE.into();
        }
        TxError {
            code,
            message: message.into(),
        }
    }

    /// The code of an error made with a blank one.
    pub const NO_CODE: &'static str = "client:no-code";

    /// The code failures are counted under.
    ///
    /// ```
    /// use slipstream_bench::TxError;
    /// assert_eq!(TxError::new("client:timeout", "no reply in 5 s").code(), "client:timeout");
    /// ```
    pub fn code(&self) -> &str {
        &self.code
    }

    /// What went wrong.
    ///
    /// ```
    /// use slipstream_bench::TxError;
    /// assert_eq!(TxError::new("40P01", "deadlock detected").message(), "deadlock detected");
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for TxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for TxError {}

impl From<slipstream_pg::Error> for TxError {
    fn from(e: slipstream_pg::Error) -> TxError {
        let code = match e.code() {
            Some(state) => state.code().to_string(),
            None => format!("client:{:?}", e.kind()).to_lowercase(),
        };
        TxError::new(code, e.to_string())
    }
}

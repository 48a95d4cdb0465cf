//! One fuzzing session: a connection sending random transactions and autocommit statements,
//! recording every step in the shared log and stopping everyone at the first mismatch.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::step::{Conn, Kind, Outcome, Step};

/// What the sessions of one run share.
pub(crate) struct Shared {
    pub keys: i32,
    /// Client-compared reads wanted in all (reads by `chk` come on top).
    pub target: u64,
    pub reads: AtomicU64,
    /// Of `reads`, those through memopt.get / memopt.get_many.
    pub fast_reads: AtomicU64,
    /// Of `fast_reads`, those by the client's FunctionCall path.
    pub client_reads: AtomicU64,
    /// Steps the server refused (conflicts, deadlocks, doomed commits, aborted transactions).
    pub errors: AtomicU64,
    pub stop: AtomicBool,
    /// Every step, in completion order.
    pub log: Mutex<Vec<Step>>,
    /// The log index of the first mismatching step and what disagreed.
    pub failure: Mutex<Option<(usize, String)>>,
    /// Which column is the primary key as far as the sessions know (a hint that steers reads
    /// to the served column; reads of the other column are compared all the same).
    pub pk_is_b: AtomicBool,
    /// Features left out (see `Config::skip`).
    pub skip: Vec<String>,
}

impl Shared {
    fn skips(&self, feature: &str) -> bool {
        self.skip.iter().any(|f| f == feature)
    }
}

/// Long runs print their progress every this many client-compared reads.
const PROGRESS_EVERY: u64 = 100_000;

// Relaxed everywhere in this file: the counters and flags steer the workload; the log and the
// failure are behind mutexes, and the run joins every session before reading them.

pub(crate) struct Session<'a> {
    id: usize,
    conn: Conn,
    rng: SmallRng,
    shared: &'a Shared,
    /// Keys (column `a`) whose rows this transaction has written and so holds locked.
    held: BTreeSet<i32>,
    repeatable: bool,
    savepoints: u32,
}

impl<'a> Session<'a> {
    pub fn new(id: usize, seed: u64, conn: Conn, shared: &'a Shared) -> Session<'a> {
        // Distinct, reproducible streams per session from the one printed seed.
        let rng =
            SmallRng::seed_from_u64(seed ^ (id as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        Session {
            id,
            conn,
            rng,
            shared,
            held: BTreeSet::new(),
            repeatable: false,
            savepoints: 0,
        }
    }

    fn done(&self) -> bool {
        self.shared.stop.load(Ordering::Relaxed)
            || self.shared.reads.load(Ordering::Relaxed) >= self.shared.target
    }

    async fn step(&mut self, kind: Kind, pinned: bool) -> Outcome {
        let out = self.conn.run(&kind).await;
        if matches!(&kind, Kind::Compare(sql) if sql.contains("memopt.get"))
            || matches!(&kind, Kind::Client { .. })
        {
            self.shared
                .fast_reads
                .fetch_add(out.reads, Ordering::Relaxed);
        }
        if matches!(&kind, Kind::Client { .. }) {
            self.shared
                .client_reads
                .fetch_add(out.reads, Ordering::Relaxed);
        }
        let before = self.shared.reads.fetch_add(out.reads, Ordering::Relaxed);
        if (before + out.reads) / PROGRESS_EVERY > before / PROGRESS_EVERY {
            eprintln!(
                "memopt fuzz: {} reads compared on the client",
                before + out.reads
            );
        }
        if out.error.is_some() {
            self.shared.errors.fetch_add(1, Ordering::Relaxed);
        }
        // Poisoned only if another session panicked; the fuzzer then fails anyway.
        let mut log = self.shared.log.lock().unwrap_or_else(|p| p.into_inner());
        log.push(Step {
            session: self.id,
            kind,
            pinned,
        });
        if let Some(m) = &out.mismatch {
            let mut failure = self
                .shared
                .failure
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if failure.is_none() {
                *failure = Some((log.len() - 1, m.clone()));
            }
            self.shared.stop.store(true, Ordering::Relaxed);
        }
        out
    }

    pub async fn run(mut self) {
        let settings = self.settings();
        self.step(Kind::Exec(settings), true).await;
        while !self.done() {
            if self.rng.random_bool(0.5) {
                self.autocommit().await;
            } else {
                self.transaction().await;
            }
        }
    }

    /// Per-session settings: plan caching, trigger reads, cheap parallelism, commit delay.
    fn settings(&mut self) -> String {
        let r = &mut self.rng;
        let mut s = String::from("SET statement_timeout = '60s'");
        let plan = ["auto", "force_generic_plan", "force_custom_plan"][r.random_range(0..3)];
        s += &format!("; SET plan_cache_mode = {plan}");
        // Reads inside writes see the writer's own changes and so always miss (by design):
        // a few sessions suffice, or they drown the hits.
        let trig = if r.random_bool(0.3) && !self.shared.skips("triggers") {
            "on"
        } else {
            "off"
        };
        s += &format!("; SET fuzz.trigger_reads = {trig}");
        if r.random_bool(0.3) {
            s += "; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; \
                  SET min_parallel_table_scan_size = 0; SET min_parallel_index_scan_size = 0";
        }
        if r.random_bool(0.2) {
            s += "; SET force_parallel_mode = on";
        }
        if r.random_bool(0.3) {
            // Holds each commit between becoming visible and dropping its fences.
            s += "; SET memopt.test_cleanup_delay = '1ms'";
        }
        s
    }

    fn key(&mut self) -> i32 {
        self.rng.random_range(1..=self.shared.keys)
    }

    /// The column to read by: mostly the primary key as last known.
    fn column(&mut self) -> bool {
        let pk_b = self.shared.pk_is_b.load(Ordering::Relaxed);
        if self.rng.random_bool(0.85) {
            pk_b
        } else {
            !pk_b
        }
    }

    /// A read comparing memopt with the normal plan; `split_ok` allows the two-statement form
    /// (inside a transaction, where the rule below makes it sound).
    fn read(&mut self, split_ok: bool) -> Kind {
        let by_b = self.column();
        let n1 = self.shared.keys + 1;
        let (c, o) = if by_b { ("b", "a") } else { ("a", "b") };
        let as_col = |a: i32| if by_b { n1 - a } else { a };
        // Two statements see different snapshots under READ COMMITTED: compare that way only
        // what no other session can change in between.
        let split_ok = split_ok && (self.repeatable || !self.held.is_empty());
        if self.rng.random_bool(0.25) {
            return self.fast_read();
        }
        let choice = self.rng.random_range(0..if split_ok { 6 } else { 4 });
        match choice {
            0 => {
                let k = as_col(self.key());
                // Now and then a key of another integer type, or a bigint that only wraps
                // around to a stored int key (the normal plan finds no row).
                match self.rng.random_range(0..10) {
                    0 => Kind::Compare(format!(
                        "SELECT (SELECT v || '/' || {o} || '/' || x FROM t WHERE {c} = {k}::smallint), \
                         slow_{c}({k})"
                    )),
                    1 => Kind::Compare(format!(
                        "SELECT (SELECT v || '/' || {o} || '/' || x FROM t WHERE {c} = {k}::bigint), \
                         slow_{c}8({k})"
                    )),
                    2 => {
                        let wide = i64::from(k) + (1i64 << 32);
                        Kind::Compare(format!(
                            "SELECT (SELECT v || '/' || {o} || '/' || x FROM t WHERE {c} = {wide}::bigint), \
                             slow_{c}8({wide})"
                        ))
                    }
                    _ => Kind::Compare(format!(
                        "SELECT (SELECT v || '/' || {o} || '/' || x FROM t WHERE {c} = {k}), slow_{c}({k})"
                    )),
                }
            }
            1 | 2 => {
                let n = self.rng.random_range(2..=30);
                let keys: Vec<String> = (0..n).map(|_| as_col(self.key()).to_string()).collect();
                let f = if choice == 1 { "fastp" } else { "fasti" };
                Kind::Compare(format!(
                    "SELECT {f}_{c}(k), slow_{c}(k) FROM unnest('{{{}}}'::int[]) k",
                    keys.join(",")
                ))
            }
            3 => Kind::Prepared {
                sql: format!(
                    "SELECT (SELECT v || '/' || {o} || '/' || x FROM t WHERE {c} = $1), slow_{c}($1)"
                ),
                key: as_col(self.key()),
            },
            _ => {
                let a = if self.held.is_empty() {
                    self.key()
                } else {
                    let i = self.rng.random_range(0..self.held.len());
                    // Cannot fail: i < held.len(), and held was checked non-empty.
                    *self.held.iter().nth(i).unwrap()
                };
                let k = as_col(a);
                let select = format!("SELECT v || '/' || {o} || '/' || x FROM t WHERE {c} = {k}");
                // A forced parallel plan runs the lookup in a worker, which must see the
                // leader's writes as the leader does.
                let fast = if self.rng.random_bool(0.6) {
                    format!(
                        "SET LOCAL force_parallel_mode = on; SET LOCAL parallel_setup_cost = 0; \
                         SET LOCAL parallel_tuple_cost = 0; {select}; \
                         SET LOCAL force_parallel_mode = off"
                    )
                } else {
                    select
                };
                Kind::Split {
                    fast,
                    slow: format!("SELECT slow_{c}({k})"),
                }
            }
        }
    }

    /// A read through memopt.get / memopt.get_many (the fast lookup, issue 22) compared with
    /// the normal plan's whole row for the same key of the current primary key (`slow_row`),
    /// on one snapshot. The key is a value of whichever column is the primary key.
    fn fast_read(&mut self) -> Kind {
        let n = self.rng.random_range(1..=20);
        let keys: Vec<String> = (0..n)
            .map(|_| {
                let k = i64::from(self.key());
                // Now and then a bigint that only wraps around to a stored int key.
                if self.rng.random_bool(0.05) {
                    (k + (1i64 << 32)).to_string()
                } else {
                    k.to_string()
                }
            })
            .collect();
        if self.rng.random_bool(0.3) && !self.shared.skips("client") {
            // By the client's FunctionCall path, one call per key or one pipelined run.
            return Kind::Client {
                keys: keys.iter().filter_map(|k| k.parse().ok()).collect(),
                pipelined: self.rng.random_bool(0.5),
            };
        }
        let keys = keys.join(",");
        if self.rng.random_bool(0.5) {
            Kind::Compare(format!(
                "SELECT memopt.get('t', k)::text, slow_row(k) FROM unnest('{{{keys}}}'::bigint[]) k"
            ))
        } else {
            // get_many runs (and locks t) before slow_row reads anything.
            Kind::Compare(format!(
                "SELECT r::text, slow_row(k) FROM unnest(memopt.get_many('t', '{{{keys}}}'::bigint[]), \
                 '{{{keys}}}'::bigint[]) AS u(r, k)"
            ))
        }
    }

    fn returning(&mut self) -> &'static str {
        if self.rng.random_bool(0.3) && !self.shared.skips("returning") {
            " RETURNING chk(a)"
        } else {
            ""
        }
    }

    /// A write; the keys whose rows it locks when it affects a row.
    fn write(&mut self) -> (Kind, Vec<i32>) {
        let n1 = self.shared.keys + 1;
        let k = self.key();
        let n: u32 = self.rng.random_range(0..100_000);
        let span = self.rng.random_range(1..=8).min(self.shared.keys - k);
        let ret = self.returning();
        // Inserts outnumber deletes so that the table stays mostly full and reads find rows.
        let inside = !self.shared.skips("returning");
        let (sql, keys) = match self.rng.random_range(0..if inside { 13 } else { 11 }) {
            0 => (
                format!(
                    "INSERT INTO t (a, b, v, p) VALUES ({k}, {}, 'i{n}', 1) ON CONFLICT DO NOTHING{ret}",
                    n1 - k
                ),
                vec![k],
            ),
            1 | 2 => (
                format!(
                    "INSERT INTO t (a, b, v, p) SELECT g, {n1} - g, 'm{n}', 1 \
                     FROM generate_series({k}, {}) g ON CONFLICT DO NOTHING{ret}",
                    k + span
                ),
                vec![],
            ),
            3 => (
                format!(
                    "INSERT INTO t (a, b, v, p) VALUES ({k}, {}, 'x{n}', 1) ON CONFLICT ON CONSTRAINT t_pkey \
                     DO UPDATE SET v = excluded.v, x = t.x + 1{ret}",
                    n1 - k
                ),
                vec![k],
            ),
            4 | 5 => (
                format!("UPDATE t SET v = 'u{n}', x = x + 1 WHERE a = {k}{ret}"),
                vec![k],
            ),
            6 => (
                format!(
                    "UPDATE t SET v = 'U{n}' WHERE a BETWEEN {k} AND {}{ret}",
                    k + span
                ),
                vec![],
            ),
            7 => {
                let k2 = self.key();
                (
                    format!("UPDATE t SET a = {k2}, b = {} WHERE a = {k}{ret}", n1 - k2),
                    vec![k, k2],
                )
            }
            8 | 9 => (format!("DELETE FROM t WHERE a = {k}{ret}"), vec![k]),
            10 => (
                format!(
                    "DELETE FROM t WHERE a BETWEEN {k} AND {}{ret}",
                    k + span / 3
                ),
                vec![],
            ),
            // A volatile function in the scan and in the inserted values reads the key the
            // statement wrote one row earlier (visible to it, not yet seen by memopt's
            // AFTER ROW trigger).
            11 => (
                format!(
                    "UPDATE t SET v = 'W{n}' WHERE a BETWEEN {k} AND {} AND chk(a - 1) IS NOT NULL",
                    k + span
                ),
                vec![],
            ),
            _ => (
                format!(
                    "INSERT INTO t (a, b, v, p) SELECT g, {n1} - g, chk(g - 1), 1 \
                     FROM generate_series({k}, {}) g ON CONFLICT DO NOTHING",
                    k + span
                ),
                vec![],
            ),
        };
        (Kind::Exec(sql), keys)
    }

    /// DDL that changes what a stored row means: the primary key's column, the attribute
    /// layout, the physical file.
    fn ddl(&mut self, in_transaction: bool) -> (Kind, Option<bool>) {
        let n: u32 = self.rng.random_range(0..1000);
        let first = if self.shared.skips("ddl") { 4 } else { 0 };
        let end = if in_transaction { 4 } else { 7 };
        if first >= end {
            return (Kind::Exec("SELECT memopt.populate('t')".into()), None);
        }
        match self.rng.random_range(first..end) {
            0 | 1 => {
                let to_b = self.rng.random_bool(0.5);
                let col = if to_b { "b" } else { "a" };
                (
                    Kind::Exec(format!(
                        "ALTER TABLE t DROP CONSTRAINT t_pkey, ADD CONSTRAINT t_pkey PRIMARY KEY ({col})"
                    )),
                    Some(to_b),
                )
            }
            2 => (
                Kind::Exec(format!(
                    "ALTER TABLE t DROP COLUMN x, ADD COLUMN x int NOT NULL DEFAULT {n}"
                )),
                None,
            ),
            3 => (
                Kind::Exec(if self.rng.random_bool(0.5) {
                    format!("ALTER TABLE t ADD COLUMN IF NOT EXISTS y text DEFAULT 'y{n}'")
                } else {
                    "ALTER TABLE t DROP COLUMN IF EXISTS y".to_string()
                }),
                None,
            ),
            4 => (Kind::Exec("VACUUM FULL t".into()), None),
            5 => (Kind::Exec("VACUUM t".into()), None),
            _ => (Kind::Exec("SELECT memopt.populate('t')".into()), None),
        }
    }

    fn truncate_refill(&mut self) -> [Kind; 2] {
        let n1 = self.shared.keys + 1;
        let m = self.rng.random_range(2..=7);
        let n: u32 = self.rng.random_range(0..1000);
        [
            Kind::Exec("TRUNCATE t".into()),
            Kind::Exec(format!(
                "INSERT INTO t (a, b, v, p) SELECT g, {n1} - g, 'r{n}', 1 \
                 FROM generate_series(1, {}) g WHERE g % {m} <> 0 ON CONFLICT DO NOTHING",
                self.shared.keys
            )),
        ]
    }

    async fn autocommit(&mut self) {
        // Per mille: DDL and TRUNCATE invalidate the whole table, so they stay rare enough for
        // the store to refill between them.
        let r = self.rng.random_range(0..1000);
        if r < 700 {
            let kind = self.read(false);
            self.step(kind, false).await;
        } else if r < 975 {
            let (kind, _) = self.write();
            self.step(kind, false).await;
        } else if r < 995 {
            let (kind, pk) = self.ddl(false);
            let out = self.step(kind, false).await;
            if let (None, Some(to_b)) = (&out.error, pk) {
                self.shared.pk_is_b.store(to_b, Ordering::Relaxed);
            }
        } else {
            self.step(Kind::Exec("BEGIN".into()), false).await;
            for kind in self.truncate_refill() {
                self.step(kind, false).await;
            }
            self.step(Kind::Exec("COMMIT".into()), false).await;
        }
    }

    async fn transaction(&mut self) {
        self.held.clear();
        self.savepoints = 0;
        self.repeatable = self.rng.random_bool(0.1);
        let begin = if self.repeatable {
            "BEGIN ISOLATION LEVEL REPEATABLE READ"
        } else {
            "BEGIN"
        };
        self.step(Kind::Exec(begin.into()), false).await;
        let mut pk_change = None;
        let ops = self.rng.random_range(1..=8);
        for _ in 0..ops {
            if self.shared.stop.load(Ordering::Relaxed) {
                return;
            }
            let r = self.rng.random_range(0..1000);
            let (out, locked, pk) = if r < 450 {
                let kind = self.read(true);
                (self.step(kind, false).await, vec![], None)
            } else if r < 850 {
                let (kind, keys) = self.write();
                (self.step(kind, false).await, keys, None)
            } else if r < 910 {
                self.savepoints += 1;
                let sql = format!("SAVEPOINT s{}", self.savepoints);
                (self.step(Kind::Exec(sql), false).await, vec![], None)
            } else if r < 960 && self.savepoints > 0 {
                let sql = format!("ROLLBACK TO SAVEPOINT s{}", self.savepoints);
                // Keys written before the savepoint stay locked, but forgetting them all is
                // the simple sound choice.
                self.held.clear();
                (self.step(Kind::Exec(sql), false).await, vec![], None)
            } else if r < 990 {
                continue;
            } else if r < 995 {
                let [t, refill] = self.truncate_refill();
                let out = self.step(t, false).await;
                if out.error.is_none() {
                    (self.step(refill, false).await, vec![], None)
                } else {
                    (out, vec![], None)
                }
            } else {
                let (kind, pk) = self.ddl(true);
                (self.step(kind, false).await, vec![], pk)
            };
            if out.error.is_some() {
                if self.savepoints > 0 && self.rng.random_bool(0.7) {
                    let sql = format!("ROLLBACK TO SAVEPOINT s{}", self.savepoints);
                    self.held.clear();
                    let again = self.step(Kind::Exec(sql), false).await;
                    if again.error.is_none() {
                        continue;
                    }
                }
                self.step(Kind::Exec("ROLLBACK".into()), false).await;
                return;
            }
            if out.rows > 0 {
                self.held.extend(locked);
            }
            if pk.is_some() {
                pk_change = pk;
            }
        }
        let r = self.rng.random_range(0..100);
        let end = if r < 72 {
            "COMMIT".to_string()
        } else if r < 92 {
            "ROLLBACK".to_string()
        } else {
            // Fails at COMMIT if the row exists: the deferred foreign key has no parent 99.
            let k = self.key();
            self.step(
                Kind::Exec(format!("UPDATE t SET p = 99 WHERE a = {k}")),
                false,
            )
            .await;
            "COMMIT".to_string()
        };
        let out = self.step(Kind::Exec(end.clone()), false).await;
        if let (None, "COMMIT", Some(to_b)) = (&out.error, end.as_str(), pk_change) {
            self.shared.pk_is_b.store(to_b, Ordering::Relaxed);
        }
    }
}

//! The per-connection cache of server-side prepared statements, least recently used first out.
//!
//! Keyed by SQL text and by how the parameters go on the wire (their types as chosen from the
//! Rust values, or "as the server described them"): the same SQL run with an `i32` and then an
//! `i64` is two statements, as it is to the server.
//!
//! Invariants:
//! - Every slot in `slots` is either in `free` or listed under its statement's SQL in `by_sql`,
//!   never both.
//! - The slots holding a statement form a doubly linked list in order of use (`oldest` to
//!   `newest`), so a hit moves its slot to the end and an eviction takes the first, each in
//!   O(1). (Finding the least recently used by scanning every slot cost each eviction the
//!   whole cache: 1 µs per thousand statements cached, as much as the miss's round trip at
//!   32,000.)
//! - Dropping a cached [`Statement`] (eviction, invalidation, clearing) queues its server-side
//!   `Close` with the connection's next request, so eviction costs no round trip.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;

use rustc_hash::FxHasher;

use crate::Statement;
use crate::param_types::Wire;

/// What the statement cache did so far on one connection.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// for id in 0..10i32 {
///     client.query("SELECT $1::int4 + 1", &[&id]).await?;
/// }
/// let stats = client.statement_cache_stats();
/// assert_eq!((stats.misses, stats.hits), (1, 9));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Lookups that found their statement in the cache.
    pub hits: u64,
    /// Lookups that did not: the statement is prepared with its execution, and cached if the
    /// server accepts it (a `Parse` the server refuses is a miss that caches nothing).
    /// A re-prepare after DDL is one of each: the stale statement was found (a hit), and the
    /// one retry prepares it again (a miss, and one of [`reprepares`](Self::reprepares)), so
    /// `hits + misses` is the executions plus the re-prepares.
    pub misses: u64,
    /// Statements closed to make room for another.
    pub evictions: u64,
    /// Statements prepared again because the server said the cached one was stale (after DDL
    /// changed its result type, or after it was deallocated behind the cache's back).
    pub reprepares: u64,
    /// Statements in the cache now.
    pub size: usize,
    /// The most statements the cache holds.
    pub capacity: usize,
}

/// How the parameters were bound when the statement was prepared (for a value whose type could
/// not be chosen from the Rust value, the type the server described); `None`: binary as the
/// statement's described types. (The client caches only statements its values can bind, so it
/// always gives `Some`; a statement whose parameter count is not its values' is not cached.)
pub(crate) type Binding = Option<Box<[Wire]>>;

/// No slot: the end of the use list.
const NIL: usize = usize::MAX;

struct Slot {
    stmt: Option<Statement>,
    binding: Binding,
    /// The slots used just before and just after this one (`NIL` at either end), while it
    /// holds a statement.
    older: usize,
    newer: usize,
}

pub(crate) struct StatementCache {
    capacity: usize,
    by_sql: HashMap<Box<str>, Vec<usize>, BuildHasherDefault<FxHasher>>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// The least and the most recently used slot holding a statement (`NIL` when empty).
    oldest: usize,
    newest: usize,
    stats: CacheStats,
    /// SQL whose cached statement went stale inside a transaction: it runs past the cache from
    /// then on (see `Client::stale`). Each entry cost the application a failed transaction,
    /// so the set grows only with its schema changes.
    kept_out: HashSet<Box<str>, BuildHasherDefault<FxHasher>>,
}

impl StatementCache {
    pub(crate) fn new(capacity: usize) -> StatementCache {
        StatementCache {
            capacity,
            by_sql: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            oldest: NIL,
            newest: NIL,
            stats: CacheStats {
                capacity,
                ..CacheStats::default()
            },
            kept_out: HashSet::default(),
        }
    }

    /// Runs `sql` past the cache from now on.
    pub(crate) fn keep_out(&mut self, sql: &str) {
        self.kept_out.insert(sql.into());
    }

    /// Whether `sql` runs past the cache (asked on a miss only: it is never cached).
    pub(crate) fn is_kept_out(&self, sql: &str) -> bool {
        !self.kept_out.is_empty() && self.kept_out.contains(sql)
    }

    pub(crate) fn enabled(&self) -> bool {
        self.capacity > 0
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            size: self.slots.len() - self.free.len(),
            ..self.stats
        }
    }

    /// The first cached statement for `sql` that `fits` accepts (it gets the statement and how
    /// its parameters were bound), counted as a hit; or `None`, counted as a miss.
    pub(crate) fn find<E>(
        &mut self,
        sql: &str,
        mut fits: impl FnMut(&Statement, Option<&[Wire]>) -> Result<bool, E>,
    ) -> Result<Option<Statement>, E> {
        let mut found = None;
        if let Some(list) = self.by_sql.get(sql) {
            for &i in list {
                let slot = &self.slots[i];
                let Some(stmt) = &slot.stmt else { continue };
                if fits(stmt, slot.binding.as_deref())? {
                    found = Some((i, stmt.clone()));
                    break;
                }
            }
        }
        let Some((i, stmt)) = found else {
            self.stats.misses += 1;
            return Ok(None);
        };
        // A statement run in a loop is already the newest: no list to touch.
        if self.newest != i {
            self.unlink(i);
            self.link_newest(i);
        }
        self.stats.hits += 1;
        Ok(Some(stmt))
    }

    /// [`StatementCache::find`] for a statement bound exactly as `binding`.
    #[cfg(test)]
    fn get(&mut self, sql: &str, binding: Option<&[Wire]>) -> Option<Statement> {
        self.find(sql, |_, b| Ok::<_, ()>(b == binding)).unwrap()
    }

    /// Caches `stmt`, evicting the least recently used statement if the cache is full.
    pub(crate) fn insert(&mut self, stmt: Statement, binding: Binding) {
        if !self.enabled() {
            return;
        }
        if self.slots.len() - self.free.len() >= self.capacity {
            self.evict_oldest();
        }
        let slot = Slot {
            stmt: Some(stmt.clone()),
            binding,
            older: NIL,
            newer: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.link_newest(i);
        self.by_sql.entry(stmt.sql().into()).or_default().push(i);
    }

    /// Forgets `stmt`, which the server said is stale, and every other statement cached for
    /// the same SQL (bound another way): what made one stale (DDL changing the result, a type
    /// dropped) made them all stale, and the caller's one retry must not find another of them
    /// (it got 0A000 again, outside a transaction). Their `Close`s go with the next request.
    pub(crate) fn remove(&mut self, stmt: &Statement) {
        let slots = self.by_sql.get(stmt.sql()).cloned().unwrap_or_default();
        for i in slots {
            self.release(i);
        }
    }

    pub(crate) fn count_reprepare(&mut self) {
        self.stats.reprepares += 1;
    }

    /// Forgets every statement, e.g. after `DISCARD ALL` (closing a statement the server no
    /// longer has is harmless).
    pub(crate) fn clear(&mut self) {
        self.by_sql.clear();
        self.slots.clear();
        self.free.clear();
        self.oldest = NIL;
        self.newest = NIL;
    }

    fn evict_oldest(&mut self) {
        if self.oldest != NIL {
            self.release(self.oldest);
            self.stats.evictions += 1;
        }
    }

    /// Puts slot `i`, which is in no list, at the most recently used end.
    fn link_newest(&mut self, i: usize) {
        self.slots[i].older = self.newest;
        self.slots[i].newer = NIL;
        match self.newest {
            NIL => self.oldest = i,
            n => self.slots[n].newer = i,
        }
        self.newest = i;
    }

    /// Takes slot `i` out of the use list.
    fn unlink(&mut self, i: usize) {
        let (older, newer) = (self.slots[i].older, self.slots[i].newer);
        match older {
            NIL => self.oldest = newer,
            o => self.slots[o].newer = newer,
        }
        match newer {
            NIL => self.newest = older,
            n => self.slots[n].older = older,
        }
    }

    fn release(&mut self, i: usize) {
        let Some(stmt) = self.slots[i].stmt.take() else {
            return;
        };
        self.unlink(i);
        self.slots[i].binding = None;
        if let Some(list) = self.by_sql.get_mut(stmt.sql()) {
            list.retain(|&j| j != i);
            if list.is_empty() {
                self.by_sql.remove(stmt.sql());
            }
        }
        self.free.push(i);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    fn stmt(name: &str, sql: &str, closes: &Arc<Mutex<Vec<String>>>) -> Statement {
        Statement::new(
            name.into(),
            sql.into(),
            vec![],
            Arc::from(Vec::new()),
            1,
            Arc::downgrade(closes),
        )
    }

    #[test]
    fn evicts_the_least_recently_used_and_closes_it() {
        let closes = Arc::new(Mutex::new(Vec::new()));
        let mut cache = StatementCache::new(2);
        cache.insert(stmt("s1", "a", &closes), Some(Box::new([])));
        cache.insert(stmt("s2", "b", &closes), Some(Box::new([])));
        assert!(cache.get("a", Some(&[])).is_some()); // b is now the oldest
        cache.insert(stmt("s3", "c", &closes), Some(Box::new([])));
        assert_eq!(*closes.lock().unwrap(), vec!["s2".to_string()]);
        assert!(cache.get("b", Some(&[])).is_none());
        assert!(cache.get("a", Some(&[])).is_some());
        assert!(cache.get("c", Some(&[])).is_some());
        let s = cache.stats();
        assert_eq!((s.hits, s.misses, s.evictions, s.size), (3, 1, 1, 2));
    }

    #[test]
    fn the_same_sql_bound_differently_is_another_statement() {
        let closes = Arc::new(Mutex::new(Vec::new()));
        let mut cache = StatementCache::new(4);
        let int4: Binding = Some(Box::new([Wire::Binary(postgres_types::Type::INT4)]));
        cache.insert(stmt("s1", "q", &closes), int4);
        assert!(
            cache
                .get("q", Some(&[Wire::Binary(postgres_types::Type::INT8)]))
                .is_none()
        );
        assert!(
            cache
                .get("q", Some(&[Wire::Binary(postgres_types::Type::INT4)]))
                .is_some()
        );
        assert!(cache.get("q", None).is_none());
        cache.insert(stmt("s2", "q", &closes), None);
        assert_eq!(
            cache.get("q", None).map(|s| s.name().to_string()),
            Some("s2".into())
        );
    }

    #[test]
    fn remove_and_clear_close_what_they_drop() {
        let closes = Arc::new(Mutex::new(Vec::new()));
        let mut cache = StatementCache::new(4);
        let a = stmt("s1", "a", &closes);
        cache.insert(a.clone(), None);
        cache.insert(stmt("s2", "b", &closes), None);
        cache.remove(&a);
        drop(a);
        assert_eq!(*closes.lock().unwrap(), vec!["s1".to_string()]);
        cache.clear();
        assert_eq!(closes.lock().unwrap().len(), 2);
        assert_eq!(cache.stats().size, 0);
        // Slots freed by remove are reused.
        cache.insert(stmt("s3", "c", &closes), None);
        assert_eq!(cache.stats().size, 1);
    }

    #[test]
    fn removing_a_stale_statement_forgets_every_binding_of_its_sql() {
        let closes = Arc::new(Mutex::new(Vec::new()));
        let mut cache = StatementCache::new(4);
        let a = stmt("s1", "q", &closes);
        cache.insert(a.clone(), Some(Box::new([])));
        cache.insert(stmt("s2", "q", &closes), None);
        cache.insert(stmt("s3", "other", &closes), None);
        cache.remove(&a);
        drop(a);
        let mut closed = closes.lock().unwrap().clone();
        closed.sort();
        assert_eq!(closed, ["s1", "s2"]);
        assert!(cache.get("q", None).is_none());
        assert!(cache.get("other", None).is_some());
        assert_eq!(cache.stats().size, 1);
    }

    #[test]
    fn a_zero_capacity_cache_holds_nothing() {
        let closes = Arc::new(Mutex::new(Vec::new()));
        let mut cache = StatementCache::new(0);
        cache.insert(stmt("s1", "a", &closes), None);
        assert_eq!(closes.lock().unwrap().len(), 1);
        assert!(!cache.enabled());
    }

    /// Each eviction looked for the least recently used statement by scanning every slot:
    /// 6 µs per eviction with 10,000 statements cached, 27 µs with 40,000 (release build), so
    /// a workload of many distinct statements paid the whole cache on every miss. The use
    /// list makes it 0.3-0.5 µs at any size. The timeout only tells a hang from a slow
    /// machine.
    #[test]
    fn a_full_cache_evicts_without_scanning_it() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let closes = Arc::new(Mutex::new(Vec::new()));
            let capacity = 200_000;
            let mut cache = StatementCache::new(capacity);
            let insert = |cache: &mut StatementCache, i: usize| {
                cache.insert(stmt(&format!("s{i}"), &format!("q{i}"), &closes), None);
            };
            for i in 0..capacity {
                insert(&mut cache, i);
            }
            // The oldest, used again, is kept; the one after it goes.
            assert!(cache.get("q0", None).is_some());
            insert(&mut cache, capacity);
            assert!(cache.get("q0", None).is_some() && cache.get("q1", None).is_none());
            for i in capacity + 1..2 * capacity {
                insert(&mut cache, i);
            }
            let s = cache.stats();
            assert_eq!((s.size, s.evictions), (capacity, capacity as u64));
            assert!(cache.get(&format!("q{}", 2 * capacity - 1), None).is_some());
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("evictions took minutes: each one scanned the whole cache");
    }
}

//! What the pool tells the outside while it runs: its state and counters through the
//! `metrics` facade (any exporter: Prometheus, StatsD, ...), and a warning naming where a
//! connection held past the leak threshold was borrowed (HikariCP's leak detection).
//!
//! Neither costs the hot path when off; when on, metrics cost nothing per borrow that does not
//! wait (gauges and counters are published by the pool's own task), and the leak warning costs
//! one captured backtrace per borrow.

use std::backtrace::Backtrace;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};

use crate::core::BORROWED;
use crate::pool::Inner;
use crate::{Manager, Stats};

/// How often the pool's task publishes gauges and counters, at most.
const PUBLISH_EVERY_MS: u64 = 100;

/// The pool's metric handles, registered once with the recorder installed when the pool was
/// built (a recorder installed later does not see them: install it first, as the `metrics`
/// crate asks).
pub(crate) struct Published {
    wait: Histogram,
    open: Gauge,
    idle: Gauge,
    borrowed: Gauge,
    waiting: Gauge,
    max_size: Gauge,
    borrows: Counter,
    waits: Counter,
    timeouts: Counter,
    rejected: Counter,
    reclaimed_abandoned: Counter,
    reclaimed_ttl: Counter,
    closed_broken: Counter,
    connect_failures: Counter,
    leaks_suspected: Counter,
    /// Pool-clock ms of the last publication (written by the pool's task only).
    last_ms: AtomicU64,
}

impl Published {
    pub(crate) fn new(pool: &str) -> Published {
        let pool = pool.to_string();
        let connections = |state: &'static str| metrics::gauge!("slipstream_pool_connections", "pool" => pool.clone(), "state" => state);
        let counter = |name: &'static str| metrics::counter!(name, "pool" => pool.clone());
        let reclaimed = |reason: &'static str| metrics::counter!("slipstream_pool_reclaimed_total", "pool" => pool.clone(), "reason" => reason);
        Published {
            wait: metrics::histogram!("slipstream_pool_wait_seconds", "pool" => pool.clone()),
            open: connections("open"),
            idle: connections("idle"),
            borrowed: connections("borrowed"),
            waiting: metrics::gauge!("slipstream_pool_waiting", "pool" => pool.clone()),
            max_size: metrics::gauge!("slipstream_pool_max_size", "pool" => pool.clone()),
            borrows: counter("slipstream_pool_borrows_total"),
            waits: counter("slipstream_pool_waits_total"),
            timeouts: counter("slipstream_pool_timeouts_total"),
            rejected: counter("slipstream_pool_rejected_total"),
            reclaimed_abandoned: reclaimed("abandoned"),
            reclaimed_ttl: reclaimed("time_to_live"),
            closed_broken: counter("slipstream_pool_closed_broken_total"),
            connect_failures: counter("slipstream_pool_connect_failures_total"),
            leaks_suspected: counter("slipstream_pool_leaks_suspected_total"),
            last_ms: AtomicU64::new(0),
        }
    }

    /// A borrow that had to wait (borrows that find an idle connection are counted by
    /// `slipstream_pool_borrows_total` minus `slipstream_pool_waits_total`, not recorded here,
    /// so the fast path stays free of it).
    pub(crate) fn record_wait(&self, waited: Duration) {
        self.wait.record(waited.as_secs_f64());
    }

    /// Publishes `stats` unless it was done in the last `PUBLISH_EVERY_MS`.
    pub(crate) fn publish_due(&self, now_ms: u64) -> bool {
        let last = self.last_ms.load(Ordering::Relaxed);
        if last != 0 && now_ms.saturating_sub(last) < PUBLISH_EVERY_MS {
            return false;
        }
        self.last_ms.store(now_ms.max(1), Ordering::Relaxed);
        true
    }

    pub(crate) fn publish(&self, s: &Stats) {
        self.open.set(s.open as f64);
        self.idle.set(s.idle as f64);
        self.borrowed.set(s.borrowed as f64);
        self.waiting.set(s.waiting as f64);
        self.max_size.set(s.max_size as f64);
        self.borrows.absolute(s.borrows);
        self.waits.absolute(s.waits);
        self.timeouts.absolute(s.timeouts);
        self.rejected.absolute(s.rejected);
        self.reclaimed_abandoned.absolute(s.reclaimed_abandoned);
        self.reclaimed_ttl.absolute(s.reclaimed_ttl);
        self.closed_broken.absolute(s.closed_broken);
        self.connect_failures.absolute(s.connect_failures);
        self.leaks_suspected.absolute(s.leaks_suspected);
    }
}

/// A slot's leak-detection state: where its current borrow came from, and whether that
/// borrow was already reported.
#[derive(Default)]
pub(crate) struct BorrowSite {
    /// Written by the borrower at lend (the slot's owner then), read by the pool's task.
    at: Mutex<Option<Backtrace>>,
    reported: AtomicBool,
}

impl BorrowSite {
    /// Called by the slot's owner as it lends the connection.
    pub(crate) fn note(&self) {
        self.reported.store(false, Ordering::Relaxed);
        *self.at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Backtrace::force_capture());
    }

    /// Called by the slot's owner as the connection comes back: a borrow reported as a
    /// possible leak says it ended, so the warning is not left standing.
    pub(crate) fn returned(&self, slot: usize, lent_ms: u64) {
        if self.reported.swap(false, Ordering::Relaxed) {
            tracing::info!(
                slot,
                lent_ms,
                "a pooled connection reported as a possible leak came back after {lent_ms} ms"
            );
        }
    }
}

impl<M: Manager> Inner<M> {
    /// Warns once per borrow about connections lent for longer than `leak_warning`, with the
    /// backtrace of the borrow.
    pub(crate) fn check_leaks(&self, now: u64, threshold: Duration) {
        let threshold_ms = threshold.as_millis() as u64;
        for (i, slot) in self.core.slots.iter().enumerate() {
            if slot.state.load(Ordering::Acquire) != BORROWED {
                continue;
            }
            // The borrow count tells one borrow from the next: if it moved while we looked,
            // the times read belong to another borrow, and the next pass looks again.
            let borrow = slot.borrows.load(Ordering::Acquire);
            let borrowed_ms = slot.borrowed_ms.load(Ordering::Relaxed);
            let lent_ms = now.saturating_sub(borrowed_ms);
            let site = &self.attachments[i].borrow_site;
            // A borrow stamps its time after taking the slot: a time older than the slot's
            // last return is the previous borrow's, not this one's.
            let stamped = borrowed_ms >= slot.returned_ms.load(Ordering::Relaxed);
            if !stamped || lent_ms < threshold_ms || site.reported.load(Ordering::Relaxed) {
                continue;
            }
            let at = site
                .at
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map(|b| b.to_string());
            if slot.borrows.load(Ordering::Acquire) != borrow
                || slot.state.load(Ordering::Acquire) != BORROWED
                || site.reported.swap(true, Ordering::Relaxed)
            {
                continue;
            }
            self.counters
                .leaks_suspected
                .fetch_add(1, Ordering::Relaxed);
            let at = at.unwrap_or_else(|| "(not captured)".to_string());
            tracing::warn!(
                slot = i,
                lent_ms,
                "a pooled connection has been lent for {lent_ms} ms, over the pool's \
                 leak_warning ({threshold:?}): it may have leaked (held and forgotten). \
                 It was borrowed at:\n{at}"
            );
        }
    }
}

//! What the pool tells the outside while it runs: its state and counters through the
//! `metrics` facade (any exporter: Prometheus, StatsD, ...), and a warning naming where a
//! connection held past the leak threshold was borrowed (HikariCP's leak detection).
//!
//! Neither costs the hot path when off; when on, metrics cost nothing per borrow that does not
//! wait (gauges and counters are published by the pool's own task), and the leak warning costs
//! one captured backtrace per borrow.

use std::backtrace::Backtrace;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use metrics::{Counter, Gauge, Histogram, Label};

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
    /// Handles labelled `pool` (and `server`, for a [`PgPool`](crate::PgPool)'s sub-pools:
    /// each publishes its own server's figures, and a sum by `pool` gives the whole pool's).
    pub(crate) fn new(pool: &str, server: Option<&str>) -> Published {
        let mut base = vec![Label::new("pool", pool.to_string())];
        if let Some(server) = server {
            base.push(Label::new("server", server.to_string()));
        }
        let with = |extra: Option<(&'static str, &'static str)>| {
            let mut labels = base.clone();
            labels.extend(extra.map(|(k, v)| Label::new(k, v)));
            labels
        };
        let connections =
            |state| metrics::gauge!("slipstream_pool_connections", with(Some(("state", state))));
        let counter = |name: &'static str| metrics::counter!(name, with(None));
        let reclaimed = |reason| {
            metrics::counter!(
                "slipstream_pool_reclaimed_total",
                with(Some(("reason", reason)))
            )
        };
        Published {
            wait: metrics::histogram!("slipstream_pool_wait_seconds", with(None)),
            open: connections("open"),
            idle: connections("idle"),
            borrowed: connections("borrowed"),
            waiting: metrics::gauge!("slipstream_pool_waiting", with(None)),
            max_size: metrics::gauge!("slipstream_pool_max_size", with(None)),
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

/// A slot's leak-detection state: the current borrow, when and where it began, and whether it
/// was reported. One mutex keeps the four consistent: the borrower writes them as it lends (a
/// lock per borrow, only with `leak_warning` set), the pool's task reads them.
#[derive(Default)]
pub(crate) struct BorrowSite(Mutex<Site>);

#[derive(Default)]
struct Site {
    /// The slot's borrow count for this borrow (`Slot::borrows` after the lend).
    borrow: u64,
    /// Measured here, not from the pool's coarse clock: that clock only moves when the pool's
    /// task runs, and a task starved past the threshold would make a fresh borrow look old.
    since: Option<Instant>,
    at: Option<Backtrace>,
    reported: bool,
}

impl BorrowSite {
    /// Called by the slot's owner as it lends the connection, after counting the borrow.
    /// Out of line: the borrow path without leak warnings must not grow by it.
    #[cold]
    #[inline(never)]
    pub(crate) fn note(&self, borrow: u64) {
        let at = Backtrace::force_capture();
        let mut site = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *site = Site {
            borrow,
            since: Some(Instant::now()),
            at: Some(at),
            reported: false,
        };
    }

    /// Called by the slot's owner when borrow `borrow` was made on another thread for a
    /// caller (`PgPool::get_blocking` waits on the pool's runtime): `at`, captured on the
    /// caller's thread, replaces the lend's backtrace, which showed only the runtime's frames.
    /// A site already reported, or one of another borrow, is left as it is.
    #[cold]
    #[inline(never)]
    pub(crate) fn borrowed_at(&self, borrow: u64, at: Backtrace) {
        let mut site = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if site.borrow == borrow && !site.reported {
            site.at = Some(at);
        }
    }

    /// Called by the slot's owner as the connection comes back: a borrow reported as a
    /// possible leak says it ended, so the warning is not left standing.
    #[cold]
    #[inline(never)]
    pub(crate) fn returned(&self, slot: usize) {
        let mut site = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let lent = site.since.take().map(|t| t.elapsed());
        if std::mem::take(&mut site.reported) {
            let lent_ms = lent.unwrap_or_default().as_millis() as u64;
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
    pub(crate) fn check_leaks(&self, threshold: Duration) {
        for (i, slot) in self.core.slots.iter().enumerate() {
            if slot.state.load(Ordering::Acquire) != BORROWED {
                continue;
            }
            let borrow = slot.borrows.load(Ordering::Acquire);
            let mut site = self.attachments[i]
                .borrow_site
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            // The site must describe the borrow the slot is in now: a lend that has counted its
            // borrow but not yet noted it leaves the previous borrow's site here.
            let Some(since) = site
                .since
                .filter(|_| site.borrow == borrow && !site.reported)
            else {
                continue;
            };
            let lent = since.elapsed();
            if lent < threshold {
                continue;
            }
            site.reported = true;
            let at = site
                .at
                .as_ref()
                .map_or_else(|| "(not captured)".to_string(), |b| b.to_string());
            drop(site);
            self.counters
                .leaks_suspected
                .fetch_add(1, Ordering::Relaxed);
            let lent_ms = lent.as_millis() as u64;
            let to = self
                .server
                .as_deref()
                .map_or_else(String::new, |s| format!(" to {s}"));
            tracing::warn!(
                slot = i,
                lent_ms,
                "a pooled connection{to} has been lent for {lent_ms} ms, over the pool's \
                 leak_warning ({threshold:?}): it may have leaked (held and forgotten). \
                 It was borrowed at:\n{at}"
            );
        }
    }
}

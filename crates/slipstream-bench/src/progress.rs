//! The live progress line (charbench's: elapsed, users, TPS, errors; plus the stage and the
//! last interval's p50 / p99): redrawn each second on a terminal, a plain line every few
//! seconds otherwise. It counts every transaction, the warm-up's too (marked `warm-up`), from
//! its own figures ([`Live`]); the recorded totals are the run's.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::phases::Plan;
use crate::recorder::Recorder;

/// How often a plain (non-terminal) progress line is printed.
const PLAIN_EVERY: Duration = Duration::from_secs(5);
/// How often the thread checks whether the run is over.
const TICK: Duration = Duration::from_millis(100);

/// How the runner reports progress on stderr.
///
/// ```
/// use slipstream_bench::{RunConfig, Style};
/// let mut config = RunConfig::new(None);
/// assert_eq!(config.progress, Style::Quiet); // the library's default
/// config.progress = Style::Auto; // the CLI's: a live line on a terminal
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A live line on a terminal, plain lines otherwise.
    Auto,
    /// Plain lines every 5 s.
    Plain,
    /// Nothing.
    Quiet,
}

/// What the progress line shows of every transaction, warm-up included: counts, and the
/// latencies of the current interval (the recorder keeps only the measured window's).
pub(crate) struct Live {
    ok: AtomicU64,
    failed: AtomicU64,
    interval: Mutex<Histogram<u64>>,
}

impl Live {
    pub(crate) fn new() -> Live {
        Live {
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            interval: Mutex::new(crate::histogram::coarse()),
        }
    }

    /// The interval's latencies so far; a new interval starts empty.
    fn take_interval(&self) -> Histogram<u64> {
        let mut h = self.interval.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut *h, crate::histogram::coarse())
    }
}

/// One user's share of [`Live`], handed over every [`LIVE_FLUSH`] so the shared lock is taken
/// a few times a second per user, not per transaction.
pub(crate) struct LiveLog {
    live: Arc<Live>,
    hist: Histogram<u64>,
    ok: u64,
    failed: u64,
    /// When to hand over next: a deadline, so each transaction compares instead of subtracting.
    due: Instant,
}

/// How long a user keeps its live figures before handing them over.
const LIVE_FLUSH: Duration = Duration::from_millis(100);

impl LiveLog {
    pub(crate) fn new(live: Arc<Live>) -> LiveLog {
        LiveLog {
            live,
            hist: crate::histogram::coarse(),
            ok: 0,
            failed: 0,
            due: Instant::now() + LIVE_FLUSH,
        }
    }

    pub(crate) fn push(&mut self, latency: Duration, failed: bool, now: Instant) {
        if failed {
            self.failed += 1;
        } else {
            self.ok += 1;
            let _ = self.hist.record((latency.as_micros() as u64).max(1));
        }
        if now >= self.due {
            self.flush(now);
        }
    }

    fn flush(&mut self, now: Instant) {
        self.due = now + LIVE_FLUSH;
        if self.ok + self.failed == 0 {
            return;
        }
        self.live.ok.fetch_add(self.ok, Ordering::Relaxed);
        self.live.failed.fetch_add(self.failed, Ordering::Relaxed);
        if !self.hist.is_empty() {
            let mut h = self.live.interval.lock().unwrap_or_else(|p| p.into_inner());
            let _ = h.add(&self.hist);
        }
        self.hist.reset();
        self.ok = 0;
        self.failed = 0;
    }
}

impl Drop for LiveLog {
    fn drop(&mut self) {
        self.flush(Instant::now());
    }
}

/// What the progress line needs to know of the run's clock and phases.
pub(crate) struct Clock {
    /// The warm-up starts.
    pub(crate) t0: Instant,
    /// Measuring starts.
    pub(crate) from: Instant,
    /// Measuring ends.
    pub(crate) to: Instant,
    pub(crate) plan: Arc<Plan>,
}

pub(crate) struct ProgressLine {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ProgressLine {
    pub(crate) fn start(
        style: Style,
        clock: Clock,
        live: Arc<Live>,
        recorder: Arc<Recorder>,
    ) -> ProgressLine {
        let done = Arc::new(AtomicBool::new(false));
        let live_term = match style {
            Style::Quiet => None,
            Style::Auto => Some(std::io::stderr().is_terminal()),
            Style::Plain => Some(false),
        };
        let thread = live_term.and_then(|term| {
            let done = done.clone();
            std::thread::Builder::new()
                .name("bench-progress".into())
                .spawn(move || draw(term, &clock, &live, &recorder, &done))
                .ok()
        });
        ProgressLine { done, thread }
    }
}

impl Drop for ProgressLine {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One progress line: phase, time, stage, users, and the last interval's TPS, p50 / p99 and
/// errors, then the totals.
pub(crate) fn line(
    clock: &Clock,
    now: Instant,
    tps: f64,
    interval: &Histogram<u64>,
    errors: u64,
    recorded: crate::recorder::Progress,
) -> String {
    let (phase, elapsed, total) = if now < clock.from {
        (
            "warm-up",
            now.saturating_duration_since(clock.t0),
            clock.from.saturating_duration_since(clock.t0),
        )
    } else if now < clock.to {
        (
            "running",
            now.saturating_duration_since(clock.from),
            clock.to.saturating_duration_since(clock.from),
        )
    } else {
        (
            "draining",
            now.saturating_duration_since(clock.from),
            clock.to.saturating_duration_since(clock.from),
        )
    };
    let t = if now < clock.from {
        -(clock.from - now).as_secs_f64()
    } else {
        (now - clock.from).as_secs_f64()
    };
    let segment = clock.plan.segment_at(t);
    let load = if clock.plan.is_open() {
        format!("rate {:.0}/s", clock.plan.rate_at(t))
    } else {
        format!("users {}", clock.plan.users_at(t))
    };
    let ms = |q: f64| {
        if interval.is_empty() {
            "-".to_string()
        } else {
            format!("{:.2}", interval.value_at_quantile(q) as f64 / 1e3)
        }
    };
    format!(
        "{phase:<8} {:>4}/{}s  {}  {load}  tps {tps:>8.0}  p50 {} ms  p99 {} ms  errors {errors}  recorded {} ok {} failed",
        elapsed.as_secs(),
        total.as_secs(),
        clock.plan.name(segment),
        ms(0.5),
        ms(0.99),
        recorded.ok,
        recorded.failed,
    )
}

fn draw(term: bool, clock: &Clock, live: &Live, recorder: &Recorder, done: &AtomicBool) {
    let bar = term.then(|| {
        let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        b
    });
    let every = if term {
        Duration::from_secs(1)
    } else {
        PLAIN_EVERY
    };
    let mut last = (Instant::now(), 0u64);
    let mut next = last.0 + every;
    while !done.load(Ordering::Acquire) {
        std::thread::sleep(TICK);
        let now = Instant::now();
        if now < next {
            continue;
        }
        next += every;
        let ok = live.ok.load(Ordering::Relaxed);
        let tps = (ok - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
        last = (now, ok);
        let interval = live.take_interval();
        let errors = live.failed.load(Ordering::Relaxed);
        let text = line(clock, now, tps, &interval, errors, recorder.progress());
        match &bar {
            Some(b) => {
                b.set_message(text);
                b.tick();
            }
            // Not `eprintln!`, which panics once stderr's reader has gone (`bench ... 2>&1 |
            // head -1`): the line is lost either way, and this thread must go on to its end.
            None => {
                let _ = writeln!(std::io::stderr(), "{text}");
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::Progress;

    fn clock(plan: Plan, warmup: Duration, total: Duration) -> (Clock, Instant) {
        let t0 = Instant::now();
        let c = Clock {
            t0,
            from: t0 + warmup,
            to: t0 + warmup + total,
            plan: Arc::new(plan),
        };
        (c, t0)
    }

    #[test]
    fn the_warm_up_shows_its_rate_latency_and_errors() {
        let plan = Plan::new(
            8,
            None,
            Duration::from_secs(30),
            Duration::from_secs(5),
            Duration::ZERO,
            &[],
        )
        .unwrap();
        let (c, t0) = clock(plan, Duration::from_secs(5), Duration::from_secs(30));
        let live = Arc::new(Live::new());
        {
            let mut log = LiveLog::new(live.clone());
            for us in [400, 500, 600, 3000] {
                log.push(Duration::from_micros(us), false, t0);
            }
            log.push(Duration::from_micros(1), true, t0);
        }
        let h = live.take_interval();
        let text = line(
            &c,
            t0 + Duration::from_secs(3),
            1234.0,
            &h,
            live.failed.load(Ordering::Relaxed),
            Progress::default(),
        );
        assert!(text.starts_with("warm-up"), "{text}");
        assert!(text.contains("3/5s") && text.contains("stage 1"), "{text}");
        assert!(
            text.contains("users 8") && text.contains("tps     1234"),
            "{text}"
        );
        assert!(
            text.contains("p50 0.50 ms") && text.contains("p99 3.0"),
            "{text}"
        );
        assert!(text.contains("errors 1"), "{text}");
        // The next interval starts empty.
        assert!(live.take_interval().is_empty());
    }

    #[test]
    fn a_ramp_up_shows_the_users_started_so_far() {
        let plan = Plan::new(
            4,
            None,
            Duration::ZERO,
            Duration::ZERO,
            Duration::from_secs(4),
            &["10s:4".parse().unwrap()],
        )
        .unwrap();
        let (c, t0) = clock(plan, Duration::ZERO, Duration::from_secs(14));
        let empty = crate::histogram::coarse();
        let at = |s: u64| {
            line(
                &c,
                t0 + Duration::from_secs(s),
                0.0,
                &empty,
                0,
                Progress::default(),
            )
        };
        assert!(at(1).contains("ramp-up  users 2"), "{}", at(1));
        assert!(at(5).contains("stage 1  users 4"), "{}", at(5));
        assert!(at(1).contains("p50 - ms"), "{}", at(1));
    }
}

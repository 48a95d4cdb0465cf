//! The live progress line (charbench's: elapsed, users, TPS, errors): redrawn each second on a
//! terminal, a plain line every few seconds otherwise.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::recorder::Recorder;

/// How often a plain (non-terminal) progress line is printed.
const PLAIN_EVERY: Duration = Duration::from_secs(5);
/// How often the thread checks whether the run is over.
const TICK: Duration = Duration::from_millis(100);

/// How the runner reports progress on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A live line on a terminal, plain lines otherwise.
    Auto,
    /// Plain lines every 5 s.
    Plain,
    /// Nothing.
    Quiet,
}

pub(crate) struct ProgressLine {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ProgressLine {
    pub(crate) fn start(
        style: Style,
        users: usize,
        from: Instant,
        to: Instant,
        recorder: Arc<Recorder>,
    ) -> ProgressLine {
        let done = Arc::new(AtomicBool::new(false));
        let live = match style {
            Style::Quiet => None,
            Style::Auto => Some(std::io::stderr().is_terminal()),
            Style::Plain => Some(false),
        };
        let thread = live.and_then(|live| {
            let done = done.clone();
            std::thread::Builder::new()
                .name("bench-progress".into())
                .spawn(move || draw(live, users, from, to, &recorder, &done))
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

fn draw(
    live: bool,
    users: usize,
    from: Instant,
    to: Instant,
    recorder: &Recorder,
    done: &AtomicBool,
) {
    let bar = live.then(|| {
        let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        b
    });
    let every = if live {
        Duration::from_secs(1)
    } else {
        PLAIN_EVERY
    };
    let mut last = (Instant::now(), recorder.progress());
    let mut next = last.0 + every;
    while !done.load(Ordering::Acquire) {
        std::thread::sleep(TICK);
        let now = Instant::now();
        if now < next {
            continue;
        }
        next += every;
        let p = recorder.progress();
        let tps = (p.ok - last.1.ok) as f64 / now.duration_since(last.0).as_secs_f64();
        last = (now, p);
        let phase = if now < from {
            "warm-up"
        } else if now < to {
            "running"
        } else {
            "draining"
        };
        let elapsed = now.saturating_duration_since(from).as_secs();
        let total = to.saturating_duration_since(from).as_secs();
        let line = format!(
            "{phase:<8} {elapsed:>4}/{total}s  users {users}  tps {tps:>9.0}  done {}  errors {}",
            p.ok, p.failed
        );
        match &bar {
            Some(b) => {
                b.set_message(line);
                b.tick();
            }
            None => eprintln!("{line}"),
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}

//! The wait-event sampler: `pg_stat_activity` every [`WAIT_SAMPLE_EVERY`] during the run, on
//! a connection of its own.
//!
//! # Implementation details
//!
//! The connection may end at any time: a restart, `pg_terminate_backend`, a server that goes
//! down. Before each sample the connection is checked for an end the server announced while
//! it was idle (`Client::check_idle`, as the runner's `replace_if_ended` does for its users),
//! so a terminated backend costs no failed query. A lost connection opens a *gap*; the next
//! sample time reconnects, and each failed try doubles the pause before the next one, from
//! [`WAIT_SAMPLE_EVERY`] up to [`RECONNECT_PAUSE_MAX`]: a down server sees one connection
//! every 5 s at most from the sampler, not one per sample time. The first sample after it
//! closes the gap. Every wait (a connect, a session setting, a sample) gives way to the
//! run's `stop`, so neither the run's end nor its result waits on the sampler; a gap still
//! open then lasts to the end of the sampling.
//!
//! A server that refuses the sampler for its connection limit (53300: `max_connections`, a
//! role's or a database's `CONNECTION LIMIT`) is full of the users' connections, and the
//! next one to leave is a user's, which its user will want back: the sampler stops trying
//! for the rest of the run rather than take it (it did, and the user's replacement was
//! refused and its transactions failed `client:no-connection`). The result says so.
//!
//! The gaps are kept in the result ([`RunContext::wait_gaps`](super::RunContext::wait_gaps),
//! with the count of missing samples) and said in one warning, whatever their number.

use std::time::{Duration, Instant};

use slipstream_pg::Client;

use super::{
    Capture, NO_IDLE_TIMEOUT, QUERY_TIMEOUT, WAIT_SAMPLE_EVERY, WAITS, WaitEvent, WaitGap,
};

/// The longest pause between two reconnects of the sampler to a server that refuses them.
/// Long enough that a down server is not hammered, short enough that a server back after a
/// restart loses at most this much more of the sampling.
pub const RECONNECT_PAUSE_MAX: Duration = Duration::from_secs(5);

/// The sampler's session shows as this in `pg_stat_activity.application_name`, so a DBA (or
/// a test) can tell it from the users' sessions.
const SAMPLER_SESSION: &str = "SELECT pg_catalog.set_config('application_name', \
     'slipstream-bench wait-event sampler', false)";

/// At most this many periods are listed in the warning; the result keeps them all.
const GAPS_LISTED: usize = 5;

/// A period without samples, still open.
struct Open {
    /// The last sample before it (`None`: none was taken yet).
    after: Option<Instant>,
    reconnects_tried: u32,
    why: String,
}

impl Capture {
    /// Samples wait events every [`WAIT_SAMPLE_EVERY`] until `stop` completes (the window's
    /// end), on a connection of its own, reconnecting when it ends (see the module's
    /// implementation details). The periods without samples are in
    /// [`RunContext::wait_gaps`](super::RunContext::wait_gaps) and one warning.
    ///
    /// ```
    /// # #[tokio::main] async fn main() {
    /// use std::time::Duration;
    /// let url = "postgres://postgres@127.0.0.1:1/postgres"; // no server here
    /// let mut capture = slipstream_bench::context::before(url, "w").await;
    /// capture.sample_waits(tokio::time::sleep(Duration::from_millis(100))).await;
    /// let ctx = capture.after().await;
    /// assert_eq!(ctx.wait_samples, 0);
    /// assert!(ctx.wait_events.is_empty());
    /// assert_eq!(ctx.wait_gaps[0].to_s, None); // no sample from the start to the end
    /// # }
    /// ```
    pub async fn sample_waits<S: std::future::Future>(&mut self, stop: S) {
        tokio::pin!(stop);
        let start = Instant::now();
        let mut client: Option<Client> = None;
        let mut last: Option<Instant> = None;
        let mut open: Option<Open> = None;
        let mut pause = WAIT_SAMPLE_EVERY;
        let mut next_try = start;
        let mut setup_warning = None;
        // Refused at a connection limit: no more tries (see the module's doc).
        let mut gave_way = false;
        let mut tick = tokio::time::interval(WAIT_SAMPLE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while (self.ctx.wait_samples as usize) < self.samples_max {
            tokio::select! {
                _ = &mut stop => break,
                _ = tick.tick() => {}
            }
            if let Some(c) = client.as_mut()
                && let Err(e) = c.check_idle()
            {
                lose(&mut open, last, e.to_string());
                client = None;
            }
            let c = match client.as_mut() {
                Some(c) => c,
                None => {
                    if gave_way || Instant::now() < next_try {
                        continue;
                    }
                    let began = Instant::now();
                    let opened = tokio::select! {
                        o = connect(&self.url, &mut setup_warning) => o,
                        _ = &mut stop => {
                            cut_short(&mut open, last, began, "connecting");
                            break;
                        }
                    };
                    if let Some(o) = open.as_mut() {
                        o.reconnects_tried += 1;
                    }
                    match opened {
                        Ok(c) => {
                            pause = WAIT_SAMPLE_EVERY;
                            client.insert(c)
                        }
                        Err(Refused { why, at_limit }) => {
                            lose(&mut open, last, why);
                            gave_way = at_limit;
                            next_try = Instant::now() + pause;
                            pause = (pause * 2).min(RECONNECT_PAUSE_MAX);
                            continue;
                        }
                    }
                }
            };
            let began = Instant::now();
            let got = tokio::select! {
                got = sample(c) => got,
                _ = &mut stop => {
                    cut_short(&mut open, last, began, "a sample");
                    break;
                }
            };
            match got {
                Ok(v) => {
                    let now = Instant::now();
                    if let Some(o) = open.take() {
                        self.close(start, o, Some(now));
                    }
                    last = Some(now);
                    self.ctx.wait_samples += 1;
                    for w in v {
                        *self
                            .waits
                            .entry((w.state, w.wait_event_type, w.wait_event))
                            .or_default() += w.count;
                    }
                }
                Err(e) => {
                    // A timed-out sample still owes its reply, and every later one would wait
                    // behind it: a new connection starts clean.
                    if e.ended {
                        client = None;
                    }
                    lose(&mut open, last, e.why);
                }
            }
        }
        if let Some(o) = open.take() {
            self.close(start, o, None);
        }
        self.ctx.warnings.extend(setup_warning);
        // The loop ends at the limit only right after a sample: the rest of the window has
        // none, and the counts would otherwise read as the whole window's.
        if self.ctx.wait_samples as usize >= self.samples_max
            && let Some(l) = last
        {
            let t = secs(l - start);
            self.ctx.warnings.push(format!(
                "the wait-event sampler stopped at its limit of {} samples, {t:.1} s into the sampling (the window's): the wait events are those of its first {t:.1} s, not of the rest of it",
                self.samples_max
            ));
        }
        if let Some(w) = gaps_warning(&self.ctx.wait_gaps, self.ctx.wait_samples, gave_way) {
            self.ctx.warnings.push(w);
        }
    }

    /// Keeps the period `o`, ended by the sample at `to` (`None`: by the end of the sampling).
    fn close(&mut self, start: Instant, o: Open, to: Option<Instant>) {
        let from = o.after.unwrap_or(start);
        let end = to.unwrap_or_else(Instant::now);
        let spans =
            end.saturating_duration_since(from).as_secs_f64() / WAIT_SAMPLE_EVERY.as_secs_f64();
        // Sample times strictly between the samples around the period; without a sample
        // before it, the start's own time is missing too.
        let missed = match (o.after, to) {
            (Some(_), Some(_)) => spans.round() - 1.0,
            (None, Some(_)) => spans.round(),
            (Some(_), None) => spans.floor(),
            (None, None) => spans.floor() + 1.0,
        }
        .max(0.0) as u32;
        self.ctx.wait_samples_missed += missed;
        self.ctx.wait_gaps.push(WaitGap {
            from_s: secs(from - start),
            to_s: to.map(|t| secs(t - start)),
            missed,
            reconnects_tried: o.reconnects_tried,
            why: o.why,
        });
    }
}

/// Opens a period without samples after `last`, unless one is open: its first error is
/// what ended the sampling, the later ones only what kept it down.
fn lose(open: &mut Option<Open>, last: Option<Instant>, why: String) {
    open.get_or_insert(Open {
        after: last,
        reconnects_tried: 0,
        why,
    });
}

/// The end of the sampling cut short `what`, which began at `began`. One that waited longer
/// than a sample interval is a server not answering, and the sample times since the last
/// sample are missing: without this, a connect hanging to the end left no period and no
/// warning, and the result read as a sampler that saw nothing. One cut short sooner is an
/// ordinary sample in flight, and no loss, unless no sample was taken yet: the start's own
/// sample time is then missed (a window shorter than the connect to a distant server ended
/// with no sample, no period and `wait_samples_missed` 0).
fn cut_short(open: &mut Option<Open>, last: Option<Instant>, began: Instant, what: &str) {
    let waited = began.elapsed();
    if waited >= WAIT_SAMPLE_EVERY || last.is_none() {
        lose(
            open,
            last,
            format!(
                "{what} had not been answered after {:.1} s when the sampling ended",
                waited.as_secs_f64()
            ),
        );
    }
}

/// Seconds, to the millisecond.
fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// Why a sample failed, and whether its connection is done for.
struct Failed {
    why: String,
    ended: bool,
}

/// Why the sampler could not connect, and whether the server refused it at a connection
/// limit (53300), where it gives way to the users.
struct Refused {
    why: String,
    at_limit: bool,
}

impl From<String> for Refused {
    fn from(why: String) -> Self {
        Refused {
            why,
            at_limit: false,
        }
    }
}

/// Connects the sampler and sets its session up. A setting that fails is `setup_warning`
/// (once for the run: every reconnect would say the same), not a lost connection.
async fn connect(url: &str, setup_warning: &mut Option<String>) -> Result<Client, Refused> {
    let mut c = match tokio::time::timeout(QUERY_TIMEOUT, slipstream_pg::connect(url)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            return Err(Refused {
                why: format!("could not connect: {e}"),
                at_limit: e.code() == Some(slipstream_pg::SqlState::TOO_MANY_CONNECTIONS),
            });
        }
        Err(_) => {
            return Err(format!("connecting timed out after {} s", QUERY_TIMEOUT.as_secs()).into());
        }
    };
    for (sql, what) in [
        (NO_IDLE_TIMEOUT, "turn off idle_session_timeout"),
        (SAMPLER_SESSION, "set application_name"),
    ] {
        match tokio::time::timeout(QUERY_TIMEOUT, c.query_one(sql, &[])).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) if !c.is_broken() => {
                setup_warning.get_or_insert_with(|| {
                    format!("could not {what} for the wait-event sampler: {e}")
                });
            }
            Ok(Err(e)) => return Err(e.to_string().into()),
            Err(_) => {
                return Err(format!(
                    "setting up the session timed out after {} s",
                    QUERY_TIMEOUT.as_secs()
                )
                .into());
            }
        }
    }
    Ok(c)
}

/// One sample: the wait states of this database's other client backends.
async fn sample(c: &mut Client) -> Result<Vec<WaitEvent>, Failed> {
    let row = match tokio::time::timeout(QUERY_TIMEOUT, c.query_one(WAITS, &[])).await {
        Ok(Ok(row)) => row,
        Ok(Err(e)) => {
            return Err(Failed {
                why: e.to_string(),
                ended: c.is_broken(),
            });
        }
        Err(_) => {
            return Err(Failed {
                why: format!("a sample timed out after {} s", QUERY_TIMEOUT.as_secs()),
                ended: true,
            });
        }
    };
    let failed = |why: String| Failed { why, ended: false };
    let text = row
        .get::<_, Option<String>>(0)
        .map_err(|e| failed(e.to_string()))?;
    match text {
        Some(t) => serde_json::from_str(&t).map_err(|e| failed(e.to_string())),
        None => Ok(Vec::new()),
    }
}

/// The one warning for all the periods without samples; `gave_way`: the last one lasted to
/// the end because the sampler stopped trying at a connection limit.
fn gaps_warning(gaps: &[WaitGap], samples: u32, gave_way: bool) -> Option<String> {
    if gaps.is_empty() {
        return None;
    }
    let missed: u32 = gaps.iter().map(|g| g.missed).sum();
    let mut listed: Vec<String> = gaps
        .iter()
        .take(GAPS_LISTED)
        .map(|g| match g.to_s {
            Some(to) => format!("{:.1} s to {to:.1} s ({})", g.from_s, g.why),
            None => format!("{:.1} s to the end ({})", g.from_s, g.why),
        })
        .collect();
    if gaps.len() > GAPS_LISTED {
        listed.push(format!("and {} more", gaps.len() - GAPS_LISTED));
    }
    let retries = if gave_way {
        "; the server refused it at its connection limit (53300), so it stopped trying for the rest of the run rather than take a connection a user would need back (raise max_connections or the role's CONNECTION LIMIT by one for the samples)".to_string()
    } else {
        format!(
            "; it reconnected with a growing pause (at most {} s)",
            RECONNECT_PAUSE_MAX.as_secs()
        )
    };
    Some(format!(
        "the wait-event sampler lost its connection {} time{} and has no samples for {missed} of its {} sample times (seconds from the start of the sampling, the window's): {}{retries}, and the wait events are those of the {samples} samples taken",
        gaps.len(),
        if gaps.len() == 1 { "" } else { "s" },
        missed + samples,
        listed.join("; "),
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    /// Promise (docs/bench.md: at most 600 samples, the window's first 5 minutes): the waits
    /// of a window longer than the sampling are not passed off as the window's; the result
    /// says the sampling stopped, and when.
    ///
    /// Steps: a real server; the sampler with its limit at 3 samples (600 in a run) for 3 s.
    /// It stops at its 3rd sample, about 1 s in; the result must say so in a warning.
    ///
    /// Before the fix: nothing was said: "active backends' waits over 600 samples" read as
    /// the waits of a whole 30-minute window, of which it saw the first 5 minutes.
    #[test]
    fn a_sampling_stopped_at_its_limit_says_so() {
        let cluster = slipstream_testkit::Cluster::start().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let ctx = rt.block_on(async {
            let mut capture = crate::context::before(&cluster.url(), "w").await;
            capture.samples_max = 3;
            capture
                .sample_waits(tokio::time::sleep(Duration::from_secs(3)))
                .await;
            capture.after().await
        });
        assert_eq!(ctx.wait_samples, 3, "{:?}", ctx.warnings);
        assert!(
            ctx.warnings
                .iter()
                .any(|w| w.contains("wait-event sampler") && w.contains("limit")),
            "nothing says the sampling stopped at its limit: {:?}",
            ctx.warnings
        );
    }
}

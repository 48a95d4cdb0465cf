//! `proxy`: what the testkit's delay proxy adds to a round trip beyond the delay it is asked
//! for. Every experiment that injects latency reports figures taken through it.

use std::time::Duration;

use crate::{Context, ExperimentResult, Series, Table};

pub(crate) const TITLE: &str = "The delay proxy's own added round trip";

/// The RTTs the pipelining experiment injects.
const RTTS_US: [u64; 4] = [0, 200, 1000, 5000];

pub(crate) fn run(ctx: &Context) -> anyhow::Result<ExperimentResult> {
    let samples = if ctx.quick { 200 } else { 2000 };
    let mut r = ExperimentResult::new("proxy", TITLE, ctx.quick);
    r.param("samples_per_rtt", samples);
    r.param("message_bytes", 64);
    let mut table = Table::new(&[
        "configured RTT us",
        "direct p50 us",
        "proxied p50 us",
        "added by the proxy us",
    ]);
    let mut points = Vec::new();
    for rtt in RTTS_US {
        let o = slipstream_testkit::measure_overhead(Duration::from_micros(rtt), samples)?;
        table.row(vec![
            format!("{rtt}"),
            format!("{:.1}", o.direct_us),
            format!("{:.1}", o.proxied_us),
            format!("{:.1}", o.added_us),
        ]);
        points.push((rtt as f64, o.added_us));
        r.ratios
            .insert(format!("proxy_added_us_at_{rtt}us"), o.added_us);
    }
    r.table = table;
    r.series = vec![Series {
        name: "added by the proxy".into(),
        x_label: "configured RTT (us)".into(),
        y_label: "us beyond the configured RTT".into(),
        points,
    }];
    // No database: an echo server on loopback, on both sides of the proxy.
    r.environment = slipstream_bench::capture_environment("", None);
    r.environment.database = "none (an echo server on loopback)".into();
    r.notes.push(
        "64-byte ping-pong against an echo server on loopback; added = proxied - direct - configured (median). \
         It includes two thread hand-offs per direction and timer overshoot."
            .into(),
    );
    Ok(r)
}

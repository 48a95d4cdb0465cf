//! `connect`: open and close fresh connections (article 001's ConnectionPoolTest, without a
//! pool), slipstream-pg and tokio-postgres interleaved.

use anyhow::Context as _;

use super::{Stopwatch, runtime, without_tls};
use crate::{
    Context, ExperimentResult, Series, Summary, Table, environment, noise_warning, paired_ratios,
};

pub(crate) const TITLE: &str = "Open and close a fresh connection";

/// The article's count: 100 connections.
const CONNECTIONS: usize = 100;

pub(crate) fn run(ctx: &Context) -> anyhow::Result<ExperimentResult> {
    let rounds = if ctx.quick { 1 } else { 5 };
    let n = CONNECTIONS * rounds;
    let url = without_tls(&ctx.url);
    let mut r = ExperimentResult::new("connect", TITLE, ctx.quick);
    r.param("connections", n);
    r.param("tls", false);

    let rt = runtime()?;
    let (slip, tp, server_version) = rt.block_on(async {
        let probe = slipstream_pg::connect(&url)
            .await
            .context("connecting to the database")?;
        let server_version = probe.parameter("server_version").map(str::to_string);
        probe.close().await?;
        let tp_config: tokio_postgres::Config =
            url.parse().context("tokio-postgres cannot parse the URL")?;
        let (mut slip, mut tp) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            let sw = Stopwatch::start();
            let c = slipstream_pg::connect(&url).await?;
            c.close().await?;
            slip.push(sw.stop());

            let sw = Stopwatch::start();
            let (client, connection) = tp_config.connect(tokio_postgres::NoTls).await?;
            let task = tokio::spawn(connection);
            drop(client); // tokio-postgres sends Terminate when the client is dropped
            task.await??;
            tp.push(sw.stop());
        }
        anyhow::Ok((slip, tp, server_version))
    })?;
    r.environment = environment::capture(&ctx.url, server_version);

    let ms = |t: &[super::Timing]| {
        Summary::of(
            &t.iter()
                .map(|t| t.wall.as_secs_f64() * 1e3)
                .collect::<Vec<_>>(),
        )
    };
    let cpu = |t: &[super::Timing]| {
        Summary::of(
            &t.iter()
                .map(|t| t.cpu.as_secs_f64() * 1e3)
                .collect::<Vec<_>>(),
        )
    };
    let (s_ms, t_ms, s_cpu, t_cpu) = (ms(&slip), ms(&tp), cpu(&slip), cpu(&tp));
    let walls = |t: &[super::Timing]| t.iter().map(|t| t.wall.as_secs_f64()).collect::<Vec<_>>();
    let cpus = |t: &[super::Timing]| t.iter().map(|t| t.cpu.as_secs_f64()).collect::<Vec<_>>();
    let time_ratio = paired_ratios(&walls(&slip), &walls(&tp));
    let cpu_ratio = paired_ratios(&cpus(&slip), &cpus(&tp));
    let mut table = Table::new(&[
        "client",
        "ms per open+close",
        "p50 ms",
        "p99 ms",
        "min … max ms",
        "client CPU ms",
        "tokio-postgres time / this",
        "tokio-postgres CPU / this",
    ]);
    for (name, w, c, tr, cr) in [
        (
            "slipstream-pg",
            &s_ms,
            &s_cpu,
            time_ratio.p50,
            cpu_ratio.p50,
        ),
        ("tokio-postgres", &t_ms, &t_cpu, 1.0, 1.0),
    ] {
        table.row(vec![
            name.into(),
            w.mean_sd(3),
            format!("{:.3}", w.p50),
            format!("{:.3}", w.p99),
            w.range(3),
            format!("{:.3}", c.mean),
            format!("{tr:.2}x"),
            format!("{cr:.2}x"),
        ]);
    }
    r.table = table;
    r.ratios.insert(
        "connect_time_tokio_postgres_over_slipstream".into(),
        time_ratio.p50,
    );
    r.ratios.insert(
        "connect_cpu_tokio_postgres_over_slipstream".into(),
        cpu_ratio.p50,
    );
    let series = |name: &str, t: &[super::Timing]| Series {
        name: name.into(),
        x_label: "connection #".into(),
        y_label: "ms per open+close".into(),
        points: t
            .iter()
            .enumerate()
            .map(|(i, t)| (i as f64 + 1.0, t.wall.as_secs_f64() * 1e3))
            .collect(),
    };
    r.series = vec![
        series("slipstream-pg", &slip),
        series("tokio-postgres", &tp),
    ];
    r.notes.push("both clients without TLS; ratios are medians of per-connection ratios (interleaved); above 1 means slipstream-pg is faster".into());
    r.notes
        .push("a pooled row joins this table with slipstream-pool (issue 5)".into());
    r.notes.extend(noise_warning("slipstream-pg", &s_ms));
    Ok(r)
}

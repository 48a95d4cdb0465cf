//! A short Order Entry run for the demo: loads the schema fresh and reports each transaction
//! type.

use std::time::Duration;

use crate::{Context, ExperimentResult};
use slipstream_bench::report::{self, Labeled};
use slipstream_bench::{self as bench, RunConfig, order_entry};

pub(crate) const TITLE: &str =
    "Order Entry (Swingbench SOE): per-transaction throughput and latency";

pub(crate) fn run(ctx: &Context) -> anyhow::Result<ExperimentResult> {
    let mut result = ExperimentResult::new("order-entry", TITLE, ctx.quick);
    let (scale, users, secs, warmup) = if ctx.quick {
        (0.01, 4, 5, 1)
    } else {
        (0.1, 8, 60, 10)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // Loaded fresh every run, as `pgbench -i` before a run: Order Entry's transactions add
    // orders, customers and logons and move stock, so a schema kept from earlier runs made
    // each run start from other data than the last (and than the scale says).
    let r = rt.block_on(order_entry::setup(&ctx.url, scale, |_| {}))?;
    result.notes.push(format!(
        "loaded fresh at scale {scale} in {:.1} s ({} rows), so every run starts from the same data",
        r.total.as_secs_f64(),
        r.rows.values().sum::<u64>()
    ));
    let mut config = RunConfig::new(Some(ctx.url.clone()));
    config.users = users;
    config.duration = Duration::from_secs(secs);
    config.warmup = Duration::from_secs(warmup);
    let run = rt.block_on(bench::run(
        &order_entry::workload(),
        &config,
        std::future::pending::<()>(),
    ))?;
    result.param("scale", scale);
    result.param("users", users);
    result.param("seconds", secs);
    result.notes.extend(report::describe(&run));
    let runs = [Labeled {
        label: "order-entry".into(),
        run,
    }];
    result.table = report::table(&runs);
    result.series = report::tps_series(&runs);
    Ok(result)
}

//! `connect`: article 001's ConnectionPoolTest. Open and close 100 connections fresh
//! (slipstream-pg and tokio-postgres interleaved, with trust and with SCRAM authentication),
//! and through slipstream-pool.

use anyhow::Context as _;

use super::client_config::{slipstream_config, tokio_postgres_config};
use super::{Stopwatch, Timing, runtime, without_tls};
use crate::{Context, ExperimentResult, Series, Summary, Table, noise_warning, paired_ratios};

pub(crate) const TITLE: &str = "Open and close a connection: fresh and pooled";

/// The article's count: 100 connections.
const CONNECTIONS: usize = 100;
const SCRAM_USER: &str = "slipstream_scram";
const SCRAM_PASSWORD: &str = "lab-secret";

/// Fresh open+close timings of both clients against one server.
struct Fresh {
    slip: Vec<Timing>,
    tp: Vec<Timing>,
}

async fn fresh(url: &str, n: usize) -> anyhow::Result<Fresh> {
    // Both clients parse the URL here, outside the timer: what is compared is opening and
    // closing a connection, and a pool or an application parses its settings once. Parsed
    // inside for one client only, the parse counted against that client alone.
    // Both read the same `PG*` variables for what the URL leaves unset, as
    // `slipstream_pg::connect` does: see `client_config`.
    let slip_config = slipstream_config(url)?;
    let tp_config = tokio_postgres_config(url)?;
    let (mut slip, mut tp) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        for side in order(i) {
            match side {
                Side::Slipstream => {
                    let sw = Stopwatch::start();
                    let c = slipstream_pg::connect_config(&slip_config).await?;
                    c.close().await?;
                    slip.push(sw.stop());
                }
                Side::TokioPostgres => {
                    let sw = Stopwatch::start();
                    let (client, connection) = tp_config.connect(tokio_postgres::NoTls).await?;
                    let task = tokio::spawn(connection);
                    drop(client); // tokio-postgres sends Terminate when the client is dropped
                    task.await??;
                    tp.push(sw.stop());
                }
            }
        }
    }
    Ok(Fresh { slip, tp })
}

/// The clients that open fresh connections here.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Side {
    Slipstream,
    TokioPostgres,
}

/// Who opens first in pair `i`: each client every other pair ([`super::round_order`]), so
/// neither always connects right after the other's backend exited (the postmaster reaping
/// it, the freed memory) nor always meets the machine first.
fn order(i: usize) -> Vec<Side> {
    super::round_order(i, &[Side::Slipstream, Side::TokioPostgres])
}

/// "Open" and "close" through slipstream-pool: borrow a connection and give it back, as the
/// article's pooled `Open()`/`Close()` do.
async fn pooled(url: &str, n: usize) -> anyhow::Result<Vec<Timing>> {
    // The settings the fresh slipstream-pg connections used, environment included: the pooled
    // row is compared with them (fresh_over_pooled).
    let pool =
        slipstream_pool::Pool::builder(slipstream_pool::PgManager::new(slipstream_config(url)?))
            .max_size(1)
            .min_size(1)
            .build_ready()
            .await?;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let sw = Stopwatch::start();
        let conn = pool.get().await?;
        drop(conn);
        times.push(sw.stop());
    }
    Ok(times)
}

/// A private cluster that asks for SCRAM-SHA-256 over TCP, and a URL with the password: the
/// server under test may not have a SCRAM user, and SCRAM's cost is the client's hashing.
fn scram_cluster() -> anyhow::Result<(slipstream_testkit::Cluster, String)> {
    let cluster = slipstream_testkit::Cluster::builder()
        .hba("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        .setting("password_encryption", "scram-sha-256")
        .start()?;
    cluster.psql(&format!(
        "CREATE ROLE {SCRAM_USER} LOGIN PASSWORD '{SCRAM_PASSWORD}'"
    ))?;
    let url = without_tls(&cluster.url_for(SCRAM_USER, Some(SCRAM_PASSWORD)));
    Ok((cluster, url))
}

pub(crate) fn run(ctx: &Context) -> anyhow::Result<ExperimentResult> {
    let rounds = if ctx.quick { 1 } else { 5 };
    let n = CONNECTIONS * rounds;
    let url = without_tls(&ctx.url);
    let mut r = ExperimentResult::new("connect", TITLE, ctx.quick);
    r.param("connections", n);
    r.param("tls", false);

    let scram = scram_cluster();
    let rt = runtime()?;
    let (trust, scram_fresh, pool, server_version) = rt.block_on(async {
        let probe = slipstream_pg::connect(&url)
            .await
            .context("connecting to the database")?;
        let server_version = probe.parameter("server_version").map(str::to_string);
        probe.close().await?;
        let trust = fresh(&url, n).await?;
        let scram_fresh = match &scram {
            Ok((_, scram_url)) => Some(fresh(scram_url, n).await?),
            Err(_) => None,
        };
        let pool = pooled(&url, n).await?;
        anyhow::Ok((trust, scram_fresh, pool, server_version))
    })?;
    r.environment = slipstream_bench::capture_environment(&ctx.url, server_version);

    let ms = |t: &[Timing], f: fn(&Timing) -> f64| {
        Summary::of(&t.iter().map(|t| f(t) * 1e3).collect::<Vec<_>>())
    };
    let wall = |t: &Timing| t.wall.as_secs_f64();
    let cpu = |t: &Timing| t.cpu.as_secs_f64();
    let secs = |t: &[Timing], f: fn(&Timing) -> f64| t.iter().map(f).collect::<Vec<_>>();
    let mut table = Table::new(&[
        "client",
        "auth",
        "ms per open+close",
        "p50 ms",
        "p99 ms",
        "min … max ms",
        "client CPU ms",
        "tokio-postgres time / this",
        "tokio-postgres CPU / this",
    ]);
    let mut add = |name: &str, auth: &str, t: &[Timing], ratios: Option<(f64, f64)>| {
        let (w, c) = (ms(t, wall), ms(t, cpu));
        table.row(vec![
            name.into(),
            auth.into(),
            w.mean_sd(3),
            format!("{:.3}", w.p50),
            format!("{:.3}", w.p99),
            w.range(3),
            format!("{:.3}", c.mean),
            ratios.map_or("—".into(), |(t, _)| format!("{t:.2}x")),
            ratios.map_or("—".into(), |(_, c)| format!("{c:.2}x")),
        ]);
    };
    let mut versus = |auth: &str, f: &Fresh| {
        let time = paired_ratios(&secs(&f.slip, wall), &secs(&f.tp, wall)).p50;
        let cpu_ratio = paired_ratios(&secs(&f.slip, cpu), &secs(&f.tp, cpu)).p50;
        add("slipstream-pg", auth, &f.slip, Some((time, cpu_ratio)));
        add("tokio-postgres", auth, &f.tp, Some((1.0, 1.0)));
        (time, cpu_ratio)
    };
    let (trust_time, trust_cpu) = versus("as configured", &trust);
    let scram_ratios = scram_fresh.as_ref().map(|f| versus("SCRAM", f));
    add("slipstream-pool + slipstream-pg, pooled", "—", &pool, None);
    r.table = table;

    r.ratios.insert(
        "connect_time_tokio_postgres_over_slipstream".into(),
        trust_time,
    );
    r.ratios.insert(
        "connect_cpu_tokio_postgres_over_slipstream".into(),
        trust_cpu,
    );
    if let Some((time, cpu_ratio)) = scram_ratios {
        r.ratios
            .insert("scram_time_tokio_postgres_over_slipstream".into(), time);
        r.ratios
            .insert("scram_cpu_tokio_postgres_over_slipstream".into(), cpu_ratio);
    }
    let fresh_ms = ms(&trust.slip, wall).p50;
    let pooled_ms = ms(&pool, wall).p50;
    r.ratios
        .insert("fresh_over_pooled".into(), fresh_ms / pooled_ms.max(1e-9));

    let series = |name: &str, t: &[Timing]| Series {
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
        series("slipstream-pg", &trust.slip),
        series("tokio-postgres", &trust.tp),
    ];
    r.notes.push(format!(
        "article 001: 100 opens+closes took 7.83 s without a pool, 0.13 s with one (60x); here fresh/pooled = {:.0}x (the two medians: the pooled borrows run after the fresh connections, not paired)",
        fresh_ms / pooled_ms.max(1e-9)
    ));
    r.notes.push("both clients without TLS; ratios are medians of per-connection ratios (interleaved, each client first in every other pair); above 1 means slipstream-pg is faster".into());
    r.notes.push("'as configured' uses the database's own authentication (trust for the embedded one); SCRAM rows use a private cluster the lab starts with scram-sha-256 over TCP".into());
    r.notes.push("pooled: borrow from and return to a slipstream-pool of one connection (PgManager), the article's pooled Open()/Close()".into());
    if let Err(e) = &scram {
        r.notes.push(format!(
            "SCRAM rows skipped: no private cluster could start ({e:#})"
        ));
    }
    r.notes.extend(noise_warning(
        "slipstream-pg",
        &ms(&trust.slip, wall),
        ctx.quick,
    ));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::super::client_config::tokio_postgres_config_with;
    use super::*;

    /// Both clients connect with the same settings. Steps: a cluster asking for SCRAM over
    /// TCP; a URL naming host, port and database only, the user and password given as PGUSER
    /// and PGPASSWORD (what slipstream-pg's `apply_env` reads); tokio-postgres connects with
    /// its configuration. Before the fix tokio-postgres read no environment: it could not
    /// connect ("user missing"), or with PGUSER set in the shell, connected as another user.
    #[test]
    fn tokio_postgres_applies_the_pg_environment_slipstream_pg_applies() {
        let (cluster, _) = scram_cluster().unwrap();
        let url = format!(
            "host=127.0.0.1 port={} dbname=postgres sslmode=disable",
            cluster.port()
        );
        let env = |name: &str| match name {
            "PGUSER" => Some(SCRAM_USER.to_string()),
            "PGPASSWORD" => Some(SCRAM_PASSWORD.to_string()),
            // The URL's sslmode wins, as in libpq.
            "PGSSLMODE" => Some("require".to_string()),
            _ => None,
        };
        let config = tokio_postgres_config_with(&url, env).unwrap();
        let user: String = runtime()
            .unwrap()
            .block_on(async {
                let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
                let task = tokio::spawn(connection);
                let user = client
                    .query_one("SELECT current_user::text", &[])
                    .await?
                    .get(0);
                drop(client);
                task.await??;
                anyhow::Ok(user)
            })
            .unwrap();
        assert_eq!(user, SCRAM_USER);
    }

    /// docs/lab.md: the clients run "in alternating short rounds (or alternating
    /// connections)". Steps: the order of the clients in the first pairs. Before the fix
    /// slipstream-pg opened first in every pair, always right after tokio-postgres's
    /// connection had closed.
    #[test]
    fn each_client_opens_first_every_other_pair() {
        let firsts: Vec<Side> = (0..4).map(|i| order(i)[0]).collect();
        assert_eq!(
            firsts,
            [
                Side::Slipstream,
                Side::TokioPostgres,
                Side::Slipstream,
                Side::TokioPostgres
            ]
        );
        for i in 0..4 {
            let mut sides = order(i);
            sides.dedup();
            assert_eq!(sides.len(), 2, "pair {i}: {sides:?}");
        }
    }
}

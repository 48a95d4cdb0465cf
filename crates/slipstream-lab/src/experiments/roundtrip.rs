//! `roundtrip`: a prepared single-row SELECT by primary key, one at a time on one connection:
//! slipstream-pg, tokio-postgres and (if installed) pgbench, side by side.

use anyhow::Context as _;

use super::{Stopwatch, Timing, runtime};
use crate::placement;
use crate::{Context, ExperimentResult, Series, Summary, Table, noise_warning, paired_ratios};

pub(crate) const TITLE: &str = "Prepared single-row SELECT round trip";

/// Statements per round. Rounds are short and alternate between the clients so that both sides
/// of a pair see the same machine state: on a shared VM, speed drifts over tens of milliseconds.
const STATEMENTS: usize = 100;
/// Rows in the lookup table.
const TABLE_ROWS: i32 = 1000;
const QUERY: &str = "SELECT data FROM slipstream_lab_roundtrip WHERE id = $1";

/// Measurements of both clients under one placement.
struct Measured {
    placement: &'static str,
    slip: Vec<Timing>,
    tp: Vec<Timing>,
}

pub(crate) fn run(ctx: &Context) -> anyhow::Result<ExperimentResult> {
    let rounds = if ctx.quick { 50 } else { 500 };
    let mut r = ExperimentResult::new("roundtrip", TITLE, ctx.quick);
    r.param("statements_per_round", STATEMENTS);
    r.param("rounds", rounds);
    r.param("query", QUERY);

    let rt = runtime()?;
    let (measured, server_version, pin_note) = rt.block_on(async {
        let mut slip = slipstream_pg::connect(&ctx.url).await.context("connecting to the database")?;
        slip.batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS slipstream_lab_roundtrip (id int PRIMARY KEY, data text NOT NULL);
             INSERT INTO slipstream_lab_roundtrip SELECT i, md5(i::text) FROM generate_series(1, {TABLE_ROWS}) i
             ON CONFLICT DO NOTHING;
             ANALYZE slipstream_lab_roundtrip;"
        ))
        .await?;
        let server_version = slip.parameter("server_version").map(str::to_string);
        let (tp, connection) = tokio_postgres::connect(&super::without_tls(&ctx.url), tokio_postgres::NoTls)
            .await
            .context("tokio-postgres could not connect")?;
        tokio::spawn(connection);
        let tp_pid: i32 = tp.query_one("SELECT pg_backend_pid()", &[]).await?.get(0);
        let backends = [slip.backend_pid(), tp_pid];

        let slip_stmt = slip.prepare(QUERY).await?;
        let tp_stmt = tp.prepare(QUERY).await?;
        // Warm both (plan cache, buffers, branch predictors) before measuring.
        slip_round(&mut slip, &slip_stmt).await?;
        tp_round(&tp, &tp_stmt).await?;

        let mut plan: Vec<Option<placement::Placement>> = Vec::new();
        let mut pin_note = None;
        if placement::is_local(&ctx.url) {
            plan.extend(placement::placements().into_iter().map(Some));
        } else {
            pin_note = Some("the server is not local: client and backends were left where the kernel put them".to_string());
        }
        if plan.is_empty() {
            plan.push(None);
        }
        let mut measured = Vec::new();
        for p in plan {
            if let Some(p) = p
                && let Err(e) = placement::apply(p, &backends) {
                    placement::release(&backends);
                    pin_note = Some(format!("could not fix CPU placement ({e}); measured unpinned"));
                    measured.clear();
                    measured.push(measure(&mut slip, &slip_stmt, &tp, &tp_stmt, rounds, "unpinned").await?);
                    break;
                }
            let name = p.map_or("unpinned", |p| p.name);
            measured.push(measure(&mut slip, &slip_stmt, &tp, &tp_stmt, rounds, name).await?);
        }
        placement::release(&backends);
        anyhow::Ok((measured, server_version, pin_note))
    })?;
    r.environment = slipstream_bench::capture_environment(&ctx.url, server_version);

    let per_stmt = |t: &[Timing], f: fn(&Timing) -> f64| {
        Summary::of(
            &t.iter()
                .map(|x| f(x) * 1e6 / STATEMENTS as f64)
                .collect::<Vec<_>>(),
        )
    };
    let wall = |t: &Timing| t.wall.as_secs_f64();
    let cpu = |t: &Timing| t.cpu.as_secs_f64();
    let values = |t: &[Timing], f: fn(&Timing) -> f64| t.iter().map(f).collect::<Vec<_>>();

    let mut table = Table::new(&[
        "placement",
        "client",
        "statements/s",
        "us/statement",
        "p50 us",
        "min … max us",
        "client CPU us/stmt",
        "tokio-postgres time / this",
        "tokio-postgres CPU / this",
    ]);
    for m in &measured {
        let (s_us, t_us, s_cpu, t_cpu) = (
            per_stmt(&m.slip, wall),
            per_stmt(&m.tp, wall),
            per_stmt(&m.slip, cpu),
            per_stmt(&m.tp, cpu),
        );
        let time_ratio = paired_ratios(&values(&m.slip, wall), &values(&m.tp, wall));
        let cpu_ratio = paired_ratios(&values(&m.slip, cpu), &values(&m.tp, cpu));
        for (name, w, c, tr, cr) in [
            (
                "slipstream-pg",
                &s_us,
                &s_cpu,
                time_ratio.p50,
                cpu_ratio.p50,
            ),
            ("tokio-postgres", &t_us, &t_cpu, 1.0, 1.0),
        ] {
            table.row(vec![
                m.placement.into(),
                name.into(),
                format!("{:.0}", 1e6 / w.mean),
                w.mean_sd(1),
                format!("{:.1}", w.p50),
                w.range(1),
                format!("{:.2}", c.mean),
                format!("{tr:.2}x"),
                format!("{cr:.2}x"),
            ]);
        }
        let key = m.placement.replace(' ', "_").to_lowercase();
        r.ratios.insert(
            format!("roundtrip_time_tokio_postgres_over_slipstream_{key}"),
            time_ratio.p50,
        );
        r.ratios.insert(
            format!("roundtrip_cpu_tokio_postgres_over_slipstream_{key}"),
            cpu_ratio.p50,
        );
        r.notes.extend(noise_warning(
            &format!("slipstream-pg, {}", m.placement),
            &s_us,
        ));
        r.notes.extend(noise_warning(
            &format!("tokio-postgres, {}", m.placement),
            &t_us,
        ));
        let series = |name: &str, t: &[Timing]| Series {
            name: format!("{name}, {}", m.placement),
            x_label: "round".into(),
            y_label: "us per statement".into(),
            points: t
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    (
                        i as f64 + 1.0,
                        x.wall.as_secs_f64() * 1e6 / STATEMENTS as f64,
                    )
                })
                .collect(),
        };
        r.series.push(series("slipstream-pg", &m.slip));
        r.series.push(series("tokio-postgres", &m.tp));
    }
    match pgbench(ctx, rounds * STATEMENTS) {
        Ok((tps, cpu_us)) => {
            table.row(vec![
                "unpinned".into(),
                "pgbench (libpq, -M prepared)".into(),
                format!("{tps:.0}"),
                format!("{:.1}", 1e6 / tps),
                "-".into(),
                "-".into(),
                format!("{cpu_us:.2}"),
                "-".into(),
                "-".into(),
            ]);
            r.ratios
                .insert("roundtrip_pgbench_statements_per_s".into(), tps);
        }
        Err(e) => r.notes.push(format!("pgbench peer skipped: {e}")),
    }
    r.table = table;
    r.notes.push(
        "ratios are medians of per-round ratios (rounds of both clients interleaved); above 1 means slipstream-pg is \
         faster / uses less CPU. Both clients run on one current-thread runtime."
            .into(),
    );
    r.notes.push(
        "same CPU / cross CPU: client thread and both backends pinned. On a small VM the placement, not the client, \
         decides most of a round trip; pgbench runs unpinned, so compare it with care."
            .into(),
    );
    r.notes.extend(pin_note);
    Ok(r)
}

async fn measure(
    slip: &mut slipstream_pg::Client,
    slip_stmt: &slipstream_pg::Statement,
    tp: &tokio_postgres::Client,
    tp_stmt: &tokio_postgres::Statement,
    rounds: usize,
    placement: &'static str,
) -> anyhow::Result<Measured> {
    let (mut s, mut t) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        s.push(slip_round(slip, slip_stmt).await?);
        t.push(tp_round(tp, tp_stmt).await?);
    }
    Ok(Measured {
        placement,
        slip: s,
        tp: t,
    })
}

async fn slip_round(
    c: &mut slipstream_pg::Client,
    stmt: &slipstream_pg::Statement,
) -> anyhow::Result<Timing> {
    let sw = Stopwatch::start();
    for i in 0..STATEMENTS {
        let id = (i as i32 % TABLE_ROWS) + 1;
        let row = c.query_one(stmt, &[&id]).await?;
        let data: &str = row.get(0)?;
        std::hint::black_box(data);
    }
    Ok(sw.stop())
}

async fn tp_round(
    c: &tokio_postgres::Client,
    stmt: &tokio_postgres::Statement,
) -> anyhow::Result<Timing> {
    let sw = Stopwatch::start();
    for i in 0..STATEMENTS {
        let id = (i as i32 % TABLE_ROWS) + 1;
        let row = c.query_one(stmt, &[&id]).await?;
        let data: &str = row.try_get(0)?;
        std::hint::black_box(data);
    }
    Ok(sw.stop())
}

/// Runs pgbench with the same query; returns (statements/s, client CPU us per statement).
fn pgbench(ctx: &Context, transactions: usize) -> anyhow::Result<(f64, f64)> {
    let script = format!(
        "\\set id random(1, {TABLE_ROWS})\nSELECT data FROM slipstream_lab_roundtrip WHERE id = :id;\n"
    );
    let args: Vec<String> = ["-M", "prepared", "-c", "1", "-j", "1", "-t"]
        .iter()
        .map(|a| a.to_string())
        .chain([transactions.to_string()])
        .collect();
    let run = super::pgbench::run(&ctx.url, &script, &args)?;
    let tps = super::pgbench::tps(&run.stdout)?;
    Ok((tps, run.cpu.as_secs_f64() * 1e6 / transactions as f64))
}

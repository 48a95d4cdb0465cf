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

    let url = client_url(&ctx.url);
    r.param("tls", false);

    let rt = runtime()?;
    let (measured, server_version, pin_note) = rt.block_on(async {
        let (mut slip, tp) = connect(&url).await?;
        // One batch, one transaction: the check follows the CREATE and comes before any write.
        slip.batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS slipstream_lab_roundtrip (id int PRIMARY KEY, data text NOT NULL);
             {};
             INSERT INTO slipstream_lab_roundtrip SELECT i, md5(i::text) FROM generate_series(1, {TABLE_ROWS}) i
             ON CONFLICT DO NOTHING;
             ANALYZE slipstream_lab_roundtrip;",
            super::fetch_table::refuse_foreign_sql(&["slipstream_lab_roundtrip"])
        ))
        .await?;
        let server_version = slip.parameter("server_version").map(str::to_string);
        let tp_pid: i32 = tp.query_one("SELECT pg_backend_pid()", &[]).await?.get(0);
        let backends = [slip.backend_pid(), tp_pid];

        let slip_stmt = slip.prepare(QUERY).await?;
        let tp_stmt = tp.prepare(QUERY).await?;
        // Warm both (plan cache, buffers, branch predictors) before measuring.
        slip_round(&mut slip, &slip_stmt, 0).await?;
        tp_round(&tp, &tp_stmt, 0).await?;

        let mut plan: Vec<Option<placement::Placement>> = Vec::new();
        let mut pin_note = None;
        if placement::is_local(&url) {
            plan.extend(placement::placements().into_iter().map(Some));
            if plan.is_empty() {
                // The docs promise both placements on a local server: say why they are not here.
                pin_note = Some("one CPU available: no placement to fix; client and backends measured unpinned".to_string());
            }
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
            ctx.quick,
        ));
        r.notes.extend(noise_warning(
            &format!("tokio-postgres, {}", m.placement),
            &t_us,
            ctx.quick,
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
    match pgbench(&url, rounds * STATEMENTS) {
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
        "ratios are medians of per-round ratios (rounds of both clients interleaved, each first in every other round); above 1 means slipstream-pg is \
         faster / uses less CPU. Both clients run on one current-thread runtime."
            .into(),
    );
    r.notes.push(
        "all three clients without TLS (sslmode=disable unless the URL demands TLS: require or verify-*). \
         same CPU / cross CPU: client thread and both backends pinned. On a small VM the placement, not the client, \
         decides most of a round trip; pgbench runs unpinned, so compare it with care."
            .into(),
    );
    r.notes.extend(pin_note);
    Ok(r)
}

/// The connection string of every client here, slipstream-pg, tokio-postgres and pgbench: TLS
/// off unless the caller demands it (see [`super::without_tls`]). tokio-postgres is measured
/// with `NoTls`; given the URL as
/// it came, slipstream-pg and libpq default to `sslmode=prefer` and, on a server that offers
/// TLS, would encrypt every round trip the peer sends in the clear.
fn client_url(url: &str) -> String {
    super::without_tls(url)
}

/// Both in-process clients, on `url` (see [`client_url`]).
async fn connect(url: &str) -> anyhow::Result<(slipstream_pg::Client, tokio_postgres::Client)> {
    let slip = slipstream_pg::connect(url)
        .await
        .context("connecting to the database")?;
    let tp = super::client_config::connect_tokio_postgres(url).await?;
    Ok((slip, tp))
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
    for round in 0..rounds {
        for side in order(round) {
            match side {
                Side::Slipstream => s.push(slip_round(slip, slip_stmt, round).await?),
                Side::TokioPostgres => t.push(tp_round(tp, tp_stmt, round).await?),
            }
        }
    }
    Ok(Measured {
        placement,
        slip: s,
        tp: t,
    })
}

/// The clients measured in rounds here.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Side {
    Slipstream,
    TokioPostgres,
}

/// The order of the clients in round `round`: each goes first every other round
/// ([`super::round_order`]), so neither always runs right after the other's statements.
fn order(round: usize) -> Vec<Side> {
    super::round_order(round, &[Side::Slipstream, Side::TokioPostgres])
}

/// The id statement `i` of round `round` reads, for both in-process clients: the rounds walk
/// the whole table, as pgbench's `random(1, TABLE_ROWS)` draws from it (before, every round
/// read ids 1..100, a tenth of the rows pgbench read).
fn key(round: usize, i: usize) -> i32 {
    ((round * STATEMENTS + i) % TABLE_ROWS as usize) as i32 + 1
}

async fn slip_round(
    c: &mut slipstream_pg::Client,
    stmt: &slipstream_pg::Statement,
    round: usize,
) -> anyhow::Result<Timing> {
    let sw = Stopwatch::start();
    for i in 0..STATEMENTS {
        let id = key(round, i);
        let row = c.query_one(stmt, &[&id]).await?;
        let data: &str = row.get(0)?;
        std::hint::black_box(data);
    }
    Ok(sw.stop())
}

async fn tp_round(
    c: &tokio_postgres::Client,
    stmt: &tokio_postgres::Statement,
    round: usize,
) -> anyhow::Result<Timing> {
    let sw = Stopwatch::start();
    for i in 0..STATEMENTS {
        let id = key(round, i);
        let row = c.query_one(stmt, &[&id]).await?;
        let data: &str = row.try_get(0)?;
        std::hint::black_box(data);
    }
    Ok(sw.stop())
}

/// pgbench's script: the same query, its id drawn from the whole table.
fn pgbench_script() -> String {
    format!(
        "\\set id random(1, {TABLE_ROWS})\nSELECT data FROM slipstream_lab_roundtrip WHERE id = :id;\n"
    )
}

/// Runs pgbench with the same query; returns (statements/s, client CPU us per statement).
fn pgbench(url: &str, transactions: usize) -> anyhow::Result<(f64, f64)> {
    let script = pgbench_script();
    let args: Vec<String> = ["-M", "prepared", "-c", "1", "-j", "1", "-t"]
        .iter()
        .map(|a| a.to_string())
        .chain([transactions.to_string()])
        .collect();
    let run = super::pgbench::run(url, &script, &args)?;
    let tps = super::pgbench::tps(&run.stdout)?;
    Ok((tps, run.cpu.as_secs_f64() * 1e6 / transactions as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/lab.md: "The clients run in alternating short rounds", so machine drift hits both
    /// halves of a pair alike. Steps: the order of the clients in the first rounds. Before the
    /// fix slipstream-pg ran first in every round, always on the machine as tokio-postgres's
    /// round had left it, while every other experiment alternated.
    #[test]
    fn each_client_goes_first_every_other_round() {
        let firsts: Vec<Side> = (0..4).map(|round| order(round)[0]).collect();
        assert_eq!(
            firsts,
            [
                Side::Slipstream,
                Side::TokioPostgres,
                Side::Slipstream,
                Side::TokioPostgres
            ]
        );
        for round in 0..4 {
            let mut sides = order(round);
            sides.dedup();
            assert_eq!(sides.len(), 2, "round {round}: {sides:?}");
        }
    }

    /// Peers do the same work: every client reads the same rows. pgbench draws its id from
    /// the whole table (`random(1, 1000)`); the in-process clients must read those rows too.
    /// Steps: the ids the in-process clients read over the quick form's rounds, against the
    /// range pgbench's script draws from. Before the fix they read ids 1..100 in every round,
    /// a tenth of the table pgbench read.
    #[test]
    fn the_in_process_clients_read_the_rows_pgbench_reads() {
        let script = pgbench_script();
        let range = script
            .split("random(1, ")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .and_then(|n| n.trim().parse::<i32>().ok())
            .expect("pgbench's id range");
        let mut read: Vec<i32> = (0..50)
            .flat_map(|round| (0..STATEMENTS).map(move |i| key(round, i)))
            .collect();
        read.sort_unstable();
        read.dedup();
        assert_eq!(
            (read.first(), read.last(), read.len()),
            (Some(&1), Some(&range), range as usize),
            "the lowest and highest id read in process, and how many ids, against pgbench's 1..={range}"
        );
    }

    /// docs/lab.md: on a local server `roundtrip` "pins the client thread and both backends
    /// and reports both placements"; a form that cannot must say so, not drop them silently.
    /// Steps: the quick form from a thread allowed on one CPU only. Before the fix the result
    /// had one "unpinned" placement and no note saying why the pinned ones were missing.
    #[test]
    fn a_missing_placement_is_explained() {
        let cluster = slipstream_testkit::Cluster::start().unwrap();
        let ctx = Context {
            url: cluster.url(),
            quick: true,
        };
        let r = std::thread::spawn(move || {
            slipstream_testkit::pin_current_thread(&[0]).unwrap();
            run(&ctx)
        })
        .join()
        .unwrap()
        .unwrap();
        let placements: Vec<&str> = r.table.rows.iter().map(|row| row[0].as_str()).collect();
        assert!(
            placements.iter().all(|p| *p == "unpinned"),
            "{placements:?}"
        );
        assert!(
            r.notes.iter().any(|n| n.contains("one CPU")),
            "no note on the missing placements: {:?}",
            r.notes
        );
    }

    /// A server that offers TLS, with a self-signed certificate (`sslmode=prefer` takes it
    /// unchecked).
    fn tls_cluster() -> slipstream_testkit::Cluster {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        slipstream_testkit::Cluster::builder()
            .tls(cert.pem(), key.serialize_pem())
            .start()
            .unwrap()
    }

    /// tokio-postgres is measured without TLS (`NoTls`), so slipstream-pg and pgbench must be
    /// too: given a URL without `sslmode` and a server that offers TLS (Debian's packaged
    /// PostgreSQL does, out of the box), slipstream-pg and libpq default to `prefer` and
    /// would encrypt every round trip the peer sends in the clear.
    #[test]
    fn every_client_runs_without_tls_on_a_server_that_offers_it() {
        let cluster = tls_cluster();
        let url = client_url(&cluster.url());
        const SSL: &str = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()";
        let (slip, tp) = runtime()
            .unwrap()
            .block_on(async {
                let (mut slip, tp) = connect(&url).await?;
                let s: bool = slip.query_one(SSL, &[]).await?.get(0)?;
                let t: bool = tp.query_one(SSL, &[]).await?.get(0);
                slip.batch_execute("CREATE TABLE seen (ssl bool)").await?;
                anyhow::Ok((s, t))
            })
            .unwrap();
        let args = ["-t".to_string(), "1".to_string()];
        super::super::pgbench::run(&url, &format!("INSERT INTO seen {SSL};\n"), &args).unwrap();
        let pgbench = cluster.psql("SELECT ssl FROM seen").unwrap();
        assert_eq!(
            (slip, tp, pgbench.trim()),
            (false, false, "f"),
            "TLS per client (slipstream-pg, tokio-postgres, pgbench)"
        );
    }
}

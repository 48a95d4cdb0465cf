//! What each pipeline mode costs the client, side by side in one run:
//! `cargo run --release -p slipstream-pg --example pipeline_cost [seconds] [rtt_us]`.
//!
//! The program a newcomer writes from the README: a prepared point `SELECT`, batches of 100
//! waited for as a whole, in continue-on-error mode (the default until issue 23) and in
//! abort-on-error mode (the default since),
//! over loopback TCP (or the testkit's delay proxy when `rtt_us` > 0). The modes take turns in
//! short rounds, so a loaded machine slows both alike and the ratio stays meaningful. Client
//! CPU is the runtime thread's (`getrusage(RUSAGE_THREAD)`), with its voluntary context
//! switches: one per time the client slept waiting for replies.
//!
//! Uses `DATABASE_URL` if set (it must be TCP); otherwise starts a throwaway cluster.
//! `PIPELINE_COST_MODULE=1` runs each mode also with the server module pipeline_flush
//! (`make -C extension/pipeline_flush install`), switched on and off in the same session.

use std::time::{Duration, Instant};

use slipstream_pg::{PipelineMode, PipelineOptions};

const BATCH: usize = 100;
const ROWS: i32 = 10_000;

#[derive(Default, Clone, Copy)]
struct Usage {
    cpu: Duration,
    user: Duration,
    waits: u64,
}

fn usage() -> Usage {
    // SAFETY: getrusage writes a plain struct we own; RUSAGE_THREAD is the calling thread.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `ru` outlives the call.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Usage {
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        user: tv(ru.ru_utime),
        waits: ru.ru_nvcsw as u64,
    }
}

#[derive(Default)]
struct Tally {
    ops: u64,
    wall: Duration,
    cpu: Duration,
    user: Duration,
    waits: u64,
    server: Duration,
}

#[derive(Clone, Copy, PartialEq)]
enum How {
    Batch(PipelineMode),
    Window(PipelineMode),
}

impl How {
    fn label(self) -> String {
        let (shape, mode) = match self {
            How::Batch(m) => ("batches of 100", m),
            How::Window(m) => ("sliding window", m),
        };
        format!("{shape}, {mode:?}")
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().map_or(Ok(3.0), |s| s.parse())?;
    let rtt_us: u64 = args.next().map_or(Ok(0), |s| s.parse())?;
    let (_cluster, url) = match std::env::var("DATABASE_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let cluster = slipstream_testkit::Cluster::start()?;
            let url = cluster.url();
            (Some(cluster), url)
        }
    };
    let mut setup = slipstream_pg::connect(&url).await?;
    setup
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS kv (id int PRIMARY KEY, v text NOT NULL);
             INSERT INTO kv SELECT i, md5(i::text) FROM generate_series(1, {ROWS}) i
             ON CONFLICT DO NOTHING"
        ))
        .await?;
    setup.batch_execute("VACUUM ANALYZE kv").await?;
    let _proxy;
    let url = if rtt_us > 0 {
        let port: u16 = url
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split('/').next())
            .ok_or("DATABASE_URL must be postgres://...:port/...")?
            .parse()?;
        let proxy = slipstream_testkit::DelayProxy::start(
            ([127, 0, 0, 1], port).into(),
            Duration::from_micros(rtt_us),
        )?;
        let url = url.replace(&format!(":{port}/"), &format!(":{}/", proxy.port()));
        _proxy = Some(proxy);
        url
    } else {
        _proxy = None;
        url
    };
    let mut client = slipstream_pg::connect(&url).await?;
    let stmt = client.prepare("SELECT v FROM kv WHERE id = $1").await?;
    let backend: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await?
        .get(0)?;
    // The backend's CPU time, from /proc (the server runs on this machine).
    let server_cpu = || -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{backend}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
        let ticks: u64 = [11, 12]
            .iter()
            .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
            .sum();
        Duration::from_millis(ticks * 10)
    };

    // PIPELINE_COST_MODULE=1: each mode also with the server module pipeline_flush
    // (extension/pipeline_flush, loaded into this session and switched per slice).
    let module = std::env::var("PIPELINE_COST_MODULE").is_ok_and(|v| v == "1");
    if module {
        client.batch_execute("LOAD 'pipeline_flush'").await?;
    }
    let hows: Vec<(How, bool)> = [
        How::Batch(PipelineMode::ContinueOnError),
        How::Batch(PipelineMode::AbortOnError),
        How::Window(PipelineMode::ContinueOnError),
        How::Window(PipelineMode::AbortOnError),
    ]
    .into_iter()
    .flat_map(|h| {
        let with: &[bool] = if module { &[false, true] } else { &[false] };
        with.iter().map(move |&m| (h, m))
    })
    .collect();
    // PIPELINE_COST_ONLY=k runs the k-th of them (to trace it); the other rows are then empty.
    let only: Option<usize> = std::env::var("PIPELINE_COST_ONLY")
        .ok()
        .and_then(|s| s.parse().ok());
    let mut tallies: Vec<Tally> = hows.iter().map(|_| Tally::default()).collect();
    let rounds = 6;
    let slice = Duration::from_secs_f64(seconds / rounds as f64);
    let mut id = 0i32;
    let mut next = || {
        id = id % ROWS + 1;
        id
    };
    for _ in 0..rounds {
        for (i, ((how, flush), tally)) in hows.iter().zip(&mut tallies).enumerate() {
            if only.is_some_and(|o| o != i) {
                continue;
            }
            if module {
                client
                    .batch_execute(if *flush {
                        "SET pipeline_flush.enabled = on"
                    } else {
                        "SET pipeline_flush.enabled = off"
                    })
                    .await?;
            }
            let (u0, s0, t0) = (usage(), server_cpu(), Instant::now());
            let deadline = t0 + slice;
            let mut ops = 0u64;
            match *how {
                How::Batch(mode) => {
                    while Instant::now() < deadline {
                        let mut p = client.pipeline_with(PipelineOptions::new().mode(mode));
                        for _ in 0..BATCH {
                            p.query(&stmt, &[&next()]).await?;
                        }
                        for r in p.end().await {
                            std::hint::black_box(r?);
                        }
                        ops += BATCH as u64;
                    }
                }
                How::Window(mode) => {
                    let mut p = client.pipeline_with(PipelineOptions::new().mode(mode));
                    let mut ring = std::collections::VecDeque::new();
                    while Instant::now() < deadline {
                        for _ in 0..BATCH {
                            ring.push_back(p.query(&stmt, &[&next()]).await?);
                            if ring.len() > 2048 {
                                let op = ring.pop_front().expect("not empty");
                                std::hint::black_box(p.process(&op).await?);
                            }
                        }
                        p.sync();
                        ops += BATCH as u64;
                    }
                    for r in p.end().await {
                        r?;
                    }
                }
            }
            let (u1, wall) = (usage(), t0.elapsed());
            tally.ops += ops;
            tally.wall += wall;
            tally.cpu += u1.cpu - u0.cpu;
            tally.user += u1.user - u0.user;
            tally.waits += u1.waits - u0.waits;
            tally.server += server_cpu() - s0;
        }
    }
    println!("RTT {rtt_us} us, {seconds} s per mode in {rounds} interleaved rounds");
    println!(
        "{:<56} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>10}",
        "mode", "stmts/s", "cpu us", "user us", "waits/100", "server us", "vs abort", "stmts"
    );
    let rate = |t: &Tally| t.ops as f64 / t.wall.as_secs_f64();
    for ((how, flush), t) in hows.iter().zip(&tallies) {
        if t.ops == 0 {
            continue;
        }
        // The same shape in abort mode, on the stock server's flushing.
        let twin = match *how {
            How::Batch(_) => How::Batch(PipelineMode::AbortOnError),
            How::Window(_) => How::Window(PipelineMode::AbortOnError),
        };
        // Absent when PIPELINE_COST_ONLY traced another row: the row is still printed, as its
        // statement count is what a trace's instructions are divided by.
        let vs_abort = hows
            .iter()
            .position(|&(h, f)| h == twin && !f)
            .map(|k| &tallies[k])
            .filter(|a| a.ops > 0)
            .map_or_else(|| "-".to_string(), |a| format!("{:.2}x", rate(t) / rate(a)));
        let label = if *flush {
            format!("{}, pipeline_flush", how.label())
        } else {
            how.label()
        };
        println!(
            "{:<56} {:>10.0} {:>10.2} {:>10.2} {:>10.1} {:>10.2} {:>8} {:>10}",
            label,
            rate(t),
            t.cpu.as_secs_f64() * 1e6 / t.ops as f64,
            t.user.as_secs_f64() * 1e6 / t.ops as f64,
            t.waits as f64 * 100.0 / t.ops as f64,
            t.server.as_secs_f64() * 1e6 / t.ops as f64,
            vs_abort,
            t.ops,
        );
    }
    Ok(())
}

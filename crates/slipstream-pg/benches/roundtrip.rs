//! Prepared single-row SELECT round trip: slipstream-pg vs tokio-postgres, in one run, in wall
//! time and in client CPU time.
//!
//! `cargo bench -p slipstream-pg --bench roundtrip`
//!
//! Both clients run on one current-thread runtime, so process CPU time is exactly the clients'
//! work (tokio-postgres's connection task included); the server is another process.
//!
//! Placement is fixed, because on a 2-vCPU VM it decides the result: the server is pinned to
//! CPU 0 and the client to CPU 0 (`same-cpu`: the hand-off is a context switch) and then to
//! CPU 1 (`cross-cpu`: every hand-off is a cross-CPU wake-up). Left to the scheduler, the two
//! clients' backends land on different CPUs by chance and the comparison measures that chance.

use std::time::{Duration, Instant};

use cpu_time::ProcessTime;
use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{Criterion, Throughput};
use slipstream_testkit::Cluster;

const QUERY: &str = "SELECT data FROM bench WHERE id = $1";
const ROWS: i32 = 1000;

/// Process CPU time (user + system), for "how much client CPU does a round trip cost".
struct ProcessCpu;

impl Measurement for ProcessCpu {
    type Intermediate = ProcessTime;
    type Value = Duration;
    fn start(&self) -> ProcessTime {
        ProcessTime::now()
    }
    fn end(&self, start: ProcessTime) -> Duration {
        start.elapsed()
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, v: &Duration) -> f64 {
        v.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, typical_ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if typical_ns < 1e3 {
            (1.0, "ns cpu")
        } else if typical_ns < 1e6 {
            (1e-3, "µs cpu")
        } else {
            (1e-6, "ms cpu")
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }
    fn scale_throughputs(
        &self,
        typical_ns: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let per = match throughput {
            Throughput::Elements(n) => *n as f64,
            _ => 1.0,
        };
        values.iter_mut().for_each(|v| *v = per * 1e9 / *v);
        let _ = typical_ns;
        "elem/cpu-s"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

struct Clients {
    rt: tokio::runtime::Runtime,
    slip: slipstream_pg::Client,
    slip_stmt: slipstream_pg::Statement,
    tp: tokio_postgres::Client,
    tp_stmt: tokio_postgres::Statement,
}

impl Clients {
    fn new(url: &str) -> Clients {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (slip, slip_stmt, tp, tp_stmt) = rt.block_on(async {
            let mut slip = slipstream_pg::connect(url).await.unwrap();
            let slip_stmt = slip.prepare(QUERY).await.unwrap();
            let (tp, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            let tp_stmt = tp.prepare(QUERY).await.unwrap();
            (slip, slip_stmt, tp, tp_stmt)
        });
        Clients {
            rt,
            slip,
            slip_stmt,
            tp,
            tp_stmt,
        }
    }

    fn slip(&mut self, iters: u64) {
        let Clients {
            rt,
            slip,
            slip_stmt,
            ..
        } = self;
        rt.block_on(async {
            for i in 0..iters {
                let id = (i % ROWS as u64) as i32 + 1;
                let row = slip.query_one(&*slip_stmt, &[&id]).await.unwrap();
                std::hint::black_box(row.get::<_, &str>(0).unwrap());
            }
        });
    }

    fn tp(&mut self, iters: u64) {
        let Clients {
            rt, tp, tp_stmt, ..
        } = self;
        rt.block_on(async {
            for i in 0..iters {
                let id = (i % ROWS as u64) as i32 + 1;
                let row = tp.query_one(&*tp_stmt, &[&id]).await.unwrap();
                std::hint::black_box(row.get::<_, &str>(0));
            }
        });
    }
}

fn main() {
    let cluster = Cluster::start().expect("a PostgreSQL cluster (see the README)");
    cluster
        .psql(&format!(
            "CREATE TABLE bench (id int PRIMARY KEY, data text NOT NULL);
             INSERT INTO bench SELECT i, md5(i::text) FROM generate_series(1, {ROWS}) i; ANALYZE bench;"
        ))
        .unwrap();
    cluster.pin_server(&[0]).expect("pin the server");
    let url = format!("{}?sslmode=disable", cluster.url());
    let mut clients = Clients::new(&url);
    let mut wall = Criterion::default().configure_from_args();
    let mut cpu = Criterion::default()
        .with_measurement(ProcessCpu)
        .configure_from_args();
    for (placement, client_cpu) in [("same-cpu", 0), ("cross-cpu", 1)] {
        slipstream_testkit::pin_current_thread(&[client_cpu]).expect("pin the client");
        let mut group = wall.benchmark_group(format!("roundtrip/{placement}/wall"));
        group.throughput(Throughput::Elements(1));
        group.bench_function("slipstream-pg", |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                clients.slip(iters);
                t.elapsed()
            })
        });
        group.bench_function("tokio-postgres", |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                clients.tp(iters);
                t.elapsed()
            })
        });
        group.finish();

        let mut group = cpu.benchmark_group(format!("roundtrip/{placement}/cpu"));
        group.throughput(Throughput::Elements(1));
        group.bench_function("slipstream-pg", |b| {
            b.iter_custom(|iters| {
                let t = ProcessTime::now();
                clients.slip(iters);
                t.elapsed()
            })
        });
        group.bench_function("tokio-postgres", |b| {
            b.iter_custom(|iters| {
                let t = ProcessTime::now();
                clients.tp(iters);
                t.elapsed()
            })
        });
        group.finish();
    }
    drop(clients);
    drop(cluster);
    wall.final_summary();
}

//! The experiments, one module each.

pub(crate) mod ab;
mod client_config;
pub(crate) mod connect;
pub(crate) mod failover;
pub(crate) mod fetch_memory;
pub(crate) mod fetch_size;
mod fetch_table;
pub(crate) mod order_entry_demo;
mod pg_peers;
mod pgbench;
pub(crate) mod pipeline;
pub(crate) mod pk_lookup;
pub(crate) mod pool_scaling;
pub(crate) mod proxy;
pub(crate) mod rebalance;
pub(crate) mod roundtrip;
pub(crate) mod runner_cost;
pub(crate) mod statement_cache;
mod two_hosts;

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use cpu_time::ThreadTime;

/// What an experiment that runs on private clusters of its own ran on: this machine, the
/// testkit installation's server version, and `database` naming those clusters. The URL's
/// server is never used by such an experiment, and naming it (with no version) said the
/// result came from a server it never touched.
pub(crate) fn private_clusters_environment(what: &str) -> slipstream_bench::Environment {
    // `postgres (PostgreSQL) 15.4` -> `15.4`: the shape of the server's `server_version`.
    let version = slipstream_testkit::Install::find()
        .and_then(|install| install.version())
        .ok()
        .and_then(|line| line.rsplit(") ").next().map(str::to_string));
    let mut environment = slipstream_bench::capture_environment("", version);
    environment.database = format!("private clusters started by the experiment ({what})");
    environment
}

/// The transactions of a bench run that failed, and one failure's message: an experiment's
/// rate or latency of the committed ones alone would read as a clean run, so it says so.
pub(crate) fn bench_failures(r: &slipstream_bench::BenchRun) -> (u64, Option<String>) {
    let n = r.transactions.iter().map(|t| t.failed).sum();
    let first = r
        .transactions
        .iter()
        .flat_map(|t| t.failure_messages.iter())
        .next()
        .map(|(code, message)| format!("{code}: {message}"));
    (n, first)
}

/// A comma-separated list from the environment (an experiment's subset, for a focused look);
/// `None` when the variable is unset.
pub(crate) fn env_list(name: &str) -> Option<Vec<String>> {
    let v = std::env::var(name).ok()?;
    Some(
        v.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    )
}

/// A single-threaded runtime: every client's work, including tokio-postgres's connection
/// task, runs on this thread, so its CPU time is the clients' CPU time.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Wall and CPU time of a piece of work.
pub(crate) struct Timing {
    pub wall: Duration,
    pub cpu: Duration,
}

/// Starts a wall + CPU stopwatch. CPU is the calling thread's: the current-thread runtime
/// runs every client future there, while the delay proxy's threads, which live in the same
/// process, are not the clients' cost.
pub(crate) struct Stopwatch {
    wall: std::time::Instant,
    cpu: ThreadTime,
}

impl Stopwatch {
    pub(crate) fn start() -> Stopwatch {
        Stopwatch {
            wall: std::time::Instant::now(),
            cpu: ThreadTime::now(),
        }
    }

    pub(crate) fn stop(&self) -> Timing {
        Timing {
            wall: self.wall.elapsed(),
            cpu: self.cpu.elapsed(),
        }
    }
}

/// The order round `round` runs `items` in: as given in even rounds, reversed in odd ones.
///
/// Clients (or cells) measured side by side run in short rounds, and a ratio pairs the runs
/// of one round (docs/lab.md, "Ratios are paired"). In a fixed order the first always meets
/// the machine as the previous round left it and the last always follows the others' work
/// (their backends' caches, the CPU's frequency, the kernel's placement), a bias no number of
/// rounds cancels. Reversing every other round puts each in each position equally often, and
/// keeps neighbours neighbours (a pair that must run back to back stays back to back).
pub(crate) fn round_order<T: Copy>(round: usize, items: &[T]) -> Vec<T> {
    let mut order = items.to_vec();
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

/// A byte count for a table: `812 KiB`, `14.2 MiB`, or `n/a` when not measured.
pub(crate) fn bytes_cell(bytes: Option<usize>) -> String {
    match bytes {
        None => "n/a".into(),
        Some(b) if b < 1 << 20 => format!("{:.0} KiB", b as f64 / 1024.0),
        Some(b) => format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
    }
}

/// Forces TLS off in a connection string for both clients, so connection costs compare like
/// with like (tokio-postgres is measured with `NoTls`). A caller's `sslmode=prefer` or `allow`
/// becomes `disable` too: those modes accept a plain connection, and kept as given they let
/// slipstream-pg and libpq encrypt on a server that offers TLS while tokio-postgres talks in
/// the clear. A mode that demands TLS (`require`, `verify-ca`, `verify-full`) is kept: the
/// peer without TLS then fails to connect and says so, rather than being measured unlike.
pub(crate) fn without_tls(url: &str) -> String {
    const KEY: &str = "sslmode=";
    let Some(at) = url.find(KEY) else {
        return with_param(url, "sslmode=disable");
    };
    let start = at + KEY.len();
    let end = url[start..]
        .find(|c: char| c == '&' || c.is_whitespace())
        .map_or(url.len(), |i| start + i);
    match url[start..end].trim_matches('\'') {
        "prefer" | "allow" => format!("{}disable{}", &url[..start], &url[end..]),
        _ => url.to_string(),
    }
}

/// Adds a `key=value` parameter to a connection string of either form.
fn with_param(url: &str, param: &str) -> String {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}{param}")
    } else {
        format!("{url} {param}")
    }
}

/// The first TCP address the connection string names, for the delay proxy to forward to.
pub(crate) fn tcp_target(url: &str) -> Option<SocketAddr> {
    let config: slipstream_pg::Config = url.parse().ok()?;
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(slipstream_pg::DEFAULT_PORT);
    config.get_hosts().iter().find_map(|h| match h {
        slipstream_pg::Host::Tcp(name) => (name.as_str(), port).to_socket_addrs().ok()?.next(),
        slipstream_pg::Host::Unix(_) => None,
    })
}

/// The connection string pointed at the proxy on 127.0.0.1:`port` instead of the server.
pub(crate) fn via_proxy(url: &str, port: u16) -> String {
    if let Some(rest) = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
    {
        let (authority, tail) = rest
            .find(['/', '?'])
            .map_or((rest, ""), |i| (&rest[..i], &rest[i..]));
        let userinfo = authority.rsplit_once('@').map(|(u, _)| u);
        let userinfo = userinfo.map_or(String::new(), |u| format!("{u}@"));
        format!("postgres://{userinfo}127.0.0.1:{port}{tail}")
    } else {
        let kept: Vec<&str> = url
            .split_whitespace()
            .filter(|kv| {
                !["host=", "hostaddr=", "port="]
                    .iter()
                    .any(|k| kv.starts_with(k))
            })
            .collect();
        format!("{} host=127.0.0.1 port={port}", kept.join(" "))
    }
}

/// CPU time used by finished child processes (pgbench), for peers that run out of process.
pub(crate) fn children_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    match getrusage(UsageWho::RUSAGE_CHILDREN) {
        Ok(u) => {
            let t = |tv: nix::sys::time::TimeVal| {
                Duration::new(tv.tv_sec() as u64, tv.tv_usec() as u32 * 1000)
            };
            t(u.user_time()) + t(u.system_time())
        }
        Err(_) => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    /// Every item runs in every position equally often over two rounds, and neighbours stay
    /// neighbours.
    #[test]
    fn odd_rounds_run_in_reverse() {
        assert_eq!(super::round_order(0, &['a', 'b', 'c']), ['a', 'b', 'c']);
        assert_eq!(super::round_order(1, &['a', 'b', 'c']), ['c', 'b', 'a']);
        assert_eq!(super::round_order(2, &['a', 'b']), ['a', 'b']);
        assert_eq!(super::round_order(3, &['a', 'b']), ['b', 'a']);
    }

    #[test]
    fn tls_is_turned_off_only_when_unspecified() {
        assert_eq!(
            super::without_tls("postgres://h/db"),
            "postgres://h/db?sslmode=disable"
        );
        assert_eq!(
            super::without_tls("postgres://h/db?x=1"),
            "postgres://h/db?x=1&sslmode=disable"
        );
        assert_eq!(super::without_tls("host=h"), "host=h sslmode=disable");
        assert_eq!(
            super::without_tls("host=h sslmode=require"),
            "host=h sslmode=require"
        );
    }

    /// docs/lab.md: every client runs without TLS (tokio-postgres is measured with `NoTls`).
    /// Steps: URLs that set `sslmode=prefer` or `allow`, which accept a plain connection. Before
    /// the fix any `sslmode` was kept as given, so with `prefer` on a server that offers TLS
    /// slipstream-pg and pgbench encrypted every round trip and tokio-postgres did not, while
    /// the result said `"tls": false`.
    #[test]
    fn a_mode_that_accepts_plain_connections_is_turned_off() {
        assert_eq!(
            super::without_tls("postgres://h/db?sslmode=prefer"),
            "postgres://h/db?sslmode=disable"
        );
        assert_eq!(
            super::without_tls("postgres://h/db?sslmode=allow&application_name=x"),
            "postgres://h/db?sslmode=disable&application_name=x"
        );
        assert_eq!(
            super::without_tls("host=h sslmode=prefer port=5"),
            "host=h sslmode=disable port=5"
        );
        assert_eq!(
            super::without_tls("host=h sslmode='prefer'"),
            "host=h sslmode=disable"
        );
        // Modes that demand TLS stay: the peer without it fails to connect instead.
        assert_eq!(
            super::without_tls("postgres://h/db?sslmode=verify-full"),
            "postgres://h/db?sslmode=verify-full"
        );
        assert_eq!(
            super::without_tls("postgres://h/db?sslmode=disable"),
            "postgres://h/db?sslmode=disable"
        );
    }
}

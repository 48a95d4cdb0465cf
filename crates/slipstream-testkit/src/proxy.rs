//! A TCP proxy that adds latency and injects faults, for pipelining and failover experiments.
//!
//! # Implementation details
//!
//! Each direction of each connection has a reader thread and a writer thread joined by a
//! channel. The reader stamps every chunk with `arrival + rtt/2` and goes straight back to
//! reading; the writer sleeps until a chunk's stamp and writes it. Chunks therefore leave in
//! order, each exactly half an RTT after it arrived, and a burst is not serialised behind the
//! delay of its first chunk (a naive proxy that sleeps before each write would do that).
//!
//! OS threads rather than tokio tasks: tokio's timer has millisecond granularity, too coarse for
//! a 0.2 ms RTT. A writer sleeps until [`SPIN_MARGIN`] before a chunk's deadline and yields in a
//! loop for the rest: on a VM a sleeping thread wakes 50-150 us late, which would otherwise add
//! to every delayed hop.
//!
//! With no delay, nothing queued and no stall, the reader writes the chunk itself: the hand-off
//! to the writer thread is a cross-thread wake-up, the largest cost of a zero-delay proxy.
//! `pending` (chunks queued but not yet written) keeps this from overtaking queued data: the
//! reader bypasses the queue only when the writer has nothing left to write.
//!
//! The proxy's own cost (thread hand-off, extra copies) is measured by [`measure_overhead`] and
//! reported next to every figure taken through it.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::Error;

/// Bytes read per chunk: larger than a typical pipelined burst so a burst stays one chunk.
const CHUNK: usize = 64 * 1024;
/// How long before a deadline a writer stops sleeping and starts yielding: more than a
/// sleeping thread's typical late wake-up here.
const SPIN_MARGIN: Duration = Duration::from_micros(150);

/// A delaying, fault-injecting TCP proxy in front of one target address.
///
/// ```no_run
/// use std::time::Duration;
/// let cluster = slipstream_testkit::Cluster::start()?;
/// let target = std::net::SocketAddr::from(([127, 0, 0, 1], cluster.port()));
/// let proxy = slipstream_testkit::DelayProxy::start(target, Duration::from_millis(1))?;
/// let url = format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port());
/// // ... connect through `url`: every round trip now takes 1 ms more.
/// proxy.cut_all(); // every open connection is reset
/// # Ok::<(), slipstream_testkit::Error>(())
/// ```
#[derive(Debug)]
pub struct DelayProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    target: SocketAddr,
    /// Half the configured round trip, in nanoseconds: the delay per direction.
    one_way_nanos: AtomicU64,
    closing: AtomicBool,
    refusing: AtomicBool,
    stalled: Mutex<bool>,
    unstalled: Condvar,
    next_id: AtomicU64,
    /// Both sockets of each live connection, kept to cut them on command.
    conns: Mutex<HashMap<u64, (TcpStream, TcpStream)>>,
    /// Client-to-server flights over all connections (see [`DelayProxy::round_trips`]).
    flights: AtomicU64,
}

impl DelayProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `target`, adding `rtt` to every
    /// round trip (`rtt / 2` each way).
    ///
    /// ```
    /// # use std::io::{Read, Write};
    /// # let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// # let target = echo.local_addr().unwrap();
    /// # std::thread::spawn(move || for c in echo.incoming() {
    /// #     let mut c = c.unwrap();
    /// #     std::thread::spawn(move || {
    /// #         let mut b = [0u8; 64];
    /// #         while let Ok(n @ 1..) = c.read(&mut b) { let _ = c.write_all(&b[..n]); }
    /// #     });
    /// # });
    /// use std::time::{Duration, Instant};
    /// let proxy = slipstream_testkit::DelayProxy::start(target, Duration::from_millis(20))?;
    /// let mut s = std::net::TcpStream::connect(proxy.addr()).unwrap();
    /// let t = Instant::now();
    /// s.write_all(b"ping").unwrap();
    /// s.read_exact(&mut [0u8; 4]).unwrap();
    /// assert!(t.elapsed() >= Duration::from_millis(20)); // 10 ms each way
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn start(target: SocketAddr, rtt: Duration) -> Result<DelayProxy, Error> {
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(|e| Error::io("proxy could not listen", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("proxy could not listen", e))?;
        let shared = Arc::new(Shared {
            target,
            one_way_nanos: AtomicU64::new(rtt.as_nanos() as u64 / 2),
            closing: AtomicBool::new(false),
            refusing: AtomicBool::new(false),
            stalled: Mutex::new(false),
            unstalled: Condvar::new(),
            next_id: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
            flights: AtomicU64::new(0),
        });
        let accept_shared = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("delay-proxy-accept".into())
            .spawn(move || accept_loop(listener, accept_shared))
            .map_err(|e| Error::io("proxy could not start its thread", e))?;
        Ok(DelayProxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The address clients connect to.
    ///
    /// ```
    /// # let target = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
    /// let proxy = slipstream_testkit::DelayProxy::start(target, std::time::Duration::ZERO)?;
    /// assert!(proxy.addr().ip().is_loopback());
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port clients connect to.
    ///
    /// ```
    /// # let target = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
    /// let proxy = slipstream_testkit::DelayProxy::start(target, std::time::Duration::ZERO)?;
    /// let url = format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port());
    /// assert_eq!(proxy.port(), proxy.addr().port());
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Changes the added round trip for data that arrives from now on.
    ///
    /// ```
    /// # let target = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
    /// use std::time::Duration;
    /// let proxy = slipstream_testkit::DelayProxy::start(target, Duration::ZERO)?;
    /// proxy.set_rtt(Duration::from_millis(5)); // a cross-zone round trip from now on
    /// assert_eq!(proxy.rtt(), Duration::from_millis(5));
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn set_rtt(&self, rtt: Duration) {
        self.shared
            .one_way_nanos
            .store(rtt.as_nanos() as u64 / 2, Ordering::Relaxed);
    }

    /// The added round trip.
    ///
    /// ```
    /// # let target = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
    /// use std::time::Duration;
    /// let proxy = slipstream_testkit::DelayProxy::start(target, Duration::from_micros(200))?;
    /// assert_eq!(proxy.rtt(), Duration::from_micros(200));
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn rtt(&self) -> Duration {
        Duration::from_nanos(self.shared.one_way_nanos.load(Ordering::Relaxed) * 2)
    }

    /// Resets every open connection, as a network failure or a dead host would.
    ///
    /// ```
    /// # use std::io::{Read, Write};
    /// # let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// # let target = echo.local_addr().unwrap();
    /// # std::thread::spawn(move || for c in echo.incoming() {
    /// #     let mut c = c.unwrap();
    /// #     std::thread::spawn(move || {
    /// #         let mut b = [0u8; 64];
    /// #         while let Ok(n @ 1..) = c.read(&mut b) { let _ = c.write_all(&b[..n]); }
    /// #     });
    /// # });
    /// let proxy = slipstream_testkit::DelayProxy::start(target, std::time::Duration::ZERO)?;
    /// let mut s = std::net::TcpStream::connect(proxy.addr()).unwrap();
    /// s.write_all(b"x").unwrap();
    /// s.read_exact(&mut [0u8; 1]).unwrap(); // through
    /// proxy.cut_all();
    /// assert!(matches!(s.read(&mut [0u8; 1]), Ok(0) | Err(_))); // closed under the client
    /// assert_eq!(proxy.connection_count(), 0);
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn cut_all(&self) {
        let conns = std::mem::take(&mut *lock(&self.shared.conns));
        for (client, server) in conns.values() {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
    }

    /// While stalled, data is accepted but not delivered in either direction (a hung peer or a
    /// partitioned network); unstalling delivers what was held, in order.
    ///
    /// ```
    /// # use std::io::{Read, Write};
    /// # let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// # let target = echo.local_addr().unwrap();
    /// # std::thread::spawn(move || for c in echo.incoming() {
    /// #     let mut c = c.unwrap();
    /// #     std::thread::spawn(move || {
    /// #         let mut b = [0u8; 64];
    /// #         while let Ok(n @ 1..) = c.read(&mut b) { let _ = c.write_all(&b[..n]); }
    /// #     });
    /// # });
    /// use std::time::Duration;
    /// let proxy = slipstream_testkit::DelayProxy::start(target, Duration::ZERO)?;
    /// let mut s = std::net::TcpStream::connect(proxy.addr()).unwrap();
    /// s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    /// proxy.set_stalled(true);
    /// s.write_all(b"x").unwrap(); // accepted, not delivered
    /// assert!(s.read(&mut [0u8; 1]).is_err()); // no echo: timed out
    /// proxy.set_stalled(false);
    /// s.read_exact(&mut [0u8; 1]).unwrap(); // delivered now
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn set_stalled(&self, stalled: bool) {
        *lock(&self.shared.stalled) = stalled;
        self.shared.unstalled.notify_all();
    }

    /// While refusing, new connections are closed as soon as they are accepted.
    ///
    /// ```
    /// # use std::io::{Read, Write};
    /// # let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// # let target = echo.local_addr().unwrap();
    /// # std::thread::spawn(move || for c in echo.incoming() {
    /// #     let mut c = c.unwrap();
    /// #     std::thread::spawn(move || {
    /// #         let mut b = [0u8; 64];
    /// #         while let Ok(n @ 1..) = c.read(&mut b) { let _ = c.write_all(&b[..n]); }
    /// #     });
    /// # });
    /// let proxy = slipstream_testkit::DelayProxy::start(target, std::time::Duration::ZERO)?;
    /// proxy.set_refusing(true);
    /// let mut s = std::net::TcpStream::connect(proxy.addr()).unwrap(); // accepted, then closed
    /// assert!(matches!(s.read(&mut [0u8; 1]), Ok(0) | Err(_)));
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn set_refusing(&self, refusing: bool) {
        self.shared.refusing.store(refusing, Ordering::Relaxed);
    }

    /// Round trips so far, over all connections: the number of times the client sent data
    /// after the server had last spoken (or first). A request and its reply count one; a
    /// pipelined burst and its replies count one; prepare-then-execute counts two.
    ///
    /// ```no_run
    /// # fn f(proxy: &slipstream_testkit::DelayProxy) {
    /// let before = proxy.round_trips();
    /// // ... one query through the proxy ...
    /// assert_eq!(proxy.round_trips() - before, 1);
    /// # }
    /// ```
    pub fn round_trips(&self) -> u64 {
        self.shared.flights.load(Ordering::SeqCst)
    }

    /// The number of open proxied connections.
    ///
    /// ```
    /// # use std::io::{Read, Write};
    /// # let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// # let target = echo.local_addr().unwrap();
    /// # std::thread::spawn(move || for c in echo.incoming() {
    /// #     let mut c = c.unwrap();
    /// #     std::thread::spawn(move || {
    /// #         let mut b = [0u8; 64];
    /// #         while let Ok(n @ 1..) = c.read(&mut b) { let _ = c.write_all(&b[..n]); }
    /// #     });
    /// # });
    /// let proxy = slipstream_testkit::DelayProxy::start(target, std::time::Duration::ZERO)?;
    /// let mut s = std::net::TcpStream::connect(proxy.addr()).unwrap();
    /// s.write_all(b"x").unwrap();
    /// s.read_exact(&mut [0u8; 1]).unwrap(); // the proxy has connected to the target by now
    /// assert_eq!(proxy.connection_count(), 1);
    /// # Ok::<(), slipstream_testkit::Error>(())
    /// ```
    pub fn connection_count(&self) -> usize {
        lock(&self.shared.conns).len()
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Relaxed);
        // Wake the blocking accept with a connection of our own.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
        self.set_stalled(false);
        self.cut_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for client in listener.incoming() {
        if shared.closing.load(Ordering::Relaxed) {
            return;
        }
        let Ok(client) = client else { continue };
        if shared.refusing.load(Ordering::Relaxed) {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let Ok(server) = TcpStream::connect(shared.target) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
            continue;
        };
        lock(&shared.conns).insert(id, (c2, s2));
        let done = Arc::new(AtomicU64::new(0));
        // Which side spoke last: true = the client.
        let client_spoke = Arc::new(AtomicBool::new(false));
        for (from, to, from_client) in [(&client, &server, true), (&server, &client, false)] {
            let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
                continue;
            };
            let turn = Turn {
                client_spoke: client_spoke.clone(),
                from_client,
            };
            pipe(from, to, shared.clone(), id, done.clone(), turn);
        }
    }
}

/// Who spoke last on one connection, for counting round trips.
struct Turn {
    client_spoke: Arc<AtomicBool>,
    from_client: bool,
}

impl Turn {
    /// Records that this direction carried data; a client speaking after the server (or
    /// first) starts a round trip.
    fn spoke(&self, shared: &Shared) {
        let was_client = self.client_spoke.swap(self.from_client, Ordering::SeqCst);
        if self.from_client && !was_client {
            shared.flights.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Starts the reader and writer threads of one direction.
fn pipe(
    mut from: TcpStream,
    mut to: TcpStream,
    shared: Arc<Shared>,
    id: u64,
    done: Arc<AtomicU64>,
    turn: Turn,
) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    // Chunks handed to the writer and not yet written. Incremented before a send (Release pairs
    // with nothing: the reader is the only one who reads it as zero and then writes); the
    // writer decrements after its write completes, with Release, and the reader's Acquire load
    // of zero therefore sees every earlier write finished.
    let pending = Arc::new(AtomicU64::new(0));
    let reader_pending = pending.clone();
    let reader_shared = shared.clone();
    let mut direct = to.try_clone().ok();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    turn.spoke(&reader_shared);
                    let delay =
                        Duration::from_nanos(reader_shared.one_way_nanos.load(Ordering::Relaxed));
                    let idle = reader_pending.load(Ordering::Acquire) == 0
                        && !*lock(&reader_shared.stalled);
                    if let (true, true, Some(out)) = (delay.is_zero(), idle, direct.as_mut()) {
                        if out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                        continue;
                    }
                    reader_pending.fetch_add(1, Ordering::AcqRel);
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    std::thread::spawn(move || {
        // Sleep precisely: the default 50 us slack would be a quarter of a 0.2 ms RTT.
        let _ = nix::sys::prctl::set_timerslack(1_000);
        while let Ok((deadline, data)) = rx.recv() {
            wait_unstalled(&shared);
            sleep_until(deadline);
            let written = to.write_all(&data);
            pending.fetch_sub(1, Ordering::Release);
            if written.is_err() {
                let _ = to.shutdown(Shutdown::Both);
                break;
            }
        }
        // The source closed (or failed): pass the end of stream on, after all queued data.
        let _ = to.shutdown(Shutdown::Write);
        if done.fetch_add(1, Ordering::AcqRel) == 1 {
            lock(&shared.conns).remove(&id);
        }
    });
}

fn wait_unstalled(shared: &Shared) {
    let mut stalled = lock(&shared.stalled);
    while *stalled && !shared.closing.load(Ordering::Relaxed) {
        stalled = shared
            .unstalled
            .wait(stalled)
            .unwrap_or_else(|p| p.into_inner());
    }
}

fn sleep_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > SPIN_MARGIN {
            std::thread::sleep(left - SPIN_MARGIN);
        } else {
            std::thread::yield_now();
        }
    }
}

/// What the proxy itself adds to a round trip, measured against an echo server.
///
/// ```
/// let o = slipstream_testkit::measure_overhead(std::time::Duration::from_micros(200), 20)?;
/// assert_eq!(o.configured_us, 200.0);
/// assert!(o.proxied_us > o.configured_us);
/// assert!((o.added_us - (o.proxied_us - o.direct_us - o.configured_us)).abs() < 1e-9);
/// # Ok::<(), slipstream_testkit::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ProxyOverhead {
    /// Median round trip straight to the echo server, in microseconds.
    pub direct_us: f64,
    /// Median round trip through the proxy, in microseconds.
    pub proxied_us: f64,
    /// The RTT the proxy was asked to add, in microseconds.
    pub configured_us: f64,
    /// `proxied - direct - configured`: the proxy's own cost plus timer overshoot, in microseconds.
    pub added_us: f64,
}

/// The median as docs/lab.md defines it: the middle sample, or the mean of the middle two for
/// an even count (the upper one alone leaned every even-sized figure toward the slower half).
/// `samples` is not empty.
fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    }
}

/// Measures the proxy's own added round trip at `rtt` with `samples` 64-byte ping-pongs.
///
/// ```no_run
/// let o = slipstream_testkit::measure_overhead(std::time::Duration::from_micros(200), 500)?;
/// println!("the proxy adds {:.1} us beyond the configured {:.0} us", o.added_us, o.configured_us);
/// # Ok::<(), slipstream_testkit::Error>(())
/// ```
pub fn measure_overhead(rtt: Duration, samples: usize) -> Result<ProxyOverhead, Error> {
    if samples == 0 {
        return Err(Error::new(
            "measure_overhead needs at least one sample: a median of none is no measurement",
        ));
    }
    let echo = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::io("echo server could not listen", e))?;
    let echo_addr = echo.local_addr().map_err(|e| Error::io("echo server", e))?;
    std::thread::spawn(move || {
        for conn in echo.incoming().take(2) {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 64];
                while let Ok(n @ 1..) = conn.read(&mut buf) {
                    if conn.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let proxy = DelayProxy::start(echo_addr, rtt)?;
    let ping = |addr: SocketAddr| -> Result<f64, Error> {
        let mut s = TcpStream::connect(addr).map_err(|e| Error::io("ping connect", e))?;
        let _ = s.set_nodelay(true);
        let mut times = Vec::with_capacity(samples);
        let msg = [7u8; 64];
        let mut back = [0u8; 64];
        for _ in 0..samples {
            let t = Instant::now();
            s.write_all(&msg).map_err(|e| Error::io("ping write", e))?;
            s.read_exact(&mut back)
                .map_err(|e| Error::io("ping read", e))?;
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(median(&mut times))
    };
    let direct_us = ping(echo_addr)?;
    let proxied_us = ping(proxy.addr())?;
    let configured_us = rtt.as_secs_f64() * 1e6;
    Ok(ProxyOverhead {
        direct_us,
        proxied_us,
        configured_us,
        added_us: proxied_us - direct_us - configured_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/lab.md's median: of an even count, the mean of the middle two (it was the upper
    /// one: 3.0 here).
    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut [5.0, 1.0, 3.0]), 3.0);
    }

    /// Bad input gets an error, not a panic: with no samples, the median indexed an empty
    /// vector (index out of bounds).
    #[test]
    fn no_samples_is_an_error_not_a_panic() {
        let e = measure_overhead(Duration::from_micros(100), 0).unwrap_err();
        assert!(e.to_string().contains("at least one sample"), "{e}");
    }
}

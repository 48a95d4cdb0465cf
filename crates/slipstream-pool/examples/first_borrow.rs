//! How long a borrower waits for the first connection of a fresh pool, whose connect is
//! instant (an in-memory connection, no database): a wake of the opener that it missed shows
//! as a wait of about 500 ms, the opener's periodic look. docs/benchmarks.md, "A first borrow
//! and the opener's wake".
//!
//! ```sh
//! cargo run --release -p slipstream-pool --example first_borrow -- 3000          # threads
//! cargo run --release -p slipstream-pool --example first_borrow -- 3000 async    # tasks
//! ```

use std::time::{Duration, Instant};

struct Numbers;

impl slipstream_pool::Manager for Numbers {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        Ok(1)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(2000), |s| s.parse())?;
    let tasks = args.next().as_deref() == Some("async");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut waits = Vec::with_capacity(n);
    for _ in 0..n.max(1) {
        let pool =
            rt.block_on(async { slipstream_pool::Pool::builder(Numbers).max_size(4).build() });
        let start = Instant::now();
        let got = if tasks {
            let pool = pool.clone();
            rt.block_on(
                async move { tokio::spawn(async move { pool.get().await.map(drop) }).await },
            )?
        } else {
            let pool = pool.clone();
            std::thread::spawn(move || pool.get_blocking().map(drop))
                .join()
                .map_err(|_| "the borrowing thread panicked")?
        };
        got?;
        waits.push(start.elapsed());
    }
    waits.sort();
    let slow = waits
        .iter()
        .filter(|w| **w > Duration::from_millis(50))
        .count();
    let at = |q: f64| waits[((waits.len() - 1) as f64 * q) as usize];
    println!(
        "{} first borrows ({}): {slow} waited over 50 ms; p50 {:?}, p99 {:?}, max {:?}",
        waits.len(),
        if tasks { "tasks" } else { "threads" },
        at(0.5),
        at(0.99),
        at(1.0)
    );
    Ok(())
}

//! The trivial in-memory connection (a number) as each pool the lab measures manages it, so
//! `lab run pool-scaling` and the uncontended criterion bench compare the pools alone. Public
//! for the lab's benches; not an API.

use std::convert::Infallible;
use std::sync::{Condvar, Mutex};

/// slipstream-pool's manager of the trivial connection.
pub struct Ours;
impl slipstream_pool::Manager for Ours {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        Ok(0)
    }
}

/// deadpool's.
pub struct Dead;
impl deadpool::managed::Manager for Dead {
    type Type = u64;
    type Error = Infallible;
    async fn create(&self) -> Result<u64, Infallible> {
        Ok(0)
    }
    async fn recycle(
        &self,
        _: &mut u64,
        _: &deadpool::managed::Metrics,
    ) -> deadpool::managed::RecycleResult<Infallible> {
        Ok(())
    }
}

/// bb8's.
pub struct B8;
impl bb8::ManageConnection for B8 {
    type Connection = u64;
    type Error = Infallible;
    async fn connect(&self) -> Result<u64, Infallible> {
        Ok(0)
    }
    async fn is_valid(&self, _: &mut u64) -> Result<(), Infallible> {
        Ok(())
    }
    fn has_broken(&self, _: &mut u64) -> bool {
        false
    }
}

/// The error of a connection that cannot fail (r2d2 needs a `std::error::Error`).
#[derive(Debug)]
pub struct NeverFails;
impl std::fmt::Display for NeverFails {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}
impl std::error::Error for NeverFails {}

/// r2d2's.
pub struct R2;
impl r2d2::ManageConnection for R2 {
    type Connection = u64;
    type Error = NeverFails;
    fn connect(&self) -> Result<u64, NeverFails> {
        Ok(0)
    }
    fn is_valid(&self, _: &mut u64) -> Result<(), NeverFails> {
        Ok(())
    }
    fn has_broken(&self, _: &mut u64) -> bool {
        false
    }
}

/// The article's "old style": a mutex-guarded stack and a condition variable.
pub struct MutexPool {
    free: Mutex<Vec<u64>>,
    freed: Condvar,
}

impl MutexPool {
    /// A pool of `n` connections.
    pub fn new(n: usize) -> MutexPool {
        MutexPool {
            free: Mutex::new(vec![0; n]),
            freed: Condvar::new(),
        }
    }

    /// Borrows, waiting on the condition variable while none is free.
    pub fn get(&self) -> u64 {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(c) = free.pop() {
                return c;
            }
            free = self.freed.wait(free).unwrap_or_else(|p| p.into_inner());
        }
    }
    /// Returns a connection and wakes one waiter.
    pub fn put(&self, c: u64) {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).push(c);
        self.freed.notify_one();
    }
}

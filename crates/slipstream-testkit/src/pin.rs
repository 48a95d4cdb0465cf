//! CPU placement for benchmarks.

use nix::sched::{CpuSet, sched_setaffinity};
use nix::unistd::Pid;

use crate::Error;

/// Restricts a process (`None`: the calling thread) to `cpus`.
fn pin(pid: Option<u32>, cpus: &[usize]) -> Result<(), Error> {
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu)
            .map_err(|e| Error::new(format!("cpu {cpu} cannot be used: {e}")))?;
    }
    let target = Pid::from_raw(pid.map_or(0, |p| p as i32));
    sched_setaffinity(target, &set)
        .map_err(|e| Error::new(format!("could not set CPU affinity: {e}")))
}

/// Lets a process (`None`: the calling thread) run on every CPU again. Every CPU the set can
/// name is asked for: the kernel keeps those that exist and that the process's cpuset allows,
/// so this needs no count of the machine's CPUs (which a pinned thread cannot learn from
/// `available_parallelism`: that counts its own affinity).
fn unpin(pid: Option<u32>) -> Result<(), Error> {
    pin(pid, &(0..CpuSet::count()).collect::<Vec<_>>())
}

/// Restricts another process (e.g. a local backend) to `cpus`.
///
/// ```no_run
/// let cluster = slipstream_testkit::Cluster::start()?;
/// let pid = cluster.server_pid().expect("the server runs");
/// slipstream_testkit::pin_process(pid, &[1])?; // the postmaster and its later backends on CPU 1
/// # Ok::<(), slipstream_testkit::Error>(())
/// ```
pub fn pin_process(pid: u32, cpus: &[usize]) -> Result<(), Error> {
    pin(Some(pid), cpus)
}

/// Restricts the calling thread to `cpus` (e.g. to keep a benchmark's client on one CPU).
///
/// ```no_run
/// use slipstream_testkit::{pin_current_thread, unpin_current_thread};
/// pin_current_thread(&[0])?; // measure on CPU 0 only
/// // ... the timed loop ...
/// unpin_current_thread()?;
/// # Ok::<(), slipstream_testkit::Error>(())
/// ```
pub fn pin_current_thread(cpus: &[usize]) -> Result<(), Error> {
    pin(None, cpus)
}

/// Lets another process run on every CPU again, undoing [`pin_process`].
///
/// ```
/// slipstream_testkit::unpin_process(std::process::id())?; // every CPU this process may use
/// # Ok::<(), slipstream_testkit::Error>(())
/// ```
pub fn unpin_process(pid: u32) -> Result<(), Error> {
    unpin(Some(pid))
}

/// Lets the calling thread run on every CPU again, undoing [`pin_current_thread`].
///
/// ```
/// std::thread::spawn(|| slipstream_testkit::unpin_current_thread()).join().unwrap()?;
/// # Ok::<(), slipstream_testkit::Error>(())
/// ```
pub fn unpin_current_thread() -> Result<(), Error> {
    unpin(None)
}

//! Processes, as `/proc` tells them: what a data directory's `postmaster.pid` says, and whether
//! the process that made a directory is still alive.

use std::path::{Path, PathBuf};

/// What the `postmaster.pid` in a data directory says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockFile {
    /// A postmaster runs on the directory: the PID the file names runs the `postgres` binary
    /// and works in it (a postmaster works in its data directory), and listens on this port.
    Live { pid: u32, port: u16 },
    /// No file, or one that names no live postmaster of this directory: the PID is gone, a
    /// zombie, or a process working elsewhere or running another program (the PID given to
    /// another process since).
    Stale,
    /// The PID lives, but whether it is this directory's postmaster cannot be read, or the
    /// file is not whole (a server starting): not ours to remove or signal.
    Unknown,
}

pub(crate) fn lock_file(data: &Path) -> LockFile {
    let Ok(text) = std::fs::read_to_string(data.join("postmaster.pid")) else {
        return LockFile::Stale;
    };
    let mut lines = text.lines();
    let (Some(pid), Some(port)) = (
        lines.next().and_then(|l| l.trim().parse::<u32>().ok()),
        lines.nth(2).and_then(|l| l.trim().parse::<u16>().ok()),
    ) else {
        return LockFile::Unknown;
    };
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let Some(state) = stat_field(pid, 0) else {
        return LockFile::Stale;
    };
    if state == "Z" {
        return LockFile::Stale;
    }
    match (
        std::fs::read_link(proc_dir.join("cwd")),
        std::fs::canonicalize(data),
    ) {
        // Working there is not enough: a shell `cd`'d into the data directory may have been
        // given the dead postmaster's PID. A postmaster runs the `postgres` binary (its
        // name followed by " (deleted)" once a package upgrade replaced it).
        (Ok(cwd), Ok(data)) if cwd == data => match std::fs::read_link(proc_dir.join("exe")) {
            Ok(exe)
                if exe
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("postgres")) =>
            {
                LockFile::Live { pid, port }
            }
            Ok(_) => LockFile::Stale,
            Err(_) => LockFile::Unknown,
        },
        (Ok(_), Ok(_)) => LockFile::Stale,
        _ => LockFile::Unknown,
    }
}

/// Whether process `pid` has exited: it is gone, or a zombie waiting for its parent to reap it.
/// A server this process spawned stays a zombie until reaped, so `kill(pid, 0)` alone would
/// say it still runs.
pub(crate) fn has_exited(pid: u32) -> bool {
    stat_field(pid, 0).is_none_or(|state| state == "Z")
}

/// Whether `pid` is a child of this process that has not been reaped (running or a zombie):
/// such a PID cannot have been given to another process.
pub(crate) fn is_own_child(pid: u32) -> bool {
    stat_field(pid, 1).is_some_and(|parent| parent == std::process::id().to_string())
}

/// Field `index` of `/proc/<pid>/stat` counted from the state (index 0), after the command
/// name, whose parentheses may hold anything.
fn stat_field(pid: u32, index: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(index).map(str::to_owned)
}

/// A process as a mark that outlives it: its PID and its start time (clock ticks since
/// boot), so that a PID given to another process later does not read as the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcessMark {
    pid: u32,
    started: u64,
}

impl ProcessMark {
    /// This process.
    pub(crate) fn current() -> Option<ProcessMark> {
        ProcessMark::of(std::process::id())
    }

    fn of(pid: u32) -> Option<ProcessMark> {
        // `starttime` is field 22 of stat; the state, field 3, is index 0 here.
        let started = stat_field(pid, 19)?.parse().ok()?;
        Some(ProcessMark { pid, started })
    }

    pub(crate) fn to_text(self) -> String {
        format!("{} {}\n", self.pid, self.started)
    }

    pub(crate) fn parse(text: &str) -> Option<ProcessMark> {
        let mut words = text.split_whitespace();
        Some(ProcessMark {
            pid: words.next()?.parse().ok()?,
            started: words.next()?.parse().ok()?,
        })
    }

    /// Whether the process this marks still runs (not a zombie).
    pub(crate) fn is_alive(self) -> bool {
        ProcessMark::of(self.pid) == Some(self) && stat_field(self.pid, 0).is_some_and(|s| s != "Z")
    }
}

//! Small C programs built against the installed libpq (libpq-dev), for tests that compare
//! slipstream-pg with libpq itself rather than with what we believe libpq does.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// The executable of C program `source`, compiled with gcc once: its name carries a hash of
/// the source, so an edited program is never run stale from an earlier build. Test processes
/// running at once each build under a name of their own and rename it into place; within a
/// process the build is done once.
pub(crate) fn libpq_program(name: &str, source: &str) -> PathBuf {
    static BUILDING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = BUILDING.lock().unwrap_or_else(|p| p.into_inner());
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    source.hash(&mut h);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = dir.join(format!("{name}_{:016x}", h.finish()));
    if exe.exists() {
        return exe;
    }
    let pid = std::process::id();
    let src = dir.join(format!("{name}_{pid}.c"));
    let tmp = dir.join(format!("{name}_{pid}"));
    std::fs::write(&src, source).unwrap();
    let out = Command::new("gcc")
        .args(["-Wall", "-O1", "-I/usr/include/postgresql"])
        .arg(&src)
        .args(["-lpq", "-lpthread", "-o"])
        .arg(&tmp)
        .output()
        .expect("run gcc (needs libpq-dev)");
    assert!(
        out.status.success(),
        "gcc {name}.c: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&tmp, &exe).unwrap();
    let _ = std::fs::remove_file(&src);
    exe
}

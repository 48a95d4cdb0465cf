//! Result files replaced whole: a reader never sees half a file.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use std::os::unix::fs::FileTypeExt as _;

use anyhow::{Context as _, bail};

/// Writes `bytes` to `path`: to a temporary file beside it, renamed into place, so a reader
/// never sees half a file. A symlink is followed (the file it points to is replaced, the link
/// kept), and a path that is not a regular file (`/dev/stdout`, a FIFO) is written in place:
/// renaming over it would replace the device or pipe with a file. A directory is refused.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("result.json");
/// slipstream_bench::write_atomically(&path, b"{}")?;
/// assert_eq!(std::fs::read(&path)?, b"{}");
/// # anyhow::Ok(())
/// ```
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let file = match target(path)? {
        Target::InPlace(p) => {
            return std::fs::write(&p, bytes)
                .with_context(|| format!("could not write {}", p.display()));
        }
        Target::Replace(p) => p,
    };
    // Created new, never opened through what is there: a link planted at a temporary's
    // name in a shared directory would have the write replace the file it points to.
    let (tmp, mut out) = (0..TEMPORARY_ATTEMPTS)
        .find_map(|_| {
            let tmp = match temporary_beside(&file) {
                Ok(t) => t,
                Err(e) => return Some(Err(e)),
            };
            match OpenOptions::new().write(true).create_new(true).open(&tmp) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => None,
                Err(e) => {
                    Some(Err(e).with_context(|| format!("could not write {}", file.display())))
                }
                Ok(f) => Some(Ok((tmp, f))),
            }
        })
        .unwrap_or_else(|| {
            Err(anyhow::anyhow!(
                "could not write {}: every temporary name tried beside it is taken",
                file.display()
            ))
        })?;
    // On disk before the rename, and the rename on disk after it: a crash (a power cut, a VM
    // killed) between the two could otherwise leave the old name pointing at an empty file on
    // file systems that write data after metadata, losing the old result and the new one.
    let written = std::io::Write::write_all(&mut out, bytes)
        .and_then(|()| out.sync_all())
        .with_context(|| format!("could not write {}", file.display()))
        .and_then(|()| {
            drop(out);
            std::fs::rename(&tmp, &file)
                .with_context(|| format!("could not move the new {} into place", file.display()))
        })
        .map(|()| sync_directory_of(&file));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Flushes the directory entry of `file`'s rename to disk. Best effort: the new file is in
/// place and whole either way, and some file systems refuse to sync a directory.
fn sync_directory_of(file: &Path) {
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Fails, saying why, if [`write_atomically`] could not write `path`: a directory, a
/// directory that cannot be created or written to. For a check before a long run, so its
/// result is not lost at the end. Creates the missing directories, as the write would.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// assert!(slipstream_bench::check_writable(&dir.path().join("r.json")).is_ok());
/// assert!(slipstream_bench::check_writable(dir.path()).is_err()); // a directory
/// # anyhow::Ok(())
/// ```
pub fn check_writable(path: &Path) -> anyhow::Result<()> {
    let file = match target(path)? {
        // Opening a FIFO for writing waits for its reader: trust the path the user named.
        Target::InPlace(_) => return Ok(()),
        Target::Replace(p) => p,
    };
    let tmp = temporary_beside(&file)?;
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .with_context(|| format!("cannot write {}", path.display()))?;
    let _ = std::fs::remove_file(&tmp);
    Ok(())
}

/// Where a write to a path lands.
enum Target {
    /// A regular file, or none yet: replaced through a temporary file and a rename.
    Replace(PathBuf),
    /// Something else (a device, a FIFO, a socket): written in place.
    InPlace(PathBuf),
}

/// Follows `path`'s symlinks (a dangling one too: the write creates the file it names).
fn target(path: &Path) -> anyhow::Result<Target> {
    // What the kernel reaches through `path` first: a link in /proc names a pipe or a socket
    // by text that is no path (`/dev/stdout` -> `/proc/self/fd/1` -> `pipe:[41]` when stdout
    // is a pipe, as under `| jq` or `-o >(gzip > r.json.gz)`), which the walk below would
    // take for a file yet to be created in /proc/self/fd, and fail to write there.
    if let Ok(meta) = std::fs::metadata(path) {
        let kind = meta.file_type();
        if kind.is_socket() {
            // No file system call opens a socket for writing: refused up front, not after
            // the run whose result it was to hold.
            bail!("{} is a socket: give a file name", path.display());
        }
        if !kind.is_file() && !kind.is_dir() {
            return Ok(Target::InPlace(path.to_path_buf()));
        }
    }
    let mut p = path.to_path_buf();
    // Linux's own limit on symlinks followed in one lookup (ELOOP past it).
    for _ in 0..40 {
        let meta = match std::fs::symlink_metadata(&p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Target::Replace(p)),
            Err(e) => return Err(e).with_context(|| format!("could not look at {}", p.display())),
            Ok(m) => m,
        };
        let kind = meta.file_type();
        if kind.is_symlink() {
            let link = std::fs::read_link(&p)
                .with_context(|| format!("could not read the link {}", p.display()))?;
            // A relative link is relative to its own directory; `join` keeps an absolute one.
            p = p.parent().map_or(link.clone(), |dir| dir.join(&link));
        } else if kind.is_dir() {
            bail!(
                "{} is a directory: give a file name, e.g. {}",
                path.display(),
                path.join("result.json").display()
            );
        } else if kind.is_file() {
            return Ok(Target::Replace(p));
        } else if kind.is_socket() {
            // No file system call opens a socket for writing: refused up front, not after
            // the run whose result it was to hold.
            bail!("{} is a socket: give a file name", path.display());
        } else {
            return Ok(Target::InPlace(p));
        }
    }
    bail!("{}: too many levels of symbolic links", path.display())
}

/// Temporary names tried before giving up: each is new (a counter, random bits), so only
/// names planted by someone else are ever taken.
const TEMPORARY_ATTEMPTS: usize = 16;

/// The most bytes of a file's name its temporary keeps: with the 46 bytes the temporary adds
/// (`.`, `.tmp-`, a pid of up to 10 digits, `-`, a counter of up to 20, `-`, 8 random hex
/// digits), it stays within NAME_MAX, 255 bytes on Linux's file systems.
const TEMPORARY_NAME_KEPT: usize = 200;

/// A new name beside `file` (its directory created if missing), unique within this process
/// and across processes.
fn temporary_beside(file: &Path) -> anyhow::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
    // The temporary's name adds up to 46 bytes to the file's (`.`, `.tmp-`, a pid, a counter,
    // random bits),
    // so a name near the file system's 255-byte limit is cut to keep the temporary under it:
    // a name `-o` may give must not fail for its temporary's sake.
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("out");
    let mut cut = name.len().min(TEMPORARY_NAME_KEPT);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    Ok(dir.join(format!(
        ".{}.tmp-{}-{}-{:08x}",
        &name[..cut],
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        unpredictable() as u32
    )))
}

/// Bits no other process can guess: std's hash keys, drawn from the OS's random source (the
/// `rand` crate here is built without one).
fn unpredictable() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A symlink's target is replaced and the link kept; a FIFO is written in place, not
    /// replaced by a file; a directory is refused before anything is written; and a failed
    /// write leaves no temporary file behind (session 37's attacker: `-o link.json` replaced
    /// the link, `-o /dev/full` replaced the device node with a JSON file, `-o /tmp` left
    /// `/.tmp.tmp-PID` in `/`). A FIFO stands in for the devices, which a failing version of
    /// this test would destroy.
    #[test]
    fn links_are_followed_and_special_files_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target.json");
        std::fs::write(&target, "old").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink("target.json", &link).unwrap();
        write_atomically(&link, b"new").unwrap();
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");

        // A dangling link: the file it names is created.
        let dangling = dir.path().join("dangling.json");
        std::os::unix::fs::symlink("made.json", &dangling).unwrap();
        write_atomically(&dangling, b"made").unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("made.json")).unwrap(),
            b"made"
        );

        // A FIFO (as `/dev/stdout` or a device would be): written through, still a FIFO.
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success(), "mkfifo");
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        write_atomically(&fifo, b"through the pipe").unwrap();
        // Before the join: had the FIFO been replaced, its reader would wait for ever.
        assert!(fifo.symlink_metadata().unwrap().file_type().is_fifo());
        assert_eq!(reader.join().unwrap(), b"through the pipe");

        // A socket cannot be written: refused, by the check before a run too (session 37's
        // second attacker: the run went ahead and its result was lost at the end).
        let socket = dir.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let err = check_writable(&socket).unwrap_err();
        assert!(err.to_string().contains("is a socket"), "{err:#}");
        assert!(write_atomically(&socket, b"x").is_err());

        // A failed write names the path.
        let err = write_atomically(&target.join("x.json"), b"x").unwrap_err();
        assert!(format!("{err:#}").contains("target.json"), "{err:#}");

        let err = write_atomically(dir.path(), b"x").unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err:#}");
        assert!(check_writable(dir.path()).is_err());
        assert!(check_writable(&dir.path().join("sub/new.json")).is_ok());

        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect();
        assert!(left.is_empty(), "temporary files left: {left:?}");
    }

    /// A file name at the file system's limit (255 bytes) is a name a result can have: the
    /// temporary beside it must fit under that limit too.
    #[test]
    fn a_name_at_the_length_limit_is_written() {
        let dir = tempfile::tempdir().unwrap();
        // Two-byte characters too: the temporary's cut falls inside one unless it is careful.
        for name in ["r".repeat(250), "é".repeat(125)] {
            let path = dir.path().join(format!("{name}.json"));
            check_writable(&path).unwrap();
            write_atomically(&path, b"{}").unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), b"{}");
        }
    }

    /// The temporary's name is predictable (the pid, a counter): in a shared directory such
    /// as /tmp, a link planted at that name made the write go through it, replacing the file
    /// it points to (as root, any file). The temporary is created new, never opened through
    /// what is already there, and the write still lands.
    #[test]
    fn a_link_planted_at_the_temporarys_name_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        let path = dir.path().join("r.json");
        // Every name this process's counter can have reached in this test binary, and more.
        for n in 0..2000 {
            let planted = dir
                .path()
                .join(format!(".r.json.tmp-{}-{n}", std::process::id()));
            std::os::unix::fs::symlink(&victim, planted).unwrap();
        }
        let got = write_atomically(&path, b"{}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        got.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
    }
}

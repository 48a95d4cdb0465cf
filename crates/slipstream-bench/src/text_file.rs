//! Reading the text files we take as input (workload files, result files), checked as they
//! are read, so that something else given by mistake (`/dev/zero`, a binary, an endless
//! pipe) is refused at once rather than read into memory until the process is killed.

use std::io::Read as _;
use std::path::Path;

/// How much is read at a time: each piece is checked before the next is read.
const PIECE: usize = 1 << 16;

/// Why a file is not the text it should be.
#[derive(Debug)]
pub(crate) enum NotText {
    /// It could not be opened or read.
    Io(std::io::Error),
    /// At `offset` (bytes from the start, on line `line`), a byte that is not UTF-8 text, or a
    /// control character that neither JSON nor TOML allows (a NUL, an escape; tab, line feed
    /// and carriage return are allowed). `byte` is its value.
    Byte {
        offset: usize,
        line: usize,
        byte: u8,
        control: bool,
    },
    /// Longer than `limit` bytes.
    TooLong { limit: usize },
}

/// Whether a byte is a control character that JSON (outside escapes) and TOML refuse.
fn forbidden_control(b: u8) -> bool {
    b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r')
}

/// Reads `path` as UTF-8 text without forbidden control characters, at most `limit` bytes,
/// stopping at the first piece that breaks a rule.
pub(crate) fn read_text(path: &Path, limit: Option<usize>) -> Result<String, NotText> {
    let mut file = std::fs::File::open(path).map_err(NotText::Io)?;
    let mut bytes: Vec<u8> = Vec::new();
    // Everything before `valid` has been checked; a character cut by a piece's end is checked
    // with the next piece.
    let mut valid = 0;
    let mut lines = 1;
    loop {
        let start = bytes.len();
        bytes.resize(start + PIECE, 0);
        let n = loop {
            match file.read(&mut bytes[start..]) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r.map_err(NotText::Io)?,
            }
        };
        bytes.truncate(start + n);
        if let Some(limit) = limit
            && bytes.len() > limit
        {
            return Err(NotText::TooLong { limit });
        }
        let at_end = n == 0;
        let new = &bytes[valid..];
        let (checked, bad) = match std::str::from_utf8(new) {
            Ok(_) => (new.len(), None),
            Err(e) => match e.error_len() {
                Some(_) => (e.valid_up_to(), Some(valid + e.valid_up_to())),
                // Cut by the piece's end: complete next time, unless there is no next time.
                None if at_end => (e.valid_up_to(), Some(valid + e.valid_up_to())),
                None => (e.valid_up_to(), None),
            },
        };
        let text = &bytes[valid..valid + checked];
        if let Some(i) = text.iter().position(|&b| forbidden_control(b)) {
            return Err(NotText::Byte {
                offset: valid + i,
                line: lines + text[..i].iter().filter(|&&b| b == b'\n').count(),
                byte: text[i],
                control: true,
            });
        }
        lines += text.iter().filter(|&&b| b == b'\n').count();
        valid += checked;
        if let Some(offset) = bad {
            return Err(NotText::Byte {
                offset,
                line: lines,
                byte: bytes[offset],
                control: false,
            });
        }
        if at_end {
            break;
        }
    }
    // Checked above, piece by piece; converted with a check all the same (no unsafe).
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let byte = e.as_bytes()[offset];
        NotText::Byte {
            offset,
            line: lines,
            byte,
            control: false,
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// Runs `f` on a thread of its own; fails if it has not returned within a minute (a
    /// bound to catch a hang, not a timing).
    fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("still reading after a minute")
    }

    /// `slipstream bench /dev/zero` or `report /dev/zero` (a device given by mistake) read
    /// NUL bytes into memory until the process was killed: refused at the first byte now,
    /// naming it, for a workload file and for a result file.
    #[test]
    fn an_endless_device_is_refused_at_once() {
        let e = within_a_minute(|| {
            crate::workload_file::load(Path::new("/dev/zero"))
                .map(drop)
                .unwrap_err()
                .to_string()
        });
        assert!(
            e.starts_with("/dev/zero:1:") && e.contains("control character") && e.contains("0x00"),
            "{e}"
        );
        let e = within_a_minute(|| {
            crate::BenchRun::read_json(Path::new("/dev/zero"))
                .map(drop)
                .unwrap_err()
                .to_string()
        });
        assert!(
            e.contains("/dev/zero") && e.contains("control character"),
            "{e}"
        );
    }

    /// A workload file saved in Latin-1 (a byte that is not UTF-8 on line 3) is refused
    /// naming its line, as every other mistake in the file is.
    #[test]
    fn a_byte_that_is_not_utf8_is_named_by_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.toml");
        std::fs::write(
            &path,
            b"name = \"w\"\n[[transaction]]\nname = \"caf\xe9\"\nsql = \"SELECT 1\"\n",
        )
        .unwrap();
        let e = crate::workload_file::load(&path)
            .map(drop)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("{}:3:", path.display())) && e.contains("UTF-8"),
            "{e}"
        );
    }

    /// Checked piece by piece, a character cut by a piece's end is still read whole, and
    /// lines are counted across pieces.
    #[test]
    fn characters_and_lines_across_pieces_are_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.txt");
        let mut text = "a\n".repeat(PIECE / 2 - 1);
        text.push('x');
        text.push_str(&"é\n".repeat(PIECE));
        std::fs::write(&path, &text).unwrap();
        assert_eq!(read_text(&path, None).unwrap(), text);
        text.push('\u{1}');
        std::fs::write(&path, &text).unwrap();
        match read_text(&path, None) {
            Err(NotText::Byte {
                line,
                control: true,
                ..
            }) => {
                assert_eq!(line, PIECE / 2 + PIECE)
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read_text(&path, Some(PIECE)),
            Err(NotText::TooLong { limit }) if limit == PIECE
        ));
    }
}

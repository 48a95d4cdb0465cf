//! The testkit's error: a message that says what failed and what to do.

use std::fmt;

/// A testkit failure (missing PostgreSQL binaries, a cluster that would not start, ...).
#[derive(Debug, Clone)]
pub struct Error(pub(crate) String);

impl Error {
    pub(crate) fn new(message: impl Into<String>) -> Error {
        Error(message.into())
    }

    pub(crate) fn io(what: impl fmt::Display, e: std::io::Error) -> Error {
        Error(format!("{what}: {e}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

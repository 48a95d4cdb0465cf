//! The testkit's error: a message that says what failed and what to do.

use std::fmt;

/// A testkit failure (missing PostgreSQL binaries, a cluster that would not start, ...).
///
/// ```
/// // There is no CPU 1,048,576: the error says which CPU and why.
/// let err = slipstream_testkit::pin_current_thread(&[1 << 20]).unwrap_err();
/// assert!(err.to_string().starts_with("cpu 1048576 cannot be used"), "{err}");
/// ```
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

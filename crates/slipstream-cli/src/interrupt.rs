//! What every command does with Ctrl-C in common.

/// Exit status of a command stopped by Ctrl-C (128 + SIGINT).
pub const INTERRUPTED: u8 = 130;

/// A SIGINT this soon after the first is the same stop, not a second Ctrl-C.
pub const SAME_STOP: std::time::Duration = std::time::Duration::from_millis(250);

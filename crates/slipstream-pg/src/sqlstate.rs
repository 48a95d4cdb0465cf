//! SQLSTATE codes: the five-character error class the server attaches to every error.

use std::fmt;

/// A five-character SQLSTATE code, as sent by the server in an `ErrorResponse`.
///
/// Compare against the named constants; unknown codes are kept as they came.
///
/// ```
/// use slipstream_pg::SqlState;
/// let code = SqlState::from_code("57014");
/// assert_eq!(code, SqlState::QUERY_CANCELED);
/// assert_eq!(code.code(), "57014");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SqlState([u8; 5]);

macro_rules! states {
    ($($(#[$doc:meta])* $name:ident = $code:literal;)*) => {
        impl SqlState {
            $($(#[$doc])* pub const $name: SqlState = SqlState(*$code);)*
        }
    };
}

states! {
    /// 00000
    SUCCESSFUL_COMPLETION = b"00000";
    /// 0A000: e.g. "cached plan must not change result type".
    FEATURE_NOT_SUPPORTED = b"0A000";
    /// 26000: e.g. a prepared statement that does not exist (any more).
    INVALID_SQL_STATEMENT_NAME = b"26000";
    /// 08006
    CONNECTION_FAILURE = b"08006";
    /// 08P01
    PROTOCOL_VIOLATION = b"08P01";
    /// 22012
    DIVISION_BY_ZERO = b"22012";
    /// 23505
    UNIQUE_VIOLATION = b"23505";
    /// 25P02: a statement after an error inside a transaction block.
    IN_FAILED_SQL_TRANSACTION = b"25P02";
    /// 28000
    INVALID_AUTHORIZATION_SPECIFICATION = b"28000";
    /// 28P01
    INVALID_PASSWORD = b"28P01";
    /// 3D000
    INVALID_CATALOG_NAME = b"3D000";
    /// 40001
    T_R_SERIALIZATION_FAILURE = b"40001";
    /// 40P01
    T_R_DEADLOCK_DETECTED = b"40P01";
    /// 42601
    SYNTAX_ERROR = b"42601";
    /// 42P01
    UNDEFINED_TABLE = b"42P01";
    /// 42883: e.g. a function OID that no longer exists.
    UNDEFINED_FUNCTION = b"42883";
    /// 42703
    UNDEFINED_COLUMN = b"42703";
    /// 53300
    TOO_MANY_CONNECTIONS = b"53300";
    /// 57014: the statement was cancelled (CancelRequest or statement_timeout).
    QUERY_CANCELED = b"57014";
    /// 57P01: the backend was terminated (`pg_terminate_backend`, fast shutdown).
    ADMIN_SHUTDOWN = b"57P01";
    /// 57P03
    CANNOT_CONNECT_NOW = b"57P03";
    /// XX000: e.g. "cache lookup failed for type" after a type a statement uses was dropped.
    INTERNAL_ERROR = b"XX000";
}

impl SqlState {
    /// Builds a code from the server's text. Anything that is not five ASCII characters becomes
    /// `XX000` (internal error) rather than being trusted.
    ///
    /// ```
    /// use slipstream_pg::SqlState;
    /// assert_eq!(SqlState::from_code("23505"), SqlState::UNIQUE_VIOLATION);
    /// assert_eq!(SqlState::from_code("nonsense"), SqlState::INTERNAL_ERROR);
    /// ```
    pub fn from_code(code: &str) -> SqlState {
        match <[u8; 5]>::try_from(code.as_bytes()) {
            Ok(bytes) if bytes.is_ascii() => SqlState(bytes),
            _ => SqlState(*b"XX000"),
        }
    }

    /// The code as text, e.g. `"57014"`.
    ///
    /// ```
    /// assert_eq!(slipstream_pg::SqlState::QUERY_CANCELED.code(), "57014");
    /// ```
    pub fn code(&self) -> &str {
        // The constructor admits ASCII only, so this cannot fail.
        std::str::from_utf8(&self.0).unwrap_or("XX000")
    }
}

impl fmt::Debug for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SqlState({})", self.code())
    }
}

impl fmt::Display for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_codes_become_internal_error() {
        assert_eq!(SqlState::from_code("1234").code(), "XX000");
        assert_eq!(SqlState::from_code("ééé").code(), "XX000");
        assert_eq!(SqlState::from_code("42P01"), SqlState::UNDEFINED_TABLE);
    }
}

//! SQLSTATE codes: the five-character error class the server attaches to every error.

use std::fmt;

/// A five-character SQLSTATE code, as sent by the server in an `ErrorResponse`.
///
/// Compare against the named constants: every code of PostgreSQL 15's `errcodes.h`, under its
/// name there without `ERRCODE_` (the names tokio-postgres and psycopg use, in their case);
/// unknown codes are kept as they came.
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

        /// Every named code with its name, for the tests.
        #[cfg(test)]
        const NAMED: &[(&str, SqlState)] = &[$((stringify!($name), SqlState::$name)),*];
    };
}

states! {
    /// 00000
    SUCCESSFUL_COMPLETION = b"00000";
    /// 01000
    WARNING = b"01000";
    /// 0100C
    WARNING_DYNAMIC_RESULT_SETS_RETURNED = b"0100C";
    /// 01008
    WARNING_IMPLICIT_ZERO_BIT_PADDING = b"01008";
    /// 01003
    WARNING_NULL_VALUE_ELIMINATED_IN_SET_FUNCTION = b"01003";
    /// 01007
    WARNING_PRIVILEGE_NOT_GRANTED = b"01007";
    /// 01006
    WARNING_PRIVILEGE_NOT_REVOKED = b"01006";
    /// 01004
    WARNING_STRING_DATA_RIGHT_TRUNCATION = b"01004";
    /// 01P01
    WARNING_DEPRECATED_FEATURE = b"01P01";
    /// 02000
    NO_DATA = b"02000";
    /// 02001
    NO_ADDITIONAL_DYNAMIC_RESULT_SETS_RETURNED = b"02001";
    /// 03000
    SQL_STATEMENT_NOT_YET_COMPLETE = b"03000";
    /// 08000
    CONNECTION_EXCEPTION = b"08000";
    /// 08003
    CONNECTION_DOES_NOT_EXIST = b"08003";
    /// 08006
    CONNECTION_FAILURE = b"08006";
    /// 08001
    SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION = b"08001";
    /// 08004
    SQLSERVER_REJECTED_ESTABLISHMENT_OF_SQLCONNECTION = b"08004";
    /// 08007
    TRANSACTION_RESOLUTION_UNKNOWN = b"08007";
    /// 08P01
    PROTOCOL_VIOLATION = b"08P01";
    /// 09000
    TRIGGERED_ACTION_EXCEPTION = b"09000";
    /// 0A000: e.g. "cached plan must not change result type".
    FEATURE_NOT_SUPPORTED = b"0A000";
    /// 0B000
    INVALID_TRANSACTION_INITIATION = b"0B000";
    /// 0F000
    LOCATOR_EXCEPTION = b"0F000";
    /// 0F001
    L_E_INVALID_SPECIFICATION = b"0F001";
    /// 0L000
    INVALID_GRANTOR = b"0L000";
    /// 0LP01
    INVALID_GRANT_OPERATION = b"0LP01";
    /// 0P000
    INVALID_ROLE_SPECIFICATION = b"0P000";
    /// 0Z000
    DIAGNOSTICS_EXCEPTION = b"0Z000";
    /// 0Z002
    STACKED_DIAGNOSTICS_ACCESSED_WITHOUT_ACTIVE_HANDLER = b"0Z002";
    /// 20000
    CASE_NOT_FOUND = b"20000";
    /// 21000
    CARDINALITY_VIOLATION = b"21000";
    /// 22000
    DATA_EXCEPTION = b"22000";
    /// 2202E
    ARRAY_ELEMENT_ERROR = b"2202E";
    /// 2202E
    ARRAY_SUBSCRIPT_ERROR = b"2202E";
    /// 22021
    CHARACTER_NOT_IN_REPERTOIRE = b"22021";
    /// 22008
    DATETIME_FIELD_OVERFLOW = b"22008";
    /// 22008
    DATETIME_VALUE_OUT_OF_RANGE = b"22008";
    /// 22012
    DIVISION_BY_ZERO = b"22012";
    /// 22005
    ERROR_IN_ASSIGNMENT = b"22005";
    /// 2200B
    ESCAPE_CHARACTER_CONFLICT = b"2200B";
    /// 22022
    INDICATOR_OVERFLOW = b"22022";
    /// 22015
    INTERVAL_FIELD_OVERFLOW = b"22015";
    /// 2201E
    INVALID_ARGUMENT_FOR_LOG = b"2201E";
    /// 22014
    INVALID_ARGUMENT_FOR_NTILE = b"22014";
    /// 22016
    INVALID_ARGUMENT_FOR_NTH_VALUE = b"22016";
    /// 2201F
    INVALID_ARGUMENT_FOR_POWER_FUNCTION = b"2201F";
    /// 2201G
    INVALID_ARGUMENT_FOR_WIDTH_BUCKET_FUNCTION = b"2201G";
    /// 22018
    INVALID_CHARACTER_VALUE_FOR_CAST = b"22018";
    /// 22007
    INVALID_DATETIME_FORMAT = b"22007";
    /// 22019
    INVALID_ESCAPE_CHARACTER = b"22019";
    /// 2200D
    INVALID_ESCAPE_OCTET = b"2200D";
    /// 22025
    INVALID_ESCAPE_SEQUENCE = b"22025";
    /// 22P06
    NONSTANDARD_USE_OF_ESCAPE_CHARACTER = b"22P06";
    /// 22010
    INVALID_INDICATOR_PARAMETER_VALUE = b"22010";
    /// 22023
    INVALID_PARAMETER_VALUE = b"22023";
    /// 22013
    INVALID_PRECEDING_OR_FOLLOWING_SIZE = b"22013";
    /// 2201B
    INVALID_REGULAR_EXPRESSION = b"2201B";
    /// 2201W
    INVALID_ROW_COUNT_IN_LIMIT_CLAUSE = b"2201W";
    /// 2201X
    INVALID_ROW_COUNT_IN_RESULT_OFFSET_CLAUSE = b"2201X";
    /// 2202H
    INVALID_TABLESAMPLE_ARGUMENT = b"2202H";
    /// 2202G
    INVALID_TABLESAMPLE_REPEAT = b"2202G";
    /// 22009
    INVALID_TIME_ZONE_DISPLACEMENT_VALUE = b"22009";
    /// 2200C
    INVALID_USE_OF_ESCAPE_CHARACTER = b"2200C";
    /// 2200G
    MOST_SPECIFIC_TYPE_MISMATCH = b"2200G";
    /// 22004
    NULL_VALUE_NOT_ALLOWED = b"22004";
    /// 22002
    NULL_VALUE_NO_INDICATOR_PARAMETER = b"22002";
    /// 22003
    NUMERIC_VALUE_OUT_OF_RANGE = b"22003";
    /// 2200H
    SEQUENCE_GENERATOR_LIMIT_EXCEEDED = b"2200H";
    /// 22026
    STRING_DATA_LENGTH_MISMATCH = b"22026";
    /// 22001
    STRING_DATA_RIGHT_TRUNCATION = b"22001";
    /// 22011
    SUBSTRING_ERROR = b"22011";
    /// 22027
    TRIM_ERROR = b"22027";
    /// 22024
    UNTERMINATED_C_STRING = b"22024";
    /// 2200F
    ZERO_LENGTH_CHARACTER_STRING = b"2200F";
    /// 22P01
    FLOATING_POINT_EXCEPTION = b"22P01";
    /// 22P02
    INVALID_TEXT_REPRESENTATION = b"22P02";
    /// 22P03
    INVALID_BINARY_REPRESENTATION = b"22P03";
    /// 22P04
    BAD_COPY_FILE_FORMAT = b"22P04";
    /// 22P05
    UNTRANSLATABLE_CHARACTER = b"22P05";
    /// 22P07
    DATUM_VERSION_MISMATCH = b"22P07";
    /// 2200L
    NOT_AN_XML_DOCUMENT = b"2200L";
    /// 2200M
    INVALID_XML_DOCUMENT = b"2200M";
    /// 2200N
    INVALID_XML_CONTENT = b"2200N";
    /// 2200S
    INVALID_XML_COMMENT = b"2200S";
    /// 2200T
    INVALID_XML_PROCESSING_INSTRUCTION = b"2200T";
    /// 22030
    DUPLICATE_JSON_OBJECT_KEY_VALUE = b"22030";
    /// 22031
    INVALID_ARGUMENT_FOR_SQL_JSON_DATETIME_FUNCTION = b"22031";
    /// 22032
    INVALID_JSON_TEXT = b"22032";
    /// 22033
    INVALID_SQL_JSON_SUBSCRIPT = b"22033";
    /// 22034
    MORE_THAN_ONE_SQL_JSON_ITEM = b"22034";
    /// 22035
    NO_SQL_JSON_ITEM = b"22035";
    /// 22036
    NON_NUMERIC_SQL_JSON_ITEM = b"22036";
    /// 22037
    NON_UNIQUE_KEYS_IN_A_JSON_OBJECT = b"22037";
    /// 22038
    SINGLETON_SQL_JSON_ITEM_REQUIRED = b"22038";
    /// 22039
    SQL_JSON_ARRAY_NOT_FOUND = b"22039";
    /// 2203A
    SQL_JSON_MEMBER_NOT_FOUND = b"2203A";
    /// 2203B
    SQL_JSON_NUMBER_NOT_FOUND = b"2203B";
    /// 2203C
    SQL_JSON_OBJECT_NOT_FOUND = b"2203C";
    /// 2203D
    TOO_MANY_JSON_ARRAY_ELEMENTS = b"2203D";
    /// 2203E
    TOO_MANY_JSON_OBJECT_MEMBERS = b"2203E";
    /// 2203F
    SQL_JSON_SCALAR_REQUIRED = b"2203F";
    /// 2203G
    SQL_JSON_ITEM_CANNOT_BE_CAST_TO_TARGET_TYPE = b"2203G";
    /// 23000
    INTEGRITY_CONSTRAINT_VIOLATION = b"23000";
    /// 23001
    RESTRICT_VIOLATION = b"23001";
    /// 23502
    NOT_NULL_VIOLATION = b"23502";
    /// 23503
    FOREIGN_KEY_VIOLATION = b"23503";
    /// 23505
    UNIQUE_VIOLATION = b"23505";
    /// 23514
    CHECK_VIOLATION = b"23514";
    /// 23P01
    EXCLUSION_VIOLATION = b"23P01";
    /// 24000
    INVALID_CURSOR_STATE = b"24000";
    /// 25000
    INVALID_TRANSACTION_STATE = b"25000";
    /// 25001
    ACTIVE_SQL_TRANSACTION = b"25001";
    /// 25002
    BRANCH_TRANSACTION_ALREADY_ACTIVE = b"25002";
    /// 25008
    HELD_CURSOR_REQUIRES_SAME_ISOLATION_LEVEL = b"25008";
    /// 25003
    INAPPROPRIATE_ACCESS_MODE_FOR_BRANCH_TRANSACTION = b"25003";
    /// 25004
    INAPPROPRIATE_ISOLATION_LEVEL_FOR_BRANCH_TRANSACTION = b"25004";
    /// 25005
    NO_ACTIVE_SQL_TRANSACTION_FOR_BRANCH_TRANSACTION = b"25005";
    /// 25006
    READ_ONLY_SQL_TRANSACTION = b"25006";
    /// 25007
    SCHEMA_AND_DATA_STATEMENT_MIXING_NOT_SUPPORTED = b"25007";
    /// 25P01
    NO_ACTIVE_SQL_TRANSACTION = b"25P01";
    /// 25P02: a statement after an error inside a transaction block.
    IN_FAILED_SQL_TRANSACTION = b"25P02";
    /// 25P03
    IDLE_IN_TRANSACTION_SESSION_TIMEOUT = b"25P03";
    /// 26000: e.g. a prepared statement that does not exist (any more).
    INVALID_SQL_STATEMENT_NAME = b"26000";
    /// 27000
    TRIGGERED_DATA_CHANGE_VIOLATION = b"27000";
    /// 28000
    INVALID_AUTHORIZATION_SPECIFICATION = b"28000";
    /// 28P01
    INVALID_PASSWORD = b"28P01";
    /// 2B000
    DEPENDENT_PRIVILEGE_DESCRIPTORS_STILL_EXIST = b"2B000";
    /// 2BP01
    DEPENDENT_OBJECTS_STILL_EXIST = b"2BP01";
    /// 2D000
    INVALID_TRANSACTION_TERMINATION = b"2D000";
    /// 2F000
    SQL_ROUTINE_EXCEPTION = b"2F000";
    /// 2F005
    S_R_E_FUNCTION_EXECUTED_NO_RETURN_STATEMENT = b"2F005";
    /// 2F002
    S_R_E_MODIFYING_SQL_DATA_NOT_PERMITTED = b"2F002";
    /// 2F003
    S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED = b"2F003";
    /// 2F004
    S_R_E_READING_SQL_DATA_NOT_PERMITTED = b"2F004";
    /// 34000
    INVALID_CURSOR_NAME = b"34000";
    /// 38000
    EXTERNAL_ROUTINE_EXCEPTION = b"38000";
    /// 38001
    E_R_E_CONTAINING_SQL_NOT_PERMITTED = b"38001";
    /// 38002
    E_R_E_MODIFYING_SQL_DATA_NOT_PERMITTED = b"38002";
    /// 38003
    E_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED = b"38003";
    /// 38004
    E_R_E_READING_SQL_DATA_NOT_PERMITTED = b"38004";
    /// 39000
    EXTERNAL_ROUTINE_INVOCATION_EXCEPTION = b"39000";
    /// 39001
    E_R_I_E_INVALID_SQLSTATE_RETURNED = b"39001";
    /// 39004
    E_R_I_E_NULL_VALUE_NOT_ALLOWED = b"39004";
    /// 39P01
    E_R_I_E_TRIGGER_PROTOCOL_VIOLATED = b"39P01";
    /// 39P02
    E_R_I_E_SRF_PROTOCOL_VIOLATED = b"39P02";
    /// 39P03
    E_R_I_E_EVENT_TRIGGER_PROTOCOL_VIOLATED = b"39P03";
    /// 3B000
    SAVEPOINT_EXCEPTION = b"3B000";
    /// 3B001
    S_E_INVALID_SPECIFICATION = b"3B001";
    /// 3D000
    INVALID_CATALOG_NAME = b"3D000";
    /// 3F000
    INVALID_SCHEMA_NAME = b"3F000";
    /// 40000
    TRANSACTION_ROLLBACK = b"40000";
    /// 40002
    T_R_INTEGRITY_CONSTRAINT_VIOLATION = b"40002";
    /// 40001
    T_R_SERIALIZATION_FAILURE = b"40001";
    /// 40003
    T_R_STATEMENT_COMPLETION_UNKNOWN = b"40003";
    /// 40P01
    T_R_DEADLOCK_DETECTED = b"40P01";
    /// 42000
    SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION = b"42000";
    /// 42601
    SYNTAX_ERROR = b"42601";
    /// 42501
    INSUFFICIENT_PRIVILEGE = b"42501";
    /// 42846
    CANNOT_COERCE = b"42846";
    /// 42803
    GROUPING_ERROR = b"42803";
    /// 42P20
    WINDOWING_ERROR = b"42P20";
    /// 42P19
    INVALID_RECURSION = b"42P19";
    /// 42830
    INVALID_FOREIGN_KEY = b"42830";
    /// 42602
    INVALID_NAME = b"42602";
    /// 42622
    NAME_TOO_LONG = b"42622";
    /// 42939
    RESERVED_NAME = b"42939";
    /// 42804
    DATATYPE_MISMATCH = b"42804";
    /// 42P18
    INDETERMINATE_DATATYPE = b"42P18";
    /// 42P21
    COLLATION_MISMATCH = b"42P21";
    /// 42P22
    INDETERMINATE_COLLATION = b"42P22";
    /// 42809
    WRONG_OBJECT_TYPE = b"42809";
    /// 428C9
    GENERATED_ALWAYS = b"428C9";
    /// 42703
    UNDEFINED_COLUMN = b"42703";
    /// 34000
    UNDEFINED_CURSOR = b"34000";
    /// 3D000
    UNDEFINED_DATABASE = b"3D000";
    /// 42883: e.g. a function OID that no longer exists.
    UNDEFINED_FUNCTION = b"42883";
    /// 26000
    UNDEFINED_PSTATEMENT = b"26000";
    /// 3F000
    UNDEFINED_SCHEMA = b"3F000";
    /// 42P01
    UNDEFINED_TABLE = b"42P01";
    /// 42P02
    UNDEFINED_PARAMETER = b"42P02";
    /// 42704
    UNDEFINED_OBJECT = b"42704";
    /// 42701
    DUPLICATE_COLUMN = b"42701";
    /// 42P03
    DUPLICATE_CURSOR = b"42P03";
    /// 42P04
    DUPLICATE_DATABASE = b"42P04";
    /// 42723
    DUPLICATE_FUNCTION = b"42723";
    /// 42P05
    DUPLICATE_PSTATEMENT = b"42P05";
    /// 42P06
    DUPLICATE_SCHEMA = b"42P06";
    /// 42P07
    DUPLICATE_TABLE = b"42P07";
    /// 42712
    DUPLICATE_ALIAS = b"42712";
    /// 42710
    DUPLICATE_OBJECT = b"42710";
    /// 42702
    AMBIGUOUS_COLUMN = b"42702";
    /// 42725
    AMBIGUOUS_FUNCTION = b"42725";
    /// 42P08
    AMBIGUOUS_PARAMETER = b"42P08";
    /// 42P09
    AMBIGUOUS_ALIAS = b"42P09";
    /// 42P10
    INVALID_COLUMN_REFERENCE = b"42P10";
    /// 42611
    INVALID_COLUMN_DEFINITION = b"42611";
    /// 42P11
    INVALID_CURSOR_DEFINITION = b"42P11";
    /// 42P12
    INVALID_DATABASE_DEFINITION = b"42P12";
    /// 42P13
    INVALID_FUNCTION_DEFINITION = b"42P13";
    /// 42P14
    INVALID_PSTATEMENT_DEFINITION = b"42P14";
    /// 42P15
    INVALID_SCHEMA_DEFINITION = b"42P15";
    /// 42P16
    INVALID_TABLE_DEFINITION = b"42P16";
    /// 42P17
    INVALID_OBJECT_DEFINITION = b"42P17";
    /// 44000
    WITH_CHECK_OPTION_VIOLATION = b"44000";
    /// 53000
    INSUFFICIENT_RESOURCES = b"53000";
    /// 53100
    DISK_FULL = b"53100";
    /// 53200
    OUT_OF_MEMORY = b"53200";
    /// 53300
    TOO_MANY_CONNECTIONS = b"53300";
    /// 53400
    CONFIGURATION_LIMIT_EXCEEDED = b"53400";
    /// 54000
    PROGRAM_LIMIT_EXCEEDED = b"54000";
    /// 54001
    STATEMENT_TOO_COMPLEX = b"54001";
    /// 54011
    TOO_MANY_COLUMNS = b"54011";
    /// 54023
    TOO_MANY_ARGUMENTS = b"54023";
    /// 55000
    OBJECT_NOT_IN_PREREQUISITE_STATE = b"55000";
    /// 55006
    OBJECT_IN_USE = b"55006";
    /// 55P02
    CANT_CHANGE_RUNTIME_PARAM = b"55P02";
    /// 55P03
    LOCK_NOT_AVAILABLE = b"55P03";
    /// 55P04
    UNSAFE_NEW_ENUM_VALUE_USAGE = b"55P04";
    /// 57000
    OPERATOR_INTERVENTION = b"57000";
    /// 57014: the statement was cancelled (CancelRequest or statement_timeout).
    QUERY_CANCELED = b"57014";
    /// 57P01: the backend was terminated (`pg_terminate_backend`, fast shutdown).
    ADMIN_SHUTDOWN = b"57P01";
    /// 57P02
    CRASH_SHUTDOWN = b"57P02";
    /// 57P03
    CANNOT_CONNECT_NOW = b"57P03";
    /// 57P04
    DATABASE_DROPPED = b"57P04";
    /// 57P05
    IDLE_SESSION_TIMEOUT = b"57P05";
    /// 58000
    SYSTEM_ERROR = b"58000";
    /// 58030
    IO_ERROR = b"58030";
    /// 58P01
    UNDEFINED_FILE = b"58P01";
    /// 58P02
    DUPLICATE_FILE = b"58P02";
    /// 72000
    SNAPSHOT_TOO_OLD = b"72000";
    /// F0000
    CONFIG_FILE_ERROR = b"F0000";
    /// F0001
    LOCK_FILE_EXISTS = b"F0001";
    /// HV000
    FDW_ERROR = b"HV000";
    /// HV005
    FDW_COLUMN_NAME_NOT_FOUND = b"HV005";
    /// HV002
    FDW_DYNAMIC_PARAMETER_VALUE_NEEDED = b"HV002";
    /// HV010
    FDW_FUNCTION_SEQUENCE_ERROR = b"HV010";
    /// HV021
    FDW_INCONSISTENT_DESCRIPTOR_INFORMATION = b"HV021";
    /// HV024
    FDW_INVALID_ATTRIBUTE_VALUE = b"HV024";
    /// HV007
    FDW_INVALID_COLUMN_NAME = b"HV007";
    /// HV008
    FDW_INVALID_COLUMN_NUMBER = b"HV008";
    /// HV004
    FDW_INVALID_DATA_TYPE = b"HV004";
    /// HV006
    FDW_INVALID_DATA_TYPE_DESCRIPTORS = b"HV006";
    /// HV091
    FDW_INVALID_DESCRIPTOR_FIELD_IDENTIFIER = b"HV091";
    /// HV00B
    FDW_INVALID_HANDLE = b"HV00B";
    /// HV00C
    FDW_INVALID_OPTION_INDEX = b"HV00C";
    /// HV00D
    FDW_INVALID_OPTION_NAME = b"HV00D";
    /// HV090
    FDW_INVALID_STRING_LENGTH_OR_BUFFER_LENGTH = b"HV090";
    /// HV00A
    FDW_INVALID_STRING_FORMAT = b"HV00A";
    /// HV009
    FDW_INVALID_USE_OF_NULL_POINTER = b"HV009";
    /// HV014
    FDW_TOO_MANY_HANDLES = b"HV014";
    /// HV001
    FDW_OUT_OF_MEMORY = b"HV001";
    /// HV00P
    FDW_NO_SCHEMAS = b"HV00P";
    /// HV00J
    FDW_OPTION_NAME_NOT_FOUND = b"HV00J";
    /// HV00K
    FDW_REPLY_HANDLE = b"HV00K";
    /// HV00Q
    FDW_SCHEMA_NOT_FOUND = b"HV00Q";
    /// HV00R
    FDW_TABLE_NOT_FOUND = b"HV00R";
    /// HV00L
    FDW_UNABLE_TO_CREATE_EXECUTION = b"HV00L";
    /// HV00M
    FDW_UNABLE_TO_CREATE_REPLY = b"HV00M";
    /// HV00N
    FDW_UNABLE_TO_ESTABLISH_CONNECTION = b"HV00N";
    /// P0000
    PLPGSQL_ERROR = b"P0000";
    /// P0001
    RAISE_EXCEPTION = b"P0001";
    /// P0002
    NO_DATA_FOUND = b"P0002";
    /// P0003
    TOO_MANY_ROWS = b"P0003";
    /// P0004
    ASSERT_FAILURE = b"P0004";
    /// XX000: e.g. "cache lookup failed for type" after a type a statement uses was dropped.
    INTERNAL_ERROR = b"XX000";
    /// XX001
    DATA_CORRUPTED = b"XX001";
    /// XX002
    INDEX_CORRUPTED = b"XX002";
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

    /// The constants are PostgreSQL's: as many as PostgreSQL 15 defines, each name once, and
    /// each code one tokio-postgres knows (it names PostgreSQL's codes from the same source)
    /// but for one code newer than its list.
    #[test]
    fn the_named_codes_are_postgresqls() {
        assert_eq!(NAMED.len(), 267);
        let mut names: Vec<&str> = NAMED.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NAMED.len(), "a name is defined twice");
        // Added in a PostgreSQL 15 minor release, after tokio-postgres's list was made.
        let newer = ["22P07"];
        for (name, state) in NAMED {
            let theirs = tokio_postgres::error::SqlState::from_code(state.code());
            assert!(
                !format!("{theirs:?}").contains("Other") || newer.contains(&state.code()),
                "{name} = {state}: not a code tokio-postgres knows"
            );
        }
        assert_eq!(SqlState::READ_ONLY_SQL_TRANSACTION.code(), "25006");
        assert_eq!(SqlState::LOCK_NOT_AVAILABLE.code(), "55P03");
    }

    #[test]
    fn malformed_codes_become_internal_error() {
        assert_eq!(SqlState::from_code("1234").code(), "XX000");
        assert_eq!(SqlState::from_code("ééé").code(), "XX000");
        assert_eq!(SqlState::from_code("42P01"), SqlState::UNDEFINED_TABLE);
    }
}

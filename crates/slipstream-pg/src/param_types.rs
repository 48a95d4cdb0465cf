//! Parameter types chosen from the Rust values, so that SQL with parameters runs in one round
//! trip without asking the server for the types first.
//!
//! Binary encoding needs the PostgreSQL type, and [`ToSql`] only says which types a value
//! *accepts*. For each value we take the first type it accepts from a list of the common types
//! (integers, floats, bool, bytea, dates and times, uuid, json, arrays). Values that accept
//! `text` are sent as *text* with type 0 ("unspecified"), so the server infers their type from
//! the statement exactly as it does for a quoted literal: `WHERE day = $1` with `"2024-05-01"`
//! still compares dates. If any value accepts none of the list (a custom type), the caller falls
//! back to asking the server (Parse + Describe first, one more round trip).

use bytes::BytesMut;
use postgres_types::{Type, WrongType};

use crate::Param;

/// How one parameter goes on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    /// Text format, type left to the server.
    Text,
    /// Binary format as this type, which is also the type named in `Parse`.
    Binary(Type),
}

impl Wire {
    /// The type OID to name in `Parse` (0: the server infers it).
    pub(crate) fn oid(&self) -> u32 {
        match self {
            Wire::Text => 0,
            Wire::Binary(t) => t.oid(),
        }
    }
}

/// The types tried, in order. A value that accepts several gets the first: `SystemTime` is
/// sent as `timestamptz`, `serde_json::Value` as `jsonb`.
const CANDIDATES: &[Type] = &[
    Type::BOOL,
    Type::INT2,
    Type::INT4,
    Type::INT8,
    Type::FLOAT4,
    Type::FLOAT8,
    Type::NUMERIC,
    Type::BYTEA,
    Type::TIMESTAMPTZ,
    Type::TIMESTAMP,
    Type::DATE,
    Type::TIME,
    Type::INTERVAL,
    Type::UUID,
    Type::JSONB,
    Type::JSON,
    Type::INET,
    Type::MACADDR,
    Type::OID,
    Type::CHAR,
    Type::BOOL_ARRAY,
    Type::INT2_ARRAY,
    Type::INT4_ARRAY,
    Type::INT8_ARRAY,
    Type::FLOAT4_ARRAY,
    Type::FLOAT8_ARRAY,
    Type::TEXT_ARRAY,
    Type::BYTEA_ARRAY,
    Type::TIMESTAMPTZ_ARRAY,
    Type::TIMESTAMP_ARRAY,
    Type::DATE_ARRAY,
    Type::UUID_ARRAY,
    Type::JSONB_ARRAY,
];

/// The wire form of every parameter, or `None` if one of them accepts no type we know.
///
/// A `dyn ToSql` cannot be asked which types it accepts (`accepts` needs the concrete type), so
/// each candidate is tried by encoding the value into the end of `scratch`, which is then cut
/// back: nothing is left behind. This runs on cache misses and one-off statements only; a cache
/// hit encodes straight into its `Bind`.
pub(crate) fn infer(params: &[Param<'_>], scratch: &mut BytesMut) -> Option<Vec<Wire>> {
    params.iter().map(|p| infer_one(*p, scratch)).collect()
}

/// The wire form of each parameter, `None` for those that accept no type we know: the values
/// beside a custom one keep the form [`infer`] gives them while the server names the rest.
pub(crate) fn infer_each(params: &[Param<'_>], scratch: &mut BytesMut) -> Vec<Option<Wire>> {
    params.iter().map(|p| infer_one(*p, scratch)).collect()
}

fn infer_one(param: Param<'_>, scratch: &mut BytesMut) -> Option<Wire> {
    if accepts(param, &Type::TEXT, scratch) {
        return Some(Wire::Text);
    }
    CANDIDATES
        .iter()
        .find(|t| accepts(param, t, scratch))
        .map(|t| Wire::Binary(t.clone()))
}

fn accepts(param: Param<'_>, ty: &Type, scratch: &mut BytesMut) -> bool {
    let mark = scratch.len();
    // A user's `ToSql` may panic after it wrote: what it wrote must go with the unwinding,
    // or it is sent with the next request (see `query::all_or_nothing`).
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        param.to_sql_checked(ty, &mut *scratch)
    }));
    scratch.truncate(mark);
    let result = result.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    match result {
        Ok(_) => true,
        // Accepted, but this value failed to encode: the real Bind will report it.
        Err(e) => !e.is::<WrongType>(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_rust_types_get_their_natural_postgres_type() {
        let (string, bytes, ints, strs) =
            (String::from("x"), vec![1u8, 2], vec![1i64, 2], vec!["a"]);
        let cases: Vec<(Param<'_>, Wire)> = vec![
            (&true, Wire::Binary(Type::BOOL)),
            (&1i16, Wire::Binary(Type::INT2)),
            (&1i32, Wire::Binary(Type::INT4)),
            (&1i64, Wire::Binary(Type::INT8)),
            (&1.0f32, Wire::Binary(Type::FLOAT4)),
            (&1.0f64, Wire::Binary(Type::FLOAT8)),
            (&"x", Wire::Text),
            (&string, Wire::Text),
            (&None::<i32>, Wire::Binary(Type::INT4)),
            (&bytes, Wire::Binary(Type::BYTEA)),
            (&ints, Wire::Binary(Type::INT8_ARRAY)),
            (&strs, Wire::Binary(Type::TEXT_ARRAY)),
            (
                &std::time::SystemTime::UNIX_EPOCH,
                Wire::Binary(Type::TIMESTAMPTZ),
            ),
            (&7u32, Wire::Binary(Type::OID)),
        ];
        for (i, (param, want)) in cases.into_iter().enumerate() {
            let mut scratch = BytesMut::from(&b"kept"[..]);
            assert_eq!(infer(&[param], &mut scratch), Some(vec![want]), "case {i}");
            assert_eq!(&scratch[..], b"kept");
        }
    }

    #[test]
    fn an_unknown_type_makes_the_whole_statement_ask_the_server() {
        #[derive(Debug)]
        struct Custom;
        impl postgres_types::ToSql for Custom {
            fn to_sql(
                &self,
                _: &Type,
                _: &mut bytes::BytesMut,
            ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>>
            {
                Ok(postgres_types::IsNull::Yes)
            }
            fn accepts(ty: &Type) -> bool {
                ty.name() == "my_enum"
            }
            postgres_types::to_sql_checked!();
        }
        let mut scratch = BytesMut::new();
        assert_eq!(infer(&[&1i32, &Custom], &mut scratch), None);
        assert_eq!(infer(&[], &mut scratch), Some(vec![]));
        assert!(scratch.is_empty());
    }
}

//! Types the client does not know by OID (enums, composites, domains, ranges, extensions' types,
//! arrays of them), looked up in the server's catalogs and cached per connection.
//!
//! # When the lookup runs
//!
//! A built-in OID maps to its [`Type`] with no lookup: [`Type::from_oid`]. Any other OID first
//! becomes a *placeholder* ([`placeholder`]) where a `RowDescription` or `ParameterDescription`
//! is parsed; the placeholder is replaced from the connection's [`TypeCache`] when the reply is
//! complete, and only OIDs the cache does not hold cost a lookup: one catalog query
//! ([`LOOKUP_SQL`]) that returns the whole closure (a composite's fields, a domain's base, an
//! array's element, a range's or multirange's subtype) in one round trip. So a statement whose
//! types are all built-in never pays anything beyond the placeholder check, and a custom type
//! costs one round trip per connection (until `DISCARD ALL` / `DEALLOCATE ALL` or
//! [`Client::clear_statement_cache`](crate::Client::clear_statement_cache) forgets it).
//!
//! Where the lookup runs, and why it keeps the connection in step:
//! - `prepare`, `query`, `execute`, `query_typed`: after the call's own reply has been read to its
//!   `ReadyForQuery`, as a request of its own (settle-before-write applies as for any request:
//!   a dropped future leaves an owed reply the next call discards).
//! - a row stream: inside the stream's open extended-protocol sequence, on a named portal, queued
//!   as soon as the `RowDescription` arrives (see `row_stream.rs`), so no `Sync` is sent early.
//! - a pipeline: [`Pipeline::process`](crate::Pipeline::process) cannot send a request while
//!   later operations are owed, so it only patches from the cache;
//!   [`Pipeline::end`](crate::Pipeline::end) looks up what is left once every reply is in.
//!
//! The lookup runs inside the caller's transaction when there is one: it reads only catalogs, so
//! it changes nothing, but an error in it (a `statement_timeout` of a few microseconds) aborts
//! that transaction like any other statement's.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::BytesMut;
use postgres_types::{Field, Kind, ToSql, Type};

use crate::{Column, Error, Row};

/// The schema name given to placeholders: no real schema can be called this, since
/// PostgreSQL cuts identifiers to 63 bytes and this is longer. (A shorter one, even with spaces
/// and parentheses, can be a quoted schema's name: `"(type not looked up)"` was, and the types
/// in it were then taken for placeholders, their statements never cached.)
const PLACEHOLDER_SCHEMA: &str =
    "(not looked up: a type this connection has not read from the catalog)";

/// How deep a type may nest (array of composite of domain of ...). PostgreSQL has no cycles
/// here; a reply that claims one is refused rather than followed for ever.
const MAX_DEPTH: usize = 64;

/// The catalog query: every type reachable from the OIDs in `$1`, with what is needed to build
/// its [`Kind`]. Every function, operator and type is schema-qualified, so nothing a user puts
/// on the `search_path` runs in it: an unqualified `unnest(oid[])` would lose to a user's
/// `public.unnest(oid[])`, an exact match (the CVE-2018-1058 pattern).
///
/// A multirange (PostgreSQL 14+) is found in `pg_range` by its `rngmultitypid`, read through
/// `to_jsonb` because older servers have no such column and would refuse the query; joined
/// by `rngtypid` alone, it had no subtype and became `Kind::Simple`, where a built-in
/// multirange is `Kind::Multirange(subtype)`.
pub(crate) const LOOKUP_SQL: &str = "\
WITH RECURSIVE closure(oid) AS (
    SELECT pg_catalog.unnest($1::pg_catalog.oid[])
  UNION
    SELECT refs.oid
    FROM closure c
    JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) c.oid
    CROSS JOIN LATERAL (
        SELECT t.typelem AS oid WHERE t.typelem OPERATOR(pg_catalog.<>) 0
      UNION ALL SELECT t.typbasetype WHERE t.typbasetype OPERATOR(pg_catalog.<>) 0
      UNION ALL SELECT r.rngsubtype FROM pg_catalog.pg_range r
          WHERE r.rngtypid OPERATOR(pg_catalog.=) t.oid
             OR (t.typtype OPERATOR(pg_catalog.=) 'm'
                 AND (pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->>) 'rngmultitypid')
                     ::pg_catalog.oid OPERATOR(pg_catalog.=) t.oid)
      UNION ALL SELECT a.atttypid FROM pg_catalog.pg_attribute a
          WHERE t.typrelid OPERATOR(pg_catalog.<>) 0
            AND a.attrelid OPERATOR(pg_catalog.=) t.typrelid
            AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
    ) refs
)
SELECT t.oid, t.typname::pg_catalog.text, n.nspname::pg_catalog.text,
       t.typtype::pg_catalog.text, t.typelem,
       coalesce(r.rngsubtype, 0::pg_catalog.oid), t.typbasetype,
       ARRAY(SELECT e.enumlabel::pg_catalog.text FROM pg_catalog.pg_enum e
             WHERE e.enumtypid OPERATOR(pg_catalog.=) t.oid ORDER BY e.enumsortorder),
       ARRAY(SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_attribute a
             WHERE t.typrelid OPERATOR(pg_catalog.<>) 0
               AND a.attrelid OPERATOR(pg_catalog.=) t.typrelid
               AND a.attnum OPERATOR(pg_catalog.>) 0
               AND NOT a.attisdropped ORDER BY a.attnum),
       ARRAY(SELECT a.atttypid FROM pg_catalog.pg_attribute a
             WHERE t.typrelid OPERATOR(pg_catalog.<>) 0
               AND a.attrelid OPERATOR(pg_catalog.=) t.typrelid
               AND a.attnum OPERATOR(pg_catalog.>) 0
               AND NOT a.attisdropped ORDER BY a.attnum)
FROM pg_catalog.pg_type t
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) t.typnamespace
LEFT JOIN pg_catalog.pg_range r ON r.rngtypid OPERATOR(pg_catalog.=) t.oid
    OR (t.typtype OPERATOR(pg_catalog.=) 'm'
        AND (pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->>) 'rngmultitypid')
            ::pg_catalog.oid OPERATOR(pg_catalog.=) t.oid)
WHERE t.oid OPERATOR(pg_catalog.=) ANY (SELECT oid FROM closure)";

/// A type for `oid` that says it has not been looked up yet. Its values can still be read raw
/// with [`Row::get_raw`].
pub(crate) fn placeholder(oid: u32) -> Type {
    Type::new(
        format!("oid_{oid}"),
        oid,
        Kind::Simple,
        PLACEHOLDER_SCHEMA.into(),
    )
}

/// Whether `ty` is a [`placeholder`]. Built-in types answer with one string comparison of
/// unequal lengths.
pub(crate) fn is_placeholder(ty: &Type) -> bool {
    ty.schema() == PLACEHOLDER_SCHEMA
}

/// The types this connection has looked up, by OID.
#[derive(Debug, Default)]
pub(crate) struct TypeCache {
    types: HashMap<u32, Type>,
    /// How many times the cache was cleared: a statement records the generation its types
    /// were checked at, and one from an older generation may hold stale definitions.
    generation: u64,
}

impl TypeCache {
    pub(crate) fn clear(&mut self) {
        self.types.clear();
        self.generation += 1;
    }

    /// Moves on with each [`TypeCache::clear`] (see `Statement::types_checked_at`).
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// The placeholders among `types` whose OID the cache does not hold, deduplicated.
    pub(crate) fn missing<'a>(&self, types: impl IntoIterator<Item = &'a Type>) -> Vec<u32> {
        let mut oids: Vec<u32> = types
            .into_iter()
            .filter(|t| is_placeholder(t) && !self.types.contains_key(&t.oid()))
            .map(Type::oid)
            .collect();
        oids.sort_unstable();
        oids.dedup();
        oids
    }

    /// `ty` with its placeholder replaced, if the cache has the type.
    pub(crate) fn resolve(&self, ty: &Type) -> Option<Type> {
        if is_placeholder(ty) {
            self.types.get(&ty.oid()).cloned()
        } else {
            None
        }
    }

    /// `columns` with the placeholders the cache can replace replaced, or `None` if there is
    /// nothing to replace (the columns are shared, so they are copied only when one changes).
    pub(crate) fn resolve_columns(&self, columns: &Arc<[Column]>) -> Option<Arc<[Column]>> {
        if !columns.iter().any(|c| self.resolve(c.type_()).is_some()) {
            return None;
        }
        Some(
            columns
                .iter()
                .map(|c| match self.resolve(c.type_()) {
                    Some(t) => c.with_type(t),
                    None => c.clone(),
                })
                .collect(),
        )
    }

    /// Replaces the placeholders in `params` the cache holds.
    pub(crate) fn resolve_params(&self, params: &mut [Type]) {
        for p in params {
            if let Some(t) = self.resolve(p) {
                *p = t;
            }
        }
    }

    /// Replaces the placeholders of a complete reply that the cache holds.
    pub(crate) fn resolve_reply(&self, reply: &mut crate::query::Reply) {
        // Only a described reply can name a type the connection did not know: a prepared or
        // cached statement's reply costs this one branch.
        if !reply.described && reply.params.is_none() {
            return;
        }
        if let Some(columns) = self.resolve_columns(&reply.columns()) {
            reply.set_columns(columns);
        }
        if let Some(params) = &mut reply.params {
            self.resolve_params(params);
        }
    }

    /// Adds the types described by the rows of [`LOOKUP_SQL`].
    pub(crate) fn insert_rows(&mut self, rows: &[Row]) -> Result<(), Error> {
        let mut described = HashMap::with_capacity(rows.len());
        for row in rows {
            let d = Described::from_row(row)?;
            described.insert(d.oid, d);
        }
        let oids: Vec<u32> = described.keys().copied().collect();
        for oid in oids {
            if Type::from_oid(oid).is_none() {
                let ty = self.build(oid, &described, 0)?;
                self.types.insert(oid, ty);
            }
        }
        Ok(())
    }

    /// The [`Type`] for `oid`, building what it refers to first.
    fn build(
        &mut self,
        oid: u32,
        described: &HashMap<u32, Described>,
        depth: usize,
    ) -> Result<Type, Error> {
        if let Some(t) = Type::from_oid(oid) {
            return Ok(t);
        }
        if let Some(t) = self.types.get(&oid) {
            return Ok(t.clone());
        }
        if depth > MAX_DEPTH {
            return Err(Error::protocol(format!(
                "type {oid} nests more than {MAX_DEPTH} levels deep in the server's catalog \
                 (a cycle?); its values can still be read with Row::get_raw"
            )));
        }
        let Some(d) = described.get(&oid) else {
            // The catalog no longer has it (dropped concurrently): keep the placeholder.
            return Ok(placeholder(oid));
        };
        let mut sub = |o| self.build(o, described, depth + 1);
        let kind = match d.typtype.as_str() {
            "e" => Kind::Enum(d.labels.clone()),
            "p" => Kind::Pseudo,
            "d" => Kind::Domain(sub(d.basetype)?),
            "c" => Kind::Composite(
                d.field_names
                    .iter()
                    .zip(&d.field_types)
                    .map(|(name, &t)| Ok(Field::new(name.clone(), sub(t)?)))
                    .collect::<Result<_, Error>>()?,
            ),
            "r" => Kind::Range(sub(d.subtype)?),
            "m" if d.subtype != 0 => Kind::Multirange(sub(d.subtype)?),
            _ if d.elem != 0 => Kind::Array(sub(d.elem)?),
            _ => Kind::Simple,
        };
        let ty = Type::new(d.name.clone(), oid, kind, d.schema.clone());
        self.types.insert(oid, ty.clone());
        Ok(ty)
    }
}

/// One row of [`LOOKUP_SQL`].
struct Described {
    oid: u32,
    name: String,
    schema: String,
    typtype: String,
    elem: u32,
    subtype: u32,
    basetype: u32,
    labels: Vec<String>,
    field_names: Vec<String>,
    field_types: Vec<u32>,
}

impl Described {
    fn from_row(row: &Row) -> Result<Described, Error> {
        let d = Described {
            oid: row.get(0)?,
            name: row.get(1)?,
            schema: row.get(2)?,
            typtype: row.get(3)?,
            elem: row.get(4)?,
            subtype: row.get(5)?,
            basetype: row.get(6)?,
            labels: row.get(7)?,
            field_names: row.get(8)?,
            field_types: row.get(9)?,
        };
        if d.field_names.len() != d.field_types.len() {
            return Err(Error::protocol(format!(
                "the catalog described type {} with {} field names and {} field types",
                d.name,
                d.field_names.len(),
                d.field_types.len()
            )));
        }
        Ok(d)
    }
}

/// The portal a row stream's lookup runs on: the stream's own rows come from the unnamed
/// portal, which a `Bind` of the unnamed portal would destroy.
const STREAM_LOOKUP_PORTAL: &str = "slipstream_type_lookup";

/// Appends the lookup of `oids` for a row stream, without `Sync` (the stream's open
/// extended-protocol sequence must not be ended): `Parse` of the unnamed statement (the
/// stream's portal keeps its own copy of its plan), `Bind` + `Describe` + `Execute` +
/// `Close` of a named portal, `Flush`. The replies: `ParseComplete`, `BindComplete`,
/// `RowDescription`, `DataRow`s, `CommandComplete`, `CloseComplete`. On error nothing is left
/// in `buf`.
pub(crate) fn encode_stream_lookup(buf: &mut BytesMut, oids: &[u32]) -> Result<(), Error> {
    use postgres_protocol::message::frontend;
    let mark = buf.len();
    let encoded = (|| {
        frontend::parse("", LOOKUP_SQL, [Type::OID_ARRAY.oid()], buf)?;
        frontend::bind(
            STREAM_LOOKUP_PORTAL,
            "",
            [1],
            [oids],
            |oids, buf| match oids.to_sql(&Type::OID_ARRAY, buf) {
                Ok(_) => Ok(postgres_protocol::IsNull::No),
                Err(e) => Err(e),
            },
            Some(1),
            buf,
        )
        .map_err(|e| match e {
            frontend::BindError::Conversion(e) => std::io::Error::other(e),
            frontend::BindError::Serialization(e) => e,
        })?;
        frontend::describe(b'P', STREAM_LOOKUP_PORTAL, buf)?;
        frontend::execute(STREAM_LOOKUP_PORTAL, 0, buf)?;
        frontend::close(b'P', STREAM_LOOKUP_PORTAL, buf)?;
        frontend::flush(buf);
        Ok::<(), std::io::Error>(())
    })();
    encoded.map_err(|e| {
        buf.truncate(mark);
        Error::protocol(format!("cannot encode the type lookup: {e}"))
    })
}

/// Replaces the placeholders in `rows`' (shared) columns with `columns`.
pub(crate) fn patch_rows(rows: &mut [Row], columns: &Arc<[Column]>) {
    for row in rows {
        row.set_columns(columns.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_told_apart_from_real_types() {
        assert!(
            PLACEHOLDER_SCHEMA.len() > 63,
            "a schema could have the name"
        );
        assert!(is_placeholder(&placeholder(16385)));
        assert!(!is_placeholder(&Type::INT4));
        assert!(!is_placeholder(&Type::new(
            "mood".into(),
            16385,
            Kind::Enum(vec!["ok".into()]),
            "public".into()
        )));
        let cache = TypeCache::default();
        assert_eq!(
            cache.missing([
                &placeholder(2),
                &Type::TEXT,
                &placeholder(2),
                &placeholder(1)
            ]),
            vec![1, 2]
        );
    }
}

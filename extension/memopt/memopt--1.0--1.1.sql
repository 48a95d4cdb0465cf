-- memopt 1.1: fast lookups that check the caller's copy of the table's columns
\echo Use "ALTER EXTENSION memopt UPDATE TO '1.1'" to load this file. \quit

-- The table's live columns and their layout, read from one relation descriptor under the
-- table's lock (get.c).  A client decodes memopt.get's rows with these names and passes the
-- layout to the three-argument forms below.
CREATE FUNCTION memopt.columns(tbl regclass, OUT attnum smallint, OUT name text,
                               OUT type oid, OUT typmod integer, OUT layout bigint)
RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'memopt_columns' LANGUAGE C STRICT STABLE PARALLEL RESTRICTED;

-- As the two-argument forms, but refused (SQLSTATE 0A000, "resolve it again") when the table's
-- columns are no longer those memopt.columns returned with `layout`: a reply carries each
-- column's type, not its name or number, so a rename, or a column dropped and one of the same
-- type added, would otherwise decode under the old names.
CREATE FUNCTION memopt.get(tbl regclass, key bigint, layout bigint) RETURNS record
    AS 'MODULE_PATHNAME', 'memopt_get_int8' LANGUAGE C STRICT STABLE PARALLEL RESTRICTED;
CREATE FUNCTION memopt.get(tbl regclass, key text, layout bigint) RETURNS record
    AS 'MODULE_PATHNAME', 'memopt_get_text' LANGUAGE C STRICT STABLE PARALLEL RESTRICTED;
CREATE FUNCTION memopt.get(tbl regclass, key uuid, layout bigint) RETURNS record
    AS 'MODULE_PATHNAME', 'memopt_get_uuid' LANGUAGE C STRICT STABLE PARALLEL RESTRICTED;
CREATE FUNCTION memopt.get_many(tbl regclass, keys bigint[], layout bigint) RETURNS record[]
    AS 'MODULE_PATHNAME', 'memopt_get_many_int8' LANGUAGE C STRICT STABLE PARALLEL RESTRICTED;
CREATE FUNCTION memopt.get_many(tbl regclass, keys text[], layout bigint) RETURNS record[]
    AS 'MODULE_PATHNAME', 'memopt_get_many_text' LANGUAGE C STRICT STABLE PARALLEL RESTRICTED;
CREATE FUNCTION memopt.get_many(tbl regclass, keys uuid[], layout bigint) RETURNS record[]
    AS 'MODULE_PATHNAME', 'memopt_get_many_uuid' LANGUAGE C STRICT STABLE PARALLEL RESTRICTED;

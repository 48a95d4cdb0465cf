-- memopt 1.1: fast lookups that check the caller's copy of the table's columns
\echo Use "ALTER EXTENSION memopt UPDATE TO '1.1'" to load this file. \quit

-- The schema must belong to the installer or another superuser.  CREATE EXTENSION takes an
-- existing schema memopt as it is, and its owner (a database owner who made it first, say)
-- could rename it and make a memopt of her own: the functions below, and every client, call
-- memopt's functions by that name, enable_read as its caller, a superuser too.  A superuser
-- owner gains nothing by that she does not have; and pg_restore by another superuser than the
-- dump's creates the schema, gives it to its old owner, then runs CREATE EXTENSION, which
-- must work.  No object is created here, so a database installed before this check holds the
-- same objects (docs/memopt.md says how to check one).
DO $memopt$
DECLARE
    owner pg_catalog.text;
    super pg_catalog.bool;
BEGIN
    SELECT pg_catalog.pg_get_userbyid(n.nspowner)::pg_catalog.text, r.rolsuper INTO owner, super
      FROM pg_catalog.pg_namespace n
      LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
     WHERE n.nspname OPERATOR(pg_catalog.=) 'memopt';
    IF owner IS NULL OR NOT (super OR owner OPERATOR(pg_catalog.=) CURRENT_USER::pg_catalog.text) THEN
        RAISE EXCEPTION 'memopt: schema memopt belongs to role %, who is not a superuser, not to %, who installs memopt',
                coalesce(owner, '(none)'), CURRENT_USER
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Its owner could put functions of theirs in the place of memopt''s. Drop the schema, or make a superuser its owner (ALTER SCHEMA memopt OWNER TO ...), and install again.';
    END IF;
    -- Nor may any other role create there, or own anything there: her memopt.enable_read(text)
    -- is what memopt.enable_read('t') calls (an unknown literal prefers text to regclass).
    SELECT coalesce(pg_catalog.pg_get_userbyid(a.grantee)::pg_catalog.text, 'PUBLIC') INTO owner
      FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
     WHERE n.nspname OPERATOR(pg_catalog.=) 'memopt'
       AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_roles r
                        WHERE r.oid OPERATOR(pg_catalog.=) a.grantee AND r.rolsuper)
     LIMIT 1;
    IF owner IS NOT NULL THEN
        RAISE EXCEPTION 'memopt: role %, who is not a superuser, may create objects in schema memopt', owner
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Such a role could put functions of theirs in the place of memopt''s. REVOKE CREATE ON SCHEMA memopt FROM that role, and install again.';
    END IF;
    SELECT pg_catalog.pg_get_userbyid(o.owner)::pg_catalog.text INTO owner
      FROM (SELECT proowner AS owner FROM pg_catalog.pg_proc p, pg_catalog.pg_namespace n
             WHERE p.pronamespace OPERATOR(pg_catalog.=) n.oid
               AND n.nspname OPERATOR(pg_catalog.=) 'memopt'
            UNION ALL
            SELECT relowner FROM pg_catalog.pg_class c, pg_catalog.pg_namespace n
             WHERE c.relnamespace OPERATOR(pg_catalog.=) n.oid
               AND n.nspname OPERATOR(pg_catalog.=) 'memopt'
            UNION ALL
            SELECT typowner FROM pg_catalog.pg_type t, pg_catalog.pg_namespace n
             WHERE t.typnamespace OPERATOR(pg_catalog.=) n.oid
               AND n.nspname OPERATOR(pg_catalog.=) 'memopt'
            UNION ALL
            SELECT oprowner FROM pg_catalog.pg_operator o, pg_catalog.pg_namespace n
             WHERE o.oprnamespace OPERATOR(pg_catalog.=) n.oid
               AND n.nspname OPERATOR(pg_catalog.=) 'memopt') o
     WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles r
                        WHERE r.oid OPERATOR(pg_catalog.=) o.owner AND r.rolsuper)
     LIMIT 1;
    IF owner IS NOT NULL THEN
        RAISE EXCEPTION 'memopt: schema memopt holds objects of role %, who is not a superuser', owner
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'They could stand in the place of memopt''s functions. Drop them (or the schema), and install again.';
    END IF;
END
$memopt$;

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

-- memopt 1.0: memoptimized primary-key lookups
\echo Use "CREATE EXTENSION memopt" to load this file. \quit

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

CREATE FUNCTION memopt.sync_row() RETURNS trigger
    AS 'MODULE_PATHNAME', 'memopt_sync_row' LANGUAGE C;
CREATE FUNCTION memopt.sync_truncate() RETURNS trigger
    AS 'MODULE_PATHNAME', 'memopt_sync_truncate' LANGUAGE C;
-- Not for PUBLIC: attached by hand to other tables they could only mislead (see triggers.c).
REVOKE ALL ON FUNCTION memopt.sync_row(), memopt.sync_truncate() FROM PUBLIC;

-- Every C function below that touches a table checks in C that the caller owns it.
CREATE FUNCTION memopt._require_owner(regclass, text) RETURNS void
    AS 'MODULE_PATHNAME', 'memopt_require_owner_sql' LANGUAGE C STRICT
    SET search_path = pg_catalog, pg_temp;
CREATE FUNCTION memopt._register(regclass) RETURNS void
    AS 'MODULE_PATHNAME', 'memopt_register' LANGUAGE C STRICT
    SET search_path = pg_catalog, pg_temp;
CREATE FUNCTION memopt._unregister(regclass) RETURNS void
    AS 'MODULE_PATHNAME', 'memopt_unregister' LANGUAGE C STRICT
    SET search_path = pg_catalog, pg_temp;

-- The schema holds nothing a role could misuse: every function that changes a table checks
-- in C that the caller owns it (or is a superuser).
GRANT USAGE ON SCHEMA memopt TO PUBLIC;

-- True when both sync triggers exist exactly as enable_read made them (function, events,
-- ALWAYS, no WHEN clause, no column list): only then is every write seen.
CREATE FUNCTION memopt.is_enabled(tbl regclass) RETURNS boolean
    AS 'MODULE_PATHNAME', 'memopt_is_enabled' LANGUAGE C STRICT STABLE
    SET search_path = pg_catalog, pg_temp;

-- Drops the sync triggers (anything by their names), then, when install, creates them and
-- makes them fire ALWAYS.  The caller must own the table; runs as the extension's owner.
CREATE FUNCTION memopt._set_triggers(tbl regclass, install boolean) RETURNS void
    AS 'MODULE_PATHNAME', 'memopt_set_triggers' LANGUAGE C STRICT
    SET search_path = pg_catalog, pg_temp;

-- Checks every condition (one error each, in the spirit of Oracle's ORA-621xx), then installs
-- the triggers that keep the store consistent with every write.
CREATE FUNCTION memopt.enable_read(tbl regclass) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r pg_class;
    pk oid;
    col record;
BEGIN
    PERFORM memopt._require_owner(tbl, 'enable_read');
    SELECT * INTO r FROM pg_class WHERE oid = tbl;
    IF r.relkind = 'p' OR r.relispartition THEN
        RAISE EXCEPTION 'memopt: table % is partitioned or a partition', tbl
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Memoptimized reads need a plain table outside any partitioning.';
    END IF;
    IF r.relkind <> 'r' THEN
        RAISE EXCEPTION 'memopt: % is not a table', tbl
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Only ordinary tables can be memoptimized for reads.';
    END IF;
    IF r.relpersistence = 't' THEN
        RAISE EXCEPTION 'memopt: table % is temporary', tbl
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Only permanent and unlogged tables can be memoptimized for reads.';
    END IF;
    IF (SELECT amname FROM pg_am WHERE oid = r.relam) IS DISTINCT FROM 'heap' THEN
        RAISE EXCEPTION 'memopt: table % does not use the heap access method', tbl
            USING ERRCODE = 'feature_not_supported';
    END IF;
    IF EXISTS (SELECT FROM pg_inherits WHERE inhrelid = tbl OR inhparent = tbl) THEN
        RAISE EXCEPTION 'memopt: table % takes part in inheritance', tbl
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Tables with parents or children cannot be memoptimized for reads.';
    END IF;
    IF r.relrowsecurity THEN
        RAISE EXCEPTION 'memopt: table % has row-level security enabled', tbl
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Lookups from the store would bypass the policies.';
    END IF;
    SELECT conindid INTO pk FROM pg_constraint WHERE conrelid = tbl AND contype = 'p';
    IF pk IS NULL THEN
        RAISE EXCEPTION 'memopt: table % has no primary key', tbl
            USING ERRCODE = 'invalid_table_definition',
                  HINT = 'Add a primary key of integer, bigint, smallint, uuid, text or varchar columns.';
    END IF;
    FOR col IN
        SELECT a.attname, a.atttypid, a.attcollation
          FROM pg_index i JOIN pg_attribute a
            ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey::int2[])
         WHERE i.indexrelid = pk
    LOOP
        IF col.atttypid NOT IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype,
                                'uuid'::regtype, 'text'::regtype, 'varchar'::regtype) THEN
            RAISE EXCEPTION 'memopt: primary key column "%" of table % has type %, which is not supported',
                    col.attname, tbl, col.atttypid::regtype
                USING ERRCODE = 'feature_not_supported',
                      HINT = 'Supported key types: smallint, integer, bigint, uuid, text, varchar, and composites of them.';
        END IF;
        IF col.attcollation <> 0 AND NOT (SELECT collisdeterministic FROM pg_collation
                                           WHERE oid = col.attcollation) THEN
            RAISE EXCEPTION 'memopt: primary key column "%" of table % has a nondeterministic collation',
                    col.attname, tbl
                USING ERRCODE = 'feature_not_supported',
                      HINT = 'Equal keys must have equal bytes; use a deterministic collation.';
        END IF;
    END LOOP;
    IF memopt.is_enabled(tbl) THEN
        RAISE NOTICE 'memopt: table % is already enabled for memoptimized reads', tbl;
        RETURN;
    END IF;
    PERFORM memopt._set_triggers(tbl, true);
    PERFORM memopt._register(tbl);
END
$$;

CREATE FUNCTION memopt.disable_read(tbl regclass) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM memopt._require_owner(tbl, 'disable_read');
    IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = tbl
                    AND tgname IN ('memopt_sync', 'memopt_truncate')) THEN
        RAISE NOTICE 'memopt: table % is not enabled for memoptimized reads', tbl;
    END IF;
    PERFORM memopt._set_triggers(tbl, false);
    PERFORM memopt._unregister(tbl);
END
$$;

-- Queues a background fill of the whole table; returns at once (false, with a warning, when
-- the request was rejected).  Progress: populate_state and populate_rows in memopt.stats.
CREATE FUNCTION memopt.populate(regclass) RETURNS boolean
    AS 'MODULE_PATHNAME', 'memopt_populate' LANGUAGE C STRICT
    SET search_path = pg_catalog, pg_temp;

-- Removes the table's rows from the store; the table stays enabled and refills.
CREATE FUNCTION memopt.drop_object(regclass) RETURNS void
    AS 'MODULE_PATHNAME', 'memopt_invalidate_table' LANGUAGE C STRICT
    SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION memopt.table_stats(
    OUT relid oid, OUT lookups bigint, OUT hits bigint, OUT misses bigint,
    OUT misses_not_cached bigint, OUT misses_fenced bigint, OUT misses_invisible bigint,
    OUT misses_isolation bigint, OUT misses_own_write bigint, OUT misses_disabled bigint,
    OUT misses_recovery bigint, OUT misses_uncacheable bigint,
    OUT rows_populated bigint, OUT populate_accepted bigint, OUT populate_rejected bigint,
    OUT invalidations bigint, OUT evictions bigint, OUT entries bigint, OUT bytes_used bigint,
    OUT populate_state text, OUT populate_rows bigint, OUT populate_rows_estimate bigint,
    OUT populate_started timestamptz, OUT populate_finished timestamptz)
RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'memopt_table_stats' LANGUAGE C STRICT VOLATILE;

-- The pool and the table registry: misses_unregistered counts lookups of enabled tables that
-- found no registry slot (all memopt can track were taken), each a miss.
CREATE FUNCTION memopt.pool(OUT capacity_rows bigint, OUT entry_bytes bigint,
                            OUT capacity_bytes bigint, OUT tables_registered int,
                            OUT tables_max int, OUT misses_unregistered bigint)
    AS 'MODULE_PATHNAME', 'memopt_pool' LANGUAGE C STRICT VOLATILE;

CREATE VIEW memopt.stats AS
    SELECT relid::regclass AS "table", lookups, hits, misses,
           misses_not_cached, misses_fenced, misses_invisible, misses_isolation,
           misses_own_write, misses_disabled, misses_recovery, misses_uncacheable,
           rows_populated, populate_accepted, populate_rejected, invalidations, evictions,
           entries, bytes_used, populate_state, populate_rows, populate_rows_estimate,
           populate_finished - populate_started AS populate_duration
      FROM memopt.table_stats();

CREATE VIEW memopt.stats_total AS
    SELECT coalesce(sum(lookups), 0)::bigint + (SELECT misses_unregistered FROM memopt.pool())
             AS lookups,
           coalesce(sum(hits), 0)::bigint AS hits,
           coalesce(sum(misses), 0)::bigint + (SELECT misses_unregistered FROM memopt.pool())
             AS misses,
           coalesce(sum(rows_populated), 0)::bigint AS rows_populated,
           coalesce(sum(populate_accepted), 0)::bigint AS populate_accepted,
           coalesce(sum(populate_rejected), 0)::bigint AS populate_rejected,
           coalesce(sum(invalidations), 0)::bigint AS invalidations,
           coalesce(sum(evictions), 0)::bigint AS evictions,
           coalesce(sum(entries), 0)::bigint AS entries,
           coalesce(sum(bytes_used), 0)::bigint AS bytes_used,
           (SELECT capacity_rows FROM memopt.pool()) AS capacity_rows,
           (SELECT capacity_bytes FROM memopt.pool()) AS capacity_bytes,
           (SELECT misses_unregistered FROM memopt.pool()) AS misses_unregistered
      FROM memopt.table_stats();

-- Fast lookups by primary key (get.c): the row as a composite of the table's row type, NULL
-- when no row matches; get_many returns the rows in the keys' order, NULL where none.  Meant
-- for the protocol's FunctionCall message (no parse, plan or portal) and callable from SQL.
-- They check SELECT privilege on the table (or all its columns) in C and refuse tables with
-- row-level security.  No SET search_path: they resolve no names.
CREATE FUNCTION memopt.get(tbl regclass, key bigint) RETURNS record
    AS 'MODULE_PATHNAME', 'memopt_get_int8' LANGUAGE C STRICT STABLE PARALLEL RESTRICTED;
CREATE FUNCTION memopt.get(tbl regclass, key text) RETURNS record
    AS 'MODULE_PATHNAME', 'memopt_get_text' LANGUAGE C STRICT STABLE PARALLEL RESTRICTED;
CREATE FUNCTION memopt.get(tbl regclass, key uuid) RETURNS record
    AS 'MODULE_PATHNAME', 'memopt_get_uuid' LANGUAGE C STRICT STABLE PARALLEL RESTRICTED;
CREATE FUNCTION memopt.get_many(tbl regclass, keys bigint[]) RETURNS record[]
    AS 'MODULE_PATHNAME', 'memopt_get_many_int8' LANGUAGE C STRICT STABLE PARALLEL RESTRICTED;
CREATE FUNCTION memopt.get_many(tbl regclass, keys text[]) RETURNS record[]
    AS 'MODULE_PATHNAME', 'memopt_get_many_text' LANGUAGE C STRICT STABLE PARALLEL RESTRICTED;
CREATE FUNCTION memopt.get_many(tbl regclass, keys uuid[]) RETURNS record[]
    AS 'MODULE_PATHNAME', 'memopt_get_many_uuid' LANGUAGE C STRICT STABLE PARALLEL RESTRICTED;

//! The fuzzed schema: one enabled table whose primary key can move between two columns, the
//! functions that read it both ways, and the triggers that read it inside writes.
//!
//! `t (a, b, v, p, x)` keeps `b = keys + 1 - a` on every row, so both `a` and `b` are unique and
//! either can become the primary key (`ALTER TABLE t DROP CONSTRAINT t_pkey, ADD PRIMARY KEY
//! (b)`); a stale entry served after such a change returns a different row, which the `a`/`b`
//! part of every answer shows. `x` is dropped and re-added with a new default (a new attribute
//! number and a "missing" value for old tuples); `p` references `par` through a deferred
//! foreign key, so a write setting `p = 99` makes the COMMIT fail after the writes ran.
//!
//! Every comparison reads once through memopt and once with `memopt.enabled = off` in the same
//! statement. The `slow_*` functions are STABLE, so they run on the calling statement's snapshot;
//! their `SET` clause keeps them from being inlined and makes them the normal plan. All readers
//! are PARALLEL SAFE, so under `force_parallel_mode` a whole comparison runs in a parallel
//! worker, whose lookups must see the leader's writes as the leader does.

/// The text of the SQL that (re)creates the schema for `keys` keys (all keys lie in 1..=keys).
pub(crate) fn setup(keys: i32) -> String {
    let n1 = keys + 1;
    format!(
        r#"
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS memopt;
DROP TABLE IF EXISTS t, par CASCADE;
DROP SEQUENCE IF EXISTS fuzz_reads, fuzz_fast_reads;
CREATE SEQUENCE fuzz_reads;
CREATE SEQUENCE fuzz_fast_reads;
CREATE TABLE par (id int PRIMARY KEY);
INSERT INTO par SELECT generate_series(1, 10);
CREATE TABLE t (
    a int NOT NULL,
    b int NOT NULL,
    v text,
    p int REFERENCES par DEFERRABLE INITIALLY DEFERRED,
    x int NOT NULL DEFAULT 0,
    CONSTRAINT t_pkey PRIMARY KEY (a)
);
INSERT INTO t (a, b, v, p) SELECT g, {n1} - g, 'v' || g, 1 FROM generate_series(1, {keys}) g;
-- The whole setup is one implicit transaction: fire the deferred checks before enable_read
-- alters the table.
SET CONSTRAINTS ALL IMMEDIATE;
ANALYZE t;
SELECT memopt.enable_read('t');

-- The normal plan (memopt off), on the caller's snapshot.
CREATE OR REPLACE FUNCTION slow_a(k int) RETURNS text STABLE PARALLEL SAFE LANGUAGE sql
    SET memopt.enabled = off
    AS $$ SELECT v || '/' || b || '/' || x FROM t WHERE a = k $$;
CREATE OR REPLACE FUNCTION slow_b(k int) RETURNS text STABLE PARALLEL SAFE LANGUAGE sql
    SET memopt.enabled = off
    AS $$ SELECT v || '/' || a || '/' || x FROM t WHERE b = k $$;
-- The same with a bigint key (cross-type comparisons, keys beyond the int range).
CREATE OR REPLACE FUNCTION slow_a8(k bigint) RETURNS text STABLE PARALLEL SAFE LANGUAGE sql
    SET memopt.enabled = off
    AS $$ SELECT v || '/' || b || '/' || x FROM t WHERE a = k $$;
CREATE OR REPLACE FUNCTION slow_b8(k bigint) RETURNS text STABLE PARALLEL SAFE LANGUAGE sql
    SET memopt.enabled = off
    AS $$ SELECT v || '/' || a || '/' || x FROM t WHERE b = k $$;
-- The normal plan's whole row for the key of the current primary key, the counterpart of
-- memopt.get (the fast lookup, issue 22).  Which column is the key is read through the
-- catalog caches (to_regclass, pg_get_indexdef), as memopt.get finds it, not through this
-- statement's snapshot: a key moved by DDL that committed after the snapshot was taken is
-- seen by both sides alike once memopt.get has locked the table.
CREATE OR REPLACE FUNCTION slow_row(k bigint) RETURNS text STABLE PARALLEL SAFE LANGUAGE sql
    SET memopt.enabled = off
    AS $$ SELECT t::text FROM t
           WHERE CASE WHEN pg_get_indexdef(to_regclass('t_pkey')) LIKE '%(a)' THEN a = k
                      ELSE b = k END $$;
-- Through memopt from a PL/pgSQL cached plan (generic under force_generic_plan).
CREATE OR REPLACE FUNCTION fastp_a(k int) RETURNS text STABLE PARALLEL SAFE LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
    SELECT v || '/' || b || '/' || x INTO r FROM t WHERE a = k;
    RETURN r;
END $$;
CREATE OR REPLACE FUNCTION fastp_b(k int) RETURNS text STABLE PARALLEL SAFE LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
    SELECT v || '/' || a || '/' || x INTO r FROM t WHERE b = k;
    RETURN r;
END $$;
-- Through memopt from an SQL function the planner may inline into the caller.
CREATE OR REPLACE FUNCTION fasti_a(k int) RETURNS text STABLE PARALLEL SAFE LANGUAGE sql
    AS $$ SELECT v || '/' || b || '/' || x FROM t WHERE a = k $$;
CREATE OR REPLACE FUNCTION fasti_b(k int) RETURNS text STABLE PARALLEL SAFE LANGUAGE sql
    AS $$ SELECT v || '/' || a || '/' || x FROM t WHERE b = k $$;

-- A read inside a writing statement (RETURNING, triggers): VOLATILE, so its statement takes a
-- new snapshot that sees the writer's own changes; both sides still share that snapshot.
-- A mismatch is a NOTICE the fuzzer collects; every call counts two reads in fuzz_reads
-- (a sequence, so rolled-back reads still count).
CREATE OR REPLACE FUNCTION chk(k int) RETURNS text VOLATILE LANGUAGE plpgsql AS $$
DECLARE fa text; sa text; fb text; sb text; fg text; sg text;
BEGIN
    SELECT fastp_a(k), slow_a(k), fastp_b({n1} - k), slow_b({n1} - k) INTO fa, sa, fb, sb;
    PERFORM nextval('fuzz_reads');
    IF fa IS DISTINCT FROM sa OR fb IS DISTINCT FROM sb THEN
        RAISE NOTICE 'memopt-fuzz mismatch: a = %: memopt %, normal plan %; b = %: memopt %, normal plan %',
            k, coalesce(fa, 'NULL'), coalesce(sa, 'NULL'),
            {n1} - k, coalesce(fb, 'NULL'), coalesce(sb, 'NULL');
        RETURN 'MISMATCH';
    END IF;
    -- The fast lookup inside a writing statement (always an own-write miss: the index read
    -- must see the statement's own changes as the normal plan does).
    SELECT memopt.get('t', k)::text, slow_row(k) INTO fg, sg;
    PERFORM nextval('fuzz_fast_reads');
    IF fg IS DISTINCT FROM sg THEN
        RAISE NOTICE 'memopt-fuzz mismatch: memopt.get(t, %): memopt %, normal plan %',
            k, coalesce(fg, 'NULL'), coalesce(sg, 'NULL');
        RETURN 'MISMATCH';
    END IF;
    RETURN 'ok';
END $$;

-- Reads from BEFORE and AFTER row triggers (before and after memopt_sync, which fires
-- between them by name order), when the session sets fuzz.trigger_reads = on.
CREATE OR REPLACE FUNCTION fuzz_trig() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('fuzz.trigger_reads', true) = 'on' THEN
        IF TG_OP IN ('UPDATE', 'DELETE') THEN PERFORM chk(OLD.a); END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN PERFORM chk(NEW.a); END IF;
    END IF;
    IF TG_WHEN = 'AFTER' THEN RETURN NULL; END IF;
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER fuzz_before BEFORE INSERT OR UPDATE OR DELETE ON t
    FOR EACH ROW EXECUTE FUNCTION fuzz_trig();
CREATE TRIGGER fuzz_after AFTER INSERT OR UPDATE OR DELETE ON t
    FOR EACH ROW EXECUTE FUNCTION fuzz_trig();
RESET client_min_messages;
"#
    )
}

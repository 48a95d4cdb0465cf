-- memopt (issue 22): memopt.get and memopt.get_many, the fast lookups.  Same rules as the
-- MemoptLookup scan: hits only where the scan would serve one, misses from the primary-key
-- index under the caller's snapshot, own writes and rolled-back rows never served.

CREATE TABLE g (k bigint PRIMARY KEY, v text, n int);
INSERT INTO g SELECT i, 'v' || i, i * 10 FROM generate_series(1, 100) i;
SELECT memopt.enable_read('g');
SELECT memopt.populate('g');
SELECT wait_populate('g');

-- Counters of g: memopt's and pg_stat's (pg_stat_force_next_flush in a statement of its own flushes this backend's).
CREATE FUNCTION g_counts(OUT hits bigint, OUT misses bigint, OUT own bigint,
                         OUT idx_scan bigint, OUT heap_blks bigint, OUT idx_blks bigint)
LANGUAGE sql AS $$
    SELECT s.hits, s.misses, s.misses_own_write, u.idx_scan,
           coalesce(io.heap_blks_hit, 0) + coalesce(io.heap_blks_read, 0),
           coalesce(io.idx_blks_hit, 0) + coalesce(io.idx_blks_read, 0)
      FROM memopt.stats s, pg_stat_user_tables u, pg_statio_user_tables io
     WHERE s."table" = 'g'::regclass AND u.relid = 'g'::regclass AND io.relid = 'g'::regclass
$$;
CREATE TEMP TABLE before AS SELECT * FROM g_counts();
CREATE FUNCTION g_delta(OUT hits bigint, OUT misses bigint, OUT own bigint,
                        OUT idx_scan bigint, OUT heap_blks bigint, OUT idx_blks bigint)
LANGUAGE sql AS $$
    SELECT n.hits - b.hits, n.misses - b.misses, n.own - b.own, n.idx_scan - b.idx_scan,
           n.heap_blks - b.heap_blks, n.idx_blks - b.idx_blks
      FROM g_counts() n, before b
$$;
-- Call after a statement that flushed this backend's pending statistics (g_flush).
CREATE FUNCTION g_reset() RETURNS void LANGUAGE sql AS $$
    DELETE FROM before;
    INSERT INTO before SELECT * FROM g_counts();
$$;

-- A hit: the whole row, no buffer touched, no index scan counted.
SELECT pg_stat_force_next_flush();
SELECT g_reset();
SELECT memopt.get('g', 42);
SELECT pg_stat_force_next_flush();
SELECT * FROM g_delta();

-- The record carries the row type: it casts back to g's columns.
SELECT (r).k, (r).v, (r).n FROM (SELECT memopt.get('g', 7)::text::g AS r) s;

-- No such key: NULL, a miss read from the index (one index scan, as the scan's child).
SELECT pg_stat_force_next_flush();
SELECT g_reset();
SELECT memopt.get('g', 1000) IS NULL AS absent;
SELECT pg_stat_force_next_flush();
SELECT hits, misses, idx_scan, idx_blks > 0 AS read_index, heap_blks = 0 AS no_heap_page FROM g_delta();

-- Emptied store: the first call misses and fills, the second hits.
SELECT memopt.drop_object('g');
SELECT pg_stat_force_next_flush();
SELECT g_reset();
SELECT memopt.get('g', 5);
SELECT memopt.get('g', 5);
SELECT pg_stat_force_next_flush();
SELECT hits, misses, idx_scan FROM g_delta();

-- Many keys, in the keys' order, NULL for a missing or NULL key.
SELECT memopt.get_many('g', ARRAY[3, 1000, NULL, 1, 3]::bigint[]);
SELECT memopt.get_many('g', '{}'::bigint[]);
SELECT memopt.get(NULL, 1) IS NULL AS null_table, memopt.get('g', NULL::bigint) IS NULL AS null_key;

-- Own writes: a transaction that wrote g reads its own row version, never the store's.
SELECT pg_stat_force_next_flush();
SELECT g_reset();
BEGIN;
UPDATE g SET v = 'mine' WHERE k = 42;
SELECT memopt.get('g', 42);
SELECT memopt.get_many('g', ARRAY[42, 43]::bigint[]);
INSERT INTO g VALUES (500, 'new', 0);
SELECT memopt.get('g', 500);
ROLLBACK;
SELECT pg_stat_force_next_flush();
SELECT hits, own FROM g_delta();
-- Rolled back: the old row again, the inserted one never existed.
SELECT memopt.get('g', 42), memopt.get('g', 500) IS NULL AS gone;

-- A rolled-back insert on another key is never stored or served.
BEGIN;
INSERT INTO g VALUES (600, 'ghost', 0);
ROLLBACK;
SELECT memopt.get('g', 600) IS NULL AS ghost_absent;
SELECT memopt.get('g', 600) IS NULL AS ghost_still_absent;

-- REPEATABLE READ: never served (as the scan), yet the right row.
SELECT pg_stat_force_next_flush();
SELECT g_reset();
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT memopt.get('g', 8);
COMMIT;
SELECT hits FROM g_delta();

-- Keys of another type family, and integer keys out of the column's range.
SELECT memopt.get('g', 'x'::text);
CREATE TABLE gi (k int PRIMARY KEY, v text);
INSERT INTO gi VALUES (1, 'one');
SELECT memopt.enable_read('gi');
SELECT memopt.get('gi', 1), memopt.get('gi', 4294967297) IS NULL AS out_of_range;
SELECT memopt.get('gi', 4294967297) IS NULL AS out_of_range_again;

-- Text and uuid keys.
CREATE TABLE gt (k varchar(20) PRIMARY KEY, v int);
INSERT INTO gt VALUES ('a', 1), ('b', 2);
SELECT memopt.enable_read('gt');
SELECT memopt.get('gt', 'b'), memopt.get('gt', 'b'), memopt.get('gt', 'zz') IS NULL AS absent;
SELECT memopt.get_many('gt', ARRAY['a', 'zz', 'b']);
SELECT memopt.get('gt', 7::bigint);
CREATE TABLE gu (k uuid PRIMARY KEY, v int);
INSERT INTO gu VALUES ('00000000-0000-0000-0000-000000000001', 1);
SELECT memopt.enable_read('gu');
SELECT memopt.get('gu', '00000000-0000-0000-0000-000000000001'::uuid);
SELECT memopt.get_many('gu', ARRAY['00000000-0000-0000-0000-000000000001'::uuid]);

-- Dropped and added columns: the row in the table's current layout.
ALTER TABLE gi ADD COLUMN extra int DEFAULT 7;
ALTER TABLE gi DROP COLUMN v;
SELECT memopt.get('gi', 1), memopt.get('gi', 1);

-- Refused: a table not enabled, a composite key, something not a table, a missing OID.
CREATE TABLE plain (k int PRIMARY KEY);
SELECT memopt.get('plain', 1);
CREATE TABLE comp (a int, b int, PRIMARY KEY (a, b));
SELECT memopt.enable_read('comp');
SELECT memopt.get('comp', 1);
SELECT memopt.get('g_pkey', 1);
SELECT memopt.get(1::oid::regclass, 1);

-- Privileges: SELECT on the table, or on every column; nothing less.
CREATE ROLE regress_memopt_reader;
SET ROLE regress_memopt_reader;
SELECT memopt.get('g', 1);
SELECT memopt.get_many('g', ARRAY[1]::bigint[]);
RESET ROLE;
GRANT SELECT (k, v) ON g TO regress_memopt_reader;
SET ROLE regress_memopt_reader;
SELECT memopt.get('g', 1);
RESET ROLE;
GRANT SELECT (n) ON g TO regress_memopt_reader;
SET ROLE regress_memopt_reader;
SELECT memopt.get('g', 1);
RESET ROLE;
REVOKE SELECT (k, v, n) ON g FROM regress_memopt_reader;
GRANT SELECT ON g TO regress_memopt_reader;
SET ROLE regress_memopt_reader;
SELECT memopt.get('g', 2);
RESET ROLE;
REVOKE SELECT ON g FROM regress_memopt_reader;

-- Row-level security switched on after enable_read: refused, even for the owner.
ALTER TABLE gt ENABLE ROW LEVEL SECURITY;
SELECT memopt.get('gt', 'a');
SELECT memopt.get_many('gt', ARRAY['a']);
ALTER TABLE gt DISABLE ROW LEVEL SECURITY;
SELECT memopt.get('gt', 'a');

DROP TABLE g, gi, gt, gu, plain, comp;
DROP FUNCTION g_counts(), g_delta(), g_reset();
DROP ROLE regress_memopt_reader;

-- memopt 1.1: the caller's copy of the columns.  memopt.columns gives the live columns and
-- their layout, read together; the three-argument forms refuse a call whose layout is no
-- longer the table's, where the two-argument forms hand the row out by position.
SELECT extversion FROM pg_extension WHERE extname = 'memopt';
CREATE TABLE lay (k bigint PRIMARY KEY, a text, b text, v varchar(10));
INSERT INTO lay VALUES (1, 'a1', 'b1', 'v1');
SELECT memopt.enable_read('lay');
SELECT attnum, name, type::regtype, typmod FROM memopt.columns('lay') ORDER BY attnum;
SELECT count(DISTINCT layout) AS one_layout FROM memopt.columns('lay');
CREATE TEMP TABLE layouts (step text, layout bigint);
INSERT INTO layouts SELECT DISTINCT 'created', layout FROM memopt.columns('lay');
SELECT memopt.get('lay', 1, (SELECT layout FROM layouts WHERE step = 'created'));
SELECT memopt.get_many('lay', ARRAY[1, 2]::bigint[], (SELECT layout FROM layouts WHERE step = 'created'));
-- A column dropped and one of the same type and name added: the same sequence of types.
ALTER TABLE lay DROP COLUMN a;
ALTER TABLE lay ADD COLUMN a text DEFAULT 'new a';
SELECT memopt.get('lay', 1);
SELECT memopt.get('lay', 1, (SELECT layout FROM layouts WHERE step = 'created'));
SELECT memopt.get_many('lay', ARRAY[1]::bigint[], (SELECT layout FROM layouts WHERE step = 'created'));
INSERT INTO layouts SELECT DISTINCT 're-added', layout FROM memopt.columns('lay');
SELECT attnum, name FROM memopt.columns('lay') ORDER BY attnum;
SELECT memopt.get('lay', 1, (SELECT layout FROM layouts WHERE step = 're-added'));
-- A rename, a typmod: each refused; renamed back, the layout is the one before again.
ALTER TABLE lay RENAME COLUMN b TO b2;
SELECT memopt.get('lay', 1, (SELECT layout FROM layouts WHERE step = 're-added'));
ALTER TABLE lay RENAME COLUMN b2 TO b;
SELECT memopt.get('lay', 1, (SELECT layout FROM layouts WHERE step = 're-added'));
ALTER TABLE lay ALTER COLUMN v TYPE varchar(20);
SELECT memopt.get('lay', 1, (SELECT layout FROM layouts WHERE step = 're-added'));
SELECT count(DISTINCT layout) AS layouts FROM layouts;
-- Refused as memopt.get refuses: no such relation, not a table, no privilege.
SELECT * FROM memopt.columns(0);
CREATE VIEW lay_view AS SELECT * FROM lay;
SELECT * FROM memopt.columns('lay_view');
CREATE ROLE regress_memopt_columns;
SET ROLE regress_memopt_columns;
SELECT * FROM memopt.columns('lay');
RESET ROLE;
DROP ROLE regress_memopt_columns;
DROP VIEW lay_view;
DROP TABLE lay, layouts;

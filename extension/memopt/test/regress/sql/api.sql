-- memopt: conditions, EXPLAIN, hits and misses, writes, populate, statistics.

-- Every violated condition gets its own error.
CREATE TABLE no_pk (k int, v text);
SELECT memopt.enable_read('no_pk');
CREATE TABLE float_pk (k float8 PRIMARY KEY);
SELECT memopt.enable_read('float_pk');
CREATE TABLE parted (k int PRIMARY KEY) PARTITION BY RANGE (k);
CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (10);
SELECT memopt.enable_read('parted');
SELECT memopt.enable_read('parted_1');
CREATE TABLE parent (k int PRIMARY KEY);
CREATE TABLE child () INHERITS (parent);
SELECT memopt.enable_read('parent');
CREATE TABLE rls (k int PRIMARY KEY);
ALTER TABLE rls ENABLE ROW LEVEL SECURITY;
SELECT memopt.enable_read('rls');
CREATE VIEW a_view AS SELECT 1 AS k;
SELECT memopt.enable_read('a_view');
CREATE TEMP TABLE tmp (k int PRIMARY KEY);
SELECT memopt.enable_read('tmp');
CREATE COLLATION case_insensitive (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE TABLE ci_pk (k text COLLATE case_insensitive PRIMARY KEY);
SELECT memopt.enable_read('ci_pk');
SELECT memopt.populate('no_pk');

CREATE TABLE t (k int PRIMARY KEY, v text, n numeric);
INSERT INTO t SELECT g, 'v' || g, g FROM generate_series(1, 1000) g;
ANALYZE t;
SELECT memopt.enable_read('t');
SELECT memopt.enable_read('t');
SELECT memopt.is_enabled('t');

-- The node is offered only for the primary-key equality shape.
EXPLAIN (COSTS OFF) SELECT v FROM t WHERE k = 5;
EXPLAIN (COSTS OFF) SELECT v FROM t WHERE 5 = k;
EXPLAIN (COSTS OFF) SELECT v FROM t WHERE k = 5 AND v = 'x';
EXPLAIN (COSTS OFF) SELECT v FROM t WHERE k = 5 FOR UPDATE;
EXPLAIN (COSTS OFF) SELECT ctid FROM t WHERE k = 5;
EXPLAIN (COSTS OFF) SELECT v FROM t WHERE k = 5::bigint;
EXPLAIN (COSTS OFF) SELECT v FROM t WHERE k IN (1, 2);
EXPLAIN (COSTS OFF) UPDATE t SET v = v WHERE k = 5;
-- Key values computed from parameters are served (generic plans keep `$1 * 2 + 1`, as
-- PL/pgSQL's cached plans do); volatile ones, other columns and subqueries are not.
SET plan_cache_mode = force_generic_plan;
PREPARE computed(int) AS SELECT v FROM t WHERE k = $1 * 2 + 1;
EXPLAIN (COSTS OFF) EXECUTE computed(20);
EXPLAIN (COSTS OFF) SELECT v FROM t WHERE k = (random() * 10)::int;
EXPLAIN (COSTS OFF) SELECT v FROM t WHERE k = n::int;
EXPLAIN (COSTS OFF) SELECT v FROM t WHERE k = (SELECT 5);
CREATE FUNCTION plpgsql_lookup(i int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
    SELECT v INTO r FROM t WHERE k = i * 2 + 1;
    RETURN r;
END $$;
SELECT plpgsql_lookup(20), plpgsql_lookup(20);
SELECT hits, misses_not_cached FROM memopt.stats WHERE "table" = 't'::regclass;
RESET plan_cache_mode;
SET plan_cache_mode = force_generic_plan;
PREPARE q(int) AS SELECT k, v FROM t WHERE k = $1;
EXPLAIN (COSTS OFF) EXECUTE q(7);
-- A miss runs the index scan and fills; the next lookup is a hit with no buffer access.
SELECT * FROM explain_node('EXECUTE q(7)');
SELECT * FROM explain_node('EXECUTE q(7)');
EXECUTE q(7);
EXECUTE q(NULL);
EXECUTE q(100000);

-- The kill switch: plans made while off have no node; cached plans miss with 'disabled'.
SET memopt.enabled = off;
EXPLAIN (COSTS OFF) SELECT v FROM t WHERE k = 5;
SELECT * FROM explain_node('EXECUTE q(7)');
RESET memopt.enabled;

-- A transaction that wrote the table reads it through the normal plan.
BEGIN;
UPDATE t SET v = 'mine' WHERE k = 7;
SELECT * FROM explain_node('EXECUTE q(7)');
EXECUTE q(7);
ROLLBACK;
EXECUTE q(7);

-- Committed writes are seen by the next statement.
UPDATE t SET v = 'new' WHERE k = 7;
EXECUTE q(7);
EXECUTE q(7);
DELETE FROM t WHERE k = 7;
EXECUTE q(7);
INSERT INTO t VALUES (7, 'back', 7);
EXECUTE q(7);
EXECUTE q(7);
UPDATE t SET k = 1007 WHERE k = 7;
EXECUTE q(7);
EXECUTE q(1007);
UPDATE t SET k = 7 WHERE k = 1007;

-- A prepared transaction could not keep the store consistent until COMMIT PREPARED.
BEGIN;
UPDATE t SET v = 'prepared' WHERE k = 8;
PREPARE TRANSACTION 'p';
EXECUTE q(8);
-- Nor one that disabled a sync trigger: it may then write the table unseen, and its commit
-- is fenced because other backends learn of the ALTER only after the commit is visible.
BEGIN;
ALTER TABLE t DISABLE TRIGGER memopt_sync;
PREPARE TRANSACTION 'p';
SELECT memopt.is_enabled('t');

-- Populate fills the whole table in the background.
SELECT memopt.drop_object('t');
SELECT memopt.populate('t');
SELECT wait_populate('t');
SELECT rows_populated, entries, bytes_used, populate_rows, populate_accepted, populate_rejected
  FROM memopt.stats WHERE "table" = 't'::regclass;
SELECT * FROM explain_node('EXECUTE q(500)');
EXECUTE q(500);

-- PL/pgSQL lookups (parameters) use the node too.
DO $$
DECLARE
    x text;
    found_rows int := 0;
BEGIN
    FOR i IN 1..1000 LOOP
        SELECT v INTO x FROM t WHERE k = i;
        IF x = 'v' || i OR (i = 7 AND x = 'back') THEN
            found_rows := found_rows + 1;
        END IF;
    END LOOP;
    RAISE NOTICE 'rows found: %', found_rows;
END
$$;

-- Composite keys of every supported type.
CREATE TABLE c (a int2, b int8, u uuid, s text, w varchar(20), v int,
                PRIMARY KEY (a, b, u, s, w));
INSERT INTO c SELECT g, g * 10, md5(g::text)::uuid, 's' || g, 'w' || g, g FROM generate_series(1, 100) g;
SELECT memopt.enable_read('c');
PREPARE cq(int2, int8, uuid, text, varchar) AS
    SELECT v FROM c WHERE a = $1 AND b = $2 AND u = $3 AND s = $4 AND w = $5;
EXPLAIN (COSTS OFF) EXECUTE cq(3, 30, md5('3')::uuid, 's3', 'w3');
EXECUTE cq(3, 30, md5('3')::uuid, 's3', 'w3');
SELECT * FROM explain_node($$EXECUTE cq(3, 30, md5('3')::uuid, 's3', 'w3')$$);
EXECUTE cq(3, 30, md5('3')::uuid, 's3', 'w4');
SELECT v FROM c WHERE a = 4 AND b = 40 AND u = md5('4')::uuid AND s = 's4' AND w = 'w4';
SELECT v FROM c WHERE a = 4 AND b = 40 AND u = md5('4')::uuid AND s = 's4' AND w = 'w4';

-- A row larger than an entry is never stored.
CREATE TABLE wide (k text PRIMARY KEY, v text);
INSERT INTO wide VALUES ('small', 'x'), ('large', repeat('y', 1000));
SELECT memopt.enable_read('wide');
SELECT length(v) FROM wide WHERE k = 'large';
SELECT length(v) FROM wide WHERE k = 'large';
SELECT * FROM explain_node($$SELECT v FROM wide WHERE k = 'small'$$);
SELECT * FROM explain_node($$SELECT v FROM wide WHERE k = 'small'$$);

-- Statistics: every lookup is a hit or a miss with one reason.
SELECT "table", lookups = hits + misses AS balanced,
       misses = misses_not_cached + misses_fenced + misses_invisible + misses_isolation
              + misses_own_write + misses_disabled + misses_recovery + misses_uncacheable
         AS reasons_add_up
  FROM memopt.stats ORDER BY 1::text;
SELECT "table", hits, misses_not_cached, misses_disabled, misses_own_write, misses_uncacheable
  FROM memopt.stats WHERE "table" = 't'::regclass;
SELECT lookups = hits + misses AS balanced, capacity_rows, capacity_bytes FROM memopt.stats_total;

-- drop_object empties the table's part; disable_read removes the triggers and the node.
SELECT memopt.drop_object('t');
SELECT entries FROM memopt.stats WHERE "table" = 't'::regclass;
SELECT memopt.disable_read('t');
SELECT memopt.is_enabled('t');
EXPLAIN (COSTS OFF) SELECT v FROM t WHERE k = 5;
SELECT count(*) FROM memopt.stats WHERE "table" = 't'::regclass;
SELECT memopt.disable_read('t');
SELECT memopt.populate('t');

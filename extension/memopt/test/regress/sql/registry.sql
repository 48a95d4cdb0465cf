-- memopt (issue 18): the populate worker and the table registry never make a query fail or
-- leave state behind.

-- The populate worker stops on SIGTERM through PostgreSQL's standard handler, and its exit
-- marks the populate failed, so the next one is accepted.  The worker is held on our lock so
-- that it is surely running when it is told to stop.
CREATE TABLE slow (k int PRIMARY KEY, v text);
INSERT INTO slow SELECT g, 'v' || g FROM generate_series(1, 100) g;
SELECT memopt.enable_read('slow');
BEGIN;
LOCK TABLE slow IN ACCESS EXCLUSIVE MODE;
SELECT memopt.populate('slow');
DO $$
BEGIN
    FOR i IN 1..1200 LOOP
        PERFORM pg_stat_clear_snapshot();
        EXIT WHEN EXISTS (SELECT FROM pg_stat_activity
                           WHERE backend_type = 'memopt populate' AND wait_event_type = 'Lock');
        PERFORM pg_sleep(0.05);
    END LOOP;
END
$$;
SELECT populate_state FROM memopt.stats WHERE "table" = 'slow'::regclass;
SELECT pg_terminate_backend(pid, 60000) FROM pg_stat_activity WHERE backend_type = 'memopt populate';
COMMIT;
SELECT populate_state FROM memopt.stats WHERE "table" = 'slow'::regclass;
SELECT memopt.populate('slow');
SELECT wait_populate('slow');
SELECT v FROM slow WHERE k = 50;

-- memopt.entry_size's own minimum is the smallest entry that holds a row.
SELECT min_val, unit FROM pg_settings WHERE name = 'memopt.entry_size';

-- A transaction writing more keys of one table than memopt.table_fence_threshold fences the
-- table as a whole at commit: one invalidation instead of a fence per key.
SELECT count(*) FROM (SELECT v FROM slow WHERE k = 1 UNION ALL SELECT v FROM slow WHERE k = 2) x;
SELECT invalidations AS before FROM memopt.stats WHERE "table" = 'slow'::regclass \gset
SET memopt.table_fence_threshold = 10;
UPDATE slow SET v = v || '*' WHERE k <= 50;
SELECT invalidations - :before AS table_fences FROM memopt.stats WHERE "table" = 'slow'::regclass;
SELECT v FROM slow WHERE k = 1;
SELECT v FROM slow WHERE k = 1;
SELECT v FROM slow WHERE k = 60;
SELECT invalidations AS before FROM memopt.stats WHERE "table" = 'slow'::regclass \gset
UPDATE slow SET v = v || '+' WHERE k <= 5;
SELECT invalidations - :before AS table_fences FROM memopt.stats WHERE "table" = 'slow'::regclass;
SELECT v FROM slow WHERE k = 1;
-- Savepoints, rollback and the switch: whatever was written is never served stale.
SELECT v FROM slow WHERE k = 70;
BEGIN;
UPDATE slow SET v = 'a' WHERE k = 70;
SAVEPOINT s;
UPDATE slow SET v = v || '!' WHERE k > 80;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT v FROM slow WHERE k = 70;
SELECT v FROM slow WHERE k = 90;
RESET memopt.table_fence_threshold;

-- A full registry: enable_read says so; a table that has its triggers but no slot (here
-- unregistered by hand) is read through the normal plan, a counted miss, never an error.
-- (All registered tables are in this database, so the free slots are counted here.)
SELECT 256 - count(*) AS free, count(*) AS registered FROM memopt.table_stats() \gset
CREATE FUNCTION make_regs(n int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 0..n LOOP
        EXECUTE format('CREATE TABLE reg_%s (k int PRIMARY KEY, v text)', i);
        EXECUTE format('INSERT INTO reg_%s VALUES (1, %L)', i, 'reg ' || i);
        IF i > 0 THEN
            PERFORM memopt.enable_read(format('reg_%s', i)::regclass);
        END IF;
    END LOOP;
END
$$;
SELECT make_regs(:free);
SELECT count(*) = 256 AS full FROM memopt.table_stats();
SELECT memopt.enable_read('reg_0');
SELECT memopt._unregister('reg_1');
SELECT memopt.enable_read('reg_0');
SELECT memopt.is_enabled('reg_1');
SELECT v FROM reg_1 WHERE k = 1;
SELECT v FROM reg_1 WHERE k = 1;
SELECT * FROM explain_node('SELECT v FROM reg_1 WHERE k = 1');
SELECT misses_unregistered > 0 AS counted FROM memopt.pool();
SELECT lookups = hits + misses AS balanced FROM memopt.stats_total;
-- Writes to it commit without a slot to fence; past the threshold, with no slot free for a
-- table fence, they stay fenced key by key.
SET memopt.table_fence_threshold = 0;
INSERT INTO reg_1 VALUES (2, 'two'), (3, 'three');
RESET memopt.table_fence_threshold;
SELECT v FROM reg_1 WHERE k = 3;
UPDATE reg_1 SET v = 'updated' WHERE k = 1;
TRUNCATE reg_1;
SELECT v FROM reg_1 WHERE k = 1;

-- A DROP that rolls back keeps the slot; one that commits frees it.
SELECT v FROM reg_2 WHERE k = 1;
BEGIN;
DROP TABLE reg_2;
ROLLBACK;
SELECT tables_registered = tables_max AS still_full FROM memopt.pool();
SELECT * FROM explain_node('SELECT v FROM reg_2 WHERE k = 1');
BEGIN;
SAVEPOINT s;
DROP TABLE reg_2;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT tables_registered = tables_max AS still_full FROM memopt.pool();
-- Now reg_1 gets the slot reg_2 leaves; every other dropped table's slot comes back too.
DROP TABLE reg_2;
SELECT tables_registered = tables_max - 1 AS one_free FROM memopt.pool();
SELECT v FROM reg_1 WHERE k = 1;
INSERT INTO reg_1 VALUES (1, 'back');
SELECT v FROM reg_1 WHERE k = 1;
SELECT v FROM reg_1 WHERE k = 1;
SELECT * FROM explain_node('SELECT v FROM reg_1 WHERE k = 1');
CREATE FUNCTION drop_regs(n int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 0..n LOOP
        EXECUTE format('DROP TABLE IF EXISTS reg_%s', i);
    END LOOP;
END
$$;
SELECT drop_regs(:free);
SELECT tables_registered = :registered AS reclaimed FROM memopt.pool();

-- A dropped database's slots are reclaimed too.
SELECT current_database() AS here \gset
CREATE DATABASE regress_memopt_db;
\c regress_memopt_db
CREATE EXTENSION memopt;
CREATE TABLE elsewhere (k int PRIMARY KEY, v text);
SELECT memopt.enable_read('elsewhere');
\c :here
SELECT tables_registered = :registered + 1 AS registered_elsewhere FROM memopt.pool();
DROP DATABASE regress_memopt_db;
SELECT tables_registered = :registered AS reclaimed FROM memopt.pool();

-- A DROP in a prepared transaction: COMMIT PREPARED may run in any backend, none of which
-- knows the table had a slot, so the slot would outlive the table.  Whatever happens to the
-- DROP, once the table is gone its slot must be too.
CREATE TABLE reg_prepared (k int PRIMARY KEY);
SELECT memopt.enable_read('reg_prepared');
SELECT tables_registered = :registered + 1 AS registered FROM memopt.pool();
BEGIN;
DROP TABLE reg_prepared;
PREPARE TRANSACTION 'reg_drop';
COMMIT PREPARED 'reg_drop';
DROP TABLE IF EXISTS reg_prepared;
SELECT tables_registered = :registered AS released FROM memopt.pool();
-- Rolled back, the table is served again (from a slot claimed afresh), with the right rows.
CREATE TABLE reg_prepared (k int PRIMARY KEY, v text);
INSERT INTO reg_prepared VALUES (1, 'one');
SELECT memopt.enable_read('reg_prepared');
SELECT v FROM reg_prepared WHERE k = 1;
BEGIN;
DROP TABLE reg_prepared;
PREPARE TRANSACTION 'reg_drop';
ROLLBACK PREPARED 'reg_drop';
UPDATE reg_prepared SET v = 'uno' WHERE k = 1;
SELECT v FROM reg_prepared WHERE k = 1;
SELECT v FROM reg_prepared WHERE k = 1;
SELECT hits > 0 AS served, entries FROM memopt.stats WHERE "table" = 'reg_prepared'::regclass;
DROP TABLE reg_prepared;
SELECT tables_registered = :registered AS released FROM memopt.pool();
DROP TABLE slow;
DROP FUNCTION make_regs(int), drop_regs(int);

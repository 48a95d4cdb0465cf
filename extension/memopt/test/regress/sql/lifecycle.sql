-- Runs last: DROP EXTENSION memopt CASCADE with an enabled table.  The table's entries and its
-- registry slot go with the sync triggers when the DROP commits, so that a cluster where
-- memopt was dropped from databases does not run out of its 256 slots (a slot held by a
-- database without memopt could be freed only by a restart, memopt.disable_read being gone),
-- and a table enabled again starts with fresh statistics.  Before the fix the slot stayed:
-- tables_registered kept it, and after CREATE EXTENSION memopt.stats listed the table, not
-- enabled, with the old install's counters.
SET client_min_messages = warning;
SELECT tables_registered AS before FROM memopt.pool() \gset
CREATE TABLE lc (k int PRIMARY KEY, v text);
INSERT INTO lc SELECT g, 'a' || g FROM generate_series(1, 3) g;
SELECT memopt.enable_read('lc');
SELECT v FROM lc WHERE k = 1;
SELECT v FROM lc WHERE k = 1;
SELECT tables_registered - :before AS added FROM memopt.pool();

-- Rolled back, the DROP keeps the slot and the table is served as before.
BEGIN;
DROP EXTENSION memopt CASCADE;
ROLLBACK;
SELECT tables_registered - :before AS added FROM memopt.pool();
SELECT v FROM lc WHERE k = 2;
SELECT v FROM lc WHERE k = 2;
SELECT lookups, hits FROM memopt.stats WHERE "table" = 'lc'::regclass;

-- Committed, it releases the slot; writes made meanwhile are never served from the old install.
DROP EXTENSION memopt CASCADE;
UPDATE lc SET v = 'b1' WHERE k = 1;
CREATE EXTENSION memopt;
SELECT count(*) AS listed FROM memopt.stats WHERE "table" = 'lc'::regclass;
SELECT tables_registered AS base FROM memopt.pool() \gset
SELECT memopt.enable_read('lc');
SELECT v FROM lc WHERE k = 1;
SELECT v FROM lc WHERE k = 1;
SELECT tables_registered - :base AS added FROM memopt.pool();
SELECT lookups, hits FROM memopt.stats WHERE "table" = 'lc'::regclass;

-- enable_read replacing a hand-made trigger drops and creates the sync triggers in one
-- transaction: the slot stays.
DROP TRIGGER memopt_truncate ON lc;
CREATE TRIGGER memopt_truncate AFTER TRUNCATE ON lc
    FOR EACH STATEMENT EXECUTE FUNCTION memopt.sync_truncate();
SELECT memopt.enable_read('lc');
SELECT v FROM lc WHERE k = 3;
SELECT tables_registered - :base AS added FROM memopt.pool();
SELECT memopt.disable_read('lc');
DROP TABLE lc;
SELECT tables_registered - :base AS added FROM memopt.pool();

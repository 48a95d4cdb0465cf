-- memopt: every way a table can change underneath the store.

CREATE TABLE inv (k int PRIMARY KEY, v text);
INSERT INTO inv SELECT g, 'v' || g FROM generate_series(1, 100) g;
SELECT memopt.enable_read('inv');

-- Fills k = 1..3 and reports whether the next read of k = 1 is a hit.
CREATE FUNCTION warm() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    line text;
BEGIN
    PERFORM v FROM inv WHERE k = 1;
    PERFORM v FROM inv WHERE k = 2;
    PERFORM v FROM inv WHERE k = 3;
    FOR line IN EXECUTE 'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT v FROM inv WHERE k = 1'
    LOOP
        IF line LIKE '%Memopt Hits%' THEN
            RETURN trim(line);
        END IF;
    END LOOP;
    RETURN 'no memopt node';
END
$$;

SELECT warm();
TRUNCATE inv;
SELECT * FROM inv WHERE k = 1;
SELECT entries FROM memopt.stats WHERE "table" = 'inv'::regclass;
INSERT INTO inv SELECT g, 'v' || g FROM generate_series(1, 100) g;

-- ALTER TABLE: stored tuples have the old layout; a served one would lack the new column.
SELECT warm();
ALTER TABLE inv ADD COLUMN w int DEFAULT 42;
SELECT * FROM inv WHERE k = 1;
SELECT * FROM inv WHERE k = 1;
SELECT warm();
ALTER TABLE inv DROP COLUMN w;
SELECT * FROM inv WHERE k = 2;
SELECT warm();
ALTER TABLE inv ALTER COLUMN v TYPE varchar(10);
SELECT * FROM inv WHERE k = 3;
SELECT pg_typeof(v) FROM inv WHERE k = 3;

-- VACUUM FULL and CLUSTER move every row to a new file.
SELECT warm();
SELECT invalidations AS before FROM memopt.stats WHERE "table" = 'inv'::regclass \gset
VACUUM FULL inv;
SELECT * FROM inv WHERE k = 1;
SELECT invalidations > :before AS invalidated FROM memopt.stats WHERE "table" = 'inv'::regclass;
SELECT warm();
SELECT invalidations AS before FROM memopt.stats WHERE "table" = 'inv'::regclass \gset
CLUSTER inv USING inv_pkey;
SELECT * FROM inv WHERE k = 1;
SELECT invalidations > :before AS invalidated FROM memopt.stats WHERE "table" = 'inv'::regclass;

-- Writes under session_replication_role = replica still fire the ALWAYS triggers.
SELECT warm();
SET session_replication_role = replica;
UPDATE inv SET v = 'replica' WHERE k = 1;
RESET session_replication_role;
SELECT * FROM inv WHERE k = 1;

-- COPY fires the row triggers.
SELECT warm();
DELETE FROM inv WHERE k = 2;
SELECT * FROM inv WHERE k = 2;
COPY inv FROM stdin;
2	copied
\.
SELECT * FROM inv WHERE k = 2;

-- INSERT ... ON CONFLICT, both arms.
SELECT warm();
INSERT INTO inv VALUES (3, 'upserted') ON CONFLICT (k) DO UPDATE SET v = excluded.v;
SELECT * FROM inv WHERE k = 3;
INSERT INTO inv VALUES (3, 'ignored') ON CONFLICT (k) DO NOTHING;
SELECT * FROM inv WHERE k = 3;

-- Triggers disabled and re-enabled by hand: writes in between went unseen, so the store
-- starts over; while disabled the node is not planned.
SELECT warm();
ALTER TABLE inv DISABLE TRIGGER memopt_sync;
EXPLAIN (COSTS OFF) SELECT v FROM inv WHERE k = 1;
UPDATE inv SET v = 'unseen' WHERE k = 1;
ALTER TABLE inv ENABLE ALWAYS TRIGGER memopt_sync;
SELECT * FROM inv WHERE k = 1;
SELECT * FROM inv WHERE k = 1;

-- Drop and re-create: the new table is not enabled until asked, and never sees old rows.
SELECT warm();
DROP TABLE inv CASCADE;
SELECT count(*) FROM memopt.stats WHERE "table"::text = 'inv';
CREATE TABLE inv (k int PRIMARY KEY, v text);
INSERT INTO inv VALUES (1, 'recreated');
EXPLAIN (COSTS OFF) SELECT v FROM inv WHERE k = 1;
SELECT memopt.enable_read('inv');
SELECT * FROM inv WHERE k = 1;
SELECT * FROM inv WHERE k = 1;

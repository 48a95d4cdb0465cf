-- memopt (issue 18): a read inside the writing statement or transaction, or after a change of
-- primary key, must return what the normal plan returns.

CREATE TABLE ow (k int PRIMARY KEY, v text);
INSERT INTO ow SELECT g, 'v' || g FROM generate_series(1, 100) g;
SELECT memopt.enable_read('ow');

-- A VOLATILE function reading ow by key: it runs inside the statement that writes ow.
CREATE FUNCTION peek(key int) RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r text;
BEGIN
    SELECT v INTO r FROM ow WHERE k = key;
    RETURN r;
END
$$;

-- Whether the next read of key is a hit: the EXPLAIN ANALYZE line of the node.
CREATE FUNCTION hit_line(key int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    line text;
BEGIN
    FOR line IN EXECUTE format('EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT v FROM ow WHERE k = %s', key)
    LOOP
        IF line LIKE '%Memopt Hits%' THEN
            RETURN trim(line);
        END IF;
    END LOOP;
    RETURN 'no memopt node';
END
$$;

-- 1. A row read inside its own INSERT must never be stored: after ROLLBACK it never existed.
BEGIN;
INSERT INTO ow VALUES (99999, 'ghost') RETURNING peek(99999);
ROLLBACK;
SELECT v FROM ow WHERE k = 99999;
SELECT v FROM ow WHERE k = 99999;
SELECT hit_line(99999);

-- The same through an UPDATE that moves a key, and a DELETE, all rolled back.
SELECT peek(7);
BEGIN;
UPDATE ow SET k = 99998 WHERE k = 7 RETURNING peek(99998), peek(7);
ROLLBACK;
SELECT v FROM ow WHERE k = 99998;
SELECT v FROM ow WHERE k = 7;
BEGIN;
DELETE FROM ow WHERE k = 8 RETURNING peek(8);
ROLLBACK;
SELECT v FROM ow WHERE k = 8;

-- A row inserted and read by one transaction that then commits: served only once committed.
BEGIN;
INSERT INTO ow VALUES (101, 'v101') RETURNING peek(101);
SELECT peek(101);
COMMIT;
SELECT v FROM ow WHERE k = 101;
SELECT v FROM ow WHERE k = 101;

-- 2. Own writes are read through the normal plan, inside the statement and after it.
SELECT peek(5), peek(5);
UPDATE ow SET v = 'new5' WHERE k = 5 RETURNING peek(5);
SET memopt.enabled = off;
UPDATE ow SET v = 'newer5' WHERE k = 5 RETURNING peek(5);
RESET memopt.enabled;
BEGIN;
UPDATE ow SET v = 'tx5' WHERE k = 5;
SELECT peek(5);
SAVEPOINT s;
UPDATE ow SET v = 'sp5' WHERE k = 5 RETURNING peek(5);
ROLLBACK TO SAVEPOINT s;
SELECT peek(5);
COMMIT;
SELECT v FROM ow WHERE k = 5;

-- A trigger reading the table it fires on sees the row being written.
CREATE FUNCTION ow_before() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'before: peek(%) = %', NEW.k, peek(NEW.k);
    RETURN NEW;
END
$$;
CREATE FUNCTION ow_after() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'after: peek(%) = %', NEW.k, peek(NEW.k);
    RETURN NEW;
END
$$;
CREATE TRIGGER ow_b BEFORE UPDATE ON ow FOR EACH ROW EXECUTE FUNCTION ow_before();
CREATE TRIGGER ow_a AFTER UPDATE ON ow FOR EACH ROW EXECUTE FUNCTION ow_after();
SELECT peek(6), peek(6);
UPDATE ow SET v = 'trig6' WHERE k = 6;
DROP TRIGGER ow_b ON ow;
DROP TRIGGER ow_a ON ow;

-- A parallel worker of a transaction that wrote the table holds no lock on it of its own;
-- it must read the leader's write too, not the stored row.
CREATE FUNCTION ppeek(key int) RETURNS text LANGUAGE plpgsql PARALLEL SAFE AS $$
DECLARE
    r text;
BEGIN
    SELECT v INTO r FROM ow WHERE k = key;
    RETURN r;
END
$$;
SELECT ppeek(9), ppeek(9);
BEGIN;
UPDATE ow SET v = 'tx9' WHERE k = 9;
SET LOCAL force_parallel_mode = on;
SET LOCAL parallel_leader_participation = off;
SELECT ppeek(9);
ROLLBACK;
SELECT v FROM ow WHERE k = 9;

-- Misses counted as own writes, never as hits of the writer.
SELECT misses_own_write > 0 AS own_write_misses FROM memopt.stats WHERE "table" = 'ow'::regclass;

-- 3. A new primary key on other columns: the stored rows were keyed by the old one.
CREATE TABLE u (a int NOT NULL, b int NOT NULL, v text, PRIMARY KEY (a));
INSERT INTO u SELECT g, 1000 + g, 'row a=' || g FROM generate_series(1, 20) g;
UPDATE u SET b = 10 WHERE a = 15;
SELECT memopt.enable_read('u');
SELECT v FROM u WHERE a = 10;
SELECT v FROM u WHERE a = 10;
ALTER TABLE u DROP CONSTRAINT u_pkey, ADD PRIMARY KEY (b);
SELECT v FROM u WHERE b = 10;
SELECT v FROM u WHERE b = 10;
-- And a primary key of the same column through another index.
SELECT v FROM u WHERE b = 1003;
ALTER TABLE u DROP CONSTRAINT u_pkey;
CREATE UNIQUE INDEX u_b2 ON u (a);
ALTER TABLE u ADD CONSTRAINT u_pkey PRIMARY KEY USING INDEX u_b2;
SELECT v FROM u WHERE a = 3;
SELECT v FROM u WHERE a = 3;

DROP TABLE u;
DROP FUNCTION ow_before();
DROP FUNCTION ow_after();

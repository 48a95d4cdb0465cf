-- memopt (found by helper h68): cursors over a lookup behave as over the normal plan.  A
-- cursor declared with neither SCROLL nor NO SCROLL may move backwards when its plan can
-- scan backwards, as the primary key's index scan can: over a MemoptLookup it must fetch
-- what it fetches over the normal plan, forwards and backwards, on a hit, on a miss and for
-- a key without a row, never "cursor can only scan forward".  And WHERE CURRENT OF must
-- write the row the cursor is on.

CREATE TABLE cur (k int PRIMARY KEY, v text);
INSERT INTO cur SELECT g, 'v' || g FROM generate_series(1, 10) g;
SELECT memopt.enable_read('cur');
SELECT v FROM cur WHERE k = 4;       -- stored: the cursors below hit

-- Each cursor's every fetch, as text, with memopt on or off: the two must be equal.
CREATE FUNCTION cursor_walk(key int, memopt bool, OUT fetches text) LANGUAGE plpgsql AS $$
DECLARE
    step text;
    got text;
BEGIN
    PERFORM set_config('memopt.enabled', memopt::text, true);
    EXECUTE format('DECLARE walk CURSOR FOR SELECT v FROM cur WHERE k = %s', key);
    fetches := '';
    FOREACH step IN ARRAY ARRAY['NEXT', 'PRIOR', 'NEXT', 'NEXT', 'PRIOR', 'FIRST', 'LAST',
                                'ABSOLUTE 1', 'RELATIVE -1', 'RELATIVE 1', 'BACKWARD 1',
                                'FORWARD 2', 'BACKWARD ALL', 'FORWARD ALL']
    LOOP
        BEGIN
            EXECUTE format('FETCH %s FROM walk', step) INTO got;
        EXCEPTION WHEN OTHERS THEN
            got := 'error: ' || SQLERRM;
        END;
        fetches := fetches || step || ':' || coalesce(got, '-') || ' ';
    END LOOP;
    EXECUTE 'CLOSE walk';
    PERFORM set_config('memopt.enabled', 'on', true);
END
$$;

SELECT hits AS hits_before FROM memopt.stats WHERE "table" = 'cur'::regclass \gset
BEGIN;
SELECT key, cursor_walk(key, true) = cursor_walk(key, false) AS same,
       cursor_walk(key, false) AS normal_plan
  FROM (VALUES (4), (5), (11)) keys(key);
COMMIT;
SELECT hits > :hits_before AS served FROM memopt.stats WHERE "table" = 'cur'::regclass;

-- MOVE and FETCH from SQL: a default cursor, then a SCROLL one.
BEGIN;
DECLARE c CURSOR FOR SELECT v FROM cur WHERE k = 4;
FETCH 1 FROM c;
FETCH BACKWARD 1 FROM c;
MOVE LAST IN c;
FETCH ABSOLUTE 1 FROM c;
COMMIT;
BEGIN;
DECLARE s SCROLL CURSOR FOR SELECT v FROM cur WHERE k = 4;
FETCH ALL FROM s;
FETCH BACKWARD ALL FROM s;
COMMIT;

-- WHERE CURRENT OF writes the cursor's row through the TID of the scan's current row: a hit's
-- and a miss's row must carry it, as the index scan's does.
CREATE FUNCTION current_of(key int, memopt bool) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    c refcursor;
    r record;
    written text;
BEGIN
    PERFORM set_config('memopt.enabled', memopt::text, true);
    OPEN c FOR EXECUTE format('SELECT k, v FROM cur WHERE k = %s', key);
    FETCH c INTO r;
    UPDATE cur SET v = v || '+' WHERE CURRENT OF c RETURNING v INTO written;
    CLOSE c;
    PERFORM set_config('memopt.enabled', 'on', true);
    RETURN written;
EXCEPTION WHEN OTHERS THEN
    RETURN 'error: ' || SQLERRM;
END
$$;
SELECT v FROM cur WHERE k = 6;       -- stored
SELECT hits AS hits_before FROM memopt.stats WHERE "table" = 'cur'::regclass \gset
SELECT current_of(6, true) AS hit;
SELECT hits > :hits_before AS served FROM memopt.stats WHERE "table" = 'cur'::regclass;
SELECT memopt.drop_object('cur');
SELECT misses_not_cached AS misses_before FROM memopt.stats WHERE "table" = 'cur'::regclass \gset
SELECT current_of(7, true) AS miss;
SELECT misses_not_cached > :misses_before AS missed
  FROM memopt.stats WHERE "table" = 'cur'::regclass;
SELECT current_of(8, false) AS normal_plan;
SELECT k, v FROM cur WHERE k IN (6, 7, 8) ORDER BY k;

-- And from SQL: DELETE through a cursor that hit.
SELECT v FROM cur WHERE k = 9;
BEGIN;
DECLARE d CURSOR FOR SELECT v FROM cur WHERE k = 9;
FETCH d;
DELETE FROM cur WHERE CURRENT OF d RETURNING k, v;
COMMIT;
SELECT count(*) FROM cur WHERE k = 9;

DROP FUNCTION cursor_walk(int, bool), current_of(int, bool);
DROP TABLE cur;

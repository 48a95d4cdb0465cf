-- memopt (found by helper h68): a cursor declared with neither SCROLL nor NO SCROLL may move
-- backwards when its plan can scan backwards, as the primary key's index scan can.  Over a
-- MemoptLookup it must fetch what it fetches over the normal plan, forwards and backwards,
-- on a hit, on a miss and for a key without a row: never "cursor can only scan forward".

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

DROP FUNCTION cursor_walk(int, bool);
DROP TABLE cur;

-- memopt (found by helper h68): a key value too long for any entry, up to text's 1 GB, is
-- looked up as the normal plan looks it up (no row here), never an error while its bytes are
-- built: one text of the longest length there is, and a composite key of two halves of a
-- gigabyte, through the scan (a generic plan keeps the value a parameter) and memopt.get.
CREATE TABLE hk (k text PRIMARY KEY, v text);
CREATE TABLE hk2 (a text, b text, v text, PRIMARY KEY (a, b));
INSERT INTO hk VALUES ('a', 'one');
INSERT INTO hk2 VALUES ('a', 'b', 'two');
SELECT memopt.enable_read('hk'), memopt.enable_read('hk2');
SET plan_cache_mode = force_generic_plan;
PREPARE one(text) AS SELECT v FROM hk WHERE k = $1;
PREPARE two(text, text) AS SELECT v FROM hk2 WHERE a = $1 AND b = $2;
EXPLAIN (COSTS OFF) EXECUTE one('a');
EXECUTE one(repeat('a', 1073741819));
EXECUTE two(repeat('a', 540000000), repeat('b', 540000000));
SELECT memopt.get('hk', repeat('a', 1073741819)) IS NULL AS no_row;
SELECT "table", lookups, misses_uncacheable FROM memopt.stats
 WHERE "table" IN ('hk'::regclass, 'hk2'::regclass) ORDER BY 1::text;
-- Keys that fit are served as before.
EXECUTE one('a');
EXECUTE one('a');
EXECUTE two('a', 'b');
EXECUTE two('a', 'b');
SELECT "table", hits FROM memopt.stats
 WHERE "table" IN ('hk'::regclass, 'hk2'::regclass) ORDER BY 1::text;
RESET plan_cache_mode;
DEALLOCATE ALL;
DROP TABLE hk, hk2;

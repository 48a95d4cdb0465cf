-- memopt with the smallest pool (1024 entries): a full pool evicts and misses, never errors.
CREATE EXTENSION memopt;
CREATE TABLE big (k int PRIMARY KEY, v text);
INSERT INTO big SELECT g, 'v' || g FROM generate_series(1, 5000) g;
SELECT memopt.enable_read('big');
SELECT capacity_rows FROM memopt.pool();
SELECT memopt.populate('big');
DO $$
BEGIN
    FOR i IN 1..1200 LOOP
        EXIT WHEN (SELECT populate_state FROM memopt.stats) = 'done';
        PERFORM pg_sleep(0.05);
    END LOOP;
END
$$;
SELECT populate_state, entries <= 1024 AS within_capacity, evictions > 0 AS evicted,
       rows_populated = 5000 AS all_installed_once
  FROM memopt.stats;
-- Every row still reads correctly, whether it is stored or not.
DO $$
DECLARE
    x text;
    wrong int := 0;
BEGIN
    -- Twice through all rows (a scan larger than the pool), then three times a hot set.
    FOR round IN 1..5 LOOP
        FOR i IN 1..(CASE WHEN round <= 2 THEN 5000 ELSE 500 END) LOOP
            SELECT v INTO x FROM big WHERE k = i;
            IF x IS DISTINCT FROM 'v' || i THEN
                wrong := wrong + 1;
            END IF;
        END LOOP;
    END LOOP;
    RAISE NOTICE 'wrong rows: %', wrong;
END
$$;
SELECT lookups = 11500 AS all_counted, lookups = hits + misses AS balanced, hits > 0 AS some_hits,
       entries <= 1024 AS within_capacity
  FROM memopt.stats;

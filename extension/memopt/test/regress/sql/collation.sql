-- Text keys and collations.  memopt compares key bytes, which is equality only under the
-- key column's own deterministic collation.

-- A comparison under another collation than the key column's: the index is sorted under
-- the column's, so the planner uses no index for it; memopt must not either.  Half the keys
-- are upper case, so that "C" and ICU order them differently.
CREATE TABLE icu_keys (k text COLLATE "en-x-icu" PRIMARY KEY, v int);
INSERT INTO icu_keys
SELECT CASE WHEN g % 2 = 0 THEN upper(md5(g::text)) ELSE md5(g::text) END, g
  FROM generate_series(1, 3000) g;
ANALYZE icu_keys;
SELECT memopt.enable_read('icu_keys');

-- Each key looked up one statement at a time (a PL/pgSQL variable is a parameter the node
-- serves), under "C"; returns the keys that found no row.
CREATE FUNCTION icu_keys_missing_under_c() RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    missing int := 0;
    found_v int;
    key text;
BEGIN
    FOR g IN 1..3000 LOOP
        key := CASE WHEN g % 2 = 0 THEN upper(md5(g::text)) ELSE md5(g::text) END;
        SELECT v INTO found_v FROM icu_keys WHERE k = key COLLATE "C";
        IF found_v IS DISTINCT FROM g THEN
            missing := missing + 1;
        END IF;
    END LOOP;
    RETURN missing;
END
$$;
SET memopt.enabled = on;
SELECT icu_keys_missing_under_c() AS missing_memopt;
-- The function's plans were made with memopt on; the normal plan needs new ones.
SET memopt.enabled = off;
DISCARD PLANS;
SELECT icu_keys_missing_under_c() AS missing_normal_plan;
SET memopt.enabled = on;
SELECT line FROM explain_node($$SELECT v FROM icu_keys WHERE k = upper(md5('2')) COLLATE "C"$$) line
 WHERE line LIKE '%Memopt%';
-- Under the column's own collation it is served.
SELECT v FROM icu_keys WHERE k = upper(md5('2'));
SELECT line FROM explain_node($$SELECT v FROM icu_keys WHERE k = upper(md5('2'))$$) line
 WHERE line LIKE '%Memopt%';

-- A nondeterministic collation brought to an enabled table's key by ALTER TABLE: the index
-- then finds 'abc' for 'ABC', and a row stored under 'ABC' would survive the update and the
-- delete of 'abc', which fence only 'abc'.  Neither lookup may serve such a table.
CREATE COLLATION ci_later (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE TABLE ci_later_t (k text PRIMARY KEY, v text);
INSERT INTO ci_later_t VALUES ('abc', 'old');
SELECT memopt.enable_read('ci_later_t');
ALTER TABLE ci_later_t ALTER COLUMN k TYPE text COLLATE ci_later;
SELECT memopt.is_enabled('ci_later_t');
SELECT memopt.get('ci_later_t', 'ABC'::text);
SELECT v FROM ci_later_t WHERE k = 'ABC';
UPDATE ci_later_t SET v = 'new' WHERE k = 'abc';
SELECT memopt.get('ci_later_t', 'ABC'::text);
SELECT memopt.get_many('ci_later_t', '{ABC}'::text[]);
SELECT v FROM ci_later_t WHERE k = 'ABC';
SELECT line FROM explain_node($$SELECT v FROM ci_later_t WHERE k = 'ABC'$$) line
 WHERE line LIKE '%Memopt%';
DELETE FROM ci_later_t;
SELECT memopt.get('ci_later_t', 'ABC'::text);
SELECT v FROM ci_later_t WHERE k = 'ABC';

-- The same through a primary key moved to a column with such a collation.
CREATE TABLE ci_moved (id int PRIMARY KEY, k text COLLATE ci_later NOT NULL, v text);
INSERT INTO ci_moved VALUES (1, 'abc', 'old');
SELECT memopt.enable_read('ci_moved');
ALTER TABLE ci_moved DROP CONSTRAINT ci_moved_pkey, ADD PRIMARY KEY (k);
SELECT memopt.get('ci_moved', 'ABC'::text);
SELECT v FROM ci_moved WHERE k = 'ABC';
UPDATE ci_moved SET v = 'new' WHERE k = 'abc';
SELECT v FROM ci_moved WHERE k = 'ABC';
-- Back to a deterministic key: served again.
ALTER TABLE ci_moved DROP CONSTRAINT ci_moved_pkey, ADD PRIMARY KEY (id);
SELECT memopt.get('ci_moved', 1);
SELECT memopt.get('ci_moved', 1);
SELECT hits FROM memopt.stats WHERE "table" = 'ci_moved'::regclass;

DROP TABLE icu_keys, ci_later_t, ci_moved;
DROP FUNCTION icu_keys_missing_under_c();
DROP COLLATION ci_later;

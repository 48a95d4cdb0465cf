-- memopt (issue 18): integer keys compared across integer types (`bigint_pk = 42`, an int4
-- constant) are served: every integer type has the same key bytes for the same value.

CREATE TABLE bk (k bigint PRIMARY KEY, v text);
INSERT INTO bk SELECT g, 'b' || g FROM generate_series(1, 100) g;
CREATE TABLE sk (k smallint PRIMARY KEY, v text);
INSERT INTO sk SELECT g, 's' || g FROM generate_series(1, 100) g;
CREATE TABLE ck (a smallint, b bigint, v text, PRIMARY KEY (a, b));
INSERT INTO ck SELECT g, g * 10, 'c' || g FROM generate_series(1, 100) g;
SELECT memopt.enable_read('bk'), memopt.enable_read('sk'), memopt.enable_read('ck');

EXPLAIN (COSTS OFF) SELECT v FROM bk WHERE k = 42;
EXPLAIN (COSTS OFF) SELECT v FROM bk WHERE 42 = k;
EXPLAIN (COSTS OFF) SELECT v FROM sk WHERE k = 42;
EXPLAIN (COSTS OFF) SELECT v FROM sk WHERE k = 42::bigint;
EXPLAIN (COSTS OFF) SELECT v FROM ck WHERE a = 4 AND b = 40;

SELECT v FROM bk WHERE k = 42;
SELECT * FROM explain_node('SELECT v FROM bk WHERE k = 42');
SELECT * FROM explain_node('SELECT v FROM bk WHERE 42 = k');
SELECT * FROM explain_node('SELECT v FROM bk WHERE k = 42::smallint');
SELECT v FROM sk WHERE k = 42;
SELECT * FROM explain_node('SELECT v FROM sk WHERE k = 42::bigint');
SELECT v FROM ck WHERE a = 4 AND b = 40;
SELECT * FROM explain_node('SELECT v FROM ck WHERE a = 4 AND b = 40');

-- Values outside the column's range match nothing, and never another key's row.
SELECT v FROM sk WHERE k = 100000;
SELECT v FROM sk WHERE k = 4294967338;
SELECT v FROM sk WHERE k = 42 + 65536;
SELECT v FROM bk WHERE k = -42;

-- Parameters of another integer type, generic plans, and a write read back.
SET plan_cache_mode = force_generic_plan;
PREPARE bq(int) AS SELECT v FROM bk WHERE k = $1;
PREPARE sq(bigint) AS SELECT v FROM sk WHERE k = $1;
EXECUTE bq(7);
SELECT * FROM explain_node('EXECUTE bq(7)');
EXECUTE sq(7);
SELECT * FROM explain_node('EXECUTE sq(7)');
EXECUTE sq(4294967303);
UPDATE bk SET v = 'new7' WHERE k = 7::smallint;
EXECUTE bq(7);
EXECUTE bq(7);
RESET plan_cache_mode;
DEALLOCATE bq;
DEALLOCATE sq;
DROP TABLE bk, sk, ck;

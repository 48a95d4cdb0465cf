-- memopt (issue 18): a locked-down SQL surface.  Only a table's owner (or a superuser) may
-- enable, populate, empty or disable it; the trigger functions are not callable by PUBLIC;
-- every SQL function pins its search_path; the sync triggers are recognised by function,
-- events and the absence of a WHEN clause or column list, not by name.

CREATE ROLE regress_memopt_owner LOGIN;
CREATE ROLE regress_memopt_other LOGIN;
GRANT USAGE, CREATE ON SCHEMA public TO regress_memopt_owner, regress_memopt_other;

-- Every function of the extension: no SQL-language function without a pinned search_path,
-- and the trigger functions are not executable by PUBLIC.
SELECT p.proname
  FROM pg_proc p
 WHERE p.pronamespace = 'memopt'::regnamespace
   AND (SELECT lanname FROM pg_language WHERE oid = p.prolang) IN ('sql', 'plpgsql')
   AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)
 ORDER BY 1;
SELECT p.proname, has_function_privilege('regress_memopt_other', p.oid, 'EXECUTE') AS public_execute
  FROM pg_proc p
 WHERE p.pronamespace = 'memopt'::regnamespace AND p.proname IN ('sync_row', 'sync_truncate')
 ORDER BY 1;

SET ROLE regress_memopt_owner;
CREATE TABLE owned (k int PRIMARY KEY, v text);
INSERT INTO owned SELECT g, 'v' || g FROM generate_series(1, 100) g;

-- Another role that is neither owner nor superuser is refused by every admin function.
SET ROLE regress_memopt_other;
SELECT memopt.enable_read('owned');
SELECT memopt.populate('owned');
SELECT memopt.drop_object('owned');
SELECT memopt.disable_read('owned');
SELECT memopt._register('owned');
SELECT memopt._unregister('owned');
-- ... and cannot make a trigger of its own from the sync functions on its own table.
CREATE TABLE mine (k int PRIMARY KEY);
CREATE TRIGGER memopt_sync AFTER INSERT OR UPDATE OR DELETE ON mine
    FOR EACH ROW EXECUTE FUNCTION memopt.sync_row();
DROP TABLE mine;

-- The owner can enable, populate, read, empty and disable their own table.
SET ROLE regress_memopt_owner;
SELECT memopt.enable_read('owned');
SELECT memopt.is_enabled('owned');
SELECT memopt.populate('owned');
RESET ROLE;
SELECT wait_populate('owned');
SET ROLE regress_memopt_owner;
SELECT * FROM explain_node($$SELECT v FROM owned WHERE k = 42$$);
SELECT memopt.drop_object('owned');
SELECT memopt.disable_read('owned');
SELECT memopt.is_enabled('owned');
-- While enabled, the other role still cannot disable it.
SELECT memopt.enable_read('owned');
SET ROLE regress_memopt_other;
SELECT memopt.disable_read('owned');
RESET ROLE;
SELECT memopt.is_enabled('owned');

-- Hand-made triggers named like the sync triggers do not make a table served: wrong
-- events, a WHEN clause, a column list, another function.
CREATE TABLE fake (k int PRIMARY KEY, v text);
INSERT INTO fake SELECT g, 'v' || g FROM generate_series(1, 10) g;
CREATE FUNCTION not_sync() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER memopt_sync AFTER INSERT OR UPDATE OR DELETE ON fake
    FOR EACH ROW EXECUTE FUNCTION not_sync();
CREATE TRIGGER memopt_truncate AFTER TRUNCATE ON fake
    FOR EACH STATEMENT EXECUTE FUNCTION memopt.sync_truncate();
ALTER TABLE fake ENABLE ALWAYS TRIGGER memopt_sync;
ALTER TABLE fake ENABLE ALWAYS TRIGGER memopt_truncate;
EXPLAIN (COSTS OFF) SELECT v FROM fake WHERE k = 1;
DROP TRIGGER memopt_sync ON fake;
CREATE TRIGGER memopt_sync AFTER INSERT OR DELETE ON fake
    FOR EACH ROW EXECUTE FUNCTION memopt.sync_row();
ALTER TABLE fake ENABLE ALWAYS TRIGGER memopt_sync;
EXPLAIN (COSTS OFF) SELECT v FROM fake WHERE k = 1;
DROP TRIGGER memopt_sync ON fake;
CREATE TRIGGER memopt_sync AFTER INSERT OR UPDATE OR DELETE ON fake
    FOR EACH ROW WHEN (false) EXECUTE FUNCTION memopt.sync_row();
ALTER TABLE fake ENABLE ALWAYS TRIGGER memopt_sync;
EXPLAIN (COSTS OFF) SELECT v FROM fake WHERE k = 1;
DROP TRIGGER memopt_sync ON fake;
CREATE TRIGGER memopt_sync AFTER INSERT OR UPDATE OF k OR DELETE ON fake
    FOR EACH ROW EXECUTE FUNCTION memopt.sync_row();
ALTER TABLE fake ENABLE ALWAYS TRIGGER memopt_sync;
EXPLAIN (COSTS OFF) SELECT v FROM fake WHERE k = 1;
-- enable_read replaces them with the real ones.
SELECT memopt.enable_read('fake');
EXPLAIN (COSTS OFF) SELECT v FROM fake WHERE k = 1;
SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = 'fake'::regclass ORDER BY 1;

-- search_path: a hostile schema first in the caller's path changes nothing memopt does.
CREATE SCHEMA evil;
CREATE FUNCTION evil.format(text, regclass) RETURNS text LANGUAGE sql AS $$ SELECT 'SELECT 1' $$;
CREATE TABLE evil.pg_trigger (tgrelid oid, tgname name, tgenabled "char");
SET search_path = evil, public;
SELECT memopt.is_enabled('public.fake');
SELECT memopt.disable_read('public.fake');
SELECT memopt.is_enabled('public.fake');
RESET search_path;
DROP SCHEMA evil CASCADE;

DROP TABLE fake, owned;
DROP FUNCTION not_sync();
REVOKE ALL ON SCHEMA public FROM regress_memopt_owner, regress_memopt_other;
DROP ROLE regress_memopt_owner;
DROP ROLE regress_memopt_other;

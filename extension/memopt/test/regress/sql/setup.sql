-- Helpers shared by the suites, which run in order in one database.
CREATE EXTENSION memopt;

-- The plan of q as EXPLAIN (ANALYZE, BUFFERS) prints it, without timings and without the
-- planning section (catalog reads while planning are not the lookup's).
CREATE FUNCTION explain_node(q text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
    line text;
BEGIN
    FOR line IN EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) ' || q
    LOOP
        EXIT WHEN line LIKE 'Planning%';
        RETURN NEXT line;
    END LOOP;
END
$$;

-- Waits until the table's populate is done (or failed) and returns its state.
CREATE FUNCTION wait_populate(tbl regclass) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    s text;
BEGIN
    FOR i IN 1..1200 LOOP
        SELECT populate_state INTO s FROM memopt.stats WHERE "table" = tbl;
        EXIT WHEN s IN ('done', 'failed');
        PERFORM pg_sleep(0.05);
    END LOOP;
    RETURN s;
END
$$;

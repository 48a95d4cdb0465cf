-- Runs before setup: CREATE EXTENSION refuses a schema memopt another role made first, whose
-- owner could rename it and put a memopt of her own in its place (docs/memopt.md, Security).
-- The message names the installing role too, which differs between machines: it is checked,
-- not printed.
CREATE ROLE memopt_schema_squatter;
CREATE SCHEMA memopt AUTHORIZATION memopt_schema_squatter;
DO $$
BEGIN
    CREATE EXTENSION memopt;
    RAISE NOTICE 'installed into another role''s schema';
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'refused (%), naming the owner: %', SQLSTATE,
        SQLERRM LIKE 'memopt: schema memopt belongs to role memopt_schema_squatter, not to %';
END
$$;
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'memopt';
DROP SCHEMA memopt;
DROP ROLE memopt_schema_squatter;

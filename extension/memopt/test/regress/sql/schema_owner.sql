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
        SQLERRM LIKE 'memopt: schema memopt belongs to role memopt_schema_squatter, who is not a superuser, not to %';
END
$$;
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'memopt';
DROP SCHEMA memopt;
DROP ROLE memopt_schema_squatter;

-- A schema memopt that another superuser owns is accepted: a superuser could do anything a
-- swap of the schema would give her, so refusing her schema protects nothing, and it broke
-- pg_restore by any superuser but the dump's (the dump creates the schema, gives it to the
-- original owner, then runs CREATE EXTENSION).  Before the fix: refused with 42501, at
-- CREATE EXTENSION and at ALTER EXTENSION ... UPDATE alike.
CREATE ROLE memopt_other_admin SUPERUSER;
CREATE EXTENSION memopt VERSION '1.0';
ALTER SCHEMA memopt OWNER TO memopt_other_admin;
DO $$
BEGIN
    ALTER EXTENSION memopt UPDATE;
    RAISE NOTICE 'updated in another superuser''s schema';
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'refused (%)', SQLSTATE;
END
$$;
SELECT extversion FROM pg_extension WHERE extname = 'memopt';
DROP EXTENSION memopt;
DO $$
BEGIN
    CREATE EXTENSION memopt;
    RAISE NOTICE 'installed into another superuser''s schema';
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'refused (%)', SQLSTATE;
END
$$;
SELECT extversion FROM pg_extension WHERE extname = 'memopt';
DROP EXTENSION IF EXISTS memopt;
-- The schema the control file names is not a member of the extension: it stays.
SELECT pg_get_userbyid(nspowner) AS owner FROM pg_namespace WHERE nspname = 'memopt';
DROP SCHEMA memopt;
-- A superuser's schema that has since lost its superuser is refused as any role's is.
ALTER ROLE memopt_other_admin NOSUPERUSER;
CREATE SCHEMA memopt AUTHORIZATION memopt_other_admin;
DO $$
BEGIN
    CREATE EXTENSION memopt;
    RAISE NOTICE 'installed into a former superuser''s schema';
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'refused (%)', SQLSTATE;
END
$$;
DROP SCHEMA memopt;
DROP ROLE memopt_other_admin;

-- A superuser's schema where another role may create objects, or holds some, is refused too:
-- her memopt.enable_read(text) is what a superuser's memopt.enable_read('t') calls (an
-- unknown literal prefers text to regclass).  Before the fix: installed, and that call ran
-- her code as the superuser.
CREATE ROLE memopt_planter;
CREATE SCHEMA memopt;
GRANT CREATE ON SCHEMA memopt TO memopt_planter;
DO $$
BEGIN
    CREATE EXTENSION memopt;
    RAISE NOTICE 'installed into a schema another role may create in';
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'refused (%)', SQLSTATE;
END
$$;
SET ROLE memopt_planter;
CREATE FUNCTION memopt.enable_read(text) RETURNS void LANGUAGE sql AS 'SELECT';
RESET ROLE;
REVOKE CREATE ON SCHEMA memopt FROM memopt_planter;
DO $$
BEGIN
    CREATE EXTENSION memopt;
    RAISE NOTICE 'installed beside another role''s function';
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'refused (%)', SQLSTATE;
END
$$;
DROP EXTENSION IF EXISTS memopt;
DROP FUNCTION memopt.enable_read(text);
-- Without the grant and the function, the superuser's schema is accepted.
DO $$
BEGIN
    CREATE EXTENSION memopt;
    RAISE NOTICE 'installed';
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'refused (%)', SQLSTATE;
END
$$;
-- The update checks the same: a grant given after the install is refused there.
DROP EXTENSION memopt;
CREATE EXTENSION memopt VERSION '1.0';
GRANT CREATE ON SCHEMA memopt TO PUBLIC;
DO $$
BEGIN
    ALTER EXTENSION memopt UPDATE;
    RAISE NOTICE 'updated in a schema everyone may create in';
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'refused (%)', SQLSTATE;
END
$$;
DROP EXTENSION memopt;
DROP SCHEMA memopt;
DROP ROLE memopt_planter;

-- Held: the control file says superuser = true and not trusted, so a role without superuser
-- cannot install memopt (it would run the install as the bootstrap superuser otherwise), and
-- relocatable = false with schema = memopt refuses any other schema.
CREATE ROLE memopt_plain_owner;
SET ROLE memopt_plain_owner;
DO $$
BEGIN
    CREATE EXTENSION memopt;
    RAISE NOTICE 'installed by a role without superuser';
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'refused (%)', SQLSTATE;
END
$$;
RESET ROLE;
DROP ROLE memopt_plain_owner;
CREATE SCHEMA elsewhere;
CREATE EXTENSION memopt SCHEMA elsewhere;
DROP SCHEMA elsewhere;
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'memopt';

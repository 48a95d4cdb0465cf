//! Attacks on the SQL memopt's own functions run (extension/memopt/memopt--1.0.sql), by a
//! table owner without other rights who plants catalog look-alikes where her session's
//! search_path finds them first.

use slipstream_pg::SqlState;
use slipstream_testkit::Cluster;

/// Promise (docs/memopt.md, "enable_read"): a view is refused ("is not a table",
/// SQLSTATE 42809) whatever the caller's session holds.
///
/// Steps: on a cluster preloading memopt, `mallory` (a login role with CREATE on `public`
/// only) owns a view `v`, copies `pg_catalog.pg_class` into a table `public.pg_class` and a
/// temporary `pg_class` (`pg_temp` is searched first unless named), marks `v` there as an
/// ordinary table (`relkind = 'r'`), sets `search_path = public, pg_catalog`, and calls
/// `memopt.enable_read('v')`.
///
/// Held: enable_read runs with `SET search_path = pg_catalog, pg_temp` (pg_temp named last),
/// so it reads the real catalog and refuses the view with 42809. With that setting reset
/// (`ALTER FUNCTION memopt.enable_read(regclass) RESET search_path`, tried by hand) it read
/// her copy, took `v` for a table, and failed later with another answer (0A000, "does not use
/// the heap access method"): a copy consistent throughout would have chosen every answer.
#[tokio::test]
async fn enable_read_reads_the_catalog_whatever_the_callers_search_path_plants() {
    let cluster = Cluster::builder()
        .setting("shared_preload_libraries", "memopt")
        .start()
        .expect("start a cluster preloading memopt");
    cluster
        .psql(
            "CREATE EXTENSION memopt;
             CREATE ROLE mallory LOGIN; GRANT CREATE ON SCHEMA public TO mallory;",
        )
        .unwrap();
    let mut c = slipstream_pg::connect(&cluster.url_for("mallory", None))
        .await
        .expect("connect as mallory");
    c.batch_execute(
        "CREATE VIEW public.v AS SELECT 1::bigint AS id;
         CREATE TABLE public.pg_class (LIKE pg_catalog.pg_class);
         INSERT INTO public.pg_class SELECT * FROM pg_catalog.pg_class;
         UPDATE public.pg_class SET relkind = 'r' WHERE relname = 'v';
         CREATE TEMP TABLE pg_class (LIKE pg_catalog.pg_class);
         INSERT INTO pg_temp.pg_class SELECT * FROM public.pg_class;
         SET search_path = public, pg_catalog;",
    )
    .await
    .expect("plant the copies");
    // The plant works on her own queries: an unpinned function would read it as well.
    let planted: String = c
        .query_one(
            "SELECT relkind::text FROM pg_class WHERE relname = 'v'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(planted, "r");
    let e = c
        .batch_execute("SELECT memopt.enable_read('v')")
        .await
        .expect_err("enable_read took a view for a table");
    assert_eq!(e.code(), Some(SqlState::WRONG_OBJECT_TYPE), "{e}");
}

/// memopt's install script as `CREATE EXTENSION` runs it (MODULE_PATHNAME replaced, the
/// search_path the extension's schema), read from this tree: the installed copy is shared by
/// everything on the machine and may be older.
fn install_script() -> String {
    let script = include_str!("../../../../extension/memopt/memopt--1.0.sql");
    let body: String = script
        .lines()
        .filter(|l| !l.starts_with("\\echo"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("MODULE_PATHNAME", "$libdir/memopt");
    format!("SET search_path = memopt, pg_temp;\n{body}")
}

/// Promise (docs/memopt.md, Security): memopt's functions, and every client that calls them
/// by name (`memopt.get`, the Rust client's resolve), reach the extension's own objects; no
/// role but the superuser who installed it can put others in their place.
///
/// Steps: `dbo`, the owner of a database (no superuser), creates a schema `memopt` there
/// before a superuser runs `CREATE EXTENSION memopt` (the control file's `schema = memopt`
/// takes an existing schema as it is). As its owner she can rename it and create a `memopt`
/// of her own, whose `_require_owner` the superuser's next `enable_read` calls, as the
/// superuser. The install script from this tree is run in her schema as `CREATE EXTENSION`
/// runs it.
///
/// Before the fix: the script installed into her schema without a word (and, with the
/// installed extension, `ALTER SCHEMA memopt RENAME TO memopt_old; CREATE SCHEMA memopt;
/// CREATE FUNCTION memopt._require_owner(regclass, text) ...` as `dbo`, then
/// `memopt_old.enable_read('t')` as `postgres`, printed her NOTICE "dbo code runs as
/// postgres", tried by hand).
#[tokio::test]
async fn the_install_refuses_a_memopt_schema_another_role_made() {
    let cluster = Cluster::builder()
        .setting("shared_preload_libraries", "memopt")
        .start()
        .expect("start a cluster preloading memopt");
    cluster.psql("CREATE ROLE dbo LOGIN").unwrap();
    cluster.psql("CREATE DATABASE d OWNER dbo").unwrap();
    let url = |user: &str| format!("postgres://{user}@127.0.0.1:{}/d", cluster.port());
    let mut dbo = slipstream_pg::connect(&url("dbo"))
        .await
        .expect("connect as dbo");
    let who: String = dbo
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(who, "dbo");
    dbo.batch_execute("CREATE SCHEMA memopt").await.unwrap();
    let mut admin = slipstream_pg::connect(&url("postgres"))
        .await
        .expect("connect as postgres");
    let e = admin
        .batch_execute(&install_script())
        .await
        .expect_err("memopt installed into a schema dbo owns");
    assert_eq!(e.code(), Some(SqlState::INSUFFICIENT_PRIVILEGE), "{e}");
    assert!(
        e.to_string().contains("dbo"),
        "the error does not name the owner: {e}"
    );
    // A schema the installer made itself is accepted.
    let mut fresh = slipstream_pg::connect(&cluster.url()).await.unwrap();
    fresh
        .batch_execute(&format!("CREATE SCHEMA memopt; {}", install_script()))
        .await
        .expect("the install script in the installer's own schema");
}

/// Promise (docs/memopt.md, "Fast lookups from Rust"): `Client::memopt_table` fails where
/// memopt is not installed in the database, and `memopt_get` calls memopt's own functions.
///
/// Steps: a database without the extension, owned by `dbo` (no superuser), who creates a
/// schema `memopt` with SQL functions shaped as memopt 1.0's `get` and `get_many` that note
/// each call and its caller; the superuser resolves a table and looks a key up.
///
/// Before the fix: the resolve found her functions by name and signature, `memopt_table`
/// succeeded, and `memopt_get` called her `memopt.get` as `postgres` (the row it returned was
/// hers to choose); the OIDs then served the connection for its life.
#[tokio::test]
async fn functions_named_like_memopts_outside_the_extension_are_not_called() {
    let cluster = Cluster::start().expect("start a cluster");
    cluster.psql("CREATE ROLE dbo LOGIN").unwrap();
    cluster.psql("CREATE DATABASE d OWNER dbo").unwrap();
    let url = |user: &str| format!("postgres://{user}@127.0.0.1:{}/d", cluster.port());
    let mut dbo = slipstream_pg::connect(&url("dbo")).await.unwrap();
    dbo.batch_execute(
        "CREATE TABLE public.calls (caller text);
         GRANT INSERT ON public.calls TO PUBLIC;
         CREATE TABLE public.t (id bigint PRIMARY KEY, v text);
         INSERT INTO public.t VALUES (1, 'real');
         GRANT SELECT ON public.t TO PUBLIC;
         CREATE SCHEMA memopt;
         CREATE FUNCTION memopt.get(tbl regclass, key bigint) RETURNS record LANGUAGE sql AS $$
           INSERT INTO public.calls VALUES (current_user);
           SELECT ROW(1::bigint, 'planted'::text) $$;
         CREATE FUNCTION memopt.get(tbl regclass, key text) RETURNS record LANGUAGE sql AS $$
           SELECT ROW(1::bigint, 'planted'::text) $$;
         -- A resolve matches arguments only; no role but a superuser may return record[].
         CREATE FUNCTION memopt.get_many(tbl regclass, keys bigint[]) RETURNS text
           LANGUAGE sql AS $$ SELECT 'planted' $$;
         CREATE FUNCTION memopt.get_many(tbl regclass, keys text[]) RETURNS text
           LANGUAGE sql AS $$ SELECT 'planted' $$;",
    )
    .await
    .expect("plant the functions");
    let mut c = slipstream_pg::connect(&url("postgres")).await.unwrap();
    match c.memopt_table("public.t").await {
        Ok(t) => {
            let got = c.memopt_get(&t, &1i64).await;
            let calls: String = c
                .query_one(
                    "SELECT count(*) || ' as ' || coalesce(string_agg(DISTINCT caller, ','), 'nobody') \
                     FROM public.calls",
                    &[],
                )
                .await
                .unwrap()
                .get(0)
                .unwrap();
            panic!(
                "memopt_table resolved dbo's functions; memopt_get answered {:?}, {calls} calls",
                got.map(|r| r.map(|r| r.get::<_, String>(1).ok()))
            );
        }
        Err(e) => assert!(
            e.to_string().contains("not installed"),
            "the error does not say memopt is not installed: {e}"
        ),
    }
}

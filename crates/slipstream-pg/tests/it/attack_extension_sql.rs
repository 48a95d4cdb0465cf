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

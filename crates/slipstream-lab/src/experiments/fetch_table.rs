//! The tables the article 001 experiments read, created on first use and reused while their
//! contents are as expected.

use anyhow::Context as _;
use slipstream_pg::Client;

/// Rows between two wide rows of `fetch_memory_test`.
pub(crate) const WIDE_SPACING: i32 = 50;

/// A DO block that fails, naming the relation and its owner, when one of `names` (as the
/// experiments' SQL names them, so found through the session's search_path as that SQL finds
/// them) exists and belongs to another role than the session's. The lab reuses its tables by
/// name in the database under test, where a role with CREATE on a schema of the search_path
/// (`public`, on PostgreSQL 14 and older, for everyone) could have made one first: its rows
/// would be measured, and its triggers, rules and policies run with the lab's rights on every
/// read or write. Put it after a `CREATE ... IF NOT EXISTS` and before the first read or write
/// of the same batch: a table another role creates after it can then no longer be the one
/// used. `names` are the lab's own constants, spliced in as literals.
pub(crate) fn refuse_foreign_sql(names: &[&str]) -> String {
    let list: Vec<String> = names
        .iter()
        .map(|n| format!("pg_catalog.to_regclass('{n}')"))
        .collect();
    format!(
        "DO $slipstream_lab$
         DECLARE r record;
         BEGIN
             FOR r IN SELECT c.oid::pg_catalog.regclass::pg_catalog.text AS rel,
                             pg_catalog.pg_get_userbyid(c.relowner)::pg_catalog.text AS owner
                        FROM pg_catalog.pg_class c
                       WHERE c.oid OPERATOR(pg_catalog.=) ANY (ARRAY[{}]::pg_catalog.oid[])
                         AND c.relowner OPERATOR(pg_catalog.<>) (SELECT a.oid FROM pg_catalog.pg_roles a
                               WHERE a.rolname OPERATOR(pg_catalog.=) CURRENT_USER)
             LOOP
                 RAISE EXCEPTION 'slipstream lab: % belongs to role %, not to %: the experiment reads and writes it, so its rows, triggers, rules and policies would be that role''s',
                     r.rel, r.owner, CURRENT_USER
                     USING ERRCODE = 'insufficient_privilege',
                           HINT = 'Drop it (as its owner), or run the lab in a database or schema where only you create tables.';
             END LOOP;
         END
         $slipstream_lab$",
        list.join(", ")
    )
}

/// Article 001's `fetch_test(id number primary key, data varchar(32))`, with `rows` rows.
///
/// Reused only when its comment carries this load's signature, which is written last, after
/// VACUUM ANALYZE: a row count alone took any `fetch_test` with as many rows (other contents,
/// other widths, a load cut short before its VACUUM) for this one, and the figures then
/// measured another table than the one they describe.
pub(crate) async fn ensure_fetch_test(c: &mut Client, rows: i32) -> anyhow::Result<()> {
    let signature = format!("slipstream-lab fetch_test: ids 1..{rows}, data md5(id)");
    let present = comment(c, "fetch_test").await?;
    // After the comment is read: a table another role made before that read is refused here,
    // and one of ours cannot be replaced by another role afterwards.
    c.batch_execute(&refuse_foreign_sql(&["fetch_test"]))
        .await?;
    if present.as_deref() == Some(signature.as_str()) {
        return Ok(());
    }
    c.batch_execute(
        "DROP TABLE IF EXISTS fetch_test;
         CREATE TABLE fetch_test (id int PRIMARY KEY, data varchar(32))",
    )
    .await?;
    c.execute(
        "INSERT INTO fetch_test SELECT g, md5(g::text) FROM generate_series(1, $1) g",
        &[&rows],
    )
    .await
    .context("loading fetch_test")?;
    c.batch_execute("VACUUM ANALYZE fetch_test").await?;
    c.batch_execute(&format!("COMMENT ON TABLE fetch_test IS '{signature}'"))
        .await?;
    Ok(())
}

/// The comment on table `name`, `None` where it has none or does not exist.
async fn comment(c: &mut Client, name: &str) -> anyhow::Result<Option<String>> {
    Ok(c.query_one(
        "SELECT pg_catalog.obj_description(pg_catalog.to_regclass($1::pg_catalog.text), 'pg_class')",
        &[&name],
    )
    .await?
    .get(0)?)
}

/// `fetch_memory_test`: `narrow` rows of about 40 bytes, `wide` of them `wide_bytes` wide,
/// clustered in the middle of the id range `WIDE_SPACING` apart: a few very wide rows that one
/// fetch of a few hundred rows or more catches all together.
pub(crate) async fn ensure_fetch_memory_test(
    c: &mut Client,
    narrow: i32,
    wide: i32,
    wide_bytes: i32,
) -> anyhow::Result<()> {
    let signature = format!("{narrow}/{wide}/{wide_bytes}/{WIDE_SPACING}");
    let present: Option<String> = c
        .query_one(
            "SELECT pg_catalog.obj_description(pg_catalog.to_regclass('fetch_memory_test'), 'pg_class')",
            &[],
        )
        .await?
        .get(0)?;
    c.batch_execute(&refuse_foreign_sql(&["fetch_memory_test"]))
        .await?;
    if present.as_deref() == Some(signature.as_str()) {
        return Ok(());
    }
    c.batch_execute(
        "DROP TABLE IF EXISTS fetch_memory_test;
         CREATE TABLE fetch_memory_test (id int PRIMARY KEY, data text);
         ALTER TABLE fetch_memory_test ALTER data SET STORAGE EXTERNAL",
    )
    .await?;
    c.execute(
        "INSERT INTO fetch_memory_test
         SELECT g, CASE WHEN g >= $1 / 2 AND g < $1 / 2 + $2 * $4 AND (g - $1 / 2) % $4 = 0
                        THEN repeat('w', $3) ELSE md5(g::text) END
         FROM generate_series(1, $1) g",
        &[&narrow, &wide, &wide_bytes, &WIDE_SPACING],
    )
    .await
    .context("loading fetch_memory_test")?;
    c.batch_execute("VACUUM ANALYZE fetch_memory_test").await?;
    // Last, as for fetch_test: a load cut short is not taken for a complete one.
    c.batch_execute(&format!(
        "COMMENT ON TABLE fetch_memory_test IS '{signature}'"
    ))
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The experiments read the table they describe. Steps: a `fetch_test` with the expected
    /// number of rows but other contents (a table of that name left by something else); then
    /// `ensure_fetch_test`, and its rows; then again, which must reuse the loaded table. Before
    /// the fix the first table was reused because its row count matched: 0 of its 500 rows
    /// were article 001's.
    #[test]
    fn a_fetch_test_with_the_right_count_but_other_rows_is_reloaded() {
        let cluster = slipstream_testkit::Cluster::builder().start().unwrap();
        let (matching, reloaded) = super::super::runtime()
            .unwrap()
            .block_on(async {
                let mut c = slipstream_pg::connect(&cluster.url()).await?;
                c.batch_execute(
                    "CREATE TABLE fetch_test (id int PRIMARY KEY, data varchar(32));
                     INSERT INTO fetch_test SELECT g, 'x' FROM generate_series(1, 500) g",
                )
                .await?;
                ensure_fetch_test(&mut c, 500).await?;
                let matching: i64 = c
                    .query_one(
                        "SELECT count(*) FROM fetch_test WHERE data = md5(id::text)",
                        &[],
                    )
                    .await?
                    .get(0)?;
                let oid = "SELECT 'fetch_test'::regclass::oid::int8";
                let first: i64 = c.query_one(oid, &[]).await?.get(0)?;
                ensure_fetch_test(&mut c, 500).await?;
                let second: i64 = c.query_one(oid, &[]).await?.get(0)?;
                anyhow::Ok((matching, first != second))
            })
            .unwrap();
        assert_eq!(matching, 500, "rows of article 001's fetch_test");
        assert!(!reloaded, "a complete fetch_test was loaded again");
    }

    /// The experiments read only tables the lab's role made. Steps: a role `mallory` with
    /// CREATE on `public` (and no other right) creates `public.fetch_test` with the expected
    /// 500 ids, other data, and the load's signature as its comment (an owner may write any
    /// comment), readable by all; then `ensure_fetch_test(500)` as the superuser. Before the fix
    /// the signed table was reused: the experiments would have measured mallory's rows (and,
    /// through her triggers, rules or policies, run her code as the lab's role).
    #[test]
    fn a_fetch_test_another_role_made_and_signed_is_not_reused() {
        let cluster = slipstream_testkit::Cluster::builder().start().unwrap();
        cluster
            .psql(
                "CREATE ROLE mallory LOGIN; GRANT CREATE ON SCHEMA public TO mallory;
                 SET ROLE mallory;
                 CREATE TABLE public.fetch_test (id int PRIMARY KEY, data varchar(32));
                 INSERT INTO public.fetch_test SELECT g, 'mallory' FROM generate_series(1, 500) g;
                 COMMENT ON TABLE public.fetch_test IS 'slipstream-lab fetch_test: ids 1..500, data md5(id)';
                 GRANT ALL ON public.fetch_test TO PUBLIC;",
            )
            .unwrap();
        let got = super::super::runtime().unwrap().block_on(async {
            let mut c = slipstream_pg::connect(&cluster.url()).await?;
            ensure_fetch_test(&mut c, 500).await?;
            let matching: i64 = c
                .query_one(
                    "SELECT count(*) FROM fetch_test WHERE data = md5(id::text)",
                    &[],
                )
                .await?
                .get(0)?;
            anyhow::Ok(matching)
        });
        match got {
            Ok(matching) => panic!(
                "ensure_fetch_test took mallory's table: {matching} of its 500 rows are article 001's"
            ),
            Err(e) => {
                let e = format!("{e:#}");
                assert!(
                    e.contains("fetch_test") && e.contains("mallory"),
                    "the error names neither the table nor its owner: {e}"
                );
            }
        }
    }
}

//! The tables the article 001 experiments read, created on first use and reused while their
//! contents are as expected.

use anyhow::Context as _;
use slipstream_pg::Client;

/// Rows between two wide rows of `fetch_memory_test`.
pub(crate) const WIDE_SPACING: i32 = 50;

/// Article 001's `fetch_test(id number primary key, data varchar(32))`, with `rows` rows.
pub(crate) async fn ensure_fetch_test(c: &mut Client, rows: i32) -> anyhow::Result<()> {
    let exists: bool = c
        .query_one("SELECT to_regclass('fetch_test') IS NOT NULL", &[])
        .await?
        .get(0)?;
    let present: i64 = match exists {
        true => c
            .query_one("SELECT count(*) FROM fetch_test", &[])
            .await?
            .get(0)?,
        false => -1,
    };
    if present == rows as i64 {
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
    Ok(())
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
            "SELECT obj_description(to_regclass('fetch_memory_test'), 'pg_class')",
            &[],
        )
        .await?
        .get(0)?;
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
    c.batch_execute(&format!(
        "COMMENT ON TABLE fetch_memory_test IS '{signature}'"
    ))
    .await?;
    c.batch_execute("VACUUM ANALYZE fetch_memory_test").await?;
    Ok(())
}

//! Attacks (helper 73) on the round-trip savers where they meet the rest of the client: SQL
//! run past the statement cache (`Uncached`, `statement_cache_size=0`) with values whose types
//! the client must look up, errors the server raises about prepared statements that are not
//! the cache's, and what a cached statement resolves (docs/statement-cache.md,
//! docs/fetch-size.md).

use slipstream_pg::{Client, FetchSize, Uncached};

#[derive(Debug, Clone, Copy, PartialEq, Eq, postgres_types::ToSql, postgres_types::FromSql)]
#[postgres(name = "mood")]
enum Mood {
    #[postgres(name = "sad")]
    Sad,
    #[postgres(name = "happy")]
    Happy,
}

/// The `id`s of the rows `c` reads with `sql` and `mood`: through `query`, or a row stream of
/// one row per fetch.
async fn ids(
    c: &mut Client,
    sql: &str,
    uncached: bool,
    stream: bool,
    mood: Mood,
) -> Result<Vec<i32>, slipstream_pg::Error> {
    let rows = match (uncached, stream) {
        (true, false) => c.query(&Uncached(sql), &[&mood]).await?,
        (false, false) => c.query(sql, &[&mood]).await?,
        (true, true) => {
            let mut s = c
                .query_stream_with(&Uncached(sql), &[&mood], FetchSize::Rows(1))
                .await?;
            let mut rows = Vec::new();
            while let Some(row) = s.next().await? {
                rows.push(row);
            }
            rows
        }
        (false, true) => {
            let mut s = c
                .query_stream_with(sql, &[&mood], FetchSize::Rows(1))
                .await?;
            let mut rows = Vec::new();
            while let Some(row) = s.next().await? {
                rows.push(row);
            }
            rows
        }
    };
    rows.iter().map(|r| r.get(0)).collect()
}

/// Promise (statement-cache.md, "Custom types" and "Uncached"): a value of a type the client
/// cannot name makes the first run ask the server for its type, and `Uncached(sql)` or
/// `statement_cache_size=0` runs the statement on the unnamed statement. Both together, on a
/// connection that has not met the type yet, must run the caller's statement.
///
/// Steps: on fresh connections (the enum not yet looked up), `SELECT id FROM m WHERE v = $1`
/// with a derived enum value, through `query` and a row stream, `Uncached` and with the cache
/// off; compared with tokio-postgres.
///
/// Before the fix every one of them failed (`54000 number of array dimensions (1751216240)
/// exceeds the maximum allowed`, or `08P01 insufficient data left in message`): the statement
/// was prepared as the unnamed statement to learn its parameter types, then the lookup of the
/// enum in the catalogs ran on the unnamed statement too, replacing it, and the caller's
/// values were bound to the lookup query.
#[tokio::test]
async fn a_custom_typed_value_runs_past_the_cache_on_its_first_use() {
    let (cluster, mut c) = super::setup().await;
    c.batch_execute(
        "CREATE TYPE mood AS ENUM ('sad', 'happy');
         CREATE TABLE m (id int, v mood);
         INSERT INTO m VALUES (1, 'sad'), (2, 'happy'), (3, 'happy')",
    )
    .await
    .unwrap();
    let sql = "SELECT id FROM m WHERE v = $1 ORDER BY id";
    let peer = super::peer(&cluster).await;
    let want: Vec<i32> = peer
        .query(sql, &[&Mood::Happy])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(want, [2, 3]);
    for params in ["", "?statement_cache_size=0"] {
        for (uncached, stream) in [(true, false), (true, true), (false, false), (false, true)] {
            let url = format!("{}{params}", cluster.url());
            let mut fresh = slipstream_pg::connect(&url).await.unwrap();
            let got = ids(&mut fresh, sql, uncached, stream, Mood::Happy).await;
            let how = format!("{params:?}, Uncached {uncached}, stream {stream}");
            assert_eq!(
                got.as_deref().map_err(|e| e.to_string()),
                Ok(&want[..]),
                "{how}"
            );
            // And again, the type now known.
            let got = ids(&mut fresh, sql, uncached, stream, Mood::Sad).await;
            assert_eq!(got.map_err(|e| e.to_string()), Ok(vec![1]), "{how}, again");
        }
    }
}

//! Attacks on types that are not built in (enums, composites, domains, ranges, arrays of them):
//! what a value looks like through slipstream against tokio-postgres and the server's own text,
//! and whether a definition the client holds can go stale without an error.

use futures_util::TryStreamExt;
use slipstream_pg::types::{FromSql, ToSql};
use slipstream_pg::{Client, ErrorKind};

/// Both fields optional: dropping an attribute makes its values NULL.
#[derive(Debug, Clone, PartialEq, ToSql, FromSql)]
#[postgres(name = "pair")]
struct Pair {
    a: Option<i32>,
    b: Option<i32>,
}

/// The server's own reading of `tp`'s single value `p`: `(p).a`, `(p).b`.
async fn truth(c: &mut Client) -> (Option<i32>, Option<i32>) {
    let row = c
        .query_one("SELECT (p).a, (p).b FROM tp", &[])
        .await
        .unwrap();
    (row.get(0).unwrap(), row.get(1).unwrap())
}

/// What a read of a `pair` column must be: the server's value, or an error that names the way
/// out. Returns whether it was an error.
fn read_or_refused(how: &str, got: Result<Pair, slipstream_pg::Error>, want: &Pair) -> bool {
    match got {
        Ok(p) => {
            assert_eq!(&p, want, "{how}: the value read is not the server's");
            false
        }
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains("prepare it again") && text.contains("pair"),
                "{how}: the error must name the type and say what to do: {text}"
            );
            true
        }
    }
}

/// Promise (docs/client.md, "Types"): the type cache "is forgotten with ... `ALTER TYPE` and
/// `ALTER DOMAIN` (however they were run on this connection)", so that a composite whose
/// attribute was dropped and added again is not "read and written in its old field order";
/// and a value is never silently wrong.
///
/// Steps: `CREATE TYPE pair AS (a int4, b int4)`, a row in a table; `prepare` a `SELECT` of it
/// and an `INSERT` of a `pair` parameter (the statements hold the definition looked up then);
/// `ALTER TYPE pair DROP ATTRIBUTE a, ADD ATTRIBUTE a int4` on the same connection (now
/// `(b, a)`); then read the row through the held statement by `query`, a row stream and a
/// pipeline, and insert through the held `INSERT`. Each must give the server's values
/// (`(p).a`, `(p).b`) or refuse with an error that says to prepare again.
///
/// Before the fix: the held statements kept the old field order, so every read put `b`'s value
/// in `a` (`Pair { a: Some(2), b: None }` for the server's `a = NULL, b = 2`) and the insert
/// stored `a`'s value in `b`, with no error anywhere.
#[tokio::test]
async fn a_statement_held_across_an_alter_type_on_its_connection_never_swaps_fields() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(
        "CREATE TYPE pair AS (a int4, b int4); CREATE TABLE tp (p pair);
         INSERT INTO tp VALUES (ROW(1, 2))",
    )
    .await
    .unwrap();
    let select = c.prepare("SELECT p FROM tp").await.unwrap();
    let insert = c.prepare("INSERT INTO tp VALUES ($1)").await.unwrap();
    let before: Pair = c.query_one(&select, &[]).await.unwrap().get(0).unwrap();
    assert_eq!(
        before,
        Pair {
            a: Some(1),
            b: Some(2)
        }
    );

    c.batch_execute("ALTER TYPE pair DROP ATTRIBUTE a, ADD ATTRIBUTE a int4")
        .await
        .unwrap();
    let (a, b) = truth(&mut c).await;
    assert_eq!((a, b), (None, Some(2)), "the server dropped a's values");
    let want = Pair { a, b };

    let by_query = c
        .query_one(&select, &[])
        .await
        .and_then(|row| row.get::<_, Pair>(0));
    read_or_refused("query", by_query, &want);

    let by_stream = match c.query_stream(&select, &[]).await {
        Ok(rows) => rows
            .try_collect::<Vec<_>>()
            .await
            .and_then(|rows| rows[0].get::<_, Pair>(0)),
        Err(e) => Err(e),
    };
    read_or_refused("row stream", by_stream, &want);

    let by_pipeline = async {
        let mut p = c.pipeline();
        let op = p.query(&select, &[]).await?;
        let rows = p.process(&op).await?;
        drop(p.end().await);
        rows[0].get::<_, Pair>(0)
    }
    .await;
    read_or_refused("pipeline", by_pipeline, &want);
    c.batch_execute("SELECT 1").await.unwrap();

    // The held INSERT: written in the old order, 10 went to b and 20 to a.
    c.batch_execute("DELETE FROM tp").await.unwrap();
    let sent = Pair {
        a: Some(10),
        b: Some(20),
    };
    match c.execute(&insert, &[&sent]).await {
        Ok(n) => {
            assert_eq!(n, 1);
            let (a, b) = truth(&mut c).await;
            assert_eq!(Pair { a, b }, sent, "the held INSERT stored other values");
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
            assert!(e.to_string().contains("prepare it again"), "{e}");
        }
    }

    // Prepared again, the statements work with the new definition, and an ALTER TYPE of
    // another type leaves them working (their own types are the same).
    let select = c.prepare("SELECT p FROM tp").await.unwrap();
    let insert = c.prepare("INSERT INTO tp VALUES ($1)").await.unwrap();
    c.batch_execute("DELETE FROM tp").await.unwrap();
    c.execute(&insert, &[&sent]).await.unwrap();
    let got: Pair = c.query_one(&select, &[]).await.unwrap().get(0).unwrap();
    assert_eq!(got, sent);
    c.batch_execute("CREATE TYPE other AS ENUM ('x'); ALTER TYPE other ADD VALUE 'y'")
        .await
        .unwrap();
    let got: Pair = c.query_one(&select, &[]).await.unwrap().get(0).unwrap();
    assert_eq!(got, sent);
    let mut p = c.pipeline();
    let op = p.query(&select, &[]).await.unwrap();
    let rows = p.process(&op).await.unwrap();
    assert_eq!(rows[0].get::<_, Pair>(0).unwrap(), sent);
    drop(p.end().await);
}

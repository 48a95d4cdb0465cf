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

/// Promise (statement-cache.md, "After DDL"): the client knows *its* stale statement by the
/// server's 0A000 (or 26000 when deallocated) and prepares it again outside a transaction;
/// inside one, the call fails "with the server's error and a message saying so: roll back and
/// run the transaction again". The application's own prepared statements live beside the
/// cache's ("Names"), and a SQL `EXECUTE` of one of them, made stale by DDL or deallocated,
/// gets the same codes from the server: that is the application's error, which neither a
/// re-prepare nor a rerun can mend.
///
/// Steps: `PREPARE foo` in SQL; `EXECUTE foo` run twice through the cache; `ALTER TABLE` so
/// that `foo` changes result type; `EXECUTE foo` inside a transaction and in autocommit; then
/// `DEALLOCATE foo` and the same again. The cache holds another statement throughout.
///
/// Before the fix: inside the transaction the error said a cached statement of the client's
/// had gone stale and told the caller to roll back and run the transaction again (which fails
/// the same way); in autocommit the client prepared `EXECUTE foo` again and retried it,
/// counting a re-prepare; and the 26000 made the client forget every cached statement.
#[tokio::test]
async fn an_applications_own_stale_prepared_statement_is_not_taken_for_the_caches() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(
        "CREATE TABLE t (a int); INSERT INTO t VALUES (1);
         PREPARE foo AS SELECT * FROM t",
    )
    .await
    .unwrap();
    c.query_one("SELECT $1::int4", &[&1i32]).await.unwrap();
    for _ in 0..2 {
        assert_eq!(c.query("EXECUTE foo", &[]).await.unwrap().len(), 1);
    }
    c.batch_execute("ALTER TABLE t ADD COLUMN b int")
        .await
        .unwrap();
    let before = c.statement_cache_stats();
    assert_eq!(before.size, 2);
    let mut errors = Vec::new();
    for deallocated in [false, true] {
        if deallocated {
            c.batch_execute("DEALLOCATE foo").await.unwrap();
        }
        let mut tx = c.transaction().await.unwrap();
        errors.push(tx.query("EXECUTE foo", &[]).await.unwrap_err());
        tx.rollback().await.unwrap();
        errors.push(c.query("EXECUTE foo", &[]).await.unwrap_err());
    }
    let codes: Vec<_> = errors.iter().map(|e| e.code()).collect();
    use slipstream_pg::SqlState;
    assert_eq!(
        codes,
        [
            Some(SqlState::FEATURE_NOT_SUPPORTED),
            Some(SqlState::FEATURE_NOT_SUPPORTED),
            Some(SqlState::INVALID_SQL_STATEMENT_NAME),
            Some(SqlState::INVALID_SQL_STATEMENT_NAME),
        ]
    );
    for e in &errors {
        let text = e.to_string();
        assert!(
            !text.contains("went stale") && !text.contains("run the transaction again"),
            "the application's statement, not the cache's: {text}"
        );
    }
    let after = c.statement_cache_stats();
    assert_eq!(
        (after.reprepares, after.size),
        (before.reprepares, before.size),
        "nothing of the cache's was stale: {after:?}"
    );
    // Its own statements still run, and a real change under them is still re-prepared.
    c.query_one("SELECT $1::int4", &[&2i32]).await.unwrap();
    c.query_one("SELECT * FROM t", &[]).await.unwrap();
    c.batch_execute("ALTER TABLE t ADD COLUMN d int")
        .await
        .unwrap();
    assert_eq!(c.query_one("SELECT * FROM t", &[]).await.unwrap().len(), 3);
    assert_eq!(c.statement_cache_stats().reprepares, before.reprepares + 1);
}

/// Holds, as docs/statement-cache.md now says ("A cached statement keeps the objects it
/// found", and a string parameter's type across `SET search_path`): what a cached statement
/// reads differs from `Uncached` after a shadowing object appears or the path changes what a
/// string is compared with, and `clear_statement_cache()` ends the difference. Pinned so that
/// the page is corrected if a server (or the client) ever starts to notice.
#[tokio::test]
async fn holds_a_cached_statement_keeps_what_it_found_until_the_cache_is_cleared() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(
        "CREATE SCHEMA a; CREATE SCHEMA s;
         CREATE TABLE public.t (x text, c int); INSERT INTO public.t VALUES ('public', 5);
         CREATE TABLE s.t (x text, c text); INSERT INTO s.t VALUES ('s', 'abc');
         SET search_path = a, public",
    )
    .await
    .unwrap();
    async fn both(c: &mut Client, sql: &str, p: &str) -> (Result<String, String>, String) {
        let read = |r: Result<Vec<slipstream_pg::Row>, slipstream_pg::Error>| {
            r.map(|rows| {
                rows.iter()
                    .map(|r| r.get::<_, String>(0).unwrap())
                    .collect()
            })
            .map_err(|e| e.code().map_or(e.to_string(), |s| s.code().to_string()))
        };
        let cached = read(c.query(sql, &[&p]).await);
        let uncached = read(c.query(&Uncached(sql), &[&p]).await).unwrap();
        (cached, uncached)
    }
    let q = "SELECT x FROM t WHERE c = $1";
    assert_eq!(
        both(&mut c, q, "5").await,
        (Ok("public".into()), "public".into())
    );
    // A table created afterwards earlier on the path: only the uncached run sees it.
    c.batch_execute("CREATE TABLE a.t (x text, c int); INSERT INTO a.t VALUES ('a', 5)")
        .await
        .unwrap();
    assert_eq!(
        both(&mut c, q, "5").await,
        (Ok("public".into()), "a".into())
    );
    c.clear_statement_cache();
    assert_eq!(both(&mut c, q, "5").await, (Ok("a".into()), "a".into()));
    // The string was typed int4 by the first run; under `s`, `t.c` is text.
    c.batch_execute("SET search_path = s").await.unwrap();
    assert_eq!(
        both(&mut c, q, "abc").await,
        (Err("22P02".into()), "s".into())
    );
    c.clear_statement_cache();
    assert_eq!(both(&mut c, q, "abc").await, (Ok("s".into()), "s".into()));
}

/// Promise (client.md, Streams; `RowStream`): a row stream holds the connection until it is
/// gone, and what it leaves unread is discarded before the next call's reply. Leaking one
/// (`std::mem::forget`, a cycle of `Rc`s) is safe Rust, and must not leave the connection
/// waiting for ever: in autocommit and in a transaction the next call answers, and the
/// transaction goes on.
///
/// Before the fix the next call hung: the stream queues its `Sync` in `Drop`, which a leaked
/// stream never runs, and the server, in the middle of the stream's extended-protocol
/// exchange, answers nothing until that `Sync` comes.
#[tokio::test]
async fn a_leaked_row_stream_does_not_hang_the_next_call() {
    use super::engine::bounded;
    let (_cluster, mut c) = super::setup().await;
    let sql = "SELECT g FROM generate_series(1, 1000) g";
    let mut rows = c
        .query_stream_with(sql, &[], FetchSize::Rows(10))
        .await
        .unwrap();
    rows.next().await.unwrap().unwrap();
    std::mem::forget(rows);
    let row = bounded(
        "the call after a leaked stream",
        c.query_one("SELECT 1", &[]),
    )
    .await
    .unwrap();
    assert_eq!(row.get::<_, i32>(0).unwrap(), 1);
    assert_eq!(
        c.transaction_status(),
        slipstream_pg::TransactionStatus::Idle
    );

    c.batch_execute("CREATE TABLE t (id int)").await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    let mut rows = tx
        .query_stream_with(sql, &[], FetchSize::Rows(10))
        .await
        .unwrap();
    rows.next().await.unwrap().unwrap();
    std::mem::forget(rows);
    bounded(
        "the call after a leaked stream in a transaction",
        tx.execute("INSERT INTO t VALUES (2)", &[]),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM t").await;
    assert_eq!(n, 2);
}

/// Promise (statement-cache.md, "Explicit statements": `Client::prepare` is not cached, so the
/// client never prepares it again by itself; errors name what failed and what to do). A
/// statement the caller prepared that DDL made stale (0A000) or that `DEALLOCATE ALL` removed
/// (26000) fails every later run: the error must say it is the caller's statement and that
/// it must be prepared again, through `query` and through a row stream.
///
/// Before the fix the error was the server's bare `cached plan must not change result type`
/// (or `prepared statement "S1" does not exist`, a name the caller never chose), which names
/// neither the statement nor the remedy.
#[tokio::test]
async fn a_callers_stale_prepared_statement_says_to_prepare_it_again() {
    use slipstream_pg::SqlState;
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (a int); INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    let sql = "SELECT * FROM t";
    for (change, code) in [
        (
            "ALTER TABLE t ADD COLUMN b int",
            SqlState::FEATURE_NOT_SUPPORTED,
        ),
        ("DEALLOCATE ALL", SqlState::INVALID_SQL_STATEMENT_NAME),
    ] {
        let stmt = c.prepare(sql).await.unwrap();
        c.query(&stmt, &[]).await.unwrap();
        c.batch_execute(change).await.unwrap();
        let by_query = c.query(&stmt, &[]).await.unwrap_err();
        let by_stream = c.query_stream(&stmt, &[]).await.map(drop).unwrap_err();
        for e in [by_query, by_stream] {
            assert_eq!(e.code(), Some(code), "after {change}: {e}");
            let text = e.to_string();
            assert!(
                text.contains(sql) && text.contains("prepare it again"),
                "after {change}: {text}"
            );
        }
        // The SQL text itself runs, prepared afresh by the cache.
        assert_eq!(c.query(sql, &[]).await.unwrap().len(), 1);
    }
}

/// Promise (statement-cache.md, "After DDL"): inside a transaction a cached statement made
/// stale fails "with the server's error and a message saying so: roll back and run the
/// transaction again (the statement is then prepared afresh)". A transaction that runs the
/// same SQL before and after its own `ALTER TABLE` (a migration that reads, alters, reads
/// again) runs at once under tokio-postgres and `Uncached`; through the cache, run again as
/// told, it must succeed.
///
/// Before the fix every rerun failed the same way: the first read prepared the statement
/// afresh, before the `ALTER`, and the second read found it stale again.
#[tokio::test]
async fn a_transaction_reading_before_and_after_its_own_ddl_succeeds_when_run_again() {
    use slipstream_pg::SqlState;
    let (cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (a int); INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    let read = "SELECT * FROM t";
    let peer = super::peer(&cluster).await;
    peer.batch_execute("BEGIN").await.unwrap();
    assert_eq!(peer.query(read, &[]).await.unwrap()[0].len(), 1);
    peer.batch_execute("ALTER TABLE t ADD COLUMN b int")
        .await
        .unwrap();
    assert_eq!(peer.query(read, &[]).await.unwrap()[0].len(), 2);
    peer.batch_execute("ROLLBACK").await.unwrap();

    async fn migrate(c: &mut Client, read: &str) -> Result<usize, slipstream_pg::Error> {
        let mut tx = c.transaction().await?;
        assert_eq!(tx.query_one(read, &[]).await?.len(), 1);
        tx.batch_execute("ALTER TABLE t ADD COLUMN b int").await?;
        let columns = tx.query_one(read, &[]).await?.len();
        tx.commit().await?;
        Ok(columns)
    }
    c.query_one(read, &[]).await.unwrap();
    let e = migrate(&mut c, read).await.unwrap_err();
    assert_eq!(e.code(), Some(SqlState::FEATURE_NOT_SUPPORTED), "{e}");
    assert!(e.to_string().contains("run the transaction again"), "{e}");
    for attempt in 1..=3 {
        match migrate(&mut c, read).await {
            Ok(columns) => {
                assert_eq!(columns, 2);
                break;
            }
            Err(e) => assert!(attempt < 3, "run again {attempt} times, still: {e}"),
        }
    }
    let row = c.query_one(read, &[]).await.unwrap();
    assert_eq!(row.len(), 2);
}

//! The guides' examples, run: docs/statement-cache.md, docs/pipelining.md and docs/client.md
//! state results in their examples (`assert_eq!`, comments saying what comes back). The
//! doctests in `src/lib.rs` only compile those examples (they name hosts that do not exist);
//! these tests run the same calls on a real cluster and hold the stated results. All held
//! when written (session 43); they are here so that a change of behaviour fails a test
//! instead of leaving a guide wrong.

use futures_util::{StreamExt, TryStreamExt, stream};
use slipstream_pg::{ErrorKind, PipelineMode, PipelineOptions, Uncached};
use slipstream_testkit::Cluster;

/// Holds. docs/statement-cache.md's example: with `statement_cache_size=100`, a thousand runs
/// of one SQL text with an `i32` are one miss and 999 hits; `Uncached` does not touch the
/// cache.
#[tokio::test]
async fn statement_cache_guide_example_counts_one_miss_and_999_hits() {
    let cluster = Cluster::start().unwrap();
    let mut client = slipstream_pg::connect(&format!("{}?statement_cache_size=100", cluster.url()))
        .await
        .unwrap();
    client
        .batch_execute(
            "CREATE TABLE fetch_test (id int PRIMARY KEY, data text);
             INSERT INTO fetch_test SELECT g, 'row ' || g FROM generate_series(1, 10) g;
             CREATE TABLE jobs (id int8 PRIMARY KEY, state text)",
        )
        .await
        .unwrap();
    for id in 1..=1000i32 {
        client
            .query_opt("SELECT data FROM fetch_test WHERE id = $1", &[&id])
            .await
            .unwrap();
    }
    let s = client.statement_cache_stats();
    assert_eq!((s.misses, s.hits), (1, 999), "{s:?}");
    assert_eq!(s.capacity, 100, "{s:?}");
    client
        .execute(
            &Uncached("UPDATE jobs SET state = 'done' WHERE id = $1"),
            &[&7i64],
        )
        .await
        .unwrap();
    let after = client.statement_cache_stats();
    assert_eq!(
        (after.misses, after.hits, after.size),
        (1, 999, 1),
        "Uncached went through the cache: {after:?}"
    );
}

/// Holds. docs/pipelining.md, abort on error: with operation 1 failing, operation 2's result
/// is an `ErrorKind::Aborted` error whose `aborted_by()` names operation 1, and the block's
/// first update is rolled back with it and reported as aborted, not done ("a failure rolls
/// back the whole block", README; the modes table).
#[tokio::test]
async fn pipelining_guide_abort_example_names_the_failed_operation() {
    let (_cluster, mut client) = crate::setup().await;
    client
        .batch_execute(
            "CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);
             INSERT INTO accounts VALUES (1, 100), (2, 100), (3, 100)",
        )
        .await
        .unwrap();
    let mut p = client.pipeline_with(PipelineOptions::new().mode(PipelineMode::AbortOnError));
    let debit = p
        .execute(
            "UPDATE accounts SET balance = balance - 10 WHERE id = 1",
            &[],
        )
        .await
        .unwrap();
    let bad = p
        .execute(
            "UPDATE accounts SET balance = balance / 0 WHERE id = 2",
            &[],
        )
        .await
        .unwrap();
    let credit = p
        .execute(
            "UPDATE accounts SET balance = balance + 10 WHERE id = 3",
            &[],
        )
        .await
        .unwrap();
    let results = p.end().await;
    let e = results[credit.id() as usize].as_ref().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
    assert_eq!(e.aborted_by(), Some(bad.id()), "{e}");
    let first = e.as_db_error().expect("operation 1's error rides along");
    assert_eq!(first.code(), slipstream_pg::SqlState::DIVISION_BY_ZERO);
    assert!(results[bad.id() as usize].is_err());
    // The debit ran before the failure, in the same implicit transaction: rolled back with it
    // and reported so ("Rolled-back work is never reported as done").
    let d = results[debit.id() as usize].as_ref().unwrap_err();
    assert_eq!(
        (d.kind(), d.aborted_by()),
        (ErrorKind::Aborted, Some(bad.id())),
        "{d}"
    );
    let balance: i32 = client
        .query_one("SELECT balance FROM accounts WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(balance, 100, "the block's debit was not rolled back");
}

/// Holds. docs/client.md, Streams: `take(3)` gives three rows, `try_fold` sums every row, a
/// stream `forward`ed into `copy_in` loads every chunk and `rows()` says how many, and
/// `copy_out` collected gives them back.
#[tokio::test]
async fn client_guide_stream_examples_give_what_they_say() {
    use slipstream_pg::FetchSize;
    let (_cluster, mut client) = crate::setup().await;
    let rows = client
        .query_stream_with(
            "SELECT g FROM generate_series(1, 1000000) g",
            &[],
            FetchSize::Rows(100),
        )
        .await
        .unwrap();
    let first: Vec<slipstream_pg::Row> = rows.take(3).try_collect().await.unwrap();
    let firsts: Vec<i32> = first.iter().map(|r| r.get(0).unwrap()).collect();
    assert_eq!(firsts, [1, 2, 3]);

    let rows = client
        .query_stream_with(
            "SELECT g FROM generate_series(1, 1000000) g",
            &[],
            FetchSize::Rows(1000),
        )
        .await
        .unwrap();
    let sum = rows
        .try_fold(0i64, |acc, row| async move {
            Ok(acc + row.get::<_, i32>(0)? as i64)
        })
        .await
        .unwrap();
    assert_eq!(sum, 1_000_000 * 1_000_001 / 2);

    client
        .batch_execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
        .await
        .unwrap();
    let lines = stream::iter(0..1000)
        .map(|i| Ok::<_, slipstream_pg::Error>(bytes::Bytes::from(format!("{i}\titem {i}\n"))));
    let mut copy = client
        .copy_in("COPY items (id, name) FROM STDIN")
        .await
        .unwrap();
    lines.forward(&mut copy).await.unwrap();
    assert_eq!(copy.rows(), Some(1000));
    drop(copy);
    let chunks: Vec<bytes::Bytes> = client
        .copy_out("COPY items TO STDOUT")
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(chunks.len(), 1000, "one row per chunk in text format");
    assert_eq!(&chunks[999][..], b"999\titem 999\n");
}

/// Holds. The rustdoc examples of `Error` and `DbError` (src/error.rs) state what each field
/// holds for a given failure; they are `no_run` (they need a server), so this runs the same
/// statements and holds the stated values.
#[tokio::test]
async fn the_error_field_examples_hold() {
    use slipstream_pg::{ErrorPosition, SqlState};
    let (cluster, mut client) = super::setup().await;
    client
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY); INSERT INTO orders VALUES (1);
             CREATE TABLE items (id int, name text NOT NULL);
             CREATE DOMAIN positive AS int CHECK (VALUE > 0)",
        )
        .await
        .unwrap();
    let dup = client
        .batch_execute("INSERT INTO orders VALUES (1)")
        .await
        .unwrap_err();
    assert_eq!(dup.code(), Some(SqlState::UNIQUE_VIOLATION));
    let db = dup.as_db_error().unwrap();
    assert_eq!(db.constraint(), Some("orders_pkey"));
    assert_eq!(db.detail(), Some("Key (id)=(1) already exists."));
    assert_eq!((db.schema(), db.table()), (Some("public"), Some("orders")));

    let syntax = client.batch_execute("SELEKT 1").await.unwrap_err();
    let db = syntax.as_db_error().unwrap();
    assert_eq!(
        (db.severity(), db.code()),
        ("ERROR", SqlState::SYNTAX_ERROR)
    );

    let zero = client.batch_execute("SELECT 1/0").await.unwrap_err();
    let db = zero.as_db_error().unwrap();
    assert_eq!(db.message(), "division by zero");
    assert_eq!((db.file(), db.routine()), (Some("int.c"), Some("int4div")));
    assert!(db.line().is_some());

    let cast = client.batch_execute("SELECT length(1)").await.unwrap_err();
    let hint = cast.as_db_error().unwrap().hint().unwrap_or_default();
    assert!(hint.contains("explicit type casts"), "{hint}");

    let column = client
        .batch_execute("SELECT nope FROM pg_class")
        .await
        .unwrap_err();
    assert_eq!(
        column.as_db_error().unwrap().position(),
        Some(&ErrorPosition::Original(8))
    );

    let plpgsql = client
        .batch_execute("DO $$ BEGIN PERFORM 1/0; END $$")
        .await
        .unwrap_err();
    assert!(
        plpgsql
            .as_db_error()
            .unwrap()
            .where_()
            .unwrap()
            .contains("PL/pgSQL")
    );

    let null = client
        .batch_execute("INSERT INTO items VALUES (1, NULL)")
        .await
        .unwrap_err();
    assert_eq!(null.as_db_error().unwrap().column(), Some("name"));

    let domain = client
        .batch_execute("SELECT (-1)::positive")
        .await
        .unwrap_err();
    assert_eq!(domain.as_db_error().unwrap().datatype(), Some("positive"));

    // `is_fatal`: another session ends this one.
    let mut other = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let pid = client.backend_pid();
    other
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    let e = client.batch_execute("SELECT 1").await.unwrap_err();
    assert!(
        e.as_db_error().is_some_and(|db| db.is_fatal()) && e.is_closed(),
        "{e:?}"
    );
}

/// Holds. The `no_run` rustdoc examples of `Statement`, `Column`, `RowStream`, `CancelToken`,
/// `AbortHandle` and `Pipeline` state results; this runs the same calls on a real server.
#[tokio::test]
async fn the_client_accessor_examples_hold() {
    use slipstream_pg::types::Type;
    use slipstream_pg::{FetchSize, SqlState};
    let (cluster, mut client) = super::setup().await;

    let stmt = client.prepare("SELECT $1::int4 + 1").await.unwrap();
    assert_eq!(stmt.sql(), "SELECT $1::int4 + 1");
    let stmt = client
        .prepare("SELECT * FROM pg_class WHERE relname = $1 LIMIT $2")
        .await
        .unwrap();
    assert_eq!(stmt.params(), &[Type::NAME, Type::INT8]);
    let stmt = client
        .prepare("SELECT oid, relname FROM pg_class")
        .await
        .unwrap();
    let names: Vec<&str> = stmt.columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, ["oid", "relname"]);
    assert!(
        client
            .prepare("SET work_mem = '64MB'")
            .await
            .unwrap()
            .columns()
            .is_empty()
    );
    let stmt = client
        .prepare("SELECT relname AS table_name FROM pg_class")
        .await
        .unwrap();
    assert_eq!(stmt.columns()[0].name(), "table_name");
    let stmt = client.prepare("SELECT now()").await.unwrap();
    assert_eq!(stmt.columns()[0].type_(), &Type::TIMESTAMPTZ);
    let stmt = client
        .prepare("SELECT relname, 1 AS one FROM pg_class")
        .await
        .unwrap();
    assert_eq!(stmt.columns()[0].table_oid(), Some(1259));
    assert_eq!(stmt.columns()[1].table_oid(), None);
    let stmt = client
        .prepare("SELECT relnamespace, relname FROM pg_class")
        .await
        .unwrap();
    assert_eq!(stmt.columns()[1].column_id(), Some(2));
    let stmt = client
        .prepare("SELECT 'x'::varchar(32), 'y'::text")
        .await
        .unwrap();
    assert_eq!(stmt.columns()[0].type_modifier(), 36);
    assert_eq!(stmt.columns()[1].type_modifier(), -1);

    {
        let rows = client
            .query_stream("SELECT oid, relname FROM pg_class", &[])
            .await
            .unwrap();
        assert_eq!(rows.columns()[1].name(), "relname");
    }
    {
        let sql = "SELECT g FROM generate_series(1, 1000) g";
        let mut rows = client
            .query_stream_with(sql, &[], FetchSize::Rows(100))
            .await
            .unwrap();
        rows.next().await.unwrap();
        assert_eq!(rows.rows_per_fetch(), 100);
    }
    {
        let sql = "SELECT repeat('x', 1000) FROM generate_series(1, 10000)";
        let mut rows = client
            .query_stream_with(sql, &[], FetchSize::Bytes(64 * 1024))
            .await
            .unwrap();
        while rows.next().await.unwrap().is_some() {}
        assert!(
            rows.peak_buffered_bytes() <= 64 * 1024 + 2000,
            "{}",
            rows.peak_buffered_bytes()
        );
    }
    {
        let mut p = client.pipeline();
        assert!(p.is_empty());
        p.query("SELECT 1", &[]).await.unwrap();
        p.query("SELECT 2", &[]).await.unwrap();
        assert_eq!(p.len(), 2);
        assert!(p.end().await.iter().all(Result::is_ok));
    }

    assert!(client.parameter("TimeZone").is_some());
    assert_eq!(client.parameter("timezone"), None);
    assert_eq!(client.cancel_token().process_id(), client.backend_pid());
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(pid, client.backend_pid());
    assert!(!client.is_tls());
    let token = client.cancel_token();
    let (slow, cancelled) = tokio::join!(client.batch_execute("SELECT pg_sleep(60)"), async {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        token.cancel().await
    });
    cancelled.unwrap();
    assert_eq!(slow.unwrap_err().code(), Some(SqlState::QUERY_CANCELED));

    let mut client = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let handle = client.abort_handle().unwrap();
    assert!(!handle.is_aborted());
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        handle.abort("held too long").await;
    });
    let e = client
        .batch_execute("SELECT pg_sleep(60)")
        .await
        .unwrap_err();
    assert!(
        e.is_closed() && e.to_string().contains("held too long"),
        "{e}"
    );
}

/// Holds. The `no_run` rustdoc examples of `Row`, `SimpleRow` and `RowIndex` state what they
/// return; this runs the same calls on a real server.
#[tokio::test]
async fn the_row_examples_hold() {
    use slipstream_pg::types::Type;
    use slipstream_pg::{ErrorKind, SimpleQueryMessage, SimpleRow};
    let (_cluster, mut client) = super::setup().await;
    let row = client
        .query_one("SELECT 1::int4 AS one, 'two' AS two", &[])
        .await
        .unwrap();
    let one: i32 = row.get(0).unwrap();
    let two: &str = row.get("two").unwrap();
    assert_eq!((one, two), (1, "two"));
    let row = client
        .query_one("SELECT 1::int4 AS one, now() AS at", &[])
        .await
        .unwrap();
    assert_eq!(row.columns()[1].name(), "at");
    assert_eq!(row.columns()[1].type_(), &Type::TIMESTAMPTZ);
    assert_eq!(
        client.query_one("SELECT 1, 2, 3", &[]).await.unwrap().len(),
        3
    );
    assert!(client.query_one("SELECT", &[]).await.unwrap().is_empty());
    let row = client
        .query_one("SELECT 42::int8 AS n, NULL::text AS note", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>("n").unwrap(), 42);
    assert_eq!(row.get::<_, Option<String>>("note").unwrap(), None);
    assert_eq!(
        row.get::<_, i32>("n").unwrap_err().kind(),
        ErrorKind::Conversion
    );
    assert_eq!(
        row.get::<_, i64>("nope").unwrap_err().kind(),
        ErrorKind::Column
    );

    let mut first_row = async |sql: &str| -> SimpleRow {
        let messages = client.simple_query(sql).await.unwrap();
        assert!(matches!(
            messages.first(),
            Some(SimpleQueryMessage::RowDescription(_))
        ));
        messages
            .into_iter()
            .find_map(|m| match m {
                SimpleQueryMessage::Row(row) => Some(row),
                _ => None,
            })
            .expect("one row")
    };
    assert_eq!(
        first_row("SELECT 1 AS one, 2 AS two").await.columns(),
        ["one", "two"]
    );
    assert_eq!(first_row("SELECT 1, 2").await.len(), 2);
    assert!(first_row("SELECT").await.is_empty());
    let row = first_row("SELECT 1.50::numeric AS price, NULL AS note").await;
    assert_eq!(row.get("price").unwrap(), Some("1.50"));
    assert_eq!(row.get(1).unwrap(), None);
}

/// Holds. The `no_run` rustdoc examples of transactions, notifications and COPY state
/// results; this runs the same calls on a real server.
#[tokio::test]
async fn the_transaction_notification_and_copy_examples_hold() {
    use slipstream_pg::{IsolationLevel, SqlState};
    let (cluster, mut client) = super::setup().await;
    client
        .batch_execute(
            "CREATE TABLE items (id int PRIMARY KEY, name text); CREATE TABLE log (t text)",
        )
        .await
        .unwrap();

    let mut tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    let level: String = tx
        .query_one("SHOW transaction_isolation", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(level, "repeatable read");
    tx.commit().await.unwrap();

    let mut tx = client
        .build_transaction()
        .read_only(true)
        .start()
        .await
        .unwrap();
    let e = tx
        .batch_execute("CREATE TABLE t (x int)")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(SqlState::READ_ONLY_SQL_TRANSACTION));
    drop(tx);

    let mut tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::Serializable)
        .read_only(true)
        .deferrable(true)
        .start()
        .await
        .unwrap();
    let on: String = tx
        .query_one("SHOW transaction_deferrable", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(on, "on");
    assert_eq!(
        tx.build_transaction().start().await.unwrap_err().kind(),
        slipstream_pg::ErrorKind::Usage
    );
    let nested = tx.transaction().await.unwrap();
    nested.commit().await.unwrap();
    tx.commit().await.unwrap();

    let mut tx = client.transaction().await.unwrap();
    tx.execute("INSERT INTO log VALUES ('kept')", &[])
        .await
        .unwrap();
    {
        let mut sp = tx.savepoint("try_it").await.unwrap();
        sp.execute("INSERT INTO log VALUES ('undone')", &[])
            .await
            .unwrap();
        sp.rollback().await.unwrap();
    }
    tx.commit().await.unwrap();
    let rows = client.query("SELECT t FROM log", &[]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, &str>(0).unwrap(), "kept");

    let mut sender = slipstream_pg::connect(&cluster.url()).await.unwrap();
    client.batch_execute("LISTEN jobs").await.unwrap();
    sender
        .batch_execute("SELECT pg_notify('jobs', 'job 7'); NOTIFY jobs")
        .await
        .unwrap();
    let n = client.wait_for_notification().await.unwrap();
    assert_eq!(
        (n.process_id(), n.channel(), n.payload()),
        (sender.backend_pid(), "jobs", "job 7")
    );
    assert_eq!(client.wait_for_notification().await.unwrap().payload(), "");

    let mut copy = client
        .copy_in("COPY items (id, name) FROM STDIN")
        .await
        .unwrap();
    for id in 1..=1000 {
        copy.write(format!("{id}\tpen {id}\n").as_bytes())
            .await
            .unwrap();
    }
    assert_eq!(copy.finish().await.unwrap(), 1000);
    let mut copy = client.copy_in("COPY items (id) FROM STDIN").await.unwrap();
    copy.write(b"1001\n1002\nthree\n").await.unwrap();
    let e = copy.finish().await.unwrap_err();
    assert!(e.to_string().contains("line 3"), "{e}");

    let mut out = client
        .copy_out("COPY (SELECT g FROM generate_series(1, 3) g) TO STDOUT")
        .await
        .unwrap();
    assert_eq!(out.rows(), None);
    let mut text = Vec::new();
    while let Some(chunk) = out.next().await.unwrap() {
        text.extend_from_slice(&chunk);
    }
    assert_eq!(text, b"1\n2\n3\n");
    assert_eq!(out.rows(), Some(3));
}

/// Holds. `Op::id` and `FromOutput`'s examples: ids count from 0 in queue order and index
/// what `end` returns; each `Op` gives its own output type.
#[tokio::test]
async fn the_pipeline_op_examples_hold() {
    let (_cluster, mut client) = super::setup().await;
    client
        .batch_execute("CREATE TABLE jobs (state text); INSERT INTO jobs VALUES ('a'), ('b')")
        .await
        .unwrap();
    let mut p = client.pipeline();
    let rows = p.query("SELECT 1", &[]).await.unwrap();
    let n = p
        .execute("UPDATE jobs SET state = 'new'", &[])
        .await
        .unwrap();
    let stmt = p.prepare("SELECT $1::int4").await.unwrap();
    assert_eq!((rows.id(), n.id(), stmt.id()), (0, 1, 2));
    assert_eq!(p.process(&rows).await.unwrap().len(), 1);
    assert_eq!(p.process(&n).await.unwrap(), 2);
    assert_eq!(p.process(&stmt).await.unwrap().sql(), "SELECT $1::int4");
    let results = p.end().await;
    assert_eq!(results.len(), 3);
}

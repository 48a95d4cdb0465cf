use std::sync::{Arc, Mutex};

use slipstream_pg::{ErrorKind, SimpleQueryMessage};

#[tokio::test]
async fn simple_query_runs_several_statements() {
    let (_cluster, mut c) = super::setup().await;
    let reply = c
        .simple_query("CREATE TABLE t (a int, b text); INSERT INTO t VALUES (1, 'x'), (2, NULL); SELECT a, b FROM t ORDER BY a")
        .await
        .unwrap();
    let rows: Vec<_> = reply
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some((
                r.get(0).unwrap().map(str::to_string),
                r.get("b").unwrap().map(str::to_string),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (Some("1".into()), Some("x".into())),
            (Some("2".into()), None)
        ]
    );
    let tags: Vec<_> = reply
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::CommandComplete { tag, rows } => Some((tag.clone(), *rows)),
            _ => None,
        })
        .collect();
    assert_eq!(
        tags,
        vec![
            ("CREATE TABLE".into(), 0),
            ("INSERT 0 2".into(), 2),
            ("SELECT 2".into(), 2)
        ]
    );
}

/// What ran before a failing statement comes with the error, and only that: the statements
/// after it are not run, and the connection goes on.
#[tokio::test]
async fn simple_query_until_error_keeps_what_ran_before_the_failure() {
    let (_cluster, mut c) = super::setup().await;
    let (reply, error) = c
        .simple_query_until_error(
            "BEGIN; CREATE TABLE t1(x int); COMMIT; SELECT 1/0; CREATE TABLE t2(x int)",
        )
        .await;
    let tags: Vec<_> = reply
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::CommandComplete { tag, .. } => Some(tag.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(tags, ["BEGIN", "CREATE TABLE", "COMMIT"]);
    assert_eq!(
        error.and_then(|e| e.code()),
        Some(slipstream_pg::SqlState::DIVISION_BY_ZERO)
    );
    let (reply, error) = c
        .simple_query_until_error("SELECT count(*) FROM t1; SELECT to_regclass('t2') IS NULL")
        .await;
    assert!(error.is_none(), "{error:?}");
    let values: Vec<_> = reply
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).unwrap().map(str::to_string),
            _ => None,
        })
        .collect();
    assert_eq!(values, ["0", "t"]);
}

#[tokio::test]
async fn extended_queries_with_parameters_and_row_counts() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int PRIMARY KEY, name text)")
        .await
        .unwrap();
    for i in 0..5i32 {
        assert_eq!(
            c.execute("INSERT INTO t VALUES ($1, $2)", &[&i, &format!("n{i}")])
                .await
                .unwrap(),
            1
        );
    }
    assert_eq!(
        c.execute("UPDATE t SET name = name || '!' WHERE id >= $1", &[&3i32])
            .await
            .unwrap(),
        2
    );
    let rows = c
        .query("SELECT id, name FROM t WHERE id > $1 ORDER BY id", &[&2i32])
        .await
        .unwrap();
    let got: Vec<(i32, String)> = rows
        .iter()
        .map(|r| (r.get(0).unwrap(), r.get(1).unwrap()))
        .collect();
    assert_eq!(got, vec![(3, "n3!".into()), (4, "n4!".into())]);

    let e = c.query_one("SELECT id FROM t", &[]).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RowCount);
    assert!(
        c.query_opt("SELECT id FROM t WHERE id = 99", &[])
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn prepared_statements_are_reused_and_closed_when_dropped() {
    let (cluster, mut c) = super::setup().await;
    let stmt = c.prepare("SELECT $1::int4 * 2").await.unwrap();
    for i in 0..10i32 {
        assert_eq!(
            c.query_one(&stmt, &[&i])
                .await
                .unwrap()
                .get::<_, i32>(0)
                .unwrap(),
            i * 2
        );
    }
    // Uncached, so that counting does not itself leave a statement behind.
    let count = &slipstream_pg::Uncached("SELECT count(*) FROM pg_prepared_statements");
    assert_eq!(
        c.query_one(count, &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
            .unwrap(),
        1
    );
    drop(stmt);
    // The Close goes out with the next request, in the same write.
    assert_eq!(
        c.query_one(count, &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
            .unwrap(),
        0
    );

    let mut other = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let stmt = c.prepare("SELECT 1").await.unwrap();
    let e = other.query(&stmt, &[]).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage);
    assert!(e.to_string().contains("another connection"), "{e}");
}

#[tokio::test]
async fn query_typed_takes_one_round_trip_and_leaves_nothing_behind() {
    let (_cluster, mut c) = super::setup().await;
    let rows = c
        .query_typed(
            "SELECT $1 + 1, $2",
            &[
                (&41i64, slipstream_pg::types::Type::INT8),
                (&"x", slipstream_pg::types::Type::TEXT),
            ],
        )
        .await
        .unwrap();
    assert_eq!(rows[0].get::<_, i64>(0).unwrap(), 42);
    let count = slipstream_pg::Uncached("SELECT count(*) FROM pg_prepared_statements");
    let n: i64 = c.query_one(&count, &[]).await.unwrap().get(0).unwrap();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn notices_reach_the_handler() {
    let (_cluster, mut c) = super::setup().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    c.set_notice_handler(move |n| {
        sink.lock()
            .unwrap()
            .push((n.severity().to_string(), n.message().to_string()))
    });
    c.batch_execute("DO $$ BEGIN RAISE NOTICE 'hello %', 42; RAISE WARNING 'careful'; END $$")
        .await
        .unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            ("NOTICE".to_string(), "hello 42".to_string()),
            ("WARNING".to_string(), "careful".to_string())
        ]
    );
}

#[tokio::test]
async fn listen_notify_delivers_notifications() {
    let (cluster, mut listener) = super::setup().await;
    let mut sender = slipstream_pg::connect(&cluster.url()).await.unwrap();
    listener.batch_execute("LISTEN jobs").await.unwrap();
    sender
        .batch_execute("NOTIFY jobs, 'first'; NOTIFY other, 'ignored'")
        .await
        .unwrap();
    let n = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        listener.wait_for_notification(),
    )
    .await
    .expect("notification arrives")
    .unwrap();
    assert_eq!(
        (n.channel(), n.payload(), n.process_id()),
        ("jobs", "first", sender.backend_pid())
    );
    // A notification that arrives during another call is queued for later.
    sender.batch_execute("NOTIFY jobs, 'second'").await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            listener.batch_execute("SELECT 1").await.unwrap();
            if !listener.take_notifications().is_empty() {
                break;
            }
        }
    })
    .await
    .expect("queued notification");
}

#[tokio::test]
async fn parameter_status_is_tracked() {
    let (_cluster, mut c) = super::setup().await;
    assert!(c.parameter("server_version").unwrap().starts_with("15"));
    c.batch_execute("SET application_name = 'tracked'")
        .await
        .unwrap();
    assert_eq!(c.parameter("application_name"), Some("tracked"));
}

#[tokio::test]
async fn connection_parameters_reach_the_server() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = format!(
        "{}?application_name=lab&options=-c%20work_mem%3D3MB",
        cluster.url()
    );
    let mut c = slipstream_pg::connect(&url).await.unwrap();
    let row = c
        .query_one(
            "SELECT current_setting('application_name'), current_setting('work_mem')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, &str>(0).unwrap(),
            row.get::<_, &str>(1).unwrap()
        ),
        ("lab", "3MB")
    );
    c.close().await.unwrap();
}

/// The reply reader against another client on a real server: results of every size around
/// the read buffer's 16 KiB chunks and the 64 KiB past which a row gets its own buffer (the
/// fast path leaves those to the general reader), NULLs, notices between rows, row counts of
/// DML, and a `DISCARD ALL` between two runs of a cached statement. tokio-postgres must see the
/// same values and counts.
#[tokio::test]
async fn replies_of_every_size_read_as_another_client_reads_them() {
    let (cluster, mut c) = super::setup().await;
    let peer = super::peer(&cluster).await;
    c.batch_execute(
        "CREATE TABLE sizes (id int PRIMARY KEY, v text);
         CREATE FUNCTION noisy(i int) RETURNS int LANGUAGE plpgsql AS
           $$ BEGIN IF i % 3 = 0 THEN RAISE NOTICE 'row %', i; END IF; RETURN i; END $$",
    )
    .await
    .unwrap();
    let notices = Arc::new(Mutex::new(0));
    let seen = notices.clone();
    c.set_notice_handler(move |_| *seen.lock().unwrap() += 1);
    // Widths around 16 KiB (a read's chunk) and 64 KiB (a message's own buffer), and small.
    let widths = [
        0, 1, 7, 16_370, 16_384, 16_400, 65_520, 65_536, 65_540, 70_000, 200_000,
    ];
    for (id, w) in widths.iter().enumerate() {
        let n = c
            .execute(
                "INSERT INTO sizes VALUES ($1, CASE WHEN $2 = 0 THEN NULL ELSE repeat('x', $2) END)",
                &[&(id as i32), w],
            )
            .await
            .unwrap();
        assert_eq!(n, 1);
    }
    let queries = [
        "SELECT id, v FROM sizes ORDER BY id",
        "SELECT id, v FROM sizes WHERE id < $1 ORDER BY id",
        "SELECT noisy(id), v FROM sizes WHERE id < $1 ORDER BY id",
        "SELECT g, repeat('y', g * 997) FROM generate_series(1, $1) g",
    ];
    for round in 0..3 {
        for (q, sql) in queries.iter().enumerate() {
            for limit in [0i32, 1, 5, widths.len() as i32, 90] {
                let params: Vec<&(dyn postgres_types::ToSql + Sync)> = match q {
                    0 => vec![],
                    _ => vec![&limit],
                };
                let ours: Vec<(i32, Option<String>)> = c
                    .query(*sql, &params)
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| (r.get(0).unwrap(), r.get(1).unwrap()))
                    .collect();
                let theirs: Vec<(i32, Option<String>)> = peer
                    .query(*sql, &params)
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| (r.get(0), r.get(1)))
                    .collect();
                assert_eq!(ours, theirs, "round {round}, {sql} with {limit}");
            }
        }
        let ours = c
            .execute("UPDATE sizes SET v = v WHERE id >= $1", &[&(round * 3)])
            .await
            .unwrap();
        let theirs = peer
            .execute("UPDATE sizes SET v = v WHERE id >= $1", &[&(round * 3)])
            .await
            .unwrap();
        assert_eq!(ours, theirs, "round {round}: rows updated");
        // Every cached statement is gone on the server: the next round must prepare afresh.
        c.execute("DISCARD ALL", &[]).await.unwrap();
    }
    assert!(
        *notices.lock().unwrap() > 0,
        "the notices between rows were never seen"
    );
    assert!(c.is_reusable());
}

/// A query's future is what a caller boxes (`Box::pin`, a spawned task) once per call. The
/// rare round trips inside it (preparing a statement whose parameter type the client cannot
/// name, looking up an unknown type, a message cut by a read) are boxed, so that they do not
/// size the common call: inline, they made `execute`'s future 1,584 bytes (release), which
/// pushed the bench runner's boxed transaction past glibc's per-thread cache (1,032 bytes)
/// into its slower path, about 200 instructions per transaction.
#[tokio::test]
async fn a_query_future_stays_small() {
    let (_cluster, mut c) = super::setup().await;
    let execute = std::mem::size_of_val(&c.execute("SELECT 1", &[]));
    let query = std::mem::size_of_val(&c.query("SELECT 1", &[]));
    let query_one = std::mem::size_of_val(&c.query_one("SELECT 1", &[]));
    let sizes = [
        ("execute", execute),
        ("query", query),
        ("query_one", query_one),
    ];
    eprintln!("{sizes:?}");
    for (call, size) in sizes {
        assert!(
            size <= 800,
            "{call}'s future is {size} bytes (at most 800 expected)"
        );
    }
    // Unpolled futures run nothing: the connection is still usable.
    assert_eq!(c.execute("SELECT 1", &[]).await.unwrap(), 1);
}

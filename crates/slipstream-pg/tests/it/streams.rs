//! Row streams, COPY and notifications through `futures` combinators (issue 24): each works
//! as a `Stream` (or, for COPY FROM STDIN, a `Sink`), and one dropped part-way leaves the
//! connection in step for the next call.

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt, TryStreamExt, stream};
use slipstream_pg::{Client, FetchSize, Row};

async fn ids(c: &mut Client, upto: i32, fetch: FetchSize) -> Vec<i32> {
    let rows = c
        .query_stream_with("SELECT g FROM generate_series(1, $1) g", &[&upto], fetch)
        .await
        .unwrap();
    rows.map(|r| r.unwrap().get::<_, i32>(0).unwrap())
        .collect()
        .await
}

#[tokio::test]
async fn a_row_stream_works_with_stream_combinators() {
    let (_cluster, mut c) = super::setup().await;
    for fetch in [
        FetchSize::Rows(7),
        FetchSize::Rows(0),
        FetchSize::Bytes(100),
    ] {
        assert_eq!(ids(&mut c, 50, fetch).await, (1..=50).collect::<Vec<_>>());
        // `take` drops the stream mid-way (rows still unread, its Sync not yet sent): the next
        // call is answered right, whatever the fetch size.
        let rows = c
            .query_stream_with("SELECT g FROM generate_series(1, 1000) g", &[], fetch)
            .await
            .unwrap();
        let first: Vec<Row> = rows.take(3).try_collect().await.unwrap();
        assert_eq!(first.len(), 3);
        assert_eq!(first[2].get::<_, i32>(0).unwrap(), 3);
        assert_eq!(super::scalar::<i32>(&mut c, "SELECT 42").await, 42);
        assert!(c.is_reusable());
    }
    // Combinators that stop on their own: `filter`, `fold`, `try_for_each`.
    let rows = c
        .query_stream_with(
            "SELECT g FROM generate_series(1, 100) g",
            &[],
            FetchSize::Rows(9),
        )
        .await
        .unwrap();
    let even_sum = rows
        .try_filter(|r| std::future::ready(r.get::<_, i32>(0).unwrap() % 2 == 0))
        .try_fold(0i64, |acc, r| async move {
            Ok(acc + r.get::<_, i32>(0)? as i64)
        })
        .await
        .unwrap();
    assert_eq!(even_sum, 2550);
    // The inherent `next` and the Stream interleave on one stream.
    let mut rows = c
        .query_stream_with(
            "SELECT g FROM generate_series(1, 5) g",
            &[],
            FetchSize::Rows(2),
        )
        .await
        .unwrap();
    assert_eq!(
        rows.next()
            .await
            .unwrap()
            .unwrap()
            .get::<_, i32>(0)
            .unwrap(),
        1
    );
    let rest: Vec<i32> = StreamExt::map(&mut rows, |r| r.unwrap().get::<_, i32>(0).unwrap())
        .collect()
        .await;
    assert_eq!(rest, vec![2, 3, 4, 5]);
}

#[tokio::test]
async fn a_row_stream_that_fails_ends_after_its_error() {
    let (_cluster, mut c) = super::setup().await;
    // Rows, then a division by zero at g = 20 (in a later batch).
    let rows = c
        .query_stream_with(
            "SELECT 100 / (20 - g) FROM generate_series(1, 30) g",
            &[],
            FetchSize::Rows(4),
        )
        .await
        .unwrap();
    let all: Vec<Result<Row, slipstream_pg::Error>> = rows.collect().await;
    assert_eq!(all.len(), 20, "19 rows, then the error, then the end");
    assert!(all[..19].iter().all(Result::is_ok));
    let e = all[19].as_ref().unwrap_err();
    assert_eq!(
        e.code().map(|s| s.code().to_string()).as_deref(),
        Some("22012"),
        "{e}"
    );
    assert_eq!(super::scalar::<i32>(&mut c, "SELECT 1").await, 1);
}

#[tokio::test]
async fn copy_out_is_a_stream_and_copy_in_a_sink() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE items (id int, name text)")
        .await
        .unwrap();
    // `forward` a stream of chunks into the sink: it sends them all and closes it, which
    // ends the COPY.
    let lines = stream::iter(0..1000).map(|i| Ok(Bytes::from(format!("{i}\titem {i}\n"))));
    let mut copy = c.copy_in("COPY items FROM STDIN").await.unwrap();
    lines.forward(&mut copy).await.unwrap();
    assert_eq!(copy.rows(), Some(1000));
    // Closed as a sink, `finish` reports the same and sends nothing more.
    assert_eq!(copy.finish().await.unwrap(), 1000);
    assert_eq!(
        super::scalar::<i64>(&mut c, "SELECT count(*) FROM items").await,
        1000
    );
    // `send` + `close`, with bad data: the server's error comes from `close`, nothing loaded.
    let mut copy = c.copy_in("COPY items FROM STDIN").await.unwrap();
    copy.send(Bytes::from_static(b"1\tok\n")).await.unwrap();
    copy.send(Bytes::from_static(b"not a number\tx\n"))
        .await
        .unwrap();
    let e = copy.close().await.unwrap_err();
    assert_eq!(
        e.code().map(|s| s.code().to_string()).as_deref(),
        Some("22P02"),
        "{e}"
    );
    assert_eq!(copy.rows(), None);
    drop(copy);
    assert_eq!(
        super::scalar::<i64>(&mut c, "SELECT count(*) FROM items").await,
        1000
    );
    // A sink dropped before it is closed aborts the COPY.
    let mut copy = c.copy_in("COPY items FROM STDIN").await.unwrap();
    copy.feed(Bytes::from_static(b"5000\tlost\n"))
        .await
        .unwrap();
    drop(copy);
    assert_eq!(
        super::scalar::<i64>(&mut c, "SELECT count(*) FROM items").await,
        1000
    );

    // COPY TO STDOUT as a stream: one chunk per row.
    let copy = c
        .copy_out("COPY (SELECT id FROM items ORDER BY id) TO STDOUT")
        .await
        .unwrap();
    let chunks: Vec<Bytes> = copy.try_collect().await.unwrap();
    assert_eq!(chunks.len(), 1000);
    assert_eq!(&chunks[999][..], b"999\n");
    // Dropped after three chunks: the rest is skipped before the next call's reply.
    let copy = c.copy_out("COPY items TO STDOUT").await.unwrap();
    assert_eq!(copy.take(3).count().await, 3);
    assert_eq!(super::scalar::<i32>(&mut c, "SELECT 5").await, 5);
    assert!(c.is_reusable());
}

#[tokio::test]
async fn notifications_arrive_as_a_stream() {
    let (cluster, mut listener) = super::setup().await;
    let mut sender = slipstream_pg::connect(&cluster.url()).await.unwrap();
    listener.batch_execute("LISTEN jobs").await.unwrap();
    sender
        .batch_execute("NOTIFY jobs, 'a'; NOTIFY jobs, 'b'")
        .await
        .unwrap();
    // Sent after the stream starts waiting: the stream wakes when they arrive.
    let send_later = async {
        tokio::task::yield_now().await;
        sender.batch_execute("NOTIFY jobs, 'c'").await.unwrap();
        sender.batch_execute("NOTIFY jobs, 'd'").await.unwrap();
    };
    let receive = async {
        let stream = listener.notifications().await.unwrap();
        stream
            .take(4)
            .map(|n| n.unwrap().payload().to_string())
            .collect::<Vec<_>>()
            .await
    };
    let (_, payloads) = tokio::join!(send_later, receive);
    assert_eq!(payloads, vec!["a", "b", "c", "d"]);
    // The stream dropped, the connection serves statements again; a notification that arrives
    // meanwhile waits for the next stream.
    sender.batch_execute("NOTIFY jobs, 'e'").await.unwrap();
    assert_eq!(super::scalar::<i32>(&mut listener, "SELECT 3").await, 3);
    let mut stream = listener.notifications().await.unwrap();
    assert_eq!(stream.next().await.unwrap().unwrap().payload(), "e");
}

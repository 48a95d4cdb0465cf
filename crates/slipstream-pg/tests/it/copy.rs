use slipstream_pg::ErrorKind;

const ROWS: u64 = 1_000_000;

#[tokio::test]
async fn a_million_rows_in_and_out() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE UNLOGGED TABLE big (id int8, name text)")
        .await
        .unwrap();
    let mut copy = c.copy_in("COPY big FROM STDIN").await.unwrap();
    let mut line = String::new();
    for i in 0..ROWS {
        line.clear();
        line.push_str(&format!("{i}\tname {i}\n"));
        copy.write(line.as_bytes()).await.unwrap();
    }
    assert_eq!(copy.finish().await.unwrap(), ROWS);
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM big").await;
    assert_eq!(n as u64, ROWS);

    let mut out = c.copy_out("COPY big TO STDOUT").await.unwrap();
    let (mut lines, mut id_sum) = (0u64, 0u64);
    while let Some(chunk) = out.next().await.unwrap() {
        for l in chunk.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            lines += 1;
            let id = l.split(|b| *b == b'\t').next().unwrap();
            id_sum += std::str::from_utf8(id).unwrap().parse::<u64>().unwrap();
        }
    }
    assert_eq!(out.rows(), Some(ROWS));
    assert_eq!(lines, ROWS);
    assert_eq!(id_sum, ROWS * (ROWS - 1) / 2, "every row exactly once");
}

#[tokio::test]
async fn bad_copy_data_is_a_server_error_and_the_connection_lives_on() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int)").await.unwrap();
    let mut copy = c.copy_in("COPY t FROM STDIN").await.unwrap();
    copy.write(b"1\nnot-a-number\n").await.unwrap();
    let err = copy.finish().await.unwrap_err();
    assert_eq!(
        err.code().map(|c| c.code().to_string()).as_deref(),
        Some("22P02"),
        "{err}"
    );
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM t").await;
    assert_eq!(n, 0);
}

#[tokio::test]
async fn a_dropped_copy_in_loads_nothing_and_the_connection_lives_on() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int)").await.unwrap();
    {
        let mut copy = c.copy_in("COPY t FROM STDIN").await.unwrap();
        copy.write(b"1\n2\n").await.unwrap();
    }
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM t").await;
    assert_eq!(n, 0);
    let copy = c.copy_in("COPY t FROM STDIN").await.unwrap();
    copy.abort("changed my mind").await.unwrap();
    c.batch_execute("SELECT 1").await.unwrap();
}

#[tokio::test]
async fn a_dropped_copy_out_leaves_the_connection_usable() {
    let (_cluster, mut c) = super::setup().await;
    {
        let mut out = c
            .copy_out("COPY (SELECT generate_series(1, 100000)) TO STDOUT")
            .await
            .unwrap();
        out.next().await.unwrap().unwrap();
    }
    let v: i32 = super::scalar(&mut c, "SELECT 5::int4").await;
    assert_eq!(v, 5);
}

#[tokio::test]
async fn copy_through_the_wrong_call_is_refused_without_hanging() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int)").await.unwrap();
    let err = c.simple_query("COPY t FROM STDIN").await.unwrap_err();
    assert!(err.to_string().contains("copy_in"), "{err}");
    // The refusal itself, not the server's report of the CopyFail it sent (57014, a cancel's
    // code).
    assert_eq!(err.kind(), ErrorKind::Usage, "{err}");
    let err = c.query("COPY t TO STDOUT", &[]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Usage, "{err}");
    let err = c.copy_in("SELECT 1").await.unwrap_err();
    assert!(err.to_string().contains("not a COPY"), "{err}");
    c.batch_execute("SELECT 1").await.unwrap();
}

/// A single write past 1 GiB (a `CopyData` message's limit) is cut into messages the server
/// takes; it used to fail with "copy chunk too large". The server parses every line and keeps
/// only a few, so the table stays small.
#[tokio::test]
async fn a_single_write_larger_than_a_message_can_hold_is_loaded() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int, v text)")
        .await
        .unwrap();
    const LINES: usize = 1100;
    let line_body = "x".repeat(1024 * 1024 - 10);
    let mut data = Vec::with_capacity(LINES * 1024 * 1024);
    for i in 0..LINES {
        data.extend_from_slice(format!("{i:08}\t{line_body}\n").as_bytes());
    }
    assert!(data.len() > 1 << 30);
    let mut copy = c
        .copy_in("COPY t FROM STDIN WHERE id % 100 = 99")
        .await
        .unwrap();
    copy.write(&data).await.unwrap();
    drop(data);
    assert_eq!(copy.finish().await.unwrap(), 11);
    let n: i64 = super::scalar(
        &mut c,
        "SELECT count(*) FROM t WHERE length(v) = 1024 * 1024 - 10",
    )
    .await;
    assert_eq!(n, 11);
}

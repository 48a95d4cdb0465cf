//! Session 38's attacks: promises of the docs that the code broke, each pinned by a test that
//! failed before its fix.

use slipstream_pg::ErrorKind;

/// docs/pipelining.md: "queueing `COPY ... FROM STDIN` or `TO STDOUT` is refused with
/// `ErrorKind::Usage`". An empty statement before the COPY (`;COPY ...`) is still one statement
/// to the server, so the check must see through it as it sees through comments.
#[tokio::test]
async fn a_copy_behind_an_empty_statement_is_refused_when_queued() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    for sql in [
        ";COPY t FROM STDIN",
        " ; ;\n copy t to stdout",
        "/* load */ ; -- now\n COPY t FROM STDIN",
    ] {
        let mut p = c.pipeline();
        let before = p.query("SELECT 1", &[]).await.unwrap();
        let e = p.execute(sql, &[]).await.map(|op| op.id()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Usage, "{sql:?}: {e}");
        assert!(e.to_string().contains("copy_in"), "{e}");
        // The block goes on: the refused operation was never sent.
        assert_eq!(p.process(&before).await.unwrap().len(), 1, "{sql:?}");
        let after = p.query("SELECT 2", &[]).await.unwrap();
        assert_eq!(p.process(&after).await.unwrap().len(), 1, "{sql:?}");
        p.end().await;
    }
    let stmt = c.prepare(";COPY t FROM STDIN").await.unwrap();
    let mut p = c.pipeline();
    let e = p.execute(&stmt, &[]).await.map(|op| op.id()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    p.end().await;
    assert_eq!(super::scalar::<i32>(&mut c, "SELECT 1").await, 1);
}

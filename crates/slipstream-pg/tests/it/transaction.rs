use slipstream_pg::{ErrorKind, TransactionStatus};

async fn count(c: &mut slipstream_pg::Client) -> i64 {
    super::scalar(c, "SELECT count(*) FROM t").await
}

#[tokio::test]
async fn commit_keeps_rollback_and_drop_undo() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();

    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    assert_eq!(tx.transaction_status(), TransactionStatus::InTransaction);
    tx.commit().await.unwrap();
    assert_eq!(count(&mut c).await, 1);

    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(count(&mut c).await, 1);

    {
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO t VALUES (3)", &[]).await.unwrap();
    }
    assert_eq!(
        count(&mut c).await,
        1,
        "a dropped transaction is rolled back"
    );
    assert_eq!(c.transaction_status(), TransactionStatus::Idle);
}

#[tokio::test]
async fn savepoints_undo_only_their_part() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    {
        let mut sp = tx.savepoint("inner").await.unwrap();
        sp.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
        sp.rollback().await.unwrap();
    }
    {
        let mut sp = tx.transaction().await.unwrap();
        sp.execute("INSERT INTO t VALUES (3)", &[]).await.unwrap();
        // A failing statement inside a savepoint does not doom the outer transaction.
        let mut deeper = sp.savepoint("deeper").await.unwrap();
        deeper.execute("SELECT 1/0", &[]).await.unwrap_err();
        drop(deeper);
        sp.commit().await.unwrap();
    }
    tx.commit().await.unwrap();
    let xs: Vec<i32> = super::column(&mut c, "SELECT x FROM t ORDER BY x").await;
    assert_eq!(xs, vec![1, 3]);
}

#[tokio::test]
async fn commit_after_a_failed_statement_is_an_error_not_silence() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    tx.execute("SELECT 1/0", &[]).await.unwrap_err();
    let e = tx
        .execute("INSERT INTO t VALUES (2)", &[])
        .await
        .unwrap_err();
    assert_eq!(e.code().unwrap().code(), "25P02", "{e}");
    assert_eq!(tx.transaction_status(), TransactionStatus::Failed);
    let e = tx.commit().await.unwrap_err();
    // As a pipelined COMMIT reports it.
    assert_eq!(e.kind(), ErrorKind::Aborted);
    assert!(e.to_string().contains("nothing was saved"), "{e}");
    assert_eq!(count(&mut c).await, 0);
}

#[tokio::test]
async fn isolation_level_and_read_only_are_applied() {
    let (_cluster, mut c) = super::setup().await;
    let mut tx = c
        .build_transaction()
        .isolation_level(slipstream_pg::IsolationLevel::Serializable)
        .read_only(true)
        .start()
        .await
        .unwrap();
    let row = tx.query_one("SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only')", &[]).await.unwrap();
    assert_eq!(
        (
            row.get::<_, &str>(0).unwrap(),
            row.get::<_, &str>(1).unwrap()
        ),
        ("serializable", "on")
    );
    tx.commit().await.unwrap();
}

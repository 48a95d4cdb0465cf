//! Attacks on what `copy_in` and `copy_out` say when given SQL that is not the COPY they
//! expect (helper h70). client.md, "Errors": messages name what failed and what to do; and
//! "COPY": through `query`/`simple_query`, a `COPY ... TO STDOUT`'s error "says so: do not
//! simply retry the string", because it ran. `copy_in` and `copy_out` send their SQL with the
//! simple protocol, so the server runs whatever it is before the client can see that it is
//! not the COPY asked for.

use slipstream_pg::{Client, ErrorKind};

async fn stored(c: &mut Client) -> Vec<i32> {
    super::ints(c, "SELECT a FROM cm ORDER BY a").await
}

/// Steps: `copy_in("DELETE FROM cm")` on a table of three rows; `copy_out("INSERT INTO cm
/// VALUES (9)")`; `copy_in("COPY cm TO STDOUT; DELETE FROM cm")`. Each is refused with a
/// `Usage` error, and each ran and committed what it says, so the error must say that the SQL
/// ran, not only that nothing was copied: a caller that retries it elsewhere deletes or
/// inserts twice.
///
/// Before the fix: "the statement is not a COPY FROM STDIN; nothing was copied" with the
/// three rows deleted, "the statement is not a COPY TO STDOUT; nothing was copied" with the
/// row inserted, and "copy_in needs a COPY ... FROM STDIN statement; use copy_out" with the
/// `DELETE` after the COPY committed.
#[tokio::test]
async fn break_sql_that_is_not_the_copy_asked_for_runs_and_the_error_says_nothing_was_done() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE cm (a int); INSERT INTO cm VALUES (1), (2), (3)")
        .await
        .unwrap();

    let e = c.copy_in("DELETE FROM cm").await.map(drop).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert_eq!(stored(&mut c).await, Vec::<i32>::new());
    assert!(e.to_string().contains(" ran"), "copy_in of a DELETE: {e}");

    let e = c
        .copy_out("INSERT INTO cm VALUES (9)")
        .await
        .map(drop)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert_eq!(stored(&mut c).await, [9]);
    assert!(e.to_string().contains(" ran"), "copy_out of an INSERT: {e}");

    let e = c
        .copy_in("COPY cm TO STDOUT; DELETE FROM cm")
        .await
        .map(drop)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert_eq!(stored(&mut c).await, Vec::<i32>::new());
    assert!(
        e.to_string().contains(" ran"),
        "copy_in of a COPY TO STDOUT: {e}"
    );
}

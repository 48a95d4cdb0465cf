//! Pipelining, end to end: `cargo run -p slipstream-pg --example pipeline`.
//!
//! Uses `DATABASE_URL` if set; otherwise starts a throwaway cluster with the testkit (needs the
//! PostgreSQL server binaries, e.g. Debian's `postgresql-15`).

use slipstream_pg::{Output, PipelineMode, PipelineOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (_cluster, url) = match std::env::var("DATABASE_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let cluster = slipstream_testkit::Cluster::start()?;
            let url = cluster.url();
            (Some(cluster), url)
        }
    };
    let mut client = slipstream_pg::connect(&url).await?;
    client
        .batch_execute(
            "CREATE TEMP TABLE items (id int PRIMARY KEY, name text NOT NULL, stock int NOT NULL)",
        )
        .await?;
    let insert = client
        .prepare("INSERT INTO items VALUES ($1, $2, 10)")
        .await?;
    let lookup = client
        .prepare("SELECT name, stock FROM items WHERE id = $1")
        .await?;

    // Continue on error: 1,000 inserts in flight at once; the duplicate fails alone (the
    // default, abort on error, would roll all of them back with it).
    let mut p = client.pipeline_with(PipelineOptions::new().mode(PipelineMode::ContinueOnError));
    for id in 1..=1000i32 {
        p.execute(&insert, &[&id, &format!("item {id}")]).await?;
    }
    let duplicate = p.execute(&insert, &[&1i32, &"again"]).await?;
    let results = p.end().await;
    let failed = results.iter().filter(|r| r.is_err()).count();
    println!(
        "continue on error: {} operations, {failed} failed",
        results.len()
    );
    assert_eq!(failed, 1);
    assert!(results[duplicate.id() as usize].is_err());

    // Process up to one operation while later ones are still in flight.
    let mut p = client.pipeline();
    let first = p.query(&lookup, &[&1i32]).await?;
    let rest: Vec<_> = {
        let mut ops = Vec::new();
        for id in 2..=100i32 {
            ops.push(p.query(&lookup, &[&id]).await?);
        }
        ops
    };
    let row = &p.process(&first).await?[0];
    println!(
        "first row: {} (stock {}), {} operations still unread at most",
        row.get::<_, &str>(0)?,
        row.get::<_, i32>(1)?,
        p.unfinished()
    );
    for op in &rest {
        p.process(op).await?;
    }
    p.end().await;

    // Abort on error: all or nothing, and the skipped operations name the failed one.
    let mut p = client.pipeline_with(PipelineOptions::new().mode(PipelineMode::AbortOnError));
    p.execute("UPDATE items SET stock = stock - 1 WHERE id = 1", &[])
        .await?;
    let bad = p
        .execute("UPDATE items SET stock = stock / 0 WHERE id = 2", &[])
        .await?;
    let skipped = p
        .execute("UPDATE items SET stock = stock - 1 WHERE id = 3", &[])
        .await?;
    let results = p.end().await;
    let e = results[skipped.id() as usize].as_ref().unwrap_err();
    println!("abort on error: {e}");
    assert_eq!(e.aborted_by(), Some(bad.id()));
    let stock: i32 = client
        .query_one("SELECT stock FROM items WHERE id = 1", &[])
        .await?
        .get(0)?;
    assert_eq!(stock, 10, "the first update was rolled back with the block");

    // Results in order, whatever their kind.
    let mut p = client.pipeline();
    p.query("SELECT count(*) FROM items", &[]).await?;
    p.execute("DELETE FROM items WHERE id > 500", &[]).await?;
    for result in p.end().await {
        match result? {
            Output::Rows(rows) => println!("count: {}", rows[0].get::<_, i64>(0)?),
            Output::Affected(n) => println!("deleted {n}"),
            other => println!("{other:?}"),
        }
    }
    client.close().await?;
    Ok(())
}

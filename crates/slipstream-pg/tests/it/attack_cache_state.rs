//! Attacks on the statement cache's state as its stats report it: resets the client saw, and
//! failing calls with custom-typed values (docs/statement-cache.md).

use slipstream_pg::{Client, Uncached};
/// Server-side prepared statements this session holds (read without the cache; the request
/// carries every `Close` queued before it).
async fn prepared_count(c: &mut Client) -> i64 {
    c.query_one(
        &Uncached("SELECT count(*) FROM pg_prepared_statements"),
        &[],
    )
    .await
    .unwrap()
    .get(0)
    .unwrap()
}

/// Promise (statement-cache.md): "`DISCARD ALL` / `DEALLOCATE ALL` run by the application
/// (through any call) empty the cache: the client sees the command tag and forgets every
/// entry"; `CacheStats::size` is "statements in the cache now". So do `ALTER TYPE` and `ALTER
/// DOMAIN`.
///
/// Steps: cache two statements, run each reset (simple and extended protocol), read the
/// stats before any other call.
///
/// Before the fix: the entries were forgotten only at the cache's next use, so the stats read
/// right after the reset still said `size: 2` for statements the server no longer had.
#[tokio::test]
async fn the_cache_reads_empty_right_after_a_reset_it_saw() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TYPE mood AS ENUM ('sad', 'ok')")
        .await
        .unwrap();
    let resets: [(&str, bool); 4] = [
        ("DISCARD ALL", false),
        ("DEALLOCATE ALL", false),
        ("DEALLOCATE ALL", true),
        ("ALTER TYPE mood ADD VALUE IF NOT EXISTS 'happy'", true),
    ];
    for (reset, extended) in resets {
        c.query_one("SELECT $1::int4", &[&1i32]).await.unwrap();
        c.query_one("SELECT $1::int8", &[&1i64]).await.unwrap();
        assert_eq!(c.statement_cache_stats().size, 2, "before {reset}");
        if extended {
            c.execute(&Uncached(reset), &[]).await.unwrap();
        } else {
            c.batch_execute(reset).await.unwrap();
        }
        assert_eq!(
            c.statement_cache_stats().size,
            0,
            "the cache still counted its entries after {reset} (extended protocol: {extended})"
        );
        // And the next run really prepares afresh.
        let misses = c.statement_cache_stats().misses;
        c.query_one("SELECT $1::int4", &[&2i32]).await.unwrap();
        assert_eq!(
            c.statement_cache_stats().misses,
            misses + 1,
            "after {reset}"
        );
        assert_eq!(c.statement_cache_stats().size, 1, "after {reset}");
    }
}

/// Promise (statement_cache.rs `a_wrong_parameter_count_is_an_error_and_caches_nothing_broken`,
/// statement-cache.md "Custom types": "The statement is cached like any other afterwards"): a
/// call with the wrong number of values is an error and caches nothing; LRU eviction makes
/// room only for statements that run.
///
/// Steps: `statement_cache_size=2`; cache two working statements; call SQL with two
/// parameters, one of them a custom type, with one value, three times; then run the two
/// working statements again.
///
/// Before the fix: each failing call prepared the statement on the server (a round trip),
/// cached it, and failed: the cache filled with copies that the same call never found again
/// (its value count is not theirs), evicting the two statements that worked and then each
/// other (3 evictions).
#[tokio::test]
async fn a_custom_typed_call_with_the_wrong_value_count_caches_nothing() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&format!("{}?statement_cache_size=2", cluster.url()))
        .await
        .unwrap();
    let good = ["SELECT $1::int4 + 1", "SELECT $1::int4 + 2"];
    for sql in good {
        c.query_one(sql, &[&1i32]).await.unwrap();
    }
    let before = c.statement_cache_stats();
    let bad = "SELECT $1::money, $2::int4";
    for _ in 0..3 {
        let e = c.query(bad, &[&super::Cents(5)]).await.unwrap_err();
        assert!(
            e.to_string().contains("2 parameters but 1 values"),
            "a wrong value count must say so: {e}"
        );
    }
    let after = c.statement_cache_stats();
    assert_eq!(
        (after.size, after.evictions),
        (before.size, before.evictions),
        "failing calls cached their statement and evicted working ones"
    );
    assert_eq!(
        prepared_count(&mut c).await,
        2,
        "statements left on the server"
    );
    for sql in good {
        c.query_one(sql, &[&1i32]).await.unwrap();
    }
    assert_eq!(c.statement_cache_stats().hits, before.hits + 2);
    // Given the right values, the custom-typed statement prepares and is cached.
    let row = c.query_one(bad, &[&super::Cents(5), &7i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(1).unwrap(), 7);
    let misses = c.statement_cache_stats().misses;
    c.query_one(bad, &[&super::Cents(6), &8i32]).await.unwrap();
    assert_eq!(c.statement_cache_stats().misses, misses, "then a hit");
}

//! Attacks on bad input from the caller (helper h63): client.md, "Errors": bad input is a
//! clear error naming what failed and what to do, and leaves the connection in step.

use postgres_types::{ToSql, Type};
use slipstream_pg::{ErrorKind, Uncached};

/// Promise: bad input is an error that names what failed and what to do. The protocol counts
/// a statement's parameters in 16 bits; PostgreSQL and libpq take up to 65535.
///
/// Steps: 65535 values through SQL text (accepted, as by libpq), then 65536 through each way
/// a statement's parameter types are sent (cached SQL, `Uncached`, `query_typed`,
/// `prepare_typed`, a pipeline); each must be refused naming the count and the limit, and
/// the next call must get its own answer.
///
/// Before the fix: `cannot send this statement: value too large to transmit`, which names
/// neither the parameters nor the limit.
#[tokio::test]
async fn too_many_parameters_is_refused_naming_the_count_and_the_limit() {
    let (_cluster, mut c) = super::setup().await;
    let array = |n: usize| {
        let list: Vec<String> = (1..=n).map(|i| format!("${i}")).collect();
        format!("SELECT cardinality(ARRAY[{}]::int4[])", list.join(","))
    };
    let values: Vec<i32> = (0..65536).collect();
    let params: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as _).collect();
    let most = u16::MAX as usize;
    let n: i32 = c
        .query_one(&*array(most), &params[..most])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(n, 65535);

    let sql = array(most + 1);
    let typed: Vec<(&(dyn ToSql + Sync), Type)> = params.iter().map(|p| (*p, Type::INT4)).collect();
    let types = vec![Type::INT4; most + 1];
    let refusals = vec![
        ("cached", c.query(&*sql, &params).await.map(drop)),
        (
            "uncached",
            c.query(&Uncached(&sql), &params).await.map(drop),
        ),
        ("query_typed", c.query_typed(&sql, &typed).await.map(drop)),
        (
            "prepare_typed",
            c.prepare_typed(&sql, &types).await.map(drop),
        ),
        ("pipeline", {
            let mut p = c.pipeline();
            p.query(&*sql, &params).await.map(drop)
        }),
    ];
    for (how, r) in refusals {
        let e = r.expect_err(how);
        assert_eq!(e.kind(), ErrorKind::Usage, "{how}: {e}");
        let text = e.to_string();
        assert!(
            text.contains("65536 parameter values") && text.contains("65535"),
            "{how}: {text}"
        );
        let n: i32 = super::scalar(&mut c, "SELECT 7").await;
        assert_eq!(n, 7, "{how}: the next call gets its own answer");
    }
}

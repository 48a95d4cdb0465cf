//! Types that are not built in (issue 24): enums, composites, domains and arrays of them are
//! looked up in the catalogs, so `#[derive(ToSql, FromSql)]` types work as parameters and
//! results through every way of running a statement.

use futures_util::StreamExt;
use slipstream_pg::types::{FromSql, Kind, ToSql};
use slipstream_pg::{Client, FetchSize, PipelineMode, PipelineOptions, Row, Uncached};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ToSql, FromSql)]
#[postgres(name = "mood")]
pub(crate) enum Mood {
    #[postgres(name = "sad")]
    Sad,
    #[postgres(name = "ok")]
    Ok,
    #[postgres(name = "happy")]
    Happy,
}

#[derive(Debug, Clone, PartialEq, ToSql, FromSql)]
#[postgres(name = "item")]
struct Item {
    name: String,
    qty: i32,
    mood: Mood,
}

/// A domain: parameters are sent as it; results arrive as its base type (the server describes
/// a domain column by its base type).
#[derive(Debug, Clone, Copy, PartialEq, ToSql, FromSql)]
#[postgres(name = "positive")]
struct Positive(i32);

const SCHEMA: &str = "
    CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
    CREATE TYPE item AS (name text, qty int4, mood mood);
    CREATE DOMAIN positive AS int4 CHECK (VALUE > 0);
    CREATE TABLE t (id int4 PRIMARY KEY, m mood, i item, p positive, ms mood[]);";

const INSERT: &str = "INSERT INTO t VALUES ($1, $2, $3, $4, $5)";
const SELECT: &str = "SELECT m, i, p, ms FROM t WHERE id = $1";

fn values(id: i32) -> (Mood, Item, Positive, Vec<Mood>) {
    (
        [Mood::Sad, Mood::Ok, Mood::Happy][id as usize % 3],
        Item {
            name: format!("item {id}"),
            qty: id * 10,
            mood: Mood::Happy,
        },
        Positive(id + 1),
        vec![Mood::Happy, Mood::Sad, Mood::Ok][..(id as usize % 4).min(3)].to_vec(),
    )
}

fn check(row: &Row, id: i32) {
    let (m, i, p, ms) = values(id);
    assert_eq!(row.get::<_, Mood>(0).unwrap(), m, "row {id}");
    assert_eq!(row.get::<_, Item>(1).unwrap(), i, "row {id}");
    assert_eq!(row.get::<_, i32>(2).unwrap(), p.0, "row {id}");
    assert_eq!(row.get::<_, Vec<Mood>>(3).unwrap(), ms, "row {id}");
}

async fn setup() -> (slipstream_testkit::Cluster, Client) {
    let (cluster, mut c) = super::setup().await;
    c.batch_execute(SCHEMA).await.unwrap();
    (cluster, c)
}

async fn insert(c: &mut Client, id: i32) {
    let (m, i, p, ms) = values(id);
    assert_eq!(c.execute(INSERT, &[&id, &m, &i, &p, &ms]).await.unwrap(), 1);
}

#[tokio::test]
async fn derived_types_round_trip_through_query() {
    let (_cluster, mut c) = setup().await;
    for id in 0..4 {
        insert(&mut c, id).await;
    }
    for id in 0..4 {
        // First run prepares and caches, later runs hit the cache.
        check(&c.query_one(SELECT, &[&id]).await.unwrap(), id);
        check(&c.query_one(SELECT, &[&id]).await.unwrap(), id);
    }
    // As parameters and results of one statement, uncached and prepared.
    let (m, i, _, ms) = values(2);
    let sql = "SELECT $1::mood, $2::item, $3::mood[]";
    let row = c
        .query_one(&slipstream_pg::Uncached(sql), &[&m, &i, &ms])
        .await
        .unwrap();
    assert_eq!(row.get::<_, Mood>(0).unwrap(), m);
    assert_eq!(row.get::<_, Item>(1).unwrap(), i);
    assert_eq!(row.get::<_, Vec<Mood>>(2).unwrap(), ms);
    let stmt = c.prepare(sql).await.unwrap();
    assert!(matches!(stmt.params()[0].kind(), Kind::Enum(v) if v.len() == 3));
    assert!(matches!(stmt.params()[1].kind(), Kind::Composite(f) if f.len() == 3));
    assert!(matches!(stmt.params()[2].kind(), Kind::Array(e) if e.name() == "mood"));
    let row = c.query_one(&stmt, &[&m, &i, &ms]).await.unwrap();
    assert_eq!(row.get::<_, Item>(1).unwrap(), i);
    // A domain parameter with a value its check refuses: the server's error, not ours.
    let e = c
        .execute("UPDATE t SET p = $1 WHERE id = 0", &[&Positive(-1)])
        .await
        .unwrap_err();
    assert_eq!(
        e.code().map(|s| s.code().to_string()).as_deref(),
        Some("23514"),
        "{e}"
    );
}

/// The ids of the rows in `t`, read back through a row stream with `sql`, fetching `fetch`.
async fn stream_ids(c: &mut Client, sql: &str, fetch: FetchSize) -> Vec<i32> {
    let rows = c.query_stream_with(sql, &[], fetch).await.unwrap();
    let rows: Vec<Row> = rows.map(|r| r.unwrap()).collect().await;
    rows.iter()
        .map(|row| {
            let id: i32 = row.get(4).unwrap();
            check(row, id);
            id
        })
        .collect()
}

#[tokio::test]
async fn derived_types_round_trip_through_a_row_stream() {
    let (_cluster, mut c) = setup().await;
    for id in 0..40 {
        insert(&mut c, id).await;
    }
    // Fresh connections, so the types are unknown when the stream starts: looked up inside
    // the stream's open sequence, behind its first batch (small batches: several follow).
    let all: Vec<i32> = (0..40).collect();
    let sql = "SELECT m, i, p, ms, id FROM t ORDER BY id";
    for fetch in [FetchSize::Rows(3), FetchSize::Rows(0), FetchSize::Bytes(64)] {
        for uncached in [false, true] {
            let mut fresh = slipstream_pg::connect(&_cluster.url()).await.unwrap();
            let ids = match uncached {
                true => {
                    let rows = fresh
                        .query_stream_with(&Uncached(sql), &[], fetch)
                        .await
                        .unwrap();
                    let rows: Vec<Row> = rows.map(|r| r.unwrap()).collect().await;
                    rows.iter()
                        .map(|row| {
                            check(row, row.get(4).unwrap());
                            row.get(4).unwrap()
                        })
                        .collect()
                }
                false => stream_ids(&mut fresh, sql, fetch).await,
            };
            assert_eq!(ids, all, "{fetch} uncached={uncached}");
            // The connection is in step: the cached statement (types known) and a plain call.
            assert_eq!(stream_ids(&mut fresh, sql, fetch).await, all);
            assert_eq!(super::scalar::<i32>(&mut fresh, "SELECT 7").await, 7);
        }
    }
    // Parameters of derived types in a stream.
    let stmt = c
        .prepare("SELECT m, i, p, ms, id FROM t WHERE m = $1 AND ms = $2 ORDER BY id")
        .await
        .unwrap();
    let (m, _, _, ms) = values(5);
    let rows = c.query_stream(&stmt, &[&m, &ms]).await.unwrap();
    let ids: Vec<i32> = rows
        .map(|r| r.unwrap().get::<_, i32>(4).unwrap())
        .collect()
        .await;
    assert!(ids.contains(&5) && !ids.is_empty(), "{ids:?}");
}

#[tokio::test]
async fn derived_types_round_trip_through_a_pipeline() {
    let (_cluster, mut c) = setup().await;
    // Parameters of derived types need a prepared statement in a pipeline (the pipeline
    // cannot wait for the server to name their types); preparing looks them up.
    let ins = c.prepare(INSERT).await.unwrap();
    let sel = c
        .prepare("SELECT m, i, p, ms, id FROM t WHERE id = $1")
        .await
        .unwrap();
    for mode in [PipelineMode::ContinueOnError, PipelineMode::AbortOnError] {
        c.batch_execute("TRUNCATE t").await.unwrap();
        let mut p = c.pipeline_with(PipelineOptions::new().mode(mode));
        let mut reads = Vec::new();
        let vals: Vec<_> = (0..10).map(values).collect();
        for (id, (m, i, pos, ms)) in (0..10).zip(&vals) {
            p.execute(&ins, &[&id, m, i, pos, ms]).await.unwrap();
            reads.push(p.query(&sel, &[&id]).await.unwrap());
        }
        for (id, op) in (0..10).zip(&reads) {
            check(&p.process(op).await.unwrap()[0], id);
        }
        p.end().await;
    }
    // SQL text in a fresh connection's pipeline: the result's types are unknown while the
    // replies arrive, and looked up by `end` once every reply is in.
    let mut fresh = slipstream_pg::connect(&_cluster.url()).await.unwrap();
    let mut p = fresh.pipeline();
    let early = p.query("SELECT m FROM t WHERE id = 3", &[]).await.unwrap();
    let a = p
        .query("SELECT m, i, p, ms, id FROM t WHERE id = 3", &[])
        .await
        .unwrap();
    let b = p.prepare("SELECT $1::mood, $2::item").await.unwrap();
    // Taken before `end`, the rows' type is not known yet: a clear error, the raw value.
    let rows = p.process(&early).await.unwrap();
    let e = rows[0].get::<_, Mood>(0).unwrap_err();
    assert!(e.to_string().contains("not been looked up"), "{e}");
    assert_eq!(rows[0].get_raw(0).unwrap(), Some(&b"sad"[..]));
    let results = p.end().await;
    let rows = results[a.id() as usize].as_ref().unwrap();
    let slipstream_pg::Output::Rows(rows) = rows else {
        panic!("{rows:?}")
    };
    check(&rows[0], 3);
    let Ok(slipstream_pg::Output::Prepared(stmt)) = &results[b.id() as usize] else {
        panic!("{:?}", results[b.id() as usize])
    };
    let (m, i, _, _) = values(1);
    let row = fresh.query_one(stmt, &[&m, &i]).await.unwrap();
    assert_eq!(row.get::<_, Item>(1).unwrap(), i);
    // Known now: a second pipeline reads them as they arrive.
    let mut p = fresh.pipeline();
    let a = p
        .query("SELECT m, i, p, ms, id FROM t WHERE id = 4", &[])
        .await
        .unwrap();
    check(&p.process(&a).await.unwrap()[0], 4);
    p.end().await;
}

#[tokio::test]
async fn discard_all_forgets_looked_up_types() {
    let (_cluster, mut c) = setup().await;
    insert(&mut c, 1).await;
    check(&c.query_one(SELECT, &[&1i32]).await.unwrap(), 1);
    // A fourth label: the cached type (three variants) no longer matches the server's, and a
    // Rust enum with four variants would be refused until the type is looked up again.
    #[derive(Debug, PartialEq, ToSql, FromSql)]
    #[postgres(name = "mood")]
    enum Mood4 {
        #[postgres(name = "sad")]
        Sad,
        #[postgres(name = "ok")]
        Ok,
        #[postgres(name = "happy")]
        Happy,
        #[postgres(name = "ecstatic")]
        Ecstatic,
    }
    // Through another connection: this one's own ALTER TYPE would forget the types by itself.
    let mut other = slipstream_pg::connect(&_cluster.url()).await.unwrap();
    other
        .batch_execute("ALTER TYPE mood ADD VALUE 'ecstatic'")
        .await
        .unwrap();
    let e = c
        .query_one("SELECT m FROM t WHERE id = $1", &[&1i32])
        .await
        .unwrap()
        .get::<_, Mood4>(0)
        .unwrap_err();
    assert!(e.to_string().contains("mood"), "{e}");
    c.batch_execute("DISCARD ALL").await.unwrap();
    let row = c
        .query_one("SELECT m, 'ecstatic'::mood FROM t WHERE id = $1", &[&1i32])
        .await
        .unwrap();
    assert_eq!(row.get::<_, Mood4>(0).unwrap(), Mood4::Ok);
    assert_eq!(row.get::<_, Mood4>(1).unwrap(), Mood4::Ecstatic);
    let sql = "INSERT INTO t (id, m) VALUES ($1, $2)";
    assert_eq!(c.execute(sql, &[&9i32, &Mood4::Ecstatic]).await.unwrap(), 1);
}

#[tokio::test]
async fn a_type_costs_one_lookup_per_connection_and_built_in_types_none() {
    let (_cluster, proxy, mut c) = super::behind_proxy("").await;
    c.batch_execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        .await
        .unwrap();
    async fn trips(proxy: &slipstream_testkit::DelayProxy, c: &mut Client, sql: &str) -> u64 {
        let before = proxy.round_trips();
        let row = c.query_one(sql, &[]).await.unwrap();
        assert_eq!(row.get::<_, Mood>(0).unwrap(), Mood::Happy);
        proxy.round_trips() - before
    }
    assert_eq!(
        trips(&proxy, &mut c, "SELECT 'happy'::mood").await,
        2,
        "run, then the lookup"
    );
    assert_eq!(
        trips(&proxy, &mut c, "SELECT 'happy'::mood").await,
        1,
        "cached statement"
    );
    assert_eq!(
        trips(&proxy, &mut c, "SELECT 'happy'::mood, 1").await,
        1,
        "cached type"
    );
    // An array of it is another type, looked up (with its element, already known) once.
    let sql = "SELECT 'happy'::mood, ARRAY['ok']::mood[]";
    assert_eq!(trips(&proxy, &mut c, sql).await, 2);
    c.clear_statement_cache();
    assert_eq!(
        trips(&proxy, &mut c, "SELECT 'happy'::mood").await,
        2,
        "forgotten"
    );
    // Built-in types never cost a lookup, cache miss or not.
    let before = proxy.round_trips();
    c.query_one("SELECT 1::int4, 'x'::text, now(), '{1}'::int8[]", &[])
        .await
        .unwrap();
    assert_eq!(proxy.round_trips() - before, 1);
}

#[derive(Debug, PartialEq, ToSql, FromSql)]
#[postgres(name = "pair")]
struct Pair {
    a: i32,
    b: i32,
}

/// A composite's fields are read and written by the definition looked up: after an attribute
/// is dropped and added again (so `a` now comes after `b`), the old definition put each value
/// in the other's field, with no error, and stored `a` in `b`. `ALTER TYPE` run on the
/// connection itself makes it look the types up again.
#[tokio::test]
async fn a_type_altered_through_the_connection_is_looked_up_again() {
    let (_cluster, mut c) = setup().await;
    c.batch_execute("CREATE TYPE pair AS (a int4, b int4); CREATE TABLE tp (p pair)")
        .await
        .unwrap();
    let pair = |a, b| Pair { a, b };
    let row = c.query_one("SELECT ROW(1, 2)::pair", &[]).await.unwrap();
    assert_eq!(row.get::<_, Pair>(0).unwrap(), pair(1, 2));

    c.batch_execute(
        "ALTER TYPE pair DROP ATTRIBUTE a, ADD ATTRIBUTE a int4;
         ALTER TYPE mood ADD VALUE 'ecstatic'",
    )
    .await
    .unwrap();
    // Now (b, a): the server's ROW(2, 1) is b = 2, a = 1.
    let row = c.query_one("SELECT ROW(2, 1)::pair", &[]).await.unwrap();
    assert_eq!(row.get::<_, Pair>(0).unwrap(), pair(1, 2));
    c.execute("INSERT INTO tp VALUES ($1)", &[&pair(10, 20)])
        .await
        .unwrap();
    let row = c
        .query_one("SELECT (p).a, (p).b FROM tp", &[])
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i32>(0).unwrap(), row.get::<_, i32>(1).unwrap()),
        (10, 20)
    );
    // The new label is known without clearing anything.
    let row = c.query_one("SELECT 'ecstatic'::mood", &[]).await.unwrap();
    assert!(
        matches!(row.columns()[0].type_().kind(), Kind::Enum(v) if v.len() == 4),
        "{:?}",
        row.columns()[0].type_()
    );
}

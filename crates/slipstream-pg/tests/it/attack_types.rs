//! Attacks on values in and out: parameters encoded from Rust values, results decoded into
//! them, compared with tokio-postgres and with the server's own text.

use slipstream_pg::types::{FromSql, Kind, ToSql, Type};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ToSql, FromSql)]
#[postgres(name = "mood")]
enum Mood {
    #[postgres(name = "sad")]
    Sad,
    #[postgres(name = "ok")]
    Ok,
}

/// Promise (docs/client.md, "Queries"; docs/statement-cache.md): with SQL text, strings go as
/// text for the server to infer, exactly like a quoted literal (`WHERE day = $1` with
/// `"2024-05-01"` compares dates), and a custom `ToSql` value costs one extra round trip.
/// Steps: run `SELECT $1::mood, $2::date::text, $3::int8` with a derived enum, a string and an
/// `i32`, twice (first run, then the cached statement), uncached, and through a row stream.
/// Before the fix: a custom value beside them made the client bind every value as the type
/// the server described: "cannot encode parameter $2 as date" (`&str` is not a `date`), and
/// an `i32` for an `int8` was refused too, though both work without the custom value.
#[tokio::test]
async fn a_custom_value_leaves_strings_as_literals_and_integers_as_their_type() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TYPE mood AS ENUM ('sad', 'ok')")
        .await
        .unwrap();
    const SQL: &str = "SELECT $1::mood, $2::date::text, $3::int8";
    let check = |rows: &[slipstream_pg::Row], mood: Mood, day: &str, n: i32| {
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].get::<_, Mood>(0).unwrap(), mood);
        assert_eq!(rows[0].get::<_, String>(1).unwrap(), day);
        assert_eq!(rows[0].get::<_, i64>(2).unwrap(), i64::from(n));
    };
    for (mood, day, n) in [(Mood::Ok, "2024-05-01", 7), (Mood::Sad, "2024-02-29", -1)] {
        let rows = c
            .query(SQL, &[&mood, &day, &n])
            .await
            .unwrap_or_else(|e| panic!("{day}: {e}"));
        check(&rows, mood, day, n);
        let rows = c
            .query(&slipstream_pg::Uncached(SQL), &[&mood, &day, &n])
            .await
            .unwrap_or_else(|e| panic!("uncached {day}: {e}"));
        check(&rows, mood, day, n);
    }
    let stats = c.statement_cache_stats();
    assert_eq!((stats.misses, stats.hits), (1, 1), "{stats:?}");
    let stream = c
        .query_stream(SQL, &[&Mood::Ok, &"2024-05-03", &3i32])
        .await
        .unwrap();
    let rows: Vec<_> = futures_util::TryStreamExt::try_collect(stream)
        .await
        .unwrap();
    check(&rows, Mood::Ok, "2024-05-03", 3);
    // A value of the wrong kind is still refused, by the server as for a literal.
    let e = c
        .query(SQL, &[&Mood::Ok, &"not a day", &1i32])
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Some(slipstream_pg::SqlState::from_code("22007")),
        "{e}"
    );
    // A statement with more parameters than values is refused before anything runs.
    let e = c
        .query("SELECT $1::mood, $2::text, $3::int4", &[&Mood::Ok, &"x"])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("3 parameters but 2"), "{e}");
    assert_eq!(super::scalar::<i32>(&mut c, "SELECT 1::int4").await, 1);
}

/// A multirange of float8 ranges, known by its kind as a `FromSql` for the built-in
/// multiranges is: it counts the ranges (the binary form starts with their count).
#[derive(Debug, PartialEq)]
struct FloatMultirange(u32);

impl<'a> FromSql<'a> for FloatMultirange {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let count: [u8; 4] = raw.get(..4).ok_or("short multirange")?.try_into()?;
        Ok(FloatMultirange(u32::from_be_bytes(count)))
    }
    fn accepts(ty: &Type) -> bool {
        matches!(ty.kind(), Kind::Multirange(sub) if *sub == Type::FLOAT8)
    }
}

/// Promise (type_info.rs, docs/client.md "Types"): a type that is not built in is looked up
/// with everything it refers to and gets its [`Kind`], as the built-in ones have theirs
/// (`int4multirange` is `Kind::Multirange(int4)`). Steps: a range type over float8 and one
/// over an enum (PostgreSQL makes their multiranges), read as columns and as a prepared
/// statement's parameters; a `FromSql` that accepts `Kind::Multirange(float8)` reads one.
/// Before the fix: the lookup joined `pg_range` by the range's OID only, so a multirange had
/// no subtype: `Kind::Simple`, and the `FromSql` was refused ("cannot read column 0 of type
/// floatmultirange").
#[tokio::test]
async fn a_user_defined_multirange_is_known_as_one() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(
        "CREATE TYPE mood AS ENUM ('sad', 'ok');
         CREATE TYPE floatrange AS RANGE (subtype = float8);
         CREATE TYPE moodrange AS RANGE (subtype = mood);",
    )
    .await
    .unwrap();
    let row = c
        .query_one(
            "SELECT '{[1.5,2.5), [3,4]}'::floatmultirange, '{[sad,ok)}'::moodmultirange, \
             '[1,2)'::floatrange, '{[1,2)}'::int4multirange",
            &[],
        )
        .await
        .unwrap();
    let kinds: Vec<Kind> = row
        .columns()
        .iter()
        .map(|c| c.type_().kind().clone())
        .collect();
    assert_eq!(kinds[0], Kind::Multirange(Type::FLOAT8), "{kinds:?}");
    let Kind::Multirange(mood) = &kinds[1] else {
        panic!("moodmultirange: {kinds:?}")
    };
    assert_eq!(mood.name(), "mood");
    assert_eq!(mood.kind(), &Kind::Enum(vec!["sad".into(), "ok".into()]));
    assert_eq!(kinds[2], Kind::Range(Type::FLOAT8));
    assert_eq!(kinds[3], Kind::Multirange(Type::INT4), "the built-in one");
    assert_eq!(
        row.get::<_, FloatMultirange>(0).unwrap(),
        FloatMultirange(2)
    );
    let stmt = c.prepare("SELECT $1::floatmultirange").await.unwrap();
    assert_eq!(stmt.params()[0].kind(), &Kind::Multirange(Type::FLOAT8));
}

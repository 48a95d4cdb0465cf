//! Attacks on values in and out: parameters encoded from Rust values, results decoded into
//! them, compared with tokio-postgres and with the server's own text.

use slipstream_pg::types::{FromSql, Kind, ToSql, Type};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ToSql, FromSql)]
#[postgres(name = "mood")]
pub(crate) enum Mood {
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

/// Values per type in the bounded form (a few seconds with `cargo test`). The long form:
/// `SLIPSTREAM_FUZZ_CASES=2000 SLIPSTREAM_FUZZ_SEED=$RANDOM cargo test -p slipstream-pg --test it
/// attack_types::values_of -- --nocapture`.
const DEFAULT_CASES: u64 = 12;

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|e| panic!("{name}={v:?} is not a number: {e}"))
    })
}

/// xorshift64: reproducible from the seed printed on failure.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn text(&mut self, max: u64) -> String {
        // A code point from every plane, surrogates and NUL skipped.
        (0..self.below(max + 1))
            .filter_map(|_| match self.below(4) {
                0 => char::from_u32(self.below(0x80) as u32),
                _ => char::from_u32(self.below(0x11_0000) as u32),
            })
            .filter(|&ch| ch != '\0')
            .collect()
    }
    fn json(&mut self, depth: u32) -> serde_json::Value {
        use serde_json::Value;
        match self.below(if depth == 0 { 6 } else { 8 }) {
            0 => Value::Null,
            1 => Value::Bool(self.next() & 1 == 1),
            2 => Value::from(self.next() as i64),
            3 => Value::from(self.next()),
            4 => {
                let f = f64::from_bits(self.next());
                // JSON has no NaN or infinity, and numeric has no -0.
                if f.is_finite() && f != 0.0 {
                    Value::from(f)
                } else {
                    Value::from(0.5)
                }
            }
            5 => Value::from(self.text(6)),
            6 => Value::Array((0..self.below(4)).map(|_| self.json(depth - 1)).collect()),
            _ => Value::Object(
                (0..self.below(4))
                    .map(|_| (self.text(3), self.json(depth - 1)))
                    .collect(),
            ),
        }
    }
}

/// The value of `$1::ty` and its text through slipstream (SQL text, so the type chosen from
/// the Rust value, and a prepared statement, so the server's, and `query_typed`) and through
/// tokio-postgres must agree, with each other and with the server's text of the literal run
/// through the simple protocol. `by_sql`: false where slipstream sends the value from SQL text
/// as another type on purpose (docs/client.md, "Queries": a json value goes as jsonb, and
/// `$1::json` then holds what jsonb made of it); the other two ways are still compared.
async fn agree<T>(
    c: &mut slipstream_pg::Client,
    peer: &tokio_postgres::Client,
    ty: &str,
    v: &T,
    by_sql: bool,
) where
    T: ToSql + Sync + for<'a> FromSql<'a> + std::fmt::Debug,
{
    let sql = format!("SELECT $1::{ty}, $1::{ty}::text");
    let theirs = peer
        .query_one(&*sql, &[v])
        .await
        .unwrap_or_else(|e| panic!("tokio-postgres {ty} {v:?}: {e}"));
    let (want, want_text): (T, Option<String>) = (theirs.get(0), theirs.get(1));
    let stmt = c.prepare(&sql).await.unwrap();
    let param_type = stmt.params()[0].clone();
    let rows = [
        c.query_one(&*sql, &[v]).await,
        c.query_one(&stmt, &[v]).await,
        c.query_typed(&sql, &[(v, param_type)])
            .await
            .and_then(|mut r| r.pop().ok_or_else(|| unreachable!())),
    ];
    for (how, row) in ["sql", "prepared", "typed"].iter().zip(rows) {
        let row = row.unwrap_or_else(|e| panic!("{how} {ty} {v:?}: {e}"));
        if !by_sql && *how == "sql" {
            continue;
        }
        let got: T = row
            .get(0)
            .unwrap_or_else(|e| panic!("{how} {ty} {v:?}: {e}"));
        // Debug, so that NaN equals NaN and -0 differs from 0.
        assert_eq!(format!("{got:?}"), format!("{want:?}"), "{how} {ty}");
        let text: Option<String> = row.get(1).unwrap();
        assert_eq!(text, want_text, "{how} {ty} {v:?}");
    }
    let Some(text) = want_text else { return };
    let literal = format!("SELECT '{}'::{ty}::text", text.replace('\'', "''"));
    let simple = c.simple_query(&literal).await.unwrap();
    let Some(slipstream_pg::SimpleQueryMessage::Row(s)) = simple.get(1) else {
        panic!("{ty} {v:?}: {simple:?}")
    };
    assert_eq!(s.get(0).unwrap(), Some(&*text), "simple {ty} {v:?}");
}

/// Promise (docs/client.md, "Queries"; the crate docs): any type with `ToSql`/`FromSql` works,
/// and the types listed get their natural PostgreSQL type; the same value read through
/// slipstream and tokio-postgres (whose types the server always names) is the same value.
/// Steps: seeded values of every listed type (extremes first: integer limits, NaN, infinities,
/// -0.0 and subnormals, dates and timestamps at 4713 BC and at chrono's last year, every
/// Unicode plane, nested jsonb with 64-bit and float numbers, inet v4/v6, arrays with NULLs
/// and empty ones, NULL itself) through [`agree`]. Holds.
#[tokio::test]
async fn values_of_every_listed_type_agree_with_tokio_postgres_and_the_server() {
    use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Utc};
    use std::net::IpAddr;
    let cases = env("SLIPSTREAM_FUZZ_CASES").unwrap_or(DEFAULT_CASES);
    let seed = env("SLIPSTREAM_FUZZ_SEED").unwrap_or(33).max(1);
    println!("{cases} cases per type, seed {seed} (SLIPSTREAM_FUZZ_CASES, SLIPSTREAM_FUZZ_SEED)");
    let (cluster, mut c) = super::setup().await;
    let peer = super::peer(&cluster).await;
    let c = &mut c;
    let mut r = Rng(seed);

    // Integers, bool, "char", oid.
    for v in [i16::MIN, i16::MAX, 0, -1] {
        agree(c, &peer, "int2", &v, true).await;
    }
    for v in [i32::MIN, i32::MAX, 0] {
        agree(c, &peer, "int4", &v, true).await;
    }
    for v in [i64::MIN, i64::MAX] {
        agree(c, &peer, "int8", &v, true).await;
    }
    for v in [i8::MIN, -1, 0, 1, b'\'' as i8, b'\\' as i8, i8::MAX] {
        agree(c, &peer, "\"char\"", &v, true).await;
    }
    for v in [0u32, u32::MAX] {
        agree(c, &peer, "oid", &v, true).await;
    }
    agree(c, &peer, "bool", &true, true).await;
    agree(c, &peer, "bool", &None::<bool>, true).await;
    for _ in 0..cases {
        agree(c, &peer, "int2", &(r.next() as i16), true).await;
        agree(c, &peer, "int4", &(r.next() as i32), true).await;
        agree(c, &peer, "oid", &(r.next() as u32), true).await;
        agree(c, &peer, "\"char\"", &(r.next() as i8), true).await;
    }

    // float4 (float8 is in types.rs).
    let mut floats = vec![
        f32::NAN,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::MAX,
        f32::MIN,
    ];
    floats.extend((0..cases).map(|_| f32::from_bits(r.next() as u32)));
    for v in &floats {
        agree(c, &peer, "float4", v, true).await;
    }

    // Dates and times, at PostgreSQL's first day and chrono's last.
    let first = NaiveDate::from_ymd_opt(-4713, 11, 24).unwrap();
    let last = NaiveDate::MAX;
    let span = (last - first).num_days() as u64;
    let mut days = vec![first, last, NaiveDate::from_ymd_opt(2000, 1, 1).unwrap()];
    days.extend((0..cases).map(|_| first + chrono::Days::new(r.below(span + 1))));
    for d in &days {
        agree(c, &peer, "date", d, true).await;
        let micros = r.below(86_400_000_000);
        let t = NaiveTime::from_num_seconds_from_midnight_opt(
            (micros / 1_000_000) as u32,
            (micros % 1_000_000) as u32 * 1000,
        )
        .unwrap();
        agree(c, &peer, "time", &t, true).await;
        let ts: NaiveDateTime = d.and_time(t);
        agree(c, &peer, "timestamp", &ts, true).await;
        let tz: DateTime<Utc> = ts.and_utc();
        agree(c, &peer, "timestamptz", &tz, true).await;
    }
    agree(c, &peer, "date[]", &days, true).await;
    agree(c, &peer, "timestamptz", &None::<DateTime<Utc>>, true).await;

    // uuid, inet, bytea.
    for _ in 0..cases {
        let u = uuid::Uuid::from_u128(u128::from(r.next()) << 64 | u128::from(r.next()));
        agree(c, &peer, "uuid", &u, true).await;
        let ip = match r.below(2) {
            0 => IpAddr::from((r.next() as u32).to_be_bytes()),
            _ => IpAddr::from((u128::from(r.next()) << 64 | u128::from(r.next())).to_be_bytes()),
        };
        agree(c, &peer, "inet", &ip, true).await;
        let bytes: Vec<u8> = (0..r.below(300)).map(|_| r.next() as u8).collect();
        agree(c, &peer, "bytea", &bytes, true).await;
    }
    agree(c, &peer, "bytea", &Vec::<u8>::new(), true).await;

    // jsonb; json through a prepared statement and query_typed (from SQL text it goes as
    // jsonb: docs/client.md).
    for _ in 0..cases {
        let j = r.json(4);
        agree(c, &peer, "jsonb", &j, true).await;
        agree(c, &peer, "json", &j, false).await;
    }
    let escapes = serde_json::json!({"\u{1}\"\\/\u{7f}": "\u{10ffff}\u{feff}", "n": u64::MAX, "i": i64::MIN, "f": 5e-324});
    agree(c, &peer, "jsonb", &escapes, true).await;

    // Arrays: NULL elements, empty, of each listed element type.
    for _ in 0..cases {
        let n = r.below(6) as usize;
        let ints: Vec<Option<i32>> = (0..n)
            .map(|_| (r.below(3) != 0).then(|| r.next() as i32))
            .collect();
        agree(c, &peer, "int4[]", &ints, true).await;
        let f: Vec<f64> = (0..n).map(|_| f64::from_bits(r.next())).collect();
        agree(c, &peer, "float8[]", &f, true).await;
        let b: Vec<Option<bool>> = (0..n)
            .map(|_| (r.below(3) != 0).then(|| r.next() & 1 == 1))
            .collect();
        agree(c, &peer, "bool[]", &b, true).await;
        let s: Vec<i16> = (0..n).map(|_| r.next() as i16).collect();
        agree(c, &peer, "int2[]", &s, true).await;
        let u: Vec<uuid::Uuid> = (0..n)
            .map(|_| uuid::Uuid::from_u128(u128::from(r.next())))
            .collect();
        agree(c, &peer, "uuid[]", &u, true).await;
        let j: Vec<serde_json::Value> = (0..n).map(|_| r.json(2)).collect();
        agree(c, &peer, "jsonb[]", &j, true).await;
        let by: Vec<Vec<u8>> = (0..n).map(|_| r.text(4).into_bytes()).collect();
        agree(c, &peer, "bytea[]", &by, true).await;
    }
    agree(c, &peer, "int8[]", &Vec::<i64>::new(), true).await;
    agree(c, &peer, "text[]", &Vec::<String>::new(), true).await;
    agree(c, &peer, "int4[]", &None::<Vec<i32>>, true).await;
}

/// Promise (docs/client.md, "Queries"): `Row::get` returns `Result`; a wrong type or a NULL
/// into a non-`Option` is an error, never a panic or a wrong value. Steps: one row with a
/// column of each listed type, and the same row of NULLs, read as every Rust type the docs list
/// through slipstream and tokio-postgres (`try_get`): both must succeed with the same value or
/// both fail, and slipstream's error must be a `Conversion` error naming the column, its type
/// (or NULL) and the Rust type. Holds.
#[tokio::test]
async fn every_accessor_type_check_agrees_with_tokio_postgres() {
    use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Utc};
    let (cluster, mut c) = super::setup().await;
    let peer = super::peer(&cluster).await;
    let exprs = [
        "7::int2",
        "-7::int4",
        "7::int8",
        "1.5::float4",
        "-2.5::float8",
        "1.25::numeric",
        "'t'::text",
        "'v'::varchar",
        "'c'::bpchar",
        "'n'::name",
        "'x'::\"char\"",
        "42::oid",
        "'\\x00ff'::bytea",
        "true",
        "'2024-02-29'::date",
        "'12:34:56'::time",
        "'2024-02-29 12:34:56'::timestamp",
        "'2024-02-29 12:34:56+02'::timestamptz",
        "'1 day'::interval",
        "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid",
        "'{\"a\": 1}'::json",
        "'{\"a\": 1}'::jsonb",
        "'10.0.0.1'::inet",
        "ARRAY[1, NULL]::int4[]",
        "'{{1,2},{3,4}}'::int4[]",
        "ARRAY['a']::text[]",
        "'[1,2)'::int4range",
        "ROW(1, 'a')",
    ];
    let select = format!("SELECT {}", exprs.join(", "));
    let nulls = format!(
        "SELECT {}",
        exprs
            .iter()
            .map(|e| format!("NULL::{}", c_type(e)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    fn c_type(expr: &str) -> &str {
        match expr.rsplit_once("::") {
            Some((_, t)) => t,
            None if expr == "true" => "bool",
            None => "record",
        }
    }
    for sql in [&select, &nulls] {
        let ours = c.query_one(&**sql, &[]).await.unwrap();
        let theirs = peer.query_one(&**sql, &[]).await.unwrap();
        macro_rules! check {
            ($($t:ty),* $(,)?) => {$(
                for i in 0..exprs.len() {
                    let a = ours.get::<_, $t>(i);
                    let b = theirs.try_get::<_, $t>(i);
                    match (&a, &b) {
                        (Ok(a), Ok(b)) => {
                            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{} as {}", exprs[i], stringify!($t))
                        }
                        (Err(e), Err(_)) => {
                            assert_eq!(e.kind(), slipstream_pg::ErrorKind::Conversion, "{e}");
                            let m = e.to_string();
                            let ty = ours.columns()[i].type_().name();
                            assert!(m.contains(&format!("column {i}")), "{m}");
                            assert!(m.contains(ty) || m.contains("NULL"), "{m}");
                        }
                        _ => panic!(
                            "{} as {}: slipstream {a:?}, tokio-postgres {b:?}",
                            exprs[i],
                            stringify!($t)
                        ),
                    }
                }
            )*};
        }
        check!(
            i8,
            i16,
            i32,
            i64,
            u32,
            f32,
            f64,
            bool,
            String,
            Vec<u8>,
            NaiveDate,
            NaiveTime,
            NaiveDateTime,
            DateTime<Utc>,
            std::time::SystemTime,
            uuid::Uuid,
            serde_json::Value,
            std::net::IpAddr,
            Vec<Option<i32>>,
            Vec<String>,
            Option<i32>,
            Option<String>,
            Option<Vec<i32>>,
            Option<serde_json::Value>,
            Option<f64>,
        );
    }
}

/// Promise (docs/client.md, "Queries", written with this test): a value sent from SQL text
/// keeps its natural type and meets a column of another type through the server's assignment
/// casts; a prepared statement or `query_typed` with the column's type encodes it as that type
/// (as tokio-postgres does) or refuses it before anything is sent. Steps: an `f64` into an
/// `int4` and a `numeric` column, and json values with `-0.0` and `\u0000` into a `json`
/// column, each way, against what tokio-postgres stores. Found while attacking: the SQL-text
/// way rounds, truncates and rewrites silently where tokio-postgres refuses or keeps the
/// value; a design trade-off (jsonb makes `jsonb_col @> $1` work), now documented. Holds.
#[tokio::test]
async fn natural_types_meet_other_columns_through_the_servers_casts() {
    let (cluster, mut c) = super::setup().await;
    let peer = super::peer(&cluster).await;
    c.batch_execute("CREATE TABLE n (id int4, i int4, n numeric, j json)")
        .await
        .unwrap();
    let f = 1.2345678901234567f64;
    c.execute(
        "INSERT INTO n (id, i, n) VALUES (1, $1, $2)",
        &[&1.5f64, &f],
    )
    .await
    .unwrap();
    let row = c
        .query_one("SELECT i, n::text FROM n WHERE id = 1", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0).unwrap(), 2);
    assert_eq!(row.get::<_, String>(1).unwrap(), "1.23456789012346");
    let stmt = c
        .prepare("INSERT INTO n (id, i, n) VALUES (2, $1, $2)")
        .await
        .unwrap();
    let e = c.execute(&stmt, &[&1.5f64, &f]).await.unwrap_err();
    assert_eq!(e.kind(), slipstream_pg::ErrorKind::Conversion, "{e}");
    assert!(e.to_string().contains("$1 as int4"), "{e}");
    assert!(
        peer.execute("INSERT INTO n (i) VALUES ($1)", &[&1.5f64])
            .await
            .is_err()
    );

    let minus_zero = serde_json::json!({"x": -0.0});
    let nul = serde_json::json!({"s": "a\u{0}b"});
    let insert = "INSERT INTO n (id, j) VALUES ($1, $2)";
    c.execute(insert, &[&3i32, &minus_zero]).await.unwrap();
    let e = c.execute(insert, &[&4i32, &nul]).await.unwrap_err();
    assert_eq!(
        e.code(),
        Some(slipstream_pg::SqlState::from_code("22P05")),
        "{e}"
    );
    use slipstream_pg::types::Type;
    for (id, v) in [(5i32, &minus_zero), (6, &nul)] {
        c.query_typed(insert, &[(&id, Type::INT4), (v, Type::JSON)])
            .await
            .unwrap();
        peer.execute(insert, &[&(id + 10), v]).await.unwrap();
    }
    let stored = |rows: Vec<slipstream_pg::SimpleQueryMessage>| -> Vec<String> {
        rows.into_iter()
            .filter_map(|m| match m {
                slipstream_pg::SimpleQueryMessage::Row(r) => {
                    Some(r.get(0).unwrap().unwrap().to_string())
                }
                _ => None,
            })
            .collect()
    };
    let ours = stored(
        c.simple_query("SELECT j FROM n WHERE id IN (3, 5, 6) ORDER BY id")
            .await
            .unwrap(),
    );
    let theirs = stored(
        c.simple_query("SELECT j FROM n WHERE id IN (15, 16) ORDER BY id")
            .await
            .unwrap(),
    );
    assert_eq!(ours[0], r#"{"x": 0.0}"#, "through jsonb");
    assert_eq!(
        ours[1..],
        theirs[..],
        "query_typed stores what tokio-postgres stores"
    );
    assert_eq!(theirs, [r#"{"x":-0.0}"#, r#"{"s":"a\u0000b"}"#]);
}

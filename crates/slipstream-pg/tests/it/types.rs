use std::fmt::Debug;

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use slipstream_pg::types::{FromSql, ToSql};
use slipstream_pg::{Client, ErrorKind};

/// Sends `value` as a parameter cast to `sql_type`, reads it back, and compares.
async fn round_trip<T>(client: &mut Client, sql_type: &str, value: T)
where
    T: ToSql + Sync + for<'a> FromSql<'a> + PartialEq + Debug,
{
    let stmt = client
        .prepare(&format!("SELECT $1::{sql_type}"))
        .await
        .unwrap();
    let row = client.query_one(&stmt, &[&value]).await.unwrap();
    let back: T = row.get(0).unwrap_or_else(|e| panic!("{sql_type}: {e}"));
    assert_eq!(back, value, "{sql_type}");
}

#[tokio::test]
async fn values_survive_a_round_trip() {
    let (_cluster, mut c) = super::setup().await;
    round_trip(&mut c, "int2", i16::MIN).await;
    round_trip(&mut c, "int4", i32::MAX).await;
    round_trip(&mut c, "int8", -1234567890123i64).await;
    round_trip(&mut c, "float4", 1.5f32).await;
    round_trip(&mut c, "float8", -0.000123f64).await;
    round_trip(&mut c, "float8", f64::INFINITY).await;
    round_trip(&mut c, "text", "ünïcødé ✓ and 'quotes'".to_string()).await;
    round_trip(&mut c, "varchar", String::new()).await;
    round_trip(&mut c, "bytea", vec![0u8, 1, 2, 255, 0]).await;
    round_trip(&mut c, "bool", true).await;
    round_trip(
        &mut c,
        "date",
        NaiveDate::from_ymd_opt(2024, 2, 29).unwrap(),
    )
    .await;
    round_trip(
        &mut c,
        "timestamp",
        NaiveDateTime::parse_from_str("1999-12-31 23:59:59.123456", "%Y-%m-%d %H:%M:%S%.f")
            .unwrap(),
    )
    .await;
    round_trip(
        &mut c,
        "timestamptz",
        DateTime::<Utc>::from_timestamp(1_700_000_000, 5_000).unwrap(),
    )
    .await;
    round_trip(
        &mut c,
        "uuid",
        uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
    )
    .await;
    let doc = serde_json::json!({"a": [1, 2.5, null], "b": {"c": "d"}});
    round_trip(&mut c, "json", doc.clone()).await;
    round_trip(&mut c, "jsonb", doc).await;
    round_trip(&mut c, "int4[]", vec![1i32, -2, 3]).await;
    round_trip(
        &mut c,
        "text[]",
        vec!["a".to_string(), String::new(), "c,d".to_string()],
    )
    .await;
    round_trip(&mut c, "int8[]", vec![Some(1i64), None, Some(3)]).await;
    round_trip(&mut c, "int4", None::<i32>).await;
    round_trip(&mut c, "text", None::<String>).await;
}

#[tokio::test]
async fn columns_by_name_and_clear_errors_for_wrong_use() {
    let (_cluster, mut c) = super::setup().await;
    let row = c
        .query_one("SELECT 7::int4 AS seven, NULL::text AS nothing", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>("seven").unwrap(), 7);
    assert_eq!(
        row.get::<_, i32>("SEVEN").unwrap(),
        7,
        "unquoted names match case-insensitively"
    );
    assert_eq!(row.get::<_, Option<String>>("nothing").unwrap(), None);

    let e = row.get::<_, String>("seven").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conversion);
    assert!(e.to_string().contains("int4"), "{e}");
    let e = row.get::<_, String>("nothing").unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::Conversion,
        "NULL into a non-Option: {e}"
    );
    let e = row.get::<_, i32>("missing").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Column);
    let e = row.get::<_, i32>(5).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Column);

    // A parameter of the wrong Rust type for a prepared statement is refused before anything
    // is sent.
    let stmt = c.prepare("SELECT $1::int4, $2::int4").await.unwrap();
    let e = c.query(&stmt, &[&"not a number", &1i32]).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conversion, "{e}");
    assert!(e.to_string().contains("$1"), "{e}");
    let e = c.query(&stmt, &[&1i32]).await.unwrap_err();
    assert!(e.to_string().contains("2 parameters but 1"), "{e}");
    // With SQL text, a string goes as text and the server parses it, as it would a literal.
    let e = c
        .query("SELECT $1::int4", &[&"not a number"])
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Some(slipstream_pg::SqlState::from_code("22P02")),
        "{e}"
    );
    let e = c
        .query("SELECT $1::int4, $2::int4", &[&1i32])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("requires 2"), "{e}");
    // ... and the connection is still in step.
    assert_eq!(super::scalar::<i32>(&mut c, "SELECT 1::int4").await, 1);
}

#[tokio::test]
async fn unknown_types_can_be_read_raw() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TYPE mood AS ENUM ('ok', 'happy')")
        .await
        .unwrap();
    let row = c.query_one("SELECT 'happy'::mood", &[]).await.unwrap();
    assert_eq!(row.get_raw(0).unwrap(), Some(&b"happy"[..]));
}

/// Text goes on the wire as UTF-8 (docs/client.md: "client_encoding is always UTF8"). After a
/// `SET client_encoding = 'LATIN1'` the server converted every string from LATIN1: an "é"
/// sent was stored as "Ã©" (what tokio-postgres, which does not check either, and every other
/// client then read), and read back converted again, so this connection saw nothing wrong.
#[tokio::test]
async fn a_client_encoding_other_than_utf8_closes_the_connection_rather_than_mis_encode() {
    let (cluster, mut c) = super::setup().await;
    let peer = super::peer(&cluster).await;
    c.batch_execute("CREATE TABLE te (t text)").await.unwrap();
    // Spelled another way, it is still UTF8.
    c.batch_execute("SET client_encoding = 'unicode'; RESET client_encoding")
        .await
        .unwrap();
    let e = c
        .batch_execute("SET client_encoding = 'LATIN1'")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert!(e.to_string().contains("client_encoding"), "{e}");
    let inserted = c.execute("INSERT INTO te VALUES ($1)", &[&"é"]).await;
    assert!(inserted.unwrap_err().is_closed());
    let stored: Vec<String> = peer
        .query("SELECT t FROM te", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(stored.is_empty(), "{stored:?}");
}

/// Differential against tokio-postgres: hostile but legal values sent as parameters and read
/// back, both as values and as the server's text, through both clients; the text of the same
/// values through the simple protocol too. Seeded, a few hundred values, well under a second.
#[tokio::test]
async fn values_and_their_text_agree_with_tokio_postgres() {
    let (cluster, mut c) = super::setup().await;
    let peer = super::peer(&cluster).await;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut floats = vec![
        f64::NAN,
        -0.0,
        0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MIN_POSITIVE,
        5e-324,
        f64::MAX,
    ];
    let mut ints = vec![i64::MIN, i64::MAX, 0, -1];
    let mut texts = vec![
        String::new(),
        "'\"\\\t\n{},NULL".to_string(),
        "\u{10ffff}\u{feff}\u{200b}".to_string(),
    ];
    for _ in 0..60 {
        floats.push(f64::from_bits(next()));
        ints.push(next() as i64);
        // A code point from every plane, surrogates skipped.
        let s: String = (0..(next() % 12))
            .filter_map(|_| char::from_u32((next() % 0x11_0000) as u32))
            .filter(|&ch| ch != '\0')
            .collect();
        texts.push(s);
    }
    async fn both<T>(c: &mut Client, peer: &tokio_postgres::Client, ty: &str, v: &T)
    where
        T: ToSql + Sync + for<'a> FromSql<'a> + Debug,
    {
        let sql = format!("SELECT $1::{ty}, $1::{ty}::text");
        let ours = c.query_one(&*sql, &[v]).await.unwrap();
        let theirs = peer.query_one(&*sql, &[v]).await.unwrap();
        let (a, b): (T, T) = (ours.get(0).unwrap(), theirs.get(0));
        // Debug, so that NaN equals NaN and -0 differs from 0.
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{ty} {v:?}");
        let text: String = ours.get(1).unwrap();
        assert_eq!(text, theirs.get::<_, String>(1), "{ty} {v:?}");
        let literal = text.replace('\'', "''");
        let simple = c
            .simple_query(&format!("SELECT '{literal}'::{ty}::text"))
            .await
            .unwrap();
        let peer_simple = peer
            .simple_query(&format!("SELECT '{literal}'::{ty}::text"))
            .await
            .unwrap();
        let (
            Some(slipstream_pg::SimpleQueryMessage::Row(s)),
            Some(tokio_postgres::SimpleQueryMessage::Row(p)),
        ) = (simple.get(1), peer_simple.get(1))
        else {
            panic!("{ty} {v:?}: {simple:?}")
        };
        assert_eq!(s.get(0).unwrap(), p.get(0), "{ty} {v:?}");
        assert_eq!(s.get(0).unwrap(), Some(&*text), "{ty} {v:?}");
    }
    for f in &floats {
        both(&mut c, &peer, "float8", f).await;
    }
    for i in &ints {
        both(&mut c, &peer, "int8", i).await;
    }
    for t in &texts {
        both(&mut c, &peer, "text", t).await;
    }
    let arrays: Vec<Vec<Option<String>>> = texts
        .chunks(4)
        .map(|ch| {
            ch.iter()
                .map(|t| (!t.is_empty()).then(|| t.clone()))
                .collect()
        })
        .collect();
    for a in &arrays {
        both(&mut c, &peer, "text[]", a).await;
    }
    both(
        &mut c,
        &peer,
        "bytea",
        &(0..=255u8).cycle().take(3 << 20).collect::<Vec<u8>>(),
    )
    .await;
}

//! A generated differential of the pipeline's COPY check against PostgreSQL's own grammar
//! (docs/pipelining.md, "COPY"): a pipeline refuses a COPY that streams its data through the
//! connection (`FROM STDIN`, `TO STDOUT`), which would make the server take every operation
//! queued after it as COPY data, and runs a COPY to or from a server-side file or program.
//!
//! Method: COPY statements are put together from parts (sources with names and literals that
//! mention the other direction or target, every kind of comment and string constant, targets
//! of both kinds, option tails), and some get a fragment of SQL syntax inserted at a random
//! place (a quote, a comment opener, a parenthesis, a dollar tag, non-ASCII). Each is asked of
//! the server first, outside a pipeline and inside a transaction that is rolled back: the
//! server answers a stream COPY with CopyInResponse or CopyOutResponse, which the client turns
//! into its "as a stream" error; anything else (success, a file error, a syntax error) is not
//! a stream. Then the same text is given to a pipeline.
//!
//! - **Safety (every case):** what the server streams, the pipeline refuses.
//! - **No false refusal (cases without an inserted fragment):** what the server runs as an
//!   ordinary statement, the pipeline runs too. With a fragment inserted, the check may refuse
//!   text it cannot read with certainty (a backslash in a plain literal, an unterminated quote)
//!   when it mentions a stream; those refusals are counted, not failed.
//!
//! Bounded by default (`make test`, about a second); the long form:
//!
//! ```text
//! SLIPSTREAM_ATTACK_LONG=1 SLIPSTREAM_FUZZ_SEED=$RANDOM \
//!     cargo test -p slipstream-pg --test it -- attack_pipeline_copy_check --nocapture
//! ```

use slipstream_pg::{Client, ErrorKind, SqlState};

use crate::seeded::Rng;
use crate::setup;

/// Cases in the bounded form, which runs in `make test`.
const DEFAULT_CASES: u32 = 400;
/// Cases with `SLIPSTREAM_ATTACK_LONG` set.
const LONG_CASES: u32 = 20_000;
/// A fixed default seed keeps `make test` reproducible; SLIPSTREAM_FUZZ_SEED explores.
const DEFAULT_SEED: u64 = 29;

/// What comes before the keyword: nothing the server reads.
const LEADS: &[&str] = &["", " ", ";", "/* to stdout */ ", "-- from stdin\n", "\n\t"];

/// Between words: whitespace and comments that mention the other answer.
const SEPARATORS: &[&str] = &[
    " ",
    "\n\t",
    " /* from stdin */ ",
    " /* to /* nested */ '/f' */ ",
    " -- to stdout\n",
];

/// What is copied: tables whose names mention a stream, and queries whose text does.
const SOURCES: &[&str] = &[
    "t",
    "stdin",
    "stdout",
    r#""from stdin""#,
    "t· (€)",
    "s.t (a)",
    "BINARY t",
    "été",
    "(SELECT 'to stdout' AS a FROM t)",
    "(SELECT $$ ) to '/f' $$ AS a)",
    "(SELECT $q$ from stdin $q$ AS stdout)",
    r"(SELECT E'\' ) TO ''/f''' AS a, E'\\' AS b FROM t)",
    "(SELECT 'x''y) to stdin' AS a FROM t WHERE (a) = (a))",
    r#"(SELECT 1 AS ")" FROM t)"#,
    "(SELECT 1 AS €, 2 AS 😀)",
];

/// The targets with the direction they need (`None`: either), and whether they stream.
/// `{dir}` is a directory the server may write to; reading from one that does not exist is
/// an ordinary statement that fails.
const TARGETS: &[(&str, Option<&str>, bool)] = &[
    ("STDIN", Some("FROM"), true),
    ("stdin", Some("FROM"), true),
    ("STDOUT", Some("TO"), true),
    ("StdOut", Some("TO"), true),
    ("'/nonexistent/stdin.csv'", Some("FROM"), false),
    (r"E'/nonexistent/\'stdout'", Some("FROM"), false),
    ("$$/nonexistent/stdin$$", Some("FROM"), false),
    ("U&'/nonexistent/stdin'", Some("FROM"), false),
    ("'{dir}/stdout.csv'", Some("TO"), false),
    ("$p${dir}/stdin.csv$p$", Some("TO"), false),
    ("PROGRAM 'true'", Some("FROM"), false),
    ("PROGRAM 'cat >/dev/null'", Some("TO"), false),
];

/// After the target.
const TAILS: &[&str] = &[
    "",
    " (FORMAT csv)",
    " WITH (FORMAT text, DELIMITER ';')",
    ";",
];

/// Fragments inserted into some statements at a random character boundary.
const FRAGMENTS: &[&str] = &[
    "'", "\"", "$$", "$a$", "(", ")", "--", "/*", "*/", "\n", "\\", "E'", ";", "·", "€", "stdin",
    " to ", " from ", ",", "::text", "$1",
];

/// One generated statement; `clean` when no fragment was inserted.
struct Case {
    sql: String,
    clean: bool,
}

fn generate(p: &mut Rng, dir: &str) -> Case {
    let (target, direction, _) = TARGETS[p.below(TARGETS.len())];
    let source = p.pick(SOURCES);
    // A query can only be copied out.
    let direction = match direction {
        Some(d) => d,
        None if source.starts_with('(') => "TO",
        None => "FROM",
    };
    let direction = if p.below(2) == 0 {
        direction.to_string()
    } else {
        direction.to_ascii_lowercase()
    };
    let mut sql = format!(
        "{}COPY{}{source}{}{direction}{}{}{}",
        p.pick(LEADS),
        p.pick(SEPARATORS),
        p.pick(SEPARATORS),
        p.pick(SEPARATORS),
        target.replace("{dir}", dir),
        p.pick(TAILS),
    );
    // Never inside a program's command: the shell would run what the fragment makes of it.
    let clean = target.starts_with("PROGRAM") || p.below(3) != 0;
    if !clean {
        let start = sql.find("COPY").unwrap_or(0) + 4;
        let at = start + p.below(sql.len() - start + 1);
        let at = (at..=sql.len())
            .find(|&i| sql.is_char_boundary(i))
            .unwrap_or(sql.len());
        sql.insert_str(at, p.pick(FRAGMENTS));
    }
    Case { sql, clean }
}

/// What the server does with a statement.
#[derive(Debug, PartialEq)]
enum Server {
    /// Streams its data through the connection (CopyInResponse or CopyOutResponse).
    Streams,
    /// Runs it as an ordinary statement: it succeeds, or fails opening its server-side file.
    Runs,
    /// Refuses it before it runs (a syntax error, conflicting options): which kind of COPY it
    /// would have been is not said, and either answer of the check is safe.
    Refuses,
}

/// What the server does with `sql`, asked outside a pipeline in a transaction that is rolled
/// back.
async fn server(c: &mut Client, sql: &str) -> Server {
    c.batch_execute("BEGIN").await.unwrap();
    let answer = match c.execute(sql, &[]).await {
        Ok(_) => Server::Runs,
        Err(e) if e.kind() == ErrorKind::Usage && e.to_string().contains("as a stream") => {
            Server::Streams
        }
        Err(e) if e.code() == Some(SqlState::UNDEFINED_FILE) => Server::Runs,
        Err(e) if e.kind() == ErrorKind::Db => Server::Refuses,
        Err(e) => panic!("`{sql}` outside a pipeline: {e}"),
    };
    c.batch_execute("ROLLBACK").await.unwrap();
    answer
}

/// Whether a pipeline refuses `sql` as a stream COPY; one it takes runs, in a transaction
/// that is rolled back.
async fn pipeline_refuses(c: &mut Client, sql: &str) -> bool {
    c.batch_execute("BEGIN").await.unwrap();
    let mut p = c.pipeline();
    let refused = match p.execute(sql, &[]).await {
        Ok(_) => false,
        Err(e) if e.to_string().contains("cannot run in a pipeline") => true,
        Err(e) => panic!("`{sql}` in a pipeline: {e}"),
    };
    p.end().await;
    c.batch_execute("ROLLBACK").await.unwrap();
    refused
}

/// Promise: a pipeline refuses every COPY the server would stream, and runs every COPY it can
/// read with certainty that the server runs as an ordinary statement.
#[tokio::test]
async fn attack_pipeline_copy_check_against_the_server() {
    let long = std::env::var_os("SLIPSTREAM_ATTACK_LONG").is_some();
    let cases = if long { LONG_CASES } else { DEFAULT_CASES };
    let seed = std::env::var("SLIPSTREAM_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    let (cluster, mut c) = setup().await;
    c.batch_execute(
        "CREATE TABLE t (a int); CREATE TABLE stdin (a int); CREATE TABLE stdout (a int);
         CREATE TABLE \"from stdin\" (a int); CREATE TABLE t· (€ int); CREATE SCHEMA s;
         CREATE TABLE s.t (a int); CREATE TABLE été (a int);
         INSERT INTO t VALUES (1)",
    )
    .await
    .unwrap();
    let dir = cluster.data_dir().display().to_string();
    let mut p = Rng(seed);
    let (mut streams, mut runs, mut refused_by_server, mut hard_refusals) = (0, 0, 0, 0);
    for n in 0..cases {
        let case = generate(&mut p, &dir);
        let server = server(&mut c, &case.sql).await;
        let refused = pipeline_refuses(&mut c, &case.sql).await;
        let replay = format!("case {n} of seed {seed}: {:?}", case.sql);
        match server {
            Server::Streams => {
                streams += 1;
                assert!(
                    refused,
                    "the server streams it, but a pipeline took it: {replay}"
                );
            }
            Server::Runs => {
                runs += 1;
                if refused {
                    assert!(
                        !case.clean,
                        "the server runs it as an ordinary statement, but a pipeline refused it: {replay}"
                    );
                    hard_refusals += 1;
                }
            }
            Server::Refuses => refused_by_server += 1,
        }
    }
    eprintln!(
        "seed {seed}: {cases} statements; the server streamed {streams} (every one refused by \
         the pipeline), ran {runs} ({hard_refusals} of them, with an inserted fragment, refused \
         as unreadable) and refused {refused_by_server}"
    );
    // The generator must reach both answers, or the test proves nothing.
    assert!(
        streams > cases / 10 && runs > cases / 10,
        "too few of one answer"
    );
}

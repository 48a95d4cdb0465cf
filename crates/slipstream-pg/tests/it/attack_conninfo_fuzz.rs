//! A generated differential of the connection-string parser against libpq 15's own
//! (docs/client.md, "Connecting" and "Where slipstream differs from libpq"): slipstream-pg
//! reads libpq `key=value` strings and `postgres://` URLs as libpq reads them, or refuses them
//! with an error naming what is wrong, and the differences are the listed ones.
//!
//! Method: proptest generates strings of both forms (libpq 15's keywords, slipstream's own,
//! unknown ones; values with spaces, quotes, backslashes, `=`, `%` escapes, non-ASCII, empty;
//! URLs with userinfo, several hosts, IPv6 brackets, ports and query parameters), and each is
//! read by `Config::from_str` and by `attack_conninfo_fuzz/oracle.c`, a small C program built
//! against the installed libpq (`PQconninfoParse`, then two connection attempts that cannot
//! reach a server, which is where libpq checks the values: see the program's header). No NUL:
//! libpq's API takes C strings. Compared: the verdict (read or refused), and for strings both
//! read, every field a user can see (getters, and `Debug` for the rest), and the password
//! slipstream sends, as a fake server sees it (`Config` has no getter for it).
//!
//! A difference docs/client.md lists is recognised by name ([`Known`]) and counted, so a run
//! shows which of them it met; any other difference fails with the string, both readings and
//! a seed to replay it. Invariants besides: no panic, and no error shows a password.
//!
//! Bounded by default (`make test`, a second or two); the long form:
//!
//! ```text
//! SLIPSTREAM_ATTACK_LONG=1 SLIPSTREAM_FUZZ_SEED=$RANDOM \
//!     cargo test -p slipstream-pg --test it -- attack_conninfo_fuzz --nocapture
//! ```
//!
//! `SLIPSTREAM_FUZZ_ALL=1` lists every difference instead of stopping at the first.
//!
//! Tests named `break_*` are cases the fuzz found, kept as regular tests: each FAILED before
//! the fix that followed it.

mod compare;
mod oracle;
mod password;

use std::collections::BTreeMap;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config as RunnerConfig, RngSeed, TestCaseError, TestRunner};
use slipstream_pg::Config;

use compare::{Known, NEWER, c_space, one_case};
use oracle::Oracle;
use password::Catcher;

/// Cases in the bounded form, which runs in `make test`.
const DEFAULT_CASES: u32 = 512;
/// Cases with `SLIPSTREAM_ATTACK_LONG` set.
const LONG_CASES: u32 = 50_000;
/// A fixed default seed keeps `make test` reproducible; SLIPSTREAM_FUZZ_SEED explores.
const DEFAULT_SEED: u64 = 64;
/// The oracle is killed after this, so a libpq that hangs fails the test instead of hanging it
/// (the long form's cases take well under a millisecond each).
const ORACLE_LIMIT_SECS: &str = "900";

// ---- generated strings ------------------------------------------------------------------------

/// Characters values are made of: the ones that mean something to one of the two forms, and
/// some that mean nothing to either. No NUL: libpq's API takes C strings, so it cannot be
/// asked about one (see `break_nul_in_a_value_is_accepted`).
const CHARS: [char; 32] = [
    'a', 'b', 'Z', 'x', '0', '1', '5', '-', '.', '+', ' ', '\t', '\n', '\'', '\\', '=', '%', '&',
    '?', '/', '@', ':', ',', '[', ']', '#', 'é', '\u{a0}', '日', 'F', '2', '!',
];

fn any_text() -> BoxedStrategy<String> {
    vec(select(&CHARS[..]), 0..8)
        .prop_map(|cs| cs.into_iter().collect())
        .boxed()
}

fn one_of(values: &'static [&'static str]) -> BoxedStrategy<String> {
    select(values).prop_map(str::to_string).boxed()
}

const HOSTS: &[&str] = &[
    "localhost",
    "db.example.com",
    "127.0.0.1",
    "::1",
    "/tmp",
    "/var/run/postgresql",
    "",
    "@abstract",
    "h ost",
    "é",
    "[::1]",
    "a:b",
];
const PORTS: &[&str] = &[
    "5432",
    "",
    "0",
    "1",
    "65535",
    "65536",
    "05432",
    " 5433",
    "5433 ",
    "+5",
    "-1",
    "x",
    "54x",
    "99999999999",
];
const INTS: &[&str] = &[
    "0",
    "1",
    "2",
    "10",
    "-1",
    " 3",
    "3 ",
    "+4",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "99999999999",
    "x",
    "",
    "1.5",
    "0x10",
    "7s",
];
const SSLMODES: &[&str] = &[
    "disable",
    "allow",
    "prefer",
    "require",
    "verify-ca",
    "verify-full",
    "",
    "Require",
    "prefer ",
    "maybe",
];
const FLAGS: &[&str] = &["0", "1", "10", "", "yes", "01", " 1"];
const SESSION_ATTRS: &[&str] = &[
    "any",
    "read-write",
    "read-only",
    "primary",
    "standby",
    "prefer-standby",
    "",
    " any",
    "ANY",
    "read_write",
];
const MODES: &[&str] = &[
    "disable", "prefer", "require", "", " prefer", "allow", "random",
];
const PATHS: &[&str] = &["", "/tmp/x.pem", "system", "rel/path", "/nonexistent/é"];

/// A value for `key`: mostly one meant for it, sometimes anything.
fn value_for(key: &str) -> BoxedStrategy<String> {
    let meant: BoxedStrategy<String> = match key {
        "host" => vec(one_of(HOSTS), 1..4).prop_map(|v| v.join(",")).boxed(),
        "port" => vec(one_of(PORTS), 1..4).prop_map(|v| v.join(",")).boxed(),
        "connect_timeout"
        | "keepalives"
        | "keepalives_idle"
        | "keepalives_interval"
        | "keepalives_count"
        | "tcp_user_timeout"
        | "statement_cache_size"
        | "fetch_size" => one_of(INTS),
        "sslmode" => one_of(SSLMODES),
        "sslsni" | "requiressl" | "sslcompression" => one_of(FLAGS),
        "target_session_attrs" => one_of(SESSION_ATTRS),
        "gssencmode" | "channel_binding" | "load_balance_hosts" => one_of(MODES),
        "sslrootcert" | "sslcert" | "sslkey" | "passfile" => one_of(PATHS),
        _ => any_text(),
    };
    prop_oneof![3 => meant, 1 => any_text()].boxed()
}

/// Keywords: libpq 15's, `requiressl` (which libpq reads into `sslmode`), the [`NEWER`] ones,
/// and some it does not know.
fn keywords(libpq: &[String]) -> Vec<String> {
    let mut keys = libpq.to_vec();
    keys.extend(
        ["requiressl", "bogus", "Host", "ssl", "user ", "dbname"]
            .into_iter()
            .chain(NEWER)
            .map(str::to_string),
    );
    keys
}

fn pair(keys: Vec<String>) -> BoxedStrategy<(String, String)> {
    select(keys)
        .prop_flat_map(|k| value_for(&k).prop_map(move |v| (k.clone(), v)))
        .boxed()
}

/// How a `key=value` value is written.
fn kv_written(value: &str, style: u8) -> String {
    match style {
        // Quoted, `\` escaping `'` and `\`.
        0 => format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'")),
        // Bare, `\` escaping what would end or quote it.
        1 if value.is_empty() => "''".into(),
        1 => value
            .chars()
            .enumerate()
            .flat_map(|(i, c)| {
                let escape = c_space(c) || c == '\\' || (i == 0 && c == '\'');
                escape.then_some('\\').into_iter().chain([c])
            })
            .collect(),
        // As is, whatever it breaks.
        _ => value.into(),
    }
}

fn key_value_string(keys: Vec<String>) -> BoxedStrategy<String> {
    let spaces = one_of(&["", "", " ", "\t", "  "]);
    let written = (
        pair(keys),
        0u8..3,
        spaces.clone(),
        spaces.clone(),
        one_of(&[" ", " ", "\t", "\n", "  "]),
    )
        .prop_map(|((k, v), style, before, after, sep)| {
            format!("{k}{before}={after}{}{sep}", kv_written(&v, style))
        });
    (one_of(&["", "", "", " ", "\t"]), vec(written, 0..6))
        .prop_map(|(lead, pairs)| format!("{lead}{}", pairs.concat()))
        .boxed()
}

/// How a URL part is written: as is, every byte but letters and digits percent-encoded, only
/// the URL's own delimiters encoded, or encoded with a broken escape appended.
fn url_written(value: &str, style: u8) -> String {
    let encode = |keep: &dyn Fn(u8) -> bool| -> String {
        value
            .bytes()
            .map(|b| {
                if keep(b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect::<Vec<_>>()
            .concat()
    };
    match style {
        0 => value.into(),
        1 => encode(&|b| b.is_ascii_alphanumeric()),
        2 => {
            // Multi-byte characters are kept whole; only ASCII delimiters are encoded.
            value
                .chars()
                .map(|c| {
                    if "%&=/?@:,#[] ".contains(c) {
                        format!("%{:02X}", c as u32)
                    } else {
                        c.to_string()
                    }
                })
                .collect()
        }
        _ => format!(
            "{}{}",
            encode(&|b| b.is_ascii_alphanumeric()),
            ["%", "%zz", "%00", "%2"][value.len() % 4]
        ),
    }
}

fn url_part() -> BoxedStrategy<String> {
    (
        any_text(),
        prop_oneof![2 => Just(0u8), 3 => Just(1u8), 3 => Just(2u8), 1 => Just(3u8)],
    )
        .prop_map(|(v, style)| url_written(&v, style))
        .boxed()
}

fn url_string(keys: Vec<String>) -> BoxedStrategy<String> {
    let userinfo = proptest::option::weighted(
        0.5,
        (url_part(), proptest::option::of(url_part())).prop_map(|(u, p)| match p {
            Some(p) => format!("{u}:{p}@"),
            None => format!("{u}@"),
        }),
    );
    let host = (
        one_of(&[
            "localhost",
            "h1",
            "127.0.0.1",
            "[::1]",
            "[fe80::1%25eth0]",
            "",
            "%2Ftmp",
            "%2Fvar%2Frun%2Fpostgresql",
            "[]",
            "h%2Cx",
            "é",
            "%40abstract",
            "[::1]x",
        ]),
        proptest::option::of(one_of(PORTS)),
    )
        .prop_map(|(h, p)| match p {
            Some(p) => format!("{h}:{}", p.replace(' ', "%20")),
            None => h,
        });
    let query_pair = (pair(keys), 0u8..4).prop_map(|((k, v), style)| {
        format!(
            "{}={}",
            url_written(&k, style.min(2)),
            url_written(&v, style)
        )
    });
    (
        one_of(&[
            "postgres://",
            "postgresql://",
            "postgresql://",
            " postgres://",
        ]),
        userinfo,
        vec(host, 0..4),
        proptest::option::of(url_part()),
        proptest::option::weighted(0.6, vec(query_pair, 0..4)),
        one_of(&["", "", "", "&", "&&"]),
    )
        .prop_map(|(scheme, userinfo, hosts, path, query, tail)| {
            let mut s = format!(
                "{scheme}{}{}",
                userinfo.unwrap_or_default(),
                hosts.join(",")
            );
            if let Some(path) = path {
                s.push('/');
                s.push_str(&path);
            }
            if let Some(query) = query {
                s.push('?');
                s.push_str(&query.join("&"));
                s.push_str(&tail);
            }
            s
        })
        .boxed()
}

fn connection_string(keys: Vec<String>) -> BoxedStrategy<String> {
    prop_oneof![key_value_string(keys.clone()), url_string(keys)].boxed()
}

// ---- the runs ---------------------------------------------------------------------------------

fn cases() -> u32 {
    if std::env::var_os("SLIPSTREAM_ATTACK_LONG").is_some() {
        LONG_CASES
    } else {
        DEFAULT_CASES
    }
}

fn seed() -> u64 {
    std::env::var("SLIPSTREAM_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED)
}

/// The differential: generated strings of both forms, read by both parsers.
#[test]
fn generated_strings_are_read_as_libpq_reads_them() {
    let keys = keywords(&Oracle::keywords());
    assert!(
        keys.iter().any(|k| k == "hostaddr"),
        "libpq's keywords: {keys:?}"
    );
    let oracle = std::cell::RefCell::new(Oracle::start());
    let catcher = Catcher::start();
    let met = std::cell::RefCell::new(BTreeMap::<Known, u32>::new());
    let (cases, seed) = (cases(), seed());
    let mut runner = TestRunner::new(RunnerConfig {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    // SLIPSTREAM_FUZZ_ALL=1 lists every difference instead of stopping (and shrinking) at the
    // first: for a survey after a change.
    let all = std::env::var_os("SLIPSTREAM_FUZZ_ALL").is_some();
    let result = runner.run(&connection_string(keys), |s| {
        let known = match one_case(&mut oracle.borrow_mut(), &catcher, &s) {
            Err(d) if all => {
                eprintln!("DIFF {d}");
                None
            }
            r => r.map_err(TestCaseError::fail)?,
        };
        if let Some(k) = known {
            *met.borrow_mut().entry(k).or_default() += 1;
        }
        Ok(())
    });
    eprintln!(
        "{cases} cases (seed {seed}); passwords compared on the wire: {}; documented \
         differences met: {:?}",
        catcher.compared.get(),
        met.borrow()
    );
    if let Err(e) = result {
        panic!("seed {seed}: {e}");
    }
}

// ---- cases the fuzz found ---------------------------------------------------------------------

/// Each string is read alike by both, or differs as docs/client.md says.
fn assert_read_alike(strings: &[&str]) {
    let mut oracle = Oracle::start();
    let catcher = Catcher::start();
    let failures: Vec<String> = strings
        .iter()
        .filter_map(|s| one_case(&mut oracle, &catcher, s).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// libpq reads integer parameters into a C `int` and refuses anything larger; slipstream read
/// `connect_timeout` into an i64 and the keepalive settings into u64/u32, so it connected with
/// values libpq refuses. A negative keepalive setting is 0 to libpq (which the kernel refuses
/// only if keepalives are on); slipstream refused it, also with `keepalives=0`.
#[test]
fn break_integer_parameters_past_a_c_int_are_accepted() {
    assert_read_alike(&[
        "connect_timeout=2147483648",
        "connect_timeout=-2147483649",
        "keepalives=4294967296",
        "keepalives_idle=99999999999",
        "keepalives_interval=2147483648",
        "keepalives_count=2147483648",
        "postgres://h/db?connect_timeout=2147483648",
        "keepalives=0 keepalives_idle=-1 keepalives_count=-5",
    ]);
}

/// `str::trim` takes Unicode spaces too: the whole string was trimmed before reading, so a
/// value's no-break space or escaped trailing space was cut off (`sslmode=prefer\ ` read as
/// `prefer`, which libpq refuses), a no-break space before the first key vanished, and
/// `target_session_attrs`, `channel_binding` and `gssencmode` were compared after trimming,
/// where libpq compares them exactly. A port of spaces alone read as the default port; libpq
/// refuses it.
#[test]
fn break_whitespace_is_cut_where_libpq_keeps_it() {
    assert_read_alike(&[
        "dbname=\t\u{a0}\n",
        "user=a\\ ",
        "sslmode=prefer\\ ",
        "\u{a0}user=x",
        "port=5432\u{a0}",
        "target_session_attrs=' any'",
        "channel_binding=' prefer'",
        "gssencmode='prefer '",
        "postgres://h/db?target_session_attrs=%20any",
        "port=' '",
        "postgres://h:%20/db",
    ]);
}

/// libpq ends a URL's userinfo at an `@` before the first `/`, and a `?` does not stop it: a
/// password may hold an unencoded `?`, and `postgres://h?application_name=a@b` is the user
/// `h?application_name=a` at host `b`. slipstream split the query off first: it refused the
/// first kind ("percent-encode `?`", which docs/client.md wrongly said libpq needs too) and
/// read the second as host `h`.
#[test]
fn break_question_mark_before_the_userinfo_at_is_split_off() {
    assert_read_alike(&[
        "postgres://u:pa?ss@h/db",
        "postgres://u:p?a=b&c@h:5433/db?application_name=x",
        "postgres://h?application_name=a@b",
        "postgresql://?x@h",
    ]);
}

/// An empty password in a URL's userinfo (`u:@h`) is not set in libpq, so `PGPASSWORD` and
/// the password file still apply; slipstream set it empty, which kept `PGPASSWORD` out.
#[test]
fn break_empty_url_password_is_set() {
    assert_read_alike(&["postgres://u:@h/db", "postgres://:@h/db"]);
    let config: Config = "postgres://u:@h/db".parse().unwrap();
    assert!(!config.has_password());
}

/// libpq keeps the last value of a parameter given twice and checks only that one, so an
/// invalid value overridden later is never an error (and a URL's port can be overridden by
/// `?port=`); slipstream refused the string at the first invalid value.
#[test]
fn break_overridden_invalid_value_is_refused() {
    assert_read_alike(&[
        "sslmode=bogus sslmode=require",
        "sslmode=bogus requiressl=1",
        "connect_timeout=x connect_timeout=5",
        "port=0 port=5433",
        "host=@abs host=h",
        "postgres://h:0/db?port=5432",
        "postgres://h/db?target_session_attrs=x&target_session_attrs=any",
    ]);
}

/// libpq 14+ reads a host `@name` as a Linux abstract Unix-domain socket; slipstream took it
/// for a host name and looked it up in DNS, then refused it by name. Now it is read as libpq
/// reads it (`abstract_socket.rs` connects over one).
#[test]
fn break_abstract_socket_host_is_read_as_a_host_name() {
    assert_read_alike(&[
        "host=@abstract",
        "host=/tmp,@x",
        "postgres://%40abstract/db",
        "host=@",
    ]);
    let c = "host=/tmp,@abstract".parse::<Config>().unwrap();
    assert_eq!(
        c.get_hosts(),
        &[
            slipstream_pg::Host::Unix("/tmp".into()),
            slipstream_pg::Host::Unix("@abstract".into())
        ]
    );
}

/// libpq cannot be asked about a NUL (its API takes C strings), so the generator leaves it out;
/// this holds the rest of the promise for it: a NUL in a `key=value` value was accepted when
/// read, and the connection then failed in the startup packet's encoder ("string contains
/// embedded null"), naming no parameter. Now it is refused when read, naming the parameter and
/// not showing the value (it may be the password).
#[test]
fn break_nul_in_a_value_is_accepted() {
    for s in [
        "user=a\0b",
        "password='se\0cret'",
        "dbname=x application_name=\0",
        "postgres://h/db?options=-c%20x\0",
        "postgres://a\0b@h/db",
        "postgres://u:se\0cret@h/db",
        "postgres://h/d\0b",
    ] {
        let e = s.parse::<Config>().expect_err(s).to_string();
        assert!(e.contains("NUL") && !e.contains("se\0cret"), "{s:?}: {e}");
    }
}

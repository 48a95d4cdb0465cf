//! Connection strings read by slipstream-pg and by libpq 15's own parser
//! (docs/client.md, "Connecting" and "Where slipstream differs from libpq"): slipstream-pg
//! reads libpq `key=value` strings and `postgres://` URLs as libpq reads them, or refuses them
//! with an error naming what is wrong, and the differences are the listed ones.
//!
//! Each string is read by `Config::from_str` and by `attack_conninfo_fuzz/oracle.c`, a small C
//! program built against the installed libpq (`PQconninfoParse`, then two connection attempts
//! that cannot reach a server, which is where libpq checks the values: see the program's
//! header). Compared: the verdict (read or refused), and for strings both read, every field a
//! user can see (getters, and `Debug` for the rest; the password's presence, never its value,
//! which has no getter). A difference docs/client.md lists is recognised by name ([`Known`]).
//! Invariants besides: no panic, and no error shows a password.
//!
//! Tests named `break_*` FAILED before the fix that followed them.

mod compare;
mod oracle;

use slipstream_pg::Config;

use compare::one_case;
use oracle::Oracle;

/// The oracle is killed after this, so a libpq that hangs fails the test instead of hanging it.
const ORACLE_LIMIT_SECS: &str = "900";

// ---- cases the fuzz found ---------------------------------------------------------------------

/// Each string is read alike by both, or differs as docs/client.md says.
fn assert_read_alike(strings: &[&str]) {
    let mut oracle = Oracle::start();
    let failures: Vec<String> = strings
        .iter()
        .filter_map(|s| one_case(&mut oracle, s).err())
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
/// for a host name and looked it up in DNS.
#[test]
fn break_abstract_socket_host_is_read_as_a_host_name() {
    assert_read_alike(&[
        "host=@abstract",
        "host=/tmp,@x",
        "postgres://%40abstract/db",
    ]);
    let e = "host=@abstract".parse::<Config>().unwrap_err().to_string();
    assert!(e.contains("`@abstract`") && e.contains("abstract"), "{e}");
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

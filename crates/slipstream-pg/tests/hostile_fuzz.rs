//! Fuzzing the client's decoding of everything a server sends, through the public API: a fake
//! server on 127.0.0.1 answers with generated frames (well-formed messages of every kind,
//! known tags with arbitrary bodies, headers whose length lies, raw garbage), in the startup
//! and authentication phase or after a clean startup, while the client runs one of its calls
//! (connect, simple query, query, execute, prepare, row stream, COPY in and out, pipeline).
//!
//! Every case must end (`Ok` or an error) within `harness::CASE_LIMIT`, without a panic, with an
//! error that never blames a bug in slipstream-pg nor echoes the password, and without the
//! heap growing past [`allowed`]: what the server sent, times a constant, plus the read
//! buffer's trusted length. A length prefix alone buys nothing.
//!
//! A test binary of its own: the counting allocator must see no other test's allocations.
//!
//! Bounded by default (`make test`); the long form:
//!
//! ```text
//! SLIPSTREAM_FUZZ_CASES=100000 SLIPSTREAM_FUZZ_SEED=$RANDOM \
//!     cargo test --release -p slipstream-pg --test hostile_fuzz -- --nocapture
//! ```

#[path = "hostile/harness.rs"]
mod harness;

use harness::{CALLS, Call};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, RngSeed, TestCaseError, TestRunner};
use slipstream_testkit::CountingAllocator;

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

/// Cases in the bounded form, which runs in `make test`.
const DEFAULT_CASES: u32 = 2000;
/// A fixed default seed keeps `make test` reproducible; SLIPSTREAM_FUZZ_SEED explores.
const DEFAULT_SEED: u64 = 17;

/// Mirrors the client's `TRUSTED_LENGTH`: the most a message's header alone may make the read
/// buffer allocate (docs/client.md, "Limits").
const TRUSTED_LENGTH: usize = 16 << 20;
/// Heap a case may use besides what the server's bytes justify: the runtime's and the
/// connection's buffers, and a DataRow's per-value ranges (its column count is a 16-bit claim).
const SLACK: usize = 4 << 20;
/// Decoded messages take more room than their bytes (a column description of 19 bytes becomes
/// a `Column` with a name and a type), and the read buffer doubles as data arrives.
const PER_BYTE: usize = 16;

fn allowed(sent: usize) -> usize {
    TRUSTED_LENGTH + SLACK + PER_BYTE * sent
}

// ---- backend messages ---------------------------------------------------------------------

fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn cstr(s: &[u8]) -> Vec<u8> {
    let mut v = s.to_vec();
    v.push(0);
    v
}

const TAGS: &[u8] = b"RK23CdcGHWDIEvnNAtS1sZT";

fn tag() -> impl Strategy<Value = u8> {
    prop_oneof![
        4 => proptest::sample::select(TAGS),
        1 => any::<u8>(),
    ]
}

fn small_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..max)
}

fn name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => proptest::sample::select(vec![&b"a"[..], b"id", b"?column?", b"TimeZone", b"server_version"])
            .prop_map(<[u8]>::to_vec),
        1 => vec(1u8..=255, 0..12),
    ]
}

/// A message that follows the protocol's layout, of any backend kind.
fn wellformed() -> impl Strategy<Value = Vec<u8>> {
    let auth = (
        proptest::sample::select(vec![0u32, 2, 3, 5, 7, 8, 9, 10, 11, 12, 99]),
        small_bytes(24),
    )
        .prop_map(|(code, rest)| msg(b'R', &[&code.to_be_bytes()[..], &rest].concat()));
    let sasl = Just(msg(
        b'R',
        &[&10u32.to_be_bytes()[..], b"SCRAM-SHA-256\0\0"].concat(),
    ));
    let ready = proptest::sample::select(b"ITE?".to_vec()).prop_map(|s| msg(b'Z', &[s]));
    let row_description = vec((name(), any::<u32>(), any::<i16>()), 0..4).prop_map(|cols| {
        let mut body = (cols.len() as u16).to_be_bytes().to_vec();
        for (n, oid, format) in cols {
            body.extend(cstr(&n));
            body.extend_from_slice(&[0; 6]);
            body.extend_from_slice(&oid.to_be_bytes());
            body.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
            body.extend_from_slice(&format.to_be_bytes());
        }
        msg(b'T', &body)
    });
    let data_row = vec(proptest::option::of(small_bytes(12)), 0..4).prop_map(|values| {
        let mut body = (values.len() as u16).to_be_bytes().to_vec();
        for v in values {
            match v {
                None => body.extend_from_slice(&(-1i32).to_be_bytes()),
                Some(v) => {
                    body.extend_from_slice(&(v.len() as i32).to_be_bytes());
                    body.extend(v);
                }
            }
        }
        msg(b'D', &body)
    });
    let command_complete = prop_oneof![
        proptest::sample::select(vec![
            &b"SELECT 1"[..],
            b"INSERT 0 1",
            b"COPY 3",
            b"ROLLBACK",
            b"DISCARD ALL",
            b"UPDATE 99999999999999999999",
        ])
        .prop_map(<[u8]>::to_vec),
        small_bytes(16),
    ]
    .prop_map(|t| msg(b'C', &cstr(&t)));
    let fields = |tag: u8| {
        (
            proptest::sample::select(vec![
                &b"ERROR"[..],
                b"FATAL",
                b"PANIC",
                b"NOTICE",
                b"WARNING",
            ]),
            proptest::sample::select(vec![&b"42601"[..], b"57P01", b"25P02", b"0A000", b"XX"]),
            vec((any::<u8>(), small_bytes(10)), 0..3),
            any::<bool>(),
        )
            .prop_map(move |(severity, code, extra, complete)| {
                let mut body = Vec::new();
                body.push(b'V');
                body.extend(cstr(severity));
                body.push(b'C');
                body.extend(cstr(code));
                if complete {
                    body.push(b'M');
                    body.extend(cstr(b"fuzzed message"));
                }
                for (t, v) in extra {
                    if t != 0 {
                        body.push(t);
                        body.extend(cstr(&v));
                    }
                }
                body.push(0);
                msg(tag, &body)
            })
    };
    let parameter_status =
        (name(), name()).prop_map(|(n, v)| msg(b'S', &[cstr(&n), cstr(&v)].concat()));
    let copy_response = (
        proptest::sample::select(b"GHW".to_vec()),
        any::<u8>(),
        vec(any::<u16>(), 0..3),
    )
        .prop_map(|(tag, format, columns)| {
            let mut body = vec![format];
            body.extend_from_slice(&(columns.len() as u16).to_be_bytes());
            for c in columns {
                body.extend_from_slice(&c.to_be_bytes());
            }
            msg(tag, &body)
        });
    let parameter_description = vec(any::<u32>(), 0..3).prop_map(|oids| {
        let mut body = (oids.len() as u16).to_be_bytes().to_vec();
        for o in oids {
            body.extend_from_slice(&o.to_be_bytes());
        }
        msg(b't', &body)
    });
    let notification = (any::<i32>(), name(), name()).prop_map(|(pid, channel, payload)| {
        msg(
            b'A',
            &[&pid.to_be_bytes()[..], &cstr(&channel), &cstr(&payload)].concat(),
        )
    });
    let empty = proptest::sample::select(b"123ncIs".to_vec()).prop_map(|t| msg(t, &[]));
    prop_oneof![
        auth,
        sasl,
        Just(msg(b'K', &[0, 0, 0, 42, 0, 0, 0, 7])),
        ready,
        row_description,
        data_row,
        command_complete,
        fields(b'E'),
        fields(b'N'),
        parameter_status,
        copy_response,
        small_bytes(16).prop_map(|d| msg(b'd', &d)),
        parameter_description,
        notification,
        empty,
    ]
}

/// One frame: well-formed, a known tag with an arbitrary body, a header whose length lies
/// (often by megabytes or gigabytes), or bytes that are no frame at all.
fn frame() -> impl Strategy<Value = Vec<u8>> {
    let claim = prop_oneof![any::<u32>(), (1u32 << 20)..(1u32 << 30), 0u32..8];
    prop_oneof![
        6 => wellformed(),
        2 => (tag(), small_bytes(32)).prop_map(|(t, b)| msg(t, &b)),
        2 => (tag(), claim, small_bytes(16)).prop_map(|(t, len, b)| {
            [&[t][..], &len.to_be_bytes(), &b].concat()
        }),
        1 => vec(any::<u8>(), 1..24),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    /// A clean startup (AuthenticationOk, BackendKeyData, ReadyForQuery) comes first, so the
    /// frames reach the query phase; otherwise they are the startup and authentication.
    after_startup: bool,
    frames: Vec<Vec<u8>>,
    /// Cut the whole script to this many bytes (a truncated stream).
    cut: Option<usize>,
    call: Call,
}

impl Case {
    fn script(&self) -> Vec<u8> {
        let mut s = Vec::new();
        if self.after_startup {
            s.extend(msg(b'R', &[0, 0, 0, 0]));
            s.extend(msg(b'K', &[0, 0, 0, 42, 0, 0, 0, 7]));
            s.extend(msg(b'Z', b"I"));
        }
        for f in &self.frames {
            s.extend_from_slice(f);
        }
        if let Some(cut) = self.cut {
            s.truncate(cut.max(if self.after_startup { 15 } else { 0 }));
        }
        s
    }
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![3 => Just(true), 1 => Just(false)],
        prop_oneof![
            vec(frame(), 0..12),
            // A plausible reply with one bad frame somewhere in it: reaches deeper states.
            (
                vec(wellformed(), 0..12),
                any::<prop::sample::Index>(),
                frame()
            )
                .prop_map(|(mut frames, at, bad)| {
                    let at = at.index(frames.len() + 1);
                    frames.insert(at, bad);
                    frames
                }),
        ],
        proptest::option::weighted(0.2, 0usize..400),
        proptest::sample::select(CALLS),
    )
        .prop_map(|(after_startup, frames, cut, call)| Case {
            after_startup,
            frames,
            cut,
            call,
        })
}

/// Runs one case; `Err` says which property broke.
async fn run_case(case: &Case) -> Result<(), String> {
    let script = case.script();
    let sent = script.len();
    let growth = CountingAllocator::measure();
    let outcome = harness::exercise(script, case.call).await?;
    let peak = growth.peak().expect("the counting allocator is installed");
    if peak > allowed(sent) {
        return Err(format!(
            "the heap grew by {peak} bytes for {sent} bytes from the server (allowed {})",
            allowed(sent)
        ));
    }
    let seen = match &outcome {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("{:?}", e.kind()),
    };
    *OUTCOMES
        .lock()
        .unwrap()
        .entry(format!("{:?} -> {seen}", case.call))
        .or_default() += 1;
    Ok(())
}

/// How the cases ended, by call: shown with `--nocapture`, to see that the generator reaches
/// past the first message.
static OUTCOMES: std::sync::Mutex<std::collections::BTreeMap<String, usize>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn every_server_reply_ends_in_a_result_or_a_named_error() {
    let cases = env("SLIPSTREAM_FUZZ_CASES").unwrap_or(DEFAULT_CASES);
    let seed = env("SLIPSTREAM_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    eprintln!(
        "hostile_fuzz: {cases} cases, seed {seed} (SLIPSTREAM_FUZZ_CASES, SLIPSTREAM_FUZZ_SEED)"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(RunnerConfig {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    let result = runner.run(&case(), |case| {
        rt.block_on(run_case(&case)).map_err(TestCaseError::fail)
    });
    for (outcome, n) in OUTCOMES.lock().unwrap().iter() {
        eprintln!("  {n:6}  {outcome}");
    }
    if let Err(e) = result {
        panic!("{e}");
    }
}

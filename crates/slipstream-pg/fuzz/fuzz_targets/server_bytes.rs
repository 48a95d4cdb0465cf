//! libFuzzer over everything the client decodes: the input's first byte picks the client call
//! (its low 7 bits, an index into `harness::CALLS`) and whether a clean startup comes first
//! (its high bit), the rest is what the fake server sends. `seeds/server_bytes` holds a
//! well-formed reply for each call. Shares the
//! fake server and the properties with the proptest target (`tests/hostile_fuzz.rs`); run it
//! with `-malloc_limit_mb=64` so that a single allocation past the trusted length is a crash.

#![no_main]

#[path = "../../tests/hostile/harness.rs"]
mod harness;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let call = harness::CALLS[(selector & 0x7f) as usize % harness::CALLS.len()];
    let mut script = Vec::new();
    if selector & 0x80 != 0 {
        // AuthenticationOk, BackendKeyData, ReadyForQuery: the bytes reach the query phase.
        script.extend_from_slice(&[b'R', 0, 0, 0, 8, 0, 0, 0, 0]);
        script.extend_from_slice(&[b'K', 0, 0, 0, 12, 0, 0, 0, 42, 0, 0, 0, 7]);
        script.extend_from_slice(&[b'Z', 0, 0, 0, 5, b'I']);
    }
    script.extend_from_slice(rest);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Err(broken) = rt.block_on(harness::exercise(script, call)) {
        panic!("{broken}");
    }
});

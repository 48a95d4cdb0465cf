//! The guides tell the truth: examples shown in docs/custom-transactions.md, taken from the
//! guide's own text (not a copy that could drift), run against a real cluster as a reader who
//! copies them would run them.

mod common;

use std::future::pending;
use std::time::Duration;

use common::rt;
use slipstream_bench::{self as bench, RunConfig};
use slipstream_testkit::Cluster;

/// The guide's text.
fn guide() -> String {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/custom-transactions.md");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("could not read {}: {e}", path.display()))
}

/// The first ```toml block after `heading` in the guide.
fn toml_block_after(text: &str, heading: &str) -> String {
    let from = text
        .find(heading)
        .unwrap_or_else(|| panic!("the guide has no heading {heading:?}"));
    let rest = &text[from..];
    let open = rest
        .find("```toml\n")
        .unwrap_or_else(|| panic!("no ```toml block after {heading:?}"));
    let body = &rest[open + "```toml\n".len()..];
    let close = body
        .find("\n```")
        .unwrap_or_else(|| panic!("the ```toml block after {heading:?} is not closed"));
    body[..=close].to_string()
}

/// Promise (docs/custom-transactions.md, "Workload files"): the annotated example file is a
/// workload file whose `setup` is "run by `slipstream bench FILE --setup`", after which the
/// workload runs. Steps: take the guide's ```toml block, parse it as a workload file, run its
/// setup SQL on a fresh cluster as `--setup` does (one `batch_execute`), then run it for a
/// second at two users and expect every transaction type to succeed. Before the fix the setup
/// failed: the annotation `# run by ...` written after `setup = """` is inside the TOML string
/// (a multi-line string starts right after its delimiter), so the server got
/// `# run by ...` as SQL: `error 42601: syntax error at or near "#"`.
#[test]
fn the_guides_example_workload_file_sets_up_and_runs() {
    let text = toml_block_after(&guide(), "## Workload files");
    let file = bench::workload_file::parse(&text, "docs/custom-transactions.md")
        .unwrap_or_else(|e| panic!("the guide's workload file does not parse: {e}"));
    let setup = file
        .setup
        .as_deref()
        .expect("the guide's example has setup SQL");
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let rt = rt();
    rt.block_on(async {
        let mut c = slipstream_pg::connect(&url).await.unwrap();
        c.batch_execute(setup).await.unwrap_or_else(|e| {
            panic!("the guide's setup SQL fails: {e}\n--- setup SQL ---\n{setup}")
        });
    });
    let mut config = RunConfig::new(Some(url));
    config.users = 2;
    config.duration = Duration::from_secs(1);
    config.warmup = Duration::ZERO;
    config.seed = 7;
    if let Some(think) = file.think {
        config.think = think;
    }
    if let Some(intra) = file.intra_think {
        config.intra_think = intra;
    }
    let run = rt
        .block_on(bench::run(&file.workload, &config, pending::<()>()))
        .unwrap();
    for t in &run.transactions {
        assert!(
            t.ok > 0 && t.failed == 0,
            "{}: {} ok, {} failed {:?}",
            t.name,
            t.ok,
            t.failed,
            t.failures
        );
    }
}

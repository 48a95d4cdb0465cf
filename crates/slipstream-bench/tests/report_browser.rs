//! The HTML report in a real browser: headless Chromium renders it to a PNG.
//!
//! Skipped, with the reason printed, when no `chromium` is on the PATH, unless CI runs it
//! (`CI=true`, as `.ci/run` is run; it installs Chromium) or `SLIPSTREAM_REQUIRE_CHROMIUM` is
//! set: CI never skips this silently. Look at the PNG by hand after a change to the report: the test
//! prints where it is and keeps it when `SLIPSTREAM_KEEP_SCREENSHOT` is set.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use slipstream_bench::{self as bench, RunConfig, Session, Transaction, TxError, Workload, report};

struct Spin;
impl Transaction for Spin {
    async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
        let mut x = 0u64;
        for i in 0..20_000u64 {
            x = x.wrapping_add(i * 31);
        }
        std::hint::black_box(x);
        Ok(())
    }
}

struct Refused;
impl Transaction for Refused {
    async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
        Err(TxError::new("40001", "could not serialize access"))
    }
}

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

#[test]
fn the_report_renders_in_headless_chromium() {
    let Some(browser) = chromium() else {
        let why = "no chromium on the PATH (Debian: apt-get install chromium)";
        let required = std::env::var_os("SLIPSTREAM_REQUIRE_CHROMIUM").is_some()
            || std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(
            !required,
            "CI=true or SLIPSTREAM_REQUIRE_CHROMIUM is set, but {why}"
        );
        eprintln!("skipped: {why}");
        return;
    };
    let w = Workload::new("spin")
        .transaction("spin", 8, || Spin)
        .transaction("refused", 1, || Refused)
        .without_database();
    let mut c = RunConfig::new(None);
    c.users = 2;
    c.threads = 1;
    c.duration = Duration::from_secs(4);
    c.rate = Some(3000.0);
    // A ramp-up the throughput chart must show: the rate rises from 0 over the first 2 s.
    c.warmup = Duration::ZERO;
    c.ramp_up = Duration::from_secs(2);
    let run = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench::run(&w, &c, std::future::pending::<()>()))
        .unwrap();
    let tps = report::tps_series(&[report::Labeled {
        label: "spin".into(),
        run: run.clone(),
    }]);
    let points = &tps[0].points;
    let (first, last) = (points[0].1, points[points.len() - 1].1);
    assert!(
        first < 0.7 * last,
        "the ramp-up is not in the throughput series: {points:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    report::write_html(
        &[report::Labeled {
            label: "spin".into(),
            run,
        }],
        &html,
    )
    .unwrap();
    let png = dir.path().join("report.png");
    let status = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1400,3000",
        ])
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .env("HOME", dir.path())
        .output()
        .unwrap();
    assert!(
        png.exists(),
        "chromium wrote no screenshot: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
    // A blank page compresses to a few kilobytes; charts and tables do not.
    assert!(
        bytes.len() > 30_000,
        "a nearly empty screenshot ({} bytes)",
        bytes.len()
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("Throughput over time"), "no throughput chart");
    assert!(
        page.contains("ramp-up"),
        "the stage table does not name the ramp-up"
    );
    if let Some(keep) = std::env::var_os("SLIPSTREAM_KEEP_SCREENSHOT") {
        let to = Path::new(&keep);
        std::fs::copy(&png, to).unwrap();
        std::fs::copy(&html, to.with_extension("html")).unwrap();
        eprintln!("screenshot kept at {}", to.display());
    }
}

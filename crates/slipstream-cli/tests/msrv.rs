//! The workspace's `rust-version` is a promise to users on older toolchains: `cargo build` with
//! that Rust succeeds. Only the newest toolchain runs here, so this checks the part a new
//! dependency breaks silently: no locked package asks for a newer Rust than we declare.
//! (Language features and `std` APIs newer than the declared version are caught by clippy's
//! `incompatible_msrv` lint and the compiler, which read the same `rust-version`.)

use std::process::Command;

fn version(v: &str) -> Result<(u64, u64, u64), String> {
    let mut parts = v.split('.').map(|p| p.parse::<u64>());
    let mut next = || -> Result<u64, String> {
        match parts.next() {
            None => Ok(0),
            Some(Ok(n)) => Ok(n),
            Some(Err(e)) => Err(format!("rust-version {v:?}: {e}")),
        }
    };
    Ok((next()?, next()?, next()?))
}

#[test]
fn no_locked_dependency_needs_a_newer_rust_than_the_workspace_declares() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let ours = packages
        .iter()
        .find(|p| p["name"] == env!("CARGO_PKG_NAME"))
        .expect("this package in the metadata");
    let declared = ours["rust_version"]
        .as_str()
        .expect("slipstream-cli declares a rust-version");
    let declared_v = version(declared).unwrap();
    let newer: Vec<String> = packages
        .iter()
        .filter_map(|p| {
            let rv = p["rust_version"].as_str()?;
            let (name, v) = (p["name"].as_str()?, p["version"].as_str()?);
            (version(rv).unwrap() > declared_v).then(|| format!("{name} {v} needs {rv}"))
        })
        .collect();
    assert!(
        newer.is_empty(),
        "rust-version is {declared}, but Cargo.lock holds packages that need a newer Rust: {newer:?}. \
         Pin an older compatible version (`cargo update -p NAME --precise VERSION`) or raise \
         `rust-version` in the workspace Cargo.toml"
    );
}

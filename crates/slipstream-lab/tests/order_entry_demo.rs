//! The demo's Order Entry run against a real PostgreSQL (quick form).

/// Promise (docs/lab.md): the `order-entry` experiment is a run at the scale it names, so two
/// runs are comparable. It kept a schema left by earlier runs at the same scale, which those
/// runs' transactions had changed (orders, customers and logons added, stock moved), so every
/// `make demo` started from other data. A change no transaction makes (a warehouse renamed)
/// marks the data between two runs: the second must start from a fresh load.
///
/// Before the fix: "the second run kept the data the first left", with all 10 warehouses
/// still marked.
#[test]
fn each_order_entry_run_starts_from_a_fresh_load() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let ctx = slipstream_lab::Context {
        url: cluster.url(),
        quick: true,
    };
    let first = slipstream_lab::run("order-entry", &ctx).unwrap();
    assert!(
        first.notes.iter().any(|n| n.contains("loaded fresh")),
        "{:?}",
        first.notes
    );
    cluster
        .psql("UPDATE soe.warehouses SET warehouse_name = 'marked'")
        .unwrap();
    let second = slipstream_lab::run("order-entry", &ctx).unwrap();
    assert!(!second.table.rows.is_empty(), "{:?}", second.notes);
    let marked = cluster
        .psql("SELECT count(*) FROM soe.warehouses WHERE warehouse_name = 'marked'")
        .unwrap();
    assert_eq!(
        marked.trim(),
        "0",
        "the second run kept the data the first left: {:?}",
        second.notes
    );
}

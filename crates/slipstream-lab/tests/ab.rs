//! The A/B experiment against a real server, alone in its binary so no other test competes for
//! the CPU while it measures.

#[test]
fn the_ab_experiment_finds_synchronous_commit_and_not_its_twin() {
    let ctx = slipstream_lab::Context {
        url: String::new(),
        quick: true,
    };
    let r = slipstream_lab::run("ab", &ctx).unwrap();
    let verdict = |row: usize| r.table.rows[row][5].clone();
    assert!(verdict(0).starts_with("credibly"), "{:?}", r.table.rows);
    assert!(!verdict(1).starts_with("credibly"), "{:?}", r.table.rows);
    assert!(r.ratios["sync_off_speedup"] > 1.5, "{:?}", r.ratios);
}

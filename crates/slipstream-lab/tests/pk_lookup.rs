//! Article 003's experiment in its quick form, against the memopt extension that `make test`
//! installs before the Rust tests run.

#[test]
fn memopt_lookups_touch_no_buffer_and_return_every_row() {
    let ctx = slipstream_lab::Context {
        url: String::new(),
        quick: true,
    };
    let r = slipstream_lab::run("pk-lookup", &ctx).unwrap();
    assert!(
        r.table.rows.len() == 5,
        "pk-lookup did not run (is memopt installed? `make -C extension/memopt install`): {:?}",
        r.notes
    );
    let plan = |row: usize| r.table.rows[row][1].as_str();
    assert_eq!(plan(0), "Index Scan", "{:?}", r.table.rows);
    assert_eq!(plan(1), "Index Only Scan", "{:?}", r.table.rows);
    assert_eq!(plan(3), "MemoptLookup", "{:?}", r.table.rows);
    assert_eq!(plan(4), "memopt.get", "{:?}", r.table.rows);
    // Every row was read by key on every path (the experiment checks the count) and, after
    // populate, every t4 lookup was a hit that touched no shared buffer.
    assert!(r.ratios["t1_buffers_per_lookup"] >= 2.0, "{:?}", r.ratios);
    assert_eq!(r.ratios["t4_buffers_per_lookup"], 0.0, "{:?}", r.ratios);
    // The fast lookup (issue 22): its hits touch no buffer either (pg_statio's counters).
    assert_eq!(r.ratios["fast_buffers_per_lookup"], 0.0, "{:?}", r.ratios);
    assert_eq!(r.ratios["t4_hit_ratio"], 1.0, "{:?}", r.ratios);
    assert!(r.ratios["t4_populate_seconds"] > 0.0, "{:?}", r.ratios);
    for path in ["prepared", "unprepared", "pipelined", "batch", "plpgsql"] {
        assert!(
            r.ratios.contains_key(&format!("t4_{path}_over_t1")),
            "{path}"
        );
    }
    for path in ["prepared", "pipelined", "batch", "plpgsql"] {
        assert!(
            r.ratios.contains_key(&format!("fast_{path}_over_t3")),
            "{path}"
        );
    }
}

//! Attack tests (session 36) on session state crossing borrowers: what a connection's labels
//! say against what its session really is, after a session reset, an interrupted configure and
//! a reclaim.

mod common;

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use slipstream_pool::{Labeling, Labels, Pool};

fn schema(name: &str) -> Labels {
    Labels::from([("schema".to_string(), name.to_string())])
}

/// Numbers whose labeling sets the number: `100 + tenant` once configured.
struct Tenant;

impl Labeling<u64> for Tenant {
    fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
        u32::from(wanted != current)
    }
    async fn configure(&self, wanted: &Labels, conn: &mut u64) -> bool {
        *conn = 100 + wanted["schema"].parse::<u64>().unwrap();
        true
    }
}

// A guard whose borrow was reclaimed (time-to-live) no longer owns its slot, which holds the
// replacement connection, lent to someone else. Its `set_labels` wrote the replacement's
// labels, so a borrow for those labels got the replacement at cost 0, never configured; and
// its `labels()` read the replacement's.
#[tokio::test]
async fn a_reclaimed_guard_does_not_label_the_replacement() {
    let pool = Pool::builder(common::Numbers(AtomicU64::new(0)))
        .max_size(1)
        .time_to_live(Duration::from_millis(100))
        .build();
    let kept = pool.get().await.unwrap();
    let other = tokio::time::timeout(Duration::from_secs(5), pool.get())
        .await
        .expect("the reclaim frees the slot")
        .unwrap();
    assert_eq!((*kept, *other), (0, 1));
    // The reclaimed holder labels "its" connection, as after setting it up for tenant 7.
    kept.set_labels(schema("7"));
    assert!(
        other.labels().is_empty(),
        "the reclaimed guard labeled the slot's new connection: {:?}",
        other.labels()
    );
    drop((kept, other));
    let conn = pool.get_labeled(&schema("7"), &Tenant).await.unwrap();
    assert_eq!(
        *conn, 107,
        "a connection never configured for tenant 7 was lent as one"
    );
}

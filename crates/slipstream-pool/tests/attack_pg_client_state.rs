//! Attacks on what a borrower leaves in the client itself (helper h79): its notice handler
//! and the notifications it did not take. `Client::clear_client_state` (slipstream-pg): "A
//! pool calls this before lending the connection to someone else, so that one borrower's
//! handler never sees another's notices." docs/pool.md says `Reset::Session` does it; the
//! default reset is `Reset::Rollback`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use slipstream_pool::{PgPool, Reset, Role};
use slipstream_testkit::Cluster;

/// Promise: one borrower's notice handler never sees the next borrower's notices, and the
/// next borrower is not handed the notifications the last one received and left unread;
/// under every reset mode, the default `Reset::Rollback` included.
///
/// Steps: a one-connection `PgPool` per reset mode; borrower A installs a notice handler
/// that records what it is called with, listens on a channel, notifies it (the notification
/// arrives with the reply) and returns the connection in a clean state; borrower B raises a
/// notice of its own and looks at the notifications its client holds.
///
/// Before the fix: under `Rollback` and `None` (no reset ran for a clean connection) B's
/// notice went to A's handler, which A's code still held (a leak of B's data into A's sink;
/// a handler holding a channel's sender also kept A's receiver open for as long as the
/// connection sat in the pool), and B's `take_notifications` returned A's notification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrowers_notice_handler_and_unread_notifications_do_not_reach_the_next() {
    let cluster = Cluster::start().unwrap();
    for reset in [Reset::Rollback, Reset::None, Reset::Session] {
        let pool = PgPool::builder(common::hosts(&[cluster.port()], "").parse().unwrap())
            .max_size(1)
            .reset_on_return(reset)
            .build_ready()
            .await
            .unwrap();
        let seen_by_a = Arc::new(Mutex::new(Vec::<String>::new()));
        {
            let mut a = pool.get(Role::Primary).await.unwrap();
            let sink = seen_by_a.clone();
            a.set_notice_handler(move |n| sink.lock().unwrap().push(n.message().to_string()));
            a.batch_execute("LISTEN h79; NOTIFY h79, 'for a'")
                .await
                .unwrap();
            a.batch_execute("UNLISTEN h79").await.unwrap();
        }
        common::until(
            Duration::from_secs(10),
            "the connection back",
            || pool.servers()[0].stats.clone(),
            |s| s.borrowed == 0,
        )
        .await;
        let mut b = pool.get(Role::Primary).await.unwrap();
        b.batch_execute("DO $$ BEGIN RAISE NOTICE 'secret of b'; END $$")
            .await
            .unwrap();
        let inherited: Vec<String> = b
            .take_notifications()
            .iter()
            .map(|n| n.payload().to_string())
            .collect();
        assert!(
            seen_by_a.lock().unwrap().is_empty(),
            "{reset:?}: borrower A's notice handler saw borrower B's notices: {:?}",
            seen_by_a.lock().unwrap()
        );
        assert!(
            inherited.is_empty(),
            "{reset:?}: borrower B was handed A's unread notifications: {inherited:?}"
        );
    }
}

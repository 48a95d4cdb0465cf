//! Attack on a `PgPool` built from a libpq connection string that carries
//! `target_session_attrs` (helper h79). docs/pool.md, "Several servers: PgPool": "Roles are
//! learned, not configured", a borrow asks for its `Role`, and `NoServer` names each server's
//! state and says whether retrying helps. The string is split into one configuration per host
//! for the sub-pools; a libpq setting that picks among hosts by role then applies to each
//! host alone.

mod common;

use std::time::Duration;

use slipstream_pool::{PgPool, PoolError, Role};
use slipstream_testkit::Cluster;

/// Promise: every server of the string that is up serves the borrows of its role; or, if the
/// pool cannot honour the string, its build says which setting to remove.
///
/// Steps: a primary and its streaming standby; for each `target_session_attrs` value libpq
/// takes, `build_ready` a two-server pool from the string with it, then borrow
/// `Role::Primary` and `Role::Standby`.
///
/// Before the fix: each sub-pool connected with the whole string's `target_session_attrs`,
/// so with `read-write` (the usual libpq way to reach the writer) every connect to the
/// standby was refused by the client itself ("server is in hot standby mode
/// (target_session_attrs=read-write)"), the standby was marked down and probed again every
/// 0.5 s for good, and `Role::Standby` failed with `NoServer` saying "down servers are
/// retried in the background, so retry shortly", which can never help; with `read-only` or
/// `standby` the primary was down and `Role::Primary` failed the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_string_with_target_session_attrs_hides_no_server() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    for attrs in [
        "read-write",
        "read-only",
        "primary",
        "standby",
        "prefer-standby",
    ] {
        let url = common::hosts(
            &[primary.port(), standby.port()],
            &format!("target_session_attrs={attrs}"),
        );
        let built = tokio::time::timeout(
            Duration::from_secs(20),
            PgPool::builder(url.parse().unwrap())
                .max_size(2)
                .build_ready(),
        )
        .await
        .unwrap_or_else(|_| panic!("{attrs}: build_ready hung"));
        let pool = match built {
            Err(PoolError::Config(why)) => {
                assert!(
                    why.contains("target_session_attrs") && why.contains("Role"),
                    "{attrs}: the refusal should name the setting and the way to ask for a \
                     role: {why}"
                );
                continue;
            }
            Err(e) => panic!("{attrs}: build_ready failed: {e}"),
            Ok(pool) => pool,
        };
        for role in [Role::Primary, Role::Standby] {
            let got = tokio::time::timeout(Duration::from_secs(20), pool.get(role))
                .await
                .unwrap_or_else(|_| panic!("{attrs}: the {role} borrow hung"));
            if let Err(e) = got {
                panic!("{attrs}: a {role} borrow failed with both servers running: {e}");
            }
        }
    }
}

//! slipstream-pg against real PostgreSQL clusters from the testkit.

mod auth;
mod cancel;
mod copy;
mod faults;
mod query;
mod tls;
mod transaction;
mod types;

use slipstream_pg::Client;
use slipstream_testkit::Cluster;

/// A fresh cluster and a connection to it.
async fn setup() -> (Cluster, Client) {
    let cluster = Cluster::start().expect("start a cluster");
    let client = slipstream_pg::connect(&cluster.url())
        .await
        .expect("connect");
    (cluster, client)
}

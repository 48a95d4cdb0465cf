//! slipstream-pg against real PostgreSQL clusters from the testkit.

mod abstract_socket;
mod attack_abandoned_calls;
mod attack_async_messages;
mod attack_cache_state;
mod attack_chained_transactions;
mod attack_client;
mod attack_connect;
mod attack_connect_prefer;
mod attack_connect_url;
mod attack_conninfo_fuzz;
mod attack_copy_misuse;
mod attack_custom_types;
mod attack_docs;
mod attack_dropped_guard_failures;
mod attack_extension_sql;
mod attack_feature_seams;
mod attack_inputs;
mod attack_leaked_bookkeeping;
mod attack_leaked_endings;
mod attack_leaked_futures;
mod attack_libpq_env;
mod attack_parameters;
mod attack_pipeline_cancel;
mod attack_pipeline_copy_check;
mod attack_pipeline_lost_commit;
mod attack_pipeline_outcomes;
mod attack_round_trip_savers;
mod attack_routing_and_auth;
mod attack_savepoints_and_pipelines;
mod attack_server_state;
mod attack_service_file;
mod attack_session_events;
mod attack_statement_edges;
mod attack_statements_and_lookups;
mod attack_tls_auth;
mod attack_transaction_guards;
mod attack_transactions_and_copy;
mod attack_types;
mod attack_uncached_and_streams;
mod auth;
mod cancel;
mod cancellation;
mod copy;
mod custom_types;
mod engine;
mod faults;
mod fetch;
mod hostile;
mod libpq_program;
mod memopt;
mod memopt_runs;
mod pipeline;
mod pipeline_flush;
mod pipeline_flush_attack;
mod pipeline_wakeups;
mod query;
mod routing;
mod seeded;
mod statement_cache;
mod streams;
mod tls;
mod transaction;
mod types;

use slipstream_pg::Client;
use slipstream_testkit::Cluster;

/// Continue-on-error pipeline options (the default is abort on error): what most of these
/// tests exercise.
fn continue_on_error() -> slipstream_pg::PipelineOptions {
    slipstream_pg::PipelineOptions::new().mode(slipstream_pg::PipelineMode::ContinueOnError)
}

/// A value only `money` accepts: a type the client cannot name from the Rust value, so a
/// first run asks the server (Parse + Describe) before it binds.
#[derive(Debug)]
struct Cents(i64);

impl postgres_types::ToSql for Cents {
    fn to_sql(
        &self,
        _: &postgres_types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(&self.0.to_be_bytes());
        Ok(postgres_types::IsNull::No)
    }
    fn accepts(ty: &postgres_types::Type) -> bool {
        *ty == postgres_types::Type::MONEY
    }
    postgres_types::to_sql_checked!();
}

/// A fresh cluster and a connection to it.
async fn setup() -> (Cluster, Client) {
    let cluster = Cluster::start().expect("start a cluster");
    let client = slipstream_pg::connect(&cluster.url())
        .await
        .expect("connect");
    (cluster, client)
}

/// A tokio-postgres connection to `cluster`, the other client differential tests compare with;
/// its connection task runs on the test's runtime.
async fn peer(cluster: &Cluster) -> tokio_postgres::Client {
    let (peer, conn) = tokio_postgres::connect(
        &format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            cluster.port()
        ),
        tokio_postgres::NoTls,
    )
    .await
    .expect("tokio-postgres connects");
    tokio::spawn(conn);
    peer
}

/// A cluster behind a zero-delay proxy (which counts round trips), and a client connected
/// through it with extra connection parameters `params` (`key=value&...`).
async fn behind_proxy(
    params: &str,
) -> (
    slipstream_testkit::Cluster,
    slipstream_testkit::DelayProxy,
    slipstream_pg::Client,
) {
    let cluster = Cluster::start().unwrap();
    let proxy = slipstream_testkit::DelayProxy::start(
        format!("127.0.0.1:{}", cluster.port()).parse().unwrap(),
        std::time::Duration::ZERO,
    )
    .unwrap();
    let client = slipstream_pg::connect(&format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable&{params}",
        proxy.port()
    ))
    .await
    .unwrap();
    (cluster, proxy, client)
}

/// The single value of a one-row, one-column query.
async fn scalar<T: for<'a> slipstream_pg::types::FromSql<'a>>(c: &mut Client, sql: &str) -> T {
    c.query_one(sql, &[]).await.unwrap().get(0).unwrap()
}

/// The first column of every row of a query, in order.
async fn column<T: for<'a> slipstream_pg::types::FromSql<'a>>(c: &mut Client, sql: &str) -> Vec<T> {
    let rows = c.query(sql, &[]).await.unwrap();
    rows.iter().map(|r| r.get(0).unwrap()).collect()
}

/// The `int4` first column of every row of a query, in order.
async fn ints(c: &mut Client, sql: &str) -> Vec<i32> {
    column(c, sql).await
}

/// Each pipeline result as `ok` and its output, or the error's kind and text: for assertion
/// messages that must show what every operation was told.
fn describe(results: &[Result<slipstream_pg::Output, slipstream_pg::Error>]) -> Vec<String> {
    results
        .iter()
        .map(|r| match r {
            Ok(o) => format!("ok {o:?}"),
            Err(e) => format!("{:?}: {e}", e.kind()),
        })
        .collect()
}

/// Waits until backend `pid` is running a statement (polling `pg_stat_activity` on `watcher`:
/// the condition itself, not a guess of how long it takes).
async fn wait_until_active(watcher: &mut Client, pid: i32) {
    loop {
        let row = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active'",
                &[&pid],
            )
            .await
            .unwrap();
        if row.get::<_, i64>(0).unwrap() == 1 {
            return;
        }
        tokio::task::yield_now().await;
    }
}

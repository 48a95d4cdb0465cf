//! Order Entry: Swingbench's SOE benchmark for PostgreSQL. [`setup`] creates and loads the
//! `soe` schema at a scale factor; [`workload`] is the nine transactions with Swingbench's
//! default weights (the three reporting queries listed at weight 0, i.e. off).
//!
//! ```no_run
//! # async fn f() -> anyhow::Result<()> {
//! use slipstream_bench::{self as bench, RunConfig, order_entry};
//! let url = "postgres://postgres@127.0.0.1/postgres";
//! order_entry::setup(url, 0.01, |line| eprintln!("{line}")).await?;
//! let mut config = RunConfig::new(Some(url.into()));
//! config.users = 8;
//! let run = bench::run(&order_entry::workload(), &config, tokio::signal::ctrl_c()).await?;
//! println!("{:.0} TPS", run.tps());
//! # Ok(()) }
//! ```

mod load;
mod names;
mod schema;
mod transactions;

use slipstream_pg::Client;

pub use load::{SetupCancel, SetupReport, Sizes, setup, setup_with_cancel};
pub use schema::SCHEMA;
use transactions::*;

use super::Workload;

/// The workload's name in results.
pub const NAME: &str = "order-entry";

/// The nine transactions and Swingbench's default weights.
///
/// ```
/// let w = slipstream_bench::order_entry::workload();
/// assert_eq!(w.weights()[2], ("browse-products".to_string(), 50));
/// ```
pub fn workload() -> Workload {
    Workload::new(NAME)
        .transaction("customer-registration", 15, || {
            Soe::new(CustomerRegistration)
        })
        .transaction("update-customer-details", 10, || {
            Soe::new(UpdateCustomerDetails)
        })
        .transaction("browse-products", 50, || Soe::new(BrowseProducts))
        .transaction("order-products", 40, || Soe::new(OrderProducts))
        .transaction("process-orders", 5, || Soe::new(ProcessOrders))
        .transaction("browse-orders", 5, || Soe::new(BrowseOrders))
        .transaction("sales-rep-query", 0, || Soe::new(SalesRepQuery))
        .transaction("warehouse-query", 0, || Soe::new(WarehouseQuery))
        .transaction("warehouse-activity-query", 0, || {
            Soe::new(WarehouseActivityQuery)
        })
}

/// Pins the session's `search_path` to `pg_catalog, pg_temp` (`pg_temp` last: searched for
/// nothing unqualified before the catalog), on Order Entry's own sessions: the loaders and every
/// user's connection. Its statements name each table by schema (`soe`) but its functions and
/// operators plainly, as Swingbench writes them, and on a default search_path a function
/// planted in `public` whose argument types fit better than the built-in's wins the call: a
/// `public.nextval(text)` beat `pg_catalog.nextval(regclass)` for `nextval('soe.orders_seq')`
/// and ran, with the bench's rights, in every measured transaction
/// (`tests/attack_search_path.rs`). Only `pg_catalog` is searched then, whatever the role's
/// or database's `search_path` says; the settings the context records are read before.
/// A run refuses Order Entry's workload with a type of the caller's added (`Workload::check`):
/// it would share these sessions.
pub(crate) const OWN_SEARCH_PATH: &str =
    "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false)";

/// The reporting queries' weight when turned on (Swingbench's 2 each).
pub const REPORTING_WEIGHT: u32 = 2;

/// The names of the reporting queries, off by default.
pub const REPORTING: [&str; 3] = [
    "sales-rep-query",
    "warehouse-query",
    "warehouse-activity-query",
];

/// Checks the schema's invariants and returns each violation found (empty: all hold).
///
/// - every order's total equals the sum of its lines, and every order has a line;
/// - no inventory is negative;
/// - every order line belongs to an order;
/// - every customer's preferred address and card exist and are the customer's own.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> anyhow::Result<()> {
/// let broken = slipstream_bench::order_entry::check(client).await?;
/// assert!(broken.is_empty(), "{broken:?}");
/// # Ok(()) }
/// ```
pub async fn check(client: &mut Client) -> anyhow::Result<Vec<String>> {
    // The caller's session and search_path are theirs, so every operator and function is
    // named by schema instead (see OWN_SEARCH_PATH): a planted `public.*(numeric, integer)`,
    // an exact match where the built-in needs a cast, would otherwise make a wrong total add up.
    const CHECKS: &[(&str, &str)] = &[
        (
            "orders whose total is not the sum of their lines",
            "SELECT pg_catalog.count(*) FROM soe.orders o WHERE o.order_total OPERATOR(pg_catalog.<>) \
             coalesce((SELECT pg_catalog.sum(i.unit_price OPERATOR(pg_catalog.*) \
             i.quantity::pg_catalog.numeric) FROM soe.order_items i \
             WHERE i.order_id OPERATOR(pg_catalog.=) o.order_id), -1)",
        ),
        (
            "inventories below zero",
            "SELECT pg_catalog.count(*) FROM soe.inventories \
             WHERE quantity_on_hand OPERATOR(pg_catalog.<) 0",
        ),
        (
            "order lines without an order",
            "SELECT pg_catalog.count(*) FROM soe.order_items i WHERE NOT EXISTS (SELECT FROM soe.orders o \
             WHERE o.order_id OPERATOR(pg_catalog.=) i.order_id)",
        ),
        (
            "customers whose preferred address is missing or not theirs",
            "SELECT pg_catalog.count(*) FROM soe.customers c WHERE NOT EXISTS (SELECT FROM soe.addresses a \
             WHERE a.address_id OPERATOR(pg_catalog.=) c.preferred_address \
             AND a.customer_id OPERATOR(pg_catalog.=) c.customer_id)",
        ),
        (
            "customers whose preferred card is missing or not theirs",
            "SELECT pg_catalog.count(*) FROM soe.customers c WHERE NOT EXISTS (SELECT FROM soe.card_details d \
             WHERE d.card_id OPERATOR(pg_catalog.=) c.preferred_card \
             AND d.customer_id OPERATOR(pg_catalog.=) c.customer_id)",
        ),
        (
            "orders with a status outside 0-10",
            "SELECT pg_catalog.count(*) FROM soe.orders \
             WHERE order_status OPERATOR(pg_catalog.<) 0 OR order_status OPERATOR(pg_catalog.>) 10",
        ),
    ];
    let mut broken = Vec::new();
    for (what, sql) in CHECKS {
        let n: i64 = client.query_one(*sql, &[]).await?.get(0)?;
        if n > 0 {
            broken.push(format!("{n} {what}"));
        }
    }
    Ok(broken)
}

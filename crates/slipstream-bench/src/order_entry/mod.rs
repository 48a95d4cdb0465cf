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
    const CHECKS: &[(&str, &str)] = &[
        (
            "orders whose total is not the sum of their lines",
            "SELECT count(*) FROM soe.orders o WHERE o.order_total <> \
             coalesce((SELECT sum(i.unit_price * i.quantity) FROM soe.order_items i WHERE i.order_id = o.order_id), -1)",
        ),
        (
            "inventories below zero",
            "SELECT count(*) FROM soe.inventories WHERE quantity_on_hand < 0",
        ),
        (
            "order lines without an order",
            "SELECT count(*) FROM soe.order_items i WHERE NOT EXISTS (SELECT FROM soe.orders o WHERE o.order_id = i.order_id)",
        ),
        (
            "customers whose preferred address is missing or not theirs",
            "SELECT count(*) FROM soe.customers c WHERE NOT EXISTS (SELECT FROM soe.addresses a \
             WHERE a.address_id = c.preferred_address AND a.customer_id = c.customer_id)",
        ),
        (
            "customers whose preferred card is missing or not theirs",
            "SELECT count(*) FROM soe.customers c WHERE NOT EXISTS (SELECT FROM soe.card_details d \
             WHERE d.card_id = c.preferred_card AND d.customer_id = c.customer_id)",
        ),
        (
            "orders with a status outside 0-10",
            "SELECT count(*) FROM soe.orders WHERE order_status NOT BETWEEN 0 AND 10",
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

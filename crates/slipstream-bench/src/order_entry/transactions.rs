//! The nine Order Entry transactions, after Swingbench's client-side SOE classes
//! (orderentryjdbc: NewCustomerProcess, UpdateCustomerDetails, BrowseProducts, NewOrderProcess,
//! ProcessOrders, BrowseAndUpdateOrders) and the ORDERENTRY package's reporting queries
//! (SalesRepsQuery, WarehouseOrdersQuery, WarehouseActivityQuery). Each step keeps
//! Swingbench's reads, writes, row limits, commits and think points; docs/bench.md lists each
//! transaction and every PostgreSQL adaptation that remains.
//!
//! Swingbench's JDBC connections run with autocommit off and commit by hand; a read-only step
//! that never commits leaves its reads in a transaction the next commit ends. Here a step that
//! writes runs between BEGIN and COMMIT, exactly where Swingbench's commits fall, and read-only
//! steps run in autocommit, so no session sits idle in a transaction between two of its
//! transactions (which in PostgreSQL holds back vacuum's horizon).
//!
//! Statements go through the connection's statement cache (SQL text, not `Statement`s held
//! across calls), so a reconnect after a failure needs nothing re-prepared by hand.

use rand::Rng;
use slipstream_pg::Row;

use super::load::CATEGORIES;
use super::names::{COUNTIES, COUNTRIES, FIRST_NAMES, LAST_NAMES, NLS, TOWNS, pick};
use crate::{Session, Transaction, TxError};

/// The id ranges transactions draw from, read from `soe.meta` in `init`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ranges {
    customers: i64,
    warehouses: i32,
    products: i32,
    sales_reps: i32,
}

impl Ranges {
    async fn read(s: &mut Session) -> Result<Ranges, TxError> {
        let row = s
            .client()?
            .query_opt(
                "SELECT customers, warehouses, products, sales_reps FROM soe.meta",
                &[],
            )
            .await
            .map_err(|e| {
                TxError::new(
                    TxError::from(e).code().to_string(),
                    "the Order Entry schema is not loaded (no soe.meta); run `slipstream bench order-entry --setup --scale 0.01`",
                )
            })?
            .ok_or_else(|| {
                TxError::new(
                    "client:no-data",
                    "soe.meta is empty: the Order Entry load did not finish; run the setup again",
                )
            })?;
        Ok(Ranges {
            customers: row.get(0)?,
            warehouses: row.get(1)?,
            products: row.get(2)?,
            sales_reps: row.get(3)?,
        })
    }

    fn customer(&self, s: &mut Session) -> i64 {
        s.rng().random_range(1..=self.customers)
    }

    fn warehouse(&self, s: &mut Session) -> i32 {
        s.rng().random_range(1..=self.warehouses)
    }

    fn product(&self, s: &mut Session) -> i32 {
        s.rng().random_range(1..=self.products)
    }

    fn sales_rep(&self, s: &mut Session) -> i32 {
        s.rng().random_range(1..=self.sales_reps)
    }
}

/// Swingbench's MAX_BROWSE_CATEGORY: a browse looks at 1 to 23 pages (its bound is exclusive).
const MAX_BROWSES: i32 = 23;
/// Swingbench's MIN_PRODS_TO_BUY: an order takes this many products from the last page seen.
const PRODUCTS_TO_BUY: usize = 2;
/// Order status: a new order waits (0-3), processing moves it to 5-9 (Swingbench's
/// AWAITING_PROCESSING = 4 and ORDER_PROCESSED = 10, both bounds exclusive).
const AWAITING_PROCESSING: i32 = 4;
const ORDER_PROCESSED: i32 = 10;

const CUSTOMER_BY_ID: &str = "SELECT customer_id, cust_first_name, cust_last_name, nls_language, \
     nls_territory, credit_limit::float8, cust_email, account_mgr_id, customer_since, customer_class, \
     suggestions, dob, mailshot, partner_mailshot, preferred_address, preferred_card \
     FROM soe.customers WHERE customer_id = $1 LIMIT 4";
const CUSTOMER_BY_NAME: &str = "SELECT customer_id, cust_first_name, cust_last_name, nls_language, \
     nls_territory, credit_limit::float8, cust_email, account_mgr_id, customer_since, customer_class, \
     suggestions, dob, mailshot, partner_mailshot, preferred_address, preferred_card \
     FROM soe.customers WHERE lower(cust_last_name) = lower($1) AND lower(cust_first_name) = lower($2) \
     LIMIT 4";
const ADDRESSES: &str = "SELECT address_id, customer_id, date_created, house_no_or_name, street_name, \
     town, county, country, post_code, zip_code FROM soe.addresses WHERE customer_id = $1 LIMIT 4";
const CARDS: &str = "SELECT card_id, customer_id, card_type, card_number, expiry_date, is_valid, \
     security_code FROM soe.card_details WHERE customer_id = $1 LIMIT 4";
const LOGON: &str = "INSERT INTO soe.logon (logon_id, customer_id, logon_date) \
     VALUES (nextval('soe.logon_seq'), $1, now())";
const PRODUCT_BY_ID: &str = "SELECT p.product_id, p.product_name, p.product_description, p.category_id, \
     p.weight_class, p.warranty_period, p.supplier_id, p.product_status, p.list_price::float8, \
     p.min_price::float8, p.catalog_url, i.quantity_on_hand \
     FROM soe.products p JOIN soe.inventories i ON i.product_id = p.product_id \
     WHERE p.product_id = $1 LIMIT 14";
/// A category's page at a warehouse: three products, in stock or not (Swingbench's
/// `rownum < 4`). Column 12 is the stock, column 13 the price in cents.
const PRODUCTS_BY_CATEGORY: &str = "SELECT p.product_id, p.product_name, p.product_description, \
     p.category_id, p.weight_class, p.warranty_period, p.supplier_id, p.product_status, \
     p.list_price::float8, p.min_price::float8, p.catalog_url, i.quantity_on_hand, \
     (p.list_price * 100)::int8 \
     FROM soe.products p JOIN soe.inventories i ON i.product_id = p.product_id \
     WHERE p.category_id = $1 AND i.warehouse_id = $2 LIMIT 3";
const ORDERS_BY_CUSTOMER: &str = "SELECT order_id, order_date, order_mode, customer_id, order_status, \
     order_total::float8, sales_rep_id, promotion_id, warehouse_id, delivery_type, cost_of_delivery, \
     wait_till_all_available, delivery_address_id, customer_class, card_id, invoice_address_id \
     FROM soe.orders WHERE customer_id = $1 LIMIT 4";
/// An order's lines; column 11 is the unit price in cents.
const ORDER_LINES: &str = "SELECT order_id, line_item_id, product_id, unit_price::float8, quantity, \
     dispatch_date, return_date, gift_wrap, condition, supplier_id, estimated_delivery, \
     (unit_price * 100)::int8 FROM soe.order_items WHERE order_id = $1 LIMIT 4";

async fn begin(s: &mut Session) -> Result<(), TxError> {
    s.client()?.batch_execute("BEGIN").await?;
    Ok(())
}

async fn commit(s: &mut Session) -> Result<(), TxError> {
    s.client()?.batch_execute("COMMIT").await?;
    s.count().commits += 1;
    Ok(())
}

async fn rollback(s: &mut Session) -> Result<(), TxError> {
    s.client()?.batch_execute("ROLLBACK").await?;
    s.count().rollbacks += 1;
    Ok(())
}

/// A read-only statement's rows (counted as a select).
async fn select(
    s: &mut Session,
    sql: &str,
    params: &[slipstream_pg::Param<'_>],
) -> Result<Vec<Row>, TxError> {
    let rows = s.client()?.query(sql, params).await?;
    s.count().selects += 1;
    Ok(rows)
}

/// Swingbench's logon (OrderEntryProcess.logon): one row into `logon`, committed on its own,
/// before the transaction proper. A single statement in autocommit is that transaction.
async fn logon(s: &mut Session, customer: i64) -> Result<(), TxError> {
    s.client()?.execute(LOGON, &[&customer]).await?;
    s.count().inserts += 1;
    s.count().commits += 1;
    Ok(())
}

async fn next_id(s: &mut Session, sequence: &str) -> Result<i64, TxError> {
    let id = s
        .client()?
        .query_one(&format!("SELECT nextval('soe.{sequence}')"), &[])
        .await?
        .get(0)?;
    s.count().selects += 1;
    Ok(id)
}

/// One Order Entry transaction's body: it gets the id ranges read once per user.
pub(crate) trait Step: Send + 'static {
    fn run(
        &mut self,
        r: Ranges,
        s: &mut Session,
    ) -> impl std::future::Future<Output = Result<(), TxError>> + Send;
}

/// A [`Step`] as a [`Transaction`]: `init` reads `soe.meta` for every type alike.
#[derive(Debug)]
pub(crate) struct Soe<T> {
    r: Ranges,
    step: T,
}

impl<T: Step> Soe<T> {
    pub(crate) fn new(step: T) -> Soe<T> {
        Soe {
            r: Ranges::default(),
            step,
        }
    }
}

impl<T: Step> Transaction for Soe<T> {
    async fn init(&mut self, s: &mut Session) -> Result<(), TxError> {
        // Again after a reconnect (init runs then too): a new session has the role's path.
        s.client()?.batch_execute(super::OWN_SEARCH_PATH).await?;
        self.r = Ranges::read(s).await?;
        Ok(())
    }

    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        self.step.run(self.r, s).await
    }
}

#[derive(Debug)]
pub(crate) struct CustomerRegistration;
#[derive(Debug)]
pub(crate) struct UpdateCustomerDetails;
#[derive(Debug)]
pub(crate) struct BrowseProducts;
#[derive(Debug)]
pub(crate) struct OrderProducts;
#[derive(Debug)]
pub(crate) struct ProcessOrders;
#[derive(Debug)]
pub(crate) struct BrowseOrders;
#[derive(Debug)]
pub(crate) struct SalesRepQuery;
#[derive(Debug)]
pub(crate) struct WarehouseQuery;
#[derive(Debug)]
pub(crate) struct WarehouseActivityQuery;

/// Swingbench's NewCustomerProcess: a customer, their address and card in one transaction;
/// then, after a think, a logon committed on its own and the new customer read back.
impl Step for CustomerRegistration {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let rng = s.rng();
        let (first, last) = (pick(rng, FIRST_NAMES), pick(rng, LAST_NAMES));
        let (town, county, country) = (pick(rng, TOWNS), pick(rng, COUNTIES), pick(rng, COUNTRIES));
        let (language, territory) = NLS[rng.random_range(0..NLS.len())];
        let credit_limit: i32 = rng.random_range(1000..50_000);
        let dob_days: i32 = rng.random_range(18..65) * 365;
        let since_days: i32 = rng.random_range(1..4) * 365;
        let house = rng.random_range(1..200).to_string();
        let card_number: i64 = rng.random_range(1_111_111_111..9_999_999_999);
        let expiry_days: i32 = rng.random_range(365..1460);
        let security: i32 = rng.random_range(1111..9999);
        let manager = i64::from(r.sales_rep(s));
        begin(s).await?;
        let ids = s
            .client()?
            .query_one(
                "SELECT nextval('soe.customer_seq'), nextval('soe.address_seq'), nextval('soe.card_details_seq')",
                &[],
            )
            .await?;
        s.count().selects += 1;
        let (customer, address, card): (i64, i64, i64) = (ids.get(0)?, ids.get(1)?, ids.get(2)?);
        s.think().await;
        let email = format!("{first}.{last}@example.com");
        let c = s.client()?;
        c.execute(
            "INSERT INTO soe.customers (customer_id, cust_first_name, cust_last_name, nls_language, \
             nls_territory, credit_limit, cust_email, account_mgr_id, customer_since, customer_class, \
             suggestions, dob, mailshot, partner_mailshot, preferred_address, preferred_card) VALUES \
             ($1, $2, $3, $4, $5, $6::int4, $7, $8, current_date - $9, 'Occasional', 'Music', \
             current_date - $10, 'Y', 'N', $11, $12)",
            &[
                &customer, &first, &last, &language, &territory, &credit_limit, &email, &manager,
                &since_days, &dob_days, &address, &card,
            ],
        )
        .await?;
        c.execute(
            "INSERT INTO soe.addresses (address_id, customer_id, date_created, house_no_or_name, \
             street_name, town, county, country, post_code, zip_code) VALUES \
             ($1, $2, current_date, $3, 'Street Name', $4, $5, $6, 'Postcode', NULL)",
            &[&address, &customer, &house, &town, &county, &country],
        )
        .await?;
        c.execute(
            "INSERT INTO soe.card_details (card_id, customer_id, card_type, card_number, \
             expiry_date, is_valid, security_code) VALUES \
             ($1, $2, 'Visa (Debit)', $3, current_date + $4, 'Y', $5)",
            &[&card, &customer, &card_number, &expiry_days, &security],
        )
        .await?;
        s.count().inserts += 3;
        commit(s).await?;
        s.think().await;
        logon(s, customer).await?;
        select(s, CUSTOMER_BY_ID, &[&customer]).await?;
        Ok(())
    }
}

/// Swingbench's UpdateCustomerDetails: find customers by a random first and last name
/// (`cust_name_ix`), think, give the first one found a new address and make it preferred.
/// A name nobody has changes nothing and commits.
impl Step for UpdateCustomerDetails {
    async fn run(&mut self, _: Ranges, s: &mut Session) -> Result<(), TxError> {
        let rng = s.rng();
        let (first, last) = (pick(rng, FIRST_NAMES), pick(rng, LAST_NAMES));
        let (town, county, country) = (pick(rng, TOWNS), pick(rng, COUNTIES), pick(rng, COUNTRIES));
        let house = rng.random_range(1..200).to_string();
        begin(s).await?;
        // Swingbench draws the address id before the lookup, whether it is used or not.
        let address = next_id(s, "address_seq").await?;
        let found = select(s, CUSTOMER_BY_NAME, &[&last, &first]).await?;
        s.think().await;
        if let Some(who) = found.first() {
            let customer: i64 = who.get(0)?;
            let c = s.client()?;
            c.execute(
                "INSERT INTO soe.addresses (address_id, customer_id, date_created, house_no_or_name, \
                 street_name, town, county, country, post_code, zip_code) VALUES \
                 ($1, $2, current_date, $3, 'Street Name', $4, $5, $6, 'Postcode', NULL)",
                &[&address, &customer, &house, &town, &county, &country],
            )
            .await?;
            c.execute(
                "UPDATE soe.customers SET preferred_address = $1 WHERE customer_id = $2",
                &[&address, &customer],
            )
            .await?;
            s.count().inserts += 1;
            s.count().updates += 1;
        }
        commit(s).await
    }
}

/// Swingbench's BrowseProducts: read the customer, think, then look up 1-23 random products
/// (each with its stock in up to 14 warehouses), thinking after each. It writes nothing and
/// never commits.
impl Step for BrowseProducts {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let customer = r.customer(s);
        let browses = s.rng().random_range(1..=MAX_BROWSES);
        select(s, CUSTOMER_BY_ID, &[&customer]).await?;
        s.think().await;
        for _ in 0..browses {
            let product = r.product(s);
            select(s, PRODUCT_BY_ID, &[&product]).await?;
            s.think().await;
        }
        Ok(())
    }
}

/// Swingbench's NewOrderProcess: a logon committed on its own; the customer, addresses and
/// cards; 1-23 category pages at random warehouses; then, if the last page showed products,
/// one transaction: an order at a random warehouse, a line for each of the first two products
/// in stock, the order's status and total, and the stock taken.
impl Step for OrderProducts {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let customer = r.customer(s);
        logon(s, customer).await?;
        let who = select(s, CUSTOMER_BY_ID, &[&customer]).await?;
        select(s, ADDRESSES, &[&customer]).await?;
        select(s, CARDS, &[&customer]).await?;
        s.think().await;
        let Some(who) = who.first() else {
            return Ok(());
        };
        let (address, card): (i64, i64) = (who.get(14)?, who.get(15)?);
        let class: Option<String> = who.get(9)?;
        let browses = s.rng().random_range(1..=MAX_BROWSES);
        let mut page = Vec::new();
        for _ in 0..browses {
            let category = s.rng().random_range(1..=CATEGORIES);
            let warehouse = r.warehouse(s);
            page = select(s, PRODUCTS_BY_CATEGORY, &[&category, &warehouse]).await?;
            s.think().await;
        }
        if page.is_empty() {
            return Ok(());
        }
        let warehouse = r.warehouse(s);
        let rep = r.sales_rep(s);
        let cost_of_delivery: i32 = s.rng().random_range(1..5);
        let status: i32 = s.rng().random_range(0..AWAITING_PROCESSING);
        begin(s).await?;
        let order = next_id(s, "orders_seq").await?;
        s.think().await;
        s.client()?
            .execute(
                "INSERT INTO soe.orders (order_id, order_date, order_mode, customer_id, order_status, \
                 order_total, sales_rep_id, warehouse_id, delivery_type, cost_of_delivery, \
                 wait_till_all_available, delivery_address_id, customer_class, card_id, invoice_address_id) \
                 VALUES ($1, now(), 'online', $2, 1, 0, $3, $4, 'Standard', $5, 'ship_asap', $6, $7, $8, $6)",
                &[&order, &customer, &rep, &warehouse, &cost_of_delivery, &address, &class, &card],
            )
            .await?;
        s.count().inserts += 1;
        s.think().await;
        let mut taken: Vec<i32> = Vec::new();
        let mut total_cents = 0i64;
        for (line, row) in page.iter().take(PRODUCTS_TO_BUY).enumerate() {
            let product: i32 = row.get(0)?;
            let on_hand: i32 = row.get(11)?;
            let cents: i64 = row.get(12)?;
            if on_hand > 0 {
                s.client()?
                    .execute(
                        "INSERT INTO soe.order_items (order_id, line_item_id, product_id, unit_price, \
                         quantity, gift_wrap, condition, supplier_id, estimated_delivery) \
                         SELECT $1, $2, product_id, list_price, 1, 'None', 'New', supplier_id, \
                         now() + interval '3 days' FROM soe.product_information WHERE product_id = $3",
                        &[&order, &(line as i32), &product],
                    )
                    .await?;
                s.count().inserts += 1;
                taken.push(product);
                total_cents += cents;
            }
            s.think().await;
        }
        if taken.is_empty() {
            // Nothing in stock: no line to order. Swingbench would commit an order without
            // lines; the invariant check (every order has a line) keeps this one out.
            return rollback(s).await;
        }
        s.client()?
            .execute(
                "UPDATE soe.orders SET order_mode = 'online', order_status = $2, \
                 order_total = $3::int8 / 100.0 WHERE order_id = $1",
                &[&order, &status, &total_cents],
            )
            .await?;
        s.count().updates += 1;
        s.think().await;
        s.think().await;
        // One of each product off the order's warehouse, in product order: two orders taking
        // the same stock lock it in the same order, so they wait instead of deadlocking.
        // Stock never goes below zero (a CHECK constraint and the invariant check).
        taken.sort_unstable();
        for product in taken {
            s.client()?
                .execute(
                    "UPDATE soe.inventories SET quantity_on_hand = quantity_on_hand - 1 \
                     WHERE product_id = $1 AND warehouse_id = $2 AND quantity_on_hand >= 1",
                    &[&product, &warehouse],
                )
                .await?;
            s.count().updates += 1;
        }
        commit(s).await
    }
}

/// Swingbench's ProcessOrders: read up to 9 waiting orders of a random warehouse with their
/// customers and lines, think, and move the first one on (status 5-9). A warehouse with no
/// waiting order rolls back.
impl Step for ProcessOrders {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let warehouse = r.warehouse(s);
        let status: i32 = s
            .rng()
            .random_range(AWAITING_PROCESSING + 1..ORDER_PROCESSED);
        begin(s).await?;
        // No ORDER BY (Swingbench takes any nine, by ROWNUM): ordering made the planner walk
        // the primary key, 30 ms a call at scale 0.1.
        let rows = select(
            s,
            "WITH need_to_process AS (SELECT order_id, customer_id FROM soe.orders \
             WHERE order_status <= 4 AND warehouse_id = $1 LIMIT 9) \
             SELECT o.order_id, oi.line_item_id, oi.product_id, oi.unit_price::float8, oi.quantity, \
             o.order_mode, o.order_status, o.order_total::float8, o.sales_rep_id, o.promotion_id, \
             c.customer_id, c.cust_first_name, c.cust_last_name, c.credit_limit::float8, \
             c.cust_email, o.order_date \
             FROM need_to_process n JOIN soe.orders o ON o.order_id = n.order_id \
             JOIN soe.customers c ON c.customer_id = o.customer_id \
             LEFT JOIN soe.order_items oi ON oi.order_id = o.order_id",
            &[&warehouse],
        )
        .await?;
        s.think().await;
        let Some(first) = rows.first() else {
            return rollback(s).await;
        };
        let order: i64 = first.get(0)?;
        s.client()?
            .execute(
                "UPDATE soe.orders SET order_status = $1 WHERE order_id = $2",
                &[&status, &order],
            )
            .await?;
        s.count().updates += 1;
        commit(s).await
    }
}

/// Swingbench's BrowseAndUpdateOrders: a logon committed on its own, then the customer, their
/// addresses and up to four of their orders; for one of those orders, its lines, one more of
/// the first line and the order's total up by that line's price.
impl Step for BrowseOrders {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let customer = r.customer(s);
        logon(s, customer).await?;
        begin(s).await?;
        select(s, CUSTOMER_BY_ID, &[&customer]).await?;
        select(s, ADDRESSES, &[&customer]).await?;
        let orders = select(s, ORDERS_BY_CUSTOMER, &[&customer]).await?;
        if !orders.is_empty() {
            let chosen = s.rng().random_range(0..orders.len());
            let order: i64 = orders[chosen].get(0)?;
            let lines = select(s, ORDER_LINES, &[&order]).await?;
            if let Some(line) = lines.first() {
                let (line_id, cents): (i32, i64) = (line.get(1)?, line.get(11)?);
                let c = s.client()?;
                c.execute(
                    "UPDATE soe.order_items SET quantity = quantity + 1 \
                     WHERE order_id = $1 AND line_item_id = $2",
                    &[&order, &line_id],
                )
                .await?;
                c.execute(
                    "UPDATE soe.orders SET order_total = order_total + $2::int8 / 100.0 \
                     WHERE order_id = $1",
                    &[&order, &cents],
                )
                .await?;
                s.count().updates += 2;
            }
        }
        commit(s).await
    }
}

/// The ORDERENTRY package's SalesRepsQuery: a sales rep's ten largest orders (by rank, ties
/// included) with their customers' names.
impl Step for SalesRepQuery {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let rep = r.sales_rep(s);
        select(
            s,
            "SELECT tt.order_total::float8, tt.sales_rep_id, tt.order_date, c.cust_first_name, \
             c.cust_last_name FROM (SELECT order_total, sales_rep_id, order_date, customer_id, \
             rank() OVER (ORDER BY order_total DESC) AS sal_rank FROM soe.orders \
             WHERE sales_rep_id = $1) tt JOIN soe.customers c ON c.customer_id = tt.customer_id \
             WHERE tt.sal_rank <= 10",
            &[&rep],
        )
        .await?;
        s.think().await;
        Ok(())
    }
}

/// The ORDERENTRY package's WarehouseOrdersQuery: a warehouse's orders counted and summed by
/// mode, as a cube.
impl Step for WarehouseQuery {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let warehouse = r.warehouse(s);
        select(
            s,
            "SELECT o.order_mode, o.warehouse_id, sum(o.order_total)::float8, count(*) \
             FROM soe.orders o JOIN soe.warehouses w ON o.warehouse_id = w.warehouse_id \
             WHERE w.warehouse_id = $1 GROUP BY CUBE (o.order_mode, o.warehouse_id)",
            &[&warehouse],
        )
        .await?;
        s.think().await;
        Ok(())
    }
}

/// The ORDERENTRY package's WarehouseActivityQuery: a warehouse's orders in each of the last
/// twelve five-minute intervals, counted and summed.
impl Step for WarehouseActivityQuery {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let warehouse = r.warehouse(s);
        select(
            s,
            "SELECT o.warehouse_id, w.date1, w.date2, sum(o.order_total)::float8, count(*) \
             FROM (SELECT now() - (g - 1) * interval '5 minutes' AS date1, \
                          now() - g * interval '5 minutes' AS date2 \
                   FROM generate_series(1, 12) g) w \
             JOIN soe.orders o ON o.order_date BETWEEN w.date2 AND w.date1 \
             WHERE o.warehouse_id = $1 GROUP BY o.warehouse_id, w.date1, w.date2 \
             ORDER BY w.date1, w.date2 DESC",
            &[&warehouse],
        )
        .await?;
        s.think().await;
        Ok(())
    }
}

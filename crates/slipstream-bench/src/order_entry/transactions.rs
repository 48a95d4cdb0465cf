//! The nine Order Entry transactions, after Swingbench's SOE classes (NewCustomerProcess,
//! UpdateCustomerDetails, BrowseProducts, NewOrderProcess, ProcessOrders,
//! BrowseAndUpdateOrders, SalesRepsOrdersQuery, WarehouseOrdersQuery, WarehouseActivityQuery).
//!
//! Statements go through the connection's statement cache (SQL text, not `Statement`s held
//! across calls), so a reconnect after a failure needs nothing re-prepared by hand.

use rand::Rng;
use slipstream_pg::Row;

use super::load::{CATEGORIES, MAX_LINES};
use crate::{Session, Transaction, TxError};

/// The id ranges transactions draw from, read from `soe.meta` in `init`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ranges {
    customers: i64,
    warehouses: i32,
    sales_reps: i32,
}

impl Ranges {
    async fn read(s: &mut Session) -> Result<Ranges, TxError> {
        let row = s
            .client()?
            .query_opt(
                "SELECT customers, warehouses, sales_reps FROM soe.meta",
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
            sales_reps: row.get(2)?,
        })
    }

    fn customer(&self, s: &mut Session) -> i64 {
        s.rng().random_range(1..=self.customers)
    }

    fn warehouse(&self, s: &mut Session) -> i32 {
        s.rng().random_range(1..=self.warehouses)
    }
}

const CUSTOMER: &str = "SELECT customer_id, cust_first_name, cust_last_name, credit_limit::float8, \
     preferred_address, preferred_card FROM soe.customers WHERE customer_id = $1";
const LOGON: &str = "INSERT INTO soe.logon (logon_id, customer_id, logon_date) VALUES (nextval('soe.logon_seq'), $1, now())";
const BROWSE: &str = "SELECT p.product_id, p.product_name, p.list_price::float8, i.quantity_on_hand \
     FROM soe.product_information p JOIN soe.inventories i ON i.product_id = p.product_id \
     WHERE p.category_id = $1 AND i.warehouse_id = $2 AND i.quantity_on_hand > 0 \
     ORDER BY p.product_id LIMIT 15";

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

/// Swingbench's logon: read the customer, record the logon.
async fn logon(s: &mut Session, customer: i64) -> Result<Option<Row>, TxError> {
    let row = s.client()?.query_opt(CUSTOMER, &[&customer]).await?;
    s.count().selects += 1;
    s.client()?.execute(LOGON, &[&customer]).await?;
    s.count().inserts += 1;
    Ok(row)
}

async fn browse(s: &mut Session, warehouse: i32) -> Result<Vec<Row>, TxError> {
    let category = s.rng().random_range(1..=CATEGORIES);
    let rows = s.client()?.query(BROWSE, &[&category, &warehouse]).await?;
    s.count().selects += 1;
    Ok(rows)
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

const TOWNS: &[&str] = &["Leeds", "Bristol", "York", "Bath", "Oxford"];

impl Step for CustomerRegistration {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let (house, town_i) = (
            s.rng().random_range(1..200).to_string(),
            s.rng().random_range(0..TOWNS.len()),
        );
        let card_number: i64 = s
            .rng()
            .random_range(4_000_000_000_000_000..4_999_999_999_999_999);
        let security: i32 = s.rng().random_range(100..1000);
        let manager: i32 = s.rng().random_range(1..=r.sales_reps);
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
        let email = format!("new.customer{customer}@example.com");
        let c = s.client()?;
        c.execute(
            "INSERT INTO soe.customers (customer_id, cust_first_name, cust_last_name, nls_language, \
             nls_territory, credit_limit, cust_email, account_mgr_id, customer_since, customer_class, \
             dob, mailshot, partner_mailshot, preferred_address, preferred_card) VALUES \
             ($1, 'new', 'customer', 'us', 'AMERICA', 1000, $2, $3, current_date, 'Occasional', \
             current_date - 10000, 'Y', 'N', $4, $5)",
            &[&customer, &email, &i64::from(manager), &address, &card],
        )
        .await?;
        c.execute(
            "INSERT INTO soe.addresses (address_id, customer_id, date_created, house_no_or_name, \
             street_name, town, county, country, post_code) VALUES \
             ($1, $2, current_date, $3, 'High Street', $4, 'Shire', 'UK', 'PC1 1AA')",
            &[&address, &customer, &house, &TOWNS[town_i]],
        )
        .await?;
        c.execute(
            "INSERT INTO soe.card_details (card_id, customer_id, card_type, card_number, \
             expiry_date, is_valid, security_code) VALUES ($1, $2, 'Visa', $3, current_date + 1000, 'Y', $4)",
            &[&card, &customer, &card_number, &security],
        )
        .await?;
        s.count().inserts += 3;
        logon(s, customer).await?;
        commit(s).await
    }
}

impl Step for UpdateCustomerDetails {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let customer = r.customer(s);
        let house = s.rng().random_range(1..200).to_string();
        begin(s).await?;
        if logon(s, customer).await?.is_none() {
            return rollback(s).await;
        }
        s.think().await;
        let address: i64 = s
            .client()?
            .query_one(
                "INSERT INTO soe.addresses (address_id, customer_id, date_created, house_no_or_name, \
                 street_name, town, county, country, post_code) VALUES \
                 (nextval('soe.address_seq'), $1, current_date, $2, 'Station Road', 'York', 'Shire', 'UK', 'YO1 1AA') \
                 RETURNING address_id",
                &[&customer, &house],
            )
            .await?
            .get(0)?;
        s.count().inserts += 1;
        s.client()?
            .execute(
                "UPDATE soe.customers SET preferred_address = $1 WHERE customer_id = $2",
                &[&address, &customer],
            )
            .await?;
        s.count().updates += 1;
        commit(s).await
    }
}

impl Step for BrowseProducts {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let customer = r.customer(s);
        let warehouse = r.warehouse(s);
        let pages = s.rng().random_range(1..=4);
        begin(s).await?;
        logon(s, customer).await?;
        for _ in 0..pages {
            browse(s, warehouse).await?;
            s.think().await;
        }
        commit(s).await
    }
}

impl Step for OrderProducts {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let customer = r.customer(s);
        let warehouse = r.warehouse(s);
        let rep: i32 = s.rng().random_range(1..=r.sales_reps);
        let lines = s.rng().random_range(1..=MAX_LINES) as usize;
        begin(s).await?;
        let Some(who) = logon(s, customer).await? else {
            return rollback(s).await;
        };
        let (address, card): (i64, i64) = (who.get(4)?, who.get(5)?);
        let shelf = browse(s, warehouse).await?;
        s.think().await;
        // Pick distinct products from the page, then take stock in product order: two orders
        // locking the same inventory rows lock them in the same order, so they cannot deadlock.
        let mut picks: Vec<(i32, i32)> = Vec::with_capacity(lines);
        for row in &shelf {
            if picks.len() == lines {
                break;
            }
            if s.rng().random_bool(0.5) {
                let product: i32 = row.get(0)?;
                let on_hand: i32 = row.get(3)?;
                picks.push((product, s.rng().random_range(1..=on_hand.clamp(1, 5))));
            }
        }
        picks.sort_unstable();
        let order: i64 = s
            .client()?
            .query_one(
                "INSERT INTO soe.orders (order_id, order_date, order_mode, customer_id, order_status, \
                 order_total, sales_rep_id, warehouse_id, delivery_type, cost_of_delivery, \
                 wait_till_all_available, delivery_address_id, customer_class, card_id, invoice_address_id) \
                 VALUES (nextval('soe.orders_seq'), now(), 'online', $1, 0, 0, $2, $3, 'Standard', 5, \
                 'ship_asap', $4, 'Regular', $5, $4) RETURNING order_id",
                &[&customer, &rep, &warehouse, &address, &card],
            )
            .await?
            .get(0)?;
        s.count().inserts += 1;
        let mut line = 0i32;
        for (product, quantity) in picks {
            // Takes stock only if there is enough: inventory never goes negative.
            let taken = s
                .client()?
                .execute(
                    "UPDATE soe.inventories SET quantity_on_hand = quantity_on_hand - $1 \
                     WHERE product_id = $2 AND warehouse_id = $3 AND quantity_on_hand >= $1",
                    &[&quantity, &product, &warehouse],
                )
                .await?;
            s.count().updates += 1;
            if taken == 1 {
                line += 1;
                s.client()?
                    .execute(
                        "INSERT INTO soe.order_items (order_id, line_item_id, product_id, unit_price, \
                         quantity, gift_wrap, condition, supplier_id, estimated_delivery) \
                         SELECT $1, $2, product_id, list_price, $4, 'None', 'New', supplier_id, \
                         now() + interval '3 days' FROM soe.product_information WHERE product_id = $3",
                        &[&order, &line, &product, &quantity],
                    )
                    .await?;
                s.count().inserts += 1;
            }
            s.think().await;
        }
        if line == 0 {
            // Nothing in stock: the customer leaves without ordering.
            return rollback(s).await;
        }
        s.client()?
            .execute(
                "UPDATE soe.orders SET order_total = (SELECT sum(unit_price * quantity) \
                 FROM soe.order_items WHERE order_id = $1) WHERE order_id = $1",
                &[&order],
            )
            .await?;
        s.count().updates += 1;
        commit(s).await
    }
}

impl Step for ProcessOrders {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let warehouse = r.warehouse(s);
        begin(s).await?;
        // SKIP LOCKED: two processors in one warehouse take different orders instead of
        // queueing behind each other. No ORDER BY (Swingbench takes any ten, by ROWNUM):
        // ordering made the planner walk the primary key, 30 ms a call at scale 0.1.
        let ids: Vec<i64> = s
            .client()?
            .query(
                "SELECT order_id FROM soe.orders WHERE warehouse_id = $1 AND order_status < 5 \
                 LIMIT 10 FOR UPDATE SKIP LOCKED",
                &[&warehouse],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect::<Result<_, _>>()?;
        s.count().selects += 1;
        if !ids.is_empty() {
            let c = s.client()?;
            c.execute(
                "UPDATE soe.orders SET order_status = 5 WHERE order_id = ANY($1)",
                &[&ids],
            )
            .await?;
            c.execute(
                "UPDATE soe.order_items SET dispatch_date = now() WHERE order_id = ANY($1)",
                &[&ids],
            )
            .await?;
            s.count().updates += 2;
        }
        commit(s).await
    }
}

impl Step for BrowseOrders {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let customer = r.customer(s);
        begin(s).await?;
        logon(s, customer).await?;
        s.client()?
            .query(
                "SELECT o.order_id, o.order_date, o.order_total::float8, o.order_status, count(i.line_item_id) \
                 FROM soe.orders o LEFT JOIN soe.order_items i ON i.order_id = o.order_id \
                 WHERE o.customer_id = $1 GROUP BY o.order_id ORDER BY o.order_date DESC LIMIT 10",
                &[&customer],
            )
            .await?;
        s.count().selects += 1;
        commit(s).await
    }
}

impl Step for SalesRepQuery {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let rep: i32 = s.rng().random_range(1..=r.sales_reps);
        s.client()?
            .query(
                "SELECT o.order_id, o.order_date, o.order_total::float8, c.cust_last_name, count(*) \
                 FROM soe.orders o JOIN soe.customers c ON c.customer_id = o.customer_id \
                 JOIN soe.order_items i ON i.order_id = o.order_id \
                 WHERE o.sales_rep_id = $1 GROUP BY o.order_id, c.cust_last_name \
                 ORDER BY o.order_date DESC LIMIT 100",
                &[&rep],
            )
            .await?;
        s.count().selects += 1;
        Ok(())
    }
}

impl Step for WarehouseQuery {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let warehouse = r.warehouse(s);
        s.client()?
            .query(
                "SELECT order_status, count(*), sum(order_total)::float8 FROM soe.orders \
                 WHERE warehouse_id = $1 GROUP BY order_status ORDER BY order_status",
                &[&warehouse],
            )
            .await?;
        s.count().selects += 1;
        Ok(())
    }
}

impl Step for WarehouseActivityQuery {
    async fn run(&mut self, r: Ranges, s: &mut Session) -> Result<(), TxError> {
        let warehouse = r.warehouse(s);
        let c = s.client()?;
        c.query(
            "SELECT date_trunc('day', order_date), count(*), sum(order_total)::float8 FROM soe.orders \
             WHERE warehouse_id = $1 AND order_date > now() - interval '30 days' GROUP BY 1 ORDER BY 1",
            &[&warehouse],
        )
        .await?;
        c.query(
            "SELECT sum(quantity_on_hand), count(*) FILTER (WHERE quantity_on_hand < 10) \
             FROM soe.inventories WHERE warehouse_id = $1",
            &[&warehouse],
        )
        .await?;
        s.count().selects += 2;
        Ok(())
    }
}

//! Creating and loading the Order Entry schema: rows generated here and streamed with COPY,
//! several tables at once on their own connections, then keys and indexes built in parallel.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slipstream_pg::{CancelToken, Client, CopyIn};

use super::names::{COUNTIES, COUNTRIES, FIRST_NAMES, LAST_NAMES, NLS, TOWNS};
use super::schema::{INDEXES, TABLES, sequences};

/// Rows per scale unit, as Swingbench sizes SOE: scale 1 is about a million customers.
const CUSTOMERS_PER_SCALE: f64 = 1_000_000.0;
/// Orders per customer at load time (Swingbench: about 1.4).
const ORDERS_PER_CUSTOMER: f64 = 1.5;
/// The product catalogue does not grow with scale (Swingbench's is fixed too).
const PRODUCTS: i32 = 1000;
/// Product categories.
pub(crate) const CATEGORIES: i32 = 50;
/// Most order lines an order has.
pub(crate) const MAX_LINES: i32 = 5;
/// Bytes of COPY text gathered before one write: amortises the await per row.
const COPY_BATCH: usize = 64 * 1024;
/// Index builds run this many at a time: more than the cores only queues them.
const INDEX_WORKERS: usize = 2;
/// The advisory lock a load holds on its database from before the schema is dropped until
/// it ends (a session lock of its first connection): two loads at once (two load
/// generators each running `--setup`) would copy into the same tables, so the second waits.
/// The bytes of "soe load", a key no other user of advisory locks is likely to pick.
const SETUP_LOCK: i64 = i64::from_be_bytes(*b"soe load");

/// The row counts a scale factor gives.
///
/// ```
/// let s = slipstream_bench::order_entry::Sizes::for_scale(0.01).unwrap();
/// assert_eq!(s.customers, 10_000);
/// assert!(slipstream_bench::order_entry::Sizes::for_scale(0.0).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sizes {
    /// The scale factor.
    pub scale: f64,
    /// Customers (and their first address, card and logon).
    pub customers: i64,
    /// Orders loaded.
    pub orders: i64,
    /// Warehouses (each stocks every product).
    pub warehouses: i32,
    /// Products.
    pub products: i32,
    /// Sales representatives.
    pub sales_reps: i32,
}

impl Sizes {
    /// Sizes for `scale` (at least 0.0001, at most 1000).
    ///
    /// ```
    /// use slipstream_bench::order_entry::Sizes;
    /// let s = Sizes::for_scale(0.01)?;
    /// assert_eq!((s.customers, s.orders, s.warehouses, s.products), (10_000, 15_000, 10, 1000));
    /// assert!(Sizes::for_scale(0.0).is_err());
    /// # Ok::<(), anyhow::Error>(())
    /// ```
    pub fn for_scale(scale: f64) -> anyhow::Result<Sizes> {
        anyhow::ensure!(
            scale.is_finite() && (0.0001..=1000.0).contains(&scale),
            "--scale {scale}: use a value from 0.0001 to 1000 (1 is about a million customers)"
        );
        let customers = (CUSTOMERS_PER_SCALE * scale).round() as i64;
        Ok(Sizes {
            scale,
            customers,
            orders: (customers as f64 * ORDERS_PER_CUSTOMER).round() as i64,
            warehouses: ((1000.0 * scale).round() as i32).max(10),
            products: PRODUCTS,
            sales_reps: ((1000.0 * scale).round() as i32).max(10),
        })
    }
}

/// What a setup did and how long it took.
///
/// ```no_run
/// # async fn f() -> anyhow::Result<()> {
/// let url = "postgres://postgres@127.0.0.1/postgres";
/// let report = slipstream_bench::order_entry::setup(url, 0.1, |line| eprintln!("{line}")).await?;
/// assert_eq!(report.rows["customers"], report.sizes.customers as u64);
/// println!("loaded in {:?}, indexed in {:?}", report.load, report.index);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SetupReport {
    /// The sizes loaded.
    pub sizes: Sizes,
    /// Rows loaded per table.
    pub rows: BTreeMap<String, u64>,
    /// Generating and copying the rows.
    pub load: Duration,
    /// Building keys and indexes.
    pub index: Duration,
    /// Everything, ANALYZE included.
    pub total: Duration,
}

/// A product's list price in cents: fixed by its id, so order lines can be priced without
/// reading the catalogue back.
pub(crate) fn list_price_cents(product: i32) -> i64 {
    500 + (i64::from(product) * 7919) % 49_500
}

/// Drops and recreates the `soe` schema and loads it at `scale`. `say` gets one line per step.
///
/// ```no_run
/// # async fn f() -> anyhow::Result<()> {
/// let report = slipstream_bench::order_entry::setup(
///     "postgres://postgres@127.0.0.1/postgres", 0.01, |line| eprintln!("{line}")).await?;
/// println!("loaded in {:?}", report.total);
/// # Ok(()) }
/// ```
pub async fn setup(url: &str, scale: f64, say: impl Fn(&str)) -> anyhow::Result<SetupReport> {
    setup_with_cancel(url, scale, say, &SetupCancel::default()).await
}

/// The cancel keys of a running [`setup_with_cancel`]'s connections. Dropping the setup's
/// future closes its connections, which ends a COPY on the server but not a `CREATE INDEX`:
/// the server runs that to its end (minutes at a large scale) unless it is cancelled.
///
/// ```no_run
/// # async fn f() -> anyhow::Result<()> {
/// use slipstream_bench::order_entry::{SetupCancel, setup_with_cancel};
/// let cancel = SetupCancel::default();
/// let url = "postgres://postgres@127.0.0.1/postgres";
/// tokio::select! {
///     r = setup_with_cancel(url, 1.0, |line| eprintln!("{line}"), &cancel) => { r?; }
///     _ = tokio::signal::ctrl_c() => cancel.cancel().await?,
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct SetupCancel(Arc<Cancels>);

#[derive(Default)]
struct Cancels {
    tokens: Mutex<Vec<CancelToken>>,
    /// Set by `cancel`: the setup starts no statement after it. A cancel request stops only
    /// the statement running when it arrives, so without this the setup would go on to its
    /// next index build.
    stopped: AtomicBool,
}

impl SetupCancel {
    /// Stops the setup: it starts no further statement, and the server is asked to cancel
    /// whatever each of its connections runs now; the setup then fails (or has already
    /// ended). The first error, if a request could not be sent; the others are still tried.
    ///
    /// ```no_run
    /// # async fn f() -> anyhow::Result<()> {
    /// use std::time::Duration;
    /// use slipstream_bench::order_entry::{SetupCancel, setup_with_cancel};
    /// let cancel = SetupCancel::default();
    /// let url = "postgres://postgres@127.0.0.1/postgres";
    /// tokio::select! {
    ///     r = setup_with_cancel(url, 10.0, |_| {}, &cancel) => { r?; }
    ///     // Too slow: stop it, the index builds running on the server included.
    ///     _ = tokio::time::sleep(Duration::from_secs(600)) => cancel.cancel().await?,
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn cancel(&self) -> Result<(), slipstream_pg::Error> {
        self.0.stopped.store(true, Ordering::SeqCst);
        let tokens = self
            .0
            .tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let sent = futures_util::future::join_all(tokens.iter().map(CancelToken::cancel)).await;
        sent.into_iter().collect()
    }

    fn add(&self, token: CancelToken) {
        self.0
            .tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(token);
    }

    /// An error once [`SetupCancel::cancel`] was called: checked before every statement.
    fn go_on(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.0.stopped.load(Ordering::SeqCst),
            "the setup was stopped"
        );
        Ok(())
    }
}

/// [`setup`], with each connection's cancel key put into `cancel` as it connects.
///
/// ```
/// # #[tokio::main] async fn main() {
/// use slipstream_bench::order_entry::{SetupCancel, setup_with_cancel};
/// let cancel = SetupCancel::default();
/// // The scale is checked before anything connects.
/// let err = setup_with_cancel("postgres://postgres@127.0.0.1/postgres", 5000.0, |_| {}, &cancel)
///     .await
///     .unwrap_err();
/// assert!(err.to_string().starts_with("--scale 5000: use a value from 0.0001 to 1000"));
/// # }
/// ```
pub async fn setup_with_cancel(
    url: &str,
    scale: f64,
    say: impl Fn(&str),
    cancel: &SetupCancel,
) -> anyhow::Result<SetupReport> {
    let sizes = Sizes::for_scale(scale)?;
    let started = Instant::now();
    let connect = || async {
        let mut client = slipstream_pg::connect(url)
            .await
            .map_err(|e| anyhow::anyhow!("Order Entry setup could not connect: {e}"))?;
        cancel.add(client.cancel_token());
        // Each connection waits idle by design (for its turn, or holding the load's lock
        // while the others build indexes), and a role's `idle_session_timeout` (PostgreSQL
        // 14+; looked up so older servers skip it) ended it there, failing the load:
        // `tests/attack_session_settings.rs`.
        client.batch_execute(crate::context::NO_IDLE_TIMEOUT).await.map_err(|e| {
            anyhow::anyhow!(
                "Order Entry setup could not turn off idle_session_timeout on its connection: {e}"
            )
        })?;
        // Before anything is created: the view, the CHECKs and the index expressions bind
        // their functions and operators now, for every later read of them.
        client
            .batch_execute(super::OWN_SEARCH_PATH)
            .await
            .map_err(|e| {
                anyhow::anyhow!("Order Entry setup could not set its connection's search_path: {e}")
            })?;
        Ok::<_, anyhow::Error>(client)
    };
    let mut main = connect().await?;
    cancel.go_on()?;
    let free: bool = main
        .query_one("SELECT pg_try_advisory_lock($1)", &[&SETUP_LOCK])
        .await
        .and_then(|row| row.get(0))
        .map_err(|e| anyhow::anyhow!("taking the Order Entry load's lock failed: {e}"))?;
    if !free {
        say("another Order Entry load is running on this database: waiting for it to end");
        // A Ctrl-C cancels the wait as it would the load: `main`'s key is in `cancel`.
        main.execute("SELECT pg_advisory_lock($1)", &[&SETUP_LOCK])
            .await
            .map_err(|e| {
                anyhow::anyhow!("waiting for another Order Entry load to end failed: {e}")
            })?;
        cancel.go_on()?;
    }
    main.batch_execute(TABLES)
        .await
        .map_err(|e| anyhow::anyhow!("creating the soe schema failed: {e}"))?;
    say(&format!(
        "loading Order Entry at scale {scale}: {} customers, {} orders, {} warehouses",
        sizes.customers, sizes.orders, sizes.warehouses
    ));

    let (mut a, mut b, mut c) = (connect().await?, connect().await?, connect().await?);
    let (customers, catalogue, orders) = tokio::try_join!(
        load_customers(&mut a, sizes, cancel),
        load_catalogue(&mut b, sizes, cancel),
        load_orders(&mut c, &mut main, sizes, cancel),
    )?;
    let mut rows = BTreeMap::new();
    rows.extend(customers);
    rows.extend(catalogue);
    rows.extend(orders);
    let load = started.elapsed();
    say(&format!(
        "loaded {} rows in {:.1} s; building indexes",
        rows.values().sum::<u64>(),
        load.as_secs_f64()
    ));

    let index_started = Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut workers = vec![a, b];
    workers.truncate(INDEX_WORKERS);
    let results = futures_util::future::join_all(workers.iter_mut().map(|client| {
        let next = &next;
        async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(sql) = INDEXES.get(i) else {
                    return Ok::<(), anyhow::Error>(());
                };
                cancel.go_on()?;
                client
                    .batch_execute(sql)
                    .await
                    .map_err(|e| anyhow::anyhow!("`{sql}` failed: {e}"))?;
            }
        }
    }))
    .await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    let logons = rows.get("logon").copied().unwrap_or(0) as i64;
    cancel.go_on()?;
    main.batch_execute(&sequences(sizes.customers, sizes.orders, logons))
        .await
        .map_err(|e| anyhow::anyhow!("setting the soe sequences failed: {e}"))?;
    let index = index_started.elapsed();
    say(&format!(
        "built indexes in {:.1} s; analyzing",
        index.as_secs_f64()
    ));
    cancel.go_on()?;
    main.batch_execute(
        "ANALYZE soe.customers, soe.addresses, soe.card_details, soe.warehouses, \
         soe.product_information, soe.product_descriptions, soe.inventories, soe.orders, \
         soe.order_items, soe.logon",
    )
    .await
    .map_err(|e| anyhow::anyhow!("ANALYZE of the soe tables failed: {e}"))?;
    // Last: a run takes a filled soe.meta for a finished load, statistics included.
    cancel.go_on()?;
    main.execute(
        "INSERT INTO soe.meta (scale, customers, warehouses, products, sales_reps) VALUES ($1, $2, $3, $4, $5)",
        &[&sizes.scale, &sizes.customers, &sizes.warehouses, &sizes.products, &sizes.sales_reps],
    )
    .await
    .map_err(|e| anyhow::anyhow!("writing soe.meta failed: {e}"))?;
    Ok(SetupReport {
        sizes,
        rows,
        load,
        index,
        total: started.elapsed(),
    })
}

/// Accumulates COPY text and sends it in batches.
struct Batch<'c> {
    copy: CopyIn<'c>,
    text: String,
    rows: u64,
    /// The table, for errors: a connection ended mid-COPY says nothing of what it was doing.
    table: &'static str,
}

impl<'c> Batch<'c> {
    async fn open(
        client: &'c mut Client,
        cancel: &SetupCancel,
        table: &'static str,
    ) -> anyhow::Result<Batch<'c>> {
        cancel.go_on()?;
        let copy = client
            .copy_in(&format!("COPY soe.{table} FROM STDIN"))
            .await
            .map_err(|e| anyhow::anyhow!("COPY into soe.{table} failed to start: {e}"))?;
        Ok(Batch {
            copy,
            text: String::with_capacity(COPY_BATCH + 1024),
            rows: 0,
            table,
        })
    }

    /// Ends the row just written into `text`.
    async fn row(&mut self) -> anyhow::Result<()> {
        self.text.push('\n');
        self.rows += 1;
        if self.text.len() >= COPY_BATCH {
            let table = self.table;
            self.copy
                .write(self.text.as_bytes())
                .await
                .map_err(|e| copy_failed(table, e))?;
            self.text.clear();
        }
        Ok(())
    }

    async fn finish(mut self) -> anyhow::Result<u64> {
        let table = self.table;
        if !self.text.is_empty() {
            self.copy
                .write(self.text.as_bytes())
                .await
                .map_err(|e| copy_failed(table, e))?;
        }
        self.copy
            .finish()
            .await
            .map_err(|e| copy_failed(table, e))?;
        Ok(self.rows)
    }
}

fn copy_failed(table: &str, e: slipstream_pg::Error) -> anyhow::Error {
    anyhow::anyhow!("COPY into soe.{table} failed: {e}")
}

const CLASSES: &[&str] = &["Occasional", "Regular", "Business", "Prime"];
const CARD_TYPES: &[&str] = &["Visa", "MasterCard", "Amex"];

fn one<'a>(rng: &mut SmallRng, from: &[&'a str]) -> &'a str {
    from[rng.random_range(0..from.len())]
}

async fn load_customers(
    client: &mut Client,
    sizes: Sizes,
    cancel: &SetupCancel,
) -> anyhow::Result<Vec<(String, u64)>> {
    let mut rng = SmallRng::seed_from_u64(1);
    let mut out = Vec::new();
    // One table at a time on this connection: customers, then their addresses, cards, logons.
    let mut t = Batch::open(client, cancel, "customers").await?;
    for id in 1..=sizes.customers {
        let (f, l) = (one(&mut rng, FIRST_NAMES), one(&mut rng, LAST_NAMES));
        let (lang, territory) = NLS[rng.random_range(0..NLS.len())];
        let _ = write!(
            t.text,
            "{id}\t{f}\t{l}\t{lang}\t{territory}\t{}.00\t{f}.{l}{id}@example.com\t{}\t{}\t{}\t\\N\t{}\tY\tN\t{id}\t{id}",
            rng.random_range(100..5000),
            rng.random_range(1..=sizes.sales_reps),
            date(rng.random_range(30..3650)),
            one(&mut rng, CLASSES),
            date(rng.random_range(6570..29200)),
        );
        t.row().await?;
    }
    out.push(("customers".into(), t.finish().await?));
    let mut t = Batch::open(client, cancel, "addresses").await?;
    for id in 1..=sizes.customers {
        let _ = write!(
            t.text,
            "{id}\t{id}\t{}\t{}\tHigh Street\t{}\t{}\t{}\tPC{} 1AA\t\\N",
            date(rng.random_range(30..3650)),
            rng.random_range(1..200),
            one(&mut rng, TOWNS),
            one(&mut rng, COUNTIES),
            one(&mut rng, COUNTRIES),
            id % 99
        );
        t.row().await?;
    }
    out.push(("addresses".into(), t.finish().await?));
    let mut t = Batch::open(client, cancel, "card_details").await?;
    for id in 1..=sizes.customers {
        let _ = write!(
            t.text,
            "{id}\t{id}\t{}\t{}\t{}\tY\t{}",
            one(&mut rng, CARD_TYPES),
            rng.random_range(4_000_000_000_000_000i64..4_999_999_999_999_999),
            date(-rng.random_range(30..1500)),
            rng.random_range(100..1000)
        );
        t.row().await?;
    }
    out.push(("card_details".into(), t.finish().await?));
    let mut t = Batch::open(client, cancel, "logon").await?;
    for id in 1..=sizes.customers {
        let _ = write!(
            t.text,
            "{id}\t{id}\t{}",
            timestamp(rng.random_range(0..86_400 * 365))
        );
        t.row().await?;
    }
    out.push(("logon".into(), t.finish().await?));
    Ok(out)
}

async fn load_catalogue(
    client: &mut Client,
    sizes: Sizes,
    cancel: &SetupCancel,
) -> anyhow::Result<Vec<(String, u64)>> {
    let mut rng = SmallRng::seed_from_u64(2);
    let mut out = Vec::new();
    let mut t = Batch::open(client, cancel, "warehouses").await?;
    for w in 1..=sizes.warehouses {
        let _ = write!(t.text, "{w}\tWarehouse {w}\t{}", 1000 + w % 100);
        t.row().await?;
    }
    out.push(("warehouses".into(), t.finish().await?));
    let mut t = Batch::open(client, cancel, "product_information").await?;
    for p in 1..=sizes.products {
        let cents = list_price_cents(p);
        let _ = write!(
            t.text,
            "{p}\tproduct {p}\tthe {p}th product\t{}\t{}\t{} months\t{}\torderable\t{}\t{}\thttp://example.com/p/{p}",
            p % CATEGORIES + 1,
            rng.random_range(1..5),
            rng.random_range(0..36),
            rng.random_range(1..100),
            money(cents),
            money(cents * 8 / 10),
        );
        t.row().await?;
    }
    out.push(("product_information".into(), t.finish().await?));
    let mut t = Batch::open(client, cancel, "product_descriptions").await?;
    for p in 1..=sizes.products {
        let _ = write!(t.text, "{p}\tUS\tproduct {p}\tthe {p}th product, described");
        t.row().await?;
    }
    out.push(("product_descriptions".into(), t.finish().await?));
    let mut t = Batch::open(client, cancel, "inventories").await?;
    for p in 1..=sizes.products {
        for w in 1..=sizes.warehouses {
            let _ = write!(t.text, "{p}\t{w}\t{}", rng.random_range(100..=1000));
            t.row().await?;
        }
    }
    out.push(("inventories".into(), t.finish().await?));
    Ok(out)
}

/// Orders and their lines together, so each order's total is the sum of its lines.
async fn load_orders(
    orders_client: &mut Client,
    items_client: &mut Client,
    sizes: Sizes,
    cancel: &SetupCancel,
) -> anyhow::Result<Vec<(String, u64)>> {
    let mut rng = SmallRng::seed_from_u64(3);
    let mut orders = Batch::open(orders_client, cancel, "orders").await?;
    let mut items = Batch::open(items_client, cancel, "order_items").await?;
    for id in 1..=sizes.orders {
        let lines = rng.random_range(1..=MAX_LINES);
        let mut total = 0i64;
        for line in 1..=lines {
            let product = rng.random_range(1..=sizes.products);
            let quantity = rng.random_range(1..=10);
            let cents = list_price_cents(product);
            total += cents * i64::from(quantity);
            let _ = write!(
                items.text,
                "{id}\t{line}\t{product}\t{}\t{quantity}\t\\N\t\\N\tNone\tNew\t{}\t\\N",
                money(cents),
                rng.random_range(1..100)
            );
            items.row().await?;
        }
        let customer = rng.random_range(1..=sizes.customers);
        // Most loaded orders are complete (10); a fifth wait to be processed (0-4).
        let status = if rng.random_bool(0.8) {
            10
        } else {
            rng.random_range(0..5)
        };
        let _ = write!(
            orders.text,
            "{id}\t{}\tdirect\t{customer}\t{status}\t{}\t{}\t\\N\t{}\tStandard\t5\tship_asap\t{customer}\tRegular\t{customer}\t{customer}",
            timestamp(rng.random_range(0..86_400 * 365)),
            money(total),
            rng.random_range(1..=sizes.sales_reps),
            rng.random_range(1..=sizes.warehouses),
        );
        orders.row().await?;
    }
    let n_items = items.finish().await?;
    let n_orders = orders.finish().await?;
    Ok(vec![
        ("orders".into(), n_orders),
        ("order_items".into(), n_items),
    ])
}

fn money(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

/// A date `days_ago` days before today (negative: in the future).
fn date(days_ago: i64) -> String {
    (chrono::Utc::now() - chrono::Duration::days(days_ago))
        .format("%Y-%m-%d")
        .to_string()
}

/// A timestamp `seconds_ago` seconds before now.
fn timestamp(seconds_ago: i64) -> String {
    (chrono::Utc::now() - chrono::Duration::seconds(seconds_ago))
        .format("%Y-%m-%d %H:%M:%S+00")
        .to_string()
}

//! Order Entry against Swingbench's SOE transactions, one type at a time on a real cluster:
//! what each type reads and writes, so a drift from Swingbench shows up as a failing test.

use std::future::pending;
use std::time::{Duration, Instant};

use slipstream_bench::{self as bench, RunConfig, Workload, order_entry};
use slipstream_pg::Client;
use slipstream_testkit::Cluster;

/// What one type did in a run: successes and the statements it counted.
#[derive(Debug)]
struct Ran {
    ok: u64,
    selects: u64,
    inserts: u64,
    updates: u64,
    commits: u64,
}

struct Soe {
    _cluster: Cluster,
    url: String,
    rt: tokio::runtime::Runtime,
    client: Client,
}

impl Soe {
    /// A cluster with Order Entry loaded at scale 0.01 (10,000 customers).
    fn load() -> Soe {
        let cluster = Cluster::start().unwrap();
        let url = cluster.url();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(order_entry::setup(&url, 0.01, |_| {})).unwrap();
        let client = rt.block_on(slipstream_pg::connect(&url)).unwrap();
        Soe {
            _cluster: cluster,
            url,
            rt,
            client,
        }
    }

    fn int(&mut self, sql: &str) -> i64 {
        self.rt
            .block_on(self.client.query_one(sql, &[]))
            .unwrap()
            .get(0)
            .unwrap()
    }

    /// Runs `only` (every other type at weight 0) with `users` users for `secs` seconds.
    fn run_only(&mut self, only: &str, users: usize, secs: f64) -> Ran {
        let mut w: Workload = order_entry::workload();
        for (name, _) in w.weights() {
            w.set_weight(&name, u32::from(name == only)).unwrap();
        }
        let mut c = RunConfig::new(Some(self.url.clone()));
        c.users = users;
        c.duration = Duration::from_secs_f64(secs);
        c.warmup = Duration::ZERO;
        c.seed = 7;
        let run = self
            .rt
            .block_on(bench::run(&w, &c, pending::<()>()))
            .unwrap();
        let t = run
            .transactions
            .into_iter()
            .find(|t| t.name == only)
            .unwrap();
        assert!(t.ok >= 5, "{only} ran only {} times", t.ok);
        assert_eq!(t.failed, 0, "{only}: {:?}", t.failures);
        Ran {
            ok: t.ok,
            selects: t.statements.selects,
            inserts: t.statements.inserts,
            updates: t.statements.updates,
            commits: t.statements.commits,
        }
    }

    fn check(&mut self) {
        let broken = self
            .rt
            .block_on(order_entry::check(&mut self.client))
            .unwrap();
        assert!(broken.is_empty(), "{broken:?}");
    }

    /// Waits (bounded) until `sql` returns more than `before`: the statistics collector
    /// publishes a backend's counters when it goes idle or exits, not at once.
    fn rises_above(&mut self, sql: &str, before: i64) -> i64 {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            self.rt
                .block_on(self.client.batch_execute("SELECT pg_stat_clear_snapshot()"))
                .unwrap();
            let now = self.int(sql);
            if now > before || Instant::now() > until {
                return now;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

const NAME_INDEX_SCANS: &str = "SELECT idx_scan FROM pg_stat_user_indexes WHERE schemaname = 'soe' AND indexrelname = 'cust_name_ix'";

#[test]
fn browse_orders_updates_an_order_line_and_the_order_total() {
    let mut soe = Soe::load();
    let quantity0 = soe.int("SELECT sum(quantity) FROM soe.order_items");
    let total0 = soe.int("SELECT (sum(order_total) * 100)::int8 FROM soe.orders");
    let logons0 = soe.int("SELECT count(*) FROM soe.logon");
    let t = soe.run_only("browse-orders", 2, 1.5);
    // Swingbench's BrowseAndUpdateOrders: a logon committed on its own, then one order line's
    // quantity up by one and its order's total up by the line's unit price.
    assert!(t.updates > 0, "{t:?}");
    assert_eq!(t.updates % 2, 0, "{t:?}");
    let lines_updated = (t.updates / 2) as i64;
    assert_eq!(
        soe.int("SELECT sum(quantity) FROM soe.order_items") - quantity0,
        lines_updated
    );
    assert!(soe.int("SELECT (sum(order_total) * 100)::int8 FROM soe.orders") > total0);
    assert_eq!(
        soe.int("SELECT count(*) FROM soe.logon") - logons0,
        t.inserts as i64
    );
    soe.check();
}

#[test]
fn update_customer_details_finds_customers_by_name() {
    let mut soe = Soe::load();
    let scans0 = soe.int(NAME_INDEX_SCANS);
    let addresses0 = soe.int("SELECT count(*) FROM soe.addresses");
    let t = soe.run_only("update-customer-details", 2, 1.5);
    let scans = soe.rises_above(NAME_INDEX_SCANS, scans0);
    assert!(
        scans > scans0,
        "cust_name_ix was never scanned ({scans0} -> {scans})"
    );
    // Every customer found by name gets a new address that becomes the preferred one.
    assert!(t.inserts > 0, "{t:?}");
    assert_eq!(
        soe.int("SELECT count(*) FROM soe.addresses") - addresses0,
        t.inserts as i64
    );
    assert_eq!(t.updates, t.inserts);
    soe.check();
}

#[test]
fn new_customers_get_varied_names_and_log_on_after_registering() {
    let mut soe = Soe::load();
    let customers0 = soe.int("SELECT max(customer_id) FROM soe.customers");
    let t = soe.run_only("customer-registration", 2, 1.5);
    let new = soe.int(&format!(
        "SELECT count(*) FROM soe.customers WHERE customer_id > {customers0}"
    ));
    assert_eq!(new, t.ok as i64);
    let names = soe.int(&format!(
        "SELECT count(DISTINCT (cust_first_name, cust_last_name)) FROM soe.customers \
         WHERE customer_id > {customers0}"
    ));
    assert!(
        names * 2 >= new,
        "{new} new customers share only {names} names"
    );
    // Registration commits, then the logon commits on its own (Swingbench's NewCustomerProcess).
    assert_eq!(t.commits, 2 * t.ok);
    assert_eq!(t.inserts, 4 * t.ok);
    assert_eq!(
        soe.int(&format!(
            "SELECT count(*) FROM soe.logon WHERE customer_id > {customers0}"
        )),
        t.ok as i64
    );
    soe.check();
}

#[test]
fn browse_products_writes_nothing_and_reads_product_descriptions() {
    let mut soe = Soe::load();
    let logons0 = soe.int("SELECT count(*) FROM soe.logon");
    let reads = "SELECT coalesce(idx_scan, 0) + coalesce(seq_scan, 0) FROM pg_stat_user_tables \
                 WHERE schemaname = 'soe' AND relname = 'product_descriptions'";
    let reads0 = soe.int(reads);
    let t = soe.run_only("browse-products", 2, 1.5);
    assert_eq!(t.inserts + t.updates, 0, "{t:?}");
    assert_eq!(soe.int("SELECT count(*) FROM soe.logon"), logons0);
    let now = soe.rises_above(reads, reads0);
    assert!(now > reads0, "product_descriptions was never read");
}

#[test]
fn process_orders_moves_one_order_on_per_transaction() {
    let mut soe = Soe::load();
    let processed = "SELECT count(*) FROM soe.orders WHERE order_status BETWEEN 5 AND 9";
    let processed0 = soe.int(processed);
    // One user: no two transactions can pick the same pending order.
    let t = soe.run_only("process-orders", 1, 1.5);
    assert_eq!(soe.int(processed) - processed0, t.updates as i64, "{t:?}");
    assert_eq!(t.updates, t.commits);
    soe.check();
}

#[test]
fn order_products_browses_several_categories_and_logs_on_in_its_own_transaction() {
    let mut soe = Soe::load();
    let orders0 = soe.int("SELECT count(*) FROM soe.orders");
    let logons0 = soe.int("SELECT count(*) FROM soe.logon");
    let t = soe.run_only("order-products", 2, 2.0);
    let logons = soe.int("SELECT count(*) FROM soe.logon") - logons0;
    let orders = soe.int("SELECT count(*) FROM soe.orders") - orders0;
    // A logon per transaction, committed whether or not an order follows.
    assert_eq!(logons, t.ok as i64);
    assert_eq!(t.commits as i64, logons + orders);
    // Customer, address and card, then 1-23 category pages and the order's sequence value:
    // more than six selects a transaction on average, where one page would give five.
    assert!(
        t.selects > 6 * t.ok,
        "{} selects in {} transactions",
        t.selects,
        t.ok
    );
    soe.check();
}

//! The Order Entry schema: Swingbench's SOE tables in a schema of their own (`soe`), so setup
//! never touches a user's tables. Indexes are built after the load (faster than maintaining
//! them row by row), one statement each so they can be built in parallel.

/// The schema every Order Entry object lives in.
pub const SCHEMA: &str = "soe";

/// Drops and recreates the schema and its tables, without indexes.
pub(crate) const TABLES: &str = r#"
DROP SCHEMA IF EXISTS soe CASCADE;
CREATE SCHEMA soe;
CREATE TABLE soe.customers (
    customer_id        bigint NOT NULL,
    cust_first_name    text NOT NULL,
    cust_last_name     text NOT NULL,
    nls_language       text,
    nls_territory      text,
    credit_limit       numeric(9,2),
    cust_email         text,
    account_mgr_id     bigint,
    customer_since     date,
    customer_class     text,
    suggestions        text,
    dob                date,
    mailshot           text,
    partner_mailshot   text,
    preferred_address  bigint,
    preferred_card     bigint
);
CREATE TABLE soe.addresses (
    address_id         bigint NOT NULL,
    customer_id        bigint NOT NULL,
    date_created       date NOT NULL,
    house_no_or_name   text,
    street_name        text,
    town               text,
    county             text,
    country            text,
    post_code          text,
    zip_code           text
);
CREATE TABLE soe.card_details (
    card_id            bigint NOT NULL,
    customer_id        bigint NOT NULL,
    card_type          text NOT NULL,
    card_number        bigint NOT NULL,
    expiry_date        date NOT NULL,
    is_valid           text NOT NULL,
    security_code      integer
);
CREATE TABLE soe.warehouses (
    warehouse_id       integer NOT NULL,
    warehouse_name     text,
    location_id        integer
);
CREATE TABLE soe.product_information (
    product_id          integer NOT NULL,
    product_name        text NOT NULL,
    product_description text,
    category_id         integer NOT NULL,
    weight_class        integer,
    warranty_period     interval,
    supplier_id         integer,
    product_status      text,
    list_price          numeric(8,2) NOT NULL,
    min_price           numeric(8,2),
    catalog_url         text
);
CREATE TABLE soe.product_descriptions (
    product_id             integer NOT NULL,
    language_id            text NOT NULL,
    translated_name        text NOT NULL,
    translated_description text NOT NULL
);
-- Swingbench's `products` view: the catalogue in the session's language. Every product read
-- goes through it, so product_descriptions is read as in SOE. Oracle takes the language from
-- the session (sys_context('USERENV','LANG')); PostgreSQL has no such setting, so it is 'US',
-- the language the loader describes products in.
CREATE VIEW soe.products AS
SELECT i.product_id,
       d.language_id,
       coalesce(d.translated_name, i.product_name) AS product_name,
       i.category_id,
       coalesce(d.translated_description, i.product_description) AS product_description,
       i.weight_class,
       i.warranty_period,
       i.supplier_id,
       i.product_status,
       i.list_price,
       i.min_price,
       i.catalog_url
FROM soe.product_information i
LEFT JOIN soe.product_descriptions d ON d.product_id = i.product_id AND d.language_id = 'US';
CREATE TABLE soe.inventories (
    product_id         integer NOT NULL,
    warehouse_id       integer NOT NULL,
    quantity_on_hand   integer NOT NULL CHECK (quantity_on_hand >= 0)
);
CREATE TABLE soe.orders (
    order_id               bigint NOT NULL,
    order_date             timestamptz NOT NULL,
    order_mode             text,
    customer_id            bigint NOT NULL,
    order_status           integer NOT NULL,
    order_total            numeric(12,2) NOT NULL,
    sales_rep_id           integer,
    promotion_id           integer,
    warehouse_id           integer NOT NULL,
    delivery_type          text,
    cost_of_delivery       integer,
    wait_till_all_available text,
    delivery_address_id    bigint,
    customer_class         text,
    card_id                bigint,
    invoice_address_id     bigint
);
CREATE TABLE soe.order_items (
    order_id           bigint NOT NULL,
    line_item_id       integer NOT NULL,
    product_id         integer NOT NULL,
    unit_price         numeric(8,2) NOT NULL,
    quantity           integer NOT NULL CHECK (quantity > 0),
    dispatch_date      timestamptz,
    return_date        timestamptz,
    gift_wrap          text,
    condition          text,
    supplier_id        integer,
    estimated_delivery timestamptz
);
CREATE TABLE soe.logon (
    logon_id           bigint NOT NULL,
    customer_id        bigint NOT NULL,
    logon_date         timestamptz NOT NULL
);
CREATE TABLE soe.meta (
    scale              float8 NOT NULL,
    customers          bigint NOT NULL,
    warehouses         integer NOT NULL,
    products           integer NOT NULL,
    sales_reps         integer NOT NULL,
    loaded_at          timestamptz NOT NULL DEFAULT now()
);
"#;

/// Keys, indexes and constraints, built after the load. Each entry is one statement.
pub(crate) const INDEXES: &[&str] = &[
    "ALTER TABLE soe.customers ADD PRIMARY KEY (customer_id)",
    "CREATE INDEX cust_email_ix ON soe.customers (lower(cust_email))",
    "CREATE INDEX cust_name_ix ON soe.customers (lower(cust_last_name), lower(cust_first_name))",
    "CREATE INDEX cust_account_manager_ix ON soe.customers (account_mgr_id)",
    "ALTER TABLE soe.addresses ADD PRIMARY KEY (address_id)",
    "CREATE INDEX address_cust_ix ON soe.addresses (customer_id)",
    "ALTER TABLE soe.card_details ADD PRIMARY KEY (card_id)",
    "CREATE INDEX carddetails_cust_ix ON soe.card_details (customer_id)",
    "ALTER TABLE soe.warehouses ADD PRIMARY KEY (warehouse_id)",
    "ALTER TABLE soe.product_information ADD PRIMARY KEY (product_id)",
    "CREATE INDEX prod_category_ix ON soe.product_information (category_id)",
    "ALTER TABLE soe.product_descriptions ADD PRIMARY KEY (product_id, language_id)",
    "CREATE INDEX prd_desc_name_ix ON soe.product_descriptions (translated_name)",
    "ALTER TABLE soe.inventories ADD PRIMARY KEY (product_id, warehouse_id)",
    "CREATE INDEX inv_warehouse_ix ON soe.inventories (warehouse_id)",
    "ALTER TABLE soe.orders ADD PRIMARY KEY (order_id)",
    "CREATE INDEX ord_customer_ix ON soe.orders (customer_id)",
    "CREATE INDEX ord_sales_rep_ix ON soe.orders (sales_rep_id)",
    "CREATE INDEX ord_warehouse_ix ON soe.orders (warehouse_id, order_status)",
    "CREATE INDEX ord_order_date_ix ON soe.orders (order_date)",
    "ALTER TABLE soe.order_items ADD PRIMARY KEY (order_id, line_item_id)",
    "CREATE INDEX item_product_ix ON soe.order_items (product_id)",
    "CREATE INDEX logon_customer_ix ON soe.logon (customer_id)",
];

/// Sequences, created after the load so they start past the loaded keys.
pub(crate) fn sequences(customers: i64, orders: i64, logons: i64) -> String {
    format!(
        "CREATE SEQUENCE soe.customer_seq START {c};
         CREATE SEQUENCE soe.address_seq START {c};
         CREATE SEQUENCE soe.card_details_seq START {c};
         CREATE SEQUENCE soe.orders_seq START {o};
         CREATE SEQUENCE soe.logon_seq START {l};",
        c = customers + 1,
        o = orders + 1,
        l = logons + 1,
    )
}

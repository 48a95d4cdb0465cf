//! Connection labels (Oracle UCP's labeling): a borrower asks for a connection already set up a
//! certain way, and the pool lends the one that is cheapest to turn into it.

use std::collections::BTreeMap;
use std::future::Future;

/// What a connection has been set up for: names and values chosen by the application (e.g.
/// `search_path = tenant_7`).
pub type Labels = BTreeMap<String, String>;

/// The cost never to pay: a connection at this cost is not reused for the request; the pool
/// closes it and lends a new one instead.
pub const TOO_COSTLY: u32 = u32::MAX;

/// How to compare and configure labeled connections; see [`crate::Pool::get_labeled`].
///
/// ```
/// use slipstream_pool::{Labeling, Labels, TOO_COSTLY};
///
/// /// Connections carry a `tenant`; switching tenants costs a `SET` (here, on a number).
/// struct Tenants;
/// impl Labeling<u64> for Tenants {
///     fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
///         match (wanted.get("tenant"), current.get("tenant")) {
///             (w, c) if w == c => 0,         // exactly what was asked for
///             (_, None) => 1,                // a fresh connection: set it up
///             (Some(_), Some(_)) => 10,      // another tenant's: reconfigure
///             (None, Some(_)) => TOO_COSTLY, // cannot unset a tenant: never reuse
///         }
///     }
///     async fn configure(&self, wanted: &Labels, conn: &mut u64) -> bool {
///         *conn = wanted["tenant"].parse().unwrap_or(0);
///         true
///     }
/// }
/// ```
pub trait Labeling<C>: Send + Sync {
    /// The cost of turning a connection labeled `current` into one labeled `wanted`: 0 for an
    /// exact match, [`TOO_COSTLY`] for never. The pool lends the cheapest idle connection.
    ///
    /// ```
    /// use slipstream_pool::{Labeling, Labels};
    /// /// Any connection will do for a reader, but a writer's must not be a reader's.
    /// struct Roles;
    /// impl Labeling<u64> for Roles {
    ///     fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
    ///         u32::from(wanted != current)
    ///     }
    ///     async fn configure(&self, _wanted: &Labels, _conn: &mut u64) -> bool { true }
    /// }
    /// let label = |v: &str| Labels::from([("role".to_string(), v.to_string())]);
    /// assert_eq!(Roles.cost(&label("reader"), &label("reader")), 0);
    /// assert_eq!(Roles.cost(&label("writer"), &label("reader")), 1);
    /// ```
    fn cost(&self, wanted: &Labels, current: &Labels) -> u32;

    /// Sets `conn` up for `wanted` (called when the lent connection's cost is above 0); the
    /// pool then labels it `wanted`. `false` closes the connection and the borrow tries again,
    /// once: a second `false` fails the borrow with [`crate::PoolError::Labeling`].
    /// A configure that does not finish (the borrow dropped part-way, a panic) leaves the
    /// connection half set up, so it is closed on return too, not lent under its old labels.
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(0) }
    /// # }
    /// use slipstream_pool::{Labeling, Labels, Pool};
    /// /// The connection's number is its tenant (with PostgreSQL: `SET search_path`).
    /// struct Tenants;
    /// impl Labeling<u64> for Tenants {
    ///     fn cost(&self, wanted: &Labels, current: &Labels) -> u32 { u32::from(wanted != current) }
    ///     async fn configure(&self, wanted: &Labels, conn: &mut u64) -> bool {
    ///         match wanted["tenant"].parse() {
    ///             Ok(t) => { *conn = t; true }
    ///             Err(_) => false, // closed; a second failure fails the borrow
    ///         }
    ///     }
    /// }
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// let pool = Pool::builder(Numbers).build();
    /// let wanted = Labels::from([("tenant".to_string(), "7".to_string())]);
    /// let conn = pool.get_labeled(&wanted, &Tenants).await?;
    /// assert_eq!((*conn, conn.labels()["tenant"].as_str()), (7, "7"));
    /// assert_eq!(pool.stats().label_configures, 1);
    /// # Ok(()) }
    /// ```
    fn configure(&self, wanted: &Labels, conn: &mut C) -> impl Future<Output = bool> + Send;
}

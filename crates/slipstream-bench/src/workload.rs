//! A workload: named transaction types with weights, each made fresh for every user.

use std::fmt;
use std::sync::Arc;

use rand::Rng;
use rand::rngs::SmallRng;

use crate::transaction::{DynTransaction, Transaction};

type Factory = Arc<dyn Fn() -> Box<dyn DynTransaction> + Send + Sync>;

/// One transaction type in a workload.
#[derive(Clone)]
pub(crate) struct Kind {
    pub(crate) name: String,
    pub(crate) weight: u32,
    pub(crate) make: Factory,
}

/// A weighted mix of transaction types: what `slipstream bench` runs.
///
/// Each user gets its own instance of every type (made by the closure), so instances can keep
/// prepared statements. A weight of 0 keeps a type listed but never picked.
///
/// ```
/// use slipstream_bench::{Session, Transaction, TxError, Workload};
///
/// struct Noop;
/// impl Transaction for Noop {
///     async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> { Ok(()) }
/// }
///
/// let mut w = Workload::new("noop")
///     .transaction("a", 3, || Noop)
///     .transaction("b", 1, || Noop)
///     .without_database();
/// w.set_weight("b", 0).unwrap();
/// assert_eq!(w.weights(), vec![("a".to_string(), 3), ("b".to_string(), 0)]);
/// assert!(w.set_weight("c", 1).is_err());
/// ```
#[derive(Clone)]
pub struct Workload {
    name: String,
    pub(crate) kinds: Vec<Kind>,
    needs_database: bool,
}

impl fmt::Debug for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workload")
            .field("name", &self.name)
            .field("weights", &self.weights())
            .finish()
    }
}

impl Workload {
    /// An empty workload called `name`.
    ///
    /// ```
    /// let w = slipstream_bench::Workload::new("checkout");
    /// assert_eq!(w.name(), "checkout");
    /// assert!(w.weights().is_empty() && w.needs_database());
    /// ```
    pub fn new(name: impl Into<String>) -> Workload {
        Workload {
            name: name.into(),
            kinds: Vec::new(),
            needs_database: true,
        }
    }

    /// Adds a transaction type with its default weight.
    ///
    /// ```
    /// # use slipstream_bench::{Session, Transaction, TxError, Workload};
    /// # struct Noop;
    /// # impl Transaction for Noop {
    /// #     async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> { Ok(()) }
    /// # }
    /// let w = Workload::new("shop")
    ///     .transaction("browse", 9, || Noop)
    ///     .transaction("buy", 1, || Noop);
    /// assert_eq!(w.weights(), [("browse".to_string(), 9), ("buy".to_string(), 1)]);
    /// ```
    pub fn transaction<T: Transaction>(
        mut self,
        name: impl Into<String>,
        weight: u32,
        make: impl Fn() -> T + Send + Sync + 'static,
    ) -> Workload {
        self.kinds.push(Kind {
            name: name.into(),
            weight,
            make: Arc::new(move || Box::new(make()) as Box<dyn DynTransaction>),
        });
        self
    }

    /// Users run without a connection (to measure the runner itself).
    ///
    /// ```
    /// # use slipstream_bench::{Session, Transaction, TxError, Workload};
    /// # struct Noop;
    /// # impl Transaction for Noop {
    /// #     async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> { Ok(()) }
    /// # }
    /// let w = Workload::new("noop").transaction("noop", 1, || Noop).without_database();
    /// assert!(!w.needs_database());
    /// ```
    pub fn without_database(mut self) -> Workload {
        self.needs_database = false;
        self
    }

    /// The workload's name, as written into results.
    ///
    /// ```
    /// assert_eq!(slipstream_bench::order_entry::workload().name(), "order-entry");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether users need a connection.
    ///
    /// ```
    /// assert!(slipstream_bench::order_entry::workload().needs_database());
    /// ```
    pub fn needs_database(&self) -> bool {
        self.needs_database
    }

    /// Each type's name and weight, in order.
    ///
    /// ```
    /// # use slipstream_bench::{Session, Transaction, TxError, Workload};
    /// # struct Noop;
    /// # impl Transaction for Noop {
    /// #     async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> { Ok(()) }
    /// # }
    /// let w = Workload::new("w").transaction("a", 2, || Noop).transaction("b", 0, || Noop);
    /// assert_eq!(w.weights(), [("a".to_string(), 2), ("b".to_string(), 0)]);
    /// ```
    pub fn weights(&self) -> Vec<(String, u32)> {
        self.kinds
            .iter()
            .map(|k| (k.name.clone(), k.weight))
            .collect()
    }

    /// Changes one type's weight; an unknown name is an error listing the known ones.
    ///
    /// ```
    /// # use slipstream_bench::{Session, Transaction, TxError, Workload};
    /// # struct Noop;
    /// # impl Transaction for Noop {
    /// #     async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> { Ok(()) }
    /// # }
    /// let mut w = Workload::new("w").transaction("a", 1, || Noop);
    /// w.set_weight("a", 5).unwrap();
    /// assert_eq!(w.weights()[0].1, 5);
    /// assert_eq!(w.set_weight("z", 1).unwrap_err(), "workload w has no transaction `z`; it has: a");
    /// ```
    pub fn set_weight(&mut self, name: &str, weight: u32) -> Result<(), String> {
        match self.kinds.iter_mut().find(|k| k.name == name) {
            Some(k) => {
                k.weight = weight;
                Ok(())
            }
            None => Err(format!(
                "workload {} has no transaction `{name}`; it has: {}",
                self.name,
                self.kinds
                    .iter()
                    .map(|k| k.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// Applies a `--mix` string: `name=weight,name=weight` (types not named keep their weight).
    ///
    /// ```
    /// # use slipstream_bench::{Session, Transaction, TxError, Workload};
    /// # struct Noop;
    /// # impl Transaction for Noop {
    /// #     async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> { Ok(()) }
    /// # }
    /// let mut w = Workload::new("w").transaction("a", 1, || Noop).transaction("b", 1, || Noop);
    /// w.apply_mix("a=9, b=0").unwrap();
    /// assert_eq!(w.weights()[0].1, 9);
    /// assert!(w.apply_mix("a=lots").is_err());
    /// assert!(w.apply_mix(" , ").is_err()); // names nothing: a script's empty variable
    /// ```
    pub fn apply_mix(&mut self, mix: &str) -> Result<(), String> {
        let mut parts = mix
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .peekable();
        // `--mix "$MIX"` with the variable unset would otherwise run the default mix as if
        // the one asked for.
        if parts.peek().is_none() {
            return Err(format!(
                "--mix `{mix}` names no transaction type: give NAME=WEIGHT[,NAME=WEIGHT...], or leave --mix out for the workload's own weights"
            ));
        }
        for part in parts {
            let (name, weight) = part.split_once('=').ok_or_else(|| {
                format!("--mix entry `{part}` is not NAME=WEIGHT (e.g. browse-products=50)")
            })?;
            let weight: u32 = weight.trim().parse().map_err(|_| {
                format!(
                    "--mix entry `{part}`: the weight must be a whole number from 0 to {}",
                    u32::MAX
                )
            })?;
            self.set_weight(name.trim(), weight)?;
        }
        self.check()
    }

    /// Fails when nothing could ever be picked, or when two types share a name (results are
    /// kept by name: the two would be one type in the per-second series, and the result a
    /// type listed twice, which reading it refuses).
    pub(crate) fn check(&self) -> Result<(), String> {
        for (i, k) in self.kinds.iter().enumerate() {
            if self.kinds[..i].iter().any(|o| o.name == k.name) {
                return Err(format!(
                    "workload {} has two transaction types named {:?}: give each its own name",
                    self.name, k.name
                ));
            }
        }
        // Order Entry's users pin their sessions' search_path (order_entry::OWN_SEARCH_PATH),
        // which every type of the workload shares: a type of the caller's added to it would
        // run its unqualified names against pg_catalog alone, not the application's path.
        if self.name == crate::order_entry::NAME {
            let own = crate::order_entry::workload().weights();
            let foreign: Vec<&str> = self
                .kinds
                .iter()
                .filter(|k| !own.iter().any(|(name, _)| *name == k.name))
                .map(|k| k.name.as_str())
                .collect();
            if !foreign.is_empty() {
                return Err(format!(
                    "workload {} holds transaction types of its own ({}) beside Order Entry's: \
                     Order Entry's users pin their sessions' search_path to pg_catalog, pg_temp, \
                     and these would share them; run them as a workload of another name (a run \
                     of their own, beside Order Entry's)",
                    self.name,
                    foreign.join(", ")
                ));
            }
        }
        if self.kinds.iter().all(|k| k.weight == 0) {
            return Err(format!(
                "workload {} has no transaction with a weight above 0",
                self.name
            ));
        }
        Ok(())
    }

    pub(crate) fn picker(&self) -> Picker {
        let mut cumulative = Vec::with_capacity(self.kinds.len());
        let mut total = 0u64;
        for k in &self.kinds {
            total += u64::from(k.weight);
            cumulative.push(total);
        }
        Picker { cumulative, total }
    }
}

/// Draws a transaction type with probability proportional to its weight.
#[derive(Debug, Clone)]
pub(crate) struct Picker {
    cumulative: Vec<u64>,
    total: u64,
}

impl Picker {
    pub(crate) fn pick(&self, rng: &mut SmallRng) -> usize {
        let x = rng.random_range(0..self.total);
        // Few types (Order Entry has nine): a linear scan beats a binary search.
        self.cumulative
            .iter()
            .position(|&c| x < c)
            .unwrap_or(self.cumulative.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Session, TxError};

    struct Noop;
    impl Transaction for Noop {
        async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
            Ok(())
        }
    }

    /// A weight past u32 was refused as not "a whole number >= 0", which it is: the error
    /// now gives the range.
    #[test]
    fn a_mix_weight_out_of_range_is_refused_naming_the_range() {
        let mut w = Workload::new("w").transaction("a", 1, || Noop);
        let e = w.apply_mix("a=5000000000").unwrap_err();
        assert!(e.contains("from 0 to 4294967295"), "{e}");
        w.apply_mix("a=4294967295").unwrap();
        assert_eq!(w.weights(), [("a".to_string(), u32::MAX)]);
    }
}

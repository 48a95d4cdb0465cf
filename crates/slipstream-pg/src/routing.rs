//! Choosing among the hosts of a multi-host configuration, as libpq 16 does:
//! `target_session_attrs` decides which servers are acceptable and `load_balance_hosts` the
//! order in which they are tried.
//!
//! What must stay true (libpq 16, `fe-connect.c`, `CONNECTION_CHECK_TARGET`):
//! - `read-write` / `read-only` look at the `default_transaction_read_only` and `in_hot_standby`
//!   parameters the server reports (PostgreSQL 14+); an older server is asked
//!   `SHOW transaction_read_only`.
//! - `primary` / `standby` / `prefer-standby` look at `in_hot_standby`; an older server is asked
//!   `SELECT pg_catalog.pg_is_in_recovery()`.
//! - `prefer-standby` tries every host for a standby first, then every host again accepting any.
//! - A server that does not fit is closed politely (Terminate) and the next host is tried.

use std::str::FromStr;

use crate::{Client, Error, SimpleQueryMessage};

/// libpq's `target_session_attrs`: which server of a multi-host list a connection may settle on.
///
/// ```
/// use slipstream_pg::{Config, TargetSessionAttrs};
/// let config: Config = "host=db1,db2 target_session_attrs=read-write".parse()?;
/// assert_eq!(config.get_target_session_attrs(), TargetSessionAttrs::ReadWrite);
/// # Ok::<(), slipstream_pg::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TargetSessionAttrs {
    /// Any server that accepts the connection (the default).
    #[default]
    Any,
    /// A session that accepts writes: not a hot standby, `default_transaction_read_only` off.
    ReadWrite,
    /// A read-only session: a hot standby, or `default_transaction_read_only` on.
    ReadOnly,
    /// A server not in hot standby.
    Primary,
    /// A server in hot standby.
    Standby,
    /// A standby if any host is one, otherwise any server.
    PreferStandby,
}

impl FromStr for TargetSessionAttrs {
    type Err = Error;
    fn from_str(s: &str) -> Result<TargetSessionAttrs, Error> {
        Ok(match s.trim() {
            "any" => TargetSessionAttrs::Any,
            "read-write" => TargetSessionAttrs::ReadWrite,
            "read-only" => TargetSessionAttrs::ReadOnly,
            "primary" => TargetSessionAttrs::Primary,
            "standby" => TargetSessionAttrs::Standby,
            "prefer-standby" => TargetSessionAttrs::PreferStandby,
            other => {
                return Err(Error::config(format!(
                    "invalid target_session_attrs `{other}`: use any, read-write, read-only, \
                     primary, standby or prefer-standby"
                )));
            }
        })
    }
}

impl TargetSessionAttrs {
    /// The requirement of each pass over the host list, in order.
    pub(crate) fn passes(self) -> &'static [TargetSessionAttrs] {
        match self {
            TargetSessionAttrs::PreferStandby => {
                &[TargetSessionAttrs::Standby, TargetSessionAttrs::Any]
            }
            TargetSessionAttrs::Any => &[TargetSessionAttrs::Any],
            TargetSessionAttrs::ReadWrite => &[TargetSessionAttrs::ReadWrite],
            TargetSessionAttrs::ReadOnly => &[TargetSessionAttrs::ReadOnly],
            TargetSessionAttrs::Primary => &[TargetSessionAttrs::Primary],
            TargetSessionAttrs::Standby => &[TargetSessionAttrs::Standby],
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            TargetSessionAttrs::Any => "any",
            TargetSessionAttrs::ReadWrite => "read-write",
            TargetSessionAttrs::ReadOnly => "read-only",
            TargetSessionAttrs::Primary => "primary",
            TargetSessionAttrs::Standby => "standby",
            TargetSessionAttrs::PreferStandby => "prefer-standby",
        }
    }
}

/// libpq's `load_balance_hosts`: the order in which hosts are tried.
///
/// ```
/// use slipstream_pg::{Config, LoadBalanceHosts};
/// let config: Config = "host=db1,db2,db3 load_balance_hosts=random".parse()?;
/// assert_eq!(config.get_load_balance_hosts(), LoadBalanceHosts::Random);
/// # Ok::<(), slipstream_pg::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoadBalanceHosts {
    /// In the order given (the default).
    #[default]
    Disable,
    /// In a random order chosen for each connection, and each host's addresses shuffled too,
    /// so that many clients with the same string spread over the hosts.
    Random,
}

impl FromStr for LoadBalanceHosts {
    type Err = Error;
    fn from_str(s: &str) -> Result<LoadBalanceHosts, Error> {
        match s.trim() {
            "disable" => Ok(LoadBalanceHosts::Disable),
            "random" => Ok(LoadBalanceHosts::Random),
            other => Err(Error::config(format!(
                "invalid load_balance_hosts `{other}`: use disable or random"
            ))),
        }
    }
}

/// Why a connected server does not fit `want`, or `None` if it does. Asks the server only when
/// it did not report the parameters at startup (before PostgreSQL 14).
pub(crate) async fn mismatch(
    client: &mut Client,
    want: TargetSessionAttrs,
) -> Result<Option<&'static str>, Error> {
    match want {
        TargetSessionAttrs::Any => Ok(None),
        TargetSessionAttrs::ReadWrite | TargetSessionAttrs::ReadOnly => {
            let read_only = match (
                reported(client, "default_transaction_read_only"),
                reported(client, "in_hot_standby"),
            ) {
                (Some(default_ro), Some(hot_standby)) => default_ro || hot_standby,
                _ => ask(client, "SHOW transaction_read_only").await?,
            };
            Ok(match (want, read_only) {
                (TargetSessionAttrs::ReadWrite, true) => Some("session is read-only"),
                (TargetSessionAttrs::ReadOnly, false) => Some("session is not read-only"),
                _ => None,
            })
        }
        TargetSessionAttrs::Primary
        | TargetSessionAttrs::Standby
        | TargetSessionAttrs::PreferStandby => {
            let hot_standby = match reported(client, "in_hot_standby") {
                Some(v) => v,
                None => ask(client, "SELECT pg_catalog.pg_is_in_recovery()").await?,
            };
            Ok(match (want, hot_standby) {
                (TargetSessionAttrs::Primary, true) => Some("server is in hot standby mode"),
                (TargetSessionAttrs::Primary, false) => None,
                (_, false) => Some("server is not in hot standby mode"),
                (_, true) => None,
            })
        }
    }
}

fn reported(client: &Client, name: &str) -> Option<bool> {
    client.parameter(name).map(|v| v == "on")
}

/// A one-value boolean query (`on`/`t` are true), run with the simple protocol so that nothing
/// lands in the statement cache.
async fn ask(client: &mut Client, sql: &str) -> Result<bool, Error> {
    for message in client.simple_query(sql).await? {
        if let SimpleQueryMessage::Row(row) = message {
            return Ok(matches!(row.get(0)?, Some("on" | "t")));
        }
    }
    Err(Error::protocol(format!(
        "`{sql}` returned no row while checking target_session_attrs"
    )))
}

/// Shuffles `items` in place (Fisher-Yates). The seed comes from std's per-process random hash
/// keys mixed with a counter: good enough to spread load, never used for secrets.
pub(crate) fn shuffle<T>(items: &mut [T]) {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    // Relaxed: the counter only makes two seeds in one process differ; it orders nothing.
    hasher.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
    let mut state = hasher.finish() | 1;
    for i in (1..items.len()).rev() {
        // xorshift64: uniform enough for an index; the modulo bias is < 2^-50 for short lists.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let j = (state % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_libpq_value_parses_and_a_bad_one_lists_them() {
        for v in [
            "any",
            "read-write",
            "read-only",
            "primary",
            "standby",
            "prefer-standby",
        ] {
            assert_eq!(v.parse::<TargetSessionAttrs>().unwrap().name(), v);
        }
        let e = "master"
            .parse::<TargetSessionAttrs>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("prefer-standby"), "{e}");
        assert!("sometimes".parse::<LoadBalanceHosts>().is_err());
    }

    #[test]
    fn shuffle_keeps_every_item_and_varies_the_order() {
        let mut orders = std::collections::HashSet::new();
        for _ in 0..200 {
            let mut v: Vec<u32> = (0..5).collect();
            shuffle(&mut v);
            let mut sorted = v.clone();
            sorted.sort();
            assert_eq!(sorted, (0..5).collect::<Vec<_>>());
            orders.insert(v);
        }
        // 120 orders exist; 200 draws that hit fewer than 10 would mean no shuffling at all.
        assert!(orders.len() > 10, "{}", orders.len());
    }
}

//! Both clients' settings from one URL, read alike: the URL, then the `PG*` environment for
//! what it leaves unset (libpq's rule, which `slipstream_pg::connect` follows). tokio-postgres
//! reads no environment itself; an experiment that connects it with the bare URL while
//! slipstream-pg applies PGOPTIONS, PGUSER or PGHOST compares unlike connections, or fails.

use anyhow::Context as _;

/// The `PG*` variables both clients apply (slipstream-pg's `apply_env` reads each).
const ENV_APPLIED: [&str; 9] = [
    "PGHOST",
    "PGPORT",
    "PGUSER",
    "PGPASSWORD",
    "PGDATABASE",
    "PGAPPNAME",
    "PGOPTIONS",
    "PGCONNECT_TIMEOUT",
    "PGSSLMODE",
];

/// Variables slipstream-pg's `apply_env` reads that tokio-postgres could not be given alike
/// here, with the parameter that, named in the URL, overrides them for both.
const ENV_REFUSED: [(&str, &str); 5] = [
    ("PGTARGETSESSIONATTRS", "target_session_attrs"),
    ("PGLOADBALANCEHOSTS", "load_balance_hosts"),
    ("PGCHANNELBINDING", "channel_binding"),
    ("PGPASSFILE", "passfile"),
    ("PGREQUIREAUTH", "require_auth"),
];

/// slipstream-pg's settings: the URL, then the `PG*` environment for what it leaves unset, as
/// `slipstream_pg::connect` reads them (libpq's rule).
pub(crate) fn slipstream_config(url: &str) -> anyhow::Result<slipstream_pg::Config> {
    url.parse::<slipstream_pg::Config>()
        .and_then(slipstream_pg::Config::apply_env)
        .context("slipstream-pg cannot parse the URL (or a PG* environment variable)")
}

/// tokio-postgres's settings: the same URL and the same `PG*` variables (`var` reads one) as
/// [`slipstream_config`], for tokio-postgres reads no environment itself. Both clients must open the
/// same kind of connection: with PGPASSWORD or PGHOST applied for one side only, the other
/// fails, or connects elsewhere or by another route, and the ratio compares unlike work.
/// A variable tokio-postgres has no setting for, or that it would apply otherwise, is an error
/// naming it: slipstream-pg would apply it alone. The TLS files are left out: both clients
/// connect without TLS here (`sslmode` disable, or a mode demanding TLS that tokio-postgres
/// refuses). As in libpq a parameter the URL names wins over its variable; an empty variable
/// counts as unset (slipstream-pg's default for it is a libpq default tokio-postgres lacks).
pub(crate) fn tokio_postgres_config_with(
    url: &str,
    var: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<tokio_postgres::Config> {
    use tokio_postgres::config::SslMode;
    let mut c: tokio_postgres::Config =
        url.parse().context("tokio-postgres cannot parse the URL")?;
    // Parameters whose getter cannot tell "not given" from the default: is `key=` in the URL?
    let named = |key: &str| {
        url.split(|ch: char| ch == '?' || ch == '&' || ch.is_whitespace())
            .any(|p| p.starts_with(&format!("{key}=")))
    };
    for (env, key) in ENV_REFUSED {
        if var(env).is_some_and(|v| !v.is_empty()) && !named(key) {
            anyhow::bail!(
                "environment variable {env} is set: slipstream-pg would apply it and \
                 tokio-postgres reads no environment, so the two clients would not connect \
                 alike; name {key} in the URL instead, or unset {env} for this experiment"
            );
        }
    }
    for env in ENV_APPLIED {
        let Some(value) = var(env).filter(|v| !v.is_empty()) else {
            continue;
        };
        let bad = |what: &str| anyhow::anyhow!("environment variable {env}={value:?}: {what}");
        match env {
            "PGHOST" if c.get_hosts().is_empty() => {
                for h in value.split(',') {
                    c.host(h);
                }
            }
            "PGPORT" if c.get_ports().is_empty() => {
                for p in value.split(',') {
                    c.port(p.trim().parse().map_err(|_| bad("not a port number"))?);
                }
            }
            "PGUSER" if c.get_user().is_none() => {
                c.user(&value);
            }
            "PGPASSWORD" if c.get_password().is_none() => {
                c.password(&value);
            }
            "PGDATABASE" if c.get_dbname().is_none() => {
                c.dbname(&value);
            }
            "PGAPPNAME" if c.get_application_name().is_none() => {
                c.application_name(&value);
            }
            "PGOPTIONS" if c.get_options().is_none() => {
                c.options(&value);
            }
            "PGCONNECT_TIMEOUT" if c.get_connect_timeout().is_none() => {
                let secs: i64 = value
                    .trim()
                    .parse()
                    .map_err(|_| bad("not a whole number of seconds"))?;
                // libpq: zero or less waits without limit.
                if secs > 0 {
                    c.connect_timeout(std::time::Duration::from_secs(secs as u64));
                }
            }
            "PGSSLMODE" if !named("sslmode") => {
                c.ssl_mode(match value.as_str() {
                    "disable" => SslMode::Disable,
                    "allow" | "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    _ => {
                        return Err(bad(
                            "tokio-postgres has no such sslmode: set sslmode=disable in the URL \
                             (the experiment compares connections without TLS) or unset it",
                        ));
                    }
                });
            }
            // The URL names it, and wins for both clients.
            _ => {}
        }
    }
    Ok(c)
}

/// [`tokio_postgres_config_with`] over this process's environment.
pub(crate) fn tokio_postgres_config(url: &str) -> anyhow::Result<tokio_postgres::Config> {
    tokio_postgres_config_with(url, |name| std::env::var(name).ok())
}

/// A tokio-postgres client on `url` read as [`tokio_postgres_config`] reads it (no TLS), its
/// connection task spawned.
pub(crate) async fn connect_tokio_postgres(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres_config(url)?
        .connect(tokio_postgres::NoTls)
        .await
        .context("tokio-postgres could not connect")?;
    tokio::spawn(connection);
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A variable only slipstream-pg would apply is refused by name, with the remedy; named in
    /// the URL it is no longer the environment's to decide.
    #[test]
    fn a_pg_variable_tokio_postgres_cannot_apply_is_refused_by_name() {
        let env = |name: &str| (name == "PGTARGETSESSIONATTRS").then(|| "read-write".into());
        let e = tokio_postgres_config_with("host=127.0.0.1 dbname=postgres", env).unwrap_err();
        assert!(
            e.to_string().contains("PGTARGETSESSIONATTRS")
                && e.to_string().contains("target_session_attrs"),
            "{e}"
        );
        tokio_postgres_config_with(
            "host=127.0.0.1 dbname=postgres target_session_attrs=any",
            env,
        )
        .unwrap();
        let env = |name: &str| (name == "PGSSLMODE").then(|| "verify-full".into());
        let e = tokio_postgres_config_with("host=127.0.0.1", env).unwrap_err();
        assert!(e.to_string().contains("PGSSLMODE"), "{e}");
    }
}

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

/// Variables slipstream-pg sends as a session setting whatever the URL says (libpq's
/// `PGDATESTYLE`, `PGTZ`, `PGGEQO`), with the setting: tokio-postgres has no such startup
/// parameter, so only the URL's `options` can give both the same.
const ENV_SESSION_SETTINGS: [(&str, &str); 3] = [
    ("PGDATESTYLE", "DateStyle"),
    ("PGTZ", "TimeZone"),
    ("PGGEQO", "geqo"),
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
    // slipstream-pg fills the URL's gaps from the service's section of a service file;
    // tokio-postgres reads no service file and refuses `service=`, so no URL can give both the
    // same. Even empty: slipstream-pg (as libpq) then looks up the service named "".
    if let Some(name) = var("PGSERVICE") {
        anyhow::bail!(
            "environment variable PGSERVICE={name:?} is set: slipstream-pg would read that \
             service's parameters from the service file and tokio-postgres reads none, so the \
             two clients would not connect alike; write the service's parameters into the URL \
             instead, and unset PGSERVICE for this experiment"
        );
    }
    for (env, setting) in ENV_SESSION_SETTINGS {
        if var(env).is_some_and(|v| !v.eq_ignore_ascii_case("default")) {
            anyhow::bail!(
                "environment variable {env} is set: slipstream-pg would send it as the \
                 session's {setting} and tokio-postgres reads no environment, so the two \
                 clients would not run alike; give both the setting in the URL \
                 (options=-c {setting}=...) instead, or unset {env} for this experiment"
            );
        }
    }
    // libpq's rule, as slipstream-pg applies it: a PGREQUIRESSL starting with "1" is
    // sslmode=require when neither the URL nor PGSSLMODE says otherwise.
    if var("PGREQUIRESSL").is_some_and(|v| v.starts_with('1'))
        && !named("sslmode")
        && var("PGSSLMODE").is_none_or(|v| v.is_empty())
    {
        c.ssl_mode(SslMode::Require);
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
    // libpq (and slipstream-pg) read `@name` as a Linux abstract socket; tokio-postgres takes
    // it for a host name, which could only fail, later and less clearly.
    if let Some(h) = c.get_hosts().iter().find_map(|h| match h {
        tokio_postgres::config::Host::Tcp(h) if h.starts_with('@') => Some(h),
        _ => None,
    }) {
        anyhow::bail!(
            "host {h} is an abstract Unix-domain socket, which slipstream-pg reaches and \
             tokio-postgres cannot; give the server's socket directory or a TCP address instead"
        );
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

    /// Variables that change neither client's connection here, or stop slipstream-pg's before
    /// any comparison: the TLS files and protocol versions (both clients connect without
    /// TLS), GSS encryption (neither uses it; slipstream-pg refuses `require`), and what
    /// slipstream-pg refuses by name itself; where to find service files, which matters only
    /// with a PGSERVICE, which is refused (see below).
    const ENV_ALIKE: [&str; 13] = [
        "PGSSLROOTCERT",
        "PGSSLCERT",
        "PGSSLKEY",
        "PGSSLSNI",
        "PGSSLMINPROTOCOLVERSION",
        "PGSSLMAXPROTOCOLVERSION",
        "PGGSSENCMODE",
        "PGHOSTADDR",
        "PGSERVICEFILE",
        "PGSYSCONFDIR",
        "PGSSLCRL",
        "PGSSLCRLDIR",
        "PGREQUIREPEER",
    ];

    /// Every variable slipstream-pg reads is applied to tokio-postgres alike, refused by name,
    /// or known to change neither connection here. Before slipstream-pg learned PGTZ,
    /// PGDATESTYLE, PGGEQO and PGREQUIRESSL (session 48), nothing here knew of them: a PGTZ
    /// in the shell ran slipstream-pg's session under another time zone than its peer's.
    #[test]
    fn every_variable_slipstream_pg_reads_is_handled_for_both_clients() {
        let known: Vec<&str> = ENV_APPLIED
            .iter()
            .copied()
            .chain(ENV_REFUSED.iter().map(|(e, _)| *e))
            .chain(ENV_SESSION_SETTINGS.iter().map(|(e, _)| *e))
            .chain(ENV_ALIKE)
            .chain(["PGREQUIRESSL", "PGSERVICE"])
            // Finds ~/.pgpass, which only slipstream-pg reads: a password found there can
            // only let slipstream-pg log in where tokio-postgres fails with an error, never
            // make the two open different connections.
            .chain(["HOME"])
            .collect();
        let unhandled: Vec<String> = slipstream_pg::Config::environment_variables()
            .into_iter()
            .filter(|v| !known.contains(&v.as_str()))
            .collect();
        assert!(
            unhandled.is_empty(),
            "slipstream-pg reads {unhandled:?}, which the lab neither gives tokio-postgres nor refuses"
        );
    }

    /// A session setting slipstream-pg would send from the environment is refused by name,
    /// with the URL's way to give it to both; PGREQUIRESSL asks tokio-postgres for TLS as it
    /// asks slipstream-pg, unless the URL or PGSSLMODE decides.
    #[test]
    fn session_settings_are_refused_and_pgrequiressl_applies_to_both() {
        let env = |name: &str| (name == "PGTZ").then(|| "Asia/Tokyo".into());
        let e = tokio_postgres_config_with("host=127.0.0.1", env).unwrap_err();
        assert!(
            e.to_string().contains("PGTZ") && e.to_string().contains("options=-c TimeZone"),
            "{e}"
        );
        let env = |name: &str| (name == "PGTZ").then(|| "DEFAULT".into());
        tokio_postgres_config_with("host=127.0.0.1", env).unwrap();
        let env = |name: &str| (name == "PGREQUIRESSL").then(|| "1".into());
        let c = tokio_postgres_config_with("host=127.0.0.1", env).unwrap();
        assert_eq!(c.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
        let c = tokio_postgres_config_with("host=127.0.0.1 sslmode=disable", env).unwrap();
        assert_eq!(c.get_ssl_mode(), tokio_postgres::config::SslMode::Disable);
    }

    /// An abstract socket (`@name`, from the URL or PGHOST) is refused for tokio-postgres, which
    /// would look it up as a host name.
    #[test]
    fn an_abstract_socket_is_refused_for_tokio_postgres() {
        let none = |_: &str| None;
        let e = tokio_postgres_config_with("postgresql://%40pg/db", none).unwrap_err();
        assert!(e.to_string().contains("host @pg is an abstract"), "{e}");
        let env = |name: &str| (name == "PGHOST").then(|| "@pg".into());
        let e = tokio_postgres_config_with("dbname=postgres", env).unwrap_err();
        assert!(e.to_string().contains("host @pg is an abstract"), "{e}");
        tokio_postgres_config_with("host=/tmp dbname=postgres", env).unwrap();
    }

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

    /// A connection service is refused by name, even empty: slipstream-pg would fill the URL's
    /// gaps from a service file tokio-postgres never reads (before slipstream-pg read service
    /// files it refused PGSERVICE itself, so nothing here needed to).
    #[test]
    fn pgservice_is_refused_by_name() {
        for value in ["orders", ""] {
            let env = |name: &str| (name == "PGSERVICE").then(|| value.to_string());
            let e = tokio_postgres_config_with("host=127.0.0.1", env).unwrap_err();
            assert!(e.to_string().contains("PGSERVICE"), "{e}");
        }
    }
}

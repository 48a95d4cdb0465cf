//! What differs between runs made apart: the machine, the server and its settings, the
//! workload file. A report of several runs says so before their figures, so that a reader
//! does not take a machine's or a setting's difference for the workload's.

use super::Labeled;
use crate::run_result::BenchRun;

/// One line per thing that is not the same in every run (`runs` side by side): `CPUs: a 2,
/// b 64`, `setting work_mem: a default, b 65536 kB`. Nothing for one run, or for runs made
/// alike. Settings are those the context lists (a run's own session settings left out, as
/// in its description); one a run does not list was at its default there.
///
/// ```
/// # fn main() -> anyhow::Result<()> {
/// # use slipstream_bench::{RunConfig, Session, Transaction, TxError, Workload};
/// # struct Noop;
/// # impl Transaction for Noop {
/// #     async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> { Ok(()) }
/// # }
/// # let workload = Workload::new("noop").transaction("noop", 1, || Noop).without_database();
/// # let mut config = RunConfig::new(None);
/// # config.duration = std::time::Duration::from_millis(100);
/// # let rt = tokio::runtime::Runtime::new()?;
/// # let mut run = || rt.block_on(slipstream_bench::run(&workload, &config, std::future::pending::<()>()));
/// use slipstream_bench::report::{Labeled, differences};
/// let a = Labeled { label: "a".into(), run: run()? };
/// let mut b = Labeled { label: "b".into(), run: run()? };
/// assert!(differences(&[a.clone(), b.clone()]).is_empty()); // one machine, no server
/// b.run.environment.cpus = a.run.environment.cpus + 62;
/// let lines = differences(&[a.clone(), b]);
/// assert_eq!(lines.len(), 1);
/// assert!(lines[0].starts_with("CPUs: a "), "{}", lines[0]);
/// # Ok(()) }
/// ```
pub fn differences(runs: &[Labeled]) -> Vec<String> {
    if runs.len() < 2 {
        return Vec::new();
    }
    type Field = fn(&BenchRun) -> Option<String>;
    let fields: [(&str, Field); 8] = [
        ("OS", |r| Some(r.environment.os.clone())),
        ("CPUs", |r| Some(r.environment.cpus.to_string())),
        ("CPU model", |r| r.environment.cpu_model.clone()),
        ("slipstream", |r| {
            Some(r.environment.slipstream_version.clone())
        }),
        ("PostgreSQL", |r| r.environment.server_version.clone()),
        ("database", |r| Some(r.environment.database.clone())),
        ("scale", |r| {
            r.context.as_ref()?.scale.map(|s| s.to_string())
        }),
        ("workload file sha256", |r| {
            r.context.as_ref()?.workload_sha256.clone()
        }),
    ];
    let mut out = Vec::new();
    let mut line = |what: &str, values: Vec<Option<String>>| {
        if values.iter().all(|v| *v == values[0]) {
            return;
        }
        let each: Vec<String> = runs
            .iter()
            .zip(values)
            .map(|(l, v)| format!("{} {}", l.label, v.as_deref().unwrap_or("?")))
            .collect();
        out.push(format!("{what}: {}", each.join(", ")));
    };
    for (what, field) in fields {
        line(what, runs.iter().map(|l| field(&l.run)).collect());
    }
    // Settings of servers that were read: a run without a context (a library run, an older
    // file) has none to tell.
    let read: Vec<&Labeled> = runs.iter().filter(|l| l.run.context.is_some()).collect();
    if read.len() < 2 {
        return out;
    }
    let shown = |s: &&crate::context::Setting| !super::context::own_session(s);
    let mut names: Vec<&str> = Vec::new();
    for l in &read {
        for s in l
            .run
            .context
            .iter()
            .flat_map(|c| c.settings.iter().filter(shown))
        {
            if !names.contains(&s.name.as_str()) {
                names.push(&s.name);
            }
        }
    }
    for name in names {
        let values: Vec<String> = read
            .iter()
            .map(|l| {
                l.run
                    .context
                    .iter()
                    .flat_map(|c| c.settings.iter().filter(shown))
                    .find(|s| s.name == name)
                    .map_or_else(|| "default".to_string(), |s| s.value.clone())
            })
            .collect();
        if values.iter().all(|v| *v == values[0]) {
            continue;
        }
        let each: Vec<String> = read
            .iter()
            .zip(values)
            .map(|(l, v)| format!("{} {v}", l.label))
            .collect();
        out.push(format!("setting {name}: {}", each.join(", ")));
    }
    out
}

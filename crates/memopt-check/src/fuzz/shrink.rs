//! Shrinking a failing run: replay a suffix of the log one step at a time on a fresh schema,
//! then drop whole transactions while the mismatch still shows (delta debugging over units).
//!
//! A replay is sequential, in the order steps completed in the run, so a step that waited for
//! another session's lock comes after that session's COMMIT and does not wait; where removing
//! steps changes that, `lock_timeout` turns the wait into an error and the candidate simply
//! does not reproduce. Races that need true concurrency may not reproduce at all: the run's
//! own log is then printed instead.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::schema;
use super::step::{Conn, Kind, Step};

/// A transaction (BEGIN .. COMMIT/ROLLBACK) or one autocommit step: what shrinking removes.
struct Unit {
    steps: Vec<usize>,
    pinned: bool,
}

fn units(steps: &[Step], failing: usize) -> Vec<Unit> {
    let mut units: Vec<Unit> = Vec::new();
    let mut open: HashMap<usize, usize> = HashMap::new();
    for (i, s) in steps.iter().enumerate() {
        let sql = match &s.kind {
            Kind::Exec(sql) => sql.as_str(),
            _ => "",
        };
        if let Some(&u) = open.get(&s.session) {
            units[u].steps.push(i);
            units[u].pinned |= i == failing;
            if sql == "COMMIT" || sql == "ROLLBACK" {
                open.remove(&s.session);
            }
            continue;
        }
        units.push(Unit {
            steps: vec![i],
            pinned: s.pinned || i == failing,
        });
        if sql.starts_with("BEGIN") {
            open.insert(s.session, units.len() - 1);
        }
    }
    units
}

/// Runs `steps` on a freshly created schema; the first disagreement, if any.
pub(crate) async fn replay(
    url: &str,
    keys: i32,
    steps: &[Step],
) -> Result<Option<String>, slipstream_pg::Error> {
    let mut admin = slipstream_pg::connect(url).await?;
    admin.batch_execute(&schema::setup(keys)).await?;
    let mut conns: HashMap<usize, Conn> = HashMap::new();
    let mut found = None;
    for (i, s) in steps.iter().enumerate() {
        let conn = match conns.entry(s.session) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let mut c = Conn::connect(url).await?;
                c.client
                    .batch_execute("SET lock_timeout = '1s'; SET statement_timeout = '20s'")
                    .await?;
                e.insert(c)
            }
        };
        let out = conn.run(&s.kind).await;
        if let Some(m) = out.mismatch {
            found = Some(format!("step {} (session {}): {m}", i + 1, s.session + 1));
            break;
        }
    }
    for (_, c) in conns {
        let _ = c.client.close().await;
    }
    Ok(found)
}

/// The shrunk steps, the mismatch their last replay showed (None: no replay reproduced one),
/// and the number of replays.
pub(crate) async fn shrink(
    url: &str,
    keys: i32,
    steps: &[Step],
    failing: usize,
    budget: Duration,
) -> (Vec<Step>, Option<String>, usize) {
    let started = Instant::now();
    let all = units(&steps[..=failing], failing);
    let pick = |us: &[&Unit]| -> Vec<Step> {
        let mut idx: Vec<usize> = us.iter().flat_map(|u| u.steps.iter().copied()).collect();
        idx.sort_unstable();
        idx.into_iter().map(|i| steps[i].clone()).collect()
    };
    let mut replays = 0;
    // Start from the shortest suffix of the log that still fails.
    let mut current: Option<(Vec<&Unit>, String)> = None;
    for window in [10usize, 50, 250, 1000, usize::MAX] {
        let start = all.len().saturating_sub(window);
        let cand: Vec<&Unit> = all
            .iter()
            .enumerate()
            .filter(|(i, u)| u.pinned || *i >= start)
            .map(|(_, u)| u)
            .collect();
        replays += 1;
        match replay(url, keys, &pick(&cand)).await {
            Ok(Some(m)) => {
                current = Some((cand, m));
                break;
            }
            Ok(None) => {}
            Err(e) => eprintln!("memopt fuzz: replay failed: {e}"),
        }
        if start == 0 || started.elapsed() > budget {
            break;
        }
    }
    let Some(current) = current else {
        let start = all.len().saturating_sub(50);
        let tail: Vec<&Unit> = all
            .iter()
            .enumerate()
            .filter(|(i, u)| u.pinned || *i >= start)
            .map(|(_, u)| u)
            .collect();
        return (pick(&tail), None, replays);
    };
    let (mut current, mut message) = current;
    let mut chunk = current.len() / 2;
    while chunk >= 1 && started.elapsed() < budget {
        let mut i = 0;
        while i < current.len() && started.elapsed() < budget {
            let end = (i + chunk).min(current.len());
            if current[i..end].iter().any(|u| u.pinned) && chunk == 1 {
                i = end;
                continue;
            }
            let cand: Vec<&Unit> = current
                .iter()
                .enumerate()
                .filter(|(j, u)| u.pinned || *j < i || *j >= end)
                .map(|(_, u)| *u)
                .collect();
            if cand.len() == current.len() {
                i = end;
                continue;
            }
            replays += 1;
            if let Ok(Some(m)) = replay(url, keys, &pick(&cand)).await {
                current = cand;
                message = m;
            } else {
                i = end;
            }
        }
        chunk /= 2;
    }
    // A session's settings matter only if the session still sends something.
    let busy: std::collections::HashSet<usize> = current
        .iter()
        .filter(|u| !u.steps.iter().all(|&i| steps[i].pinned))
        .map(|u| steps[u.steps[0]].session)
        .collect();
    current.retain(|u| busy.contains(&steps[u.steps[0]].session));
    // Then single statements inside the remaining transactions (their BEGIN and end stay, so
    // the transaction structure does), last first: later steps depend on earlier ones.
    let mut kept = pick(&current);
    let mut i = kept.len();
    while i > 0 && started.elapsed() < budget {
        i -= 1;
        let removable = !kept[i].pinned
            && i + 1 != kept.len()
            && !matches!(&kept[i].kind, Kind::Exec(sql)
                if sql.starts_with("BEGIN") || sql == "COMMIT" || sql == "ROLLBACK");
        if !removable {
            continue;
        }
        let mut cand = kept.clone();
        cand.remove(i);
        replays += 1;
        if let Ok(Some(m)) = replay(url, keys, &cand).await {
            kept = cand;
            message = m;
        }
    }
    // A transaction left empty does nothing: drop its BEGIN and end.
    let mut i = 0;
    while i < kept.len() {
        let is_begin = matches!(&kept[i].kind, Kind::Exec(sql) if sql.starts_with("BEGIN"));
        let next = (i + 1..kept.len()).find(|&j| kept[j].session == kept[i].session);
        let ends = next.is_some_and(
            |j| matches!(&kept[j].kind, Kind::Exec(sql) if sql == "COMMIT" || sql == "ROLLBACK"),
        );
        if let (true, true, Some(j)) = (is_begin, ends, next) {
            kept.remove(j);
            kept.remove(i);
        } else {
            i += 1;
        }
    }
    (kept, Some(message), replays)
}

//! `pk-lookup`: article 003's comparison of primary-key lookups.  The same rows (an integer
//! key and 5-30 random characters) in t1, a heap with a btree primary key; t2, a covering
//! primary key (`INCLUDE (value)`) read by index-only scans, the analogue of an
//! index-organized table; t3, a hash index, the analogue of a single-table hash cluster; and
//! t4, a heap served by memopt, the analogue of the MemOptimized RowStore.  For each: shared
//! buffers touched per lookup, and the time to read every row by key from slipstream-pg
//! (prepared, unprepared, pipelined) and from a PL/pgSQL loop (the article's PL/SQL loop).
//!
//! Runs on a private cluster that preloads memopt; where the extension is not installed the
//! result says so and how to install it.

use anyhow::Context as _;
use slipstream_pg::{Output, PipelineMode, PipelineOptions, Uncached};

use super::{Stopwatch, runtime};
use crate::{Context, ExperimentResult, Summary, Table, environment};

pub(crate) const TITLE: &str =
    "Primary-key lookups: heap + btree, covering index, hash index, memopt";

const TABLES: [(&str, &str); 4] = [
    ("t1", "heap + btree primary key"),
    (
        "t2",
        "covering primary key, index-only scans (IOT analogue)",
    ),
    ("t3", "hash index (hash cluster analogue)"),
    ("t4", "memopt (MemOptimized RowStore analogue)"),
];

#[derive(Debug, Clone, Copy)]
enum Path {
    Prepared,
    Unprepared,
    Pipelined,
    Plpgsql,
}

const PATHS: [Path; 4] = [
    Path::Prepared,
    Path::Unprepared,
    Path::Pipelined,
    Path::Plpgsql,
];

impl Path {
    fn label(self) -> &'static str {
        match self {
            Path::Prepared => "prepared",
            Path::Unprepared => "unprepared",
            Path::Pipelined => "pipelined",
            Path::Plpgsql => "PL/pgSQL loop",
        }
    }

    /// The path's name in ratio keys.
    fn key(self) -> &'static str {
        match self {
            Path::Prepared => "prepared",
            Path::Unprepared => "unprepared",
            Path::Pipelined => "pipelined",
            Path::Plpgsql => "plpgsql",
        }
    }
}

/// Statements per pipeline when reading through one.
const BATCH: usize = 1000;

/// Lookups explained per table to count buffers.
const PROBES: usize = 20;

fn sql(table: &str) -> String {
    format!("SELECT value FROM {table} WHERE key = $1")
}

/// Keys in a scattered but complete order, the same for every table and path.
fn key(i: usize, rows: usize) -> i32 {
    ((i * 7919) % rows) as i32 + 1
}

fn setup_sql(rows: usize) -> String {
    let mut s = format!(
        "CREATE EXTENSION memopt;
         CREATE TABLE t1 (key int PRIMARY KEY, value varchar(30) NOT NULL);
         INSERT INTO t1
             SELECT g, substr(md5(g::text) || md5((-g)::text), 1, 5 + abs(hashint4(g)) % 26)
               FROM generate_series(1, {rows}) g;
         CREATE TABLE t2 (key int, value varchar(30) NOT NULL, PRIMARY KEY (key) INCLUDE (value));
         INSERT INTO t2 SELECT * FROM t1;
         CREATE TABLE t3 (key int NOT NULL, value varchar(30) NOT NULL);
         INSERT INTO t3 SELECT * FROM t1;
         CREATE INDEX t3_key_hash ON t3 USING hash (key);
         CREATE TABLE t4 (key int PRIMARY KEY, value varchar(30) NOT NULL);
         INSERT INTO t4 SELECT * FROM t1;
         SELECT memopt.enable_read('t4');"
    );
    // One function per table, so that each loop's statement is planned once and cached, as
    // PL/SQL's static SQL is.
    for (t, _) in TABLES {
        s.push_str(&format!(
            "CREATE FUNCTION read_all_{t}(n int) RETURNS int LANGUAGE plpgsql AS $$
             DECLARE
                 v text;
                 found_rows int := 0;
             BEGIN
                 FOR i IN 0..n - 1 LOOP
                     SELECT value INTO v FROM {t} WHERE key = (i::bigint * 7919 % n)::int + 1;
                     IF v IS NOT NULL THEN found_rows := found_rows + 1; END IF;
                 END LOOP;
                 RETURN found_rows;
             END
             $$;"
        ));
    }
    s
}

/// What EXPLAIN (ANALYZE, BUFFERS) says about one lookup, or the mean of several.
struct Probe {
    /// Shared buffers hit or read.
    buffers: f64,
    /// Heap visits of an index-only scan (pages the visibility map does not vouch for).
    heap_fetches: f64,
    /// The plan's top node.
    node: String,
}

async fn probe(c: &mut slipstream_pg::Client, table: &str, k: i32) -> anyhow::Result<Probe> {
    let row = c
        .query_one(
            &format!(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT value FROM {table} WHERE key = {k}"
            ),
            &[],
        )
        .await?;
    // EXPLAIN's output is `json`, whose binary form is its text.
    let text = row.get_raw(0)?.context("EXPLAIN returned NULL")?;
    let v: serde_json::Value = serde_json::from_slice(text).context("EXPLAIN's JSON")?;
    let plan = &v[0]["Plan"];
    let n = |f: &str| plan[f].as_f64().unwrap_or(0.0);
    let node = match plan["Custom Plan Provider"].as_str() {
        Some(p) => p.to_string(),
        None => plan["Node Type"].as_str().unwrap_or("?").to_string(),
    };
    Ok(Probe {
        buffers: n("Shared Hit Blocks") + n("Shared Read Blocks"),
        heap_fetches: n("Heap Fetches"),
        node,
    })
}

/// Lookups through memopt's node so far, over all tables.
async fn memopt_lookups(c: &mut slipstream_pg::Client) -> anyhow::Result<i64> {
    Ok(c.query_one("SELECT lookups FROM memopt.stats_total", &[])
        .await?
        .get(0)?)
}

async fn read_all(
    c: &mut slipstream_pg::Client,
    table: &str,
    path: Path,
    rows: usize,
) -> anyhow::Result<usize> {
    let sql = sql(table);
    let mut found = 0usize;
    match path {
        Path::Prepared => {
            let stmt = c.prepare(&sql).await?;
            for i in 0..rows {
                let v: String = c.query_one(&stmt, &[&key(i, rows)]).await?.get(0)?;
                found += usize::from(!v.is_empty());
            }
        }
        Path::Unprepared => {
            for i in 0..rows {
                let v: String = c
                    .query_one(&Uncached(sql.as_str()), &[&key(i, rows)])
                    .await?
                    .get(0)?;
                found += usize::from(!v.is_empty());
            }
        }
        Path::Pipelined => {
            let stmt = c.prepare(&sql).await?;
            let abort = PipelineOptions::new().mode(PipelineMode::AbortOnError);
            for start in (0..rows).step_by(BATCH) {
                let mut p = c.pipeline_with(abort.clone());
                for i in start..(start + BATCH).min(rows) {
                    p.query(&stmt, &[&key(i, rows)]).await?;
                }
                for r in p.end().await {
                    if let Output::Rows(rows) = r? {
                        found += rows.len();
                    }
                }
            }
        }
        Path::Plpgsql => {
            let n: i32 = c
                .query_one(&format!("SELECT read_all_{table}($1)"), &[&(rows as i32)])
                .await?
                .get(0)?;
            found = n as usize;
        }
    }
    Ok(found)
}

pub(crate) fn run(ctx: &Context) -> anyhow::Result<ExperimentResult> {
    let (rows, reps) = if ctx.quick {
        (10_000usize, 1)
    } else {
        (100_000usize, 5)
    };
    let mut r = ExperimentResult::new("pk-lookup", TITLE, ctx.quick);
    r.param("rows", rows);
    r.param("runs", reps);

    let cluster = match slipstream_testkit::Cluster::builder()
        .setting("shared_preload_libraries", "memopt")
        .start()
    {
        Ok(c) => c,
        Err(e) if e.to_string().contains("could not access file \"memopt\"") => {
            r.notes.push(
                "not run: the memopt extension is not installed into this PostgreSQL (the \
                 server could not load it). Install it with `make -C extension/memopt install` \
                 (as a user who may write to `pg_config --pkglibdir`) and run again."
                    .into(),
            );
            return Ok(r);
        }
        Err(e) => return Err(e.into()),
    };
    let url = cluster.url();
    let rt = runtime()?;
    let (probes, populate_s, times, hits, server_version, pin_note) = rt.block_on(async {
        let mut c = slipstream_pg::connect(&url).await?;
        let server_version = c.parameter("server_version").map(str::to_string);
        // The testkit's clusters commit asynchronously, and VACUUM marks a page all-visible
        // only once its inserting commit is flushed: without this, t2's index-only scans would
        // visit the heap on every lookup.
        c.batch_execute("SET synchronous_commit = on").await?;
        c.batch_execute(&setup_sql(rows))
            .await
            .context("creating t1..t4")?;
        // Its own statement: VACUUM refuses the implicit transaction of a multi-statement query.
        c.batch_execute("VACUUM ANALYZE t1, t2, t3, t4").await?;
        c.batch_execute(
            "SELECT memopt.populate('t4');
             DO $$ BEGIN
                 FOR i IN 1..1200 LOOP
                     EXIT WHEN (SELECT populate_state FROM memopt.stats
                                 WHERE \"table\" = 't4'::regclass) IN ('done', 'failed');
                     PERFORM pg_sleep(0.01);
                 END LOOP;
             END $$;",
        )
        .await?;
        let populate_s: f64 = c
            .query_one(
                "SELECT extract(epoch FROM populate_duration)::float8 FROM memopt.stats
                  WHERE \"table\" = 't4'::regclass AND populate_state = 'done'",
                &[],
            )
            .await
            .context("memopt.populate('t4') did not finish")?
            .get(0)?;

        let mut probes = Vec::new();
        for (t, _) in TABLES {
            let mut mean = Probe {
                buffers: 0.0,
                heap_fetches: 0.0,
                node: String::new(),
            };
            for i in 0..PROBES {
                let p = probe(&mut c, t, key(i * 101, rows)).await?;
                mean.buffers += p.buffers / PROBES as f64;
                mean.heap_fetches += p.heap_fetches / PROBES as f64;
                mean.node = p.node;
            }
            probes.push(mean);
        }

        // One round trip per lookup costs 25 µs on one CPU and ~110 µs across two on this
        // kind of VM: left to the scheduler, placement would decide the comparison.
        let backends = [c.backend_pid()];
        let pin_note = crate::placement::pin_same_cpu(&url, &backends);
        // Warm every table and path once, then interleave the measured runs.
        for (t, _) in TABLES {
            read_all(&mut c, t, Path::Prepared, rows.min(2000)).await?;
        }
        let mut times = vec![vec![Vec::new(); PATHS.len()]; TABLES.len()];
        let measured = async {
            for _ in 0..reps {
                for (p, path) in PATHS.into_iter().enumerate() {
                    for (ti, (t, _)) in TABLES.into_iter().enumerate() {
                        let before = memopt_lookups(&mut c).await?;
                        let sw = Stopwatch::start();
                        let found = read_all(&mut c, t, path, rows).await?;
                        times[ti][p].push(sw.stop().wall.as_secs_f64());
                        anyhow::ensure!(
                            found == rows,
                            "{t}, {}: read {found} of {rows} rows",
                            path.label()
                        );
                        // t4's figures mean something only if every lookup went through
                        // memopt's node (a plan shape it does not serve would run the
                        // ordinary index scan and measure t1 twice).
                        let served = memopt_lookups(&mut c).await? - before;
                        let expected = if t == "t4" { rows as i64 } else { 0 };
                        anyhow::ensure!(
                            served == expected,
                            "{t}, {}: {served} lookups went through memopt, expected {expected}",
                            path.label()
                        );
                    }
                }
            }
            anyhow::Ok(())
        }
        .await;
        crate::placement::release(&backends);
        measured?;
        let hits: (i64, i64) = {
            let row = c
                .query_one(
                    "SELECT hits, lookups FROM memopt.stats WHERE \"table\" = 't4'::regclass",
                    &[],
                )
                .await?;
            (row.get(0)?, row.get(1)?)
        };
        anyhow::Ok((probes, populate_s, times, hits, server_version, pin_note))
    })?;
    r.environment = environment::capture(&url, server_version);

    let med: Vec<Vec<f64>> = times
        .iter()
        .map(|per_path| per_path.iter().map(|t| Summary::of(t).p50).collect())
        .collect();
    let mut columns = vec!["table", "plan", "shared buffers per lookup"];
    let labels: Vec<String> = PATHS
        .iter()
        .map(|p| format!("{}, s (vs t1)", p.label()))
        .collect();
    columns.extend(labels.iter().map(String::as_str));
    let mut table = Table::new(&columns);
    let mut over_budget = Vec::new();
    for (ti, (t, what)) in TABLES.into_iter().enumerate() {
        let mut cells = vec![
            format!("{t}: {what}"),
            probes[ti].node.clone(),
            format!("{:.1}", probes[ti].buffers),
        ];
        for (p, path) in PATHS.into_iter().enumerate() {
            let ratio = med[ti][p] / med[0][p];
            cells.push(format!("{:.3} ({ratio:.2}x)", med[ti][p]));
            r.ratios
                .insert(format!("{t}_{}_over_t1", path.key()), ratio);
            if t == "t4" && ratio > 1.05 {
                over_budget.push(format!("{t} {} {ratio:.2}x", path.label()));
            }
        }
        r.ratios
            .insert(format!("{t}_buffers_per_lookup"), probes[ti].buffers);
        table.row(cells);
    }
    r.table = table;
    r.ratios.insert("t4_populate_seconds".into(), populate_s);
    r.ratios.insert(
        "t4_hit_ratio".into(),
        if hits.1 > 0 {
            hits.0 as f64 / hits.1 as f64
        } else {
            0.0
        },
    );
    r.notes.push(format!(
        "memopt.populate of {rows} rows: {populate_s:.3} s (target: 100,000 rows in under 1 s); \
         {} of {} t4 lookups were hits",
        hits.0, hits.1
    ));
    r.notes.push(if ctx.quick {
        "quick form: one run of 10,000 rows is too noisy to judge the 5% target; run without \
         --quick for that"
            .into()
    } else if over_budget.is_empty() {
        "target met: no t4 (memopt) path is slower than t1 by more than 5%".into()
    } else {
        format!(
            "target missed: t4 (memopt) slower than t1 by more than 5%: {}",
            over_budget.join(", ")
        )
    });
    r.notes.push(format!(
        "medians of {reps} runs reading all {rows} rows by key (scattered order), paths and \
         tables interleaved; buffers: mean over {PROBES} lookups of EXPLAIN (ANALYZE, BUFFERS), \
         hit + read; a private cluster on this machine"
    ));
    if probes[1].heap_fetches > 0.0 {
        r.notes.push(format!(
            "t2's index-only scans visited the heap {:.1} times per lookup: the visibility map \
             did not mark those pages all-visible",
            probes[1].heap_fetches
        ));
    }
    r.notes.push(pin_note);
    r.notes.push(
        "article 003: consistent gets 3 (heap), 2 (IOT), 1 (hash cluster), 0 (memoptimized); \
         its memoptimized SQL path was slower than the heap"
            .into(),
    );
    Ok(r)
}

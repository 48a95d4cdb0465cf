//! Coalesced pipelined lookups (issue 22): consecutive `Pipeline::memopt_get` calls go out as
//! one `memopt.get_many`, and each operation must still get exactly its own key's row, at its
//! place among the block's writes. Every test here compares each operation's result with what
//! the same operation returns on its own (a lone `Client::memopt_get` at the same point, or
//! SQL), so a row handed to the wrong operation of a run fails it.

use slipstream_pg::{Client, ErrorKind, Output, PipelineMode, PipelineOptions, Row};

use super::engine::bounded;
use super::memopt::memopt_setup;

/// One operation of a generated block.
#[derive(Debug, Clone)]
enum Step {
    /// A lookup on `m` (bigint key): ids 1..=100 exist at the start, others miss.
    GetM(i64),
    /// A lookup on `w` (text key).
    GetW(String),
    /// A lookup on `g` (bigint key, like `m`: only the table tells the runs apart).
    GetG(i64),
    /// A write, as SQL.
    Write(String),
}

/// What a lookup returned, as text: the row's cells, or `-` for no row.
fn shown(rows: &[Row]) -> String {
    assert!(
        rows.len() <= 1,
        "a single-key lookup returned {} rows",
        rows.len()
    );
    rows.first().map_or("-".into(), |r| {
        (0..r.len())
            .map(|i| match r.get_raw(i).unwrap() {
                Some(b) => format!("{b:?}"),
                None => "NULL".into(),
            })
            .collect::<Vec<_>>()
            .join("|")
    })
}

/// A small deterministic generator (xorshift), so a failure names a seed to rerun.
struct Gen(u64);

impl Gen {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A block of runs of lookups (lengths 1-40, on one table or alternating, misses and
/// duplicate keys) cut by writes to the very rows looked up.
fn block(seed: u64) -> Vec<Step> {
    let mut g = Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut steps = Vec::new();
    while steps.len() < 300 {
        let run = 1 + g.next(40);
        let alternate = g.next(4) == 0;
        for i in 0..run {
            // Keys from a small range: duplicates in a run are common; 101..=110 miss until
            // an INSERT below adds them.
            let table = if alternate { i % 3 } else { g.next(6) };
            steps.push(match table {
                1 => GetW(["a", "b", "c", "zz"][g.next(4) as usize].to_string()),
                2 => GetG(1 + g.next(60) as i64),
                _ => GetM(1 + g.next(110) as i64),
            });
        }
        let k = 1 + g.next(110);
        steps.push(Write(match g.next(5) {
            0 => format!("UPDATE m SET n = n + 1000, name = 'u{k}' WHERE id = {k}"),
            1 => format!("DELETE FROM m WHERE id = {k}"),
            2 => format!(
                "INSERT INTO m VALUES ({k}, 'i{k}', {k}) ON CONFLICT (id) DO UPDATE SET n = -1"
            ),
            3 if k.is_multiple_of(2) => format!("UPDATE w SET v = v + {k} WHERE k = 'a'"),
            3 => format!("UPDATE g SET v = v * 2 WHERE id = {}", k / 2),
            _ => format!("INSERT INTO w VALUES ('c', {k}) ON CONFLICT (k) DO UPDATE SET v = 0"),
        }));
    }
    steps
}
use Step::{GetG, GetM, GetW, Write};

/// Table `g (id bigint PRIMARY KEY, v int)`, ids 1..=50 with v = -id: a second table with
/// `m`'s key kind.
async fn create_g(c: &mut Client) {
    c.batch_execute(
        "CREATE TABLE g (id bigint PRIMARY KEY, v int);
         INSERT INTO g SELECT i, -i FROM generate_series(1, 50) i;
         SELECT memopt.enable_read('g')",
    )
    .await
    .unwrap();
}

/// Each step's result run singly: lookups by `Client::memopt_get`, writes by `execute`.
async fn singly(c: &mut Client, steps: &[Step]) -> Vec<String> {
    let m = c.memopt_table("m").await.unwrap();
    let w = c.memopt_table("w").await.unwrap();
    let gt = c.memopt_table("g").await.unwrap();
    let mut out = Vec::new();
    for s in steps {
        out.push(match s {
            GetM(k) => shown(c.memopt_get(&m, k).await.unwrap().as_slice()),
            GetW(k) => shown(c.memopt_get(&w, k.as_str()).await.unwrap().as_slice()),
            GetG(k) => shown(c.memopt_get(&gt, k).await.unwrap().as_slice()),
            Write(sql) => format!("{} rows", c.execute(sql.as_str(), &[]).await.unwrap()),
        });
    }
    out
}

/// Each step's result from one pipeline block (its lookups coalesced).
async fn pipelined(c: &mut Client, steps: &[Step], options: PipelineOptions) -> Vec<String> {
    let m = c.memopt_table("m").await.unwrap();
    let w = c.memopt_table("w").await.unwrap();
    let gt = c.memopt_table("g").await.unwrap();
    let mut p = c.pipeline_with(options);
    for s in steps {
        match s {
            GetM(k) => p.memopt_get(&m, k).await.map(|_| ()),
            GetW(k) => p.memopt_get(&w, k.as_str()).await.map(|_| ()),
            GetG(k) => p.memopt_get(&gt, k).await.map(|_| ()),
            Write(sql) => p.execute(sql.as_str(), &[]).await.map(|_| ()),
        }
        .unwrap();
    }
    let results = bounded("the coalesced block", p.end()).await;
    assert_eq!(results.len(), steps.len());
    results
        .into_iter()
        .map(|r| match r.unwrap() {
            Output::Rows(rows) => shown(&rows),
            Output::Affected(n) => format!("{n} rows"),
            other => panic!("unexpected output {other:?}"),
        })
        .collect()
}

/// The differential: the same block in a transaction rolled back, done singly, then
/// pipelined and committed; every step's result must match, lookups after a write seeing it.
#[tokio::test]
async fn coalesced_lookups_match_lone_lookups_among_writes_to_the_same_rows() {
    let (_cluster, mut c) = memopt_setup().await;
    c.batch_execute("INSERT INTO w VALUES ('zz', 26)")
        .await
        .unwrap();
    create_g(&mut c).await;
    let modes = [
        PipelineOptions::new(),
        PipelineOptions::new().mode(PipelineMode::ContinueOnError),
        // A small window: runs are cut at the size cap (a quarter of it) too.
        PipelineOptions::new().max_in_flight(12),
    ];
    // Each seed starts from the state the previous pipelined block committed, on both sides.
    for (seed, options) in (1..=6).zip(modes.iter().cycle()) {
        let steps = block(seed);
        c.batch_execute("BEGIN").await.unwrap();
        let want = singly(&mut c, &steps).await;
        c.batch_execute("ROLLBACK").await.unwrap();
        let got = pipelined(&mut c, &steps, options.clone()).await;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g,
                w,
                "seed {seed} ({:?}), step {i} {:?}: pipelined result differs from a lone call",
                options.get_mode(),
                steps[i]
            );
        }
    }
}

#[tokio::test]
async fn misses_and_duplicate_keys_each_get_their_own_row_on_two_tables() {
    let (_cluster, mut c) = memopt_setup().await;
    create_g(&mut c).await;
    let m = c.memopt_table("m").await.unwrap();
    let w = c.memopt_table("w").await.unwrap();
    let gt = c.memopt_table("g").await.unwrap();
    let mut p = c.pipeline();
    let mut ops = Vec::new();
    for k in [3i64, 1000, 3, 1, 1000, 3, 100] {
        ops.push((format!("m {k}"), p.memopt_get(&m, &k).await.unwrap()));
    }
    for k in ["b", "zz", "a", "b"] {
        ops.push((format!("w {k}"), p.memopt_get(&w, k).await.unwrap()));
    }
    // Two tables with one key kind, alternating and in runs.
    for k in [4i64, 4, 60, 5, 5, 2] {
        let (t, table) = if k % 2 == 0 { ("g", &gt) } else { ("m", &m) };
        ops.push((format!("{t} {k}"), p.memopt_get(table, &k).await.unwrap()));
    }
    // Alternating tables: runs of one, each its own call.
    for (k, t) in [(7i64, "a"), (7, "b"), (999, "nope")] {
        ops.push((format!("m {k}"), p.memopt_get(&m, &k).await.unwrap()));
        ops.push((format!("w {t}"), p.memopt_get(&w, t).await.unwrap()));
    }
    assert_eq!(p.len(), ops.len());
    assert_eq!(p.unfinished(), ops.len());
    let mut got = Vec::new();
    // Read from the end: the last held lookup first.
    for (what, op) in ops.iter().rev() {
        got.push((what.clone(), shown(&p.process(op).await.unwrap())));
    }
    p.end().await;
    got.reverse();
    for (what, shown_row) in got {
        let (table, key) = what.split_once(' ').unwrap();
        let sql = match table {
            "m" | "g" => format!("SELECT * FROM {table} WHERE id = {key}"),
            _ => format!("SELECT * FROM w WHERE k = '{key}'"),
        };
        let want = shown(&c.query(sql.as_str(), &[]).await.unwrap());
        assert_eq!(shown_row, want, "{what}");
    }
}

/// An error between runs, and a run that fails, in both modes: each lookup gets its own
/// row or the failure that is its own, never a neighbour's.
#[tokio::test]
async fn errors_around_and_in_a_run_fail_exactly_the_operations_they_should() {
    let (_cluster, mut c) = memopt_setup().await;
    let m = c.memopt_table("m").await.unwrap();
    for mode in [PipelineMode::AbortOnError, PipelineMode::ContinueOnError] {
        let mut p = c.pipeline_with(PipelineOptions::new().mode(mode));
        let before: Vec<_> = {
            let mut v = Vec::new();
            for k in [5i64, 6, 5] {
                v.push(p.memopt_get(&m, &k).await.unwrap());
            }
            v
        };
        let write = p
            .execute("UPDATE m SET n = 123 WHERE id = 5", &[])
            .await
            .unwrap();
        let fail = p.execute("SELECT 1/0", &[]).await.unwrap();
        let between = p.execute("SELECT 1", &[]).await.unwrap();
        // Text keys on a bigint table: the server refuses the whole run.
        let wrong: Vec<_> = {
            let mut v = Vec::new();
            for k in ["x", "y"] {
                v.push(p.memopt_get(&m, k).await.unwrap());
            }
            v
        };
        let after: Vec<_> = {
            let mut v = Vec::new();
            for k in [5i64, 7] {
                v.push(p.memopt_get(&m, &k).await.unwrap());
            }
            v
        };
        let results = bounded("a block with errors", p.end()).await;
        let n = |op: &slipstream_pg::Op<Vec<Row>>| match &results[op.id() as usize] {
            Ok(Output::Rows(rows)) => rows.first().map(|r| {
                (
                    r.get::<_, i64>("id").unwrap(),
                    r.get::<_, i32>("n").unwrap(),
                )
            }),
            other => panic!("{mode:?} op {}: {other:?}", op.id()),
        };
        assert_eq!(n(&before[0]), Some((5, 50)), "{mode:?}");
        assert_eq!(n(&before[1]), Some((6, 60)), "{mode:?}");
        assert_eq!(n(&before[2]), Some((5, 50)), "{mode:?}");
        assert!(results[fail.id() as usize].is_err());
        let between = results[between.id() as usize].as_ref();
        match mode {
            PipelineMode::AbortOnError => {
                // The write was in the failed implicit transaction: rolled back, and the
                // lookups after it see n = 50 again.
                assert_eq!(
                    results[write.id() as usize].as_ref().unwrap_err().kind(),
                    ErrorKind::Aborted
                );
                assert_eq!(between.unwrap_err().kind(), ErrorKind::Aborted);
                assert_eq!(n(&after[0]), Some((5, 50)));
            }
            PipelineMode::ContinueOnError => {
                assert!(results[write.id() as usize].is_ok());
                assert!(between.is_ok());
                assert_eq!(n(&after[0]), Some((5, 123)));
                c.execute("UPDATE m SET n = 50 WHERE id = 5", &[])
                    .await
                    .unwrap();
            }
        }
        for op in &wrong {
            let e = results[op.id() as usize].as_ref().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Db, "{mode:?}: {e}");
        }
        assert_eq!(n(&after[1]), Some((7, 70)), "{mode:?}");
    }
}

/// DISCARD ALL queued in the block: the run before it is answered, a lookup queued after its
/// reply was read is refused (the OIDs were forgotten), and the next block resolves again.
#[tokio::test]
async fn discard_all_in_the_block_cuts_the_run_and_is_reported() {
    let (_cluster, mut c) = memopt_setup().await;
    let m = c.memopt_table("m").await.unwrap();
    let mut p = c.pipeline();
    let a = p.memopt_get(&m, &9i64).await.unwrap();
    let b = p.memopt_get(&m, &8i64).await.unwrap();
    let discard = p.execute("DISCARD ALL", &[]).await.unwrap();
    p.process(&discard).await.unwrap();
    let e = p.memopt_get(&m, &1i64).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert_eq!(p.process(&b).await.unwrap()[0].get::<_, i64>(0).unwrap(), 8);
    assert_eq!(p.process(&a).await.unwrap()[0].get::<_, i64>(0).unwrap(), 9);
    p.end().await;
    let row = c.memopt_get(&m, &3i64).await.unwrap().unwrap();
    assert_eq!(row.get::<_, i64>(0).unwrap(), 3);
}

/// A pipeline dropped with a run held: nothing of it is sent, and the connection answers
/// in step, the held keys' rows never handed to a later call.
#[tokio::test]
async fn a_pipeline_dropped_with_a_run_held_leaves_the_connection_in_step() {
    let (_cluster, mut c) = memopt_setup().await;
    let m = c.memopt_table("m").await.unwrap();
    {
        let mut p = c.pipeline();
        p.execute("UPDATE m SET n = 0 WHERE id = 1", &[])
            .await
            .unwrap();
        for k in 1..=10i64 {
            p.memopt_get(&m, &k).await.unwrap();
        }
    }
    // The abandoned abort-mode block was failed on purpose: its write never committed.
    let mut p = c.pipeline();
    let ops = [
        p.memopt_get(&m, &2i64).await.unwrap(),
        p.memopt_get(&m, &1i64).await.unwrap(),
    ];
    let results = bounded("the next block", p.end()).await;
    let ns: Vec<i32> = ops
        .iter()
        .map(|op| match &results[op.id() as usize] {
            Ok(Output::Rows(rows)) => rows[0].get("n").unwrap(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ns, [20, 10]);
    assert_eq!(
        c.query_one("SELECT 41 + 1", &[])
            .await
            .unwrap()
            .get::<_, i32>(0)
            .unwrap(),
        42
    );
}

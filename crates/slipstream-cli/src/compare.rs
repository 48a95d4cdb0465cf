//! `slipstream compare`.

use std::process::ExitCode;

use slipstream_lab::Table;
use slipstream_lab::bench::BenchRun;
use slipstream_lab::bench::compare::{Outcome, compare_runs, plot};
use slipstream_stats::{CompareSettings, Model, SamplerSettings};

use crate::cli::CompareArgs;
use crate::say;

pub fn compare(args: &CompareArgs) -> anyhow::Result<ExitCode> {
    let (a, b, unit, rope, model) = (&args.a, &args.b, args.unit, args.rope, args.model);
    let ra = BenchRun::read_json(a)?;
    let rb = BenchRun::read_json(b)?;
    let mut text = format!(
        "A = {} ({} TPS), B = {} ({} TPS); unit: {unit}; model: {}; ROPE ±{}% of the pooled mean\n",
        a.display(),
        format_args!("{:.0}", ra.tps()),
        b.display(),
        format_args!("{:.0}", rb.tps()),
        match model {
            Model::Gamma => "gamma",
            Model::Lognormal => "lognormal",
        },
        rope * 100.0
    );
    if ra.workload != rb.workload {
        text.push_str(&format!(
            "warning: A ran {} and B ran {}: only transaction types with the same name are compared\n",
            ra.workload, rb.workload
        ));
    }
    for (r, which) in [(&ra, "A"), (&rb, "B")] {
        if r.interrupted {
            text.push_str(&format!(
                "note: {which} was interrupted after {:.1} s\n",
                r.measured_s
            ));
        }
    }
    let settings = CompareSettings {
        rope,
        sampler: SamplerSettings {
            seed: args.seed,
            ..Default::default()
        },
        model,
    };
    let outcomes = compare_runs(&ra, &rb, args.transaction.as_deref(), unit, &settings)?;
    let mut table = Table::new(&[
        "transaction",
        "A mean ms",
        "B mean ms",
        "B - A (95% HDI)",
        "B / A (95% HDI)",
        "P(B slower)",
        "in ROPE",
        "verdict",
    ]);
    let mut skipped = Vec::new();
    for (name, outcome) in &outcomes {
        match outcome {
            Outcome::Compared(c) => {
                table.row(vec![
                    name.clone(),
                    format!("{:.3}", c.a.mean),
                    format!("{:.3}", c.b.mean),
                    format!(
                        "{:+.3} ({:+.3} .. {:+.3})",
                        c.diff.mean, c.diff.hdi.0, c.diff.hdi.1
                    ),
                    format!(
                        "{:.3} ({:.3} .. {:.3})",
                        c.ratio.mean, c.ratio.hdi.0, c.ratio.hdi.1
                    ),
                    format!("{:.3}", c.p_b_slower),
                    format!("{:.0}%", c.in_rope * 100.0),
                    c.verdict.to_string(),
                ]);
                if let Some(dir) = &args.plot {
                    plot(dir, name, c)?;
                }
            }
            Outcome::Skipped(why) => skipped.push(format!("{name}: not compared: {why}")),
        }
    }
    if !table.rows.is_empty() {
        text.push('\n');
        text.push_str(&table.render());
    }
    for s in &skipped {
        text.push_str(&format!("{s}\n"));
    }
    say(&text)?;
    if let Some(dir) = &args.plot
        && !table.rows.is_empty()
    {
        eprintln!("wrote figures into {}", dir.display());
    }
    anyhow::ensure!(
        !table.rows.is_empty(),
        "nothing could be compared (see the lines above)"
    );
    Ok(ExitCode::SUCCESS)
}

//! The versioned result of one experiment run, as written to JSON.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use slipstream_bench::{Environment, Series, Table, write_atomically};

/// Names this file format; readers check it before trusting the fields.
pub const SCHEMA: &str = "slipstream-lab/experiment";
/// Bumped on any incompatible change to [`ExperimentResult`].
pub const SCHEMA_VERSION: u32 = 1;

/// Everything one run of an experiment measured, and what it ran on.
///
/// ```
/// let r = slipstream_lab::ExperimentResult::new("demo", "A demo", true);
/// assert_eq!(r.schema_version, slipstream_lab::SCHEMA_VERSION);
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExperimentResult {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// The experiment's name (`roundtrip`, `connect`, ...).
    pub experiment: String,
    /// A one-line title.
    pub title: String,
    /// True for the reduced `--quick` form.
    pub quick: bool,
    /// When the run started (RFC 3339, UTC).
    pub started_at: String,
    /// Wall time of the whole run, in seconds.
    pub duration_s: f64,
    /// The knobs the run used (counts, sizes, rounds).
    pub parameters: BTreeMap<String, serde_json::Value>,
    /// Machine, software versions, server.
    pub environment: Environment,
    /// The table printed to the terminal.
    pub table: Table,
    /// Data behind the chart.
    pub series: Vec<Series>,
    /// Named ratios against peers (`> 1` means slipstream is faster unless the name says otherwise).
    /// A figure that does not exist is NaN (`failover`'s times for a pool that never wrote on
    /// the new primary, `rebalance`'s for one that never read from the restarted standby):
    /// JSON has no NaN, so the file says `null`, and reading gives NaN back.
    #[serde(deserialize_with = "nan_for_null")]
    pub ratios: BTreeMap<String, f64>,
    /// Caveats a reader needs (noise warnings, what a peer could not do).
    pub notes: Vec<String>,
}

impl ExperimentResult {
    /// An empty result for `experiment`, stamped now.
    /// ```
    /// let r = slipstream_lab::ExperimentResult::new("my-experiment", "What it measures", false);
    /// assert_eq!((r.experiment.as_str(), r.quick), ("my-experiment", false));
    /// assert!(r.ratios.is_empty() && r.started_at.ends_with('Z'));
    /// ```
    pub fn new(experiment: &str, title: &str, quick: bool) -> ExperimentResult {
        ExperimentResult {
            schema: SCHEMA.into(),
            schema_version: SCHEMA_VERSION,
            experiment: experiment.into(),
            title: title.into(),
            quick,
            started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            duration_s: 0.0,
            parameters: BTreeMap::new(),
            environment: Environment::default(),
            table: Table::default(),
            series: Vec::new(),
            ratios: BTreeMap::new(),
            notes: Vec::new(),
        }
    }

    /// Records a parameter.
    /// ```
    /// let mut r = slipstream_lab::ExperimentResult::new("demo", "A demo", true);
    /// r.param("rounds", 5);
    /// r.param("workload", "read-only");
    /// assert_eq!(r.parameters["rounds"], 5);
    /// ```
    pub fn param(&mut self, name: &str, value: impl Into<serde_json::Value>) {
        self.parameters.insert(name.into(), value.into());
    }

    /// Writes the result as pretty JSON, atomically: a reader never sees half a file.
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("demo.json");
    /// let mut r = slipstream_lab::ExperimentResult::new("demo", "A demo", true);
    /// r.ratios.insert("ours_over_peer".into(), f64::NAN); // never measured: written as null
    /// r.write_json(&path)?;
    /// assert!(std::fs::read_to_string(&path)?.contains("\"ours_over_peer\": null"));
    /// # Ok::<(), anyhow::Error>(())
    /// ```
    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        write_atomically(path, text.as_bytes())
    }

    /// Reads a result file, checking its schema.
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("demo.json");
    /// let mut r = slipstream_lab::ExperimentResult::new("demo", "A demo", true);
    /// r.ratios.insert("ours_over_peer".into(), 1.25);
    /// r.write_json(&path)?;
    /// assert_eq!(slipstream_lab::ExperimentResult::read_json(&path)?.ratios["ours_over_peer"], 1.25);
    /// std::fs::write(&path, r#"{"schema": "something else"}"#)?;
    /// assert!(slipstream_lab::ExperimentResult::read_json(&path).is_err());
    /// # Ok::<(), anyhow::Error>(())
    /// ```
    pub fn read_json(path: &Path) -> anyhow::Result<ExperimentResult> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("could not read {}: {e}", path.display()))?;
        let r: ExperimentResult = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{} is not a slipstream experiment result: {e}",
                path.display()
            )
        })?;
        anyhow::ensure!(
            r.schema == SCHEMA && r.schema_version <= SCHEMA_VERSION,
            "{} has schema {} v{}; this slipstream reads {SCHEMA} up to v{SCHEMA_VERSION}",
            path.display(),
            r.schema,
            r.schema_version
        );
        Ok(r)
    }
}

/// Reads the ratios, `null` (what serde_json writes for NaN) as NaN: without it a result with
/// a figure that does not exist could be written but not read back.
fn nan_for_null<'de, D>(d: D) -> Result<BTreeMap<String, f64>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let ratios = BTreeMap::<String, Option<f64>>::deserialize(d)?;
    Ok(ratios
        .into_iter()
        .map(|(name, v)| (name, v.unwrap_or(f64::NAN)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trips_and_checks_the_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        let mut r = ExperimentResult::new("x", "X", true);
        r.ratios.insert("a_vs_b".into(), 1.5);
        r.write_json(&path).unwrap();
        assert_eq!(
            ExperimentResult::read_json(&path).unwrap().ratios["a_vs_b"],
            1.5
        );
        std::fs::write(&path, r#"{"schema":"other"}"#).unwrap();
        assert!(ExperimentResult::read_json(&path).is_err());
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left behind");
    }

    /// `write_json` then `read_json` gives the result back, whatever it measured. Steps: a
    /// result with a NaN ratio, as `failover` and `rebalance` write for a pool that never got
    /// there ("'NaN' where a pool never wrote on the new primary"). Before the fix the file
    /// said `null` and reading it failed: "invalid type: null, expected f64".
    #[test]
    fn a_figure_that_does_not_exist_survives_the_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("failover.json");
        let mut r = ExperimentResult::new("failover", "F", true);
        r.ratios.insert("bb8_all_writers_ms".into(), f64::NAN);
        r.ratios.insert("slipstream_all_writers_ms".into(), 12.5);
        r.write_json(&path).unwrap();
        let back = ExperimentResult::read_json(&path).unwrap();
        assert!(
            back.ratios["bb8_all_writers_ms"].is_nan(),
            "{:?}",
            back.ratios
        );
        assert_eq!(back.ratios["slipstream_all_writers_ms"], 12.5);
    }
}

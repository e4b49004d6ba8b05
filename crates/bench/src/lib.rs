//! Flotilla's benchmark scenarios.
//!
//! Every scenario measures Flotilla and the limit it is judged against side by side, in the
//! same run on the same machine, and reports the ratio: numbers from another day or another
//! machine are not comparable.
//!
//! ```text
//!   store:        raw rusqlite loop (same file system, WAL, synchronous=FULL, same batch
//!                 sizes) vs SqliteStore (group commit, revision log, watch)
//!   api:          the hub's API over HTTPS vs the same calls on its store; watch fan-out
//!   admission:    creates with no policies vs 20 non-matching and 5 matching
//!                 ValidatingAdmissionPolicies, and a matching webhook on loopback
//!   rbac:         a service account's requests vs the admin's on a hub holding a large
//!                 RBAC policy; the policy's idle RSS
//!   baseline:     this binary's hub vs another binary's (a previous commit's), both running,
//!                 in alternating rounds: GET and create at 1, 16, 64 clients; idle RSS
//!   propagation:  a template change through the hub to N simulated members vs the bench
//!                 applying the same object to them itself (bare-apply baseline)
//!   resync:       P placements × N clusters: the hub restarted, until every Work is in sync
//!                 again; its peak memory
//!   rollout:      a Rolling rollout (10 % at a time) over N simulated members vs the time
//!                 its ten waves must take (ready delay + propagation each, + 10 %)
//!   memory:       hub memory per joined cluster and per Work, simulator memory per cluster
//!   failover:     two hub replicas on PostgreSQL or etcd: kill -9 of the fleet Lease's
//!                 holder → Lease taken over, first reconcile on the new leader, every
//!                 member changed; against the target (< 20 s with default leases)
//! ```
//!
//! Each writes `DIR/<scenario>.json` ([`write`]) and SVG charts ([`plot`]), and gives rows
//! of the one-screen [`summary`].

pub mod admission;
pub mod api;
pub mod baseline;
pub mod failover;
mod harness;
pub mod memory;
pub mod plot;
pub mod propagation;
pub mod pull;
pub mod rbac;
pub mod resync;
pub mod rollout;
mod room;
pub mod server_store;
pub mod store;
pub mod system;
pub mod views;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store under test failed.
    #[error("store: {0}")]
    Store(#[from] flotilla_store::Error),
    /// The raw SQLite baseline failed.
    #[error("raw sqlite baseline: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// Files could not be created or written.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A benchmark task died.
    #[error("a benchmark task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A check of the benchmark's own results failed.
    #[error("benchmark check failed: {0}")]
    Check(String),
}

/// Percentiles of a set of durations.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    /// Median, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile, in milliseconds.
    pub p99_ms: f64,
    /// Largest, in milliseconds.
    pub max_ms: f64,
    /// How many samples.
    pub samples: usize,
}

impl Latency {
    /// The percentiles of `samples` (nearest-rank).
    pub fn of(mut samples: Vec<Duration>) -> Self {
        if samples.is_empty() {
            return Latency::default();
        }
        samples.sort_unstable();
        let rank = |p: f64| {
            let i = ((p / 100.0) * samples.len() as f64).ceil() as usize;
            samples[i.clamp(1, samples.len()) - 1].as_secs_f64() * 1e3
        };
        Latency {
            p50_ms: rank(50.0),
            p99_ms: rank(99.0),
            max_ms: samples[samples.len() - 1].as_secs_f64() * 1e3,
            samples: samples.len(),
        }
    }

    /// As JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "p50_ms": self.p50_ms, "p99_ms": self.p99_ms, "max_ms": self.max_ms, "samples": self.samples
        })
    }
}

pub(crate) fn check(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Check(format!("{what}: {e}"))
}

/// The ratio of two figures (NaN when the second is not positive).
pub fn ratio(measured: f64, limit: f64) -> f64 {
    if limit > 0.0 {
        measured / limit
    } else {
        f64::NAN
    }
}

/// The median over pairs `(baseline, measured)` taken side by side (one round each) of
/// `measured / baseline`: a round in which the machine was busier moves both of its figures,
/// and the median leaves out the rounds a burst hit on one side only. NaN with no pairs.
pub fn paired_ratio(pairs: &[(f64, f64)]) -> f64 {
    median(
        pairs
            .iter()
            .map(|(baseline, measured)| ratio(*measured, *baseline))
            .collect(),
    )
}

/// The median of `values` (the mean of the two middle ones when they are even); NaN when
/// there are none.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[middle - 1] + values[middle]) / 2.0
    } else {
        values[middle]
    }
}

/// Progress lines on stderr for one step of a scenario: `propagation N=100: joining 37/100…`,
/// at most one every two seconds for counts.
pub struct Progress {
    prefix: String,
    last: Option<Instant>,
}

impl Progress {
    /// Lines starting with `prefix`.
    pub fn new(prefix: impl Into<String>) -> Self {
        Progress {
            prefix: prefix.into(),
            last: None,
        }
    }

    /// Says what starts now.
    pub fn step(&mut self, what: &str) {
        eprintln!("{}: {what}…", self.prefix);
        self.last = Some(Instant::now());
    }

    /// Says how far a count is: the first, the last, and every two seconds between.
    pub fn count(&mut self, what: &str, done: usize, total: usize) {
        let due = self
            .last
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(2));
        if done == total || due {
            eprintln!("{}: {what} {done}/{total}…", self.prefix);
            self.last = Some(Instant::now());
        }
    }
}

/// A scenario's results, ready to be written.
#[derive(Debug)]
pub struct Output {
    /// The scenario's name (`propagation`): the file names' start.
    pub scenario: &'static str,
    /// When it started (RFC 3339, UTC).
    pub date: String,
    /// The options it ran with.
    pub options: Value,
    /// Its numbers (an object: its fields go to the top level of the file).
    pub results: Value,
    /// Its charts, by what they show (`latency` → `DIR/<scenario>-latency.svg`).
    pub charts: Vec<(&'static str, plot::Chart)>,
}

/// The document `DIR/<scenario>.json` holds: the scenario, the date, the machine, the
/// options and the results.
pub fn document(output: &Output, machine: &system::Machine) -> Value {
    let mut document = json!({
        "scenario": output.scenario,
        "date": output.date,
        "machine": machine.json(),
        "options": output.options,
    });
    match (&output.results, document.as_object_mut()) {
        (Value::Object(results), Some(top)) => {
            for (k, v) in results {
                if k != "scenario" {
                    top.insert(k.clone(), v.clone());
                }
            }
        }
        (other, Some(top)) => {
            top.insert("results".into(), other.clone());
        }
        _ => {}
    }
    document
}

/// Writes `DIR/<scenario>.json` and its charts; returns the files written.
pub fn write(dir: &Path, output: &Output) -> Result<Vec<PathBuf>, Error> {
    std::fs::create_dir_all(dir)?;
    let json = dir.join(format!("{}.json", output.scenario));
    let text = serde_json::to_string_pretty(&document(output, &system::Machine::this()))
        .map_err(|e| check("json", e))?;
    std::fs::write(&json, text + "\n")?;
    let mut files = vec![json];
    for (what, chart) in &output.charts {
        let svg = dir.join(format!("{}-{what}.svg", output.scenario));
        std::fs::write(&svg, chart.svg())?;
        files.push(svg);
    }
    Ok(files)
}

/// One line of the summary: a figure and what it is judged against.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The scenario.
    pub scenario: &'static str,
    /// What was measured, and at which size.
    pub what: String,
    /// The figure.
    pub value: String,
    /// Its limit or target.
    pub target: String,
}

impl Row {
    /// A row.
    pub fn new(
        scenario: &'static str,
        what: impl Into<String>,
        value: impl Into<String>,
        target: impl Into<String>,
    ) -> Self {
        Row {
            scenario,
            what: what.into(),
            value: value.into(),
            target: target.into(),
        }
    }
}

/// The one-screen summary table of `rows`.
pub fn summary(rows: &[Row]) -> String {
    let header = Row::new("scenario", "measured", "value", "target / limit");
    let width = |f: fn(&Row) -> usize| {
        rows.iter()
            .chain(std::iter::once(&header))
            .map(f)
            .max()
            .unwrap_or(0)
    };
    let w = [
        width(|r| r.scenario.chars().count()),
        width(|r| r.what.chars().count()),
        width(|r| r.value.chars().count()),
    ];
    let line = |r: &Row| {
        format!(
            "{:<a$}  {:<b$}  {:<c$}  {}",
            r.scenario,
            r.what,
            r.value,
            r.target,
            a = w[0],
            b = w[1],
            c = w[2]
        )
        .trim_end()
        .to_owned()
            + "\n"
    };
    let mut out = line(&header);
    let mut last = "";
    for row in rows {
        if row.scenario != last && !last.is_empty() {
            out.push('\n');
        }
        last = row.scenario;
        out += &line(row);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples = (1..=100).map(Duration::from_millis).collect();
        let l = Latency::of(samples);
        assert_eq!(
            (l.p50_ms, l.p99_ms, l.max_ms, l.samples),
            (50.0, 99.0, 100.0, 100)
        );
        let one = Latency::of(vec![Duration::from_millis(3)]);
        assert_eq!((one.p50_ms, one.p99_ms), (3.0, 3.0));
        assert_eq!(Latency::of(Vec::new()).samples, 0);
    }

    #[test]
    fn the_summary_lines_up_its_columns() {
        let rows = [
            Row::new("api", "get p99 ratio", "1.5×", "≤ 2×"),
            Row::new("propagation", "N=10 hub p99", "120 ms", ""),
        ];
        let text = summary(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("scenario     measured"), "{text}");
        assert_eq!(lines[1].find("1.5×"), lines[0].find("value"), "{text}");
        assert!(lines[1].ends_with("≤ 2×"), "{text}");
        assert!(lines[2].is_empty(), "{text}");
        assert!(lines[3].starts_with("propagation  N=10"), "{text}");
    }

    #[test]
    fn a_document_carries_the_date_machine_and_options() {
        let output = Output {
            scenario: "demo",
            date: "2025-01-01T00:00:00Z".into(),
            options: json!({"n": 3}),
            results: json!({"scenario": "other", "x": 1.5}),
            charts: Vec::new(),
        };
        let machine = system::Machine {
            cores: 2,
            memory_mib: 1024.0,
            cpu: None,
        };
        let doc = document(&output, &machine);
        assert_eq!(doc["scenario"], "demo");
        assert_eq!(doc["options"]["n"], 3);
        assert_eq!(doc["machine"]["cores"], 2);
        assert_eq!(doc["x"], 1.5);
        let dir = tempfile::tempdir().unwrap();
        let files = write(dir.path(), &output).unwrap();
        assert_eq!(files, [dir.path().join("demo.json")]);
    }
}

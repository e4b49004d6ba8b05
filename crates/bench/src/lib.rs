//! Flotilla's benchmark scenarios.
//!
//! Every scenario measures Flotilla and the limit it is judged against side by side, in the
//! same run on the same machine, and reports the ratio: numbers from another day or another
//! machine are not comparable.
//!
//! ```text
//!   api:    the hub's API over HTTPS vs the same calls on its store; watch fan-out
//!   store:  raw rusqlite loop (same file system, WAL, synchronous=FULL, same batch sizes)
//!           vs SqliteStore (group commit, revision log, watch)
//! ```

pub mod api;
pub mod fleet;
pub mod store;

use std::time::Duration;

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
}

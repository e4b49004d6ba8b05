//! `flotilla bench --scenario store --quick --store postgres://… | etcd://…` against a
//! PostgreSQL and an etcd the tests start: the store against its raw engine, the watch
//! delivery under 64 writers, and on etcd the create-if-absent floor. Each is run twice on
//! the same server: a run writes under keys of its own, so an earlier run's keys do not
//! refuse the next one's creates. No timing is asserted.

#[path = "../../store-etcd/tests/support/etcd.rs"]
mod etcd;
#[path = "../../store-postgres/tests/support/postgres.rs"]
mod postgres;

use std::process::Command;

use serde_json::Value;

/// Runs the store scenario on `url`; its report.
fn bench(url: &str) -> Value {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args([
            "bench",
            "--quick",
            "--scenario",
            "store",
            "--store",
            url,
            "--out",
        ])
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("store") && l.contains("watch delivery p99")),
        "{stdout}"
    );
    let text = std::fs::read_to_string(out.path().join("store.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn positive(v: &Value) -> f64 {
    let x = v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    assert!(x.is_finite() && x > 0.0, "{v}");
    x
}

/// What every engine's report holds: three writer counts with both sides measured, and a
/// watch that saw each of the 640 writes.
fn check(report: &Value, engine: &str) {
    let results = report;
    assert_eq!(results["engine"], engine, "{report}");
    let by_writers = results["by_writers"].as_array().unwrap();
    let writers: Vec<u64> = by_writers
        .iter()
        .map(|w| w["writers"].as_u64().unwrap())
        .collect();
    assert_eq!(writers, [1, 16, 64], "{report}");
    for w in by_writers {
        positive(&w["raw_per_second"]);
        positive(&w["store_per_second"]);
        positive(&w["ratio"]);
    }
    for latency in ["watch_delivery_after_ack", "watch_delivery_end_to_end"] {
        assert_eq!(results[latency]["samples"], 640, "{latency}: {report}");
    }
}

#[test]
fn the_store_benchmark_runs_twice_on_one_postgresql() {
    let pg = postgres::PgServer::start();
    for _ in 0..2 {
        let report = bench(&pg.url());
        check(&report, "postgres");
        assert!(
            report["floor_by_writers"].as_array().unwrap().is_empty(),
            "{report}"
        );
    }
}

#[test]
fn the_store_benchmark_on_etcd_measures_the_create_if_absent_floor() {
    let server = etcd::EtcdServer::start();
    for _ in 0..2 {
        let report = bench(&server.url("/bench"));
        check(&report, "etcd");
        let floor = report["floor_by_writers"].as_array().unwrap();
        assert_eq!(floor.len(), 3, "{report}");
        for f in floor {
            positive(&f["floor_per_second"]);
            positive(&f["store_to_floor"]);
        }
    }
}

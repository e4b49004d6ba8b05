//! `flotilla bench --quick --scenario fleet`: a real hub, simulator and joins; every
//! member's watch sees the template change, and the results file says so.

use std::process::Command;

#[test]
fn the_quick_fleet_benchmark_measures_every_member() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["bench", "--quick", "--scenario", "fleet", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("prop p99 ms"), "{stdout}");
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("fleet.json")).unwrap()).unwrap();
    let point = &results["points"][0];
    assert_eq!(point["clusters"], 10, "{results}");
    assert_eq!(point["propagation"]["samples"], 10, "{results}");
    let p99 = point["propagation"]["p99_ms"].as_f64().unwrap();
    let max = point["propagation"]["max_ms"].as_f64().unwrap();
    assert!(p99 > 0.0 && p99 <= max, "{results}");
    assert!(
        point["hub_rss_placed_mib"].as_f64().unwrap() > 0.0,
        "{results}"
    );
}

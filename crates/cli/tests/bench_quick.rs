//! `flotilla bench --quick`: every scenario runs (real hub, simulator and joins for the
//! fleet ones), and each writes a results file of the expected shape and its charts. No
//! timing is asserted: only that the numbers are there and make sense.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn results(dir: &Path, scenario: &str) -> Value {
    let file = dir.join(format!("{scenario}.json"));
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
    let json: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["scenario"], scenario, "{json}");
    assert!(
        json["date"].as_str().is_some_and(|d| d.ends_with('Z')),
        "{json}"
    );
    assert!(json["machine"]["cores"].as_u64().unwrap() >= 1, "{json}");
    assert!(positive(&json["machine"]["memory_total_mib"]), "{json}");
    assert!(json["options"].is_object(), "{json}");
    json
}

fn number(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn positive(v: &Value) -> bool {
    let n = number(v);
    n.is_finite() && n > 0.0
}

/// A latency object: finite, positive, ordered, with `samples` samples.
fn latency(v: &Value, samples: u64) {
    assert_eq!(v["samples"], samples, "{v}");
    for k in ["p50_ms", "p99_ms", "max_ms"] {
        assert!(positive(&v[k]), "{k}: {v}");
    }
    assert!(number(&v["p50_ms"]) <= number(&v["p99_ms"]), "{v}");
    assert!(number(&v["p99_ms"]) <= number(&v["max_ms"]), "{v}");
}

/// The chart exists, is an SVG, and has one line per series.
fn chart(dir: &Path, name: &str, series: usize) {
    let file = dir.join(format!("{name}.svg"));
    let svg = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
    assert!(svg.starts_with("<svg"), "{name}: {svg}");
    assert!(svg.trim_end().ends_with("</svg>"), "{name}");
    assert_eq!(svg.matches("<polyline").count(), series, "{name}: {svg}");
    assert!(!svg.contains("NaN"), "{name}: {svg}");
}

#[test]
fn the_quick_benchmark_runs_every_scenario_and_writes_results_and_charts() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["bench", "--quick", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    let dir = out.path();

    // The summary on stdout, progress on stderr.
    assert!(stdout.starts_with("scenario"), "{stdout}");
    for scenario in [
        "store",
        "api",
        "admission",
        "rbac",
        "propagation",
        "resync",
        "memory",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(scenario)),
            "{scenario}: {stdout}"
        );
    }
    assert!(
        stderr.contains("propagation N=10: joining 10/10"),
        "{stderr}"
    );

    let store = results(dir, "store");
    assert!(positive(
        &store["raw_sqlite"]["single_row_commit"]["p50_ms"]
    ));
    for w in store["store"]["by_writers"].as_array().unwrap() {
        assert!(positive(&w["per_second"]), "{store}");
    }
    chart(dir, "store-throughput", 2);

    let api = results(dir, "api");
    let ops = api["ops"].as_array().unwrap();
    assert_eq!(ops.len(), 9, "{api}");
    for op in ops {
        assert!(positive(&op["api"]["p99_ms"]) && positive(&op["store"]["p99_ms"]));
        assert!(positive(&op["p99_ratio"]), "{op}");
    }
    for op in ops {
        // The HTTPS floor serves creates.
        let floor = &op["floor"];
        assert_eq!(floor.is_null(), op["op"] != "create", "{op}");
        if !floor.is_null() {
            assert!(positive(&floor["api_p50_ratio_to_floor"]), "{op}");
        }
    }
    // API p50/p99, store p50/p99, and the floor's p50 where there is one.
    for (op, lines) in [("create", 5), ("get", 4), ("update", 4)] {
        chart(dir, &format!("api-{op}"), lines);
    }

    // The seven configurations side by side; every create of the webhook's reviewed.
    let admission = results(dir, "admission");
    let configurations = admission["configurations"].as_array().unwrap();
    let names: Vec<&str> = configurations
        .iter()
        .map(|c| c["configuration"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "none",
            "vap20",
            "vap5",
            "webhook",
            "builtin",
            "builtin-off",
            "builtin-off-defaulted"
        ],
        "{admission}"
    );
    for c in configurations {
        latency(&c["create"], 400);
        assert!(positive(&c["p50_ratio_to_none"]), "{c}");
        assert_eq!(c["rounds_p50_ms"].as_array().unwrap().len(), 2, "{c}");
    }
    assert_eq!(admission["webhook_calls"], 400, "{admission}");
    assert!(number(&admission["webhook_added_p50_ms"]).is_finite());
    assert!(
        positive(&admission["builtin_p50_ratio_to_builtin_off"]),
        "{admission}"
    );
    assert!(
        positive(&admission["builtin_p50_ratio_to_builtin_off_defaulted"]),
        "{admission}"
    );
    chart(dir, "admission-latency", 7);

    // The service account's requests against the admin's, every one answered, on a hub
    // holding the policy the quick run loads; its idle memory before and after.
    let rbac = results(dir, "rbac");
    assert_eq!(rbac["loaded"]["cluster_roles"], 100, "{rbac}");
    assert_eq!(rbac["loaded"]["role_bindings"], 1_000, "{rbac}");
    let ops = rbac["ops"].as_array().unwrap();
    let names: Vec<&str> = ops.iter().map(|o| o["op"].as_str().unwrap()).collect();
    assert_eq!(names, ["get", "create"], "{rbac}");
    for op in ops {
        latency(&op["admin"], 400);
        latency(&op["service_account"], 400);
        latency(&op["padded_admin"], 400);
        assert!(number(&op["overhead"]).is_finite(), "{op}");
        assert!(number(&op["bytes_overhead"]).is_finite(), "{op}");
        assert!(number(&op["auth_overhead"]).is_finite(), "{op}");
        assert_eq!(op["rounds_p50_ms"].as_array().unwrap().len(), 2, "{op}");
        assert_eq!(
            op["rounds_padded_p50_ms"].as_array().unwrap().len(),
            2,
            "{op}"
        );
        for who in ["admin", "service_account", "padded_admin"] {
            assert!(positive(&op["cpu_per_request"][who]["hub_us"]), "{op}");
            assert!(positive(&op["cpu_per_request"][who]["client_us"]), "{op}");
        }
    }
    assert!(positive(&rbac["idle_rss_empty_mib"]), "{rbac}");
    assert!(positive(&rbac["idle_rss_loaded_mib"]), "{rbac}");

    let propagation = results(dir, "propagation");
    let points = propagation["points"].as_array().unwrap();
    let sizes: Vec<u64> = points
        .iter()
        .map(|p| p["clusters"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [5, 10], "{propagation}");
    // Six members per simulator in the quick run: the 10 are served by two side by side.
    assert_eq!(
        propagation["options"]["members_per_sim"], 6,
        "{propagation}"
    );
    let simulators: Vec<u64> = points
        .iter()
        .map(|p| p["simulators"].as_u64().unwrap())
        .collect();
    assert_eq!(simulators, [1, 2], "{propagation}");
    for p in points {
        let n = p["clusters"].as_u64().unwrap();
        latency(&p["hub"], n);
        latency(&p["baseline"], n);
        for k in [
            "overhead_p99",
            "overhead_p50",
            "join_s",
            "place_s",
            "hub_rss_idle_mib",
            "hub_rss_joined_mib",
            "hub_rss_placed_mib",
            "sim_rss_joined_mib",
        ] {
            assert!(positive(&p[k]), "{k}: {p}");
        }
        // The hub's requests for the change, its controllers' in-process ones included:
        // at least the Works written (server-side apply) for every member.
        let patched_works = p["hub_requests"]["PATCH works"].as_u64().unwrap_or(0);
        assert!(patched_works >= n, "{}", p["hub_requests"]);
        // CPU seconds per phase and process: numbers (a small fleet may use under a tick).
        for phase in ["baseline", "hub"] {
            for process in ["hub", "sim", "bench"] {
                assert!(number(&p["cpu_s"][phase][process]) >= 0.0, "{p}");
            }
        }
    }
    assert_eq!(
        propagation["options"]["concurrency"],
        flotilla_fleet::runtime::PUSH_CONCURRENCY
    );
    chart(dir, "propagation-latency", 4);
    chart(dir, "propagation-memory", 4);

    let resync = results(dir, "resync");
    let (placements, clusters) = (
        resync["options"]["placements"].as_u64().unwrap(),
        resync["options"]["clusters"].as_u64().unwrap(),
    );
    assert_eq!((placements, clusters), (20, 5), "{resync}");
    assert_eq!(resync["works"], placements * clusters, "{resync}");
    assert_eq!(resync["works_in_sync"], placements * clusters, "{resync}");
    for k in [
        "setup_s",
        "resync_s",
        "hub_rss_joined_mib",
        "hub_rss_in_sync_mib",
        "peak_rss_hwm_mib",
        "peak_rss_sampled_mib",
    ] {
        assert!(positive(&resync[k]), "{k}: {resync}");
    }
    assert!(number(&resync["peak_rss_hwm_mib"]) >= number(&resync["peak_rss_sampled_mib"]));
    assert!(!resync["timeline"]["in_sync"].as_array().unwrap().is_empty());
    chart(dir, "resync-in-sync", 1);
    chart(dir, "resync-memory", 1);

    // Derived from the runs above: finite (a slope over two small fleets may be noise).
    let memory = results(dir, "memory");
    assert_eq!(
        memory["source"], "the propagation and resync scenarios",
        "{memory}"
    );
    for k in [
        "hub_kib_per_cluster",
        "hub_kib_per_work",
        "hub_kib_per_work_restarted",
        "sim_kib_per_cluster",
    ] {
        assert!(number(&memory[k]).is_finite(), "{k}: {memory}");
    }
    assert_eq!(memory["samples"].as_array().unwrap().len(), 2);
    assert_eq!(memory["resync"]["works"], placements * clusters);
    chart(dir, "memory-fit", 4);
}

#[test]
fn the_memory_scenario_alone_runs_its_own_series() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["bench", "--quick", "--scenario", "memory", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let memory = results(out.path(), "memory");
    assert_eq!(memory["source"], "an own series", "{memory}");
    assert_eq!(memory["options"]["own_propagation"]["clusters"][1], 10);
    assert_eq!(memory["options"]["own_resync"]["placements"], 20);
    assert_eq!(memory["resync"]["works"], 100, "{memory}");
    assert!(number(&memory["hub_kib_per_work"]).is_finite(), "{memory}");
    chart(out.path(), "memory-fit", 4);
    assert!(!out.path().join("propagation.json").exists());
}

#[test]
fn the_baseline_scenario_can_give_the_hubs_a_cpu_of_their_own() {
    // This binary against itself, both hubs on the last CPU and the clients on the others.
    let out = tempfile::tempdir().unwrap();
    let binary = env!("CARGO_BIN_EXE_flotilla");
    let run = Command::new(binary)
        .args([
            "bench",
            "--quick",
            "--scenario",
            "baseline",
            "--baseline",
            binary,
        ])
        .args(["--split-cpus", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
    let cpus = std::thread::available_parallelism().unwrap().get();
    if cpus < 2 {
        assert!(!run.status.success());
        assert!(stderr.contains("needs two CPUs or more"), "{stderr}");
        return;
    }
    assert!(run.status.success(), "{stdout}\n{stderr}");
    let baseline = results(out.path(), "baseline");
    assert_eq!(baseline["options"]["split_cpus"], true, "{baseline}");
    let last = (cpus - 1).to_string();
    let split = &baseline["cpus"];
    assert_eq!(split["ours"], last.as_str(), "{split}");
    assert_eq!(split["theirs"], last.as_str(), "{split}");
    let clients = split["clients"].as_str().unwrap();
    assert!(
        !clients.is_empty() && !clients.split([',', '-']).any(|cpu| cpu == last),
        "{split}"
    );
    for phase in baseline["phases"].as_array().unwrap() {
        for side in ["ours", "theirs"] {
            assert!(positive(&phase[side]["p50_ms"]), "{phase}");
        }
    }
}

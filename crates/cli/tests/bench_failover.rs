//! `flotilla bench --scenario failover --quick --store postgres://…` against a PostgreSQL the
//! test starts: two hub replicas, the fleet Lease's holder killed (SIGKILL), a template
//! change through the other. The report names the survivor as the Lease's new holder,
//! its first reconcile comes no later than every member running the change, and the
//! members' untouched objects kept their resourceVersions. No timing is asserted.
//!
//! ```text
//!  PostgreSQL (temp dir) ◄── bench: database flotilla_failover_* ◄── hub a, hub b
//!                                  flotilla sim (3 members)
//! ```

#[path = "../../store-postgres/tests/support/postgres.rs"]
mod postgres;

use std::process::Command;

use serde_json::Value;

fn seconds(v: &Value) -> f64 {
    let s = v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    assert!(s.is_finite() && s > 0.0, "{v}");
    s
}

#[test]
fn the_failover_benchmark_kills_the_leader_and_reports_the_takeover() {
    let pg = postgres::PgServer::start();
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["bench", "--quick", "--scenario", "failover", "--store"])
        .arg(pg.url())
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.lines().any(|l| l.starts_with("failover")
            && l.contains("first reconcile on the new leader")
            && l.ends_with("< 20 s")),
        "{stdout}"
    );

    let text = std::fs::read_to_string(out.path().join("failover.json")).unwrap();
    let report: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["scenario"], "failover", "{report}");
    assert_eq!(report["engine"], "postgres", "{report}");
    assert_eq!(report["options"]["rounds"], 1, "{report}");
    assert!(
        !report["options"]["store"].as_str().unwrap().is_empty(),
        "{report}"
    );
    let rounds = report["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 1, "{report}");
    let clusters = report["clusters"].as_u64().unwrap();
    assert_eq!(clusters, 3, "{report}");
    for round in rounds {
        // The survivor took the Lease: its identity names its process, not the killed one.
        assert_ne!(round["killed"], round["survivor"], "{round}");
        assert_ne!(round["killed_pid"], round["survivor_pid"], "{round}");
        let identity = round["survivor_identity"].as_str().unwrap();
        let pid = round["survivor_pid"].as_u64().unwrap();
        assert!(identity.contains(&format!("_{pid}_")), "{round}");
        assert_eq!(round["survivor_took_lease"], true, "{round}");
        // The new leader's first reconcile (a Work with the new image) comes before (or
        // with) the last member running it.
        let first = seconds(&round["first_reconcile_s"]);
        let all = seconds(&round["all_members_s"]);
        seconds(&round["lease_taken_s"]);
        assert!(first <= all, "{round}");
        assert_eq!(round["members"]["samples"], clusters, "{round}");
        // No member object re-applied needlessly: every member's copy checked.
        assert_eq!(round["no_reapply"], true, "{round}");
        assert_eq!(round["unchanged_objects_checked"], clusters, "{round}");
    }
    for k in ["lease_taken", "first_reconcile", "all_members"] {
        assert_eq!(report[k]["samples"], 1, "{k}: {report}");
        seconds(&report[k]["p50_ms"]);
        seconds(&report[k]["max_ms"]);
    }
    assert_eq!(report["target_s"], 20.0, "{report}");

    // The run's own database is gone; the server's given one untouched.
    let psql = postgres::bindir().join("psql");
    let databases = Command::new(psql)
        .arg(pg.url())
        .args(["-At", "-c", "SELECT datname FROM pg_database"])
        .output()
        .unwrap();
    let names = String::from_utf8_lossy(&databases.stdout);
    assert!(databases.status.success(), "{names}");
    assert!(!names.contains("flotilla_failover"), "{names}");
}

#[test]
fn the_failover_benchmark_refuses_to_run_without_a_database_server() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["bench", "--quick", "--scenario", "failover", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(
        stderr.contains("--scenario failover needs --store postgres://… or etcd://…"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!out.path().join("failover.json").exists());
}

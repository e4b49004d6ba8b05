//! `flotilla hub --audit-log-path`: a scripted kubectl session against the real hub
//! binary, read back from its audit log (`audit.k8s.io/v1` Events as JSON lines), with
//! and without `--audit-policy-file`.

mod support;

use std::path::Path;

use serde_json::Value;
use support::audit::{events, summary};
use support::{Hub, eventually};

/// The admin's events (not the hub's own in-process requests).
fn admin_events(log: &Path) -> Vec<Value> {
    events(log)
        .into_iter()
        .filter(|e| e["user"]["username"] == "flotilla:admin")
        .collect()
}

fn expected(
    verb: &str,
    resource: &str,
    namespace: &str,
    name: &str,
    code: i64,
) -> (String, String, String, String, i64) {
    (
        verb.into(),
        resource.into(),
        namespace.into(),
        name.into(),
        code,
    )
}

const CONFIGMAP: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: web, namespace: audited}
data: {colour: blue}
"#;

#[test]
fn a_kubectl_session_is_in_the_audit_log_one_event_per_request_and_stage() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("audit.log");
    let hub = Hub::start_with(&["--audit-log-path", log.to_str().unwrap()]);
    hub.ok(&["create", "namespace", "audited"]);
    hub.create(CONFIGMAP);
    hub.ok(&["get", "configmap", "web", "-n", "audited", "-o", "json"]);
    let missing = hub.fails(&["get", "configmap", "missing", "-n", "audited"]);
    assert!(missing.contains("not found"), "{missing}");
    hub.ok(&["delete", "configmap", "web", "-n", "audited"]);

    let session = [
        expected("create", "namespaces", "", "audited", 201),
        expected("create", "configmaps", "audited", "web", 201),
        expected("get", "configmaps", "audited", "web", 200),
        expected("get", "configmaps", "audited", "missing", 404),
        expected("delete", "configmaps", "audited", "web", 200),
    ];
    // The log is written by a thread of its own: wait for the last request's answer.
    let events = eventually("the session in the audit log", || {
        let events = admin_events(&log);
        let complete: Vec<_> = events
            .iter()
            .filter(|e| e["stage"] == "ResponseComplete")
            .map(summary)
            .collect();
        match session.iter().all(|s| complete.contains(s)) {
            true => Ok(events),
            false => Err(format!("answered so far: {complete:?}")),
        }
    });

    for request in &session {
        let answered: Vec<&Value> = events
            .iter()
            .filter(|e| e["stage"] == "ResponseComplete" && summary(e) == *request)
            .collect();
        assert_eq!(answered.len(), 1, "{request:?} answered once: {answered:?}");
        let answer = answered[0];
        // Its other record: received, with the same audit ID, URI and verb.
        let id = &answer["auditID"];
        let stages: Vec<&Value> = events
            .iter()
            .filter(|e| e["auditID"] == *id)
            .map(|e| &e["stage"])
            .collect();
        assert_eq!(
            stages,
            ["RequestReceived", "ResponseComplete"],
            "{request:?}"
        );
        let received = events
            .iter()
            .find(|e| e["auditID"] == *id && e["stage"] == "RequestReceived")
            .unwrap();
        assert_eq!(received["requestURI"], answer["requestURI"]);
        assert_eq!(received["verb"], answer["verb"]);
        assert!(received.get("responseStatus").is_none());

        assert_eq!(answer["kind"], "Event");
        assert_eq!(answer["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(answer["level"], "Metadata", "the default without a policy");
        assert_eq!(
            answer["user"]["groups"],
            serde_json::json!(["system:masters", "system:authenticated"])
        );
        assert_eq!(answer["objectRef"]["apiVersion"], "v1");
        assert_eq!(answer["sourceIPs"], serde_json::json!(["127.0.0.1"]));
        let agent = answer["userAgent"].as_str().unwrap_or("");
        assert!(agent.starts_with("kubectl"), "{agent}");
        assert!(answer.get("requestObject").is_none(), "Metadata level");
        assert!(answer.get("responseObject").is_none(), "Metadata level");
        for time in ["requestReceivedTimestamp", "stageTimestamp"] {
            let text = answer[time].as_str().unwrap();
            let micros = text
                .strip_suffix('Z')
                .and_then(|t| t.rsplit_once('.'))
                .map(|(_, fraction)| fraction.len());
            assert_eq!(micros, Some(6), "{time}: {text}");
            assert!(
                text.parse::<k8s_openapi::jiff::Timestamp>().is_ok(),
                "{text}"
            );
        }
    }
    let missing = events
        .iter()
        .find(|e| e["stage"] == "ResponseComplete" && summary(e).3 == "missing")
        .unwrap();
    assert_eq!(missing["responseStatus"]["reason"], "NotFound");
    assert_eq!(missing["responseStatus"]["status"], "Failure");

    // The log is the hub's alone to read.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&log).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn a_policy_leaves_out_what_it_says_and_records_request_bodies_at_request_level() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("audit.log");
    let policy = logs.path().join("policy.yaml");
    std::fs::write(
        &policy,
        r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    resources: [{group: "", resources: [configmaps]}]
  - level: Request
    verbs: [create]
    resources: [{group: "", resources: [namespaces]}]
  - level: Metadata
"#,
    )
    .unwrap();
    let hub = Hub::start_with(&[
        "--audit-log-path",
        log.to_str().unwrap(),
        "--audit-policy-file",
        policy.to_str().unwrap(),
    ]);
    hub.create("apiVersion: v1\nkind: Namespace\nmetadata: {name: quiet, labels: {team: a}}\n");
    hub.create(&CONFIGMAP.replace("audited", "quiet"));
    hub.ok(&["get", "configmap", "web", "-n", "quiet"]);
    // Recorded after the configmaps' requests, in the order written.
    hub.ok(&["get", "namespace", "quiet"]);

    let events = eventually("the last request in the audit log", || {
        let events = admin_events(&log);
        match events
            .iter()
            .any(|e| summary(e) == expected("get", "namespaces", "quiet", "quiet", 200))
        {
            true => Ok(events),
            false => Err(format!("{} events so far", events.len())),
        }
    });
    assert!(
        events
            .iter()
            .all(|e| e["objectRef"]["resource"] != "configmaps"),
        "level None for configmaps"
    );
    assert!(
        events.iter().all(|e| e["stage"] != "RequestReceived"),
        "omitStages: [RequestReceived]"
    );
    let created: Vec<&Value> = events
        .iter()
        .filter(|e| summary(e) == expected("create", "namespaces", "", "quiet", 201))
        .collect();
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(created[0]["level"], "Request");
    let object = &created[0]["requestObject"];
    assert_eq!(object["kind"], "Namespace");
    assert_eq!(object["metadata"]["labels"]["team"], "a");
    assert!(created[0].get("responseObject").is_none());
    let read = events
        .iter()
        .find(|e| e["verb"] == "get" && e["objectRef"]["resource"] == "namespaces")
        .unwrap();
    assert_eq!(read["level"], "Metadata");
    assert!(read.get("requestObject").is_none());
}

#[test]
fn a_bad_policy_stops_the_hub_in_one_line_before_it_touches_anything() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Everything}]\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("audit.log");
    let port = support::free_port().to_string();
    let out = support::flotilla(&[
        "hub",
        "--data-dir",
        data.to_str().unwrap(),
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--audit-log-path",
        log.to_str().unwrap(),
        "--audit-policy-file",
        policy.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr,
        format!(
            "error: invalid audit policy {}: rules[0]: unknown level \"Everything\": expected \
             None, Metadata, Request or RequestResponse\n",
            policy.display()
        )
    );
    assert!(!data.exists(), "the data directory was not created");
    assert!(!log.exists(), "the log was not created");
}

//! Events as Kubernetes writes them, at each level; the file, its rotation and its queue.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use axum::http::Method;
use bytes::Bytes;

use super::*;
use crate::auth::audit::AuditRequest;

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

fn received() -> jiff::Timestamp {
    jiff::Timestamp::new(1_700_000_000, 123_456_000).unwrap()
}

fn request(level: Level, method: Method, uri: &str, body: Option<Value>) -> Arc<AuditRequest> {
    let (path, query) = uri
        .split_once('?')
        .map_or((uri, None), |(p, q)| (p, Some(q)));
    Arc::new(AuditRequest {
        id: "0b6a8d1e-2f39-4c1d-9c4e-1b7d2d7a9f10".into(),
        recording: Recording::at(level),
        received: received(),
        user: Arc::new(UserInfo::admin()),
        method: method.clone(),
        uri: uri.into(),
        info: RequestInfo::parse(&method, path, query),
        user_agent: Some("kubectl/v1.32.2 (linux/amd64)".into()),
        source_ips: vec!["127.0.0.1".parse().unwrap()],
        body: body.map(|b| (Bytes::from(b.to_string()), "application/json".into())),
        annotations: Default::default(),
    })
}

fn event(request: &Arc<AuditRequest>, stage: Stage, code: Option<u16>) -> AuditEvent {
    AuditEvent {
        stage,
        request: request.clone(),
        impersonated: None,
        at: received()
            .checked_add(jiff::SignedDuration::from_millis(7))
            .unwrap(),
        code,
        response: None,
        annotations: Vec::new(),
    }
}

/// The event rendered: exactly one line, of JSON.
fn line(event: &AuditEvent) -> Value {
    let mut out = Vec::new();
    render(event, &mut out);
    assert_eq!(out.last(), Some(&b'\n'));
    assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 1);
    serde_json::from_slice(&out).unwrap()
}

fn configmap() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"}, "data": {"a": "1"}})
}

#[test]
fn a_metadata_event_has_who_what_when_and_the_code_as_kubernetes_writes_them() {
    let create = request(Level::Metadata, Method::POST, CONFIGMAPS, Some(configmap()));
    assert_eq!(
        line(&event(&create, Stage::RequestReceived, None)),
        json!({
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": "Metadata",
            "auditID": "0b6a8d1e-2f39-4c1d-9c4e-1b7d2d7a9f10",
            "stage": "RequestReceived",
            "requestURI": CONFIGMAPS,
            "verb": "create",
            "user": {"username": "flotilla:admin",
                "groups": ["system:masters", "system:authenticated"]},
            "sourceIPs": ["127.0.0.1"],
            "userAgent": "kubectl/v1.32.2 (linux/amd64)",
            "objectRef": {"resource": "configmaps", "namespace": "default", "apiVersion": "v1"},
            "requestReceivedTimestamp": "2023-11-14T22:13:20.123456Z",
            "stageTimestamp": "2023-11-14T22:13:20.130456Z",
        })
    );
    // Once answered: the created object's name, the code, whom it acted as; still no body.
    let mut done = event(&create, Stage::ResponseComplete, Some(201));
    done.impersonated = Some(Arc::new(UserInfo::new("bob", &["team"])));
    done.response = Some(Bytes::from(configmap().to_string()));
    let answered = line(&done);
    assert_eq!(answered["stage"], "ResponseComplete");
    assert_eq!(answered["auditID"], "0b6a8d1e-2f39-4c1d-9c4e-1b7d2d7a9f10");
    assert_eq!(
        answered["objectRef"],
        json!({"resource": "configmaps", "namespace": "default", "name": "web", "apiVersion": "v1"})
    );
    assert_eq!(
        answered["responseStatus"],
        json!({"metadata": {}, "code": 201})
    );
    assert_eq!(
        answered["impersonatedUser"],
        json!({"username": "bob", "groups": ["team"]})
    );
    assert!(answered.get("requestObject").is_none());
    assert!(answered.get("responseObject").is_none());
}

#[test]
fn the_object_reference_comes_from_the_path_with_group_and_subresource() {
    let scale = request(
        Level::Metadata,
        Method::PATCH,
        "/clusters/team/apis/apps/v1/namespaces/shop/deployments/web/scale",
        Some(json!({"spec": {"replicas": 3}})),
    );
    let answered = line(&event(&scale, Stage::ResponseComplete, Some(200)));
    assert_eq!(answered["verb"], "patch");
    assert_eq!(
        answered["objectRef"],
        json!({"resource": "deployments", "namespace": "shop", "name": "web",
            "apiGroup": "apps", "apiVersion": "v1", "subresource": "scale"})
    );
    let version = request(Level::Metadata, Method::GET, "/version", None);
    let answered = line(&event(&version, Stage::ResponseComplete, Some(200)));
    assert_eq!(answered["verb"], "get");
    assert!(answered.get("objectRef").is_none());
    let list = request(
        Level::Metadata,
        Method::GET,
        &format!("{CONFIGMAPS}?limit=500"),
        None,
    );
    let answered = line(&event(&list, Stage::ResponseComplete, Some(200)));
    assert_eq!(answered["verb"], "list");
    assert_eq!(answered["requestURI"], format!("{CONFIGMAPS}?limit=500"));
}

#[test]
fn a_failure_has_its_status_reason_and_message() {
    let get = request(
        Level::Metadata,
        Method::GET,
        &format!("{CONFIGMAPS}/gone"),
        None,
    );
    let mut done = event(&get, Stage::ResponseComplete, Some(404));
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "configmaps \"gone\" not found", "reason": "NotFound",
        "details": {"name": "gone", "kind": "configmaps"}, "code": 404});
    done.response = Some(Bytes::from(status.to_string()));
    let answered = line(&done);
    assert_eq!(
        answered["responseStatus"],
        json!({"metadata": {}, "status": "Failure", "message": "configmaps \"gone\" not found",
            "reason": "NotFound", "details": {"name": "gone", "kind": "configmaps"}, "code": 404})
    );
    assert!(answered.get("responseObject").is_none(), "Metadata level");
}

#[test]
fn request_level_adds_the_request_body_and_request_response_the_answer() {
    let answer = Bytes::from(
        json!({"kind": "ConfigMap", "metadata": {"name": "web", "resourceVersion": "7"}})
            .to_string(),
    );
    let done = |level| {
        let create = request(level, Method::POST, CONFIGMAPS, Some(configmap()));
        let received = line(&event(&create, Stage::RequestReceived, None));
        assert!(received.get("requestObject").is_none(), "{level:?}");
        let mut done = event(&create, Stage::ResponseComplete, Some(201));
        done.response = Some(answer.clone());
        line(&done)
    };
    let metadata = done(Level::Metadata);
    assert!(metadata.get("requestObject").is_none());
    let request_level = done(Level::Request);
    assert_eq!(request_level["level"], "Request");
    assert_eq!(request_level["requestObject"], configmap());
    assert!(request_level.get("responseObject").is_none());
    let both = done(Level::RequestResponse);
    assert_eq!(both["level"], "RequestResponse");
    assert_eq!(both["requestObject"], configmap());
    assert_eq!(
        both["responseObject"],
        serde_json::from_slice::<Value>(&answer).unwrap()
    );
    // A body that is not JSON is left out; the rest of the event is there.
    let mut odd = request(Level::Request, Method::POST, CONFIGMAPS, None);
    Arc::get_mut(&mut odd).unwrap().body = Some((Bytes::from_static(b"{not json"), String::new()));
    let answered = line(&event(&odd, Stage::ResponseComplete, Some(400)));
    assert!(answered.get("requestObject").is_none());
    assert_eq!(answered["responseStatus"]["code"], 400);
}

fn backups(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn numbered(n: usize) -> Vec<u8> {
    // 40 bytes each.
    format!("{n:039}\n").into_bytes()
}

#[test]
fn rotation_keeps_max_backups_files_the_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let config = LogConfig {
        max_size: 100,
        max_backups: 2,
        ..LogConfig::new(&path)
    };
    let mut sink = Sink::open(&config).unwrap();
    for n in 1..=10 {
        sink.write(&numbered(n)).unwrap();
    }
    sink.flush().unwrap();
    // Two lines a file (a third would pass 100 bytes): 9–10, 7–8, 5–6; 1–4 are gone.
    assert_eq!(
        backups(dir.path()),
        ["audit.log", "audit.log.1", "audit.log.2"]
    );
    let read = |name: &str| std::fs::read(dir.path().join(name)).unwrap();
    assert_eq!(read("audit.log"), [numbered(9), numbered(10)].concat());
    assert_eq!(read("audit.log.1"), [numbered(7), numbered(8)].concat());
    assert_eq!(read("audit.log.2"), [numbered(5), numbered(6)].concat());
    for name in backups(dir.path()) {
        let mode = std::fs::metadata(dir.path().join(&name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{name}");
    }

    // No limit on backups: every rotated file is kept.
    let all = tempfile::tempdir().unwrap();
    let config = LogConfig {
        max_size: 100,
        max_backups: 0,
        ..LogConfig::new(all.path().join("audit.log"))
    };
    let mut sink = Sink::open(&config).unwrap();
    for n in 1..=10 {
        sink.write(&numbered(n)).unwrap();
    }
    sink.flush().unwrap();
    assert_eq!(
        backups(all.path()),
        [
            "audit.log",
            "audit.log.1",
            "audit.log.2",
            "audit.log.3",
            "audit.log.4"
        ]
    );
    assert_eq!(
        std::fs::read(all.path().join("audit.log.4")).unwrap(),
        [numbered(1), numbered(2)].concat()
    );
}

#[test]
fn the_log_appends_to_an_existing_file_and_makes_it_private() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    std::fs::write(&path, b"earlier\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let log = AuditLog::open(Policy::metadata(), LogConfig::new(&path)).unwrap();
    let get = request(Level::Metadata, Method::GET, "/version", None);
    log.record(event(&get, Stage::RequestReceived, None));
    log.record(event(&get, Stage::ResponseComplete, Some(200)));
    let deadline = Instant::now() + Duration::from_secs(10);
    let lines = loop {
        let text = std::fs::read_to_string(&path).unwrap();
        if text.lines().count() == 3 {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the events were not written: {text}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines[0], "earlier");
    let stages: Vec<Value> = lines[1..]
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["stage"].clone())
        .collect();
    assert_eq!(stages, ["RequestReceived", "ResponseComplete"]);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(log.dropped(), 0);
}

#[test]
fn a_full_queue_drops_and_counts_rather_than_waits() {
    // A writer that takes nothing: the queue holds one event.
    let (queue, _held) = std::sync::mpsc::sync_channel(1);
    let log = AuditLog {
        policy: Policy::metadata(),
        queue,
        dropped: Arc::default(),
    };
    let get = request(Level::Metadata, Method::GET, "/version", None);
    for _ in 0..3 {
        log.record(event(&get, Stage::ResponseComplete, Some(200)));
    }
    assert_eq!(log.dropped(), 2);
}

#[test]
fn a_log_that_cannot_be_opened_is_one_line_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing").join("audit.log");
    let e = AuditLog::open(Policy::metadata(), LogConfig::new(&path))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.starts_with(&format!("cannot open the audit log {}: ", path.display())),
        "{e}"
    );
    assert!(!e.contains('\n'));
}

/// Keeps what it is given.
#[derive(Default)]
struct Kept(std::sync::Mutex<Vec<AuditEvent>>);

impl crate::auth::Audit for Kept {
    fn record(&self, event: AuditEvent) {
        self.0.lock().unwrap().push(event);
    }
}

#[test]
fn a_request_refused_for_its_credentials_is_one_event_with_no_user_and_the_reason() {
    let kept = Kept::default();
    let answer = Bytes::from(
        serde_json::to_vec(&crate::http::error::ApiError::unauthorized().status()).unwrap(),
    );
    crate::auth::audit::unauthenticated(
        &kept,
        Some("10.1.2.3".parse().unwrap()),
        &Method::GET,
        "/api/v1/namespaces/shop/pods",
        None,
        &axum::http::HeaderMap::new(),
        "the token has expired",
        answer,
    );
    let events = kept.0.into_inner().unwrap();
    assert_eq!(events.len(), 1);
    let mut line = Vec::new();
    render(&events[0], &mut line);
    let event: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(event["stage"], "ResponseStarted");
    assert_eq!(event["user"], json!({}));
    assert_eq!(event["verb"], "list");
    assert_eq!(event["objectRef"]["namespace"], "shop");
    assert_eq!(event["responseStatus"]["code"], 401);
    assert_eq!(event["responseStatus"]["reason"], "Unauthorized");
    assert_eq!(
        event["annotations"]["authentication.flotilla.io/failure-reason"],
        "the token has expired"
    );
    assert_eq!(event["sourceIPs"], json!(["10.1.2.3"]));
}

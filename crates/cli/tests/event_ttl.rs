//! `flotilla hub --event-ttl`: Events expire a TTL after their last write, whichever
//! version wrote them, and a watcher sees each one DELETED — with the real hub binary and
//! the real kubectl.

mod support;

use std::io::BufReader;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use support::Hub;

/// How long the test waits for an Event to go (with a TTL of 3 s, a sweep every 750 ms).
const DEADLINE: Duration = Duration::from_secs(60);

#[test]
fn events_of_both_versions_are_deleted_once_their_ttl_has_passed() {
    let hub = Hub::start_with(&["--event-ttl", "3s"]);

    // A watcher of core/v1 Events, as `kubectl get events -w` runs: one JSON watch event
    // after another on its stdout, read by a thread into a channel.
    let mut watch = hub
        .kubectl_command()
        .args([
            "get",
            "events",
            "-n",
            "default",
            "--watch",
            "--output-watch-events",
        ])
        .args(["-o", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run kubectl get events --watch");
    let stdout = watch.stdout.take().unwrap();
    let (seen, watched) = mpsc::channel::<serde_json::Value>();
    std::thread::spawn(move || {
        let events = serde_json::Deserializer::from_reader(BufReader::new(stdout));
        for event in events.into_iter::<serde_json::Value>() {
            let Ok(event) = event else { return };
            if seen.send(event).is_err() {
                return;
            }
        }
    });

    // The watch is up once it shows an Event written an hour ahead (so not expiring
    // during the test); only then are the Events that expire written.
    let now = Timestamp::now();
    let ahead = now
        .checked_add(k8s_openapi::jiff::SignedDuration::from_hours(1))
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%SZ");
    hub.create(&format!(
        r#"
apiVersion: v1
kind: Event
metadata: {{name: sentinel, namespace: default}}
involvedObject: {{kind: ConfigMap, name: web, namespace: default, apiVersion: v1}}
reason: Tested
message: shows that the watch is up
type: Normal
firstTimestamp: "{ahead}"
lastTimestamp: "{ahead}"
"#
    ));
    let deadline = Instant::now() + DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = watched
            .recv_timeout(left)
            .expect("the watch never showed the sentinel Event");
        if event["object"]["metadata"]["name"] == "sentinel" {
            break;
        }
    }

    let now = Timestamp::now();
    let time = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let micro = now.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    hub.create(&format!(
        r#"
apiVersion: v1
kind: Event
metadata: {{name: web.core, namespace: default}}
involvedObject: {{kind: ConfigMap, name: web, namespace: default, apiVersion: v1}}
reason: Tested
message: written through core/v1
type: Normal
source: {{component: event-ttl-test}}
firstTimestamp: "{time}"
lastTimestamp: "{time}"
count: 1
"#
    ));
    hub.create(&format!(
        r#"
apiVersion: events.k8s.io/v1
kind: Event
metadata: {{name: web.new, namespace: default}}
regarding: {{kind: ConfigMap, name: web, namespace: default, apiVersion: v1}}
reason: Tested
note: written through events.k8s.io/v1
type: Normal
action: Testing
reportingController: flotilla.io/event-ttl-test
reportingInstance: test
eventTime: "{micro}"
"#
    ));
    let names = |args: &[&str]| {
        let out = hub.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };

    // Within the deadline both are gone.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let core = names(&["get", "events", "-n", "default", "-o", "name"]);
        let new = names(&["get", "events.events.k8s.io", "-n", "default", "-o", "name"]);
        if !core.contains("web.") && !new.contains("web.") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the Events were never deleted: {core}{new}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The watcher saw each one DELETED.
    let mut deleted = Vec::new();
    let mut log = Vec::new();
    while deleted.len() < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(event) = watched.recv_timeout(left) else {
            panic!("the watch never showed both Events deleted: {log:?}");
        };
        let kind = event["type"].as_str().unwrap_or_default().to_owned();
        let name = event["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        log.push(format!("{kind} {name}"));
        if kind == "DELETED" && name.starts_with("web.") {
            deleted.push(name);
        }
    }
    deleted.sort();
    assert_eq!(deleted, ["web.core", "web.new"], "{log:?}");
    // The Event written an hour ahead is still there.
    hub.ok(&["get", "event", "sentinel", "-n", "default"]);
    let _ = watch.kill();
    let _ = watch.wait();
}

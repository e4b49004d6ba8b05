//! Two `flotilla hub` replicas on one PostgreSQL (started by the test), each with its own
//! data directory and port: one identity (the admin kubeconfig of one works on the other),
//! one API (a watch on B sees A's writes in order; a ServiceAccount token, a RoleBinding,
//! a CRD written through A take effect on B; cluster IPs never collide), and a replica
//! started later on a fresh data directory finds every object, resourceVersion and
//! credential. On etcd: one identity, each other's writes and tokens.

mod support;

#[path = "../../store-postgres/tests/support/postgres.rs"]
mod postgres;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::{Hub, eventually, kubectl_command};

fn configmap(name: &str, value: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"default","labels":{{"ha":"1"}}}},"data":{{"k":"{value}"}}}}"#
    )
}

/// `kubectl get cm -l ha=1 -w` on a hub, its lines (`EVENT NAME VALUE RV`) on a channel.
struct Watch {
    child: Child,
    lines: mpsc::Receiver<Vec<String>>,
}

impl Watch {
    fn start(kubeconfig: &std::path::Path) -> Watch {
        let mut child = kubectl_command(kubeconfig)
            .args([
                "get", "cm", "-l", "ha=1", "-w", "--output-watch-events", "-o",
                "custom-columns=EVENT:.type,NAME:.object.metadata.name,V:.object.data.k,RV:.object.metadata.resourceVersion",
                "--no-headers",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let fields = line.split_whitespace().map(str::to_owned).collect();
                if tx.send(fields).is_err() {
                    break;
                }
            }
        });
        Watch { child, lines }
    }

    fn next(&self) -> Vec<String> {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .expect("no watch event within a minute")
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read(path: std::path::PathBuf) -> String {
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn resource_version(hub: &Hub, kind: &str, name: &str) -> String {
    hub.json(&["get", kind, name])["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `kubectl --token TOKEN ARGS` against `hub`: its stdout, or its stderr as the error.
fn with_token(hub: &Hub, token: &str, args: &[&str]) -> Result<String, String> {
    let out = kubectl_command(&hub.kubeconfig())
        .args(["--token", token])
        .args(args)
        .output()
        .unwrap();
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

#[test]
fn two_replicas_on_postgres_are_one_hub() {
    let server = postgres::PgServer::start();
    let url = server.url();
    // Replicas share one issuer, as kube-apiservers behind one address do.
    let flags = [
        "--store",
        &url,
        "--service-account-issuer",
        "https://hub.example",
    ];
    let a = Hub::start_with(&flags);
    let b = Hub::start_with(&flags);

    // One identity: the same CA and admin token; A's kubeconfig, pointed at B, works.
    assert_eq!(
        read(a.dir.path().join("ca.crt")),
        read(b.dir.path().join("ca.crt"))
    );
    assert_eq!(
        read(a.dir.path().join("admin.token")),
        read(b.dir.path().join("admin.token"))
    );
    let pointed = read(a.kubeconfig()).replace(
        &format!("https://127.0.0.1:{}", a.port),
        &format!("https://127.0.0.1:{}", b.port),
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let a_on_b = elsewhere.path().join("a-on-b.kubeconfig");
    std::fs::write(&a_on_b, pointed).unwrap();
    let out = kubectl_command(&a_on_b)
        .args(["get", "ns", "default"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Writes through A, a watch on B: every change, in order, with A's resourceVersions.
    let watch = Watch::start(&b.kubeconfig());
    a.create(&configmap("x1", "1"));
    a.create(&configmap("x2", "1"));
    a.ok(&[
        "patch",
        "cm",
        "x1",
        "--type=merge",
        "-p",
        r#"{"data":{"k":"2"}}"#,
    ]);
    let x1 = resource_version(&a, "cm", "x1");
    a.ok(&["delete", "cm", "x2"]);
    let seen: Vec<Vec<String>> = (0..4).map(|_| watch.next()).collect();
    let summary: Vec<(&str, &str)> = seen
        .iter()
        .map(|f| (f[0].as_str(), f[1].as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("ADDED", "x1"),
            ("ADDED", "x2"),
            ("MODIFIED", "x1"),
            ("DELETED", "x2")
        ],
        "{seen:?}"
    );
    let versions: Vec<u64> = seen.iter().map(|f| f[3].parse().unwrap()).collect();
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
    assert_eq!(seen[2][3], x1);
    drop(watch);

    // A ServiceAccount token issued on A works on B; a RoleBinding made on A takes
    // effect on B; the ServiceAccount deleted on A, B refuses the token.
    a.ok(&["create", "serviceaccount", "bot", "-n", "default"]);
    let token = a
        .ok(&["create", "token", "bot", "-n", "default"])
        .trim()
        .to_owned();
    let forbidden = with_token(&b, &token, &["get", "cm", "-n", "default"]).unwrap_err();
    assert!(
        forbidden.contains("Forbidden") || forbidden.contains("forbidden"),
        "{forbidden}"
    );
    a.ok(&[
        "create",
        "role",
        "reader",
        "-n",
        "default",
        "--verb=get,list",
        "--resource=configmaps",
    ]);
    a.ok(&[
        "create",
        "rolebinding",
        "bot-reads",
        "-n",
        "default",
        "--role=reader",
        "--serviceaccount=default:bot",
    ]);
    eventually("the RoleBinding made on A allows on B", || {
        with_token(&b, &token, &["get", "cm", "x1", "-n", "default"])
    });
    a.ok(&["delete", "serviceaccount", "bot", "-n", "default"]);
    let refused = with_token(&b, &token, &["get", "cm", "x1", "-n", "default"]).unwrap_err();
    assert!(
        refused.contains("Unauthorized") || refused.contains("credentials"),
        "{refused}"
    );

    // A CRD created on A is served on B.
    a.create(
        r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
        "metadata":{"name":"widgets.example.com"},
        "spec":{"group":"example.com","scope":"Namespaced",
          "names":{"plural":"widgets","singular":"widget","kind":"Widget"},
          "versions":[{"name":"v1","served":true,"storage":true,
            "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}"#,
    );
    eventually("B serves A's CRD", || {
        let out = b.kubectl(&["get", "widgets", "-n", "default"]);
        out.status
            .success()
            .then_some(())
            .ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())
    });
    b.create(
        r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1","namespace":"default"}}"#,
    );

    // Two Services created at once, one per replica: two cluster IPs.
    let service = |name: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"{name}","namespace":"default"}},"spec":{{"ports":[{{"port":80}}]}}}}"#
        )
    };
    let (sa, sb) = (service("svc-a"), service("svc-b"));
    std::thread::scope(|scope| {
        scope.spawn(|| a.create(&sa));
        scope.spawn(|| b.create(&sb));
    });
    let ip = |hub: &Hub, name: &str| {
        hub.json(&["get", "svc", name])["spec"]["clusterIP"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_ne!(ip(&a, "svc-a"), ip(&a, "svc-b"));

    // A stopped; a third replica on a fresh data directory: every object with its
    // resourceVersion, the CA and the admin credential.
    let kept = [
        resource_version(&b, "cm", "x1"),
        resource_version(&b, "widget", "w1"),
        resource_version(&b, "svc", "svc-a"),
    ];
    let ca = read(a.dir.path().join("ca.crt"));
    let admin = read(a.dir.path().join("admin.token"));
    drop(a.stop());
    let c = Hub::start_with(&flags);
    assert_eq!(read(c.dir.path().join("ca.crt")), ca);
    assert_eq!(read(c.dir.path().join("admin.token")), admin);
    let out = kubectl_command(&a_on_b)
        .args(["get", "cm", "x1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        [
            resource_version(&c, "cm", "x1"),
            resource_version(&c, "widget", "w1"),
            resource_version(&c, "svc", "svc-a"),
        ],
        kept
    );
    assert_eq!(ip(&c, "svc-a"), ip(&b, "svc-a"));
}

#[path = "../../store-etcd/tests/support/etcd.rs"]
mod etcd;

#[test]
fn two_replicas_on_etcd_share_one_identity_and_serve_each_others_writes() {
    let server = etcd::EtcdServer::start();
    let url = server.url("/hub");
    let flags = [
        "--store",
        &url,
        "--service-account-issuer",
        "https://hub.example",
    ];
    let a = Hub::start_with(&flags);
    let b = Hub::start_with(&flags);
    for file in ["ca.crt", "admin.token", "sa.key"] {
        assert_eq!(
            read(a.dir.path().join(file)),
            read(b.dir.path().join(file)),
            "{file}"
        );
    }
    a.create(&configmap("e1", "1"));
    assert_eq!(
        resource_version(&b, "cm", "e1"),
        resource_version(&a, "cm", "e1")
    );
    a.ok(&["create", "serviceaccount", "bot", "-n", "default"]);
    let token = a
        .ok(&["create", "token", "bot", "-n", "default"])
        .trim()
        .to_owned();
    let who = with_token(&b, &token, &["auth", "whoami", "-o", "json"]).unwrap();
    assert!(who.contains("system:serviceaccount:default:bot"), "{who}");
}

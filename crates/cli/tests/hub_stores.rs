//! `flotilla hub --store postgres://… | etcd://…` with real processes: the hub serves
//! kubectl (create, get, watch) on each, answers 503 while the database is lost and picks
//! up where it was once it is back (a watch started before sees the later changes), keeps
//! every object and resourceVersion across its own restart, and refuses a store it cannot
//! reach in one line, in time.

mod support;

#[path = "../../store-etcd/tests/support/etcd.rs"]
mod etcd;
#[path = "../../store-postgres/tests/support/postgres.rs"]
mod postgres;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::{Hub, eventually, free_port, kubectl_command};

fn configmap(name: &str, value: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"default"}},"data":{{"k":"{value}"}}}}"#
    )
}

/// `kubectl get cm -w` in the background, its lines on a channel.
struct Watch {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Watch {
    fn start(hub: &Hub) -> Watch {
        let mut child = kubectl_command(&hub.kubeconfig())
            .args([
                "get",
                "cm",
                "-w",
                "--output-watch-events",
                "-o",
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
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Watch { child, lines }
    }

    /// The next line of the watch (`EVENT NAME VALUE RV`), which must come within a minute.
    fn next(&self) -> Vec<String> {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("no watch event within a minute");
        line.split_whitespace().map(str::to_owned).collect()
    }

    /// Skips lines until one about `name`.
    fn next_of(&self, name: &str) -> Vec<String> {
        loop {
            let fields = self.next();
            if fields.get(1).map(String::as_str) == Some(name) {
                return fields;
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The database under a hub, which the test can crash and start again.
trait Database {
    fn kill9(&mut self);
    fn restart(&mut self);
}

impl Database for postgres::PgServer {
    fn kill9(&mut self) {
        postgres::PgServer::kill9(self);
    }
    fn restart(&mut self) {
        postgres::PgServer::restart(self);
    }
}

impl Database for etcd::EtcdServer {
    fn kill9(&mut self) {
        etcd::EtcdServer::kill9(self);
    }
    fn restart(&mut self) {
        etcd::EtcdServer::restart(self);
    }
}

fn resource_version(hub: &Hub, name: &str) -> String {
    hub.json(&["get", "cm", name])["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The whole story on one database: serve, lose the database, get it back, restart.
fn serves_loses_and_keeps(url: &str, database: &mut dyn Database) {
    let mut hub = Hub::start_with(&["--store", url]);
    hub.create(&configmap("a", "1"));
    let watch = Watch::start(&hub);
    let added = watch.next_of("a");
    assert_eq!((added[0].as_str(), added[2].as_str()), ("ADDED", "1"));
    hub.ok(&[
        "patch",
        "cm",
        "a",
        "--type=merge",
        "-p",
        r#"{"data":{"k":"2"}}"#,
    ]);
    let modified = watch.next_of("a");
    assert_eq!(
        (modified[0].as_str(), modified[2].as_str()),
        ("MODIFIED", "2")
    );

    // The database is lost: requests are answered 503 (kubectl retries as Retry-After
    // asks, then says why), and nothing hangs.
    database.kill9();
    let started = Instant::now();
    let lost = hub.fails(&["get", "cm", "a", "--request-timeout=30s"]);
    assert!(lost.contains("ServiceUnavailable"), "{lost}");
    assert!(started.elapsed() < Duration::from_secs(60));
    let refused = kubectl_command(&hub.kubeconfig())
        .args([
            "get",
            "--raw",
            "/api/v1/namespaces/default/configmaps/a",
            "-v=8",
        ])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&refused.stderr);
    assert!(log.contains("503 Service Unavailable"), "{log}");
    assert!(log.contains("Retry-After: 1"), "{log}");

    // It is back: writes work again and the watch started before sees them, in order.
    database.restart();
    eventually("a write after the database is back", || {
        let out = hub.kubectl(&[
            "patch",
            "cm",
            "a",
            "--type=merge",
            "-p",
            r#"{"data":{"k":"3"}}"#,
        ]);
        out.status
            .success()
            .then_some(())
            .ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())
    });
    hub.create(&configmap("b", "1"));
    let back = watch.next_of("a");
    assert_eq!((back[0].as_str(), back[2].as_str()), ("MODIFIED", "3"));
    let added = watch.next_of("b");
    assert_eq!(added[0], "ADDED");
    assert!(
        added[3].parse::<u64>().unwrap() > back[3].parse::<u64>().unwrap(),
        "{added:?} after {back:?}"
    );
    drop(watch);

    // Restarted (killed) on the same store: every object and resourceVersion is kept.
    let before = [resource_version(&hub, "a"), resource_version(&hub, "b")];
    hub.restart(true);
    assert_eq!(
        [resource_version(&hub, "a"), resource_version(&hub, "b")],
        before
    );
    assert_eq!(hub.json(&["get", "cm", "a"])["data"]["k"], "3");
    hub.create(&configmap("c", "1"));
    let c: u64 = resource_version(&hub, "c").parse().unwrap();
    assert!(c > before[1].parse::<u64>().unwrap());
}

#[test]
fn the_hub_on_postgres_serves_kubectl_survives_the_database_and_its_own_restart() {
    let mut server = postgres::PgServer::start();
    let url = server.url();
    serves_loses_and_keeps(&url, &mut server);
}

#[test]
fn the_hub_on_etcd_serves_kubectl_survives_the_database_and_its_own_restart() {
    let mut server = etcd::EtcdServer::start();
    let url = server.url("/hub");
    serves_loses_and_keeps(&url, &mut server);
}

/// Runs `flotilla hub` with `args`: it must fail within `bound`; its one error line.
fn hub_refuses(args: &[&str], bound: Duration) -> String {
    let stderr = hub_fails(args, bound);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "not one line: {stderr}");
    lines[0].to_owned()
}

/// Runs `flotilla hub` with `args`: it must fail within `bound`; its stderr.
fn hub_fails(args: &[&str], bound: Duration) -> String {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["hub", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "the hub started: {stderr}");
    assert!(took < bound, "the hub took {took:?} to give up: {stderr}");
    stderr
}

#[test]
fn an_unreachable_store_is_one_line_naming_it_within_the_timeout() {
    // Nobody listens.
    let port = free_port();
    let line = hub_refuses(
        &[
            "--store",
            &format!("postgres://hub:secret@127.0.0.1:{port}/hub?sslmode=disable"),
        ],
        Duration::from_secs(30),
    );
    assert!(line.contains(&format!("127.0.0.1:{port}")), "{line}");
    assert!(line.contains("cannot be reached"), "{line}");
    assert!(!line.contains("secret"), "{line}");
    let line = hub_refuses(
        &["--store", &format!("etcd://127.0.0.1:{port}/hub")],
        Duration::from_secs(30),
    );
    assert!(line.contains(&format!("127.0.0.1:{port}")), "{line}");

    // A listener that never answers: given up at --store-timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    for url in [
        format!("postgres://hub@127.0.0.1:{port}/hub?sslmode=disable"),
        format!("etcd://127.0.0.1:{port}/hub"),
    ] {
        let line = hub_refuses(
            &["--store", &url, "--store-timeout", "2s"],
            Duration::from_secs(15),
        );
        assert!(line.contains(&format!("127.0.0.1:{port}")), "{url}: {line}");
    }

    // A URL it cannot use, refused as the flag's value (clap's line, then its hint).
    let stderr = hub_fails(
        &["--store", "postgres://h/db?sslmode=sometimes"],
        Duration::from_secs(30),
    );
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.contains("--store") && first.contains("sslmode=sometimes"),
        "{stderr}"
    );
    drop(silent);
}

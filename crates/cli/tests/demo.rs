//! `flotilla demo` as a user runs it: it starts a hub and three simulated members, places
//! its example, prints how to look around, and stops everything on SIGTERM; with
//! `--pull`, the members are pull clusters, an agent each inside the simulator.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_demo_places_its_example_and_stops_cleanly() {
    demo(&[]);
}

#[test]
fn the_pull_demo_places_its_example_through_agents_and_stops_cleanly() {
    demo(&["--pull"]);
}

/// Runs `flotilla demo ARGS` until its example runs, then stops it.
fn demo(args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let (hub_port, sim_port) = (support::free_port(), support::free_port());
    let mut demo = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["demo", "--data-dir"])
        .arg(dir.path())
        .args(["--hub-listen", &format!("127.0.0.1:{hub_port}")])
        .args(["--sim-listen", &format!("127.0.0.1:{sim_port}")])
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(demo.stdout.take().unwrap()).lines();
    let mut printed = String::new();
    while !printed.contains("Ctrl-C stops the demo") {
        let line = lines.next().expect("the demo ended early").unwrap();
        printed.push_str(&line);
        printed.push('\n');
    }
    assert!(printed.contains("cluster member-3 joined"), "{printed}");
    assert!(
        printed.contains("kubectl get deploy web -n demo"),
        "{printed}"
    );

    let hub = dir.path().join("hub").join("admin.kubeconfig");
    let kubectl = |kubeconfig: &std::path::Path, args: &[&str]| {
        let out = support::kubectl_command(kubeconfig)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The example runs 2 + 4 replicas on the eu members, and the hub says 6/6.
    let member = |n: u32| {
        dir.path()
            .join("sim/kubeconfigs")
            .join(format!("member-{n}.kubeconfig"))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let fleet = kubectl(&hub, &["get", "deploy", "web", "-n", "demo"]);
        let one = kubectl(
            &member(1),
            &["get", "deploy", "web", "-n", "demo", "-o", "wide"],
        );
        if fleet.contains("6/6")
            && one.contains("2/2")
            && one.contains("eu.mirror.example.com/library/nginx:1.27")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the example never ran: {fleet}\n{one}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let three = kubectl(&member(3), &["get", "deploy", "-n", "demo"]);
    assert!(!three.contains("web"), "us is not placed on: {three}");
    // Pull: every cluster has pull access only, and the hub holds no member kubeconfig.
    let access = kubectl(
        &hub,
        &["get", "clusters", "-o", "jsonpath={.items[*].spec.access}"],
    );
    let secrets = kubectl(&hub, &["get", "secrets", "-A", "-o", "name"]);
    if args.contains(&"--pull") {
        assert_eq!(access.matches("\"pull\"").count(), 3, "{access}");
        assert!(!access.contains("push"), "{access}");
        assert!(!secrets.contains("kubeconfig"), "{secrets}");
    } else {
        assert_eq!(access.matches("\"push\"").count(), 3, "{access}");
        assert!(secrets.contains("cluster-member-1-kubeconfig"), "{secrets}");
    }

    Command::new("kill")
        .args(["-TERM", &demo.id().to_string()])
        .status()
        .unwrap();
    assert!(demo.wait().unwrap().success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l == "demo stopped"), "{rest:?}");
    // Its hub and simulator are gone: their ports are free again.
    for port in [hub_port, sim_port] {
        assert!(
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} still busy"
        );
    }
}

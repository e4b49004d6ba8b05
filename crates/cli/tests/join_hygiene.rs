//! `flotilla join` against a real hub and simulator: a member that cannot be reached, is
//! not trusted or refuses the credentials is named in one line, and a failed join leaves
//! nothing on the hub; certificates referenced by path are embedded in what the hub keeps.

mod support;

use std::path::Path;
use std::process::Output;

use support::{Hub, Sim, flotilla, free_port};

/// `flotilla join NAME --kubeconfig FILE` to `hub`.
fn join(hub: &Hub, name: &str, kubeconfig: &Path) -> Output {
    flotilla(&[
        "join",
        name,
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--hub-kubeconfig",
        hub.kubeconfig().to_str().unwrap(),
        "--timeout",
        "60s",
    ])
}

/// A join that must fail: its one line of stderr.
fn join_fails(hub: &Hub, name: &str, kubeconfig: &Path) -> String {
    let out = join(hub, name, kubeconfig);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "joined: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "not one line: {stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    // Never a struct dumped.
    for dump in ["{ ", "Error {", "Some(", "Kind("] {
        assert!(!lines[0].contains(dump), "{stderr}");
    }
    lines[0].to_owned()
}

/// The hub holds no Cluster and no credentials Secret.
fn nothing_on(hub: &Hub) {
    assert_eq!(hub.ok(&["get", "clusters", "-o", "name"]).trim(), "");
    assert_eq!(
        hub.ok(&[
            "get",
            "secrets",
            "-A",
            "-l",
            "flotilla.io/cluster",
            "-o",
            "name"
        ])
        .trim(),
        ""
    );
}

/// `sim`'s kubeconfig of `cluster`, changed by `edit`, written to `dir/name`.
fn edited(
    sim: &Sim,
    cluster: &str,
    dir: &Path,
    name: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) -> std::path::PathBuf {
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sim.kubeconfig(cluster)).unwrap()).unwrap();
    edit(&mut config);
    let path = dir.join(name);
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

#[test]
fn a_failed_join_names_why_in_one_line_and_leaves_nothing() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    let sim = Sim::start(&["--clusters", "1", "--ready-delay", "0"]);
    let dir = tempfile::tempdir().unwrap();

    // Nothing listens.
    let port = free_port();
    let closed = edited(&sim, "member-1", dir.path(), "closed", |c| {
        c["clusters"][0]["cluster"]["server"] =
            format!("https://127.0.0.1:{port}/clusters/member-1").into();
    });
    let line = join_fails(&hub, "closed", &closed);
    assert!(
        line.contains(&format!("cannot reach 127.0.0.1:{port}")),
        "{line}"
    );
    assert!(line.contains("nothing was written on the hub"), "{line}");
    nothing_on(&hub);

    // Another CA (the hub's) than the one that issued the simulator's certificate.
    let hub_config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(hub.kubeconfig()).unwrap()).unwrap();
    let other_ca = hub_config["clusters"][0]["cluster"]["certificate-authority-data"].clone();
    let untrusted = edited(&sim, "member-1", dir.path(), "untrusted", |c| {
        c["clusters"][0]["cluster"]["certificate-authority-data"] = other_ca;
    });
    let line = join_fails(&hub, "untrusted", &untrusted);
    assert!(
        line.contains(&format!(
            "TLS failed: the certificate of 127.0.0.1:{} is not trusted by the kubeconfig's \
             certificate authority",
            sim.port
        )),
        "{line}"
    );
    nothing_on(&hub);

    // A name the simulator's certificate is not for.
    let misnamed = edited(&sim, "member-1", dir.path(), "misnamed", |c| {
        c["clusters"][0]["cluster"]["tls-server-name"] = "elsewhere.example.test".into();
    });
    let line = join_fails(&hub, "misnamed", &misnamed);
    assert!(
        line.contains(&format!(
            "TLS failed: the certificate of 127.0.0.1:{} is for 127.0.0.1, localhost, ::1, \
             not elsewhere.example.test",
            sim.port
        )),
        "{line}"
    );
    nothing_on(&hub);

    // A token the simulator does not know.
    let stranger = edited(&sim, "member-1", dir.path(), "stranger", |c| {
        c["users"][0]["user"]["token"] = "not-the-token".into();
    });
    let line = join_fails(&hub, "stranger", &stranger);
    assert!(
        line.contains(&format!(
            "authentication failed: 127.0.0.1:{} refused the credentials of user \"member-1\" \
             (401 Unauthorized)",
            sim.port
        )),
        "{line}"
    );
    nothing_on(&hub);
}

#[test]
fn a_join_the_hub_finds_not_ready_is_removed_again() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    let sim = Sim::start(&["--clusters", "1", "--ready-delay", "0"]);
    let dir = tempfile::tempdir().unwrap();
    // The token comes from a credential plugin that reads it from the environment: the
    // join's own check gets it, the hub (without that environment) does not.
    let mut token = String::new();
    let kubeconfig = edited(&sim, "member-1", dir.path(), "exec", |c| {
        token = c["users"][0]["user"]["token"].as_str().unwrap().to_owned();
        c["users"][0]["user"] = serde_json::json!({"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "sh",
            "args": ["-c", "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%s\"}}' \"$FLOTILLA_TEST_TOKEN\""],
        }});
    });
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["join", "member-1", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--hub-kubeconfig")
        .arg(hub.kubeconfig())
        .args(["--timeout", "5s"])
        .env("FLOTILLA_TEST_TOKEN", &token)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("cluster member-1 did not join; what this join wrote was removed")
            && stderr.contains("not Ready within 5s"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    nothing_on(&hub);
}

#[test]
fn certificates_referenced_by_path_are_embedded_or_refused() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    let sim = Sim::start(&["--clusters", "1", "--ready-delay", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sim.kubeconfig("member-1")).unwrap()).unwrap();
    let ca = base64_decode(
        config["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .unwrap(),
    );
    // The CA beside the kubeconfig, named relative to its folder (not the working one).
    let folder = dir.path().join("member");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(folder.join("ca.crt"), &ca).unwrap();
    let by_path = edited(&sim, "member-1", &folder, "kubeconfig", |c| {
        let cluster = c["clusters"][0]["cluster"].as_object_mut().unwrap();
        cluster.remove("certificate-authority-data");
        cluster.insert("certificate-authority".into(), "ca.crt".into());
    });
    let out = join(&hub, "member-1", &by_path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let secret = hub.json(&[
        "get",
        "secret",
        "-n",
        "flotilla-system",
        "cluster-member-1-kubeconfig",
    ]);
    let stored = base64_decode(secret["data"]["kubeconfig"].as_str().unwrap());
    let stored: serde_json::Value = serde_json::from_slice(&stored).unwrap();
    let cluster = &stored["clusters"][0]["cluster"];
    assert!(cluster["certificate-authority"].is_null(), "{stored}");
    assert_eq!(
        base64_decode(cluster["certificate-authority-data"].as_str().unwrap()),
        ca
    );

    // A file that is not there is refused, naming it, before anything is written.
    let missing = edited(&sim, "member-1", &folder, "missing", |c| {
        c["users"][0]["user"]["client-certificate"] = "client.crt".into();
        c["users"][0]["user"]["client-key"] = "gone.key".into();
    });
    std::fs::write(folder.join("client.crt"), b"not used").unwrap();
    let line = join_fails(&hub, "other", &missing);
    assert!(
        line.contains(&format!(
            "cannot read {}, the client-key of user \"member-1\"",
            folder.join("gone.key").display()
        )),
        "{line}"
    );
    assert!(line.contains("nothing was written on the hub"), "{line}");
    assert!(hub.fails(&["get", "cluster", "other"]).contains("NotFound"));
    assert!(
        hub.fails(&[
            "get",
            "secret",
            "-n",
            "flotilla-system",
            "cluster-other-kubeconfig"
        ])
        .contains("NotFound")
    );
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

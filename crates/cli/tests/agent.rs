//! The pull agent end to end (issue 22's foundation): a real `flotilla hub`, a `flotilla
//! sim` member, the real `flotilla agent` process and kubectl. A member registers with a
//! bootstrap token, is not a member until approved, then receives its Works; an
//! `--auto-approve` token joins at once; expired and deleted tokens are refused; the
//! agent's certificate reaches its own Works only; a revoked agent gets 401 and applies
//! nothing more.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use support::identity::{
    assert_forbidden, certificate_request, csr_manifest, kubeconfig_with, run, run_with, stderr,
    text, token_kubeconfig, unauthorized, whoami,
};
use support::{
    Hub, Sim, condition, eventually, eventually_within, flotilla, image, join_with, member_web,
    signal,
};

/// A `flotilla agent` process; killed on drop.
struct Agent {
    child: Child,
    dir: PathBuf,
}

impl Agent {
    /// Starts `flotilla agent` with `args`, its data in `dir`, its log in `dir/agent.log`.
    fn start(dir: &Path, args: &[&str]) -> Agent {
        std::fs::create_dir_all(dir).unwrap();
        let log = std::fs::File::create(dir.join("../agent.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .arg("agent")
            .args(["--data-dir", dir.to_str().unwrap()])
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start flotilla agent");
        Agent {
            child,
            dir: dir.to_owned(),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("../agent.log")).unwrap_or_default()
    }

    /// Its exit status once it has ended by itself.
    fn ended(&mut self) -> Result<std::process::ExitStatus, String> {
        match self.child.try_wait().unwrap() {
            Some(status) => Ok(status),
            None => Err("still running".into()),
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `flotilla token create ARGS` against `hub`: the token and the agent's command line.
fn create_token(hub: &Hub, args: &[&str]) -> (String, String) {
    let kubeconfig = hub.kubeconfig();
    let mut all = vec![
        "token",
        "create",
        "--hub-kubeconfig",
        kubeconfig.to_str().unwrap(),
    ];
    all.extend(args);
    let out = flotilla(&all);
    assert!(out.status.success(), "token create: {}", text(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut lines = stdout.lines();
    let token = lines.next().unwrap().to_owned();
    let command = lines.next().unwrap().to_owned();
    (token, command)
}

/// The value of `--flag` in the agent command line `command`.
fn flag<'a>(command: &'a str, name: &str) -> &'a str {
    let words: Vec<&str> = command.split_whitespace().collect();
    let at = words.iter().position(|w| *w == name).unwrap();
    words[at + 1]
}

/// The agent's flags for `cluster` on member `member` of `sim`, from the printed command.
fn agent_flags(command: &str, token: &str, cluster: &str, kubeconfig: &Path) -> Vec<String> {
    vec![
        "--hub".into(),
        flag(command, "--hub").into(),
        "--token".into(),
        token.into(),
        "--ca-hash".into(),
        flag(command, "--ca-hash").into(),
        "--cluster".into(),
        cluster.into(),
        "--kubeconfig".into(),
        kubeconfig.to_str().unwrap().into(),
        "--heartbeat-period".into(),
        "1s".into(),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A kubeconfig for `hub` with the certificate and key the agent keeps in `dir`.
fn agent_kubeconfig(hub: &Hub, name: &str, dir: &Path) -> PathBuf {
    let cert = std::fs::read(dir.join("agent.crt")).unwrap();
    let key = std::fs::read(dir.join("agent.key")).unwrap();
    kubeconfig_with(
        hub,
        name,
        json!({"client-certificate-data": STANDARD.encode(cert),
            "client-key-data": STANDARD.encode(key)}),
        "",
    )
}

/// `kubectl get ARGS -o json` as the admin, or kubectl's error.
fn get(hub: &Hub, args: &[&str]) -> Result<Value, String> {
    let mut all = vec!["get"];
    all.extend(args);
    all.extend(["-o", "json"]);
    let out = hub.kubectl(&all);
    if !out.status.success() {
        return Err(stderr(&out));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

fn ready(cluster: &Value) -> String {
    condition(cluster, "Ready")
        .map(|c| c["status"].as_str().unwrap_or("").to_owned())
        .unwrap_or_default()
}

fn web_image(sim: &Sim, member: &str) -> Result<(String, String), String> {
    let out = sim.kubectl(
        member,
        &["get", "deployment", "web", "-n", "shop", "-o", "json"],
        None,
    );
    if !out.status.success() {
        return Err(stderr(&out));
    }
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    Ok((
        d["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
        d["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
    ))
}

const WORKLOAD: &str = "apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx:1.27}]}
---
apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {name: web, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  clusters: {labelSelector: {matchLabels: {mode: pull}}}
";

/// The TCP connections process `pid` has established to `port` (its sockets, found in
/// `/proc/PID/net/tcp` and `tcp6` by the inodes of its open descriptors).
fn connections_to(pid: u32, port: u16) -> usize {
    let sockets: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
                .filter_map(|link| {
                    let link = link.to_string_lossy().into_owned();
                    let inode = link.strip_prefix("socket:[")?.strip_suffix(']')?;
                    Some(inode.to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    let port = format!("{port:04X}");
    ["tcp", "tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).ok())
        .flat_map(|table| table.lines().skip(1).map(str::to_owned).collect::<Vec<_>>())
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // rem_address (HEXIP:HEXPORT), st (01: established), inode.
            fields.len() > 9
                && fields[2].rsplit(':').next() == Some(port.as_str())
                && fields[3] == "01"
                && sockets.contains(fields[9])
        })
        .count()
}

#[test]
fn a_member_registers_with_a_token_joins_once_approved_and_is_revoked() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    let sim = Sim::start(&["--clusters", "1", "--ready-delay", "100ms"]);
    let work = tempfile::tempdir().unwrap();
    let (token, command) = create_token(&hub, &[]);
    assert!(token.len() == 23 && token.as_bytes()[6] == b'.', "{token}");
    assert!(
        command.starts_with("flotilla agent --hub https://127.0.0.1:"),
        "{command}"
    );
    assert!(
        flag(&command, "--ca-hash").starts_with("sha256:"),
        "{command}"
    );
    let member = sim.kubeconfig("member-1");
    let mut flags = agent_flags(&command, &token, "east", &member);
    flags.extend(["--labels".into(), "mode=pull".into()]);

    // Bad input: one line, a non-zero exit, nothing registered.
    let mut wrong_pin = flags.clone();
    let at = wrong_pin.iter().position(|f| f == "--ca-hash").unwrap();
    wrong_pin[at + 1] = format!("sha256:{}", "0".repeat(64));
    let mut args = vec!["agent", "--data-dir"];
    let bad_dir = work.path().join("bad");
    args.push(bad_dir.to_str().unwrap());
    args.extend(strs(&wrong_pin));
    let out = flotilla(&args);
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(said.contains("does not match --ca-hash"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    let mut bad_member = flags.clone();
    let at = bad_member.iter().position(|f| f == "--kubeconfig").unwrap();
    bad_member[at + 1] = work
        .path()
        .join("missing.kubeconfig")
        .to_str()
        .unwrap()
        .into();
    let mut args = vec!["agent", "--data-dir", bad_dir.to_str().unwrap()];
    args.extend(strs(&bad_member));
    let out = flotilla(&args);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("member kubeconfig"),
        "{}",
        stderr(&out)
    );
    assert!(hub.fails(&["get", "cluster", "east"]).contains("NotFound"));

    // The token's user may register and nothing else.
    let bootstrap = token_kubeconfig(&hub, "bootstrap", &token);
    let me = whoami(&bootstrap).unwrap();
    assert_eq!(me["username"], format!("system:bootstrap:{}", &token[..6]));
    assert!(
        me["groups"].to_string().contains("system:bootstrappers"),
        "{me}"
    );
    for args in [
        &["get", "secrets", "-n", "kube-system"][..],
        &["get", "placements", "-A"],
        &["get", "clusters"],
        &["get", "works", "-A"],
        &["create", "namespace", "intruder"],
    ] {
        assert_forbidden(args, &run(&bootstrap, args));
    }

    // Its Cluster request is its own: pull access as its identity, its token named.
    let id = &token[..6];
    for (cluster, why) in [
        (
            json!({"metadata": {"name": "grab", "annotations": {"flotilla.io/bootstrap-token-id": id}},
            "spec": {"access": {"push": {"secretRef": {"namespace": "flotilla-system", "name": "x"}}}}}),
            "as its own identity only",
        ),
        (
            json!({"metadata": {"name": "grab", "annotations": {"flotilla.io/bootstrap-token-id": id}},
            "spec": {"access": {"pull": {"identity": "system:flotilla:cluster:other"}}}}),
            "as its own identity only",
        ),
        (
            json!({"metadata": {"name": "grab", "annotations": {"flotilla.io/bootstrap-token-id": "zzzzzz"}},
            "spec": {"access": {"pull": {"identity": "system:flotilla:cluster:grab"}}}}),
            "names that token",
        ),
        (
            json!({"metadata": {"name": "grab", "annotations": {"flotilla.io/bootstrap-token-id": id,
                "flotilla.io/certificate-serial": "1"}},
            "spec": {"access": {"pull": {"identity": "system:flotilla:cluster:grab"}}}}),
            "recorded by the hub",
        ),
    ] {
        let mut cluster = cluster;
        cluster["apiVersion"] = json!("flotilla.io/v1alpha1");
        cluster["kind"] = json!("Cluster");
        let out = run_with(
            &bootstrap,
            &["create", "-f", "-"],
            Some(&cluster.to_string()),
        );
        assert!(!out.status.success(), "{cluster}");
        assert!(text(&out).contains(why), "{}", text(&out));
    }
    assert!(hub.fails(&["get", "cluster", "grab"]).contains("NotFound"));

    let dir = work.path().join("east");
    let mut agent = Agent::start(&dir, &strs(&flags));
    // Registered, not a member: a pending CSR and a Cluster not Joined.
    let csr = eventually("the agent asks for its certificate", || {
        let list = get(&hub, &["csr"])?;
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| {
                c["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("east-")
            })
            .cloned()
            .ok_or_else(|| format!("no CSR yet; agent: {}", agent.log()))
    });
    assert_eq!(
        csr["spec"]["username"],
        format!("system:bootstrap:{}", &token[..6])
    );
    assert!(csr["status"]["conditions"].is_null(), "{csr}");
    let cluster = hub.json(&["get", "cluster", "east"]);
    assert_eq!(
        cluster["spec"]["access"]["pull"]["identity"],
        "system:flotilla:cluster:east"
    );
    eventually("the unapproved cluster is not Joined", || {
        let cluster = get(&hub, &["cluster", "east"])?;
        match condition(&cluster, "Joined") {
            Some(c) if c["status"] == "False" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    assert_ne!(ready(&hub.json(&["get", "cluster", "east"])), "True");
    assert!(!dir.join("agent.crt").exists());

    // A person approves: the cluster joins and receives its Work.
    let kubeconfig = hub.kubeconfig();
    let out = flotilla(&[
        "approve",
        "east",
        "--hub-kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    eventually("the approved cluster is Ready", || {
        let cluster = get(&hub, &["cluster", "east"])?;
        match ready(&cluster).as_str() {
            "True" => Ok(()),
            other => Err(format!(
                "{other}: {}; agent: {}",
                cluster["status"],
                agent.log()
            )),
        }
    });
    let key_mode = {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(dir.join("agent.key"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(key_mode, 0o600);
    hub.create(WORKLOAD);
    let (image, _) = eventually("the Deployment lands on the member", || {
        web_image(&sim, "member-1")
    });
    assert_eq!(image, "nginx:1.27");
    eventually("the Work reports Applied", || {
        let work = get(&hub, &["works", "-n", "flotilla-cluster-east"])?;
        let item = &work["items"][0];
        match condition(item, "Applied") {
            Some(c) if c["status"] == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });

    // The agent's certificate: its own Works, nothing else.
    let cert = agent_kubeconfig(&hub, "east-agent", &dir);
    assert_eq!(
        whoami(&cert).unwrap()["username"],
        "system:flotilla:cluster:east"
    );
    let own = run(&cert, &["get", "works", "-n", "flotilla-cluster-east"]);
    assert!(own.status.success(), "{}", text(&own));
    hub.ok(&["create", "namespace", "flotilla-cluster-other"]);
    for args in [
        &["get", "works", "-n", "flotilla-cluster-other"][..],
        &["get", "secrets", "-A"],
        &["get", "secrets", "-n", "flotilla-cluster-east"],
        &[
            "patch",
            "placement",
            "web",
            "-n",
            "shop",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"clusters":{}}}"#,
        ],
        &["delete", "works", "--all", "-n", "flotilla-cluster-east"],
    ] {
        assert_forbidden(args, &run(&cert, args));
    }

    // A restart registers nothing and applies nothing again: the member's Deployment,
    // once its rollout is over, keeps its resourceVersion.
    let version = eventually("the member's Deployment is rolled out", || {
        let out = sim.kubectl(
            "member-1",
            &["get", "deployment", "web", "-n", "shop", "-o", "json"],
            None,
        );
        let d: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
        let status = &d["status"];
        let done = [
            "replicas",
            "readyReplicas",
            "availableReplicas",
            "updatedReplicas",
        ]
        .iter()
        .all(|k| status[k] == 2)
            && status["observedGeneration"] == d["metadata"]["generation"];
        match done {
            true => Ok(d["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_owned()),
            false => Err(status.to_string()),
        }
    });
    agent.kill();
    let mut restarted: Vec<String> = flags.clone();
    let at = restarted.iter().position(|f| f == "--token").unwrap();
    restarted.drain(at..at + 2);
    let mut agent = Agent::start(&dir, &strs(&restarted));
    let lease = |hub: &Hub| {
        hub.json(&[
            "get",
            "lease",
            "flotilla-agent",
            "-n",
            "flotilla-cluster-east",
        ])["spec"]["renewTime"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let before = lease(&hub);
    eventually("the restarted agent renews its Lease", || {
        let now = lease(&hub);
        if now != before {
            Ok(())
        } else {
            Err(format!("{now}; agent: {}", agent.log()))
        }
    });
    assert!(agent.log().contains("registered before"), "{}", agent.log());
    eventually("the restarted agent has synced its Work", || {
        if agent.log().contains("Work synced") {
            Ok(())
        } else {
            Err(agent.log())
        }
    });
    assert_eq!(
        web_image(&sim, "member-1").unwrap(),
        (image.clone(), version.clone())
    );

    // The hub killed for a while and started again (issue 22: "killed for 60 s"): what
    // stands for the 60 s is the agent meeting the outage, 3 heartbeats failed in a row
    // (3 of its 1 s periods, and its Works watch failing meanwhile), polled in its log.
    // It reconnects by itself (its Lease renewed again), nothing on the member is applied
    // again needlessly, and a template change made after the restart is delivered.
    let mut hub = hub;
    let failed = |log: &str| log.matches("heartbeat not renewed").count();
    let failed_before = failed(&agent.log());
    hub.kill_and_restart_after(|| {
        eventually("the agent meets the hub's outage", || {
            let log = agent.log();
            let failed = failed(&log) - failed_before;
            if failed >= 3 && log.contains("watch of Works failed") {
                Ok(())
            } else {
                Err(format!("{failed} heartbeats failed so far"))
            }
        });
    });
    let before = lease(&hub);
    eventually("the agent renews its Lease on the restarted hub", || {
        let now = lease(&hub);
        if now != before {
            Ok(())
        } else {
            Err(format!("{now}; agent: {}", agent.log()))
        }
    });
    eventually(
        "the cluster is Ready on the restarted hub",
        || match ready(&get(&hub, &["cluster", "east"])?).as_str() {
            "True" => Ok(()),
            other => Err(other.to_owned()),
        },
    );
    assert_eq!(
        web_image(&sim, "member-1").unwrap(),
        (image.clone(), version.clone())
    );
    hub.ok(&[
        "set",
        "image",
        "deployment/web",
        "-n",
        "shop",
        "web=nginx:1.28",
    ]);
    eventually(
        "the change made after the restart reaches the member",
        || match web_image(&sim, "member-1")?.0.as_str() {
            "nginx:1.28" => Ok(()),
            other => Err(other.to_owned()),
        },
    );

    // Revoked: 401 at once, the agent stops, nothing more is applied.
    let out = flotilla(&[
        "revoke",
        "east",
        "--hub-kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        unauthorized(&cert),
        "the revoked certificate still authenticates"
    );
    let status = eventually("the revoked agent stops", || agent.ended());
    assert!(!status.success());
    assert!(agent.log().contains("revoked"), "{}", agent.log());
    hub.ok(&[
        "set",
        "image",
        "deployment/web",
        "-n",
        "shop",
        "web=nginx:1.29",
    ]);
    eventually("the hub's Work has the new image", || {
        let work = get(&hub, &["works", "-n", "flotilla-cluster-east"])?;
        if work.to_string().contains("nginx:1.29") {
            Ok(())
        } else {
            Err("old".into())
        }
    });
    assert_eq!(web_image(&sim, "member-1").unwrap().0, "nginx:1.28");
    eventually("the revoked cluster is not Ready", || {
        match ready(&get(&hub, &["cluster", "east"])?).as_str() {
            "Unknown" => Ok(()),
            other => Err(other.to_owned()),
        }
    });
}

/// 6 replicas divided 1:2 over the pull cluster `west` and the push cluster `member-2`.
const DIVIDED: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: default}
spec:
  replicas: 6
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: api, image: api:1}]}
---
apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {name: api, namespace: default}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: api}]
  clusters: {names: [west, member-2]}
  replicas:
    mode: Divided
    weights:
    - {clusters: {names: [west]}, weight: 1}
    - {clusters: {names: [member-2]}, weight: 2}
";

#[test]
fn an_auto_approve_token_joins_at_once_and_bad_tokens_are_refused() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    let sim = Sim::start(&["--clusters", "2", "--ready-delay", "100ms"]);
    let work = tempfile::tempdir().unwrap();
    let (token, command) = create_token(&hub, &["--auto-approve"]);
    let flags = agent_flags(&command, &token, "west", &sim.kubeconfig("member-1"));
    let dir = work.path().join("west");
    let agent = Agent::start(&dir, &strs(&flags));
    eventually("the auto-approved cluster is Ready", || {
        let cluster = get(&hub, &["cluster", "west"])?;
        match ready(&cluster).as_str() {
            "True" => Ok(()),
            other => Err(format!(
                "{other}: {}; agent: {}",
                cluster["status"],
                agent.log()
            )),
        }
    });
    // Its Works watch, heartbeat and status writes share one HTTP/2 connection to the
    // hub (over HTTP/1.1 the watch would hold one and the requests need another).
    let hub_port: u16 = flag(&command, "--hub")
        .rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .expect("the hub's port in the agent's command");
    eventually(
        "the agent holds one connection to the hub",
        || match connections_to(agent.child.id(), hub_port) {
            1 => Ok(()),
            n => Err(format!("{n} connections")),
        },
    );
    let approved = hub.json(&["get", "csr"]);
    let west = approved["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["metadata"]["name"].as_str().unwrap().starts_with("west-"))
        .unwrap();
    assert_eq!(
        condition(west, "Approved").unwrap()["reason"],
        "AutoApproved"
    );
    // The agent's RBAC exists and is the Cluster's.
    let role = hub.json(&[
        "get",
        "role",
        "system:flotilla:cluster:west",
        "-n",
        "flotilla-cluster-west",
    ]);
    assert_eq!(role["metadata"]["ownerReferences"][0]["kind"], "Cluster");

    // With this token, a certificate for another cluster's name is refused.
    hub.create(
        &json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "prod"},
            "spec": {"access": {"pull": {"identity": "system:flotilla:cluster:prod"}}}})
        .to_string(),
    );
    let bootstrap = token_kubeconfig(&hub, "bootstrap", &token);
    let (request, _key) =
        certificate_request("system:flotilla:cluster:prod", "system:flotilla:clusters");
    let manifest = csr_manifest(
        "steal-prod",
        &request,
        "kubernetes.io/kube-apiserver-client",
        &["client auth", "digital signature"],
    );
    let out = run_with(&bootstrap, &["create", "-f", "-"], Some(&manifest));
    assert!(out.status.success(), "{}", text(&out));
    eventually("the CSR for another cluster is denied", || {
        let csr = get(&hub, &["csr", "steal-prod"])?;
        match condition(&csr, "Denied") {
            Some(c) if c["status"] == "True" => Ok(()),
            _ => Err(csr["status"].to_string()),
        }
    });
    assert!(hub.json(&["get", "csr", "steal-prod"])["status"]["certificate"].is_null());

    // A Placement divides 6 replicas 1:2 over the pull cluster (this agent, a process of
    // its own) and a push cluster: 2 and 4.
    join_with(&hub, &sim, "member-2", &[]);
    eventually("the push cluster is Ready", || {
        match ready(&get(&hub, &["cluster", "member-2"])?).as_str() {
            "True" => Ok(()),
            other => Err(other.to_owned()),
        }
    });
    hub.create(DIVIDED);
    let shares = |west: i64, push: i64| {
        let what = format!("west runs {west} and member-2 runs {push} replicas");
        eventually(&what, || {
            let replicas = |member: &str| {
                let out = sim.kubectl(
                    member,
                    &["get", "deployment", "api", "-n", "default", "-o", "json"],
                    None,
                );
                serde_json::from_slice::<Value>(&out.stdout)
                    .map(|d| d["spec"]["replicas"].as_i64().unwrap_or(-1))
                    .unwrap_or(-1)
            };
            let found = (replicas("member-1"), replicas("member-2"));
            if found == (west, push) {
                Ok(())
            } else {
                Err(format!("{found:?}"))
            }
        })
    };
    shares(2, 4);

    // The agent stopped: Unknown within its 4 heartbeats (and the hub's period), and its
    // Divided share moves to the other cluster; back once it runs again, share restored.
    signal(agent.child.id(), "STOP");
    eventually("the stopped agent's cluster is Unknown", || {
        match ready(&get(&hub, &["cluster", "west"])?).as_str() {
            "Unknown" => Ok(()),
            other => Err(other.to_owned()),
        }
    });
    eventually("the stopped cluster's share moves to member-2", || {
        let out = sim.kubectl(
            "member-2",
            &["get", "deployment", "api", "-n", "default", "-o", "json"],
            None,
        );
        let d: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
        match d["spec"]["replicas"].as_i64() {
            Some(6) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    signal(agent.child.id(), "CONT");
    eventually("the agent's cluster is Ready again", || {
        match ready(&get(&hub, &["cluster", "west"])?).as_str() {
            "True" => Ok(()),
            other => Err(other.to_owned()),
        }
    });
    shares(2, 4);
    hub.ok(&["delete", "placement", "api", "-n", "default", "--wait=true"]);

    // Unjoined: the agent's certificate is refused at once and the agent stops.
    let mut agent = agent;
    let cert = agent_kubeconfig(&hub, "west-agent", &dir);
    assert!(whoami(&cert).is_ok());
    let kubeconfig = hub.kubeconfig();
    let out = flotilla(&[
        "unjoin",
        "west",
        "--hub-kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        unauthorized(&cert),
        "an unjoined cluster's agent still authenticates"
    );
    let status = eventually("the unjoined cluster's agent stops", || agent.ended());
    assert!(!status.success());
    assert!(
        get(
            &hub,
            &[
                "role",
                "system:flotilla:cluster:west",
                "-n",
                "flotilla-cluster-west"
            ]
        )
        .is_err(),
        "the agent's Role outlives its Cluster"
    );
    eventually(
        "the agent's ClusterRole goes with its Cluster",
        || match get(&hub, &["clusterrole", "system:flotilla:cluster:west"]) {
            Err(e) if e.contains("NotFound") => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );

    // A registration the hub refuses leaves nothing behind: a token bound to set prod,
    // a cluster registered outside it (refused at its Cluster request, in one line).
    let (bound, command) = create_token(&hub, &["--auto-approve", "--clusterset", "prod"]);
    let stray = agent_flags(&command, &bound, "stray", &sim.kubeconfig("member-1"));
    let stray_dir = work.path().join("stray");
    let mut args = vec!["agent", "--data-dir", stray_dir.to_str().unwrap()];
    args.extend(strs(&stray));
    let out = flotilla(&args);
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(said.contains("into its cluster set only"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert!(hub.fails(&["get", "cluster", "stray"]).contains("NotFound"));
    let csrs = get(&hub, &["csr"]).unwrap();
    assert!(!csrs.to_string().contains("stray-"), "{csrs}");

    // `flotilla join NAME --pull` prints the agent's command for that cluster, with a
    // token that works.
    let out = flotilla(&[
        "join",
        "south",
        "--pull",
        "--labels",
        "env=dev",
        "--hub-kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let printed = String::from_utf8(out.stdout).unwrap();
    let line = printed.lines().next().unwrap();
    assert!(
        line.contains("--cluster south") && line.contains("--labels env=dev"),
        "{line}"
    );
    assert!(printed.contains("flotilla approve south"), "{printed}");
    let south = token_kubeconfig(&hub, "south", flag(line, "--token"));
    assert!(whoami(&south).is_ok());

    // Expired and deleted tokens are refused.
    let (expiring, command) = create_token(&hub, &["--ttl", "1s"]);
    let expired = token_kubeconfig(&hub, "expired", &expiring);
    eventually("the token expires", || {
        if unauthorized(&expired) {
            Ok(())
        } else {
            Err("still valid".into())
        }
    });
    let mut args = vec!["agent", "--data-dir"];
    let late_dir = work.path().join("late");
    args.push(late_dir.to_str().unwrap());
    let late_flags = agent_flags(&command, &expiring, "late", &sim.kubeconfig("member-1"));
    args.extend(strs(&late_flags));
    let out = flotilla(&args);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("refuses the bootstrap token"),
        "{}",
        stderr(&out)
    );
    assert!(hub.fails(&["get", "cluster", "late"]).contains("NotFound"));
    let (deleted, _) = create_token(&hub, &[]);
    let gone = token_kubeconfig(&hub, "gone", &deleted);
    assert!(whoami(&gone).is_ok());
    hub.ok(&[
        "delete",
        "secret",
        &format!("bootstrap-token-{}", &deleted[..6]),
        "-n",
        "kube-system",
    ]);
    assert!(unauthorized(&gone), "a deleted token still authenticates");
    // A malformed token is refused by the agent's flags.
    let out = flotilla(&[
        "agent",
        "--hub",
        "https://127.0.0.1:1",
        "--token",
        "nope",
        "--ca-hash",
        flag(&command, "--ca-hash"),
        "--cluster",
        "x",
        "--kubeconfig",
        "k",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not a bootstrap token"),
        "{}",
        stderr(&out)
    );
}

/// What `deployer` may do on a member: Deployments in `shop`, and read that namespace
/// (the placement's Work lists it, to be sure it exists); nothing else cluster-wide.
const DEPLOYER: &str = "apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: deployer, namespace: shop}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: deployer, namespace: shop}
rules:
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: deployer, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: deployer}
subjects:
- {kind: ServiceAccount, name: deployer, namespace: shop}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: shop-namespace-reader}
rules:
- {apiGroups: [''], resources: [namespaces], resourceNames: [shop], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: deployer-reads-shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: shop-namespace-reader}
subjects:
- {kind: ServiceAccount, name: deployer, namespace: shop}
";

/// A Deployment and a ClusterRole placed as the members' `shop/deployer`.
const AS_DEPLOYER: &str = "apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx:1.27}]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: web-reader}
rules:
- {apiGroups: [''], resources: [configmaps], verbs: [get]}
---
apiVersion: flotilla.io/v1alpha1
kind: ClusterPlacement
metadata: {name: web}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, namespace: shop, name: web}
  - {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, name: web-reader}
  clusters: {labelSelector: {matchLabels: {env: rbac}}}
  apply: {serviceAccountName: shop/deployer}
";

/// kubectl's arguments that set ClusterPlacement `web`'s `apply.serviceAccountName`.
fn service_account_patch(name: &str) -> Vec<String> {
    let patch = json!({"spec": {"apply": {"serviceAccountName": name}}}).to_string();
    [
        "patch",
        "clusterplacement",
        "web",
        "--type",
        "merge",
        "-p",
        &patch,
    ]
    .map(String::from)
    .to_vec()
}

/// The manifest status of `kind` in the only Work of `cluster`, once it has one.
fn manifest_of(hub: &Hub, cluster: &str, kind: &str) -> Result<Value, String> {
    let works = get(
        hub,
        &["works", "-n", &format!("flotilla-cluster-{cluster}")],
    )?;
    works["items"][0]["status"]["manifests"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["kind"] == kind))
        .cloned()
        .ok_or_else(|| {
            format!(
                "no {kind} in the status yet: {}",
                works["items"][0]["status"]
            )
        })
}

/// Condition `type_` of a Work's manifest status.
fn manifest_condition<'a>(manifest: &'a Value, type_: &str) -> Option<&'a Value> {
    manifest["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

#[test]
fn a_placement_applies_as_the_members_service_account_on_pull_and_push_clusters() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    let sim = Sim::start(&["--clusters", "2", "--ready-delay", "100ms", "--rbac"]);
    let work = tempfile::tempdir().unwrap();
    for member in ["member-1", "member-2"] {
        sim.create(member, DEPLOYER);
        // The member's RBAC holds: deployer may not read ClusterRoles.
        let out = sim.kubectl(
            member,
            &[
                "get",
                "clusterroles",
                "--as",
                "system:serviceaccount:shop:deployer",
            ],
            None,
        );
        assert!(!out.status.success(), "{}", text(&out));
        assert!(stderr(&out).contains("forbidden"), "{}", stderr(&out));
    }
    // member-1's agent runs with the least privilege `print-rbac` prints: impersonating
    // shop/deployer, and reading the little it reads itself.
    let out = flotilla(&[
        "agent",
        "print-rbac",
        "--cluster",
        "pulled",
        "--service-account",
        "shop/deployer",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let rbac = String::from_utf8(out.stdout).unwrap();
    let applied = sim.kubectl("member-1", &["apply", "-f", "-"], Some(&rbac));
    assert!(applied.status.success(), "{}\n{rbac}", text(&applied));
    let token = sim.ok(
        "member-1",
        &["create", "token", "flotilla-agent", "-n", "flotilla-system"],
    );
    let mut kubeconfig: Value =
        serde_json::from_slice(&std::fs::read(sim.kubeconfig("member-1")).unwrap()).unwrap();
    kubeconfig["users"][0]["user"] = json!({"token": token.trim()});
    let least = work.path().join("member-1-agent.kubeconfig");
    std::fs::write(&least, kubeconfig.to_string()).unwrap();
    let as_agent = |args: &[&str]| {
        support::kubectl_command(&least)
            .args(args)
            .output()
            .unwrap()
    };
    let me = as_agent(&["auth", "whoami", "-o", "json"]);
    assert!(
        text(&me).contains("system:serviceaccount:flotilla-system:flotilla-agent"),
        "{}",
        text(&me)
    );
    // It applies nothing as itself, and impersonates deployer alone.
    for args in [
        &["get", "secrets", "-A"][..],
        &[
            "create",
            "deployment",
            "x",
            "-n",
            "shop",
            "--image",
            "nginx",
        ],
        &[
            "get",
            "deployments",
            "-n",
            "shop",
            "--as",
            "system:serviceaccount:shop:default",
        ],
        &[
            "get",
            "deployments",
            "-n",
            "default",
            "--as",
            "system:serviceaccount:default:deployer",
        ],
    ] {
        let out = as_agent(args);
        assert!(!out.status.success(), "{args:?}: {}", text(&out));
        assert!(text(&out).contains("forbidden"), "{args:?}: {}", text(&out));
    }
    for args in [
        &["get", "nodes"][..],
        &[
            "get",
            "deployments",
            "-n",
            "shop",
            "--as",
            "system:serviceaccount:shop:deployer",
            "--as-group",
            "system:serviceaccounts",
            "--as-group",
            "system:serviceaccounts:shop",
            "--as-group",
            "system:authenticated",
        ],
    ] {
        let out = as_agent(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
    }

    // member-1 pulls (its agent, with that kubeconfig), member-2 is pushed to (the hub
    // holds its admin kubeconfig).
    let (token, command) = create_token(&hub, &["--auto-approve"]);
    let mut flags = agent_flags(&command, &token, "pulled", &least);
    flags.extend(["--labels".into(), "env=rbac".into()]);
    let agent = Agent::start(&work.path().join("pulled"), &strs(&flags));
    join_with(&hub, &sim, "member-2", &["--labels", "env=rbac"]);
    eventually("the pull cluster is Ready", || {
        match ready(&get(&hub, &["cluster", "pulled"])?).as_str() {
            "True" => Ok(()),
            other => Err(format!("{other}; agent: {}", agent.log())),
        }
    });
    hub.create(AS_DEPLOYER);

    for (cluster, member) in [("pulled", "member-1"), ("member-2", "member-2")] {
        // The Deployment lands.
        let deployment = eventually("the Deployment lands on the member", || {
            member_web(&sim, member)
        });
        assert_eq!(image(&deployment), "nginx:1.27");
        // The ClusterRole is refused by the member, and the Work says so.
        let role = eventually("the ClusterRole is reported refused", || {
            let role = manifest_of(&hub, cluster, "ClusterRole")?;
            match manifest_condition(&role, "Applied") {
                Some(c) if c["reason"] == "Forbidden" => Ok(c.clone()),
                other => Err(format!("{other:?}; agent: {}", agent.log())),
            }
        });
        assert_eq!(role["status"], "False");
        let said = role["message"].as_str().unwrap();
        assert!(
            said.contains("system:serviceaccount:shop:deployer") && said.contains("forbidden"),
            "{said}"
        );
        let web = manifest_of(&hub, cluster, "Deployment").unwrap();
        assert_eq!(
            manifest_condition(&web, "Applied").unwrap()["status"],
            "True",
            "{web}"
        );
        let out = sim.kubectl(member, &["get", "clusterrole", "web-reader"], None);
        assert!(!out.status.success(), "the ClusterRole is on {member}");
        // `kubectl get work -o yaml` shows it too.
        let yaml = hub.ok(&[
            "get",
            "works",
            "-n",
            &format!("flotilla-cluster-{cluster}"),
            "-o",
            "yaml",
        ]);
        assert!(yaml.contains("reason: Forbidden"), "{yaml}");
        // And so does the placement's status for that cluster.
        let placed = eventually("the placement reports the refusal", || {
            let placement = get(&hub, &["clusterplacement", "web"])?;
            let entry = placement["status"]["clusters"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["name"] == cluster))
                .cloned()
                .ok_or_else(|| placement["status"].to_string())?;
            match manifest_condition(&entry, "Applied") {
                Some(c) if c["message"].as_str().unwrap_or("").contains("forbidden") => {
                    Ok(c.clone())
                }
                other => Err(format!("{other:?}")),
            }
        });
        assert_eq!(placed["status"], "False");
    }

    // A bare name in a ClusterPlacement names no namespace: every manifest says why,
    // nothing is applied as anyone else.
    hub.ok(&strs(&service_account_patch("deployer")));
    eventually("a bare name in a ClusterPlacement is refused", || {
        let web = manifest_of(&hub, "member-2", "Deployment")?;
        match manifest_condition(&web, "Applied") {
            Some(c) if c["reason"] == "InvalidServiceAccount" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    // A name that is not one is refused by the API.
    let out = hub.kubectl(&strs(&service_account_patch("Shop/Deployer")));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("serviceAccountName"),
        "{}",
        stderr(&out)
    );

    // A release the member refuses is tried again until it goes through: deployer loses
    // the right to delete Deployments on member-1, the placement goes, the Deployment
    // stays; deployer gets it back, and the agent releases it then.
    hub.ok(&strs(&service_account_patch("shop/deployer")));
    eventually("the Deployment is applied as deployer again", || {
        let web = manifest_of(&hub, "pulled", "Deployment")?;
        match manifest_condition(&web, "Applied") {
            Some(c) if c["status"] == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let no_delete = DEPLOYER.replace(
        "verbs: [get, list, watch, create, update, patch, delete]",
        "verbs: [get, list, watch, create, update, patch]",
    );
    assert_ne!(no_delete, DEPLOYER);
    let applied = sim.kubectl("member-1", &["apply", "-f", "-"], Some(&no_delete));
    assert!(applied.status.success(), "{}", text(&applied));
    hub.ok(&["delete", "clusterplacement", "web"]);
    eventually("the release is refused and said so", || {
        let log = agent.log();
        match log.contains("Work not fully removed") {
            true => Ok(()),
            false => Err(log),
        }
    });
    assert!(member_web(&sim, "member-1").is_ok(), "released already");
    let applied = sim.kubectl("member-1", &["apply", "-f", "-"], Some(DEPLOYER));
    assert!(applied.status.success(), "{}", text(&applied));
    eventually(
        "the release is tried again and goes through",
        || match member_web(&sim, "member-1") {
            Err(e) if e.contains("NotFound") || e.contains("not found") => Ok(()),
            Err(e) => Err(e),
            Ok(_) => Err(format!(
                "the Deployment is still there; agent: {}",
                agent.log()
            )),
        },
    );
}

#[test]
fn an_agent_renews_its_certificate_and_keeps_working_past_the_first_ones_expiry() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    let sim = Sim::start(&["--clusters", "1", "--ready-delay", "100ms"]);
    let work = tempfile::tempdir().unwrap();
    let (token, command) = create_token(&hub, &["--auto-approve"]);
    let mut flags = agent_flags(&command, &token, "renewing", &sim.kubeconfig("member-1"));
    // The shortest lifetime the API allows a certificate request (10 minutes): renewed
    // after 8.
    flags.extend(["--labels", "mode=pull", "--cert-duration", "600s"].map(String::from));
    let dir = work.path().join("renewing");
    let mut agent = Agent::start(&dir, &strs(&flags));
    eventually("the cluster is Ready", || {
        match ready(&get(&hub, &["cluster", "renewing"])?).as_str() {
            "True" => Ok(()),
            other => Err(format!("{other}; agent: {}", agent.log())),
        }
    });
    let first = std::fs::read(dir.join("agent.crt")).unwrap();
    let (_, first_expiry) = flotilla_pki::certificate_validity(&first).unwrap();
    let first_serial = flotilla_pki::certificate_serial(&first).unwrap();
    let serial_of = |hub: &Hub| {
        hub.json(&["get", "cluster", "renewing"])["metadata"]["annotations"]
            ["flotilla.io/certificate-serial"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(serial_of(&hub), first_serial);
    let old = agent_kubeconfig(&hub, "renewing-first", &dir);
    assert!(whoami(&old).is_ok());

    // Renewed before the end: a new serial recorded, the old certificate refused.
    let renewed = eventually_within(
        "the agent renews its certificate",
        std::time::Duration::from_secs(600),
        std::time::Duration::from_secs(2),
        || {
            let serial = serial_of(&hub);
            if serial != first_serial && !serial.is_empty() {
                Ok(serial)
            } else {
                Err(format!("still {serial}; agent: {}", agent.log()))
            }
        },
    );
    assert!(
        jiff::Timestamp::now().as_second() < first_expiry,
        "renewed only after the first certificate expired"
    );
    let csrs = hub.json(&["get", "csr"]);
    let renewal = csrs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["spec"]["username"] == "system:flotilla:cluster:renewing")
        .unwrap_or_else(|| panic!("no renewal request: {csrs}"));
    assert_eq!(
        condition(renewal, "Approved").unwrap()["reason"],
        "AutoApprovedRenewal"
    );
    assert_eq!(renewal["spec"]["expirationSeconds"], 600);
    eventually("the agent keeps the renewed certificate", || {
        let kept = std::fs::read(dir.join("agent.crt")).map_err(|e| e.to_string())?;
        match flotilla_pki::certificate_serial(&kept)? {
            serial if serial == renewed => Ok(()),
            other => Err(other),
        }
    });
    assert!(
        unauthorized(&old),
        "the replaced certificate still authenticates"
    );

    // Past the first certificate's expiry the agent still works: it heartbeats and
    // applies a new Work.
    eventually_within(
        "the first certificate expires",
        std::time::Duration::from_secs(300),
        std::time::Duration::from_secs(2),
        || match jiff::Timestamp::now().as_second() > first_expiry {
            true => Ok(()),
            false => Err(format!("{first_expiry} not reached")),
        },
    );
    hub.create(WORKLOAD);
    let (image, _) = eventually("the Deployment lands after the first expiry", || {
        web_image(&sim, "member-1")
    });
    assert_eq!(image, "nginx:1.27");
    eventually(
        "the cluster is Ready after the first expiry",
        || match ready(&get(&hub, &["cluster", "renewing"])?).as_str() {
            "True" => Ok(()),
            other => Err(other.to_owned()),
        },
    );
    assert!(agent.ended().is_err(), "the agent stopped: {}", agent.log());
    // A request the old certificate made as the new one was recorded was asked again,
    // not taken for a revocation.
    assert!(
        !agent.log().contains("refuses this agent's certificate"),
        "{}",
        agent.log()
    );

    // A certificate lifetime the API refuses is refused by the flag, in one line.
    let out = flotilla(&[
        "agent",
        "--hub",
        "https://127.0.0.1:1",
        "--ca-hash",
        flag(&command, "--ca-hash"),
        "--cluster",
        "x",
        "--kubeconfig",
        "k",
        "--cert-duration",
        "60s",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("10 minutes"), "{}", stderr(&out));
}

//! `examples/platform`'s walkthrough as a test: a real `flotilla hub`, three `flotilla sim`
//! members joined into ClusterSet `eu`, the example's webhook (its library, run here as
//! its binary runs it) and the README's own `kubectl apply` lines run as written from the
//! repository's root. The webhook's configuration, the CRDs and the policy go in;
//! Platform `spark`, its Tier and the tier's ComputeNamespace reach every member of `eu`;
//! each file under `refused/` is refused with the message its first line names, and
//! nothing of it is written; a Platform a Tier names is not deleted until the Tier goes;
//! raising the policy's param lets the refused tier in.

mod support;

use std::process::Output;
use std::time::Duration;

use support::{Hub, Sim, eventually_every, join_with, repo_root, sh_blocks};

/// [`support::eventually`], polling every 200 ms.
fn eventually<T>(what: &str, probe: impl FnMut() -> Result<T, String>) -> T {
    eventually_every(what, Duration::from_millis(200), probe)
}

/// The files the walkthrough applies, in its order (paths from the repository's root).
const APPLIED: [&str; 3] = [
    "examples/platform/crds.yaml",
    "examples/platform/policy.yaml",
    "examples/platform/spark.yaml",
];

/// The files the rules refuse.
const REFUSED: [&str; 5] = [
    "examples/platform/refused/tier-over-limit.yaml",
    "examples/platform/refused/prod-on-one-set.yaml",
    "examples/platform/refused/platform-without-owner.yaml",
    "examples/platform/refused/tier-moved.yaml",
    "examples/platform/refused/tier-without-platform.yaml",
];

/// The webhook's configuration (applied with its `caBundle` and address filled in).
const WEBHOOK: &str = "examples/platform/webhook.yaml";

/// Starts the example's webhook on a free loopback port against `hub`; its address and
/// CA (PEM), and the runtime serving it (dropped: stopped).
fn start_webhook(
    hub: &Hub,
    dir: &std::path::Path,
) -> (std::net::SocketAddr, String, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let client = runtime
        .block_on(flotilla_example_platform_webhook::client(&hub.kubeconfig()))
        .unwrap();
    let ca_file = dir.join("ca.crt");
    let (tx, rx) = std::sync::mpsc::channel();
    let file = ca_file.clone();
    runtime.spawn(async move {
        let served = flotilla_example_platform_webhook::serve(
            "127.0.0.1:0".parse().unwrap(),
            client,
            &file,
            move |at| tx.send(at).unwrap(),
            std::future::pending(),
        )
        .await;
        served.unwrap();
    });
    let address = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    (address, std::fs::read_to_string(ca_file).unwrap(), runtime)
}

/// The README's `kubectl apply -f FILE` lines of its walkthrough, as the files they
/// apply.
fn readme_applies() -> Vec<String> {
    let readme = std::fs::read_to_string(repo_root().join("examples/platform/README.md")).unwrap();
    sh_blocks(&readme, "## Walkthrough")
        .iter()
        .flat_map(|b| b.lines())
        .filter_map(|l| l.strip_prefix("kubectl apply -f "))
        .map(|rest| {
            rest.split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// `kubectl apply -f FILE` on the hub, run from the repository's root as the README does.
fn apply(hub: &Hub, file: &str) -> Output {
    hub.kubectl_command()
        .current_dir(repo_root())
        .args(["apply", "-f", file])
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_platform_walkthrough_runs_as_its_readme_says() {
    // The README applies exactly these files, in this order; every file is one of them.
    let mut listed: Vec<&str> = APPLIED.to_vec();
    listed.extend(REFUSED);
    assert_eq!(readme_applies(), listed);
    let readme = std::fs::read_to_string(repo_root().join("examples/platform/README.md")).unwrap();
    assert!(readme.contains(WEBHOOK) && readme.contains("kubectl delete platform spark"));
    listed.push(WEBHOOK);
    let mut on_disk = Vec::new();
    for dir in ["examples/platform", "examples/platform/refused"] {
        for entry in std::fs::read_dir(repo_root().join(dir)).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".yaml") {
                on_disk.push(format!("{dir}/{name}"));
            }
        }
    }
    on_disk.sort();
    listed.sort();
    assert_eq!(on_disk, listed, "a file the walkthrough does not apply");

    let hub = Hub::start_with(&["--health-period", "1s"]);
    let sim = Sim::start(&["--clusters", "3", "--prefix", "eu-"]);
    for cluster in ["eu-1", "eu-2", "eu-3"] {
        let stdout = join_with(&hub, &sim, cluster, &["--clusterset", "eu"]);
        assert!(stdout.contains("joined"), "{stdout}");
    }

    // The webhook, and its configuration with its CA and address, as the README's sed.
    let dir = tempfile::tempdir().unwrap();
    let (address, ca, _webhook) = start_webhook(&hub, dir.path());
    use base64::Engine as _;
    let configuration = std::fs::read_to_string(repo_root().join(WEBHOOK))
        .unwrap()
        .replace(
            "CA_BUNDLE",
            &base64::engine::general_purpose::STANDARD.encode(ca),
        )
        .replace("127.0.0.1:7446", &address.to_string());
    let out = hub.kubectl_with(&["apply", "-f", "-"], Some(&configuration));
    assert!(out.status.success(), "{}", text(&out));

    // The CRDs, the policy, then the platform (once the CRDs are served).
    for file in APPLIED {
        eventually(&format!("{file} applied"), || {
            let out = apply(&hub, file);
            if out.status.success() {
                Ok(())
            } else {
                Err(text(&out))
            }
        });
    }
    let tiers = hub.ok(&["get", "tiers"]);
    assert!(
        tiers.contains("spark-beta") && tiers.contains("spark") && tiers.contains("20"),
        "{tiers}"
    );

    // The tier's ComputeNamespace on every member of eu.
    eventually("spark-beta ready on 3 clusters", || {
        let cns = hub.json(&["get", "computenamespace", "spark-beta"]);
        match cns["status"]["summary"].as_str() {
            Some("Ready") if cns["status"]["readyClusters"] == 3 => Ok(()),
            _ => Err(cns["status"].to_string()),
        }
    });
    for cluster in ["eu-1", "eu-2", "eu-3"] {
        let objects = sim.ok(
            cluster,
            &[
                "get",
                "serviceaccount,limitrange,resourcequota,rolebinding",
                "-n",
                "spark-beta",
                "-o",
                "name",
            ],
        );
        for object in [
            "serviceaccount/deployer",
            "limitrange/spark-beta",
            "resourcequota/spark-beta",
            "rolebinding.rbac.authorization.k8s.io/spark-team-edit",
        ] {
            assert!(objects.contains(object), "{cluster}: {objects}");
        }
    }

    // Each refused file: refused with its first line's message, nothing written.
    for file in REFUSED {
        let content = std::fs::read_to_string(repo_root().join(file)).unwrap();
        let first = content.lines().next().unwrap();
        let message = first
            .strip_prefix("# refused: ")
            .unwrap_or_else(|| panic!("{file}: {first}"));
        let out = apply(&hub, file);
        assert!(!out.status.success(), "{file} was accepted: {}", text(&out));
        assert!(text(&out).contains(message), "{file}: {}", text(&out));
    }
    for (kind, name) in [
        ("tier", "spark-beta-big"),
        ("tier", "spark-prod"),
        ("platform", "argo"),
    ] {
        let out = hub.kubectl(&["get", kind, name]);
        assert!(!out.status.success(), "{kind} {name} was written");
    }
    let tier = hub.json(&["get", "tier", "spark-beta"]);
    assert_eq!(tier["spec"]["platform"], "spark");
    assert!(
        !hub.kubectl(&["get", "tier", "jupyter-beta"])
            .status
            .success()
    );

    // A Platform a Tier names stays; once its Tier is gone, it goes.
    let out = hub.kubectl(&["delete", "platform", "spark"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("Platform spark is still referred to by Tier spark-beta"),
        "{}",
        text(&out)
    );
    hub.ok(&["get", "platform", "spark"]);

    // The policy's param, not a schema, sets the limit: raised, the big tier goes in.
    hub.ok(&[
        "patch",
        "configmap",
        "tier-limits",
        "-n",
        "platform-system",
        "--type=merge",
        "-p",
        r#"{"data":{"beta":"60"}}"#,
    ]);
    eventually("the 50-pod beta tier accepted", || {
        let out = apply(&hub, REFUSED[0]);
        if out.status.success() {
            Ok(())
        } else {
            Err(text(&out))
        }
    });
    hub.ok(&["delete", "tier", "spark-beta", "spark-beta-big"]);
    hub.ok(&["delete", "platform", "spark"]);
}

//! `flotilla demo`: a hub and three simulated members as child processes, joined, with an
//! example Deployment placed on them, and the kubectl commands to look around.
//!
//! ```text
//!  flotilla demo ─┬─ flotilla hub  (DIR/hub, HUB_ADDR)      logs: DIR/hub.log
//!                 ├─ flotilla sim --clusters 3 (DIR/sim)   logs: DIR/sim.log
//!                 ├─ join member-1..3 (labels region, size)
//!                 └─ apply namespace demo: Deployment web ×6, Placement (Divided 1:2
//!                    over region=eu), Override (image from the registry mirror of
//!                    the cluster's region: eu.mirror.example.com/library/nginx:1.27)
//!
//!  flotilla demo --pull: pull clusters instead; the hub holds no member credentials
//!                 ├─ flotilla hub, then flotilla sim --clusters 3 --agents
//!                 │    --hub-kubeconfig DIR/hub/admin.kubeconfig (one agent per member,
//!                 │    registered with an auto-approve token the simulator makes)
//!                 ├─ wait for Clusters member-1..3 Ready, then label them (the hub's
//!                 │    admin decides where a cluster stands)
//!                 └─ the same example
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use flotilla_api::{Override, OverrideSpec, Placement, PlacementSpec};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::join::{HubAccess, JoinArgs};

/// The members the demo runs: name and labels.
const MEMBERS: [(&str, &str); 3] = [
    ("member-1", "region=eu,size=small"),
    ("member-2", "region=eu,size=large"),
    ("member-3", "region=us,size=large"),
];

/// `flotilla demo [--data-dir DIR] [--hub-listen ADDR] [--sim-listen ADDR]`
#[derive(Debug, Parser)]
pub struct DemoArgs {
    /// Where the hub's and the simulator's data and logs go (kept after the demo).
    #[arg(long, value_name = "DIR", default_value = "flotilla-demo")]
    pub data_dir: PathBuf,
    /// The hub's address.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:6443")]
    pub hub_listen: SocketAddr,
    /// The simulated members' address.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7443")]
    pub sim_listen: SocketAddr,
    /// Pull clusters: an agent per simulated member (inside the simulator) registers with
    /// the hub and pulls its Works; the hub holds no member credentials.
    #[arg(long)]
    pub pull: bool,
}

/// How often the demo's agents apply their Works again, and so report their objects'
/// status from the members.
const DEMO_RESYNC: &str = "5s";

/// The labels of a demo member, from `k=v,…`.
fn member_labels(labels: &str) -> BTreeMap<String, String> {
    labels
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The hub and simulator processes; killed when dropped.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        for child in &mut self.0 {
            let _ = child.wait();
        }
    }
}

fn spawn(dir: &Path, log: &str, args: &[&str]) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("cannot find the flotilla binary")?;
    let log = std::fs::File::create(dir.join(log))
        .with_context(|| format!("cannot write {}", dir.join(log).display()))?;
    Command::new(exe)
        .args(args)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("cannot start a child process")
}

impl DemoArgs {
    /// Runs the demo until SIGTERM or SIGINT.
    pub fn run(self) -> anyhow::Result<()> {
        crate::serve::block_on(self.demo())
    }

    async fn demo(self) -> anyhow::Result<()> {
        let dir = &self.data_dir;
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let (hub_dir, sim_dir) = (dir.join("hub"), dir.join("sim"));
        let text = |p: &Path| p.to_string_lossy().into_owned();
        let mut children = Children(Vec::new());
        children.0.push(spawn(
            dir,
            "hub.log",
            &[
                "hub",
                "--data-dir",
                &text(&hub_dir),
                "--listen",
                &self.hub_listen.to_string(),
                "--health-period",
                "2s",
            ],
        )?);
        let hub_kubeconfig = hub_dir.join("admin.kubeconfig");
        let (sim_dir_text, listen) = (text(&sim_dir), self.sim_listen.to_string());
        let mut sim = vec![
            "sim",
            "--clusters",
            "3",
            "--data-dir",
            &sim_dir_text,
            "--listen",
            &listen,
        ];
        let hub = if self.pull {
            // The agents register with the hub: it must answer first.
            let hub = wait_for_hub(&hub_kubeconfig, &mut children).await?;
            let hub_kubeconfig = text(&hub_kubeconfig);
            sim.extend([
                "--agents",
                "--hub-kubeconfig",
                &hub_kubeconfig,
                "--resync-period",
                DEMO_RESYNC,
            ]);
            children.0.push(spawn(dir, "sim.log", &sim)?);
            label_pull_members(&hub, &mut children).await?;
            hub
        } else {
            children.0.push(spawn(dir, "sim.log", &sim)?);
            let hub = wait_for_hub(&hub_kubeconfig, &mut children).await?;
            for (name, labels) in MEMBERS {
                let kubeconfig = sim_dir
                    .join("kubeconfigs")
                    .join(format!("{name}.kubeconfig"));
                wait_for_file(&kubeconfig, &mut children).await?;
                JoinArgs {
                    name: name.into(),
                    kubeconfig: Some(kubeconfig),
                    pull: false,
                    labels: member_labels(labels),
                    clusterset: None,
                    taints: Vec::new(),
                    hub: HubAccess {
                        hub_kubeconfig: Some(hub_kubeconfig.clone()),
                        timeout: Duration::from_secs(60),
                    },
                }
                .join()
                .await?;
            }
            hub
        };
        apply_example(&hub).await?;
        let member = text(&sim_dir.join("kubeconfigs").join("member-1.kubeconfig"));
        let kind = if self.pull {
            "3 simulated pull clusters (an agent each, inside the simulator)"
        } else {
            "3 simulated clusters"
        };
        println!(
            "\nFlotilla demo: a hub and {kind}; Deployment demo/web (6 replicas) \
             placed on region=eu, divided 1:2, each pulling its image from its region's mirror.\nLook around:\n\
             \n  export KUBECONFIG={}\
             \n  kubectl get clusters\
             \n  kubectl get placements,works -A\
             \n  kubectl get deploy web -n demo              # fleet-wide status\
             \n  kubectl get placement web -n demo -o yaml   # per cluster\
             \n  kubectl --kubeconfig {member} get deploy -n demo -o wide\
             \n  kubectl scale deploy web -n demo --replicas 9\
             \n\nLogs: {}/hub.log, {}/sim.log. Ctrl-C stops the demo (its data stays in {}).",
            text(&hub_kubeconfig),
            text(dir),
            text(dir),
            text(dir)
        );
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        drop(children);
        println!("demo stopped");
        Ok(())
    }
}

/// Waits until the simulator's agents have registered member-1..3 and they are Ready,
/// then gives each its labels (as `kubectl label cluster` would).
async fn label_pull_members(hub: &Client, children: &mut Children) -> anyhow::Result<()> {
    let clusters: Api<flotilla_api::Cluster> = Api::all(hub.clone());
    for (name, labels) in MEMBERS {
        let mut ready = false;
        for _ in 0..1200 {
            check_children(children)?;
            if let Ok(Some(cluster)) = clusters.get_opt(name).await {
                ready = cluster
                    .status
                    .as_ref()
                    .map(|s| s.conditions.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
            }
            if ready {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !ready {
            bail!("cluster {name}'s agent did not register within two minutes; see sim.log");
        }
        let patch = json!({"metadata": {"labels": member_labels(labels)}});
        clusters
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("cannot label cluster {name}"))?;
        println!("cluster {name} joined (pull agent, labels {labels})");
    }
    Ok(())
}

/// Fails if a child process has ended (its log says why).
fn check_children(children: &mut Children) -> anyhow::Result<()> {
    for (child, name) in children.0.iter_mut().zip(["hub", "sim"]) {
        if let Some(status) = child.try_wait()? {
            bail!("the {name} process ended ({status}); see {name}.log in the demo directory");
        }
    }
    Ok(())
}

async fn wait_for_file(path: &Path, children: &mut Children) -> anyhow::Result<()> {
    for _ in 0..600 {
        if path.exists() {
            return Ok(());
        }
        check_children(children)?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{} did not appear within a minute", path.display())
}

async fn wait_for_hub(kubeconfig: &Path, children: &mut Children) -> anyhow::Result<Client> {
    wait_for_file(kubeconfig, children).await?;
    let access = HubAccess {
        hub_kubeconfig: Some(kubeconfig.to_owned()),
        timeout: Duration::from_secs(60),
    };
    for _ in 0..600 {
        check_children(children)?;
        if let Ok(client) = access.client().await
            && client.apiserver_version().await.is_ok()
        {
            return Ok(client);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the hub did not answer within a minute")
}

/// The example: namespace `demo`, Deployment `web` (6 replicas), a Placement dividing it
/// 1:2 over the `region=eu` clusters by size, and an Override pulling the image from the
/// registry mirror of the cluster's region (as `examples/web/override.yaml`), the image
/// reference a real cluster would resolve, unlike a tag made of the cluster's name.
async fn apply_example(hub: &Client) -> anyhow::Result<()> {
    let apply = PatchParams::apply("flotilla-demo").force();
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "demo"}}))?;
    Api::<Namespace>::all(hub.clone())
        .patch("demo", &apply, &Patch::Apply(&namespace))
        .await?;
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "demo"},
        "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "docker.io/library/nginx:1.27",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}
    }))?;
    Api::<Deployment>::namespaced(hub.clone(), "demo")
        .patch("web", &apply, &Patch::Apply(&deployment))
        .await?;
    let spec: PlacementSpec = serde_json::from_value(json!({
        "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
        "clusters": {"labelSelector": {"matchLabels": {"region": "eu"}}},
        "replicas": {"mode": "Divided", "weights": [
            {"clusters": {"labelSelector": {"matchLabels": {"size": "small"}}}, "weight": 1},
            {"clusters": {"labelSelector": {"matchLabels": {"size": "large"}}}, "weight": 2}]}
    }))?;
    let mut placement = Placement::new("web", spec);
    placement.metadata.namespace = Some("demo".into());
    Api::<Placement>::namespaced(hub.clone(), "demo")
        .patch("web", &apply, &Patch::Apply(&placement))
        .await?;
    let spec: OverrideSpec = serde_json::from_value(json!({
        "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
        "rules": [{"image": {"registry": "${cluster.labels['region']}.mirror.example.com"},
            "labels": {"placed-on": "${cluster.name}"}}]
    }))?;
    let mut image = Override::new("web-image", spec);
    image.metadata.namespace = Some("demo".into());
    image.metadata.labels = Some(BTreeMap::from([("example".into(), "demo".into())]));
    Api::<Override>::namespaced(hub.clone(), "demo")
        .patch("web-image", &apply, &Patch::Apply(&image))
        .await?;
    Ok(())
}

//! `flotilla join` and `flotilla unjoin`: register a member cluster with the hub in push
//! mode (its kubeconfig in a Secret on the hub, referenced by the Cluster), and remove it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use flotilla_api::{
    Cluster, ClusterAccess, ClusterSpec, PushAccess, SecretReference, Taint, TaintEffect,
};
use flotilla_fleet::runtime::{KUBECONFIG_KEY, client_from_kubeconfig};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};

/// The field manager of what `flotilla join` writes.
const MANAGER: &str = "flotilla-join";

/// Where the hub keeps push credentials.
const CREDENTIALS_NAMESPACE: &str = "flotilla-system";

/// The longest cluster name: its Works namespace (`flotilla-cluster-<name>`) is a DNS label.
const MAX_NAME: usize = 63 - flotilla_fleet::plan::WORK_NAMESPACE_PREFIX.len();

/// How the hub is reached.
#[derive(Debug, clap::Args)]
pub struct HubAccess {
    /// The hub's kubeconfig (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub hub_kubeconfig: Option<PathBuf>,
    /// How long to wait for the hub to finish (`30s`, `2m`).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = crate::serve::parse_duration)]
    pub timeout: Duration,
}

/// `flotilla join NAME --kubeconfig FILE [--labels k=v,…] [--clusterset SET]`
#[derive(Debug, Parser)]
pub struct JoinArgs {
    /// The cluster's name on the hub (a DNS label of at most 46 characters).
    #[arg(value_parser = cluster_name)]
    pub name: String,
    /// A kubeconfig for the member cluster (its current context is used).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,
    /// The cluster's labels, which placements select on.
    #[arg(long, value_name = "K=V,...", value_parser = labels, default_value = "")]
    pub labels: BTreeMap<String, String>,
    /// The cluster set it belongs to.
    #[arg(long, value_name = "SET", value_parser = cluster_name)]
    pub clusterset: Option<String>,
    /// Taints (`key=value:NoSchedule`, `key:NoExecute`), comma-separated.
    #[arg(long, value_name = "TAINTS", value_parser = taint, value_delimiter = ',')]
    pub taints: Vec<Taint>,
    /// The hub.
    #[command(flatten)]
    pub hub: HubAccess,
}

/// `flotilla unjoin NAME [--orphan]`
#[derive(Debug, Parser)]
pub struct UnjoinArgs {
    /// The cluster to remove.
    #[arg(value_parser = cluster_name)]
    pub name: String,
    /// Leave what the hub placed on the cluster there (default: remove it).
    #[arg(long)]
    pub orphan: bool,
    /// The hub.
    #[command(flatten)]
    pub hub: HubAccess,
}

/// A cluster name: a DNS label short enough for its Works namespace.
fn cluster_name(name: &str) -> Result<String, String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(name.to_owned())
    } else {
        Err(format!(
            "{name:?} is not a valid cluster name: use at most {MAX_NAME} lowercase letters, \
             digits and '-', starting and ending with a letter or digit"
        ))
    }
}

/// `k=v,k2=v2` (empty: none).
fn labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    for pair in text.split(',').filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("label {pair:?} is not key=value"))?;
        let key_ok = !key.is_empty()
            && key.len() <= 253
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b));
        let value_ok = value.len() <= 63
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !key_ok || !value_ok {
            return Err(format!("label {pair:?} is not a valid Kubernetes label"));
        }
        labels.insert(key.to_owned(), value.to_owned());
    }
    Ok(labels)
}

/// `key[=value]:Effect`.
fn taint(t: &str) -> Result<Taint, String> {
    let (key_value, effect) = t
        .rsplit_once(':')
        .ok_or_else(|| format!("taint {t:?} has no effect: use key=value:NoSchedule"))?;
    let effect = match effect {
        "NoSchedule" => TaintEffect::NoSchedule,
        "NoExecute" => TaintEffect::NoExecute,
        other => {
            return Err(format!(
                "taint effect {other:?} is not NoSchedule or NoExecute"
            ));
        }
    };
    let (key, value) = key_value.split_once('=').unwrap_or((key_value, ""));
    if key.is_empty() {
        return Err(format!("taint {t:?} has no key"));
    }
    Ok(Taint {
        key: key.to_owned(),
        value: value.to_owned(),
        effect,
    })
}

impl HubAccess {
    pub(crate) async fn client(&self) -> anyhow::Result<Client> {
        let config = match &self.hub_kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path).with_context(|| {
                    format!("cannot read the hub kubeconfig {}", path.display())
                })?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await
                    .context("cannot use the hub kubeconfig")?
            }
            None => kube::Config::infer()
                .await
                .context("no hub kubeconfig: pass --hub-kubeconfig or set KUBECONFIG")?,
        };
        Ok(Client::try_from(config)?)
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

impl JoinArgs {
    /// Joins the cluster; fails with one line when its kubeconfig does not work.
    pub fn run(self) -> anyhow::Result<()> {
        runtime()?.block_on(self.join())
    }

    pub(crate) async fn join(self) -> anyhow::Result<()> {
        let bytes = std::fs::read(&self.kubeconfig)
            .with_context(|| format!("cannot read {}", self.kubeconfig.display()))?;
        let member = client_from_kubeconfig(&bytes, Duration::from_secs(10))
            .await
            .map_err(|e| anyhow::anyhow!("the kubeconfig of {} does not work: {e}", self.name))?;
        let version = tokio::time::timeout(Duration::from_secs(15), member.apiserver_version())
            .await
            .map_err(|_| {
                anyhow::anyhow!("the kubeconfig of {} does not work: no answer", self.name)
            })?
            .map_err(|e| anyhow::anyhow!("the kubeconfig of {} does not work: {e}", self.name))?;
        let hub = self.hub.client().await?;
        let namespaces: Api<Namespace> = Api::all(hub.clone());
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(CREDENTIALS_NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let apply = PatchParams::apply(MANAGER).force();
        namespaces
            .patch(CREDENTIALS_NAMESPACE, &apply, &Patch::Apply(&namespace))
            .await
            .context("cannot reach the hub")?;
        let secret_name = format!("cluster-{}-kubeconfig", self.name);
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(secret_name.clone()),
                namespace: Some(CREDENTIALS_NAMESPACE.into()),
                labels: Some(BTreeMap::from([(
                    "flotilla.io/cluster".into(),
                    self.name.clone(),
                )])),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(KUBECONFIG_KEY.into(), ByteString(bytes))])),
            type_: Some("Opaque".into()),
            ..Secret::default()
        };
        Api::<Secret>::namespaced(hub.clone(), CREDENTIALS_NAMESPACE)
            .patch(&secret_name, &apply, &Patch::Apply(&secret))
            .await
            .context("cannot store the cluster's credentials on the hub")?;
        let mut cluster = Cluster::new(
            &self.name,
            ClusterSpec {
                taints: self.taints.clone(),
                cluster_set: self.clusterset.clone(),
                access: Some(ClusterAccess {
                    push: Some(PushAccess {
                        secret_ref: SecretReference {
                            namespace: CREDENTIALS_NAMESPACE.into(),
                            name: secret_name,
                        },
                    }),
                    pull: None,
                }),
            },
        );
        cluster.metadata.labels = Some(self.labels.clone());
        let clusters: Api<Cluster> = Api::all(hub);
        clusters
            .patch(&self.name, &apply, &Patch::Apply(&cluster))
            .await
            .context("cannot register the cluster on the hub")?;
        // Wait for the hub's first health check.
        let deadline = tokio::time::Instant::now() + self.hub.timeout;
        loop {
            let current = clusters.get(&self.name).await?;
            let ready = current
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
            match ready {
                Some(c) if c.status == "True" => {
                    println!(
                        "cluster {} joined (Kubernetes {}); Ready",
                        self.name, version.git_version
                    );
                    return Ok(());
                }
                Some(c) if tokio::time::Instant::now() >= deadline => {
                    bail!(
                        "cluster {} joined but is not ready: {}",
                        self.name,
                        c.message
                    )
                }
                _ if tokio::time::Instant::now() >= deadline => bail!(
                    "cluster {} joined but the hub has not checked it within {:?}: is the hub running its controllers?",
                    self.name,
                    self.hub.timeout
                ),
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

impl UnjoinArgs {
    /// Unjoins the cluster and waits until the hub has let it go.
    pub fn run(self) -> anyhow::Result<()> {
        runtime()?.block_on(self.unjoin())
    }

    async fn unjoin(self) -> anyhow::Result<()> {
        let hub = self.hub.client().await?;
        let clusters: Api<Cluster> = Api::all(hub);
        if clusters
            .get_opt(&self.name)
            .await
            .context("cannot reach the hub")?
            .is_none()
        {
            bail!("cluster {} has not joined this hub", self.name);
        }
        if self.orphan {
            let patch = serde_json::json!({"metadata": {"annotations": {
                flotilla_fleet::runtime::UNJOIN_ANNOTATION: "Orphan"}}});
            clusters
                .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        clusters
            .delete(&self.name, &DeleteParams::default())
            .await?;
        let deadline = tokio::time::Instant::now() + self.hub.timeout;
        while clusters.get_opt(&self.name).await?.is_some() {
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "cluster {} is still being removed after {:?} (its Works are being withdrawn)",
                    self.name,
                    self.hub.timeout
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let what = if self.orphan {
            "left in place"
        } else {
            "removed"
        };
        println!(
            "cluster {} unjoined; what the hub placed there was {what}",
            self.name
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Args, Command};

    fn join(args: &[&str]) -> Result<JoinArgs, clap::Error> {
        let mut argv = vec!["flotilla", "join"];
        argv.extend_from_slice(args);
        Args::try_parse_from(argv).map(|a| match a.command {
            Command::Join(j) => j,
            other => panic!("parsed as {other:?}"),
        })
    }

    #[test]
    fn join_arguments() {
        let args = join(&[
            "eu-1",
            "--kubeconfig",
            "m.kubeconfig",
            "--labels",
            "region=eu,size=large",
            "--clusterset",
            "prod",
            "--taints",
            "maintenance:NoSchedule,gpu=a100:NoExecute",
        ])
        .unwrap();
        assert_eq!(args.name, "eu-1");
        assert_eq!(args.labels["region"], "eu");
        assert_eq!(args.labels["size"], "large");
        assert_eq!(args.clusterset.as_deref(), Some("prod"));
        assert_eq!(args.taints.len(), 2);
        assert_eq!(args.taints[1].value, "a100");
        assert_eq!(args.hub.timeout, Duration::from_secs(60));
        let plain = join(&["a", "--kubeconfig", "k"]).unwrap();
        assert!(plain.labels.is_empty() && plain.taints.is_empty());
    }

    #[test]
    fn bad_join_arguments_are_refused_with_a_reason() {
        let error = |args: &[&str]| join(args).unwrap_err().to_string();
        assert!(error(&["EU", "--kubeconfig", "k"]).contains("not a valid cluster name"));
        let long = "a".repeat(MAX_NAME + 1);
        assert!(error(&[&long, "--kubeconfig", "k"]).contains("not a valid cluster name"));
        assert!(error(&["a"]).contains("--kubeconfig"));
        assert!(error(&["a", "--kubeconfig", "k", "--labels", "region"]).contains("not key=value"));
        assert!(
            error(&["a", "--kubeconfig", "k", "--labels", "a=b c"])
                .contains("not a valid Kubernetes label")
        );
        assert!(error(&["a", "--kubeconfig", "k", "--taints", "x"]).contains("has no effect"));
        assert!(
            error(&["a", "--kubeconfig", "k", "--taints", "x:Sometimes"])
                .contains("not NoSchedule or NoExecute")
        );
        assert!(
            error(&["a", "--kubeconfig", "k", "--timeout", "soon"]).contains("invalid duration")
        );
    }
}

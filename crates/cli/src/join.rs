//! `flotilla join` and `flotilla unjoin`: register a member cluster with the hub in push
//! mode (its kubeconfig in a Secret on the hub, referenced by the Cluster), and remove it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine as _;
use clap::Parser;
use flotilla_api::{
    Cluster, ClusterAccess, ClusterSet, ClusterSetSpec, ClusterSpec, PushAccess, SecretReference,
    Taint, TaintEffect,
};
use flotilla_fleet::runtime::{KUBECONFIG_KEY, client_from_kubeconfig};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};

/// The field manager of what `flotilla join` writes.
const MANAGER: &str = "flotilla-join";

/// Where the hub keeps push credentials (the only Secrets its controllers may read).
const CREDENTIALS_NAMESPACE: &str = flotilla_api::access::CREDENTIALS_NAMESPACE;

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

/// Creates ClusterSet `set` unless it exists, so that a ClusterSetBinding to the set a
/// cluster joined binds it. (It is left when a join fails or the cluster leaves: other
/// clusters may be in it, and namespaces bound to it.)
pub(crate) async fn ensure_cluster_set(hub: &Client, set: &str) -> anyhow::Result<()> {
    let sets: Api<ClusterSet> = Api::all(hub.clone());
    let new = ClusterSet::new(set, ClusterSetSpec::default());
    match sets.create(&kube::api::PostParams::default(), &new).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot create the ClusterSet {set}")),
    }
}

/// `flotilla join NAME --kubeconfig FILE [--labels k=v,…] [--clusterset SET]`
#[derive(Debug, Parser)]
pub struct JoinArgs {
    /// The cluster's name on the hub (a DNS label of at most 46 characters).
    #[arg(value_parser = cluster_name)]
    pub name: String,
    /// A kubeconfig for the member cluster (its current context is used).
    #[arg(long, value_name = "FILE", required_unless_present = "pull")]
    pub kubeconfig: Option<PathBuf>,
    /// Pull mode instead: make a bootstrap token (24 h) and print the command that runs
    /// the cluster's agent next to the member; the hub holds no member credentials.
    #[arg(long, conflicts_with_all = ["kubeconfig", "taints"])]
    pub pull: bool,
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
pub(crate) fn cluster_name(name: &str) -> Result<String, String> {
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
pub(crate) fn labels(text: &str) -> Result<BTreeMap<String, String>, String> {
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
        Ok(Client::try_from(self.config().await?)?)
    }

    /// The hub's client configuration.
    pub(crate) async fn config(&self) -> anyhow::Result<kube::Config> {
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
        Ok(config)
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
        let Some(kubeconfig) = self.kubeconfig.clone() else {
            return crate::pull::print_agent_command(&self).await;
        };
        // Everything about the member is checked before anything is written on the hub.
        let bytes = flatten(&kubeconfig)?;
        let target = Target::of(&bytes);
        let fail = |why: String| {
            anyhow::anyhow!(
                "cluster {} cannot join: {why}; nothing was written on the hub",
                self.name
            )
        };
        let member = client_from_kubeconfig(&bytes, Duration::from_secs(10))
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "the kubeconfig of {} does not work: {e}; nothing was written on the hub",
                    self.name
                )
            })?;
        let version = tokio::time::timeout(Duration::from_secs(15), member.apiserver_version())
            .await
            .map_err(|_| fail(format!("{} does not answer", target.address)))?
            .map_err(|e| fail(target.explain(&e)))?;
        let hub = self.hub.client().await?;
        let secret_name = format!("cluster-{}-kubeconfig", self.name);
        let secrets = Api::<Secret>::namespaced(hub.clone(), CREDENTIALS_NAMESPACE);
        let clusters: Api<Cluster> = Api::all(hub.clone());
        // What exists already is a join of before: a failed join again leaves it alone.
        let had_secret = secrets
            .get_opt(&secret_name)
            .await
            .context("cannot reach the hub")?
            .is_some();
        let had_cluster = clusters.get_opt(&self.name).await?.is_some();
        let joined = self.register(&hub, &secret_name, bytes).await;
        let joined = match joined {
            Ok(()) => self.wait_ready(&clusters).await,
            Err(e) => Err(e),
        };
        let Err(e) = joined else {
            println!(
                "cluster {} joined (Kubernetes {}); Ready",
                self.name, version.git_version
            );
            return Ok(());
        };
        let mut left = Vec::new();
        // The hub lets a Cluster go once its controllers have withdrawn it.
        let patience = self.hub.timeout.max(Duration::from_secs(30));
        if !had_cluster && let Err(e) = remove(&clusters, &self.name, patience).await {
            left.push(format!("Cluster {} ({e:#})", self.name));
        }
        if !had_secret && let Err(e) = remove(&secrets, &secret_name, patience).await {
            left.push(format!(
                "Secret {CREDENTIALS_NAMESPACE}/{secret_name} ({e:#})"
            ));
        }
        if left.is_empty() {
            Err(e.context(format!(
                "cluster {} did not join; what this join wrote was removed",
                self.name
            )))
        } else {
            Err(e.context(format!(
                "cluster {} did not join, and its removal failed, left: {}",
                self.name,
                left.join(", ")
            )))
        }
    }

    /// Writes the credentials' Secret and the Cluster.
    async fn register(
        &self,
        hub: &Client,
        secret_name: &str,
        bytes: Vec<u8>,
    ) -> anyhow::Result<()> {
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
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(secret_name.to_owned()),
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
            .patch(secret_name, &apply, &Patch::Apply(&secret))
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
                            name: secret_name.to_owned(),
                        },
                    }),
                    pull: None,
                }),
            },
        );
        cluster.metadata.labels = Some(self.labels.clone());
        Api::<Cluster>::all(hub.clone())
            .patch(&self.name, &apply, &Patch::Apply(&cluster))
            .await
            .context("cannot register the cluster on the hub")?;
        if let Some(set) = &self.clusterset {
            ensure_cluster_set(hub, set).await?;
        }
        Ok(())
    }

    /// Waits for the hub's first health check to find the cluster Ready.
    async fn wait_ready(&self, clusters: &Api<Cluster>) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + self.hub.timeout;
        loop {
            let current = clusters.get(&self.name).await?;
            let ready = current
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
            match ready {
                Some(c) if c.status == "True" => return Ok(()),
                Some(c) if tokio::time::Instant::now() >= deadline => {
                    bail!(
                        "the hub found it not Ready within {:?}: {}",
                        self.hub.timeout,
                        c.message
                    )
                }
                _ if tokio::time::Instant::now() >= deadline => bail!(
                    "the hub has not checked it within {:?}: is the hub running its controllers?",
                    self.hub.timeout
                ),
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

/// Deletes `name` and waits (within `timeout`) until it is gone.
async fn remove<K>(api: &Api<K>, name: &str, timeout: Duration) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let deadline = tokio::time::Instant::now() + timeout;
    while api.get_opt(name).await?.is_some() {
        if tokio::time::Instant::now() >= deadline {
            bail!("still there after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The kubeconfig at `path` as the hub will hold it: every file it names
/// (`certificate-authority`, `client-certificate`, `client-key`, `tokenFile`; relative to
/// the kubeconfig's folder) read into it, since the hub cannot read this machine's files.
/// Unchanged (the bytes as written) when it names none. A file that cannot be read is
/// refused, naming it.
fn flatten(path: &Path) -> anyhow::Result<Vec<u8>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    // `read_from` makes the paths in it absolute, from the kubeconfig's folder.
    let kubeconfig = Kubeconfig::read_from(path)
        .with_context(|| format!("{} is not a usable kubeconfig", path.display()))?;
    let mut doc = serde_json::to_value(&kubeconfig)?;
    let mut changed = false;
    let mut embed = |entry: &mut serde_json::Value,
                     kind: &str,
                     inner: &str,
                     file_key: &str,
                     data_key: &str,
                     as_text: bool|
     -> anyhow::Result<()> {
        let name = entry["name"].as_str().unwrap_or_default().to_owned();
        let Some(fields) = entry[inner].as_object_mut() else {
            return Ok(());
        };
        let Some(file) = fields.remove(file_key) else {
            return Ok(());
        };
        let Some(file) = file.as_str() else {
            return Ok(());
        };
        let content = std::fs::read(file).with_context(|| {
            format!(
                "cannot read {file}, the {file_key} of {kind} {name:?} in {}; nothing was \
                 written on the hub",
                path.display()
            )
        })?;
        let value = if as_text {
            String::from_utf8_lossy(&content).trim().to_owned()
        } else {
            base64::engine::general_purpose::STANDARD.encode(content)
        };
        fields.insert(data_key.to_owned(), value.into());
        changed = true;
        Ok(())
    };
    for cluster in doc["clusters"].as_array_mut().into_iter().flatten() {
        embed(
            cluster,
            "cluster",
            "cluster",
            "certificate-authority",
            "certificate-authority-data",
            false,
        )?;
    }
    for user in doc["users"].as_array_mut().into_iter().flatten() {
        for (file, data) in [
            ("client-certificate", "client-certificate-data"),
            ("client-key", "client-key-data"),
        ] {
            embed(user, "user", "user", file, data, false)?;
        }
        embed(user, "user", "user", "tokenFile", "token", true)?;
    }
    if !changed {
        return Ok(bytes);
    }
    Ok(serde_json::to_vec_pretty(&doc)?)
}

/// A name as rustls presents it (`DnsName("a.b")`, `IpAddress(0::1)`), plainly.
fn plain_name(presented: &str) -> String {
    let inner = presented
        .split_once('(')
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap_or(presented)
        .trim_matches('"');
    match inner.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => inner.to_owned(),
    }
}

/// What caused `e`, looking into what an `io::Error` wraps (whose `source` skips it).
fn cause<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    match e
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
    {
        Some(inner) => Some(inner),
        None => e.source(),
    }
}

/// Whom a kubeconfig's current context talks to, to say what went wrong.
#[derive(Debug, Default)]
struct Target {
    /// `host:port` of its server.
    address: String,
    /// The name it expects in the server's certificate.
    server_name: String,
    /// The user's name in the kubeconfig.
    user: String,
}

impl Target {
    fn of(kubeconfig: &[u8]) -> Target {
        let Some(config) = std::str::from_utf8(kubeconfig)
            .ok()
            .and_then(|text| Kubeconfig::from_yaml(text).ok())
        else {
            return Target::default();
        };
        let context = config
            .contexts
            .iter()
            .find(|c| Some(&c.name) == config.current_context.as_ref())
            .and_then(|c| c.context.as_ref());
        let cluster = context.and_then(|c| {
            config
                .clusters
                .iter()
                .find(|n| n.name == c.cluster)
                .and_then(|n| n.cluster.as_ref())
        });
        let server = cluster
            .and_then(|c| c.server.as_deref())
            .unwrap_or_default();
        let authority = server
            .split_once("://")
            .map_or(server, |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default();
        let has_port = match authority.rsplit_once(':') {
            Some((host, port)) => !port.is_empty() && (!host.contains(':') || host.ends_with(']')),
            None => false,
        };
        let address = if has_port {
            authority.to_owned()
        } else {
            format!("{authority}:443")
        };
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None if has_port => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
            None => authority,
        };
        Target {
            address,
            server_name: cluster
                .and_then(|c| c.tls_server_name.clone())
                .unwrap_or_else(|| host.to_owned()),
            user: context.and_then(|c| c.user.clone()).unwrap_or_default(),
        }
    }

    /// What `error` (from a request to the member) means, on one line: the address was
    /// unreachable, TLS failed (and why, with the names), or the credentials were refused.
    fn explain(&self, error: &kube::Error) -> String {
        use rustls::CertificateError;
        let address = &self.address;
        if let kube::Error::Api(status) = error {
            return match status.code {
                401 => format!(
                    "authentication failed: {address} refused the credentials of user {:?} \
                     (401 Unauthorized)",
                    self.user
                ),
                403 => format!(
                    "user {:?} may not read {address}'s version (403 Forbidden): {}",
                    self.user, status.message
                ),
                code => format!("{address} answered {code}: {}", status.message),
            };
        }
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
        let mut io = None;
        while let Some(e) = source {
            let tls = e.downcast_ref::<rustls::Error>();
            if let Some(tls) = tls {
                let name = &self.server_name;
                return match tls {
                    rustls::Error::InvalidCertificate(
                        CertificateError::NotValidForNameContext { presented, .. },
                    ) => format!(
                        "TLS failed: the certificate of {address} is for {}, not {name}",
                        presented
                            .iter()
                            .map(|name| plain_name(name))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    rustls::Error::InvalidCertificate(CertificateError::NotValidForName) => {
                        format!("TLS failed: the certificate of {address} is not for {name}")
                    }
                    rustls::Error::InvalidCertificate(
                        CertificateError::UnknownIssuer | CertificateError::BadSignature,
                    ) => format!(
                        "TLS failed: the certificate of {address} is not trusted by the \
                         kubeconfig's certificate authority (its issuer is unknown)"
                    ),
                    rustls::Error::InvalidCertificate(why) => {
                        format!("TLS failed: the certificate of {address} is refused: {why:?}")
                    }
                    other => format!("TLS with {address} failed: {other}"),
                };
            }
            if io.is_none()
                && let Some(e) = e.downcast_ref::<std::io::Error>()
            {
                io = Some(e);
            }
            source = cause(e);
        }
        if let Some(io) = io {
            return format!("cannot reach {address}: {io}");
        }
        // Any other failure: its messages, not its structure.
        let mut text = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(e) = source {
            let part = e.to_string();
            if !text.contains(&part) {
                text = format!("{text}: {part}");
            }
            source = e.source();
        }
        format!("{address}: {text}")
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
    fn names_in_certificates_are_shown_plainly() {
        assert_eq!(plain_name("DnsName(\"localhost\")"), "localhost");
        assert_eq!(plain_name("IpAddress(0::1)"), "::1");
        assert_eq!(plain_name("IpAddress(127.0.0.1)"), "127.0.0.1");
        assert_eq!(plain_name("hub.example.test"), "hub.example.test");
    }

    #[test]
    fn addresses_and_users_of_a_kubeconfig() {
        let target = |server: &str| {
            Target::of(
                format!(
                    r#"{{"apiVersion": "v1", "kind": "Config", "current-context": "c",
                    "clusters": [{{"name": "k", "cluster": {{"server": "{server}"}}}}],
                    "users": [{{"name": "u", "user": {{"token": "t"}}}}],
                    "contexts": [{{"name": "c", "context": {{"cluster": "k", "user": "u"}}}}]}}"#
                )
                .as_bytes(),
            )
        };
        let t = target("https://10.0.0.1:6443/clusters/x");
        assert_eq!(
            (t.address.as_str(), t.server_name.as_str()),
            ("10.0.0.1:6443", "10.0.0.1")
        );
        assert_eq!(t.user, "u");
        let t = target("https://api.example.test");
        assert_eq!(
            (t.address.as_str(), t.server_name.as_str()),
            ("api.example.test:443", "api.example.test")
        );
        let t = target("https://[::1]:7443");
        assert_eq!(
            (t.address.as_str(), t.server_name.as_str()),
            ("[::1]:7443", "::1")
        );
    }

    #[test]
    fn files_a_kubeconfig_names_are_read_into_it_from_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        for (file, content) in [
            ("ca.crt", "CA"),
            ("c.crt", "CERT"),
            ("c.key", "KEY"),
            ("t", "tok\n"),
        ] {
            std::fs::write(dir.path().join(file), content).unwrap();
        }
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: https://h:1\n    certificate-authority: ca.crt\nusers:\n- name: u\n  user:\n    client-certificate: c.crt\n    client-key: c.key\n- name: v\n  user:\n    tokenFile: t\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n",
        )
        .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&flatten(&path).unwrap()).unwrap();
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let cluster = &doc["clusters"][0]["cluster"];
        assert_eq!(cluster["certificate-authority-data"], b64("CA"));
        assert!(cluster["certificate-authority"].is_null());
        let user = &doc["users"][0]["user"];
        assert_eq!(user["client-certificate-data"], b64("CERT"));
        assert_eq!(user["client-key-data"], b64("KEY"));
        assert!(user["client-certificate"].is_null() && user["client-key"].is_null());
        assert_eq!(doc["users"][1]["user"]["token"], "tok");
        assert!(doc["users"][1]["user"]["tokenFile"].is_null());
        // What kube reads back is the same cluster and user.
        let back =
            Kubeconfig::from_yaml(std::str::from_utf8(&flatten(&path).unwrap()).unwrap()).unwrap();
        assert_eq!(back.current_context.as_deref(), Some("c"));
        // A kubeconfig naming no file is kept byte for byte.
        let plain = dir.path().join("plain");
        let text = "apiVersion: v1\nkind: Config\nclusters: []\n";
        std::fs::write(&plain, text).unwrap();
        assert_eq!(flatten(&plain).unwrap(), text.as_bytes());
        // A file that is missing is named.
        std::fs::remove_file(dir.path().join("c.key")).unwrap();
        let e = format!("{:#}", flatten(&path).unwrap_err());
        assert!(e.contains("c.key, the client-key of user \"u\""), "{e}");
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
        // Pull mode: no member kubeconfig (the agent holds it), and not both.
        let pull = join(&["a", "--pull", "--labels", "env=dev"]).unwrap();
        assert!(pull.pull && pull.kubeconfig.is_none());
        assert!(join(&["a", "--pull", "--kubeconfig", "k"]).is_err());
        assert!(join(&["a"]).is_err());
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

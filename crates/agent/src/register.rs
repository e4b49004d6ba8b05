//! Registration: from a bootstrap token to a certificate of the cluster's own, kept in
//! the agent's data directory.
//!
//! ```text
//!  DIR/agent.key, agent.crt, hub-ca.crt all there? ─► done (a restart registers nothing)
//!  ─► discovery::hub_ca (the pin) ─► DIR/hub-ca.crt
//!  ─► DIR/agent.key (ECDSA P-256, 0600; kept across tries: the same key, the same CSR)
//!  ─► as system:bootstrap:ID:
//!       create Cluster NAME {labels, clusterSet, access.pull.identity, annotation token id}
//!         (409: it exists; the approver decides whether this token may have it)
//!       create CSR NAME-<key digest> {CN system:flotilla:cluster:NAME,
//!         O system:flotilla:clusters, signer kube-apiserver-client, client auth}
//!       GET it, then watch it by name from there until status.certificate (Denied or
//!         Failed: refused, one line); a watch that ends is followed by a GET again
//!  ─► DIR/agent.crt (0600)
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use flotilla_api::agent::{CLUSTERS_GROUP, TOKEN_ID_ANNOTATION, cluster_user};
use flotilla_api::{Cluster, ClusterAccess, ClusterSpec, PullAccess};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::Api;
use kube::api::{ObjectMeta, PostParams, WatchEvent};
use tracing::info;

use crate::token::BootstrapToken;
use crate::{Error, HubAuth, discovery, hub_client, is_unauthorized};

/// The signer of the hub's client certificates.
pub const SIGNER: &str = "kubernetes.io/kube-apiserver-client";

/// What the agent registers with.
#[derive(Clone, Debug)]
pub struct Registration {
    /// `https://HOST:PORT` of the hub.
    pub hub: String,
    /// The bootstrap token (needed only when the data directory holds no certificate).
    pub token: Option<BootstrapToken>,
    /// `sha256:HEX` of the hub CA's public key.
    pub ca_hash: String,
    /// The cluster's name on the hub.
    pub cluster: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its cluster set.
    pub cluster_set: Option<String>,
    /// Where the key, the certificate and the hub's CA are kept.
    pub data_dir: PathBuf,
}

/// The agent's credentials for the hub.
#[derive(Clone)]
pub struct Credentials {
    /// The hub's CA (PEM).
    pub ca_pem: String,
    /// The agent's certificate (PEM).
    pub cert_pem: String,
    /// Its key (PEM, PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").finish_non_exhaustive()
    }
}

/// The files of a data directory.
pub struct Files {
    /// The agent's private key.
    pub key: PathBuf,
    /// Its certificate.
    pub cert: PathBuf,
    /// The hub's CA.
    pub ca: PathBuf,
}

impl Files {
    /// The files in `dir`.
    pub fn in_dir(dir: &Path) -> Files {
        Files {
            key: dir.join("agent.key"),
            cert: dir.join("agent.crt"),
            ca: dir.join("hub-ca.crt"),
        }
    }
}

/// Writes `contents` to `path` readable by this user alone (0600), through a file
/// renamed into place.
pub(crate) fn write_private(path: &Path, contents: &str) -> Result<(), Error> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| Error::file(&tmp, e))?;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::file(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::file(path, e))
}

fn read(path: &Path) -> Result<Option<String>, Error> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::file(path, e)),
    }
}

/// The data directory, created 0700.
fn data_dir(dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::file(dir, e))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| Error::file(dir, e))
}

/// The name of the CSR for `key_pem`: the cluster's name and a digest of the key, so that
/// a retry with the same key finds its request and a new key makes a new one.
pub(crate) fn csr_name(cluster: &str, public_key_der: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, public_key_der);
    let hex: String = digest.as_ref()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{cluster}-{hex}")
}

/// The credentials in `dir` if a registration finished there, else registers.
pub async fn credentials(registration: &Registration) -> Result<Credentials, Error> {
    credentials_for(registration, None).await
}

/// [`credentials`], asking for a certificate of lifetime `duration` (the CSR's
/// `expirationSeconds`; none: the hub's default) when it registers.
pub async fn credentials_for(
    registration: &Registration,
    duration: Option<Duration>,
) -> Result<Credentials, Error> {
    data_dir(&registration.data_dir)?;
    let files = Files::in_dir(&registration.data_dir);
    if let (Some(ca_pem), Some(cert_pem), Some(key_pem)) =
        (read(&files.ca)?, read(&files.cert)?, read(&files.key)?)
    {
        info!(dir = %registration.data_dir.display(), "registered before: using the certificate kept");
        return Ok(Credentials {
            ca_pem,
            cert_pem,
            key_pem,
        });
    }
    register(registration, &files, duration).await
}

async fn register(
    registration: &Registration,
    files: &Files,
    duration: Option<Duration>,
) -> Result<Credentials, Error> {
    let token = registration.token.as_ref().ok_or_else(|| {
        Error::Input("this agent has no certificate yet: --token is needed to register".into())
    })?;
    let ca_pem = discovery::hub_ca(&registration.hub, &registration.ca_hash).await?;
    write_private(&files.ca, &ca_pem)?;
    let key_pem = match read(&files.key)? {
        Some(pem) => pem,
        None => {
            let key = rcgen::KeyPair::generate()
                .map_err(|e| Error::Input(format!("cannot make a key: {e}")))?;
            let pem = key.serialize_pem();
            write_private(&files.key, &pem)?;
            pem
        }
    };
    let key = rcgen::KeyPair::from_pem(&key_pem)
        .map_err(|e| Error::Input(format!("{}: {e}", files.key.display())))?;
    let user = cluster_user(&registration.cluster);
    let request = cluster_request(&registration.cluster, &key)?;
    let hub = hub_client(
        &registration.hub,
        &ca_pem,
        HubAuth::Token(&token.to_string()),
    )
    .await?;
    // One line: the hub's own words for a refusal.
    let refused = |e: kube::Error| match e {
        e if is_unauthorized(&e) => Error::TokenRefused,
        kube::Error::Api(s) => Error::Hub(format!("{} ({} {})", s.message, s.code, s.reason)),
        e => Error::Kube(e),
    };

    let cluster = Cluster {
        metadata: ObjectMeta {
            name: Some(registration.cluster.clone()),
            labels: Some(registration.labels.clone()),
            annotations: Some(BTreeMap::from([(
                TOKEN_ID_ANNOTATION.to_owned(),
                token.id.clone(),
            )])),
            ..ObjectMeta::default()
        },
        spec: ClusterSpec {
            cluster_set: registration.cluster_set.clone(),
            access: Some(ClusterAccess {
                push: None,
                pull: Some(PullAccess {
                    identity: user.clone(),
                }),
            }),
            ..ClusterSpec::default()
        },
        status: None,
    };
    let clusters: Api<Cluster> = Api::all(hub.clone());
    match clusters.create(&PostParams::default(), &cluster).await {
        Ok(_) => info!(cluster = %registration.cluster, "Cluster requested"),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            info!(cluster = %registration.cluster, "the Cluster exists: asking for its certificate")
        }
        Err(e) => return Err(refused(e)),
    }

    let name = csr_name(&registration.cluster, key.public_key_pem().as_bytes());
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.into_bytes()),
            signer_name: SIGNER.to_owned(),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            expiration_seconds: duration.map(|d| i32::try_from(d.as_secs()).unwrap_or(i32::MAX)),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    };
    let csrs: Api<CertificateSigningRequest> = Api::all(hub);
    match csrs.create(&PostParams::default(), &csr).await {
        Ok(_) => info!(csr = %name, "certificate requested; waiting for approval"),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            info!(csr = %name, "certificate requested before; waiting for approval")
        }
        Err(e) => return Err(refused(e)),
    }
    let cert_pem = signed(&csrs, &name).await.map_err(|e| match e {
        Error::Kube(e) => refused(e),
        other => other,
    })?;
    write_private(&files.cert, &cert_pem)?;
    info!(csr = %name, "certificate issued");
    Ok(Credentials {
        ca_pem,
        cert_pem,
        key_pem,
    })
}

/// The certificate of CSR `name` once issued; an error once it is denied or failed. Waits
/// on a watch of the request by name (the approval is seen as it is written, not at the
/// next poll), read again with a GET whenever a watch ends.
pub(crate) async fn signed(
    csrs: &Api<CertificateSigningRequest>,
    name: &str,
) -> Result<String, Error> {
    use futures_util::StreamExt as _;
    /// How long one watch lasts before the request is read again (and the wait logged).
    const WATCH_SECONDS: u32 = 60;
    loop {
        let csr = csrs.get(name).await?;
        let revision = csr.metadata.resource_version.clone().unwrap_or_default();
        if let Some(outcome) = issued(name, csr)? {
            return Ok(outcome);
        }
        info!(csr = %name, "waiting for approval (flotilla approve, or kubectl certificate approve {name})");
        let params = kube::api::WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(WATCH_SECONDS);
        let mut events = std::pin::pin!(csrs.watch(&params, &revision).await?);
        while let Some(event) = events.next().await {
            match event? {
                WatchEvent::Added(csr) | WatchEvent::Modified(csr) => {
                    if let Some(outcome) = issued(name, csr)? {
                        return Ok(outcome);
                    }
                }
                // Deleted, or the watch expired: read it again.
                WatchEvent::Deleted(_) | WatchEvent::Error(_) => break,
                WatchEvent::Bookmark(_) => {}
            }
        }
    }
}

/// The certificate `csr` (named `name`) holds once signed; an error once denied or
/// failed; none while pending.
fn issued(name: &str, csr: CertificateSigningRequest) -> Result<Option<String>, Error> {
    let status = csr.status.unwrap_or_default();
    if let Some(c) = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True")
    {
        return Err(Error::NotApproved {
            name: name.to_owned(),
            outcome: c.type_.to_lowercase(),
            message: c.message.unwrap_or_default(),
        });
    }
    match status.certificate.filter(|c| !c.0.is_empty()) {
        Some(cert) => String::from_utf8(cert.0)
            .map(Some)
            .map_err(|_| Error::Hub(format!("the certificate of {name} is not PEM"))),
        None => Ok(None),
    }
}

/// The PEM certificate request of `cluster`'s identity (CN `system:flotilla:cluster:NAME`,
/// O `system:flotilla:clusters`) for `key`: at registration and at each renewal.
pub(crate) fn cluster_request(cluster: &str, key: &rcgen::KeyPair) -> Result<String, Error> {
    let user = cluster_user(cluster);
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, CLUSTERS_GROUP);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, user.as_str());
    params
        .serialize_request(key)
        .and_then(|r| r.pem())
        .map_err(|e| Error::Input(format!("cannot make the certificate request: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_files_are_0600_and_the_csr_name_follows_the_key() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("agent");
        data_dir(&sub).unwrap();
        let path = sub.join("agent.key");
        write_private(&path, "secret").unwrap();
        write_private(&path, "secret again").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "secret again");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let mode = std::fs::metadata(&sub).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let a = csr_name("east", b"key a");
        assert!(
            a.starts_with("east-") && a.len() == "east-".len() + 12,
            "{a}"
        );
        assert_eq!(a, csr_name("east", b"key a"));
        assert_ne!(a, csr_name("east", b"key b"));
    }
}

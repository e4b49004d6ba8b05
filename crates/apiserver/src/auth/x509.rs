//! X.509 client certificates: the chain a connection presented, verified against the
//! hub's CA, names the user (CN) and its groups (O), as kube-apiserver reads it.
//!
//! ```text
//!  Presented.certificates (the handshake checked only that the client holds the key)
//!     none ─► Missing
//!     SHA-256 of the chain cached and not past the leaf's notAfter ─► the same User
//!     else ClientCa::verify (chains to the CA, valid now, clientAuth)
//!        ─► Invalid(Certificate(why)) ─► 401 | no CN ─► Missing | User{CN, O…,
//!           system:authenticated} (cached, bounded)
//!  a pull agent's user (CN system:flotilla:cluster:NAME), when the hub checks them
//!  (`with_cluster_check`), on every request: the Cluster NAME in the store (its key
//!  index, then its facts memoised by revision; answered at once, with no future, when
//!  the store's index is in memory and the Cluster is where it last passed) must exist,
//!  not be deleting, and record this certificate's serial (annotation
//!  flotilla.io/certificate-serial), or else be the certificate of the request the
//!  Cluster names (flotilla.io/certificate-request:
//!  that CSR in the store, Approved, created after the last recorded certificate's
//!  request, its status.certificate of this serial) ─► else Invalid(Revoked): revoked,
//!  unjoined or deleted clusters' agents get 401 at once
//! ```
//!
//! The named request closes a gap: the signer puts a new certificate into its CSR's
//! status, the agent reads it there at once, and the hub's registrar records its serial
//! on the Cluster a moment later. The registrar names the request on the Cluster before
//! it (or a person) approves it, so the certificate authenticates from the moment it can
//! be read, on every hub replica of the store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flotilla_pki::ClientCa;
use flotilla_store::{Revision, Store};
use rustls::pki_types::{CertificateDer, UnixTime};

use crate::api::{ROOT_CLUSTER, Verdict};
use crate::auth::{AUTHENTICATED, Authenticator, Credentials, Presented, Refusal, UserInfo};
use crate::registry::keys;

/// The prefix of a pull agent's user name; its cluster's name follows.
pub const CLUSTER_USER_PREFIX: &str = "system:flotilla:cluster:";

/// The annotation on a Cluster naming the serial of the one certificate its agent may use.
pub const SERIAL_ANNOTATION: &str = "flotilla.io/certificate-serial";

/// The annotation on a Cluster naming the certificate request (CSR) whose certificate
/// its agent may use before the hub records that certificate's serial.
pub const REQUEST_ANNOTATION: &str = "flotilla.io/certificate-request";

/// The annotation on a Cluster: when the request of its last recorded certificate was
/// created; a named request no newer than this never authenticates (one revoked).
pub const ISSUED_AT_ANNOTATION: &str = "flotilla.io/certificate-requested-at";

/// The most Clusters' facts kept.
const CLUSTER_FACTS: usize = 100_000;

/// How long a verified chain is kept without verifying it again.
const CACHE_TTL: Duration = Duration::from_secs(60);

/// The most chains kept.
const CACHE_ENTRIES: usize = 10_000;

struct Verified {
    user: Arc<UserInfo>,
    /// The leaf's expiry (Unix seconds).
    not_after: i64,
    /// The leaf's serial (lowercase hex).
    serial: String,
    until: Instant,
}

/// What the check of an agent's certificate reads of its Cluster at one revision.
#[derive(Clone, Debug)]
struct ClusterFacts {
    deleting: bool,
    serial: Option<String>,
    /// The certificate request named (annotation flotilla.io/certificate-request).
    request: Option<String>,
    /// When the last recorded certificate was requested.
    issued_at: Option<jiff::Timestamp>,
}

/// Authenticates client certificates issued by one CA.
pub struct ClientCertificates {
    ca: ClientCa,
    verified: Mutex<HashMap<[u8; 32], Arc<Verified>>>,
    /// Where pull agents' Clusters are, when their certificates are checked against them.
    clusters: Option<Arc<dyn Store>>,
    cluster_facts: Mutex<HashMap<String, (Revision, ClusterFacts)>>,
}

impl ClientCertificates {
    /// Trusts certificates `ca` verifies.
    pub fn new(ca: ClientCa) -> Self {
        ClientCertificates {
            ca,
            verified: Mutex::default(),
            clusters: None,
            cluster_facts: Mutex::default(),
        }
    }

    /// Also checks, on every request, that a pull agent's certificate (user
    /// `system:flotilla:cluster:NAME`) is the one its Cluster in `store` records: a
    /// revoked certificate or a deleted Cluster is refused at once.
    pub fn with_cluster_check(mut self, store: Arc<dyn Store>) -> Self {
        self.clusters = Some(store);
        self
    }

    /// Whether the agent of `cluster` may use the certificate of serial `serial`.
    async fn check_cluster(
        &self,
        store: &dyn Store,
        cluster: &str,
        serial: &str,
    ) -> Result<(), Refusal> {
        let revoked = |why: String| Refusal::Revoked(format!("cluster {cluster}: {why}"));
        let key = cluster_key(cluster);
        let revision = store
            .mod_revision(&key)
            .await
            .map_err(|e| revoked(format!("cannot be read: {e}")))?
            .ok_or_else(|| revoked("the Cluster does not exist".into()))?;
        let memo = self
            .cluster_facts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(cluster)
            .filter(|(at, _)| *at == revision)
            .map(|(_, facts)| facts.clone());
        let facts = match memo {
            Some(facts) => facts,
            None => {
                let kv = store
                    .get(&key, None)
                    .await
                    .map_err(|e| revoked(format!("cannot be read: {e}")))?
                    .ok_or_else(|| revoked("the Cluster does not exist".into()))?;
                let object: serde_json::Value =
                    serde_json::from_slice(&kv.value).unwrap_or_default();
                let meta = &object["metadata"];
                let facts = ClusterFacts {
                    deleting: !meta["deletionTimestamp"].is_null(),
                    serial: meta["annotations"][SERIAL_ANNOTATION]
                        .as_str()
                        .map(str::to_owned),
                    request: meta["annotations"][REQUEST_ANNOTATION]
                        .as_str()
                        .filter(|r| !r.is_empty())
                        .map(str::to_owned),
                    issued_at: meta["annotations"][ISSUED_AT_ANNOTATION]
                        .as_str()
                        .and_then(|t| t.parse().ok()),
                };
                let mut memo = self
                    .cluster_facts
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if memo.len() >= CLUSTER_FACTS {
                    memo.clear();
                }
                memo.insert(cluster.to_owned(), (kv.mod_revision, facts.clone()));
                facts
            }
        };
        if facts.deleting {
            return Err(revoked("the Cluster is being deleted".into()));
        }
        match facts.serial.as_deref() {
            Some(recorded) if recorded == serial => Ok(()),
            _ if self.named_request_issued(store, &facts, serial).await => Ok(()),
            Some("") | None => Err(revoked(
                "no certificate is valid for it (revoked, or not approved)".into(),
            )),
            Some(_) => Err(revoked(format!(
                "certificate {serial} was replaced or revoked"
            ))),
        }
    }

    /// Whether the certificate request the Cluster names issued the certificate of serial
    /// `serial`: approved (not denied or failed), created after the last recorded
    /// certificate's request, its certificate of that serial. Read from the store only
    /// when a serial is not the recorded one, which is brief for a new certificate.
    async fn named_request_issued(
        &self,
        store: &dyn Store,
        facts: &ClusterFacts,
        serial: &str,
    ) -> bool {
        use crate::registry::certificates::{self, FAILED};
        let Some(name) = &facts.request else {
            return false;
        };
        let key = keys::key_of(
            certificates::GROUP,
            "certificatesigningrequests",
            ROOT_CLUSTER,
            None,
            name,
        );
        let Ok(Some(kv)) = store.get(&key, None).await else {
            return false;
        };
        let Ok(csr) = serde_json::from_slice::<serde_json::Value>(&kv.value) else {
            return false;
        };
        let created = csr["metadata"]["creationTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok());
        let newer = match (created, facts.issued_at) {
            (Some(created), Some(recorded)) => created > recorded,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if !newer
            || !certificates::has_condition(&csr, "Approved")
            || certificates::has_condition(&csr, "Denied")
            || certificates::has_condition(&csr, FAILED)
        {
            return false;
        }
        use base64::Engine as _;
        csr["status"]["certificate"]
            .as_str()
            .and_then(|c| base64::engine::general_purpose::STANDARD.decode(c).ok())
            .and_then(|pem| flotilla_pki::certificate_serial(&pem).ok())
            .is_some_and(|issued| issued == serial)
    }

    /// Whether the Cluster `cluster` is, by the store's in-memory index
    /// ([`Store::mod_revision_now`]), at the revision its facts were memoised at, and
    /// those facts record `serial` and no deletion: the check then needs no read. Anything
    /// else (changed, gone, a store that must be read, a serial not the recorded one) goes
    /// to [`ClientCertificates::check_cluster`].
    fn passes_now(&self, store: &dyn Store, cluster: &str, serial: &str) -> bool {
        let key = cluster_key(cluster);
        let Some(Ok(Some(revision))) = store.mod_revision_now(&key) else {
            return false;
        };
        self.cluster_facts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(cluster)
            .is_some_and(|(at, facts)| {
                *at == revision && !facts.deleting && facts.serial.as_deref() == Some(serial)
            })
    }

    /// `user` (of a certificate of serial `serial`) as the answer, checked against its
    /// Cluster if it is a pull agent's and clusters are checked.
    fn answer<'a>(&'a self, user: Arc<UserInfo>, serial: String) -> Verdict<'a, Credentials> {
        let (Some(store), Some(cluster)) = (
            self.clusters.as_deref(),
            user.name.strip_prefix(CLUSTER_USER_PREFIX),
        ) else {
            return Verdict::Now(Credentials::User(user));
        };
        if self.passes_now(store, cluster, &serial) {
            return Verdict::Now(Credentials::User(user));
        }
        let cluster = cluster.to_owned();
        Verdict::Later(Box::pin(async move {
            match self.check_cluster(store, &cluster, &serial).await {
                Ok(()) => Credentials::User(user),
                Err(refusal) => Credentials::Invalid(refusal),
            }
        }))
    }

    fn verify(&self, chain: &[CertificateDer<'_>], at: Instant) -> Credentials {
        match self.ca.verify(chain, UnixTime::now()) {
            Err(why) => Credentials::Invalid(Refusal::Certificate(why)),
            Ok(None) => Credentials::Missing,
            Ok(Some(identity)) => {
                let mut groups = identity.groups;
                groups.push(AUTHENTICATED.to_owned());
                let user = Arc::new(UserInfo {
                    name: identity.user,
                    groups,
                    ..UserInfo::default()
                });
                let mut cache = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
                if cache.len() >= CACHE_ENTRIES {
                    cache.retain(|_, v| v.until > at);
                    if cache.len() >= CACHE_ENTRIES {
                        cache.clear();
                    }
                }
                cache.insert(
                    digest(chain),
                    Arc::new(Verified {
                        user: user.clone(),
                        not_after: identity.not_after,
                        serial: identity.serial,
                        until: at + CACHE_TTL,
                    }),
                );
                Credentials::User(user)
            }
        }
    }
}

/// The store key of the Cluster `cluster`.
fn cluster_key(cluster: &str) -> Vec<u8> {
    keys::key_of("flotilla.io", "clusters", ROOT_CLUSTER, None, cluster)
}

/// The SHA-256 of a chain, each certificate's length before its bytes.
fn digest(chain: &[CertificateDer<'_>]) -> [u8; 32] {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for cert in chain {
        context.update(&(cert.len() as u64).to_be_bytes());
        context.update(cert);
    }
    let mut out = [0; 32];
    out.copy_from_slice(context.finish().as_ref());
    out
}

impl Authenticator for ClientCertificates {
    fn authenticate<'a>(&'a self, presented: &'a Presented<'a>) -> Verdict<'a, Credentials> {
        let Some(chain) = presented.certificates.filter(|c| !c.is_empty()) else {
            return Verdict::Now(Credentials::Missing);
        };
        let at = Instant::now();
        let key = digest(chain);
        let cached = self
            .verified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        if let Some(found) = cached
            && found.until > at
            && jiff::Timestamp::now().as_second() < found.not_after
        {
            return self.answer(found.user.clone(), found.serial.clone());
        }
        match self.verify(chain, at) {
            Credentials::User(user) => {
                let serial = self
                    .verified
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&key)
                    .map(|v| v.serial.clone())
                    .unwrap_or_default();
                self.answer(user, serial)
            }
            other => Verdict::Now(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;
    use flotilla_pki::CertificateRequest;

    fn certificate(
        id: &flotilla_pki::HubIdentity,
        cn: &str,
        org: &str,
        lifetime: u64,
    ) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, org);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let csr = params.serialize_request(&key).unwrap().pem().unwrap();
        let request = CertificateRequest::parse(csr.as_bytes()).unwrap();
        let pem = id
            .sign_client_certificate(&request, Duration::from_secs(lifetime))
            .unwrap();
        rustls_pemfile::certs(&mut pem.as_bytes())
            .next()
            .unwrap()
            .unwrap()
    }

    fn ask(auth: &ClientCertificates, chain: &[CertificateDer<'static>]) -> Credentials {
        let headers = HeaderMap::new();
        let presented = Presented::new(&headers, Some(chain));
        match auth.authenticate(&presented) {
            Verdict::Now(credentials) => credentials,
            Verdict::Later(_) => panic!("client certificates are decided at once"),
        }
    }

    #[test]
    fn a_certificate_of_the_ca_names_its_common_name_and_organizations() {
        let dir = tempfile::tempdir().unwrap();
        let id = flotilla_pki::load_or_create(dir.path(), &[]).unwrap();
        let auth = ClientCertificates::new(id.client_ca().unwrap());
        let alice = certificate(&id, "alice", "team-a", 3600);
        let Credentials::User(user) = ask(&auth, std::slice::from_ref(&alice)) else {
            panic!("alice is not authenticated");
        };
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["team-a", "system:authenticated"]);
        // Again: from the cache, the same user.
        assert_eq!(
            ask(&auth, std::slice::from_ref(&alice)),
            Credentials::User(user)
        );
        // No certificate: no opinion.
        let headers = HeaderMap::new();
        let presented = Presented::headers(&headers);
        assert!(matches!(
            auth.authenticate(&presented),
            Verdict::Now(Credentials::Missing)
        ));
        // Another CA's: refused with why.
        let other_dir = tempfile::tempdir().unwrap();
        let other = flotilla_pki::load_or_create(other_dir.path(), &[]).unwrap();
        let mallory = certificate(&other, "alice", "system:masters", 3600);
        assert!(matches!(
            ask(&auth, &[mallory]),
            Credentials::Invalid(Refusal::Certificate(_))
        ));
    }

    #[tokio::test]
    async fn an_agents_certificate_works_while_its_cluster_records_it() {
        let dir = tempfile::tempdir().unwrap();
        let id = flotilla_pki::load_or_create(dir.path(), &[]).unwrap();
        let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
        let auth =
            ClientCertificates::new(id.client_ca().unwrap()).with_cluster_check(store.clone());
        let agent = certificate(
            &id,
            "system:flotilla:cluster:east",
            "system:flotilla:clusters",
            3600,
        );
        let serial = flotilla_pki::client::identity(&agent)
            .unwrap()
            .unwrap()
            .serial;
        let chain = [agent];
        let headers = HeaderMap::new();
        let presented = Presented::new(&headers, Some(&chain));
        // No Cluster: refused.
        assert!(matches!(
            auth.authenticate(&presented).await,
            Credentials::Invalid(Refusal::Revoked(_))
        ));
        let key = keys::key_of("flotilla.io", "clusters", ROOT_CLUSTER, None, "east");
        let cluster = |serial: &str| {
            serde_json::json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "Cluster",
                "metadata": {"name": "east", "annotations": {SERIAL_ANNOTATION: serial}}})
            .to_string()
            .into_bytes()
        };
        let at = store.create(&key, cluster(&serial).into()).await.unwrap();
        let Credentials::User(user) = auth.authenticate(&presented).await else {
            panic!("the agent's recorded certificate is refused");
        };
        assert_eq!(user.name, "system:flotilla:cluster:east");
        // Asked again, its Cluster unchanged: answered at once, from the store's index and
        // the facts memoised at that revision.
        let at_once = |auth: &ClientCertificates| {
            matches!(
                auth.authenticate(&presented),
                Verdict::Now(Credentials::User(_))
            )
        };
        assert!(at_once(&auth));
        // Revoked (the serial emptied): refused on the next request, cache or not.
        let at = store.update(&key, cluster("").into(), at).await.unwrap();
        assert!(!at_once(&auth));
        assert!(matches!(
            auth.authenticate(&presented).await,
            Credentials::Invalid(Refusal::Revoked(_))
        ));
        assert!(!at_once(&auth), "a refused certificate passed at once");
        let at = store
            .update(&key, cluster(&serial).into(), at)
            .await
            .unwrap();
        assert!(matches!(
            auth.authenticate(&presented).await,
            Credentials::User(_)
        ));
        assert!(at_once(&auth));
        store.delete(&key, Some(at)).await.unwrap();
        assert!(!at_once(&auth));
        assert!(matches!(
            auth.authenticate(&presented).await,
            Credentials::Invalid(Refusal::Revoked(_))
        ));
        // Other users are not checked against Clusters.
        let alice = [certificate(&id, "alice", "team-a", 3600)];
        let presented = Presented::new(&headers, Some(&alice));
        assert!(matches!(
            auth.authenticate(&presented).await,
            Credentials::User(_)
        ));
    }

    #[tokio::test]
    async fn a_new_certificate_authenticates_through_its_named_request_before_its_serial_is_recorded()
     {
        use base64::Engine as _;
        let dir = tempfile::tempdir().unwrap();
        let id = flotilla_pki::load_or_create(dir.path(), &[]).unwrap();
        let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
        let auth =
            ClientCertificates::new(id.client_ca().unwrap()).with_cluster_check(store.clone());
        let cn = "system:flotilla:cluster:east";
        let new = certificate(&id, cn, "system:flotilla:clusters", 3600);
        let other = certificate(&id, cn, "system:flotilla:clusters", 3600);
        let pem = |der: &CertificateDer<'_>| {
            let b64 = base64::engine::general_purpose::STANDARD.encode(der);
            format!("-----BEGIN CERTIFICATE-----\n{b64}\n-----END CERTIFICATE-----\n")
        };
        let ask = |cert: CertificateDer<'static>| {
            let auth = &auth;
            async move {
                let chain = [cert];
                let headers = HeaderMap::new();
                let presented = Presented::new(&headers, Some(&chain));
                auth.authenticate(&presented).await
            }
        };
        // The registrar named the request on the Cluster (it approves it next); no serial
        // is recorded yet: the certificate the signer put into the request authenticates.
        let cluster_key = keys::key_of("flotilla.io", "clusters", ROOT_CLUSTER, None, "east");
        let cluster = |annotations: serde_json::Value| {
            serde_json::json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "Cluster",
                "metadata": {"name": "east", "annotations": annotations}})
            .to_string()
            .into_bytes()
        };
        let at = store
            .create(
                &cluster_key,
                cluster(serde_json::json!({REQUEST_ANNOTATION: "east-1"})).into(),
            )
            .await
            .unwrap();
        let csr_key = keys::key_of(
            "certificates.k8s.io",
            "certificatesigningrequests",
            ROOT_CLUSTER,
            None,
            "east-1",
        );
        let csr = |conditions: serde_json::Value, created: &str| {
            serde_json::json!({"apiVersion": "certificates.k8s.io/v1",
                "kind": "CertificateSigningRequest",
                "metadata": {"name": "east-1", "creationTimestamp": created},
                "status": {"conditions": conditions,
                    "certificate": base64::engine::general_purpose::STANDARD.encode(pem(&new))}})
            .to_string()
            .into_bytes()
        };
        let approved = serde_json::json!([{"type": "Approved", "status": "True"}]);
        let csr_at = store
            .create(
                &csr_key,
                csr(approved.clone(), "2026-01-02T00:00:00Z").into(),
            )
            .await
            .unwrap();
        let Credentials::User(user) = ask(new.clone()).await else {
            panic!("the certificate of the named, approved request is refused");
        };
        assert_eq!(user.name, cn);
        // Another certificate of the same name is not the request's.
        assert!(matches!(
            ask(other.clone()).await,
            Credentials::Invalid(Refusal::Revoked(_))
        ));
        // Denied (or not approved): refused.
        let denied = serde_json::json!([{"type": "Approved", "status": "True"},
            {"type": "Denied", "status": "True"}]);
        let csr_at = store
            .update(&csr_key, csr(denied, "2026-01-02T00:00:00Z").into(), csr_at)
            .await
            .unwrap();
        assert!(matches!(
            ask(new.clone()).await,
            Credentials::Invalid(Refusal::Revoked(_))
        ));
        // A request no newer than the last recorded certificate's (revoked since): refused.
        store
            .update(
                &csr_key,
                csr(approved, "2026-01-02T00:00:00Z").into(),
                csr_at,
            )
            .await
            .unwrap();
        let at = store
            .update(
                &cluster_key,
                cluster(
                    serde_json::json!({REQUEST_ANNOTATION: "east-1", SERIAL_ANNOTATION: "",
                    ISSUED_AT_ANNOTATION: "2026-01-02T00:00:00Z"}),
                )
                .into(),
                at,
            )
            .await
            .unwrap();
        assert!(matches!(
            ask(new.clone()).await,
            Credentials::Invalid(Refusal::Revoked(_))
        ));
        // No request named (revoked): refused.
        store
            .update(
                &cluster_key,
                cluster(serde_json::json!({SERIAL_ANNOTATION: ""})).into(),
                at,
            )
            .await
            .unwrap();
        assert!(matches!(
            ask(new).await,
            Credentials::Invalid(Refusal::Revoked(_))
        ));
    }

    /// Client certificates authenticated per second through the cache, printed: `cargo
    /// test --release -p flotilla-apiserver per_certificate -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn per_certificate_time_over_100000_authentications() {
        let dir = tempfile::tempdir().unwrap();
        let id = flotilla_pki::load_or_create(dir.path(), &[]).unwrap();
        let auth = ClientCertificates::new(id.client_ca().unwrap());
        let chain = [certificate(&id, "alice", "team-a", 3600)];
        let uncached = std::time::Instant::now();
        for _ in 0..1_000 {
            auth.verify(&chain, Instant::now());
        }
        let verify = uncached.elapsed() / 1_000;
        let started = std::time::Instant::now();
        for _ in 0..100_000 {
            assert!(matches!(ask(&auth, &chain), Credentials::User(_)));
        }
        let each = started.elapsed() / 100_000;
        println!(
            "client certificate: {:.2} µs per authentication through the cache (100,000), \
             {:.2} µs verifying the chain alone",
            each.as_secs_f64() * 1e6,
            verify.as_secs_f64() * 1e6
        );
    }
}

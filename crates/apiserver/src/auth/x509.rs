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
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flotilla_pki::ClientCa;
use rustls::pki_types::{CertificateDer, UnixTime};

use crate::api::Verdict;
use crate::auth::{AUTHENTICATED, Authenticator, Credentials, Presented, Refusal, UserInfo};

/// How long a verified chain is kept without verifying it again.
const CACHE_TTL: Duration = Duration::from_secs(60);

/// The most chains kept.
const CACHE_ENTRIES: usize = 10_000;

struct Verified {
    user: Arc<UserInfo>,
    /// The leaf's expiry (Unix seconds).
    not_after: i64,
    until: Instant,
}

/// Authenticates client certificates issued by one CA.
pub struct ClientCertificates {
    ca: ClientCa,
    verified: Mutex<HashMap<[u8; 32], Arc<Verified>>>,
}

impl ClientCertificates {
    /// Trusts certificates `ca` verifies.
    pub fn new(ca: ClientCa) -> Self {
        ClientCertificates {
            ca,
            verified: Mutex::default(),
        }
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
                        until: at + CACHE_TTL,
                    }),
                );
                Credentials::User(user)
            }
        }
    }
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
            return Verdict::Now(Credentials::User(found.user.clone()));
        }
        Verdict::Now(self.verify(chain, at))
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
        let presented = Presented {
            headers: &headers,
            certificates: Some(chain),
        };
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

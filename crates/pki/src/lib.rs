//! Flotilla's certificate authority, serving certificate, admin bearer token,
//! ServiceAccount signing key, client certificates and kubeconfig files.
//!
//! `flotilla hub` calls [`load_or_create`] on its data directory. The first
//! call creates a private CA, a serving certificate signed by it, an admin
//! token and the key that signs ServiceAccount tokens; later calls reuse them,
//! re-issuing only the serving certificate
//! when it no longer fits (another set of host names, close to expiry,
//! different CA). [`load_or_create_with`] can serve a certificate of the
//! user's own instead ([`ServingCert::Files`]).
//! The CA, the token and the signing key are never replaced once they exist,
//! because clients trust them (and the tokens it signed). [`Kubeconfig`] then
//! writes files that point kubectl at the hub.
//!
//! ```text
//!  DIR (0700)/ ca.crt  ca.key (0600)  server.crt  server.key (0600)
//!              admin.token (0600)  sa.key (0600: PKCS#8 ECDSA P-256, signs tokens)
//!  HubIdentity::server_config ─► TLS asks for (does not require) a client
//!        certificate: the handshake checks only that the client holds its key;
//!        client::ClientCa checks the chain against the CA per request (401 when
//!        it does not verify, as kube-apiserver answers)
//!  client::CertificateRequest (a PEM CSR, signature checked) ─► HubIdentity::
//!        sign_client_certificate (clientAuth, CN/O of the request, never past the CA)
//! ```
//!
//! A hub whose replicas share one store keeps the shared part ([`SharedIdentity`]: CA,
//! admin token, signing key) in the store and installs it into each data directory
//! before [`load_or_create_with`] runs; the serving certificate stays per replica.
//!
//! All TLS configurations use rustls's *ring* provider explicitly, so nothing
//! depends on a process-wide default provider.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData as _,
};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, InvalidDnsNameError, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

pub mod client;
mod files;
mod kubeconfig;
mod shared;
#[cfg(test)]
mod tests;

pub use client::{
    CertificateRequest, ClientCa, ClientIdentity, RequestError, ca_hash, ca_hash_pem,
    certificate_serial, certificate_validity,
};
pub use kubeconfig::Kubeconfig;
pub use shared::{InstallError, Mismatch, SharedIdentity};

/// File name of the CA certificate inside the data directory.
pub const CA_CERT_FILE: &str = "ca.crt";
/// File name of the CA private key inside the data directory (mode 0600).
pub const CA_KEY_FILE: &str = "ca.key";
/// File name of the serving certificate inside the data directory.
pub const SERVER_CERT_FILE: &str = "server.crt";
/// File name of the serving certificate's private key inside the data directory (mode 0600).
pub const SERVER_KEY_FILE: &str = "server.key";
/// File name of the admin bearer token inside the data directory (mode 0600).
pub const ADMIN_TOKEN_FILE: &str = "admin.token";
/// File name of the key that signs ServiceAccount tokens inside the data directory (mode
/// 0600): PKCS#8 ECDSA P-256, as PEM.
pub const SERVICE_ACCOUNT_KEY_FILE: &str = "sa.key";

/// Hosts every serving certificate covers, whatever the caller asks for.
const DEFAULT_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];
const DAY_SECS: i64 = 24 * 60 * 60;
const CA_VALIDITY_DAYS: i64 = 3650;
const SERVER_VALIDITY_DAYS: i64 = 365;
/// A serving certificate expiring sooner than this is re-issued.
const RENEW_BEFORE_DAYS: i64 = 30;
const ALPN_HTTP1: &[u8] = b"http/1.1";
/// HTTP/2's ALPN name: the hub serves it to clients that offer it.
pub const ALPN_H2: &[u8] = b"h2";

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why identity files or values could not be loaded, created or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or directory could not be read, created or written.
    #[error("cannot {action} {}", path.display())]
    Io {
        /// What was being done, e.g. "read" or "write".
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A certificate file is unusable: not PEM, not X.509, not a CA, expired, ...
    #[error("{} is not a usable certificate: {problem}", path.display())]
    InvalidCertificate {
        /// The certificate file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// A private key file is unusable: not PEM, no key in it, unsupported key type, ...
    #[error("{} is not a usable private key: {problem}", path.display())]
    InvalidKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// A private key does not belong to the certificate it is paired with.
    #[error("the private key in {} does not match the certificate in {}", key.display(), cert.display())]
    KeyMismatch {
        /// The key file.
        key: PathBuf,
        /// The certificate file.
        cert: PathBuf,
    },
    /// The CA certificate exists but its private key does not. A new CA is
    /// not created because clients already trust the existing one.
    #[error(
        "{} exists but {} does not; refusing to replace a CA that clients may trust \
         (restore the key, or move both files away to start a new CA)",
        cert.display(),
        key.display()
    )]
    MissingCaKey {
        /// The CA certificate file.
        cert: PathBuf,
        /// The missing CA key file.
        key: PathBuf,
    },
    /// The admin token file does not hold a usable token.
    #[error("{} does not hold a usable bearer token: {problem}", path.display())]
    InvalidToken {
        /// The token file.
        path: PathBuf,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A requested host is neither a DNS name nor an IP address.
    #[error("{host:?} is neither a DNS name nor an IP address, so no certificate can cover it")]
    InvalidHost {
        /// The host as given.
        host: String,
        /// Why it is not a DNS name.
        #[source]
        source: InvalidDnsNameError,
    },
    /// Generating a key pair or signing a certificate failed.
    #[error("cannot generate {what}")]
    Generate {
        /// What was being generated, naming the file it was meant for.
        what: String,
        /// The underlying error.
        #[source]
        source: rcgen::Error,
    },
    /// The system's random number generator failed.
    #[error("cannot get random bytes for {}", path.display())]
    Random {
        /// The file the random bytes were meant for.
        path: PathBuf,
    },
    /// A freshly issued serving certificate did not verify against the CA.
    /// This indicates a CA that cannot issue certificates clients accept.
    #[error("the certificate issued for {} by the CA in {} does not verify", path.display(), ca.display())]
    IssuedCertificateRejected {
        /// The serving certificate file.
        path: PathBuf,
        /// The CA certificate file.
        ca: PathBuf,
        /// Why verification failed.
        #[source]
        source: rustls::Error,
    },
    /// A field of a [`HubIdentity`] does not hold what it should.
    #[error("HubIdentity::{field} is unusable: {problem}")]
    InvalidIdentity {
        /// The field's name.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// rustls refused to build a TLS configuration.
    #[error("cannot build the TLS {side} configuration")]
    Tls {
        /// "server" or "client".
        side: &'static str,
        /// The underlying error.
        #[source]
        source: rustls::Error,
    },
}

/// Everything the hub needs to serve TLS and authenticate its admin.
///
/// `Debug` output omits the private key and the token.
#[derive(Clone)]
pub struct HubIdentity {
    /// PEM of the self-signed CA (CA:true, keyCertSign, ECDSA P-256, 10 years).
    pub ca_cert_pem: String,
    /// PEM of the serving certificate: signed by the CA, serverAuth, valid
    /// for the requested hosts plus `localhost`, `127.0.0.1` and `::1`, 1 year.
    pub server_cert_pem: String,
    /// PEM (PKCS#8) of the serving certificate's private key.
    pub server_key_pem: String,
    /// The admin bearer token: 32 random bytes, base64url without padding.
    pub admin_token: String,
    /// PEM (PKCS#8) of the CA's private key: signs client certificates of approved
    /// CertificateSigningRequests.
    pub ca_key_pem: String,
    /// PEM (PKCS#8, ECDSA P-256) of the key that signs ServiceAccount tokens.
    pub service_account_key_pem: String,
    /// Whether the serving certificate is the user's own ([`ServingCert::Files`]):
    /// `server_cert_pem` then holds its whole chain, leaf first, presented as it is
    /// (without the CA, which did not issue it).
    pub own_serving_cert: bool,
}

impl fmt::Debug for HubIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HubIdentity")
            .field("ca_cert_pem", &self.ca_cert_pem)
            .field("server_cert_pem", &self.server_cert_pem)
            .field("server_key_pem", &"[elided]")
            .field("admin_token", &"[elided]")
            .field("ca_key_pem", &"[elided]")
            .field("service_account_key_pem", &"[elided]")
            .field("own_serving_cert", &self.own_serving_cert)
            .finish()
    }
}

impl HubIdentity {
    /// A rustls server configuration presenting the serving certificate
    /// followed by the CA certificate (a certificate of the user's own: its chain as
    /// given), offering ALPN `h2` and `http/1.1`. It asks for a client certificate issued by the
    /// CA without requiring one, and checks in the handshake only that the client holds
    /// the certificate's key: the chain is checked by [`ClientCa::verify`] when a
    /// request is authenticated, so that a certificate that does not verify is a 401
    /// with its reason in the log, as kube-apiserver answers it, not a failed handshake.
    pub fn server_config(&self) -> Result<ServerConfig, Error> {
        let chain = if self.own_serving_cert {
            cert_chain(self.server_cert_pem.as_bytes())
                .map_err(|p| p.in_field("server_cert_pem"))?
        } else {
            let leaf = single_cert(self.server_cert_pem.as_bytes())
                .map_err(|p| p.in_field("server_cert_pem"))?;
            let ca =
                single_cert(self.ca_cert_pem.as_bytes()).map_err(|p| p.in_field("ca_cert_pem"))?;
            vec![leaf, ca]
        };
        let key = private_key_der(self.server_key_pem.as_bytes())
            .map_err(|p| p.in_field("server_key_pem"))?;
        let tls = |source| Error::Tls {
            side: "server",
            source,
        };
        let ca = single_cert(self.ca_cert_pem.as_bytes()).map_err(|p| p.in_field("ca_cert_pem"))?;
        let clients = client::RequestClientCert::new(&ca).map_err(|p| p.in_field("ca_cert_pem"))?;
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(tls)?
            .with_client_cert_verifier(Arc::new(clients))
            .with_single_cert(chain, key)
            .map_err(tls)?;
        // HTTP/2 preferred, as kube-apiserver serves it; HTTP/1.1 for clients without it.
        config.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP1.to_vec()];
        Ok(config)
    }

    /// A rustls client configuration that trusts only this identity's CA and
    /// offers ALPN `http/1.1`, for tests and in-process clients.
    pub fn client_config(&self) -> Result<ClientConfig, Error> {
        let ca = single_cert(self.ca_cert_pem.as_bytes()).map_err(|p| p.in_field("ca_cert_pem"))?;
        let tls = |source| Error::Tls {
            side: "client",
            source,
        };
        let mut roots = RootCertStore::empty();
        roots.add(ca).map_err(tls)?;
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(tls)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
        Ok(config)
    }

    /// Whether `presented` (a bearer token, without the `Bearer ` prefix) is
    /// the admin token. The comparison takes the same time wherever the
    /// first difference is; only the length is not hidden.
    pub fn is_admin_token(&self, presented: &str) -> bool {
        !self.admin_token.is_empty()
            && constant_time_eq(self.admin_token.as_bytes(), presented.as_bytes())
    }
}

/// Where the serving certificate comes from.
#[derive(Clone, Copy, Debug)]
pub enum ServingCert<'a> {
    /// Issued by the CA for these hosts (DNS names or IP addresses, an IPv6 address
    /// possibly in brackets), plus `localhost`, `127.0.0.1` and `::1`.
    Issued(&'a [String]),
    /// The user's own: a PEM chain (leaf first) and its private key, checked to belong
    /// together, presented as they are. The CA and token are still loaded or created.
    Files {
        /// The certificate chain file.
        cert: &'a Path,
        /// The private key file.
        key: &'a Path,
    },
}

/// Loads the hub's identity from `dir`, creating whatever is missing: files
/// `ca.crt`, `ca.key`, `server.crt`, `server.key` and `admin.token` (keys and
/// token with mode 0600). `dir` itself is created (mode 0700) if missing.
///
/// `hosts` are the DNS names and IP addresses (an IPv6 address may be in
/// brackets) the serving certificate must cover; `localhost`, `127.0.0.1`
/// and `::1` are always added.
///
/// The serving certificate and its key are re-issued, with the same CA, when
/// they are missing or unusable, when the certificate's names are not exactly
/// these hosts, when it is not signed by the CA, or is not valid from now until
/// 30 days from now. The CA and the token are never replaced once they exist: if
/// they are unusable this returns an error naming the file.
pub fn load_or_create(dir: &Path, hosts: &[String]) -> Result<HubIdentity, Error> {
    load_or_create_with(dir, ServingCert::Issued(hosts))
}

/// [`load_or_create`] with the serving certificate from `serving`: issued by the CA
/// (as [`load_or_create`] does), or the user's own files, which are then only read
/// (`server.crt` and `server.key` are left as they are).
pub fn load_or_create_with(dir: &Path, serving: ServingCert<'_>) -> Result<HubIdentity, Error> {
    // Check what is asked for before creating anything.
    let hosts = match serving {
        ServingCert::Issued(hosts) => Some(normalize_hosts(hosts)?),
        ServingCert::Files { .. } => None,
    };
    files::create_private_dir(dir)?;
    let ca = load_or_create_ca(dir)?;
    let admin_token = load_or_create_token(dir)?;
    let service_account_key_pem = load_or_create_service_account_key(dir)?;
    let (server_cert_pem, server_key_pem) = match (serving, hosts) {
        (ServingCert::Files { cert, key }, _) => load_own_serving_cert(cert, key)?,
        (_, hosts) => load_or_issue_server_cert(dir, &ca, &hosts.unwrap_or_default())?,
    };
    Ok(HubIdentity {
        ca_cert_pem: ca.cert_pem,
        server_cert_pem,
        server_key_pem,
        admin_token,
        ca_key_pem: ca.key_pem,
        service_account_key_pem,
        own_serving_cert: matches!(serving, ServingCert::Files { .. }),
    })
}

/// A host as a serving certificate names it (a lower-case DNS name or a canonical IP
/// address), or why it cannot be one.
pub fn normalize_host(host: &str) -> Result<String, Error> {
    let mut hosts = normalize_hosts(std::slice::from_ref(&host.to_owned()))?;
    Ok(hosts.remove(0).name)
}

/// The user's certificate chain and key, as PEM, once they are known to belong together.
fn load_own_serving_cert(cert_path: &Path, key_path: &Path) -> Result<(String, String), Error> {
    let cert_bytes = files::read(cert_path)?;
    let key_bytes = files::read(key_path)?;
    let chain = cert_chain(&cert_bytes).map_err(|p| p.in_cert_file(cert_path))?;
    let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0]).map_err(|e| {
        Problem::new("not a valid X.509 certificate", Some(e.into())).in_cert_file(cert_path)
    })?;
    let key = private_key_der(&key_bytes).map_err(|p| p.in_key_file(key_path))?;
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| Problem::new("unsupported key type", Some(e.into())).in_key_file(key_path))?;
    let matches = signing
        .public_key()
        .is_some_and(|spki| spki.as_ref() == leaf.tbs_certificate.subject_pki.raw);
    if !matches {
        return Err(Error::KeyMismatch {
            key: key_path.to_path_buf(),
            cert: cert_path.to_path_buf(),
        });
    }
    let pem: String = chain.iter().map(|der| pem_encode_cert(der)).collect();
    let key_pem = String::from_utf8(key_bytes)
        .map_err(|e| Problem::new("not PEM text", Some(e.into())).in_key_file(key_path))?;
    Ok((pem, key_pem))
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// A host a serving certificate must cover.
struct Host {
    /// As written into the certificate: a lower-case DNS name or a canonical IP.
    name: String,
    /// As checked by clients.
    server_name: ServerName<'static>,
}

fn normalize_hosts(hosts: &[String]) -> Result<Vec<Host>, Error> {
    let mut out: Vec<Host> = Vec::new();
    for raw in hosts.iter().map(String::as_str).chain(DEFAULT_HOSTS) {
        let trimmed = raw.trim();
        let unbracketed = trimmed
            .strip_prefix('[')
            .and_then(|s| s.strip_suffix(']'))
            .unwrap_or(trimmed);
        let (name, server_name) = match unbracketed.parse::<IpAddr>() {
            Ok(ip) => (ip.to_string(), ServerName::IpAddress(ip.into())),
            Err(_) => {
                let name = trimmed.to_ascii_lowercase();
                let server_name =
                    ServerName::try_from(name.clone()).map_err(|source| Error::InvalidHost {
                        host: raw.to_owned(),
                        source,
                    })?;
                (name, server_name)
            }
        };
        if !out.iter().any(|h| h.name == name) {
            out.push(Host { name, server_name });
        }
    }
    Ok(out)
}

/// What is wrong with some PEM input, before knowing whether it came from a
/// file or a [`HubIdentity`] field.
struct Problem {
    problem: String,
    source: Option<BoxError>,
}

impl Problem {
    fn new(problem: impl Into<String>, source: Option<BoxError>) -> Self {
        Problem {
            problem: problem.into(),
            source,
        }
    }

    fn in_cert_file(self, path: &Path) -> Error {
        Error::InvalidCertificate {
            path: path.to_path_buf(),
            problem: self.problem,
            source: self.source,
        }
    }

    fn in_key_file(self, path: &Path) -> Error {
        Error::InvalidKey {
            path: path.to_path_buf(),
            problem: self.problem,
            source: self.source,
        }
    }

    fn in_field(self, field: &'static str) -> Error {
        Error::InvalidIdentity {
            field,
            problem: self.problem,
            source: self.source,
        }
    }
}

/// The one certificate in PEM `bytes`.
fn single_cert(bytes: &[u8]) -> Result<CertificateDer<'static>, Problem> {
    let mut certs = Vec::new();
    for item in rustls_pemfile::certs(&mut &bytes[..]) {
        let cert = item.map_err(|e| Problem::new("malformed PEM", Some(e.into())))?;
        certs.push(cert);
    }
    match certs.len() {
        0 => Err(Problem::new(
            "no PEM \"CERTIFICATE\" block found (not PEM?)",
            None,
        )),
        1 => Ok(certs.remove(0)),
        n => Err(Problem::new(
            format!("{n} certificates found, expected exactly one"),
            None,
        )),
    }
}

/// Every certificate in PEM `bytes` (at least one), in order.
fn cert_chain(bytes: &[u8]) -> Result<Vec<CertificateDer<'static>>, Problem> {
    let mut certs = Vec::new();
    for item in rustls_pemfile::certs(&mut &bytes[..]) {
        certs.push(item.map_err(|e| Problem::new("malformed PEM", Some(e.into())))?);
    }
    if certs.is_empty() {
        return Err(Problem::new(
            "no PEM \"CERTIFICATE\" block found (not PEM?)",
            None,
        ));
    }
    Ok(certs)
}

/// The first private key in PEM `bytes`.
fn private_key_der(bytes: &[u8]) -> Result<PrivateKeyDer<'static>, Problem> {
    match rustls_pemfile::private_key(&mut &bytes[..]) {
        Ok(Some(key)) => Ok(key),
        Ok(None) => Err(Problem::new(
            "no PEM private key block found (not PEM?)",
            None,
        )),
        Err(e) => Err(Problem::new("malformed PEM", Some(e.into()))),
    }
}

/// The key pair in PEM `bytes`, usable for signing.
fn key_pair(bytes: &[u8]) -> Result<KeyPair, Problem> {
    let der = private_key_der(bytes)?;
    KeyPair::try_from(&der).map_err(|e| {
        Problem::new(
            "unsupported or corrupt key (expected PKCS#8 ECDSA, Ed25519 or RSA)",
            Some(e.into()),
        )
    })
}

fn pem_encode_cert(der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = String::with_capacity(b64.len() + b64.len() / 64 + 64);
    out.push_str("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.extend(line.iter().map(|&b| char::from(b)));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

fn unix_now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Midnight UTC starting the day that contains `unix_secs`, as rcgen wants it.
fn day_start(unix_secs: i64) -> (i32, u8, u8) {
    let ts = jiff::Timestamp::from_second(unix_secs).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let date = ts.to_zoned(jiff::tz::TimeZone::UTC).date();
    // Month and day are 1..=12 and 1..=31.
    (i32::from(date.year()), date.month() as u8, date.day() as u8)
}

fn set_validity(params: &mut CertificateParams, not_before: i64, not_after: i64) {
    let (y, m, d) = day_start(not_before);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = day_start(not_after);
    params.not_after = rcgen::date_time_ymd(y, m, d);
}

fn format_time(unix_secs: i64) -> String {
    jiff::Timestamp::from_second(unix_secs)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| format!("{unix_secs} (Unix time)"))
}

/// The loaded CA: its certificate and what it takes to issue more.
struct Ca {
    cert_path: PathBuf,
    cert_der: CertificateDer<'static>,
    cert_pem: String,
    /// The CA's private key, as PEM.
    key_pem: String,
    /// Unix time at which the CA certificate expires.
    not_after: i64,
    issuer: Issuer<'static, KeyPair>,
}

fn load_or_create_ca(dir: &Path) -> Result<Ca, Error> {
    let cert_path = dir.join(CA_CERT_FILE);
    let key_path = dir.join(CA_KEY_FILE);
    let existing_cert = files::read_optional(&cert_path)?;
    let key_bytes = match files::read_optional(&key_path)? {
        Some(bytes) => bytes,
        None => {
            if existing_cert.is_some() {
                return Err(Error::MissingCaKey {
                    cert: cert_path,
                    key: key_path,
                });
            }
            let key = KeyPair::generate().map_err(|source| Error::Generate {
                what: format!("a CA key for {}", key_path.display()),
                source,
            })?;
            files::create_no_clobber(
                &key_path,
                key.serialize_pem().as_bytes(),
                files::SECRET_MODE,
            )?;
            // Another process may have created it first: use what is on disk.
            files::read(&key_path)?
        }
    };
    let key = key_pair(&key_bytes).map_err(|p| p.in_key_file(&key_path))?;
    let key_pem = key.serialize_pem();
    let cert_bytes = match existing_cert {
        Some(bytes) => bytes,
        None => {
            // Either a brand-new CA, or an earlier run stopped between
            // writing the key and the certificate: self-sign with the key.
            let der = new_ca_cert(&key).map_err(|source| Error::Generate {
                what: format!("a CA certificate for {}", cert_path.display()),
                source,
            })?;
            files::create_no_clobber(
                &cert_path,
                pem_encode_cert(&der).as_bytes(),
                files::PUBLIC_MODE,
            )?;
            files::read(&cert_path)?
        }
    };
    let cert_der = single_cert(&cert_bytes).map_err(|p| p.in_cert_file(&cert_path))?;
    let not_after = check_ca(&cert_path, &key_path, &cert_der, &key)?;
    let issuer = Issuer::from_ca_cert_der(&cert_der, key).map_err(|e| {
        Problem::new("cannot be used to issue certificates", Some(e.into()))
            .in_cert_file(&cert_path)
    })?;
    Ok(Ca {
        cert_pem: pem_encode_cert(&cert_der),
        key_pem,
        cert_path,
        cert_der,
        not_after,
        issuer,
    })
}

fn new_ca_cert(key: &KeyPair) -> Result<CertificateDer<'static>, rcgen::Error> {
    let now = unix_now();
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "flotilla");
    // A per-CA name, so that CAs of different hubs are told apart in trust stores (and by
    // verifiers, which pick an issuer by name): the time and a piece of the public key.
    let tag: String = key
        .public_key_raw()
        .iter()
        .rev()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect();
    name.push(DnType::CommonName, format!("flotilla-ca@{now}-{tag}"));
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(
        &mut params,
        now - DAY_SECS,
        now + CA_VALIDITY_DAYS * DAY_SECS,
    );
    Ok(params.self_signed(key)?.der().clone())
}

/// Checks that `der` is a CA certificate for `key`, valid now. Returns its
/// expiry as Unix time.
fn check_ca(
    cert_path: &Path,
    key_path: &Path,
    der: &CertificateDer<'_>,
    key: &KeyPair,
) -> Result<i64, Error> {
    let invalid = |problem: String| Problem::new(problem, None).in_cert_file(cert_path);
    let (_, x509) = x509_parser::parse_x509_certificate(der).map_err(|e| {
        Problem::new("not a valid X.509 certificate", Some(e.into())).in_cert_file(cert_path)
    })?;
    if !x509.is_ca() {
        return Err(invalid(
            "not a CA certificate (no basicConstraints CA:true)".into(),
        ));
    }
    match x509.key_usage() {
        Ok(Some(usage)) if !usage.value.key_cert_sign() => {
            return Err(invalid(
                "its key usage does not allow signing certificates".into(),
            ));
        }
        Ok(_) => {}
        Err(e) => {
            return Err(
                Problem::new("malformed key usage extension", Some(e.into()))
                    .in_cert_file(cert_path),
            );
        }
    }
    if x509.tbs_certificate.subject_pki.raw != key.subject_public_key_info().as_slice() {
        return Err(Error::KeyMismatch {
            key: key_path.to_path_buf(),
            cert: cert_path.to_path_buf(),
        });
    }
    let validity = x509.validity();
    let (not_before, not_after) = (
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    );
    let now = unix_now();
    if now < not_before {
        return Err(invalid(format!(
            "not valid before {} (is the clock right?)",
            format_time(not_before)
        )));
    }
    if now >= not_after {
        return Err(invalid(format!(
            "expired at {}; move the ca.* files away to start a new CA",
            format_time(not_after)
        )));
    }
    Ok(not_after)
}

/// The ServiceAccount signing key's PEM: `sa.key`, created (ECDSA P-256, mode 0600) when
/// missing, never replaced; an unusable one is an error naming the file.
fn load_or_create_service_account_key(dir: &Path) -> Result<String, Error> {
    let path = dir.join(SERVICE_ACCOUNT_KEY_FILE);
    let bytes = match files::read_optional(&path)? {
        Some(bytes) => bytes,
        None => {
            let key = KeyPair::generate().map_err(|source| Error::Generate {
                what: format!("a signing key for {}", path.display()),
                source,
            })?;
            files::create_no_clobber(&path, key.serialize_pem().as_bytes(), files::SECRET_MODE)?;
            // Another process may have created it first: use what is on disk.
            files::read(&path)?
        }
    };
    let key = key_pair(&bytes).map_err(|p| p.in_key_file(&path))?;
    if key.algorithm() != &rcgen::PKCS_ECDSA_P256_SHA256 {
        return Err(
            Problem::new("not an ECDSA P-256 key (tokens are signed ES256)", None)
                .in_key_file(&path),
        );
    }
    Ok(key.serialize_pem())
}

fn load_or_create_token(dir: &Path) -> Result<String, Error> {
    let path = dir.join(ADMIN_TOKEN_FILE);
    let bytes = match files::read_optional(&path)? {
        Some(bytes) => bytes,
        None => {
            let token = random_token(&path)?;
            files::create_no_clobber(&path, format!("{token}\n").as_bytes(), files::SECRET_MODE)?;
            files::read(&path)?
        }
    };
    let invalid = |problem| Error::InvalidToken {
        path: path.clone(),
        problem,
    };
    let text = std::str::from_utf8(&bytes).map_err(|_| invalid("it is not UTF-8 text"))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(invalid("the file is empty"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(
            "it contains spaces, control or non-ASCII characters",
        ));
    }
    Ok(token.to_owned())
}

/// A new admin token (32 random bytes, base64url), meant for `path`.
fn random_token(path: &Path) -> Result<String, Error> {
    let mut raw = [0u8; 32];
    provider()
        .secure_random
        .fill(&mut raw)
        .map_err(|_| Error::Random {
            path: path.to_path_buf(),
        })?;
    Ok(URL_SAFE_NO_PAD.encode(raw))
}

fn load_or_issue_server_cert(
    dir: &Path,
    ca: &Ca,
    hosts: &[Host],
) -> Result<(String, String), Error> {
    let cert_path = dir.join(SERVER_CERT_FILE);
    let key_path = dir.join(SERVER_KEY_FILE);
    let mut roots = RootCertStore::empty();
    roots.add(ca.cert_der.clone()).map_err(|e| {
        Problem::new("rejected as a trust anchor", Some(e.into())).in_cert_file(&ca.cert_path)
    })?;
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| {
            Problem::new("rejected as a trust anchor", Some(e.into())).in_cert_file(&ca.cert_path)
        })?;
    let now = UnixTime::now();

    if let (Some(cert), Some(key)) = (
        files::read_optional(&cert_path)?,
        files::read_optional(&key_path)?,
    ) && let Some(found) = usable_server_cert(&cert, &key, &verifier, hosts, now)
    {
        return Ok(found);
    }

    let key = KeyPair::generate().map_err(|source| Error::Generate {
        what: format!("a key for {}", key_path.display()),
        source,
    })?;
    let der = server_cert_params(hosts, ca.not_after)
        .and_then(|params| params.signed_by(&key, &ca.issuer))
        .map_err(|source| Error::Generate {
            what: format!("a certificate for {}", cert_path.display()),
            source,
        })?;
    let der = der.der().clone();
    // Never hand out a certificate that clients would reject.
    verify_server_cert(&verifier, &der, hosts, now).map_err(|source| {
        Error::IssuedCertificateRejected {
            path: cert_path.clone(),
            ca: ca.cert_path.clone(),
            source,
        }
    })?;
    let cert_pem = pem_encode_cert(&der);
    let key_pem = key.serialize_pem();
    // Key first: a crash in between leaves a mismatched pair, which the next
    // start detects and replaces.
    files::replace(&key_path, key_pem.as_bytes(), files::SECRET_MODE)?;
    files::replace(&cert_path, cert_pem.as_bytes(), files::PUBLIC_MODE)?;
    Ok((cert_pem, key_pem))
}

/// The existing serving certificate and key as PEM, if they belong together,
/// chain to the CA, cover every host and stay valid for the renewal window.
fn usable_server_cert(
    cert: &[u8],
    key: &[u8],
    verifier: &WebPkiServerVerifier,
    hosts: &[Host],
    now: UnixTime,
) -> Option<(String, String)> {
    let der = single_cert(cert).ok()?;
    let key = key_pair(key).ok()?;
    let (_, x509) = x509_parser::parse_x509_certificate(&der).ok()?;
    if x509.tbs_certificate.subject_pki.raw != key.subject_public_key_info().as_slice() {
        return None;
    }
    // Exactly the hosts asked for: a name no longer asked for goes too.
    let wanted: BTreeSet<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
    if cert_names(&x509)? != wanted.iter().map(|h| (*h).to_owned()).collect() {
        return None;
    }
    let renewal_deadline = UnixTime::since_unix_epoch(Duration::from_secs(
        now.as_secs() + (RENEW_BEFORE_DAYS * DAY_SECS) as u64,
    ));
    // Validity is an interval: valid at both ends means valid throughout.
    verify_server_cert(verifier, &der, hosts, now).ok()?;
    verify_server_cert(verifier, &der, hosts, renewal_deadline).ok()?;
    Some((pem_encode_cert(&der), key.serialize_pem()))
}

/// The DNS names and IP addresses a certificate names (`None` if it has no readable
/// subject alternative names).
fn cert_names(x509: &x509_parser::certificate::X509Certificate<'_>) -> Option<BTreeSet<String>> {
    use x509_parser::extensions::GeneralName;
    let names = x509.subject_alternative_name().ok()??;
    names
        .value
        .general_names
        .iter()
        .map(|name| match name {
            GeneralName::DNSName(dns) => Some(dns.to_ascii_lowercase()),
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => Some(IpAddr::from(<[u8; 4]>::try_from(*bytes).ok()?).to_string()),
                16 => Some(IpAddr::from(<[u8; 16]>::try_from(*bytes).ok()?).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn verify_server_cert(
    verifier: &WebPkiServerVerifier,
    der: &CertificateDer<'_>,
    hosts: &[Host],
    at: UnixTime,
) -> Result<(), rustls::Error> {
    for host in hosts {
        verifier.verify_server_cert(der, &[], &host.server_name, &[], at)?;
    }
    Ok(())
}

fn server_cert_params(
    hosts: &[Host],
    ca_not_after: i64,
) -> Result<CertificateParams, rcgen::Error> {
    let mut params =
        CertificateParams::new(hosts.iter().map(|h| h.name.clone()).collect::<Vec<_>>())?;
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "flotilla");
    name.push(DnType::CommonName, "flotilla-hub");
    params.distinguished_name = name;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let now = unix_now();
    // Not beyond the CA: clients reject a chain whose CA has expired anyway.
    let not_after = (now + SERVER_VALIDITY_DAYS * DAY_SECS).min(ca_not_after);
    set_validity(&mut params, now - DAY_SECS, not_after);
    Ok(params)
}

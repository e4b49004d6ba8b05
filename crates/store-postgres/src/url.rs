//! `postgres://user:pass@host:port/db?sslmode=…` → a connection target: libpq's URL, with
//! TLS through rustls as libpq's `sslmode` asks for it.
//!
//! ```text
//!  sslmode      encrypted  server certificate checked
//!  disable      no         -
//!  prefer       if offered no (a chain against sslrootcert, when given)
//!  require      yes        no (a chain against sslrootcert, when given: libpq's rule)
//!  verify-ca    yes        chained to sslrootcert
//!  verify-full  yes        chained to sslrootcert, and issued for the host
//! ```
//!
//! `sslrootcert`, `sslcert` and `sslkey` name PEM files, as libpq's do; the other
//! parameters are tokio-postgres's (`connect_timeout`, `application_name`, `options`…).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use flotilla_store::{Error, OpenFailure, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_cert_signed_by_trust_anchor};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres_rustls::MakeRustlsConnect;

/// How a connection is encrypted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsMode {
    /// Plain TCP.
    Disable,
    /// TLS when the server offers it.
    Prefer,
    /// TLS, the server's certificate not checked (unless `sslrootcert` is given).
    Require,
    /// TLS, the server's certificate chained to `sslrootcert`.
    VerifyCa,
    /// TLS, the server's certificate chained to `sslrootcert` and issued for the host.
    VerifyFull,
}

/// Where the store's database is and how to reach it.
#[derive(Clone)]
pub struct Target {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) tls: Option<MakeRustlsConnect>,
    pub(crate) mode: TlsMode,
    /// `host:port` (the first of them), for messages.
    pub(crate) server: String,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the password.
        f.debug_struct("Target")
            .field("server", &self.server)
            .field("user", &self.config.get_user())
            .field("dbname", &self.config.get_dbname())
            .field("tls", &self.mode)
            .finish()
    }
}

impl Target {
    /// The server and database, for messages: `host:port/db`.
    pub fn describe(&self) -> String {
        format!(
            "{}/{}",
            self.server,
            self.config.get_dbname().unwrap_or("postgres")
        )
    }

    /// Sets the time a connection may take to be made.
    pub(crate) fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout(timeout);
        self
    }
}

/// An open error of a malformed URL or TLS file, as one line.
fn invalid(location: &str, why: impl Into<String>) -> Error {
    Error::Open {
        path: PathBuf::from(location),
        reason: OpenFailure::Invalid(why.into()),
        source: None,
    }
}

/// Parses a `postgres://` (or `postgresql://`) URL.
pub fn parse(url: &str) -> Result<Target> {
    let shown = redact(url);
    let rest = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
        .ok_or_else(|| invalid(&shown, "a PostgreSQL URL starts with postgres://"))?;
    let (base, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut mode = TlsMode::Prefer;
    let (mut root, mut cert, mut key) = (None, None, None);
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "sslmode" => {
                mode = match value {
                    "disable" => TlsMode::Disable,
                    "allow" | "prefer" => TlsMode::Prefer,
                    "require" => TlsMode::Require,
                    "verify-ca" => TlsMode::VerifyCa,
                    "verify-full" => TlsMode::VerifyFull,
                    other => {
                        return Err(invalid(
                            &shown,
                            format!(
                                "sslmode={other} is not one of disable, prefer, require, \
                                 verify-ca, verify-full"
                            ),
                        ));
                    }
                }
            }
            "sslrootcert" => root = Some(PathBuf::from(percent_decode(value))),
            "sslcert" => cert = Some(PathBuf::from(percent_decode(value))),
            "sslkey" => key = Some(PathBuf::from(percent_decode(value))),
            _ => kept.push(pair),
        }
    }
    let ssl = match mode {
        TlsMode::Disable => "disable",
        TlsMode::Prefer => "prefer",
        _ => "require",
    };
    kept.push(match ssl {
        "disable" => "sslmode=disable",
        "prefer" => "sslmode=prefer",
        _ => "sslmode=require",
    });
    let rebuilt = format!("postgresql://{base}?{}", kept.join("&"));
    let config: tokio_postgres::Config = rebuilt
        .parse()
        .map_err(|e: tokio_postgres::Error| invalid(&shown, e.to_string()))?;
    if config.get_hosts().is_empty() {
        return Err(invalid(&shown, "the URL names no host"));
    }
    debug_assert_eq!(
        config.get_ssl_mode(),
        match mode {
            TlsMode::Disable => SslMode::Disable,
            TlsMode::Prefer => SslMode::Prefer,
            _ => SslMode::Require,
        }
    );
    let server = server_of(&config);
    let tls = match mode {
        TlsMode::Disable => None,
        _ => Some(MakeRustlsConnect::new(client_config(
            &shown,
            mode,
            root.as_deref(),
            cert.as_deref().zip(key.as_deref()),
        )?)),
    };
    if cert.is_some() != key.is_some() {
        return Err(invalid(&shown, "sslcert and sslkey go together"));
    }
    Ok(Target {
        config,
        tls,
        mode,
        server,
    })
}

/// The URL without its password, for messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{hosts}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `host:port` of the first host.
fn server_of(config: &tokio_postgres::Config) -> String {
    let port = config.get_ports().first().copied().unwrap_or(5432);
    match config.get_hosts().first() {
        Some(Host::Tcp(host)) if host.contains(':') => format!("[{host}]:{port}"),
        Some(Host::Tcp(host)) => format!("{host}:{port}"),
        Some(Host::Unix(path)) => format!("{}:{port}", path.display()),
        None => format!("localhost:{port}"),
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_pem(location: &str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| invalid(location, format!("{}: {e}", path.display())))
}

/// The rustls client setup for `mode`.
fn client_config(
    location: &str,
    mode: TlsMode,
    root: Option<&Path>,
    identity: Option<(&Path, &Path)>,
) -> Result<rustls::ClientConfig> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(location, e.to_string()))?;
    let roots = match root {
        Some(path) => {
            let pem = read_pem(location, path)?;
            let mut store = RootCertStore::empty();
            for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
                let cert =
                    cert.map_err(|e| invalid(location, format!("{}: {e}", path.display())))?;
                store
                    .add(cert)
                    .map_err(|e| invalid(location, format!("{}: {e}", path.display())))?;
            }
            if store.is_empty() {
                return Err(invalid(
                    location,
                    format!("{} holds no certificate", path.display()),
                ));
            }
            Some(Arc::new(store))
        }
        None if matches!(mode, TlsMode::VerifyCa | TlsMode::VerifyFull) => {
            return Err(invalid(
                location,
                "sslmode=verify-ca and verify-full need sslrootcert=FILE (the CA's PEM)",
            ));
        }
        None => None,
    };
    let algorithms = provider.signature_verification_algorithms;
    let verifier: Arc<dyn ServerCertVerifier> = match (mode, roots) {
        (TlsMode::VerifyFull, Some(roots)) => {
            WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| invalid(location, e.to_string()))?
        }
        (_, Some(roots)) => Arc::new(ChainOnly { roots, algorithms }),
        (_, None) => Arc::new(Unchecked { algorithms }),
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let pem = read_pem(location, cert)?;
            let chain: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut pem.as_slice())
                .collect::<Result<_, _>>()
                .map_err(|e| invalid(location, format!("{}: {e}", cert.display())))?;
            let pem = read_pem(location, key)?;
            let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut pem.as_slice())
                .map_err(|e| invalid(location, format!("{}: {e}", key.display())))?
                .ok_or_else(|| invalid(location, format!("{} holds no key", key.display())))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| invalid(location, e.to_string()))
        }
    }
}

/// libpq's `require` without a root certificate: encrypted, the server not authenticated.
#[derive(Debug)]
struct Unchecked {
    algorithms: WebPkiSupportedAlgorithms,
}

/// libpq's `verify-ca`: the server's chain must lead to a trusted root; its name is not
/// checked.
#[derive(Debug)]
struct ChainOnly {
    roots: Arc<RootCertStore>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hosts_users_and_tls_modes() {
        let t = parse("postgres://hub:secret@db.example:6432/flotilla?sslmode=disable").unwrap();
        assert_eq!(t.server, "db.example:6432");
        assert_eq!(t.config.get_user(), Some("hub"));
        assert_eq!(t.config.get_dbname(), Some("flotilla"));
        assert_eq!(t.mode, TlsMode::Disable);
        assert!(t.tls.is_none());
        assert!(!format!("{t:?}").contains("secret"));
        let t = parse("postgresql://hub@127.0.0.1/db?sslmode=require").unwrap();
        assert_eq!(
            (t.server.as_str(), t.mode),
            ("127.0.0.1:5432", TlsMode::Require)
        );
        assert!(t.tls.is_some());
        assert_eq!(parse("postgres://h/db").unwrap().mode, TlsMode::Prefer);
    }

    #[test]
    fn refuses_what_it_cannot_use_in_one_line() {
        let message = |url: &str| parse(url).unwrap_err().to_string();
        assert!(message("mysql://h/db").contains("postgres://"));
        assert!(message("postgres://h/db?sslmode=sometimes").contains("sslmode=sometimes"));
        assert!(message("postgres://h/db?sslmode=verify-full").contains("sslrootcert"));
        assert!(
            message("postgres://h/db?sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem")
                .contains("/nonexistent/ca.pem")
        );
        assert!(message("postgres://h/db?bogus=1").contains("bogus"));
        for url in ["postgres://h/db?sslmode=x", "mysql://h"] {
            assert!(!message(url).contains('\n'), "{url}");
        }
    }

    #[test]
    fn redacts_the_password() {
        assert_eq!(
            redact("postgres://hub:s3cr3t@h:5432/db?sslmode=disable"),
            "postgres://hub:***@h:5432/db?sslmode=disable"
        );
        assert_eq!(redact("postgres://hub@h/db"), "postgres://hub@h/db");
        assert_eq!(percent_decode("/a%20b"), "/a b");
    }
}

//! Client certificates: asking for them in the handshake, verifying them against the
//! hub's CA, reading who they name, and issuing them from certificate signing requests.
//!
//! ```text
//!  TLS handshake ─► RequestClientCert: asks (the CA as the acceptable issuer), never
//!                   requires; checks that the client holds the leaf's key, not the chain
//!  a request ─► ClientCa::verify(chain, now): chains to the CA, valid now, clientAuth
//!                   ─► ClientIdentity { user: CN, groups: O…, not_after, serial }
//!  PEM CSR ─► CertificateRequest::parse (one CERTIFICATE REQUEST, its signature checked)
//!          ─► HubIdentity::sign_client_certificate (CN and O of the request, clientAuth
//!             only, backdated 5 minutes, never past the CA) ─► PEM certificate
//! ```
//!
//! The chain is checked per request rather than in the handshake so that an expired or
//! foreign certificate is answered as kube-apiserver answers it, with a 401 whose reason
//! the server logs and audits, rather than with a TLS alert that says nothing to anyone.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    CertificateParams, DistinguishedName, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData, SerialNumber, SignatureAlgorithm,
};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName as TlsName, RootCertStore, SignatureScheme};
use x509_parser::prelude::FromDer;

use crate::{Error, HubIdentity, Problem, key_pair, pem_encode_cert, provider, single_cert};

/// How far back an issued client certificate's validity starts, for clients whose clock
/// is a little behind (kube-controller-manager's signer backdates as much).
const BACKDATE: i64 = 5 * 60;

/// The TLS side of client certificates: asks for one issued by the CA, accepts a
/// handshake without one, and verifies only the client's proof that it holds the
/// certificate's key. [`ClientCa::verify`] checks the chain.
#[derive(Debug)]
pub(crate) struct RequestClientCert {
    hints: Vec<TlsName>,
    schemes: Vec<SignatureScheme>,
}

impl RequestClientCert {
    /// Asks for certificates issued by `ca`.
    pub(crate) fn new(ca: &CertificateDer<'_>) -> Result<Self, Problem> {
        let (_, x509) = x509_parser::parse_x509_certificate(ca)
            .map_err(|e| Problem::new("not a valid X.509 certificate", Some(e.into())))?;
        Ok(RequestClientCert {
            hints: vec![TlsName::from(x509.subject().as_raw().to_vec())],
            schemes: provider()
                .signature_verification_algorithms
                .supported_schemes(),
        })
    }
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[TlsName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // The chain is checked when a request is authenticated (ClientCa::verify).
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes.clone()
    }
}

/// Who a verified client certificate names, as kube-apiserver's x509 authenticator reads
/// it: the subject's common name is the user, each organization a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The subject's common name.
    pub user: String,
    /// The subject's organizations, in order.
    pub groups: Vec<String>,
    /// When the certificate expires (Unix seconds).
    pub not_after: i64,
    /// The certificate's serial number, lowercase hex without leading zeros (`0` for 0),
    /// as [`certificate_serial`] writes it: what a revocation names.
    pub serial: String,
}

/// Verifies client certificate chains against the hub's CA.
#[derive(Clone)]
pub struct ClientCa {
    verifier: Arc<dyn ClientCertVerifier>,
}

impl fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCa").finish_non_exhaustive()
    }
}

impl ClientCa {
    /// Trusts the CA certificate(s) in `ca_pem`.
    pub fn new(ca_pem: &str) -> Result<Self, Error> {
        let ca = single_cert(ca_pem.as_bytes()).map_err(|p| p.in_field("ca_cert_pem"))?;
        let tls = |source| Error::Tls {
            side: "client verifier",
            source,
        };
        let mut roots = RootCertStore::empty();
        roots.add(ca).map_err(tls)?;
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| Error::InvalidIdentity {
                field: "ca_cert_pem",
                problem: "rejected as a trust anchor for client certificates".into(),
                source: Some(e.into()),
            })?;
        Ok(ClientCa { verifier })
    }

    /// Who `chain` (leaf first) names, if it chains to the CA, is valid at `now` and
    /// allows client authentication; else why not. `Ok(None)`: it verifies but names no
    /// user (an empty common name), so it authenticates nobody, as in Kubernetes.
    pub fn verify(
        &self,
        chain: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<Option<ClientIdentity>, String> {
        let (leaf, intermediates) = chain
            .split_first()
            .ok_or_else(|| "no certificate".to_owned())?;
        self.verifier
            .verify_client_cert(leaf, intermediates, now)
            .map_err(|e| e.to_string())?;
        identity(leaf)
    }
}

/// Who the certificate `der` names (without verifying it).
pub fn identity(der: &[u8]) -> Result<Option<ClientIdentity>, String> {
    let (_, x509) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let subject = x509.subject();
    let user = match subject.iter_common_name().next() {
        Some(cn) => cn.as_str().map_err(|e| e.to_string())?.to_owned(),
        None => return Ok(None),
    };
    if user.is_empty() {
        return Ok(None);
    }
    let groups = subject
        .iter_organization()
        .map(|o| o.as_str().map(str::to_owned).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(ClientIdentity {
        user,
        groups,
        not_after: x509.validity().not_after.timestamp(),
        serial: serial_hex(x509.raw_serial()),
    }))
}

/// A serial number's bytes as lowercase hex without leading zeros.
fn serial_hex(raw: &[u8]) -> String {
    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    match hex.trim_start_matches('0') {
        "" => "0".to_owned(),
        trimmed => trimmed.to_owned(),
    }
}

/// The serial number of the first certificate in `pem`, as [`ClientIdentity::serial`]
/// writes it.
pub fn certificate_serial(pem: &[u8]) -> Result<String, String> {
    let der = rustls_pemfile::certs(&mut &pem[..])
        .next()
        .ok_or_else(|| "no CERTIFICATE PEM block".to_owned())?
        .map_err(|e| e.to_string())?;
    let (_, x509) = x509_parser::parse_x509_certificate(&der).map_err(|e| e.to_string())?;
    Ok(serial_hex(x509.raw_serial()))
}

/// When the first certificate in `pem` starts and stops being valid (Unix seconds):
/// what a holder renewing it before the end of its lifetime reads.
pub fn certificate_validity(pem: &[u8]) -> Result<(i64, i64), String> {
    let der = rustls_pemfile::certs(&mut &pem[..])
        .next()
        .ok_or_else(|| "no CERTIFICATE PEM block".to_owned())?
        .map_err(|e| e.to_string())?;
    let (_, x509) = x509_parser::parse_x509_certificate(&der).map_err(|e| e.to_string())?;
    let validity = x509.validity();
    Ok((
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    ))
}

/// The pin of a CA certificate as kubeadm's `--discovery-token-ca-cert-hash` writes it:
/// `sha256:` and the lowercase hex SHA-256 of the certificate's DER SubjectPublicKeyInfo.
pub fn ca_hash(der: &[u8]) -> Result<String, String> {
    let (_, x509) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let spki = x509.tbs_certificate.subject_pki.raw;
    let digest = ring::digest::digest(&ring::digest::SHA256, spki);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("sha256:{hex}"))
}

/// [`ca_hash`] of the first certificate of PEM `pem`.
pub fn ca_hash_pem(pem: &[u8]) -> Result<String, String> {
    let der = rustls_pemfile::certs(&mut &pem[..])
        .next()
        .ok_or_else(|| "no CERTIFICATE PEM block".to_owned())?
        .map_err(|e| e.to_string())?;
    ca_hash(&der)
}

/// Why a certificate signing request cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// No PEM `CERTIFICATE REQUEST` block.
    #[error("PEM block type must be CERTIFICATE REQUEST")]
    NotPem,
    /// The block is not a PKCS#10 request.
    #[error("the request is not a valid PKCS#10 certificate request: {0}")]
    Malformed(String),
    /// Its signature does not verify with its own public key.
    #[error("the request's signature does not verify with its public key")]
    Signature,
}

/// Why the hub's signer refuses to issue a certificate for a request it could read.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// A key type the signer does not issue certificates for.
    #[error("the signer does not issue certificates for {0} keys")]
    Key(String),
    /// The CA cannot sign (its files are unusable, or signing failed).
    #[error("the CA cannot sign the certificate: {0}")]
    Ca(String),
}

/// The kind of public key a request carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyKind {
    Rsa,
    EcdsaP256,
    EcdsaP384,
    Ed25519,
    Other,
}

/// A PKCS#10 certificate signing request whose signature verifies.
#[derive(Clone)]
pub struct CertificateRequest {
    /// The subject's common name (empty if none).
    pub common_name: String,
    /// The subject's organizations.
    pub organizations: Vec<String>,
    key: KeyKind,
    key_name: String,
    /// The subject public key (the BIT STRING's contents).
    public_key: Vec<u8>,
    /// The subject's DER, as the request has it.
    subject: Vec<u8>,
}

impl fmt::Debug for CertificateRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateRequest")
            .field("common_name", &self.common_name)
            .field("organizations", &self.organizations)
            .field("key", &self.key_name)
            .finish_non_exhaustive()
    }
}

const OID_RSA: &str = "1.2.840.113549.1.1.1";
const OID_EC: &str = "1.2.840.10045.2.1";
const OID_P256: &str = "1.2.840.10045.3.1.7";
const OID_P384: &str = "1.3.132.0.34";
const OID_ED25519: &str = "1.3.101.112";

impl CertificateRequest {
    /// Reads the first `CERTIFICATE REQUEST` PEM block of `pem` (as Kubernetes does) and
    /// checks its signature.
    pub fn parse(pem: &[u8]) -> Result<Self, RequestError> {
        let der = first_request_block(pem).ok_or(RequestError::NotPem)?;
        let (_, csr) = x509_parser::certification_request::X509CertificationRequest::from_der(&der)
            .map_err(|e| RequestError::Malformed(e.to_string()))?;
        csr.verify_signature()
            .map_err(|_| RequestError::Signature)?;
        let info = &csr.certification_request_info;
        let text = |value: Result<&str, _>| {
            value
                .map(str::to_owned)
                .map_err(|e: x509_parser::error::X509Error| RequestError::Malformed(e.to_string()))
        };
        let common_name = match info.subject.iter_common_name().next() {
            Some(cn) => text(cn.as_str())?,
            None => String::new(),
        };
        let organizations = info
            .subject
            .iter_organization()
            .map(|o| text(o.as_str()))
            .collect::<Result<Vec<_>, _>>()?;
        let spki = &info.subject_pki;
        let algorithm = spki.algorithm.algorithm.to_id_string();
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok())
            .map(|oid| oid.to_id_string());
        let (key, key_name) = match (algorithm.as_str(), curve.as_deref()) {
            (OID_RSA, _) => (KeyKind::Rsa, "RSA".to_owned()),
            (OID_EC, Some(OID_P256)) => (KeyKind::EcdsaP256, "ECDSA P-256".to_owned()),
            (OID_EC, Some(OID_P384)) => (KeyKind::EcdsaP384, "ECDSA P-384".to_owned()),
            (OID_EC, curve) => (
                KeyKind::Other,
                format!("ECDSA (curve {})", curve.unwrap_or("unnamed")),
            ),
            (OID_ED25519, _) => (KeyKind::Ed25519, "Ed25519".to_owned()),
            (other, _) => (KeyKind::Other, format!("{other} (algorithm OID)")),
        };
        Ok(CertificateRequest {
            common_name,
            organizations,
            key,
            key_name,
            public_key: spki.subject_public_key.data.to_vec(),
            subject: info.subject.as_raw().to_vec(),
        })
    }

    /// The kind of key, as a person would name it (`ECDSA P-256`, `RSA`…).
    pub fn key_name(&self) -> &str {
        &self.key_name
    }
}

/// The DER of the first `CERTIFICATE REQUEST` (or `NEW CERTIFICATE REQUEST`) block.
fn first_request_block(pem: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(pem).ok()?;
    for label in ["CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST"] {
        let begin = format!("-----BEGIN {label}-----");
        let end = format!("-----END {label}-----");
        if let Some(start) = text.find(&begin) {
            let body = &text[start + begin.len()..];
            let stop = body.find(&end)?;
            let b64: String = body[..stop]
                .chars()
                .filter(|c| !c.is_ascii_whitespace())
                .collect();
            use base64::Engine as _;
            return base64::engine::general_purpose::STANDARD.decode(b64).ok();
        }
    }
    None
}

/// One DER element's header length and content length at the start of `der`.
fn element(der: &[u8]) -> Result<(usize, usize), String> {
    let short = |what: &str| format!("truncated DER ({what})");
    let first = *der.get(1).ok_or_else(|| short("length"))?;
    let (header, length) = if first < 0x80 {
        (2, usize::from(first))
    } else {
        let count = usize::from(first & 0x7f);
        let bytes = der.get(2..2 + count).ok_or_else(|| short("long length"))?;
        if count == 0 || count > 4 {
            return Err("unsupported DER length".into());
        }
        let length = bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b));
        (2 + count, length)
    };
    if der.len() < header + length {
        return Err(short("content"));
    }
    Ok((header, length))
}

/// A DER element of `tag` holding `content`.
fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let length = content.len();
    if length < 0x80 {
        out.push(length as u8);
    } else {
        let bytes: Vec<u8> = length
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// The certificate `der` with `subject` (a Name's DER) in place of its subject, signed
/// again by `key` with the same algorithm.
fn with_subject(der: &[u8], subject: &[u8], key: &KeyPair) -> Result<Vec<u8>, String> {
    use rcgen::SigningKey as _;
    let (_, x509) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let old = x509.tbs_certificate.subject.as_raw();
    // The subject's place in the certificate, from the slice x509-parser points at.
    let start = (old.as_ptr() as usize)
        .checked_sub(der.as_ptr() as usize)
        .filter(|start| start + old.len() <= der.len())
        .ok_or("the subject is not inside the certificate")?;
    let (outer, _) = element(der)?;
    let (tbs_header, tbs_length) = element(&der[outer..])?;
    let tbs_content = outer + tbs_header..outer + tbs_header + tbs_length;
    if !tbs_content.contains(&start) {
        return Err("the subject is not inside the signed part".into());
    }
    let mut content = der[tbs_content.start..start].to_vec();
    content.extend_from_slice(subject);
    content.extend_from_slice(&der[start + old.len()..tbs_content.end]);
    let tbs = tlv(0x30, &content);
    let (algorithm_header, algorithm_length) = element(&der[tbs_content.end..])?;
    let algorithm = &der[tbs_content.end..tbs_content.end + algorithm_header + algorithm_length];
    let signature = key.sign(&tbs).map_err(|e| e.to_string())?;
    let mut bits = vec![0u8];
    bits.extend(signature);
    let mut certificate = tbs;
    certificate.extend_from_slice(algorithm);
    certificate.extend(tlv(0x03, &bits));
    Ok(tlv(0x30, &certificate))
}

/// A request's public key, as rcgen writes it into a certificate.
struct RequestKey<'a>(&'a CertificateRequest, &'static SignatureAlgorithm);

impl PublicKeyData for RequestKey<'_> {
    fn der_bytes(&self) -> &[u8] {
        &self.0.public_key
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        self.1
    }
}

impl HubIdentity {
    /// A [`ClientCa`] trusting this identity's CA.
    pub fn client_ca(&self) -> Result<ClientCa, Error> {
        ClientCa::new(&self.ca_cert_pem)
    }

    /// A client certificate (PEM) for `request`'s key, signed by the CA: its subject the
    /// request's common name and organizations, usable for client authentication only
    /// (digital signature, and key encipherment for RSA keys), valid from five minutes
    /// ago for `lifetime`, but never past the CA's own expiry.
    pub fn sign_client_certificate(
        &self,
        request: &CertificateRequest,
        lifetime: Duration,
    ) -> Result<String, SignError> {
        let algorithm: &'static SignatureAlgorithm = match request.key {
            KeyKind::Rsa => &rcgen::PKCS_RSA_SHA256,
            KeyKind::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            KeyKind::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            KeyKind::Ed25519 => &rcgen::PKCS_ED25519,
            KeyKind::Other => return Err(SignError::Key(request.key_name.clone())),
        };
        let ca_fail = |what: &str, e: &dyn fmt::Display| SignError::Ca(format!("{what}: {e}"));
        let ca_der = single_cert(self.ca_cert_pem.as_bytes())
            .map_err(|p| ca_fail("the CA certificate", &p.problem))?;
        let (_, ca_x509) = x509_parser::parse_x509_certificate(&ca_der)
            .map_err(|e| ca_fail("the CA certificate", &e))?;
        let ca_not_after = ca_x509.validity().not_after.timestamp();
        let ca_key: KeyPair =
            key_pair(self.ca_key_pem.as_bytes()).map_err(|p| ca_fail("the CA key", &p.problem))?;
        let issuer =
            Issuer::from_ca_cert_der(&ca_der, ca_key).map_err(|e| ca_fail("the CA", &e))?;

        // rcgen writes a name with one value per attribute type, and a Kubernetes user's
        // groups are as many organizations: the certificate is issued with an empty
        // subject, which the request's own is then put in place of (kube-controller-
        // manager's signer also copies the request's subject whole).
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        if request.key == KeyKind::Rsa {
            params.key_usages.push(KeyUsagePurpose::KeyEncipherment);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let mut serial = [0u8; 16];
        provider()
            .secure_random
            .fill(&mut serial)
            .map_err(|_| SignError::Ca("no random bytes for a serial number".into()))?;
        serial[0] &= 0x7f;
        params.serial_number = Some(SerialNumber::from_slice(&serial));
        let now = crate::unix_now();
        let lifetime = i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX);
        let not_after = now.saturating_add(lifetime).min(ca_not_after);
        set_exact_validity(&mut params, now - BACKDATE, not_after);
        let issued = params
            .signed_by(&RequestKey(request, algorithm), &issuer)
            .map_err(|e| ca_fail("signing", &e))?;
        let der = with_subject(issued.der(), &request.subject, issuer.key())
            .map_err(|e| ca_fail("the issued certificate", &e))?;
        Ok(pem_encode_cert(&der))
    }
}

/// Sets a certificate's validity to the second (Unix times), not to the day as a
/// serving certificate's.
fn set_exact_validity(params: &mut CertificateParams, not_before: i64, not_after: i64) {
    let into_day =
        |unix_secs: i64| Duration::from_secs(unix_secs.rem_euclid(crate::DAY_SECS) as u64);
    let (y, m, d) = crate::day_start(not_before);
    params.not_before = rcgen::date_time_ymd(y, m, d) + into_day(not_before);
    let (y, m, d) = crate::day_start(not_after);
    params.not_after = rcgen::date_time_ymd(y, m, d) + into_day(not_after);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::DnType;

    /// A CSR for a fresh key, and that key.
    fn request(cn: &str, orgs: &[&str]) -> (String, KeyPair) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        // rcgen keeps one value per type: a second organization goes in under the same
        // OID spelled as a custom type.
        for (i, o) in orgs.iter().enumerate() {
            match i {
                0 => name.push(DnType::OrganizationName, *o),
                1 => name.push(DnType::CustomDnType(vec![2, 5, 4, 10]), *o),
                _ => panic!("at most two organizations"),
            }
        }
        name.push(DnType::CommonName, cn);
        params.distinguished_name = name;
        (params.serialize_request(&key).unwrap().pem().unwrap(), key)
    }

    fn identity_dir() -> (tempfile::TempDir, HubIdentity) {
        let dir = tempfile::tempdir().unwrap();
        let id = crate::load_or_create(dir.path(), &[]).unwrap();
        (dir, id)
    }

    #[test]
    fn a_request_is_read_with_its_subject_and_its_signature_checked() {
        let (pem, _) = request("alice", &["team-a", "ops"]);
        let parsed = CertificateRequest::parse(pem.as_bytes()).unwrap();
        assert_eq!(parsed.common_name, "alice");
        assert_eq!(parsed.organizations, ["team-a", "ops"]);
        assert_eq!(parsed.key_name(), "ECDSA P-256");

        assert_eq!(
            CertificateRequest::parse(b"garbage").unwrap_err(),
            RequestError::NotPem
        );
        let not_der =
            "-----BEGIN CERTIFICATE REQUEST-----\naGVsbG8=\n-----END CERTIFICATE REQUEST-----\n";
        assert!(matches!(
            CertificateRequest::parse(not_der.as_bytes()),
            Err(RequestError::Malformed(_))
        ));
        // One byte of the signed part changed: the signature no longer verifies.
        let der = first_request_block(pem.as_bytes()).unwrap();
        let mut tampered = der.clone();
        let at = tampered.windows(5).position(|w| w == b"alice").unwrap();
        tampered[at] = b'e';
        use base64::Engine as _;
        let tampered = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
            base64::engine::general_purpose::STANDARD.encode(tampered)
        );
        assert_eq!(
            CertificateRequest::parse(tampered.as_bytes()).unwrap_err(),
            RequestError::Signature
        );
    }

    #[test]
    fn a_signed_certificate_names_the_request_and_verifies_as_a_client() {
        let (_dir, id) = identity_dir();
        let (pem, _) = request("alice", &["team-a", "ops"]);
        let parsed = CertificateRequest::parse(pem.as_bytes()).unwrap();
        let cert = id
            .sign_client_certificate(&parsed, Duration::from_secs(3600))
            .unwrap();
        let der = single_cert(cert.as_bytes()).ok().unwrap();
        let (_, x509) = x509_parser::parse_x509_certificate(&der).unwrap();
        let validity = x509.validity();
        let lifetime = validity.not_after.timestamp() - validity.not_before.timestamp();
        assert_eq!(lifetime, 3600 + BACKDATE);
        let eku = x509.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth);
        assert!(!x509.is_ca());

        let ca = id.client_ca().unwrap();
        let found = ca
            .verify(std::slice::from_ref(&der), UnixTime::now())
            .unwrap()
            .unwrap();
        assert_eq!(found.user, "alice");
        assert_eq!(found.groups, ["team-a", "ops"]);
        assert_eq!(found.serial, certificate_serial(cert.as_bytes()).unwrap());
        assert!(!found.serial.is_empty() && !found.serial.starts_with('0'));
        // After it expires, or from another CA, it does not verify.
        let later =
            UnixTime::since_unix_epoch(Duration::from_secs(UnixTime::now().as_secs() + 7200));
        assert!(
            ca.verify(std::slice::from_ref(&der), later)
                .unwrap_err()
                .contains("xpired")
        );
        let (_other_dir, other) = identity_dir();
        assert!(
            other
                .client_ca()
                .unwrap()
                .verify(&[der], UnixTime::now())
                .is_err()
        );
        // Never past the CA.
        let forever = id
            .sign_client_certificate(&parsed, Duration::from_secs(u64::MAX / 4))
            .unwrap();
        let der = single_cert(forever.as_bytes()).ok().unwrap();
        let (_, x509) = x509_parser::parse_x509_certificate(&der).unwrap();
        let ca_der = single_cert(id.ca_cert_pem.as_bytes()).ok().unwrap();
        let (_, ca_x509) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
        assert_eq!(
            x509.validity().not_after.timestamp(),
            ca_x509.validity().not_after.timestamp()
        );
    }

    #[test]
    fn a_certificate_without_a_common_name_names_nobody() {
        let (_dir, id) = identity_dir();
        let (pem, _) = request("", &["team-a"]);
        let parsed = CertificateRequest::parse(pem.as_bytes()).unwrap();
        let cert = id
            .sign_client_certificate(&parsed, Duration::from_secs(3600))
            .unwrap();
        let der = single_cert(cert.as_bytes()).ok().unwrap();
        assert_eq!(
            id.client_ca().unwrap().verify(&[der], UnixTime::now()),
            Ok(None)
        );
    }

    /// The pin is kubeadm's: `openssl x509 -pubkey | openssl pkey -pubin -outform der |
    /// sha256sum` of the CA, computed here by openssl when it is installed.
    #[test]
    fn the_ca_hash_is_the_sha256_of_the_public_key_info() {
        let (dir, id) = identity_dir();
        let hash = ca_hash_pem(id.ca_cert_pem.as_bytes()).unwrap();
        assert!(
            hash.starts_with("sha256:") && hash.len() == 7 + 64,
            "{hash}"
        );
        let (_other_dir, other) = identity_dir();
        assert_ne!(hash, ca_hash_pem(other.ca_cert_pem.as_bytes()).unwrap());
        let ca = dir.path().join("ca-for-openssl.crt");
        std::fs::write(&ca, &id.ca_cert_pem).unwrap();
        let script = format!(
            "openssl x509 -in {} -pubkey -noout | openssl pkey -pubin -outform der | sha256sum",
            ca.display()
        );
        let Ok(out) = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
        else {
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.success() && text.len() >= 64 {
            assert_eq!(hash, format!("sha256:{}", &text[..64]));
        }
    }
}

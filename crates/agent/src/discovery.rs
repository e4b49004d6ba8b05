//! Finding the hub's CA without trusting the network, as kubeadm's token discovery pins it
//! (`--discovery-token-ca-cert-hash sha256:HEX`): the CA whose SubjectPublicKeyInfo
//! hashes to the pin is the hub's, and nothing is sent before it is found.
//!
//! ```text
//!  TCP + TLS handshake to the hub, every certificate accepted but only recorded
//!  (no request is sent on this connection: the token never crosses it)
//!  ─► the chain the hub presented (serving certificate, then its CA)
//!  ─► the certificate whose ca_hash is the pin ─► its PEM: the root every later
//!     connection verifies the hub against | none: refused (Error::CaHash)
//! ```
//!
//! kubeadm reads the CA from the `kube-public/cluster-info` ConfigMap, fetched without
//! credentials; the hub presents its CA in every handshake, so the handshake is the public
//! endpoint here, and the hub serves nothing more to anonymous users.

use std::sync::{Arc, Mutex, PoisonError};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use crate::Error;

/// Records the chain a server presents and accepts it (the pin is checked afterwards; no
/// data is exchanged on the connection).
#[derive(Debug)]
struct Record {
    chain: Mutex<Vec<CertificateDer<'static>>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Record {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let mut chain = self.chain.lock().unwrap_or_else(PoisonError::into_inner);
        chain.push(end_entity.clone().into_owned());
        chain.extend(intermediates.iter().map(|c| c.clone().into_owned()));
        Ok(ServerCertVerified::assertion())
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
            &self.provider.signature_verification_algorithms,
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
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `https://HOST[:PORT][/…]` → (host, port).
pub fn host_port(url: &str) -> Result<(String, u16), Error> {
    let bad = |why: &str| Error::Input(format!("hub URL {url:?}: {why}"));
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| bad("must start with https://"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err(bad("no host"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
        (host.to_owned(), after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (authority.to_owned(), None),
        }
    };
    let port = match port {
        Some(port) => port.parse().map_err(|_| bad("the port is not a number"))?,
        None => 443,
    };
    Ok((host, port))
}

/// Whether `pin` is written as `sha256:` and 64 hex digits.
pub fn check_pin(pin: &str) -> Result<String, Error> {
    let hex = pin.strip_prefix("sha256:").unwrap_or("");
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(format!("sha256:{}", hex.to_ascii_lowercase()))
    } else {
        Err(Error::Input(format!(
            "CA hash {pin:?} is not sha256: followed by 64 hex digits"
        )))
    }
}

/// The PEM of the hub's CA at `url`, if the hub presents a certificate whose public key
/// hashes to `pin`.
pub async fn hub_ca(url: &str, pin: &str) -> Result<String, Error> {
    let pin = check_pin(pin)?;
    let (host, port) = host_port(url)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let record = Arc::new(Record {
        chain: Mutex::default(),
        provider: provider.clone(),
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Hub(format!("TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(record.clone())
        .with_no_client_auth();
    let name = ServerName::try_from(host.clone())
        .map_err(|e| Error::Input(format!("hub host {host:?}: {e}")))?;
    let unreachable = |e: std::io::Error| Error::Hub(format!("cannot reach {url}: {e}"));
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(unreachable)?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    // The handshake is all this connection is for.
    let tls = connector.connect(name, tcp).await.map_err(unreachable)?;
    drop(tls);
    let chain = std::mem::take(&mut *record.chain.lock().unwrap_or_else(PoisonError::into_inner));
    let mut seen = Vec::new();
    for cert in &chain {
        let hash = flotilla_pki::ca_hash(cert)
            .map_err(|e| Error::Hub(format!("a certificate the hub presents: {e}")))?;
        if hash == pin {
            return Ok(pem(cert));
        }
        seen.push(hash);
    }
    Err(Error::CaHash {
        pinned: pin,
        presented: seen,
    })
}

fn pem(der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_pins_are_read_or_refused_in_one_line() {
        assert_eq!(
            host_port("https://127.0.0.1:6443").unwrap(),
            ("127.0.0.1".to_owned(), 6443)
        );
        assert_eq!(
            host_port("https://[::1]:8443/x").unwrap(),
            ("::1".to_owned(), 8443)
        );
        assert_eq!(host_port("https://hub").unwrap(), ("hub".to_owned(), 443));
        assert!(host_port("http://hub").is_err());
        let pin = format!("sha256:{}", "AB".repeat(32));
        assert_eq!(
            check_pin(&pin).unwrap(),
            format!("sha256:{}", "ab".repeat(32))
        );
        for bad in ["sha256:abc", "md5:00", &"0".repeat(64)] {
            assert!(check_pin(bad).unwrap_err().to_string().contains("CA hash"));
        }
    }

    #[test]
    fn a_pem_of_a_der_reads_back() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["x".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let text = pem(cert.der());
        assert_eq!(
            flotilla_pki::ca_hash_pem(text.as_bytes()).unwrap(),
            flotilla_pki::ca_hash(cert.der()).unwrap()
        );
    }
}

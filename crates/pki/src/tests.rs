use std::fs;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConnection, Connection, ServerConnection};

use super::*;

fn hosts(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn read(dir: &Path, name: &str) -> Vec<u8> {
    fs::read(dir.join(name)).unwrap()
}

/// Parses a certificate PEM into its subject alternative names, as strings.
fn sans(pem: &str) -> Vec<String> {
    let der = single_cert(pem.as_bytes()).ok().unwrap();
    let (_, x509) = x509_parser::parse_x509_certificate(&der).unwrap();
    let ext = x509.subject_alternative_name().unwrap().unwrap();
    ext.value
        .general_names
        .iter()
        .map(|name| match name {
            x509_parser::extensions::GeneralName::DNSName(s) => s.to_string(),
            x509_parser::extensions::GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => IpAddr::from(<[u8; 4]>::try_from(*bytes).unwrap()).to_string(),
                _ => IpAddr::from(<[u8; 16]>::try_from(*bytes).unwrap()).to_string(),
            },
            other => format!("{other:?}"),
        })
        .collect()
}

/// Moves TLS records between two in-memory connections until both finish
/// the handshake, then sends one request and one response through them.
fn handshake(
    client_config: ClientConfig,
    server_config: ServerConfig,
    name: &str,
) -> Result<(ClientConnection, ServerConnection), rustls::Error> {
    let server_name = ServerName::try_from(name.to_owned()).unwrap();
    let mut client = ClientConnection::new(Arc::new(client_config), server_name)?;
    let mut server = ServerConnection::new(Arc::new(server_config))?;

    fn transfer(from: &mut Connection, to: &mut Connection) -> Result<(), rustls::Error> {
        let mut buf = Vec::new();
        while from.wants_write() {
            from.write_tls(&mut buf).unwrap();
        }
        let mut rest = &buf[..];
        while !rest.is_empty() {
            to.read_tls(&mut rest).unwrap();
            to.process_new_packets()?;
        }
        Ok(())
    }

    let mut client_conn = Connection::Client(client);
    let mut server_conn = Connection::Server(server);
    for _ in 0..10 {
        if !client_conn.is_handshaking() && !server_conn.is_handshaking() {
            break;
        }
        transfer(&mut client_conn, &mut server_conn)?;
        transfer(&mut server_conn, &mut client_conn)?;
    }
    assert!(!client_conn.is_handshaking() && !server_conn.is_handshaking());

    client_conn.writer().write_all(b"ping").unwrap();
    transfer(&mut client_conn, &mut server_conn)?;
    let mut got = [0u8; 4];
    server_conn.reader().read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ping");
    server_conn.writer().write_all(b"pong").unwrap();
    transfer(&mut server_conn, &mut client_conn)?;
    client_conn.reader().read_exact(&mut got).unwrap();
    assert_eq!(&got, b"pong");

    match (client_conn, server_conn) {
        (Connection::Client(c), Connection::Server(s)) => {
            client = c;
            server = s;
        }
        _ => unreachable!(),
    }
    Ok((client, server))
}

#[test]
fn create_then_load_reuses_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let first = load_or_create(&dir, &hosts(&["127.0.0.1", "localhost"])).unwrap();

    for name in [
        CA_KEY_FILE,
        SERVER_KEY_FILE,
        ADMIN_TOKEN_FILE,
        SERVICE_ACCOUNT_KEY_FILE,
    ] {
        assert_eq!(mode(&dir.join(name)), 0o600, "{name}");
    }
    for name in [CA_CERT_FILE, SERVER_CERT_FILE] {
        assert_eq!(mode(&dir.join(name)), 0o644, "{name}");
    }
    assert_eq!(mode(&dir), 0o700);
    // The identity is exactly what is on disk.
    assert_eq!(read(&dir, CA_CERT_FILE), first.ca_cert_pem.as_bytes());
    assert_eq!(
        read(&dir, SERVER_CERT_FILE),
        first.server_cert_pem.as_bytes()
    );
    assert_eq!(read(&dir, SERVER_KEY_FILE), first.server_key_pem.as_bytes());
    assert_eq!(
        read(&dir, ADMIN_TOKEN_FILE),
        format!("{}\n", first.admin_token).as_bytes()
    );
    // 32 bytes, base64url without padding.
    assert_eq!(first.admin_token.len(), 43);
    assert_eq!(
        URL_SAFE_NO_PAD.decode(&first.admin_token).unwrap().len(),
        32
    );
    // No temporary files left behind.
    let mut names: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "admin.token",
            "ca.crt",
            "ca.key",
            "sa.key",
            "server.crt",
            "server.key"
        ]
    );

    let ca_key = read(&dir, CA_KEY_FILE);
    let second = load_or_create(&dir, &hosts(&["localhost", "127.0.0.1"])).unwrap();
    assert_eq!(second.ca_cert_pem, first.ca_cert_pem);
    assert_eq!(second.admin_token, first.admin_token);
    assert_eq!(second.server_cert_pem, first.server_cert_pem);
    assert_eq!(second.server_key_pem, first.server_key_pem);
    assert_eq!(read(&dir, CA_KEY_FILE), ca_key);
    // The token signing key survives restarts, and so does the CA's key.
    assert_eq!(
        second.service_account_key_pem,
        first.service_account_key_pem
    );
    assert_eq!(
        read(&dir, SERVICE_ACCOUNT_KEY_FILE),
        first.service_account_key_pem.as_bytes()
    );
    assert_eq!(second.ca_key_pem, first.ca_key_pem);

    // The default hosts are always covered.
    let mut covered = sans(&first.server_cert_pem);
    covered.sort();
    assert_eq!(covered, ["127.0.0.1", "::1", "localhost"]);
}

#[test]
fn ca_is_a_ca_and_server_cert_is_a_server_cert() {
    let tmp = tempfile::tempdir().unwrap();
    let id = load_or_create(tmp.path(), &[]).unwrap();

    let ca_der = single_cert(id.ca_cert_pem.as_bytes()).ok().unwrap();
    let (_, ca) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    assert!(ca.is_ca());
    assert!(ca.key_usage().unwrap().unwrap().value.key_cert_sign());
    let ca_days = (ca.validity().not_after.timestamp() - unix_now()) / DAY_SECS;
    assert!((3640..=3651).contains(&ca_days), "{ca_days}");
    assert_eq!(
        ca.public_key().algorithm.algorithm,
        x509_parser::oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY
    );

    let leaf_der = single_cert(id.server_cert_pem.as_bytes()).ok().unwrap();
    let (_, leaf) = x509_parser::parse_x509_certificate(&leaf_der).unwrap();
    assert!(!leaf.is_ca());
    assert!(
        leaf.extended_key_usage()
            .unwrap()
            .unwrap()
            .value
            .server_auth
    );
    assert_eq!(leaf.issuer(), ca.subject());
    let leaf_days = (leaf.validity().not_after.timestamp() - unix_now()) / DAY_SECS;
    assert!((360..=366).contains(&leaf_days), "{leaf_days}");
}

#[test]
fn new_host_reissues_server_cert_with_same_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let first = load_or_create(dir, &hosts(&["127.0.0.1"])).unwrap();
    let second = load_or_create(dir, &hosts(&["hub.example.test", "10.1.2.3"])).unwrap();

    assert_eq!(second.ca_cert_pem, first.ca_cert_pem);
    assert_eq!(second.admin_token, first.admin_token);
    assert_ne!(second.server_cert_pem, first.server_cert_pem);
    assert_ne!(second.server_key_pem, first.server_key_pem);
    let covered = sans(&second.server_cert_pem);
    for host in [
        "hub.example.test",
        "10.1.2.3",
        "localhost",
        "127.0.0.1",
        "::1",
    ] {
        assert!(
            covered.iter().any(|h| h == host),
            "{host} not in {covered:?}"
        );
    }
    // The new cert is on disk, and it verifies against the unchanged CA.
    assert_eq!(
        read(dir, SERVER_CERT_FILE),
        second.server_cert_pem.as_bytes()
    );
    handshake(
        first.client_config().unwrap(),
        second.server_config().unwrap(),
        "hub.example.test",
    )
    .unwrap();
    handshake(
        first.client_config().unwrap(),
        second.server_config().unwrap(),
        "10.1.2.3",
    )
    .unwrap();
    // Asking again for the same hosts (in another spelling) reuses the cert.
    let third = load_or_create(dir, &hosts(&["HUB.example.test", "[10.1.2.3]"])).unwrap();
    assert_eq!(third.server_cert_pem, second.server_cert_pem);
}

#[test]
fn a_client_offering_http2_is_served_http2_and_one_without_it_http1() {
    let tmp = tempfile::tempdir().unwrap();
    let id = load_or_create(tmp.path(), &hosts(&["localhost"])).unwrap();
    let mut offering_h2 = id.client_config().unwrap();
    offering_h2.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let (client, server) =
        handshake(offering_h2, id.server_config().unwrap(), "localhost").unwrap();
    assert_eq!(client.alpn_protocol(), Some(ALPN_H2));
    assert_eq!(server.alpn_protocol(), Some(ALPN_H2));
    let mut offering_nothing = id.client_config().unwrap();
    offering_nothing.alpn_protocols.clear();
    let (client, server) =
        handshake(offering_nothing, id.server_config().unwrap(), "localhost").unwrap();
    assert_eq!(client.alpn_protocol(), None);
    assert_eq!(server.alpn_protocol(), None);
}

#[test]
fn tls_handshake_by_name_and_ip() {
    let tmp = tempfile::tempdir().unwrap();
    let id = load_or_create(tmp.path(), &hosts(&["127.0.0.1", "localhost"])).unwrap();
    for name in ["localhost", "127.0.0.1", "::1"] {
        let (client, server) = handshake(
            id.client_config().unwrap(),
            id.server_config().unwrap(),
            name,
        )
        .unwrap();
        assert_eq!(client.alpn_protocol(), Some(&b"http/1.1"[..]));
        assert_eq!(server.alpn_protocol(), Some(&b"http/1.1"[..]));
        // The server sends its certificate followed by the CA.
        let chain = client.peer_certificates().unwrap();
        assert_eq!(chain.len(), 2);
        assert_eq!(
            chain[1].as_ref(),
            single_cert(id.ca_cert_pem.as_bytes())
                .ok()
                .unwrap()
                .as_ref()
        );
    }
}

#[test]
fn tls_handshake_fails_for_other_ca_or_uncovered_name() {
    let tmp = tempfile::tempdir().unwrap();
    let id = load_or_create(&tmp.path().join("a"), &[]).unwrap();
    let other = load_or_create(&tmp.path().join("b"), &[]).unwrap();
    assert_ne!(id.ca_cert_pem, other.ca_cert_pem);

    let err = handshake(
        other.client_config().unwrap(),
        id.server_config().unwrap(),
        "localhost",
    )
    .map(drop)
    .expect_err("a client trusting another CA must fail");
    assert!(
        matches!(
            err,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)
        ),
        "{err:?}"
    );

    let err = handshake(
        id.client_config().unwrap(),
        id.server_config().unwrap(),
        "not-covered.example",
    )
    .map(drop)
    .expect_err("a name outside the certificate must fail");
    assert!(
        matches!(
            err,
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. }
            ) | rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName)
        ),
        "{err:?}"
    );
}

#[test]
fn admin_token_comparison() {
    let tmp = tempfile::tempdir().unwrap();
    let id = load_or_create(tmp.path(), &[]).unwrap();
    let token = id.admin_token.clone();
    assert!(id.is_admin_token(&token));
    assert!(!id.is_admin_token(""));
    assert!(!id.is_admin_token(&token[..token.len() - 1]));
    assert!(!id.is_admin_token(&format!("{token}x")));
    let mut flipped = token.clone().into_bytes();
    flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
    assert!(!id.is_admin_token(std::str::from_utf8(&flipped).unwrap()));
    assert!(!id.is_admin_token(&format!("Bearer {token}")));

    // An identity with an empty token accepts nothing, not even "".
    let empty = HubIdentity {
        admin_token: String::new(),
        ..id
    };
    assert!(!empty.is_admin_token(""));
}

#[test]
fn debug_output_hides_secrets() {
    let tmp = tempfile::tempdir().unwrap();
    let id = load_or_create(tmp.path(), &[]).unwrap();
    let debug = format!("{id:?}");
    assert!(!debug.contains(&id.admin_token));
    assert!(!debug.contains("PRIVATE KEY"));
    let kubeconfig = Kubeconfig {
        name: "x",
        server: "https://127.0.0.1:1",
        ca_pem: &id.ca_cert_pem,
        token: &id.admin_token,
    };
    assert!(!format!("{kubeconfig:?}").contains(&id.admin_token));
}

#[test]
fn corrupt_ca_cert_is_an_error_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    load_or_create(dir, &[]).unwrap();
    for garbage in [&b"this is not PEM\n"[..], b"", b"\xff\xfe\x00binary"] {
        fs::write(dir.join(CA_CERT_FILE), garbage).unwrap();
        let err = load_or_create(dir, &[]).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidCertificate { path, .. } if path.ends_with(CA_CERT_FILE)),
            "{err:?}"
        );
        assert!(err.to_string().contains("ca.crt"), "{err}");
        assert_eq!(read(dir, CA_CERT_FILE), garbage);
    }
    // A PEM block with broken base64 inside.
    let broken = "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
    fs::write(dir.join(CA_CERT_FILE), broken).unwrap();
    let err = load_or_create(dir, &[]).unwrap_err();
    assert!(matches!(&err, Error::InvalidCertificate { .. }), "{err:?}");
    assert_eq!(read(dir, CA_CERT_FILE), broken.as_bytes());
    // Valid base64, but not a certificate.
    let not_x509 = "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n";
    fs::write(dir.join(CA_CERT_FILE), not_x509).unwrap();
    let err = load_or_create(dir, &[]).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidCertificate { problem, source: Some(_), .. } if problem.contains("X.509")),
        "{err:?}"
    );
    assert_eq!(read(dir, CA_CERT_FILE), not_x509.as_bytes());
}

#[test]
fn corrupt_ca_key_is_an_error_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let id = load_or_create(dir, &[]).unwrap();

    fs::write(dir.join(CA_KEY_FILE), "garbage").unwrap();
    let err = load_or_create(dir, &[]).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidKey { path, .. } if path.ends_with(CA_KEY_FILE)),
        "{err:?}"
    );
    assert!(err.to_string().contains("ca.key"), "{err}");
    assert_eq!(read(dir, CA_KEY_FILE), b"garbage");

    // A certificate where the key should be.
    fs::write(dir.join(CA_KEY_FILE), &id.ca_cert_pem).unwrap();
    let err = load_or_create(dir, &[]).unwrap_err();
    assert!(matches!(&err, Error::InvalidKey { .. }), "{err:?}");

    // A PRIVATE KEY block that is no key.
    let bogus = "-----BEGIN PRIVATE KEY-----\naGVsbG8gd29ybGQ=\n-----END PRIVATE KEY-----\n";
    fs::write(dir.join(CA_KEY_FILE), bogus).unwrap();
    let err = load_or_create(dir, &[]).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::InvalidKey {
                source: Some(_),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(read(dir, CA_CERT_FILE), id.ca_cert_pem.as_bytes());
}

#[test]
fn ca_key_not_matching_ca_cert_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let id = load_or_create(dir, &[]).unwrap();
    let foreign = KeyPair::generate().unwrap().serialize_pem();
    fs::write(dir.join(CA_KEY_FILE), &foreign).unwrap();
    let err = load_or_create(dir, &[]).unwrap_err();
    assert!(
        matches!(&err, Error::KeyMismatch { key, cert } if key.ends_with(CA_KEY_FILE) && cert.ends_with(CA_CERT_FILE)),
        "{err:?}"
    );
    assert_eq!(read(dir, CA_KEY_FILE), foreign.as_bytes());
    assert_eq!(read(dir, CA_CERT_FILE), id.ca_cert_pem.as_bytes());
}

#[test]
fn non_ca_certificate_as_ca_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let id = load_or_create(dir, &[]).unwrap();
    // The serving certificate and key match each other but are no CA.
    fs::write(dir.join(CA_CERT_FILE), &id.server_cert_pem).unwrap();
    fs::write(dir.join(CA_KEY_FILE), &id.server_key_pem).unwrap();
    let err = load_or_create(dir, &[]).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidCertificate { problem, .. } if problem.contains("not a CA")),
        "{err:?}"
    );
}

#[test]
fn missing_ca_key_is_an_error_and_ca_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let id = load_or_create(dir, &[]).unwrap();
    fs::remove_file(dir.join(CA_KEY_FILE)).unwrap();
    let err = load_or_create(dir, &[]).unwrap_err();
    assert!(matches!(&err, Error::MissingCaKey { .. }), "{err:?}");
    assert!(!dir.join(CA_KEY_FILE).exists());
    assert_eq!(read(dir, CA_CERT_FILE), id.ca_cert_pem.as_bytes());
}

#[test]
fn missing_ca_cert_with_existing_key_is_self_signed_again() {
    // As after a crash between writing ca.key and ca.crt.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    load_or_create(dir, &[]).unwrap();
    let key = read(dir, CA_KEY_FILE);
    fs::remove_file(dir.join(CA_CERT_FILE)).unwrap();
    let id = load_or_create(dir, &[]).unwrap();
    assert_eq!(read(dir, CA_KEY_FILE), key);
    // The serving certificate was re-issued under the new CA certificate.
    handshake(
        id.client_config().unwrap(),
        id.server_config().unwrap(),
        "localhost",
    )
    .unwrap();
}

#[test]
fn unusable_token_is_an_error_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    load_or_create(dir, &[]).unwrap();
    for bad in [&b""[..], b"  \n", b"two words\n", b"\xff\xff"] {
        fs::write(dir.join(ADMIN_TOKEN_FILE), bad).unwrap();
        let err = load_or_create(dir, &[]).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidToken { path, .. } if path.ends_with(ADMIN_TOKEN_FILE)),
            "{err:?}"
        );
        assert_eq!(read(dir, ADMIN_TOKEN_FILE), bad);
    }
    // A token written by hand (without a newline) is used as it is.
    fs::write(dir.join(ADMIN_TOKEN_FILE), "hand-made").unwrap();
    let id = load_or_create(dir, &[]).unwrap();
    assert_eq!(id.admin_token, "hand-made");
    assert!(id.is_admin_token("hand-made"));
}

#[test]
fn corrupt_or_mismatched_server_files_are_reissued() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let id = load_or_create(dir, &[]).unwrap();

    fs::write(dir.join(SERVER_CERT_FILE), "garbage").unwrap();
    let again = load_or_create(dir, &[]).unwrap();
    assert_ne!(again.server_cert_pem, id.server_cert_pem);
    assert_eq!(
        read(dir, SERVER_CERT_FILE),
        again.server_cert_pem.as_bytes()
    );

    fs::write(
        dir.join(SERVER_KEY_FILE),
        KeyPair::generate().unwrap().serialize_pem(),
    )
    .unwrap();
    let again = load_or_create(dir, &[]).unwrap();
    assert_eq!(read(dir, SERVER_KEY_FILE), again.server_key_pem.as_bytes());
    handshake(
        again.client_config().unwrap(),
        again.server_config().unwrap(),
        "localhost",
    )
    .unwrap();

    fs::remove_file(dir.join(SERVER_KEY_FILE)).unwrap();
    let again = load_or_create(dir, &[]).unwrap();
    assert_eq!(mode(&dir.join(SERVER_KEY_FILE)), 0o600);
    assert_eq!(again.ca_cert_pem, id.ca_cert_pem);
    assert_eq!(again.admin_token, id.admin_token);
}

/// Writes a serving certificate for the default hosts, signed by the CA in
/// `dir`, valid from `not_before` to `not_after` (Unix times).
fn plant_server_cert(dir: &Path, issuer_dir: &Path, not_before: i64, not_after: i64) -> String {
    let ca_key = key_pair(&read(issuer_dir, CA_KEY_FILE)).ok().unwrap();
    let ca_der = single_cert(&read(issuer_dir, CA_CERT_FILE)).ok().unwrap();
    let issuer = Issuer::from_ca_cert_der(&ca_der, ca_key).unwrap();
    let hosts = normalize_hosts(&[]).unwrap();
    let mut params = server_cert_params(&hosts, i64::MAX).unwrap();
    set_validity(&mut params, not_before, not_after);
    let key = KeyPair::generate().unwrap();
    let pem = pem_encode_cert(params.signed_by(&key, &issuer).unwrap().der());
    fs::write(dir.join(SERVER_CERT_FILE), &pem).unwrap();
    fs::write(dir.join(SERVER_KEY_FILE), key.serialize_pem()).unwrap();
    pem
}

#[test]
fn server_cert_close_to_expiry_is_reissued() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let id = load_or_create(dir, &[]).unwrap();
    let now = unix_now();

    // Valid for 60 more days: kept.
    let planted = plant_server_cert(dir, dir, now - DAY_SECS, now + 60 * DAY_SECS);
    assert_eq!(load_or_create(dir, &[]).unwrap().server_cert_pem, planted);

    // Valid for 10 more days: replaced by a fresh one-year certificate.
    let planted = plant_server_cert(dir, dir, now - DAY_SECS, now + 10 * DAY_SECS);
    let again = load_or_create(dir, &[]).unwrap();
    assert_ne!(again.server_cert_pem, planted);
    let der = single_cert(again.server_cert_pem.as_bytes()).ok().unwrap();
    let (_, x509) = x509_parser::parse_x509_certificate(&der).unwrap();
    assert!(x509.validity().not_after.timestamp() > now + 300 * DAY_SECS);

    // Not valid yet: replaced.
    let planted = plant_server_cert(dir, dir, now + 5 * DAY_SECS, now + 100 * DAY_SECS);
    assert_ne!(load_or_create(dir, &[]).unwrap().server_cert_pem, planted);

    assert_eq!(again.ca_cert_pem, id.ca_cert_pem);
}

#[test]
fn server_cert_from_another_ca_is_reissued() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a");
    let other = tmp.path().join("b");
    let id = load_or_create(&dir, &[]).unwrap();
    load_or_create(&other, &[]).unwrap();
    let now = unix_now();
    let planted = plant_server_cert(&dir, &other, now - DAY_SECS, now + 100 * DAY_SECS);
    let again = load_or_create(&dir, &[]).unwrap();
    assert_ne!(again.server_cert_pem, planted);
    handshake(
        id.client_config().unwrap(),
        again.server_config().unwrap(),
        "localhost",
    )
    .unwrap();
}

#[test]
fn invalid_host_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    for bad in ["", "has space", "bad_under/score"] {
        let err = load_or_create(&dir, &hosts(&[bad])).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidHost { host, .. } if host == bad),
            "{bad:?}: {err:?}"
        );
    }
    // Nothing was created for a request that could not be honoured.
    assert!(!dir.exists());
}

#[test]
fn unreadable_dir_is_an_io_error() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    fs::write(&file, "x").unwrap();
    let err = load_or_create(&file.join("sub"), &[]).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, .. } if path.starts_with(&file)),
        "{err:?}"
    );
}

#[test]
fn broken_identity_fields_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let id = load_or_create(tmp.path(), &[]).unwrap();
    let broken = HubIdentity {
        server_key_pem: "nope".into(),
        ..id.clone()
    };
    assert!(matches!(
        broken.server_config(),
        Err(Error::InvalidIdentity {
            field: "server_key_pem",
            ..
        })
    ));
    let other_key = HubIdentity {
        server_key_pem: KeyPair::generate().unwrap().serialize_pem(),
        ..id.clone()
    };
    assert!(matches!(
        other_key.server_config(),
        Err(Error::Tls { side: "server", .. })
    ));
    let broken = HubIdentity {
        ca_cert_pem: String::new(),
        ..id
    };
    assert!(matches!(
        broken.client_config(),
        Err(Error::InvalidIdentity {
            field: "ca_cert_pem",
            ..
        })
    ));
}

#[test]
fn kubeconfig_renders_expected_json() {
    let tmp = tempfile::tempdir().unwrap();
    let id = load_or_create(tmp.path(), &[]).unwrap();
    let kubeconfig = Kubeconfig {
        name: "sim-east",
        server: "https://127.0.0.1:6443/clusters/east",
        ca_pem: &id.ca_cert_pem,
        token: &id.admin_token,
    };
    let doc: serde_json::Value = serde_json::from_str(&kubeconfig.render()).unwrap();
    assert_eq!(doc["apiVersion"], "v1");
    assert_eq!(doc["kind"], "Config");
    assert_eq!(doc["current-context"], "sim-east");
    assert_eq!(doc["clusters"].as_array().unwrap().len(), 1);
    assert_eq!(doc["clusters"][0]["name"], "sim-east");
    assert_eq!(
        doc["clusters"][0]["cluster"]["server"],
        "https://127.0.0.1:6443/clusters/east"
    );
    let ca_data = doc["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .unwrap();
    assert_eq!(STANDARD.decode(ca_data).unwrap(), id.ca_cert_pem.as_bytes());
    assert_eq!(doc["users"].as_array().unwrap().len(), 1);
    assert_eq!(doc["users"][0]["name"], "sim-east");
    assert_eq!(doc["users"][0]["user"]["token"], id.admin_token.as_str());
    assert_eq!(doc["contexts"].as_array().unwrap().len(), 1);
    assert_eq!(doc["contexts"][0]["name"], "sim-east");
    assert_eq!(doc["contexts"][0]["context"]["cluster"], "sim-east");
    assert_eq!(doc["contexts"][0]["context"]["user"], "sim-east");
}

#[test]
fn kubeconfig_render_escapes_strings() {
    let kubeconfig = Kubeconfig {
        name: "we\"ird\nname",
        server: "https://h:1/a\\b",
        ca_pem: "x",
        token: "t",
    };
    let doc: serde_json::Value = serde_json::from_str(&kubeconfig.render()).unwrap();
    assert_eq!(doc["current-context"], "we\"ird\nname");
    assert_eq!(doc["clusters"][0]["cluster"]["server"], "https://h:1/a\\b");
}

#[test]
fn kubeconfig_write_is_private_and_replaces() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("nested/dir/admin.kubeconfig");
    let mut kubeconfig = Kubeconfig {
        name: "flotilla",
        server: "https://127.0.0.1:6443",
        ca_pem: "ca",
        token: "one",
    };
    kubeconfig.write(&path).unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(fs::read_to_string(&path).unwrap(), kubeconfig.render());
    kubeconfig.token = "two";
    kubeconfig.write(&path).unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), kubeconfig.render());
    assert_eq!(mode(&path), 0o600);
    let entries: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
    assert_eq!(entries.len(), 1, "temporary files left behind");
}

#[test]
fn kubectl_reads_the_kubeconfig() {
    let Some(kubectl) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("kubectl"))
            .find(|p| p.is_file())
    }) else {
        println!("kubectl is not on PATH: skipping kubectl_reads_the_kubeconfig");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let id = load_or_create(&tmp.path().join("data"), &[]).unwrap();
    let path = tmp.path().join("data/admin.kubeconfig");
    let server = "https://127.0.0.1:6443/clusters/east";
    Kubeconfig {
        name: "flotilla",
        server,
        ca_pem: &id.ca_cert_pem,
        token: &id.admin_token,
    }
    .write(&path)
    .unwrap();
    let view = |jsonpath: &str| {
        let out = std::process::Command::new(&kubectl)
            .args(["config", "view", "--raw", "--kubeconfig"])
            .arg(&path)
            .args(["-o", &format!("jsonpath={jsonpath}")])
            .env_remove("KUBECONFIG")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(view("{.clusters[0].cluster.server}"), server);
    assert_eq!(view("{.current-context}"), "flotilla");
    assert_eq!(view("{.users[0].user.token}"), id.admin_token);
    let ca_data = view("{.clusters[0].cluster.certificate-authority-data}");
    assert_eq!(STANDARD.decode(ca_data).unwrap(), id.ca_cert_pem.as_bytes());
}

#[test]
fn a_host_no_longer_asked_for_reissues_the_cert_with_the_same_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let first = load_or_create(dir, &hosts(&["hub.example.test", "10.1.2.3"])).unwrap();
    let second = load_or_create(dir, &hosts(&["hub.example.test"])).unwrap();
    assert_eq!(second.ca_cert_pem, first.ca_cert_pem);
    assert_ne!(second.server_cert_pem, first.server_cert_pem);
    let mut covered = sans(&second.server_cert_pem);
    covered.sort();
    assert_eq!(
        covered,
        ["127.0.0.1", "::1", "hub.example.test", "localhost"]
    );
    // The same set again keeps it.
    let third = load_or_create(dir, &hosts(&["hub.example.test"])).unwrap();
    assert_eq!(third.server_cert_pem, second.server_cert_pem);
}

#[test]
fn hosts_are_normalized_or_refused() {
    assert_eq!(
        normalize_host("HUB.Example.test").unwrap(),
        "hub.example.test"
    );
    assert_eq!(normalize_host("[::1]").unwrap(), "::1");
    assert_eq!(normalize_host("10.0.0.1").unwrap(), "10.0.0.1");
    assert!(matches!(
        normalize_host("not a host"),
        Err(Error::InvalidHost { .. })
    ));
}

/// A self-signed certificate of the user's own for `name`, and its key, written to `dir`.
fn own_cert(dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![name.to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let pem = pem_encode_cert(cert.der());
    let (cert_path, key_path) = (dir.join("own.crt"), dir.join("own.key"));
    fs::write(&cert_path, &pem).unwrap();
    fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path, key_path, pem)
}

#[test]
fn a_serving_cert_of_ones_own_is_presented_as_it_is() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (cert, key, pem) = own_cert(tmp.path(), "hub.example.test");
    let id = load_or_create_with(
        &data,
        ServingCert::Files {
            cert: &cert,
            key: &key,
        },
    )
    .unwrap();
    assert!(id.own_serving_cert);
    assert_eq!(id.server_cert_pem, pem);
    // The CA and token exist as ever; no serving certificate was issued.
    assert!(data.join(CA_CERT_FILE).exists() && data.join(ADMIN_TOKEN_FILE).exists());
    assert!(!data.join(SERVER_CERT_FILE).exists());
    // A client trusting the user's certificate gets it, alone (not our CA).
    let mut roots = RootCertStore::empty();
    roots
        .add(single_cert(pem.as_bytes()).ok().unwrap())
        .unwrap();
    let client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let (client, _) = handshake(client, id.server_config().unwrap(), "hub.example.test").unwrap();
    let presented = client.peer_certificates().unwrap();
    assert_eq!(presented.len(), 1);
    assert_eq!(presented[0], single_cert(pem.as_bytes()).ok().unwrap());
}

#[test]
fn a_serving_cert_of_ones_own_must_match_its_key() {
    let tmp = tempfile::tempdir().unwrap();
    let (cert, _, _) = own_cert(tmp.path(), "a.example.test");
    let other = tmp.path().join("other.key");
    fs::write(&other, KeyPair::generate().unwrap().serialize_pem()).unwrap();
    let data = tmp.path().join("data");
    let e = load_or_create_with(
        &data,
        ServingCert::Files {
            cert: &cert,
            key: &other,
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::KeyMismatch { .. }), "{e}");
    let missing = tmp.path().join("missing.key");
    let e = load_or_create_with(
        &data,
        ServingCert::Files {
            cert: &cert,
            key: &missing,
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("missing.key"), "{e}");
    let e = load_or_create_with(
        &data,
        ServingCert::Files {
            cert: &other,
            key: &other,
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidCertificate { .. }), "{e}");
}

#[test]
fn a_kubeconfig_without_a_ca_trusts_the_system() {
    let kubeconfig = Kubeconfig {
        name: "hub",
        server: "https://hub.example.test:6443",
        ca_pem: "",
        token: "t",
    };
    let doc: serde_json::Value = serde_json::from_str(&kubeconfig.render()).unwrap();
    let cluster = doc["clusters"][0]["cluster"].as_object().unwrap();
    assert!(!cluster.contains_key("certificate-authority-data"), "{doc}");
    assert_eq!(cluster["server"], "https://hub.example.test:6443");
}

#[test]
fn an_unusable_signing_key_is_an_error_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    load_or_create(tmp.path(), &[]).unwrap();
    let path = tmp.path().join(SERVICE_ACCOUNT_KEY_FILE);
    fs::write(&path, "not a key").unwrap();
    let e = load_or_create(tmp.path(), &[]).unwrap_err();
    assert!(matches!(e, Error::InvalidKey { .. }), "{e}");
    assert!(e.to_string().contains("sa.key"), "{e}");
    assert_eq!(fs::read(&path).unwrap(), b"not a key");
    // Tokens are signed ES256: another kind of key is refused, not used.
    let ed25519 = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    fs::write(&path, ed25519.serialize_pem()).unwrap();
    let e = load_or_create(tmp.path(), &[]).unwrap_err();
    assert!(e.to_string().contains("sa.key"), "{e}");
}

/// A client configuration that trusts `id`'s CA and presents `cert` with `key`.
fn client_with_certificate(id: &HubIdentity, cert_pem: &str, key: &KeyPair) -> ClientConfig {
    let mut roots = RootCertStore::empty();
    roots
        .add(single_cert(id.ca_cert_pem.as_bytes()).ok().unwrap())
        .unwrap();
    let key = private_key_der(key.serialize_pem().as_bytes())
        .ok()
        .unwrap();
    ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(vec![single_cert(cert_pem.as_bytes()).ok().unwrap()], key)
        .unwrap()
}

#[test]
fn the_server_asks_for_a_client_certificate_and_leaves_its_chain_to_the_request() {
    let tmp = tempfile::tempdir().unwrap();
    let id = load_or_create(tmp.path(), &[]).unwrap();
    // Without a certificate: the handshake completes, and the server has none.
    let (_, server) = handshake(
        id.client_config().unwrap(),
        id.server_config().unwrap(),
        "localhost",
    )
    .unwrap();
    assert!(server.peer_certificates().is_none());
    // With one the CA issued: the server has its chain, which verifies.
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, "alice");
    let csr = params.serialize_request(&key).unwrap().pem().unwrap();
    let request = CertificateRequest::parse(csr.as_bytes()).unwrap();
    let cert = id
        .sign_client_certificate(&request, Duration::from_secs(3600))
        .unwrap();
    let (_, server) = handshake(
        client_with_certificate(&id, &cert, &key),
        id.server_config().unwrap(),
        "localhost",
    )
    .unwrap();
    let chain = server.peer_certificates().unwrap();
    let found = id
        .client_ca()
        .unwrap()
        .verify(chain, UnixTime::now())
        .unwrap();
    assert_eq!(found.unwrap().user, "alice");
    // One of another CA: still a handshake (so that the request gets a 401 with its
    // reason logged), but its chain does not verify.
    let other_dir = tempfile::tempdir().unwrap();
    let other = load_or_create(other_dir.path(), &[]).unwrap();
    let foreign = other
        .sign_client_certificate(&request, Duration::from_secs(3600))
        .unwrap();
    let (_, server) = handshake(
        client_with_certificate(&id, &foreign, &key),
        id.server_config().unwrap(),
        "localhost",
    )
    .unwrap();
    let chain = server.peer_certificates().unwrap();
    assert!(
        id.client_ca()
            .unwrap()
            .verify(chain, UnixTime::now())
            .is_err()
    );
    // A certificate whose key the client does not hold fails the handshake.
    let stranger = KeyPair::generate().unwrap();
    let mut impostor = id.client_config().unwrap();
    impostor.client_auth_cert_resolver =
        Arc::new(Presents(Arc::new(rustls::sign::CertifiedKey::new(
            vec![single_cert(cert.as_bytes()).ok().unwrap()],
            provider()
                .key_provider
                .load_private_key(
                    private_key_der(stranger.serialize_pem().as_bytes())
                        .ok()
                        .unwrap(),
                )
                .unwrap(),
        ))));
    assert!(handshake(impostor, id.server_config().unwrap(), "localhost").is_err());
}

/// Presents one certificate and key, whether or not they belong together.
#[derive(Debug)]
struct Presents(Arc<rustls::sign::CertifiedKey>);

impl rustls::client::ResolvesClientCert for Presents {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

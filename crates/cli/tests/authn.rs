//! Who a request is from, end to end: a real `flotilla hub`, kubectl 1.32 with
//! kubeconfigs written here, ServiceAccount tokens (TokenRequest, long-lived token
//! Secrets, the issuer's JWKS), client certificates from CertificateSigningRequests, an
//! OIDC issuer of the test's own on loopback, 401s and what the audit log says of them,
//! and the data directory's file modes.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};
use support::identity::{
    CLIENT, certificate_request, csr_manifest, kubeconfig_with, run, stderr, token,
    token_kubeconfig, unauthorized, whoami,
};
use support::{Hub, condition, eventually};

#[test]
fn a_service_account_token_names_its_account_until_the_account_is_deleted() {
    let hub = Hub::start();
    hub.ok(&["create", "namespace", "shop"]);
    hub.ok(&["create", "serviceaccount", "ci", "-n", "shop"]);
    let uid = hub.json(&["get", "serviceaccount", "ci", "-n", "shop"])["metadata"]["uid"].clone();
    let ci = token_kubeconfig(
        &hub,
        "ci",
        &token(&hub, &["ci", "-n", "shop", "--duration", "1h"]),
    );
    let user = whoami(&ci).unwrap();
    assert_eq!(user["username"], "system:serviceaccount:shop:ci");
    assert_eq!(user["uid"], uid);
    assert_eq!(
        user["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:shop",
            "system:authenticated"
        ])
    );
    assert_eq!(
        user["extra"]["authentication.flotilla.io/cluster-name"],
        json!(["root"])
    );
    assert!(
        user["extra"]["authentication.kubernetes.io/credential-id"][0]
            .as_str()
            .unwrap()
            .starts_with("JTI=")
    );
    // Deleted: the very next request is refused.
    hub.ok(&["delete", "serviceaccount", "ci", "-n", "shop"]);
    assert!(unauthorized(&ci), "{:?}", whoami(&ci));
    // Re-created under the same name: another uid, and the old token stays refused.
    hub.ok(&["create", "serviceaccount", "ci", "-n", "shop"]);
    assert!(unauthorized(&ci), "{:?}", whoami(&ci));
    // A new token of the new account works.
    let again = token_kubeconfig(&hub, "ci-2", &token(&hub, &["ci", "-n", "shop"]));
    assert_eq!(
        whoami(&again).unwrap()["username"],
        "system:serviceaccount:shop:ci"
    );
}

#[test]
fn token_requests_bind_check_and_refuse_as_kubernetes() {
    let hub = Hub::start();
    hub.ok(&["create", "namespace", "shop"]);
    hub.ok(&["create", "serviceaccount", "ci", "-n", "shop"]);
    hub.ok(&[
        "create",
        "secret",
        "generic",
        "held",
        "-n",
        "shop",
        "--from-literal=a=b",
    ]);
    // Bound to a Secret: valid while the Secret exists.
    let bound = token_kubeconfig(
        &hub,
        "bound",
        &token(
            &hub,
            &[
                "ci",
                "-n",
                "shop",
                "--bound-object-kind",
                "Secret",
                "--bound-object-name",
                "held",
            ],
        ),
    );
    assert_eq!(
        whoami(&bound).unwrap()["username"],
        "system:serviceaccount:shop:ci"
    );
    hub.ok(&["delete", "secret", "held", "-n", "shop"]);
    assert!(unauthorized(&bound));
    // Bound to a Secret that does not exist: refused, nothing issued.
    let e = hub.fails(&[
        "create",
        "token",
        "ci",
        "-n",
        "shop",
        "--bound-object-kind",
        "Secret",
        "--bound-object-name",
        "missing",
    ]);
    assert!(e.contains("not found"), "{e}");
    // For another audience: the hub's API does not take it.
    let vault = token_kubeconfig(
        &hub,
        "vault",
        &token(&hub, &["ci", "-n", "shop", "--audience", "vault"]),
    );
    assert!(unauthorized(&vault));
    // Too short, and for an account that does not exist.
    let e = hub.fails(&["create", "token", "ci", "-n", "shop", "--duration", "5m"]);
    assert!(
        e.contains("may not specify a duration less than 10 minutes"),
        "{e}"
    );
    let e = hub.fails(&["create", "token", "nobody", "-n", "shop"]);
    assert!(e.contains("not found"), "{e}");
}

#[test]
fn a_long_lived_token_secret_is_filled_and_works_while_its_account_exists() {
    let hub = Hub::start();
    hub.ok(&["create", "namespace", "shop"]);
    hub.ok(&["create", "serviceaccount", "build", "-n", "shop"]);
    let uid = hub.json(&["get", "serviceaccount", "build", "-n", "shop"])["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let secret = |name: &str, account: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
            "metadata": {"name": name, "namespace": "shop",
                "annotations": {"kubernetes.io/service-account.name": account}}})
        .to_string()
    };
    hub.create(&secret("build-token", "build"));
    let filled = eventually("the token Secret is filled", || {
        let s = hub.json(&["get", "secret", "build-token", "-n", "shop"]);
        match s["data"]["token"].as_str() {
            Some(_) => Ok(s),
            None => Err(s.to_string()),
        }
    });
    let data = |field: &str| {
        String::from_utf8(
            STANDARD
                .decode(filled["data"][field].as_str().unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(data("namespace"), "shop");
    assert!(data("ca.crt").starts_with("-----BEGIN CERTIFICATE-----"));
    assert_eq!(
        filled["metadata"]["annotations"]["kubernetes.io/service-account.uid"],
        uid.as_str()
    );
    let build = token_kubeconfig(&hub, "build", &data("token"));
    assert_eq!(
        whoami(&build).unwrap()["username"],
        "system:serviceaccount:shop:build"
    );
    // One that names no account is refused, as Kubernetes refuses it.
    let unnamed = json!({"apiVersion": "v1", "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "unnamed", "namespace": "shop"}});
    let out = hub.kubectl_with(&["create", "-f", "-"], Some(&unnamed.to_string()));
    assert!(
        stderr(&out)
            .contains("metadata.annotations[kubernetes.io/service-account.name]: Required value"),
        "{}",
        stderr(&out)
    );
    // A Secret naming an account that does not exist is deleted.
    hub.create(&secret("ghost-token", "ghost"));
    eventually("the ghost's token Secret is deleted", || {
        let out = hub.kubectl(&["get", "secret", "ghost-token", "-n", "shop"]);
        match stderr(&out).contains("NotFound") || stderr(&out).contains("not found") {
            true => Ok(()),
            false => Err(stderr(&out)),
        }
    });
    // The account deleted: its token stops at once, its Secret goes.
    hub.ok(&["delete", "serviceaccount", "build", "-n", "shop"]);
    assert!(unauthorized(&build));
    eventually("the deleted account's token Secret is deleted", || {
        let out = hub.kubectl(&["get", "secret", "build-token", "-n", "shop"]);
        match out.status.success() {
            false => Ok(()),
            true => Err("still there".into()),
        }
    });
}

#[test]
fn the_issuers_jwks_alone_verifies_a_hub_issued_token() {
    flotilla_apiserver::auth::jwt::install();
    let hub = Hub::start();
    hub.ok(&["create", "namespace", "shop"]);
    hub.ok(&["create", "serviceaccount", "ci", "-n", "shop"]);
    let issued = token(&hub, &["ci", "-n", "shop"]);
    // Read without credentials, as other systems read them (kubectl would prompt for
    // some).
    let raw = |path: &str| -> Value {
        let (status, body) = anonymous_get(&hub, path);
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap()
    };
    let discovery = raw("/.well-known/openid-configuration");
    let issuer = discovery["issuer"].as_str().unwrap().to_owned();
    assert_eq!(issuer, format!("https://127.0.0.1:{}", hub.port));
    assert_eq!(
        discovery["jwks_uri"],
        format!("https://127.0.0.1:{}/openid/v1/jwks", hub.port)
    );
    let jwks: jsonwebtoken::jwk::JwkSet = serde_json::from_value(raw("/openid/v1/jwks")).unwrap();
    let header = jsonwebtoken::decode_header(&issued).unwrap();
    let jwk = jwks.find(header.kid.as_deref().unwrap()).unwrap();
    let key = jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    validation.set_issuer(&[&issuer]);
    validation.set_audience(&[&issuer]);
    let claims = jsonwebtoken::decode::<Value>(&issued, &key, &validation)
        .unwrap()
        .claims;
    assert_eq!(claims["sub"], "system:serviceaccount:shop:ci");
    assert_eq!(claims["kubernetes.io"]["namespace"], "shop");
    assert_eq!(claims["kubernetes.io"]["serviceaccount"]["name"], "ci");
    // Everything else without credentials stays 401.
    let (status, body) = anonymous_get(&hub, "/api/v1/namespaces");
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["reason"],
        "Unauthorized"
    );
}

/// GET `path` of the hub over HTTPS with no credentials at all: the status and body.
fn anonymous_get(hub: &Hub, path: &str) -> (u16, String) {
    use std::io::Read as _;
    let config: Value = serde_json::from_slice(&std::fs::read(hub.kubeconfig()).unwrap()).unwrap();
    let ca = STANDARD
        .decode(
            config["clusters"][0]["cluster"]["certificate-authority-data"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile_certs(&ca) {
        roots.add(cert).unwrap();
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(tls), name).unwrap();
    let socket = std::net::TcpStream::connect(("127.0.0.1", hub.port)).unwrap();
    let mut stream = rustls::StreamOwned::new(connection, socket);
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    // The server may close without close_notify once it has answered.
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The certificates of a PEM bundle.
fn rustls_pemfile_certs(pem: &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject as _;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .map(Result::unwrap)
        .collect()
}

#[test]
fn a_token_of_a_logical_cluster_is_valid_there_alone() {
    let hub = Hub::start();
    hub.create(r#"{"apiVersion":"tenancy.flotilla.io/v1alpha1","kind":"LogicalCluster","metadata":{"name":"east"}}"#);
    let in_east = |args: &[&str]| {
        let out = hub.kubectl_in("east", args, None);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    in_east(&["create", "namespace", "shop"]);
    in_east(&["create", "serviceaccount", "ci", "-n", "shop"]);
    let issued = in_east(&["create", "token", "ci", "-n", "shop"])
        .trim()
        .to_owned();
    let east = kubeconfig_with(&hub, "east-ci", json!({"token": issued}), "/clusters/east");
    let user = whoami(&east).unwrap();
    assert_eq!(user["username"], "system:serviceaccount:shop:ci");
    assert_eq!(
        user["extra"]["authentication.flotilla.io/cluster-name"],
        json!(["east"])
    );
    // The same token at the root (where a shop/ci may well exist too): refused.
    hub.ok(&["create", "namespace", "shop"]);
    hub.ok(&["create", "serviceaccount", "ci", "-n", "shop"]);
    let root = token_kubeconfig(&hub, "root-ci", &issued);
    assert!(unauthorized(&root));
    // And a root token in east.
    let root_token = token(&hub, &["ci", "-n", "shop"]);
    let elsewhere = kubeconfig_with(
        &hub,
        "root-in-east",
        json!({"token": root_token}),
        "/clusters/east",
    );
    assert!(unauthorized(&elsewhere));
}

#[test]
fn an_approved_csr_gives_alice_a_certificate_that_names_her() {
    let hub = Hub::start();
    let (request, key) = certificate_request("alice", "team-a");
    hub.create(&csr_manifest(
        "alice",
        &request,
        CLIENT,
        &["client auth", "digital signature"],
    ));
    let csr = hub.json(&["get", "csr", "alice"]);
    // Who asked is the server's to say.
    assert_eq!(csr["spec"]["username"], "flotilla:admin");
    assert_eq!(
        csr["spec"]["groups"],
        json!(["system:masters", "system:authenticated"])
    );
    assert!(csr["status"]["certificate"].is_null());
    hub.ok(&["certificate", "approve", "alice"]);
    let signed = eventually("alice's certificate is signed", || {
        let csr = hub.json(&["get", "csr", "alice"]);
        match csr["status"]["certificate"].as_str() {
            Some(certificate) => Ok(certificate.to_owned()),
            None => Err(csr["status"].to_string()),
        }
    });
    let approved = hub.json(&["get", "csr", "alice"]);
    assert_eq!(condition(&approved, "Approved").unwrap()["status"], "True");
    let alice = kubeconfig_with(
        &hub,
        "alice",
        json!({"client-certificate-data": signed,
            "client-key-data": STANDARD.encode(key.serialize_pem())}),
        "",
    );
    let user = whoami(&alice).unwrap();
    assert_eq!(user["username"], "alice");
    assert_eq!(user["groups"], json!(["team-a", "system:authenticated"]));
    // Approved and Denied exclude each other: denying it now is refused.
    let e = hub.fails(&["certificate", "deny", "alice", "--force"]);
    assert!(
        e.contains("already") || e.contains("mutually exclusive"),
        "{e}"
    );
    // A certificate of another CA names nobody here.
    let other = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::default();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&other).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca, &other);
    let mut forged = rcgen::CertificateParams::default();
    forged
        .distinguished_name
        .push(rcgen::DnType::CommonName, "alice");
    forged.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let forged = forged.signed_by(&key, &issuer).unwrap();
    drop(ca_cert);
    let mallory = kubeconfig_with(
        &hub,
        "mallory",
        json!({"client-certificate-data": STANDARD.encode(forged.pem()),
            "client-key-data": STANDARD.encode(key.serialize_pem())}),
        "",
    );
    assert!(unauthorized(&mallory), "{:?}", whoami(&mallory));
}

#[test]
fn bad_csrs_are_refused_and_a_usage_the_signer_refuses_fails_without_a_certificate() {
    let hub = Hub::start();
    let (request, _) = certificate_request("bob", "team-b");
    for (name, manifest, why) in [
        (
            "unknown-signer",
            csr_manifest(
                "unknown-signer",
                &request,
                "example.com/mine",
                &["client auth"],
            ),
            "spec.signerName: Unsupported value",
        ),
        (
            "garbage",
            csr_manifest("garbage", "garbage", CLIENT, &["client auth"]),
            "spec.request",
        ),
    ] {
        let out = hub.kubectl_with(&["create", "-f", "-"], Some(&manifest));
        assert!(!out.status.success());
        let e = stderr(&out);
        assert!(e.contains("is invalid") && e.contains(why), "{name}: {e}");
        let out = hub.kubectl(&["get", "csr", name]);
        assert!(stderr(&out).contains("not found"), "{name} was written");
    }
    // Denied: never signed.
    hub.create(&csr_manifest("denied", &request, CLIENT, &["client auth"]));
    hub.ok(&["certificate", "deny", "denied"]);
    // A server usage from the client signer: Failed, no certificate.
    hub.create(&csr_manifest(
        "server",
        &request,
        CLIENT,
        &["client auth", "server auth"],
    ));
    hub.ok(&["certificate", "approve", "server"]);
    let failed = eventually("the server-usage request fails", || {
        let csr = hub.json(&["get", "csr", "server"]);
        match condition(&csr, "Failed") {
            Some(_) => Ok(csr),
            None => Err(csr["status"].to_string()),
        }
    });
    assert!(failed["status"]["certificate"].is_null());
    assert!(
        condition(&failed, "Failed").unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("server auth")
    );
    // The signer handles changes in order: the denied one, earlier, was left alone.
    let denied = hub.json(&["get", "csr", "denied"]);
    assert!(condition(&denied, "Denied").is_some());
    assert!(denied["status"]["certificate"].is_null());
}

/// A small OIDC issuer on loopback: discovery and a key set over HTTPS, with a CA of its
/// own (written to `ca.pem` in `dir`). Serves until the test process ends.
struct TestIssuer {
    url: String,
    ca_file: PathBuf,
    key_der: Vec<u8>,
}

impl TestIssuer {
    fn start(dir: &Path) -> TestIssuer {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::default();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "test issuer CA");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::from_params(&ca, &ca_key);
        let server_key = rcgen::KeyPair::generate().unwrap();
        let server_cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into()])
            .unwrap()
            .signed_by(&server_key, &issuer)
            .unwrap();
        let ca_file = dir.join("oidc-ca.pem");
        std::fs::write(&ca_file, ca_cert.pem()).unwrap();

        let signing = rcgen::KeyPair::generate().unwrap();
        let point = rcgen::PublicKeyData::der_bytes(&signing).to_vec();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        );
        let discovery = json!({"issuer": url, "jwks_uri": format!("{url}/keys"),
            "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"]});
        let keys = json!({"keys": [{"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig",
            "kid": "k1", "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..])}]});
        let tls = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![server_cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
            )
            .unwrap(),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let Ok(connection) = rustls::ServerConnection::new(tls.clone()) else {
                    continue;
                };
                let mut tls = rustls::StreamOwned::new(connection, stream);
                let mut reader = BufReader::new(&mut tls);
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                // The rest of the head.
                loop {
                    let mut header = String::new();
                    match reader.read_line(&mut header) {
                        Ok(n) if n > 2 => {}
                        _ => break,
                    }
                }
                let path = line.split_whitespace().nth(1).unwrap_or("");
                let (status, body) = match path {
                    "/.well-known/openid-configuration" => ("200 OK", discovery.to_string()),
                    "/keys" => ("200 OK", keys.to_string()),
                    _ => ("404 Not Found", "{}".to_owned()),
                };
                let _ = write!(
                    tls,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.flush();
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        });
        TestIssuer {
            url,
            ca_file,
            key_der: signing.serialize_der(),
        }
    }

    /// An ID token of `claims` signed with the issuer's key as `k1`, or with `key` (PKCS#8).
    fn token(&self, claims: &Value, key: Option<&[u8]>) -> String {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some("k1".into());
        let key = jsonwebtoken::EncodingKey::from_ec_der(key.unwrap_or(&self.key_der));
        jsonwebtoken::encode(&header, claims, &key).unwrap()
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[test]
fn oidc_users_of_the_test_issuer_are_authenticated_and_bad_tokens_are_401s_in_the_audit_log() {
    flotilla_apiserver::auth::jwt::install();
    let dir = tempfile::tempdir().unwrap();
    let issuer = TestIssuer::start(dir.path());
    let log = dir.path().join("audit.log");
    let hub = Hub::start_with(&[
        "--oidc-issuer-url",
        &issuer.url,
        "--oidc-client-id",
        "flotilla",
        "--oidc-groups-claim",
        "groups",
        "--oidc-groups-prefix",
        "oidc:",
        "--oidc-signing-algs",
        "ES256",
        "--oidc-ca-file",
        issuer.ca_file.to_str().unwrap(),
        "--audit-log-path",
        log.to_str().unwrap(),
    ]);
    let claims = json!({"iss": issuer.url, "aud": "flotilla", "sub": "jane",
        "groups": ["dev", "ops"], "iat": now(), "exp": now() + 600});
    let jane = token_kubeconfig(&hub, "jane", &issuer.token(&claims, None));
    let user = whoami(&jane).unwrap();
    assert_eq!(user["username"], format!("{}#jane", issuer.url));
    assert_eq!(
        user["groups"],
        json!(["oidc:dev", "oidc:ops", "system:authenticated"])
    );
    let with = |change: Value| {
        let mut changed = claims.clone();
        for (k, v) in change.as_object().unwrap() {
            changed[k] = v.clone();
        }
        changed
    };
    let other_key = rcgen::KeyPair::generate().unwrap().serialize_der();
    let cases = [
        (
            "bad-signature",
            issuer.token(&claims, Some(&other_key)),
            "signature does not verify",
        ),
        (
            "wrong-audience",
            issuer.token(&with(json!({"aud": "someone-else"})), None),
            "audiences are not accepted",
        ),
        (
            "expired",
            issuer.token(&with(json!({"exp": now() - 10})), None),
            "has expired",
        ),
    ];
    for (name, token, _) in &cases {
        let config = token_kubeconfig(&hub, name, token);
        assert!(unauthorized(&config), "{name}: {:?}", whoami(&config));
    }
    // Each 401 is an audit event with no user and why, which the client was not told.
    eventually("the 401s are in the audit log", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let refused: Vec<Value> = text
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|e| e["responseStatus"]["code"] == 401)
            .collect();
        for (name, _, why) in &cases {
            let found = refused.iter().any(|e| {
                e["user"] == json!({})
                    && e["stage"] == "ResponseStarted"
                    && e["annotations"]["authentication.flotilla.io/failure-reason"]
                        .as_str()
                        .is_some_and(|r| r.contains(why))
            });
            if !found {
                return Err(format!(
                    "{name}: no 401 saying {why:?} in {} events",
                    refused.len()
                ));
            }
        }
        Ok(())
    });
    // What the client heard: that it must log in, nothing of why.
    let out = run(
        &token_kubeconfig(&hub, "again", &cases[2].1),
        &["get", "ns"],
    );
    let e = stderr(&out);
    assert!(e.contains("provide credentials"), "{e}");
    assert!(!e.contains("expired"), "{e}");
}

#[test]
fn the_data_directory_and_what_the_hub_writes_in_it_are_the_hubs_alone() {
    let hub = Hub::start();
    // Writes, so that the store's write-ahead log and shared memory exist.
    hub.ok(&["create", "namespace", "shop"]);
    let dir = hub.dir.path();
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dir), 0o700);
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            continue;
        }
        let expected = match name.as_str() {
            // Certificates are public.
            "ca.crt" | "server.crt" => 0o644,
            _ => 0o600,
        };
        assert_eq!(mode(&path), expected, "{name}");
        seen.push(name);
    }
    for name in [
        "admin.kubeconfig",
        "admin.token",
        "ca.key",
        "sa.key",
        "server.key",
        "hub.db",
        "hub.db-wal",
        "hub.db-shm",
        "hub.db.lock",
    ] {
        assert!(seen.iter().any(|s| s == name), "{name} not in {seen:?}");
    }
}

//! Identities other than the admin's for end-to-end tests: kubeconfigs with a
//! ServiceAccount token or a client certificate the hub signed, kubectl run with them,
//! and what a refusal looks like.

use std::path::{Path, PathBuf};
use std::process::Output;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::{Hub, condition, eventually, kubectl_binary, run_kubectl};

/// The signer of the hub's client certificates.
pub const CLIENT: &str = "kubernetes.io/kube-apiserver-client";

/// A kubeconfig like the admin's but with `user` as its credentials, and its server's
/// path followed by `suffix` (`/clusters/east`, or nothing).
pub fn kubeconfig_with(hub: &Hub, name: &str, user: Value, suffix: &str) -> PathBuf {
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(hub.kubeconfig()).unwrap()).unwrap();
    config["users"][0]["user"] = user;
    let server = config["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap()
        .to_owned();
    config["clusters"][0]["cluster"]["server"] = json!(format!("{server}{suffix}"));
    let path = hub.dir.path().join(format!("{name}.kubeconfig"));
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// A kubeconfig with bearer token `token`.
pub fn token_kubeconfig(hub: &Hub, name: &str, token: &str) -> PathBuf {
    kubeconfig_with(hub, name, json!({"token": token}), "")
}

/// Runs kubectl with `kubeconfig`; its output.
pub fn run(kubeconfig: &Path, args: &[&str]) -> Output {
    run_with(kubeconfig, args, None)
}

/// Runs kubectl with `kubeconfig`, `stdin` as its input; its output.
pub fn run_with(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    run_kubectl(&kubectl_binary(), kubeconfig, args, stdin)
}

/// kubectl's stderr.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// kubectl's stdout and stderr.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `kubectl auth whoami` with `kubeconfig`: the user, or kubectl's error.
pub fn whoami(kubeconfig: &Path) -> Result<Value, String> {
    let out = run(kubeconfig, &["auth", "whoami", "-o", "json"]);
    if !out.status.success() {
        return Err(stderr(&out));
    }
    let review: Value = serde_json::from_slice(&out.stdout).unwrap();
    Ok(review["status"]["userInfo"].clone())
}

/// Whether the hub answers `kubeconfig`'s credentials with 401.
pub fn unauthorized(kubeconfig: &Path) -> bool {
    whoami(kubeconfig).is_err_and(|e| e.contains("Unauthorized"))
}

/// `kubectl create token ARGS…` as the admin: the token.
pub fn token(hub: &Hub, args: &[&str]) -> String {
    let mut all = vec!["create", "token"];
    all.extend(args);
    hub.ok(&all).trim().to_owned()
}

/// Checks that kubectl `args` was refused with 403 (a Forbidden `Status`, which kubectl
/// shows as `Error from server (Forbidden): …`, or `error: failed to create …: …` for
/// its `create` commands); its stderr.
pub fn assert_forbidden(args: &[&str], out: &Output) -> String {
    let said = text(out);
    assert!(
        !out.status.success(),
        "kubectl {args:?} should be refused: {said}"
    );
    assert!(
        said.contains("Error from server (Forbidden)") || said.contains("failed to create"),
        "kubectl {args:?}: {said}"
    );
    assert!(said.contains(" forbidden: "), "kubectl {args:?}: {said}");
    stderr(out)
}

/// A PEM CSR for a new key with common name `cn` and organization `org`, and the key.
pub fn certificate_request(cn: &str, org: &str) -> (String, rcgen::KeyPair) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, org);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let csr = params.serialize_request(&key).unwrap().pem().unwrap();
    (csr, key)
}

/// A CertificateSigningRequest `name` of PEM `request` for `signer` (claiming to be
/// `mallory` in `system:masters`, which the server overwrites).
pub fn csr_manifest(name: &str, request: &str, signer: &str, usages: &[&str]) -> String {
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": STANDARD.encode(request), "signerName": signer,
            "expirationSeconds": 86400, "usages": usages,
            "username": "mallory", "groups": ["system:masters"]}})
    .to_string()
}

/// The certificate (base64 PEM) the hub signs for approved CSR `name`, once it has.
pub fn signed_certificate(hub: &Hub, name: &str) -> String {
    eventually(&format!("{name}'s certificate is signed"), || {
        let csr = hub.json(&["get", "csr", name]);
        match csr["status"]["certificate"].as_str() {
            Some(certificate) => Ok(certificate.to_owned()),
            None => Err(csr["status"].to_string()),
        }
    })
}

/// A kubeconfig with client certificate `certificate` (base64 PEM) and its `key`.
pub fn certificate_kubeconfig(
    hub: &Hub,
    name: &str,
    certificate: &str,
    key: &rcgen::KeyPair,
) -> PathBuf {
    kubeconfig_with(
        hub,
        name,
        json!({"client-certificate-data": certificate,
            "client-key-data": STANDARD.encode(key.serialize_pem())}),
        "",
    )
}

/// User `cn` in group `org` with a client certificate: a CSR the admin creates and
/// approves with `kubectl certificate approve`; the kubeconfig with its certificate.
pub fn certificate_user(hub: &Hub, cn: &str, org: &str) -> PathBuf {
    let (request, key) = certificate_request(cn, org);
    hub.create(&csr_manifest(
        cn,
        &request,
        CLIENT,
        &["client auth", "digital signature"],
    ));
    hub.ok(&["certificate", "approve", cn]);
    let signed = signed_certificate(hub, cn);
    let approved = hub.json(&["get", "csr", cn]);
    assert_eq!(condition(&approved, "Approved").unwrap()["status"], "True");
    certificate_kubeconfig(hub, cn, &signed, &key)
}

//! `flotilla hub` start-up safety and its serving certificate, with real hub processes and
//! the real kubectl: a damaged or emptied store is refused, a second hub on the same data
//! directory changes nothing, and the certificate flags (`--tls-san`, `--tls-cert-file`,
//! `--advertise-address`) do what they say.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{Hub, free_port, kubectl_command};

/// A `flotilla hub` process started by hand (its readiness is the test's business);
/// killed on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn hub_command(dir: &Path, port: u16, args: &[&str]) -> Command {
    hub_listening(dir, &format!("127.0.0.1:{port}"), args)
}

fn hub_listening(dir: &Path, listen: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_flotilla"));
    command
        .args(["hub", "--data-dir"])
        .arg(dir)
        .args(["--listen", listen])
        .args(args)
        .env("RUST_LOG", "warn");
    command
}

/// Runs `command` (a hub), which must exit within a minute (else panics naming `who`);
/// its exit status and stderr.
fn exit_of(mut command: Command, who: &str) -> (ExitStatus, String) {
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut process = Process(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = process.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "{who} kept running");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut process.0.stderr.take().unwrap(), &mut stderr).unwrap();
    (status, stderr)
}

/// Runs `flotilla hub` on `dir`, which must exit (within a minute) with a failure; its
/// stderr.
fn hub_fails(dir: &Path, args: &[&str]) -> String {
    let (status, stderr) = exit_of(hub_command(dir, free_port(), args), "the hub");
    assert!(!status.success(), "the hub exited successfully: {stderr}");
    stderr
}

/// The one `error:` line of a failed start; the hub's stderr must hold nothing else.
fn one_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "not one line: {stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    lines[0]
}

/// `count` ConfigMaps of about 2 KB each in one `kubectl create`.
fn create_configmaps(hub: &Hub, count: usize) {
    let items: Vec<serde_json::Value> = (0..count)
        .map(|i| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i:04}"), "namespace": "default"},
                "data": {"payload": "x".repeat(2000)},
            })
        })
        .collect();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    hub.create(&list.to_string());
}

#[test]
fn a_store_with_damaged_pages_is_refused_naming_the_file() {
    let hub = Hub::start();
    create_configmaps(&hub, 300);
    let dir = hub.stop();
    let db = dir.path().join("hub.db");
    // Pages of values (not the log, which opening reads): a leaf in the middle of the
    // values table, which holds ConfigMaps of the middle of the run.
    let (page, page_size) = {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        let mut leaves: Vec<i64> = conn
            .prepare("SELECT pageno FROM dbstat WHERE name = 'data' AND pagetype = 'leaf'")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        leaves.sort_unstable();
        assert!(leaves.len() > 50, "{} leaves", leaves.len());
        let page_size: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        (leaves[leaves.len() / 2], page_size)
    };
    let mut bytes = std::fs::read(&db).unwrap();
    let start = usize::try_from((page - 1) * page_size).unwrap();
    let end = start + usize::try_from(page_size).unwrap();
    bytes[start..end].fill(0xa5);
    std::fs::write(&db, bytes).unwrap();

    let line = one_line(&hub_fails(dir.path(), &[])).to_owned();
    assert!(line.contains(&db.display().to_string()), "{line}");
    assert!(line.contains("damaged pages"), "{line}");
    assert!(line.contains("--skip-store-check"), "{line}");

    // Asked to skip the check, it serves; the damage shows where it is.
    let hub = Hub::start_in(dir, &["--skip-store-check"]);
    hub.fails(&["get", "configmaps", "-n", "default"]);
}

#[test]
fn an_empty_or_missing_store_where_a_hub_was_needs_init() {
    let hub = Hub::start();
    hub.create(r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"shop"}}"#);
    let dir = hub.stop();
    let db = dir.path().join("hub.db");
    for wal in ["hub.db-wal", "hub.db-shm"] {
        let _ = std::fs::remove_file(dir.path().join(wal));
    }
    std::fs::write(&db, b"").unwrap();
    let line = one_line(&hub_fails(dir.path(), &[])).to_owned();
    assert!(
        line.contains(&format!("the store {} is empty", db.display())),
        "{line}"
    );
    assert!(line.contains("--init"), "{line}");
    assert_eq!(std::fs::metadata(&db).unwrap().len(), 0, "left as it was");

    std::fs::remove_file(&db).unwrap();
    let line = one_line(&hub_fails(dir.path(), &[])).to_owned();
    assert!(line.contains("is missing"), "{line}");
    assert!(!db.exists(), "not created");

    // --init starts over: an empty hub with the same CA and token.
    let ca = std::fs::read(dir.path().join("ca.crt")).unwrap();
    let hub = Hub::start_in(dir, &["--init"]);
    hub.ok(&["get", "namespace", "default"]);
    hub.fails(&["get", "namespace", "shop"]);
    assert_eq!(std::fs::read(hub.dir.path().join("ca.crt")).unwrap(), ca);
}

/// Every file under `dir` and its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(snapshot(&path));
        } else {
            files.insert(path.clone(), std::fs::read(&path).unwrap());
        }
    }
    files
}

#[test]
fn a_second_hub_on_the_same_data_dir_changes_nothing() {
    let a = Hub::start();
    a.create(r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"shop"}}"#);
    let before = snapshot(a.dir.path());
    // Another listening address: a hub that got past the lock would issue a serving
    // certificate for it and write a kubeconfig.
    let port = free_port();
    let (status, stderr) = exit_of(
        hub_listening(a.dir.path(), &format!("127.0.0.2:{port}"), &[]),
        "hub B",
    );
    assert!(!status.success(), "{stderr}");
    let line = one_line(&stderr);
    assert!(line.contains("locked by another process"), "{line}");
    assert!(line.contains(&a.dir.path().display().to_string()), "{line}");
    let after = snapshot(a.dir.path());
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    for (path, bytes) in &before {
        assert!(after[path] == *bytes, "{} changed", path.display());
    }
    // A still serves, with the certificate it started with.
    a.ok(&["get", "namespace", "shop"]);
    a.create(r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"more"}}"#);
}

/// kubectl against `hub` asking for `name` in the certificate; its output.
fn kubectl_as(hub: &Hub, name: &str) -> std::process::Output {
    hub.kubectl_command()
        .args(["--tls-server-name", name, "get", "namespace", "default"])
        .output()
        .unwrap()
}

#[test]
fn tls_sans_go_into_the_serving_certificate_and_a_new_set_keeps_the_ca() {
    let hub = Hub::start_with(&["--tls-san", "hub.example.test", "--tls-san", "10.9.8.7"]);
    let out = kubectl_as(&hub, "hub.example.test");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl_as(&hub, "other.example.test");
    assert!(!out.status.success(), "a name not asked for is not in it");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("x509"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let old_kubeconfig = std::fs::read_to_string(hub.kubeconfig()).unwrap();
    let ca = std::fs::read(hub.dir.path().join("ca.crt")).unwrap();
    let cert = std::fs::read(hub.dir.path().join("server.crt")).unwrap();

    // Another set: the certificate is issued again, by the same CA.
    let dir = hub.stop();
    let hub = Hub::start_in(dir, &["--tls-san", "other.example.test"]);
    assert_eq!(std::fs::read(hub.dir.path().join("ca.crt")).unwrap(), ca);
    assert_ne!(
        std::fs::read(hub.dir.path().join("server.crt")).unwrap(),
        cert
    );
    assert!(kubectl_as(&hub, "other.example.test").status.success());
    assert!(
        !kubectl_as(&hub, "hub.example.test").status.success(),
        "a name no longer asked for is gone"
    );
    // The kubeconfig from before (its CA) still works, at the new port.
    let mut old: serde_json::Value = serde_json::from_str(&old_kubeconfig).unwrap();
    old["clusters"][0]["cluster"]["server"] = format!("https://127.0.0.1:{}", hub.port).into();
    let path = hub.dir.path().join("old.kubeconfig");
    std::fs::write(&path, old.to_string()).unwrap();
    let out = kubectl_command(&path)
        .args(["get", "namespace", "default"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A TLS client trusting only `root` (DER), connecting to `port` as `name`: the chain the
/// server presents, or why the handshake failed.
fn presented_chain(port: u16, name: &str, root: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(root.to_vec()))
        .map_err(|e| e.to_string())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let server_name = ServerName::try_from(name.to_owned()).unwrap();
    let mut connection =
        rustls::ClientConnection::new(Arc::new(config), server_name).map_err(|e| e.to_string())?;
    let mut socket =
        std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    while connection.is_handshaking() {
        connection
            .complete_io(&mut socket)
            .map_err(|e| e.to_string())?;
    }
    Ok(connection
        .peer_certificates()
        .unwrap_or_default()
        .iter()
        .map(|c| c.to_vec())
        .collect())
}

#[test]
fn a_certificate_of_ones_own_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["hub.example.test".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_file, key_file) = (dir.path().join("own.crt"), dir.path().join("own.key"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let _hub = Process(
        hub_command(
            &data,
            port,
            &[
                "--tls-cert-file",
                cert_file.to_str().unwrap(),
                "--tls-private-key-file",
                key_file.to_str().unwrap(),
            ],
        )
        .spawn()
        .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let chain = loop {
        match presented_chain(port, "hub.example.test", cert.der()) {
            Ok(chain) => break chain,
            Err(e) => assert!(Instant::now() < deadline, "no TLS: {e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        chain,
        [cert.der().to_vec()],
        "exactly the user's certificate"
    );
    // The hub's own CA issued nothing and is not in the admin kubeconfig (the client
    // brings the trust for a certificate of the user's own).
    assert!(!data.join("server.crt").exists());
    let kubeconfig = data.join("admin.kubeconfig");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !kubeconfig.exists() {
        assert!(Instant::now() < deadline, "no admin.kubeconfig");
        std::thread::sleep(Duration::from_millis(50));
    }
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&kubeconfig).unwrap()).unwrap();
    assert!(config["clusters"][0]["cluster"]["certificate-authority-data"].is_null());
    // The real kubectl, trusting the user's certificate, gets through.
    let out = kubectl_command(&kubeconfig)
        .arg("--certificate-authority")
        .arg(&cert_file)
        .args(["--tls-server-name", "hub.example.test"])
        .args(["get", "namespace", "default", "-o", "name"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_certificate_without_its_key_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let line = one_line(&hub_fails(dir.path(), &["--tls-cert-file", "x.pem"])).to_owned();
    assert_eq!(line, "error: --tls-cert-file needs --tls-private-key-file");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing written"
    );
}

#[test]
fn the_advertised_address_lands_in_the_admin_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("https://127.0.0.1:{port}/");
    let _hub = Process(
        hub_command(dir.path(), port, &["--advertise-address", &url])
            .spawn()
            .unwrap(),
    );
    let kubeconfig = dir.path().join("admin.kubeconfig");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = kubectl_command(&kubeconfig)
            .args(["get", "namespace", "default", "-o", "name"])
            .output()
            .unwrap();
        if kubeconfig.exists() && out.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "the hub did not serve");
        std::thread::sleep(Duration::from_millis(50));
    }
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&kubeconfig).unwrap()).unwrap();
    assert_eq!(
        config["clusters"][0]["cluster"]["server"],
        format!("https://127.0.0.1:{port}")
    );
}

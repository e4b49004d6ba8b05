//! A real `flotilla hub` process for end-to-end tests, and the real kubectl to drive it.

#![allow(dead_code)] // Each test file uses a different part of it.

pub mod audit;
pub mod fleet_scenario;
pub mod identity;
pub mod pull;
pub mod rollout;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The kubectl under test: `FLOTILLA_KUBECTL`, or 1.32 from the Google Cloud SDK, or PATH's.
pub fn kubectl_binary() -> PathBuf {
    if let Ok(path) = std::env::var("FLOTILLA_KUBECTL") {
        return PathBuf::from(path);
    }
    let sdk = Path::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.32");
    if sdk.exists() {
        return sdk.to_path_buf();
    }
    PathBuf::from("kubectl")
}

/// kubectl `version` (`1.27`) from the Google Cloud SDK's bin folder; panics if it is not
/// there (every machine of this kind has 1.27 to 1.33).
pub fn kubectl_version(version: &str) -> PathBuf {
    let path = PathBuf::from(format!("/usr/lib/google-cloud-sdk/bin/kubectl.{version}"));
    assert!(path.exists(), "{} is missing", path.display());
    path
}

/// A hub process on a free port with its own data directory; SIGTERMed on drop.
pub struct Hub {
    child: Child,
    /// The kubectl the `kubectl*` methods run.
    kubectl: PathBuf,
    /// The data directory.
    pub dir: tempfile::TempDir,
    /// The port it serves on (kept across [`Hub::restart`]).
    pub port: u16,
    args: Vec<String>,
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn(dir: &Path, port: u16, args: &[String]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["hub", "--data-dir"])
        .arg(dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(args)
        // Warnings only, unless FLOTILLA_TEST_HUB_LOG names another filter (to debug a test).
        .env(
            "RUST_LOG",
            std::env::var("FLOTILLA_TEST_HUB_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .spawn()
        .expect("start flotilla hub")
}

impl Hub {
    /// A hub on a fresh data directory.
    pub fn start() -> Hub {
        Hub::start_with(&[])
    }

    /// A hub on a fresh data directory, with more flags.
    pub fn start_with(args: &[&str]) -> Hub {
        Hub::start_in(tempfile::tempdir().unwrap(), args)
    }

    /// A hub on an existing data directory (a new port).
    pub fn start_in(dir: tempfile::TempDir, args: &[&str]) -> Hub {
        let port = free_port();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let child = spawn(dir.path(), port, &args);
        let hub = Hub {
            child,
            kubectl: kubectl_binary(),
            dir,
            port,
            args,
        };
        hub.wait_ready();
        hub
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.kubeconfig().exists()
                && self.kubectl(&["get", "--raw", "/readyz"]).status.success()
            {
                return;
            }
            assert!(Instant::now() < deadline, "the hub did not become ready");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The process id of the hub (for a signal).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The same hub, driven by another kubectl binary.
    pub fn using(mut self, kubectl: PathBuf) -> Hub {
        self.kubectl = kubectl;
        self
    }

    /// Kills the process (SIGKILL), runs `meanwhile` while the hub is down (it returns once
    /// the outage has lasted long enough for what the test checks), and starts the hub
    /// again on the same data directory and port.
    pub fn kill_and_restart_after(&mut self, meanwhile: impl FnOnce()) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        meanwhile();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpListener::bind(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "port {} stayed busy", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = spawn(self.dir.path(), self.port, &self.args);
        self.wait_ready();
    }

    /// Stops the process (SIGTERM, or SIGKILL if `kill`) and starts it again on the same
    /// data directory and port.
    pub fn restart(&mut self, kill: bool) {
        if kill {
            let _ = self.child.kill();
            let _ = self.child.wait();
        } else {
            terminate(&mut self.child);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpListener::bind(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "port {} stayed busy", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = spawn(self.dir.path(), self.port, &self.args);
        self.wait_ready();
    }

    /// The admin kubeconfig the hub wrote.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    /// A kubeconfig for logical cluster `name` (the admin one, its server ending in
    /// `/clusters/<name>`).
    pub fn cluster_kubeconfig(&self, name: &str) -> PathBuf {
        let mut config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(self.kubeconfig()).unwrap()).unwrap();
        let server = config["clusters"][0]["cluster"]["server"]
            .as_str()
            .unwrap()
            .to_owned();
        config["clusters"][0]["cluster"]["server"] = format!("{server}/clusters/{name}").into();
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        std::fs::write(&path, config.to_string()).unwrap();
        path
    }

    /// Runs kubectl against logical cluster `name`; its output.
    pub fn kubectl_in(&self, name: &str, args: &[&str], stdin: Option<&str>) -> Output {
        run_kubectl(&self.kubectl, &self.cluster_kubeconfig(name), args, stdin)
    }

    /// This hub's kubectl with its kubeconfig, to run with more settings.
    pub fn kubectl_command(&self) -> Command {
        kubectl_command_of(&self.kubectl, &self.kubeconfig())
    }

    /// Runs kubectl against the hub.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with(args, None)
    }

    /// Runs kubectl against the hub with `stdin` as its input.
    pub fn kubectl_with(&self, args: &[&str], stdin: Option<&str>) -> Output {
        run_kubectl(&self.kubectl, &self.kubeconfig(), args, stdin)
    }

    /// Runs kubectl and returns its stdout; panics with its stderr if it fails.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs kubectl, which must fail; returns its stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            !out.status.success(),
            "kubectl {args:?} should have failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    /// `kubectl create -f -` of a manifest; panics if it fails.
    pub fn create(&self, manifest: &str) -> String {
        let out = self.kubectl_with(&["create", "-f", "-"], Some(manifest));
        assert!(
            out.status.success(),
            "create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `kubectl … -o json`, parsed.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }

    /// Stops the hub (SIGTERM) and hands back its data directory.
    pub fn stop(mut self) -> tempfile::TempDir {
        terminate(&mut self.child);
        std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap())
    }
}

/// The kubectl under test with `kubeconfig`. Discovery is cached beside the kubeconfig: the
/// shared cache (`~/.kube/cache`, by host:port) would leak one test's resources into
/// another test's hub on a reused port.
pub fn kubectl_command(kubeconfig: &Path) -> Command {
    kubectl_command_of(&kubectl_binary(), kubeconfig)
}

/// [`kubectl_command`] with another kubectl binary.
fn kubectl_command_of(kubectl: &Path, kubeconfig: &Path) -> Command {
    let cache = kubeconfig
        .parent()
        .unwrap_or(Path::new("."))
        .join("kubectl-cache");
    let mut command = Command::new(kubectl);
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache);
    command
}

/// Runs kubectl with a kubeconfig, `stdin` as its input; its output.
pub(crate) fn run_kubectl(
    kubectl: &Path,
    kubeconfig: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> Output {
    let mut command = kubectl_command_of(kubectl, kubeconfig);
    command
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("run kubectl");
    if let Some(input) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

fn terminate(child: &mut Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Hub {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

/// A `flotilla sim` process on a free port with its own data directory; SIGTERMed on drop.
pub struct Sim {
    child: Child,
    /// The data directory.
    pub dir: tempfile::TempDir,
    /// The port it serves on (kept across [`Sim::restart`]).
    pub port: u16,
    args: Vec<String>,
}

fn spawn_sim(dir: &Path, port: u16, args: &[String]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["sim", "--data-dir"])
        .arg(dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(args)
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("start flotilla sim")
}

impl Sim {
    /// A simulator on a fresh data directory with `args` (`--clusters N` among them).
    pub fn start(args: &[&str]) -> Sim {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let child = spawn_sim(dir.path(), port, &args);
        let sim = Sim {
            child,
            dir,
            port,
            args,
        };
        sim.wait_ready();
        sim
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let admin = self.dir.path().join("admin.kubeconfig");
        loop {
            if admin.exists()
                && run_kubectl(
                    &kubectl_binary(),
                    &admin,
                    &["get", "--raw", "/readyz"],
                    None,
                )
                .status
                .success()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the simulator did not become ready"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the process (SIGTERM) and starts it again on the same data directory and port.
    pub fn restart(&mut self) {
        terminate(&mut self.child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpListener::bind(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "port {} stayed busy", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = spawn_sim(self.dir.path(), self.port, &self.args);
        self.wait_ready();
    }

    /// The kubeconfig the simulator wrote for member `cluster`.
    pub fn kubeconfig(&self, cluster: &str) -> PathBuf {
        self.dir
            .path()
            .join("kubeconfigs")
            .join(format!("{cluster}.kubeconfig"))
    }

    /// Runs kubectl against member `cluster`, `stdin` as its input; its output.
    pub fn kubectl(&self, cluster: &str, args: &[&str], stdin: Option<&str>) -> Output {
        run_kubectl(&kubectl_binary(), &self.kubeconfig(cluster), args, stdin)
    }

    /// Runs kubectl against member `cluster`; its stdout, or a panic with its stderr.
    pub fn ok(&self, cluster: &str, args: &[&str]) -> String {
        let out = self.kubectl(cluster, args, None);
        assert!(
            out.status.success(),
            "kubectl {args:?} on {cluster} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `kubectl create -f -` of a manifest in member `cluster`; panics if it fails.
    pub fn create(&self, cluster: &str, manifest: &str) -> String {
        let out = self.kubectl(cluster, &["create", "-f", "-"], Some(manifest));
        assert!(
            out.status.success(),
            "create on {cluster} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `kubectl … -o json` against member `cluster`, parsed.
    pub fn json(&self, cluster: &str, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(cluster, &all)).unwrap()
    }

    /// Polls `kubectl get … -o json` in member `cluster` until `done` holds for the
    /// object; returns it. Panics with the last object after a minute.
    pub fn wait_for(
        &self,
        cluster: &str,
        args: &[&str],
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        loop {
            // Not there yet (NotFound) is not done either.
            let out = self.kubectl(cluster, &args, None);
            let object: serde_json::Value = if out.status.success() {
                serde_json::from_slice(&out.stdout).unwrap_or_default()
            } else {
                serde_json::Value::String(String::from_utf8_lossy(&out.stderr).into_owned())
            };
            if out.status.success() && done(&object) {
                return object;
            }
            assert!(
                Instant::now() < deadline,
                "{args:?} on {cluster} never got there: {object}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

impl Sim {
    /// The simulator's process id (to freeze it with SIGSTOP and thaw it with SIGCONT).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// Polls `probe` until it gives `Ok`; panics with `what` and the last `Err` after two
/// minutes.
pub fn eventually<T>(what: &str, probe: impl FnMut() -> Result<T, String>) -> T {
    eventually_every(what, Duration::from_millis(300), probe)
}

/// [`eventually`], polling every `every`.
pub fn eventually_every<T>(
    what: &str,
    every: Duration,
    probe: impl FnMut() -> Result<T, String>,
) -> T {
    poll(Duration::from_secs(120), every, probe)
        .unwrap_or_else(|last| panic!("{what}: never happened; last: {last}"))
}

/// Polls `probe` every `every` until it gives `Ok`; panics with `what` and the last `Err`
/// once `within` has passed.
pub fn eventually_within<T>(
    what: &str,
    within: Duration,
    every: Duration,
    probe: impl FnMut() -> Result<T, String>,
) -> T {
    poll(within, every, probe)
        .unwrap_or_else(|last| panic!("{what}: not within {within:?}; last: {last}"))
}

/// Polls `probe` every `every` until it gives `Ok` (that) or `within` has passed (its
/// last `Err`).
fn poll<T>(
    within: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + within;
    loop {
        match probe() {
            Ok(done) => return Ok(done),
            Err(last) if Instant::now() >= deadline => return Err(last),
            Err(_) => std::thread::sleep(every),
        }
    }
}

/// Runs the `flotilla` binary under test; its output.
pub fn flotilla(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run flotilla")
}

/// `flotilla join CLUSTER --kubeconfig <sim's> --hub-kubeconfig <hub's>` with `more` flags
/// (`--labels`, `--taints`); panics unless it succeeds. Its stdout.
pub fn join_with(hub: &Hub, sim: &Sim, cluster: &str, more: &[&str]) -> String {
    let kubeconfig = sim.kubeconfig(cluster);
    let hub_kubeconfig = hub.kubeconfig();
    let mut args = vec![
        "join",
        cluster,
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--hub-kubeconfig",
        hub_kubeconfig.to_str().unwrap(),
    ];
    args.extend(more);
    let out = flotilla(&args);
    assert!(
        out.status.success(),
        "join {cluster}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`join_with`] `--labels labels`.
pub fn join_labelled(hub: &Hub, sim: &Sim, cluster: &str, labels: &str) -> String {
    join_with(hub, sim, cluster, &["--labels", labels])
}

/// Condition `kind` of `object`'s `status.conditions`, if it has one.
pub fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Member `cluster`'s Deployment `shop/web`; kubectl's stderr if it has none.
pub fn member_web(sim: &Sim, cluster: &str) -> Result<Value, String> {
    let out = sim.kubectl(
        cluster,
        &["get", "deploy", "web", "-n", "shop", "-o", "json"],
        None,
    );
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// The image of a Deployment's first container, `""` if none.
pub fn image(deployment: &Value) -> &str {
    deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
}

/// A Namespace `shop` with a Deployment `web` (2 × nginx:1.27) placed on the clusters
/// labelled `region=eu`.
pub const EU_WEB: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:1.27"}]
---
apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {name: web, namespace: shop}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  clusters: {labelSelector: {matchLabels: {region: eu}}}
"#;

/// Sends `signal` (`KILL`, `STOP`, `CONT`…) to process `pid` with `kill`; panics unless
/// it is sent.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// The repository's root (README.md, examples/).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The ```sh blocks of the Markdown section under `heading` (up to the next `## `), in
/// order.
pub fn sh_blocks(readme: &str, heading: &str) -> Vec<String> {
    let mut lines = readme
        .lines()
        .skip_while(|l| !l.starts_with(heading))
        .skip(1)
        .take_while(|l| !l.starts_with("## "));
    let mut blocks = Vec::new();
    while let Some(line) = lines.next() {
        if line.trim_end() == "```sh" {
            let block: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
            blocks.push(block.join("\n"));
        }
    }
    blocks
}

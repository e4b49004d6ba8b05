//! Real processes for the fleet scenarios: a `flotilla hub`, `flotilla sim` processes
//! serving N members, one `flotilla join` per member, and kube clients of them all.
//!
//! ```text
//!  DIR/hub/    flotilla hub --data-dir DIR/hub --listen 127.0.0.1:<free port>  (hub.log)
//!              [--store postgres://…|etcd://…: a database server instead of SQLite]
//!  DIR/sim/    flotilla sim --clusters M --ready-delay 100ms                   (sim.log)
//!              kubeconfigs/member-<i>.kubeconfig
//!  DIR/sim-2/  flotilla sim --clusters M --first M+1 …  (past M members)     (sim-2.log)
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use flotilla_fleet::runtime::Pools;
use futures_util::{StreamExt, TryStreamExt};
use kube::Client;
use tokio::process::{Child, Command};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio_rustls::TlsConnector;

use crate::api::io;
use crate::{Error, Progress, check};

/// How long the hub may take to stop on SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// Joins made at once, as an operator's script would.
const JOINS_AT_ONCE: usize = 8;

/// Members per simulator process. While a change is measured, each member holds two
/// long-lived connections into its simulator (the hub's drift watch and the benchmark's
/// own watch); at 5,000 members that is 10,000 descriptors, within the 20,000 open files
/// a process may hold on this kind of machine, whose hard limit an unprivileged (or
/// capability-less) process cannot raise. Larger fleets run several simulators side by
/// side, as a real fleet's members are separate servers.
pub(crate) const MEMBERS_PER_SIM: usize = 5_000;

/// A hub and a simulator with `clusters` members, running.
pub(crate) struct Processes {
    binary: PathBuf,
    dir: PathBuf,
    hub: Child,
    hub_args: Vec<String>,
    hub_starts: usize,
    /// The simulators, each serving `members_per_sim` members (the last one the rest).
    sims: Vec<Child>,
    hub_kubeconfig: PathBuf,
    sim_dirs: Vec<PathBuf>,
    members_per_sim: usize,
    clusters: usize,
    /// The member clients' connections, as the hub shares them.
    pools: Pools,
}

pub(crate) fn free_port() -> Result<u16, Error> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

pub(crate) fn spawn(binary: &Path, args: &[String], log: &Path) -> Result<Child, Error> {
    Ok(Command::new(binary)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .kill_on_drop(true)
        .spawn()?)
}

pub(crate) async fn wait_for(path: &Path) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !path.exists() {
        if Instant::now() > deadline {
            return Err(Error::Check(format!("{} never appeared", path.display())));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// A client of the cluster `kubeconfig` names, made as the hub makes its member clients
/// (no Nagle delay; connections shared with every client made from `pools`), so that the
/// bare-apply baseline and the hub send alike.
pub(crate) async fn client(kubeconfig: &Path, pools: &Pools) -> Result<Client, Error> {
    let bytes = std::fs::read(kubeconfig)?;
    pools
        .client(&bytes, Duration::from_secs(60))
        .await
        .map_err(|e| check("client", e))
}

/// The client configuration of `kubeconfig`'s current context (`what` names it in an
/// error).
pub(crate) async fn config_of(kubeconfig: &Path, what: &str) -> Result<kube::Config, Error> {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| check(what, e))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| check(what, e))
}

/// How many of the bench's member watches share one HTTP/2 connection to a simulator:
/// under the 250 streams a connection that the simulator (the hub's server) allows.
const WATCHES_PER_CONNECTION: usize = 200;

/// The bench's clients for the members whose kubeconfigs these are, for its watches.
/// The members of a simulator are one server's logical clusters and each authenticates
/// by a bearer token in its requests' headers, so every [`WATCHES_PER_CONNECTION`] of
/// those with one server and CA share one HTTP/2 connection: N watches hold about N / 200
/// of the simulators' sockets, not N. At N = 10,000 pull clusters, one socket per watch
/// beside the agents' 10,000 connections to the hub would pass this machine's 20,000 open
/// files in the agents' simulator.
pub(crate) async fn watch_clients(kubeconfigs: &[PathBuf]) -> Result<Vec<Client>, Error> {
    use kube::client::ConfigExt as _;
    type Connection = hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        kube::client::Body,
    >;
    // A server's authority and its CA certificates.
    type Server = (String, Vec<Vec<u8>>);
    // Per server: the connection being filled, and how many watches it carries.
    let mut shared: HashMap<Server, (Connection, usize)> = HashMap::new();
    let mut clients = Vec::with_capacity(kubeconfigs.len());
    for kubeconfig in kubeconfigs {
        let config = config_of(kubeconfig, "a member's kubeconfig").await?;
        let server = (
            config
                .cluster_url
                .authority()
                .map(ToString::to_string)
                .unwrap_or_default(),
            config.root_cert.clone().unwrap_or_default(),
        );
        let connection = match shared.get_mut(&server) {
            Some((connection, carried)) if *carried < WATCHES_PER_CONNECTION => {
                *carried += 1;
                connection.clone()
            }
            _ => {
                let tls = config
                    .rustls_client_config()
                    .map_err(|e| check("a member's TLS", e))?;
                let https = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(tls)
                    .https_only()
                    .enable_http2()
                    .build();
                let connection: Connection = hyper_util::client::legacy::Client::builder(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .http2_only(true)
                .timer(hyper_util::rt::TokioTimer::new())
                .build(https);
                shared.insert(server, (connection.clone(), 1));
                connection
            }
        };
        let service = tower::ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(
                config
                    .auth_layer()
                    .map_err(|e| check("a member's credentials", e))?,
            )
            .map_err(tower::BoxError::from)
            .service(connection);
        clients.push(Client::new(service, config.default_namespace));
    }
    Ok(clients)
}

/// Waits until `client`'s server answers.
pub(crate) async fn wait_until_serving(client: &Client, what: &str) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.apiserver_version().await.is_err() {
        if Instant::now() > deadline {
            return Err(Error::Check(format!("the {what} never answered")));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

fn pid(child: &Child, what: &str) -> Result<u32, Error> {
    child
        .id()
        .ok_or_else(|| Error::Check(format!("the {what} exited")))
}

impl Processes {
    /// Starts a hub and simulators with `clusters` members in all, at most
    /// `members_per_sim` each, under `dir` (emptied first) and waits until all serve.
    pub(crate) async fn start(
        binary: &Path,
        dir: &Path,
        clusters: usize,
        members_per_sim: usize,
    ) -> Result<Self, Error> {
        Self::start_on(binary, dir, clusters, members_per_sim, None).await
    }

    /// As [`Processes::start`], the hub on `store` (`--store URL`) when given, else on its
    /// embedded SQLite.
    pub(crate) async fn start_on(
        binary: &Path,
        dir: &Path,
        clusters: usize,
        members_per_sim: usize,
        store: Option<&str>,
    ) -> Result<Self, Error> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)?;
        let members_per_sim = members_per_sim.max(1);
        let hub_dir = dir.join("hub");
        let text = |p: &Path| p.to_string_lossy().into_owned();
        let mut hub_args: Vec<String> = vec![
            "hub".into(),
            "--data-dir".into(),
            text(&hub_dir),
            "--listen".into(),
            format!("127.0.0.1:{}", free_port()?),
        ];
        if let Some(url) = store {
            hub_args.extend(["--store".into(), url.to_owned()]);
        }
        let hub = spawn(binary, &hub_args, &dir.join("hub.log"))?;
        let (mut sims, mut sim_dirs) = (Vec::new(), Vec::new());
        for first in (1..=clusters.max(1)).step_by(members_per_sim) {
            let count = members_per_sim.min(clusters.max(1) + 1 - first);
            let name = match sims.len() {
                0 => "sim".to_owned(),
                k => format!("sim-{}", k + 1),
            };
            let sim_dir = dir.join(&name);
            let sim_args: Vec<String> = vec![
                "sim".into(),
                "--clusters".into(),
                count.to_string(),
                "--first".into(),
                first.to_string(),
                "--data-dir".into(),
                text(&sim_dir),
                "--listen".into(),
                format!("127.0.0.1:{}", free_port()?),
                "--ready-delay".into(),
                "100ms".into(),
            ];
            sims.push(spawn(binary, &sim_args, &dir.join(format!("{name}.log")))?);
            sim_dirs.push(sim_dir);
        }
        let processes = Processes {
            binary: binary.to_owned(),
            dir: dir.to_owned(),
            hub,
            hub_args,
            hub_starts: 1,
            sims,
            hub_kubeconfig: hub_dir.join("admin.kubeconfig"),
            sim_dirs,
            members_per_sim,
            clusters,
            pools: Pools::default(),
        };
        wait_for(&processes.hub_kubeconfig).await?;
        wait_until_serving(&processes.hub_client().await?, "hub").await?;
        for last in processes.last_members() {
            wait_for(&processes.member_kubeconfig(last)).await?;
            wait_until_serving(&processes.member_client(last).await?, "simulator").await?;
        }
        Ok(processes)
    }

    /// Each simulator's last member.
    fn last_members(&self) -> Vec<usize> {
        (1..=self.sims.len())
            .map(|k| (k * self.members_per_sim).min(self.clusters.max(1)))
            .collect()
    }

    /// The hub's process id.
    pub(crate) fn hub_pid(&self) -> Result<u32, Error> {
        pid(&self.hub, "hub")
    }

    /// The simulators' process ids.
    pub(crate) fn sim_pids(&self) -> Result<Vec<u32>, Error> {
        self.sims.iter().map(|sim| pid(sim, "simulator")).collect()
    }

    /// The kubeconfig of member `i` (1-based), in its simulator's directory.
    pub(crate) fn member_kubeconfig(&self, i: usize) -> PathBuf {
        let sim = (i.max(1) - 1) / self.members_per_sim;
        self.sim_dirs[sim.min(self.sim_dirs.len() - 1)]
            .join("kubeconfigs")
            .join(format!("member-{i}.kubeconfig"))
    }

    /// A new client of the hub (admin).
    pub(crate) async fn hub_client(&self) -> Result<Client, Error> {
        client(&self.hub_kubeconfig, &Pools::default()).await
    }

    /// A client of each simulator's own endpoints (`/metrics`).
    pub(crate) async fn sim_clients(&self) -> Result<Vec<Client>, Error> {
        let mut clients = Vec::with_capacity(self.sims.len());
        for last in self.last_members() {
            clients.push(self.sim_client(last).await?);
        }
        Ok(clients)
    }

    /// A client of the root of the simulator serving member `i`: the member's credentials,
    /// at the server's root instead of the member's path.
    async fn sim_client(&self, i: usize) -> Result<Client, Error> {
        let member = format!("member-{i}");
        let text = std::fs::read_to_string(self.member_kubeconfig(i))?;
        let kubeconfig =
            kube::config::Kubeconfig::from_yaml(&text).map_err(|e| check(&member, e))?;
        let mut config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(|e| check(&member, e))?;
        let root = format!(
            "{}://{}/",
            config.cluster_url.scheme_str().unwrap_or("https"),
            config
                .cluster_url
                .authority()
                .map(|a| a.as_str())
                .unwrap_or_default()
        );
        config.cluster_url = root.parse().map_err(|e| check("the simulator's URL", e))?;
        Client::try_from(config).map_err(|e| check("simulator client", e))
    }

    /// A new client of member `i`.
    pub(crate) async fn member_client(&self, i: usize) -> Result<Client, Error> {
        client(&self.member_kubeconfig(i), &self.pools).await
    }

    /// Joins every member with `flotilla join NAME --labels LABELS`, a few at a time;
    /// returns how long it took.
    pub(crate) async fn join_all(
        &self,
        labels: &str,
        progress: &mut Progress,
    ) -> Result<Duration, Error> {
        let kubeconfigs = (1..=self.clusters)
            .map(|i| self.member_kubeconfig(i))
            .collect();
        join_members(
            &self.binary,
            &self.hub_kubeconfig,
            kubeconfigs,
            labels,
            progress,
        )
        .await
    }

    /// Stops the hub with SIGTERM and waits for it to exit (SIGKILL after a minute);
    /// returns how long it took.
    pub(crate) async fn stop_hub(&mut self) -> Result<Duration, Error> {
        let pid = self.hub_pid()?;
        let started = Instant::now();
        let status = Command::new("kill")
            .args(["-s", "TERM", &pid.to_string()])
            .status()
            .await?;
        if !status.success() {
            return Err(Error::Check(format!("kill -s TERM {pid} failed: {status}")));
        }
        if tokio::time::timeout(STOP_TIMEOUT, self.hub.wait())
            .await
            .is_err()
        {
            eprintln!(
                "the hub did not stop within {}s of SIGTERM: killing it",
                STOP_TIMEOUT.as_secs()
            );
            self.hub.kill().await?;
        }
        Ok(started.elapsed())
    }

    /// Starts the hub again on the same data directory and port (a new log file).
    pub(crate) fn restart_hub(&mut self) -> Result<(), Error> {
        self.hub_starts += 1;
        let log = self.dir.join(format!("hub-{}.log", self.hub_starts));
        self.hub = spawn(&self.binary, &self.hub_args, &log)?;
        Ok(())
    }
}

/// Joins member `i` (1-based, `member-<i>`) of `kubeconfigs` to the hub of
/// `hub_kubeconfig` with `flotilla join NAME --labels LABELS`, a few at a time; returns
/// how long it took.
pub(crate) async fn join_members(
    binary: &Path,
    hub_kubeconfig: &Path,
    kubeconfigs: Vec<PathBuf>,
    labels: &str,
    progress: &mut Progress,
) -> Result<Duration, Error> {
    let started = Instant::now();
    let n = kubeconfigs.len();
    let mut joins = futures_util::stream::iter(kubeconfigs.into_iter().enumerate())
        .map(|(k, kubeconfig)| {
            let i = k + 1;
            let (binary, hub) = (binary.to_owned(), hub_kubeconfig.to_owned());
            async move {
                let out = Command::new(binary)
                    .args(["join", &format!("member-{i}"), "--labels", labels])
                    .arg("--kubeconfig")
                    .arg(kubeconfig)
                    .arg("--hub-kubeconfig")
                    .arg(hub)
                    .args(["--timeout", "300s"])
                    .output()
                    .await?;
                if out.status.success() {
                    Ok(())
                } else {
                    Err(Error::Check(format!(
                        "join member-{i}: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    )))
                }
            }
        })
        .buffer_unordered(JOINS_AT_ONCE);
    let mut done = 0;
    while joins.try_next().await?.is_some() {
        done += 1;
        progress.count("joining", done, n);
    }
    Ok(started.elapsed())
}

/// A hub process alone (no simulator), on a data directory of its own, that can be
/// stopped and started again on it.
pub(crate) struct LoneHub {
    binary: PathBuf,
    dir: PathBuf,
    args: Vec<String>,
    port: u16,
    child: Child,
    starts: usize,
}

/// How long an idle hub's resident memory must not fall to count as settled.
const SETTLED: Duration = Duration::from_secs(15);

impl LoneHub {
    /// Starts `flotilla hub` on data directory `dir` (created if missing) and a free port,
    /// and waits until it serves.
    pub(crate) async fn start(binary: &Path, dir: &Path) -> Result<Self, Error> {
        Self::start_on_cpus(binary, dir, None).await
    }

    /// As [`LoneHub::start`], the hub run by `taskset` on `cpus` (its CPU list) alone when
    /// given, restarts too.
    pub(crate) async fn start_on_cpus(
        binary: &Path,
        dir: &Path,
        cpus: Option<&str>,
    ) -> Result<Self, Error> {
        std::fs::create_dir_all(dir)?;
        let port = free_port()?;
        let hub_args = [
            "hub".into(),
            "--data-dir".into(),
            dir.join("data").to_string_lossy().into_owned(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
        ];
        // taskset execs the hub: the child's pid is the hub's.
        let (binary, args): (PathBuf, Vec<String>) = match cpus {
            None => (binary.to_owned(), hub_args.into()),
            Some(cpus) => (
                "taskset".into(),
                [
                    "--cpu-list".into(),
                    cpus.to_owned(),
                    binary.to_string_lossy().into_owned(),
                ]
                .into_iter()
                .chain(hub_args)
                .collect(),
            ),
        };
        let child = spawn(&binary, &args, &dir.join("hub-1.log"))?;
        let hub = LoneHub {
            binary,
            dir: dir.to_owned(),
            args,
            port,
            child,
            starts: 1,
        };
        hub.wait_until_serving().await?;
        Ok(hub)
    }

    /// Its data directory (CA, admin token, store).
    pub(crate) fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Where it listens.
    pub(crate) fn address(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> Result<u32, Error> {
        pid(&self.child, "hub")
    }

    /// Its resident memory once idle and settled: sampled every half second from when it
    /// began to serve, until it has not fallen for [`SETTLED`] (the allocator hands back
    /// what startup freed, such as the pages of the lists that built its indexes, only
    /// after its decay time of about ten seconds) or a minute has passed; the last sample.
    pub(crate) async fn idle_rss_mib(&self) -> Result<f64, Error> {
        let pid = self.pid()?;
        let started = Instant::now();
        let mut lowest = crate::system::rss_mib(pid)?;
        let mut fell_at = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let rss = crate::system::rss_mib(pid)?;
            // A fall of a quarter MiB or more is the allocator still handing pages back.
            if rss < lowest - 0.25 {
                fell_at = Instant::now();
            }
            lowest = lowest.min(rss);
            if fell_at.elapsed() >= SETTLED || started.elapsed() >= Duration::from_secs(60) {
                return Ok(rss);
            }
        }
    }

    async fn wait_until_serving(&self) -> Result<(), Error> {
        wait_for(&self.data_dir().join("admin.kubeconfig")).await?;
        let deadline = Instant::now() + Duration::from_secs(120);
        while tokio::net::TcpStream::connect(self.address())
            .await
            .is_err()
        {
            if Instant::now() > deadline {
                return Err(Error::Check("the hub process did not start serving".into()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Stops it with SIGTERM (SIGKILL after a minute) and starts it again on the same data
    /// directory and port; waits until it serves.
    pub(crate) async fn restart(&mut self) -> Result<(), Error> {
        let pid = self.pid()?;
        let status = Command::new("kill")
            .args(["-s", "TERM", &pid.to_string()])
            .status()
            .await?;
        if !status.success() {
            return Err(Error::Check(format!("kill -s TERM {pid} failed: {status}")));
        }
        if tokio::time::timeout(STOP_TIMEOUT, self.child.wait())
            .await
            .is_err()
        {
            self.child.kill().await?;
        }
        self.starts += 1;
        let log = self.dir.join(format!("hub-{}.log", self.starts));
        self.child = spawn(&self.binary, &self.args, &log)?;
        self.wait_until_serving().await
    }
}

/// A client configuration that trusts the hub's CA (its `ca.crt`).
pub(crate) fn trusting(ca_file: &Path) -> Result<TlsConnector, Error> {
    let ca = CertificateDer::from_pem_file(ca_file).map_err(io)?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).map_err(io)?;
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(io)?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(TlsConnector::from(std::sync::Arc::new(config)))
}

//! An etcd server of a test's own: Debian's `etcd` with its data in a temporary
//! directory, on free loopback ports, stopped (SIGKILL) when dropped, also when the test
//! panics. Included by path by the other crates whose tests need one.
//!
//! ```text
//!  EtcdServer::start ─► etcd --data-dir DIR/data (client and peer ports on 127.0.0.1)
//!                    ─► "ready to serve client requests" in its log
//!                    ─► watchdog: kills it if the test process dies without dropping
//!                    ─► a port taken meanwhile: new ports, and again
//!  kill9 ─► SIGKILL (a crash)     restart ─► the same data and ports again
//! ```
//!
//! A free port is only free when it is chosen: other tests (their etcd, PostgreSQL or hub
//! processes, slow to start on a loaded machine) choose ports the same way and may bind
//! one of ours before etcd does, and etcd then exits at once. A start retries with new
//! ports; a restart, which must keep its ports, waits for them within its deadline.
//!
//! The binary is `$FLOTILLA_ETCD`, else `etcd` on `PATH` (Debian's etcd-server package).

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to start.
const START: Duration = Duration::from_secs(60);

/// How many times a start picks new ports after a port was taken before etcd bound it.
const PORT_ATTEMPTS: u32 = 10;

/// What etcd logs when it cannot listen on a port.
const PORT_TAKEN: &str = "address already in use";

/// A running (or killed) etcd server.
pub struct EtcdServer {
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
    watchdog: Option<Child>,
    starts: u32,
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

impl EtcdServer {
    /// Starts a new single-member etcd.
    pub fn start() -> EtcdServer {
        let dir = tempfile::Builder::new()
            .prefix("flotilla-etcd-")
            .tempdir()
            .expect("a temporary directory");
        let mut server = EtcdServer {
            dir,
            client_port: 0,
            peer_port: 0,
            child: None,
            watchdog: None,
            starts: 0,
        };
        let deadline = Instant::now() + START;
        for attempt in 1..=PORT_ATTEMPTS {
            server.client_port = free_port();
            server.peer_port = loop {
                let port = free_port();
                if port != server.client_port {
                    break port;
                }
            };
            match server.launch(deadline) {
                Ok(()) => return server,
                // Nothing was written yet: start afresh on new ports.
                Err(log) if attempt < PORT_ATTEMPTS => {
                    eprintln!("etcd could not listen ({}), new ports", port_error(&log));
                    let _ = std::fs::remove_dir_all(server.dir.path().join("data"));
                }
                Err(log) => {
                    panic!("etcd found a port taken at each of {PORT_ATTEMPTS} starts:\n{log}")
                }
            }
        }
        unreachable!("every attempt returns or panics")
    }

    /// `127.0.0.1:PORT`, the client endpoint.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// The store URL of `prefix` (which starts with `/`).
    pub fn url(&self, prefix: &str) -> String {
        format!("etcd://{}{prefix}", self.endpoint())
    }

    /// Starts the server (again) on the same data and ports; waits until it serves. A
    /// port taken meanwhile is waited for, up to the start's deadline.
    pub fn restart(&mut self) {
        let deadline = Instant::now() + START;
        while let Err(log) = self.launch(deadline) {
            assert!(
                Instant::now() < deadline,
                "etcd could not listen on its ports within {START:?}:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs etcd and waits until it serves; `Err` with its log if it exited because one of
    /// its ports was taken. Panics if it fails otherwise or is not serving by `deadline`.
    fn launch(&mut self, deadline: Instant) -> Result<(), String> {
        assert!(self.child.is_none(), "the server is running");
        self.starts += 1;
        let log = self.dir.path().join(format!("etcd.{}.log", self.starts));
        let log_file = std::fs::File::create(&log).expect("the server's log file");
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let binary = std::env::var_os("FLOTILLA_ETCD").unwrap_or_else(|| "etcd".into());
        let child = Command::new(&binary)
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--name", "test"])
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("test={peer}")])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("the log file"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} ({e}): apt-get install etcd-server, or set FLOTILLA_ETCD",
                    PathBuf::from(&binary).display()
                )
            });
        self.watchdog = Some(watchdog(child.id(), self.dir.path()));
        self.child = Some(child);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("ready to serve client requests") {
                return Ok(());
            }
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                self.kill9();
                // What it wrote before it exited.
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.contains(PORT_TAKEN) {
                    return Err(text);
                }
                panic!("etcd exited ({status}) at start:\n{text}");
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not start within {START:?}:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server with SIGKILL and waits for it to be gone.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

/// The line of etcd's log that says which port was taken.
fn port_error(log: &str) -> &str {
    log.lines()
        .find(|line| line.contains(PORT_TAKEN))
        .unwrap_or(PORT_TAKEN)
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A shell that kills the server once this test process is gone (a test killed by its
/// runner never runs `Drop`).
fn watchdog(pid: u32, dir: &std::path::Path) -> Child {
    let script = format!(
        "while kill -0 {parent} 2>/dev/null; do sleep 1; done; kill -KILL {pid} 2>/dev/null; \
         rm -rf '{dir}'",
        parent = std::process::id(),
        dir = dir.display(),
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start the watchdog")
}

/// One member of an [`EtcdCluster`].
struct Member {
    dir: tempfile::TempDir,
    name: String,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
    watchdog: Option<Child>,
}

/// A multi-member etcd cluster of a test's own (each member in its own temporary
/// directory, on free loopback ports), killed when dropped.
///
/// ```text
///  EtcdCluster::start(3) ─► etcd --name mI --initial-cluster m0=…,m1=…,m2=… (all at once:
///                           a member serves once a quorum is up) ─► each "ready to serve"
///  kill9(i) ─► SIGKILL of member i (the others keep a quorum)
/// ```
pub struct EtcdCluster {
    members: Vec<Member>,
}

impl EtcdCluster {
    /// Starts a cluster of `size` members and waits until each serves.
    pub fn start(size: usize) -> EtcdCluster {
        let mut ports = std::collections::BTreeSet::new();
        while ports.len() < 2 * size {
            ports.insert(free_port());
        }
        let ports: Vec<u16> = ports.into_iter().collect();
        let members: Vec<Member> = (0..size)
            .map(|i| Member {
                dir: tempfile::Builder::new()
                    .prefix("flotilla-etcd-")
                    .tempdir()
                    .expect("a temporary directory"),
                name: format!("m{i}"),
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                child: None,
                watchdog: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster { members };
        let binary = std::env::var_os("FLOTILLA_ETCD").unwrap_or_else(|| "etcd".into());
        for member in &mut cluster.members {
            let log = std::fs::File::create(member.dir.path().join("etcd.log")).unwrap();
            let client = format!("http://127.0.0.1:{}", member.client_port);
            let peer = format!("http://127.0.0.1:{}", member.peer_port);
            let child = Command::new(&binary)
                .arg("--data-dir")
                .arg(member.dir.path().join("data"))
                .args(["--name", &member.name])
                .args(["--listen-client-urls", &client])
                .args(["--advertise-client-urls", &client])
                .args(["--listen-peer-urls", &peer])
                .args(["--initial-advertise-peer-urls", &peer])
                .args(["--initial-cluster", &initial])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "flotilla-test"])
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("cannot start etcd: apt-get install etcd-server, or set FLOTILLA_ETCD");
            member.watchdog = Some(watchdog(child.id(), member.dir.path()));
            member.child = Some(child);
        }
        let deadline = Instant::now() + START;
        for member in &cluster.members {
            let log = member.dir.path().join("etcd.log");
            loop {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.contains("ready to serve client requests") {
                    break;
                }
                assert!(
                    Instant::now() < deadline && !text.contains(PORT_TAKEN),
                    "etcd member {} did not start:\n{text}",
                    member.name
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        cluster
    }

    /// The store URL naming every member's client endpoint, and `prefix`.
    pub fn url(&self, prefix: &str) -> String {
        let endpoints: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect();
        format!("etcd://{}{prefix}", endpoints.join(","))
    }

    /// Kills member `index` with SIGKILL and waits for it to be gone.
    pub fn kill9(&mut self, index: usize) {
        let member = &mut self.members[index];
        for child in [member.child.take(), member.watchdog.take()]
            .into_iter()
            .flatten()
        {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for index in 0..self.members.len() {
            self.kill9(index);
        }
    }
}

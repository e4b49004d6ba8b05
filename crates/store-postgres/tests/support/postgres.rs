//! A PostgreSQL server of a test's own: `initdb` in a temporary directory, `postgres` on a
//! free loopback port, stopped (its whole process group killed) when dropped, also when
//! the test panics. Included by path by the other crates whose tests need one.
//!
//! ```text
//!  PgServer::start ─► initdb (as `nobody` when run as root: initdb refuses root)
//!                 ─► postgres -D DIR/data -p PORT (own process group) ─► "ready" in its log
//!                 ─► watchdog: kills the group if the test process dies without dropping
//!  kill9 ─► SIGKILL to the group (postmaster and backends: a crash)   restart ─► start again
//! ```
//!
//! The binaries are looked for in `$FLOTILLA_PG_BINDIR`, then Debian's
//! `/usr/lib/postgresql/<newest>/bin`, then `PATH`.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to start.
const START: Duration = Duration::from_secs(60);

/// A running (or killed) PostgreSQL server.
pub struct PgServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// The postmaster; its pid is the process group's.
    child: Option<Child>,
    watchdog: Option<Child>,
    starts: u32,
    as_nobody: bool,
    /// More `-c name=value` settings.
    settings: Vec<String>,
}

/// The directory of PostgreSQL's server binaries.
pub fn bindir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FLOTILLA_PG_BINDIR") {
        return dir.into();
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .find(|dir| dir.join("initdb").exists())
        .unwrap_or_else(|| {
            panic!(
                "PostgreSQL's initdb and postgres are not installed (apt-get install postgresql, \
                 or set FLOTILLA_PG_BINDIR)"
            )
        })
}

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

impl PgServer {
    /// Initialises a cluster and starts it.
    pub fn start() -> PgServer {
        let mut server = PgServer::init();
        server.restart();
        server
    }

    /// Initialises a cluster and starts it with TLS on (`ssl=on`), serving this
    /// certificate (PEM) and key.
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> PgServer {
        let mut server = PgServer::init();
        let data = server.data_dir();
        for (name, text) in [("server.crt", cert_pem), ("server.key", key_pem)] {
            let path = data.join(name);
            std::fs::write(&path, text).expect("write a TLS file");
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .expect("chmod a TLS file");
            if server.as_nobody {
                chown_nobody(&path);
            }
        }
        server.settings.push("ssl=on".into());
        server.restart();
        server
    }

    /// Initialises a cluster, not started.
    fn init() -> PgServer {
        let dir = tempfile::Builder::new()
            .prefix("flotilla-pg-")
            .tempdir()
            .expect("a temporary directory");
        let as_nobody = is_root();
        if as_nobody {
            chown_nobody(dir.path());
        }
        let bin = bindir();
        let mut initdb = program(&bin.join("initdb"), as_nobody);
        initdb
            .arg("-D")
            .arg(dir.path().join("data"))
            .args([
                "-U",
                "flotilla",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let output = initdb.output().expect("cannot run initdb");
        assert!(
            output.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        PgServer {
            dir,
            bin,
            port: free_port(),
            child: None,
            watchdog: None,
            starts: 0,
            as_nobody,
            settings: Vec::new(),
        }
    }

    /// The server's URL, for database `postgres` as the superuser `flotilla`.
    pub fn url(&self) -> String {
        format!(
            "postgres://flotilla@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    /// The server's URL for database `db`.
    pub fn url_of(&self, db: &str) -> String {
        format!(
            "postgres://flotilla@127.0.0.1:{}/{db}?sslmode=disable",
            self.port
        )
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Starts the server (again) on the same data and port; waits until it accepts
    /// connections (after crash recovery, if it was killed). A start refused because the
    /// killed server's shared memory is still attached (a backend of it not yet reaped by
    /// a loaded machine) is tried again until [`START`] has passed.
    pub fn restart(&mut self) {
        let deadline = Instant::now() + START;
        loop {
            match self.start_once() {
                Ok(()) => return,
                Err(text)
                    if text.contains("pre-existing shared memory block")
                        && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(text) => panic!("postgres exited at start:\n{text}"),
            }
        }
    }

    /// One start: Ok once it accepts connections, Err with its log if it exited.
    fn start_once(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "the server is running");
        self.starts += 1;
        let log = self
            .dir
            .path()
            .join(format!("postgres.{}.log", self.starts));
        let log_file = std::fs::File::create(&log).expect("the server's log file");
        if self.as_nobody {
            chown_nobody(&log);
        }
        let mut command = program(&self.bin.join("postgres"), self.as_nobody);
        command
            .arg("-D")
            .arg(self.data_dir())
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "unix_socket_directories="])
            .args(["-c", "max_connections=200"])
            .args(["-c", "shared_buffers=16MB"])
            .args(["-c", "fsync=on", "-c", "synchronous_commit=on"])
            .args(self.settings.iter().flat_map(|s| ["-c", s.as_str()]))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("the log file"))
            .stderr(log_file);
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().expect("cannot start postgres");
        let group = child.id();
        self.child = Some(child);
        self.watchdog = Some(watchdog(group, self.dir.path()));
        let deadline = Instant::now() + START;
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("ready to accept connections") {
                return Ok(());
            }
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                if let Some(mut watchdog) = self.watchdog.take() {
                    let _ = watchdog.kill();
                    let _ = watchdog.wait();
                }
                return Err(format!("({status})\n{text}"));
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not start within {START:?}:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the postmaster and every backend at once with SIGKILL (a crash of the
    /// database server), and waits for the postmaster to be gone.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Each backend makes itself a process group of its own (PostgreSQL's
            // InitPostmasterChild calls setsid), so the postmaster's group holds only it:
            // its children are killed by pid too. Otherwise a backend that has not yet
            // noticed its postmaster's death may still answer, and commit, a request.
            let backends = children_of(child.id());
            kill_group(child.id());
            for &backend in &backends {
                kill_pid(backend);
            }
            let _ = child.wait();
            // Wait until none of them holds the data.
            let deadline = Instant::now() + START;
            while (group_alive(child.id()) || backends.iter().any(|&b| running(b)))
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A command running `path`, as `nobody` when asked (through util-linux's setpriv, which
/// execs it: same pid, same process group, same standard streams).
fn program(path: &Path, as_nobody: bool) -> Command {
    if !as_nobody {
        return Command::new(path);
    }
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--reset-env",
        ])
        .arg(path);
    command
}

fn chown_nobody(path: &Path) {
    std::os::unix::fs::chown(path, Some(65534), Some(65534)).expect("chown to nobody");
}

fn kill_group(group: u32) {
    if let Some(pid) = i32::try_from(group)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// The processes whose parent is `parent`, read from `/proc`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| stat_fields(pid).is_some_and(|(_, ppid)| ppid == parent))
        .collect()
}

/// A process's state letter and parent from `/proc/PID/stat` (the fields after the
/// command's closing parenthesis); `None` once it is gone.
fn stat_fields(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut after = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = after.next()?.chars().next()?;
    let ppid = after.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether process `pid` still runs (a zombie, waiting to be reaped, does not).
fn running(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X'))
}

fn kill_pid(pid: u32) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

fn group_alive(group: u32) -> bool {
    i32::try_from(group)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .is_some_and(|pid| rustix::process::test_kill_process_group(pid).is_ok())
}

/// A shell that kills the server's process group once this test process is gone (a
/// test killed by its runner never runs `Drop`).
fn watchdog(group: u32, dir: &Path) -> Child {
    let script = format!(
        "while kill -0 {parent} 2>/dev/null; do sleep 1; done; kill -KILL -{group} 2>/dev/null; \
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

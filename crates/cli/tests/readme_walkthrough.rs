//! README.md's walkthrough, run as written: every ```sh block of its "Walkthrough"
//! section, in order, as one bash script (`set -euo pipefail`), in a fresh directory
//! holding a link to `examples/`. `flotilla` on its PATH is the binary under test and
//! `kubectl` the kubectl under test; HOME is a folder of its own (kubectl's caches). What
//! the walkthrough leaves behind must be in `.gitignore`.
//!
//! The walkthrough uses the default addresses (the hub on 127.0.0.1:6443, the simulator on
//! 127.0.0.1:7443). The script runs in a network namespace of its own where the machine
//! allows it (`unshare --net`, as root), so those ports are always free; elsewhere the
//! one substitution is a free port added to the `flotilla hub` and `flotilla sim` lines
//! (`--listen`). Its background processes (`… &`) share its process group, which is
//! stopped at the end whatever happened.

mod support;

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{free_port, kubectl_binary, repo_root, sh_blocks};

/// The heading of the section whose blocks are run.
const HEADING: &str = "## Walkthrough";

/// A process group that is SIGTERMed (then SIGKILLed) when dropped.
struct Group(Child);

impl Group {
    fn signal(&self, signal: &str) -> bool {
        Command::new("kill")
            .args([signal, "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.signal("-TERM");
        let _ = self.0.wait();
        // The background processes may outlive the script: wait until the group is gone.
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.signal("-0") {
            if Instant::now() >= deadline {
                self.signal("-KILL");
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Whether this machine gives a process a network namespace with loopback up.
fn network_namespaces() -> bool {
    Command::new("unshare")
        .args(["--net", "--", "ip", "link", "set", "lo", "up"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The last `n` lines of a file in `dir`, or why not.
fn tail(dir: &Path, name: &str, n: usize) -> String {
    match std::fs::read_to_string(dir.join(name)) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("({e})"),
    }
}

#[test]
fn the_readme_walkthrough_works_as_written() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let blocks = sh_blocks(&readme, HEADING);
    let script = blocks.join("\n");
    // The section is there and is the walkthrough: a hub, members joined, a placement
    // waited for.
    for needed in [
        "flotilla hub",
        "flotilla sim",
        "flotilla join",
        "kubectl apply -f examples/",
        "kubectl wait",
    ] {
        assert!(script.contains(needed), "no {needed:?} in {blocks:#?}");
    }

    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    std::os::unix::fs::symlink(root.join("examples"), dir.join("examples")).unwrap();
    let home = dir.join("home");
    std::fs::create_dir(&home).unwrap();
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_flotilla"), bin.join("flotilla")).unwrap();
    let kubectl = kubectl_binary();
    if kubectl.is_absolute() {
        std::os::unix::fs::symlink(&kubectl, bin.join("kubectl")).unwrap();
    }

    let isolated = network_namespaces();
    let script = if isolated {
        script
    } else {
        let (hub, sim) = (free_port(), free_port());
        let substituted = script
            .replace(
                "flotilla hub ",
                &format!("flotilla hub --listen 127.0.0.1:{hub} "),
            )
            .replace(
                "flotilla sim ",
                &format!("flotilla sim --listen 127.0.0.1:{sim} "),
            );
        assert!(substituted.contains("--listen 127.0.0.1:"), "{substituted}");
        substituted
    };
    std::fs::write(dir.join("walkthrough.sh"), &script).unwrap();

    let run = "bash -euo pipefail -x walkthrough.sh";
    let mut command = if isolated {
        let mut c = Command::new("unshare");
        c.args(["--net", "--", "sh", "-c"])
            .arg(format!("ip link set lo up && exec {run}"));
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", &format!("exec {run}")]);
        c
    };
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    command
        .current_dir(dir)
        .env("PATH", path)
        .env("HOME", &home)
        .env_remove("KUBECONFIG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(File::create(dir.join("stdout")).unwrap())
        .stderr(File::create(dir.join("stderr")).unwrap());
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut group = Group(command.spawn().expect("run the walkthrough"));

    // The script's own waits time out within minutes; this is the backstop.
    let deadline = Instant::now() + Duration::from_secs(600);
    let status = loop {
        if let Some(status) = group.0.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let report = || {
        format!(
            "\n--- trace (last lines)\n{}\n--- stdout\n{}\n--- hub.log\n{}\n--- sim.log\n{}",
            tail(dir, "stderr", 40),
            tail(dir, "stdout", 60),
            tail(dir, "hub.log", 20),
            tail(dir, "sim.log", 20)
        )
    };
    match status {
        Some(status) => assert!(
            status.success(),
            "the walkthrough failed: {status}{}",
            report()
        ),
        None => panic!("the walkthrough did not finish in 10 minutes{}", report()),
    }

    // What the README says the commands show.
    let stdout = std::fs::read_to_string(dir.join("stdout")).unwrap();
    let web = stdout
        .lines()
        .find(|l| l.starts_with("web "))
        .unwrap_or_default();
    assert!(web.contains("9/9"), "the hub's Deployment: {stdout}");
    assert!(
        stdout.contains("eu.mirror.example.com/library/nginx:1.27"),
        "member-2's image: {stdout}"
    );
    assert!(stdout.contains("member-3"), "the clusters: {stdout}");
    drop(group);

    // What the walkthrough leaves in the repository's root is ignored by git.
    let gitignore = std::fs::read_to_string(root.join(".gitignore")).unwrap();
    let ignored: Vec<&str> = gitignore
        .lines()
        .filter_map(|l| l.strip_prefix('/'))
        .collect();
    let ours = [
        "bin",
        "home",
        "examples",
        "walkthrough.sh",
        "stdout",
        "stderr",
    ];
    let mut left = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if !ours.contains(&name.as_str()) {
            left.push(name);
        }
    }
    assert!(left.len() >= 2, "the walkthrough made nothing? {left:?}");
    for name in &left {
        assert!(
            ignored.contains(&name.as_str()),
            "{name} is not in .gitignore"
        );
    }
}

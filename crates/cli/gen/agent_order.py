#!/usr/bin/env python3
"""Generates crates/cli/agent.order: the functions `flotilla agent` runs, which the release
build places together at the start of `.text` (see crates/cli/build.rs).

Run from the repository root, with valgrind and kubectl installed:

    python3 crates/cli/gen/agent_order.py [RELEASE_BINARY]

Without an argument it builds `cargo build --release -p flotilla-cli` and takes the binary
from `$CARGO_TARGET_DIR` (or `target`). It starts a hub and a simulator of two members in a
temporary directory, places a Deployment, and runs one agent under callgrind through what
agents do: registration with an auto-approve token, the Work applied, an image change,
drift corrected on the member, heartbeats and a facts report, a restart that finds its
certificate, and the Work released when its Placement goes. Every function callgrind saw
run that the binary defines in `.text` is written, one mangled name per line, sorted.

The names carry the compiler's hashes, so a new toolchain or new dependency versions make
the list stale: the linker skips what it cannot find, and the benchmark's agent RSS shows
it. Run this again after such a change.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

OUT = "crates/cli/agent.order"
DEADLINE = 120  # seconds to wait for any one state


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(what, check, deadline=DEADLINE):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.5)
    sys.exit(f"agent_order: timed out waiting for {what}")


def kubectl(kubeconfig, *args, input=None):
    return subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, *args],
        input=input,
        capture_output=True,
        text=True,
    )


def member_image(member):
    out = kubectl(member, "-n", "bench", "get", "deploy", "web", "-o",
                  "jsonpath={.spec.template.spec.containers[0].image} {.spec.replicas}")
    return out.stdout if out.returncode == 0 else None


PLACED = """apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: bench}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1"}]}
---
apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {name: web, namespace: bench}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
"""


def build():
    subprocess.run(["cargo", "build", "--release", "-p", "flotilla-cli"], check=True)
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    return os.path.join(target, "release", "flotilla")


def agent_under_callgrind(binary, command, tmp, log):
    return subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--demangle=no", "--dump-instr=no",
         f"--callgrind-out-file={tmp}/callgrind.%p", binary, *command],
        stdout=log, stderr=subprocess.STDOUT,
    )


def stop(process):
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=DEADLINE)


def record(binary, tmp):
    """Runs the agent through its life under callgrind; callgrind's files land in tmp."""
    processes = []
    log = open(os.path.join(tmp, "processes.log"), "w")
    try:
        hub_dir, sim_dir = os.path.join(tmp, "hub"), os.path.join(tmp, "sim")
        processes.append(subprocess.Popen(
            [binary, "hub", "--data-dir", hub_dir, "--listen", f"127.0.0.1:{free_port()}"],
            stdout=log, stderr=subprocess.STDOUT))
        hub = os.path.join(hub_dir, "admin.kubeconfig")
        wait("the hub's kubeconfig", lambda: os.path.exists(hub))
        processes.append(subprocess.Popen(
            [binary, "sim", "--clusters", "1", "--data-dir", sim_dir,
             "--listen", f"127.0.0.1:{free_port()}", "--ready-delay", "100ms"],
            stdout=log, stderr=subprocess.STDOUT))
        member = os.path.join(sim_dir, "kubeconfigs", "member-1.kubeconfig")
        wait("the hub", lambda: kubectl(hub, "get", "ns").returncode == 0)
        wait("the member", lambda: os.path.exists(member)
             and kubectl(member, "get", "ns").returncode == 0)
        if kubectl(hub, "create", "ns", "bench").returncode != 0:
            sys.exit("agent_order: cannot create namespace bench on the hub")
        applied = kubectl(hub, "apply", "--server-side", "-f", "-", input=PLACED)
        if applied.returncode != 0:
            sys.exit(f"agent_order: {applied.stderr.strip()}")

        token = subprocess.run([binary, "token", "create", "--auto-approve",
                                "--hub-kubeconfig", hub],
                               capture_output=True, text=True, check=True).stdout.split("\n")
        words = token[1].split()
        flag = lambda name: words[words.index(name) + 1]
        agent_dir = os.path.join(tmp, "agent")
        command = ["agent", "--hub", flag("--hub"), "--token", token[0].strip(),
                   "--ca-hash", flag("--ca-hash"), "--cluster", "solo",
                   "--kubeconfig", member, "--data-dir", agent_dir]

        # First life: registration, the Work, a change, drift, heartbeats and facts.
        agent = agent_under_callgrind(binary, command, tmp, log)
        processes.append(agent)
        wait("the Work applied", lambda: member_image(member) == "nginx:1 2")
        kubectl(hub, "-n", "bench", "patch", "deployment", "web", "--type=json", "-p",
                '[{"op":"replace","path":"/spec/template/spec/containers/0/image",'
                '"value":"nginx:2"}]')
        wait("the change applied", lambda: member_image(member) == "nginx:2 2")
        kubectl(member, "-n", "bench", "scale", "deployment", "web", "--replicas", "5")
        wait("the drift corrected", lambda: member_image(member) == "nginx:2 2")
        # Six heartbeats: the agent's first look at the member's facts.
        time.sleep(65)
        stop(agent)

        # Second life: a restart with its certificate, then the Work released.
        restarted = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        agent = agent_under_callgrind(binary, command, tmp, log)
        processes.append(agent)
        wait("the restarted agent's Lease", lambda: kubectl(
            hub, "-n", "flotilla-cluster-solo", "get", "lease", "-o",
            "jsonpath={.items[0].spec.renewTime}").stdout > restarted)
        kubectl(hub, "-n", "bench", "delete", "placement", "web")
        wait("the Work released", lambda: member_image(member) is None)
        stop(agent)
    finally:
        for process in processes:
            process.kill()
            process.wait()
        log.close()


def executed(tmp):
    """The names of the functions in callgrind's files (`fn=` and `cfn=` lines; a name is
    given once with its number, then the number alone)."""
    names = set()
    line = re.compile(r"^c?fn=\((\d+)\)(?: (.+))?$")
    for file in os.listdir(tmp):
        if not file.startswith("callgrind."):
            continue
        for text in open(os.path.join(tmp, file), errors="replace"):
            m = line.match(text.rstrip("\n"))
            if m and m.group(2):
                names.add(m.group(2))
    return names


def text_symbols(binary):
    out = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True,
                         check=True).stdout
    return {parts[2] for parts in (l.split() for l in out.splitlines())
            if len(parts) == 3 and parts[1] in "tTwW"}


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else build()
    rustc = subprocess.run(["rustc", "-V"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="agent-order-") as tmp:
        record(binary, tmp)
        names = sorted(executed(tmp) & text_symbols(binary))
    if len(names) < 1000:
        sys.exit(f"agent_order: only {len(names)} functions recorded; is {binary} stripped?")
    with open(OUT, "w") as out:
        out.write(f"# Generated by crates/cli/gen/agent_order.py with {rustc}: the {len(names)}\n"
                  "# functions an agent ran, placed first in release builds (crates/cli/build.rs).\n")
        out.writelines(name + "\n" for name in names)
    print(f"{OUT}: {len(names)} functions")


if __name__ == "__main__":
    main()

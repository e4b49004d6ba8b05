//! Lays out the release binary's code for `flotilla agent`.
//!
//! Every role shares one binary, but an agent runs a few MB of its 39 MB of code. Spread
//! through the whole `.text`, those functions map about 19 MiB into an agent's RSS: the
//! kernel maps the pages around each page fault (fault-around), and nearly every mapped
//! block holds a little agent code. `agent.order` lists the functions an agent was seen to
//! run (recorded by `gen/agent_order.py`), and the linker places them first, together.
//!
//! Only for release builds linked by rustc's own lld (the default on x86_64 Linux since
//! Rust 1.90): symbols the list names and the binary no longer has are skipped silently,
//! so a stale list costs memory, never a build.

use std::collections::BTreeSet;
use std::env;
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=agent.order");
    println!("cargo::rerun-if-changed=build.rs");
    if env::var("PROFILE").as_deref() != Ok("release") || !links_with_rust_lld() {
        return;
    }
    let order = format!("{}/agent.order", env!("CARGO_MANIFEST_DIR"));
    println!("cargo::rustc-link-arg-bins=-Wl,--symbol-ordering-file={order}");
    println!("cargo::rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    // ThinLTO's promoted local functions are named `NAME.llvm.HASH`, where the hash follows
    // the module (and so the directory the build runs in): they are matched by section
    // name without it, and placed just before `.text`, beside the ordered ones.
    let Ok(list) = std::fs::read_to_string(&order) else {
        return;
    };
    // One pattern per name, however many of its copies the list recorded.
    let promoted: BTreeSet<&str> = list
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|name| name.split_once(".llvm.").map(|(base, _)| base))
        .collect();
    if promoted.is_empty() {
        return;
    }
    let mut script = String::from("SECTIONS {\n  .text.agent : {\n");
    for base in promoted {
        script.push_str(&format!("    *(.text.{base}.llvm.*)\n"));
    }
    script.push_str("  }\n}\nINSERT BEFORE .text;\n");
    let path = format!("{}/agent-order.ld", env::var("OUT_DIR").unwrap_or_default());
    if std::fs::write(&path, script).is_ok() {
        println!("cargo::rustc-link-arg-bins=-Wl,-T,{path}");
    }
}

/// Whether the binary is linked by rustc's default lld: x86_64 Linux, Rust 1.90 or later,
/// and no linker chosen in the flags or the configuration.
fn links_with_rust_lld() -> bool {
    if env::var("TARGET").as_deref() != Ok("x86_64-unknown-linux-gnu")
        || env::var_os("RUSTC_LINKER").is_some()
    {
        return false;
    }
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if flags.contains("linker") || flags.contains("fuse-ld") {
        return false;
    }
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let Ok(out) = Command::new(rustc).arg("-V").output() else {
        return false;
    };
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let version = String::from_utf8_lossy(&out.stdout).into_owned();
    let minor = version
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok());
    minor.is_some_and(|m| m >= 90)
}

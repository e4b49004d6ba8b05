//! `flotilla`: one binary, one subcommand per role.

/// jemalloc rather than the system allocator: a hub holds a few hundred thousand small
/// objects that live long among many that do not (watch events, requests), and glibc's
/// per-thread arenas kept RSS at 1.4–1.5× the live heap. Measured side by side
/// (`flotilla bench --scenario resync`, 1,000 placements × 100 clusters): restart peak RSS
/// 909 → 778 MiB, setup 172 → 115 s; an idle hub 26 → 28 MiB. See docs/performance.md.
///
/// The `system-allocator` feature leaves it out, for heap profilers that hook the system
/// allocator (heaptrack, valgrind's massif); see docs/performance.md.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    flotilla_cli::Args::parse_and_run()
}

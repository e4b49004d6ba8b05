//! The conformance suite of Flotilla's [`Store`]: the one set of
//! tests every backend runs, so that every backend has the same, etcd-like semantics.
//!
//! A backend implements [`Harness`] (how to make, open and reopen a store location) and
//! invokes [`conformance!`] in one of its integration tests:
//!
//! ```no_run
//! // tests/conformance.rs of a backend
//! use std::sync::Arc;
//!
//! use flotilla_store::Store;
//!
//! struct MyHarness {
//!     dir: std::path::PathBuf,
//! }
//!
//! #[async_trait::async_trait]
//! impl flotilla_store_tests::Harness for MyHarness {
//!     const DURABLE: bool = true;
//!     async fn new() -> Self {
//!         todo!("make a temporary directory")
//!     }
//!     async fn open(&self) -> Arc<dyn Store> {
//!         todo!("open the backend's store in self.dir")
//!     }
//!     fn location(&self) -> String {
//!         self.dir.display().to_string()
//!     }
//!     fn at(location: &str) -> Self {
//!         MyHarness { dir: location.into() }
//!     }
//! }
//!
//! flotilla_store_tests::conformance!(MyHarness, durable);
//! # fn main() {}
//! ```
//!
//! The macro emits one named test per case of [`cases`]; the `durable` arm adds the cases
//! that restart the store (a clean reopen, and `kill -9` of a child process that is busy
//! writing). The cases only use the [`Store`] trait, so each one
//! can also be called directly.

pub mod cases;
mod support;

use std::sync::Arc;

use flotilla_store::Store;

/// How the conformance suite makes and opens store locations of one backend.
#[async_trait::async_trait]
pub trait Harness: Send + Sync + Sized + 'static {
    /// Acknowledged writes survive a crash of the process (enables the durable cases).
    const DURABLE: bool;

    /// A fresh, empty store location (e.g. a new temp dir the harness owns).
    async fn new() -> Self;

    /// Opens the store at this location. For durable backends, may be called again after
    /// every Arc from a previous open was dropped, to reopen the same data.
    async fn open(&self) -> Arc<dyn Store>;

    /// A string naming this location, for a child process.
    fn location(&self) -> String;

    /// The harness of a location named by `location` (in the child process; does not
    /// own/delete it).
    fn at(location: &str) -> Self;
}

/// A store served by a server process the harness runs (PostgreSQL, etcd), which the
/// server cases kill with SIGKILL and start again, and open from several processes.
#[async_trait::async_trait]
pub trait ServerHarness: Harness {
    /// A fresh, empty store location on a server of its own, which the case may kill
    /// (where [`Harness::new`] may share one server between the stores of a process).
    async fn new_server() -> Self;

    /// Kills the server with SIGKILL (every process of it), as a crash would.
    async fn kill_server(&self);

    /// Starts the killed server again on the same data and address; returns once it
    /// serves.
    async fn restart_server(&self);
}

/// Emits the conformance suite for a [`Harness`] as named tests.
///
/// * `conformance!(MyHarness)`: every case that holds for any backend, each as a
///   `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` (the property test as a
///   plain `#[test]` with its own runtime).
/// * `conformance!(MyHarness, durable)`: those, plus the cases that restart the store:
///   `reopen_preserves_everything`, `kill9_acknowledged_writes_survive`, and the ignored
///   `kill9_child` that the latter runs as a child process. The harness must say
///   `DURABLE = true`.
/// * `conformance!(MyHarness, durable, server)`: those, plus the cases of a store on a
///   server ([`ServerHarness`]): `server_kill9_acknowledged_writes_survive` and
///   `writers_in_several_processes` (with its ignored child `writers_child`).
///
/// Invoke it once per module, at module level.
#[macro_export]
macro_rules! conformance {
    (@base $harness:ty) => {
        #[doc(hidden)]
        mod __flotilla_store_tests {
            pub use $crate::__private::tokio;
        }
        $crate::__conformance_cases!(async $harness;
            put_get_update_delete_roundtrip,
            failed_writes_consume_no_revision,
            empty_key_is_rejected,
            binary_keys_and_values_roundtrip,
            create_on_existing_key_fails,
            update_conflict_carries_current_value,
            update_of_missing_key_is_not_found,
            delete_conflict_carries_current_value,
            delete_of_missing_key_is_not_found,
            unconditional_delete,
            recreate_after_delete_gets_new_create_revision,
            get_at_past_revisions,
            list_respects_prefix_boundaries,
            list_pagination_is_a_consistent_snapshot,
            list_without_limit_and_count,
            reads_ahead_of_current_revision_fail,
            watch_from_revision_delivers_exactly_later_events,
            watch_events_carry_kind_prev_kv_and_revisions,
            watch_from_current_revision_sees_only_new_writes,
            watch_filters_by_prefix,
            watch_from_zero_on_fresh_store,
            changes_of_a_range_end_at_its_last_revision,
            compaction_keeps_reads_at_and_after_the_compacted_revision,
            compaction_fails_watches_from_before_it,
            compact_bounds_and_repeats,
            compaction_forgets_deleted_keys,
            slow_watcher_receives_every_event_in_order,
            concurrent_writers_get_distinct_gap_free_revisions,
        );
        $crate::__conformance_cases!(sync $harness; model_based_random_operations);
    };
    ($harness:ty, durable, server) => {
        $crate::conformance!($harness, durable);
        $crate::__conformance_cases!(async $harness; server_kill9_acknowledged_writes_survive);

        #[$crate::__private::tokio::test(
            flavor = "multi_thread",
            worker_threads = 2,
            crate = "__flotilla_store_tests::tokio"
        )]
        async fn writers_in_several_processes() {
            let child = $crate::__private::child_test_name(::core::module_path!(), "writers_child");
            $crate::cases::writers_in_several_processes::<$harness>(&child).await
        }

        #[test]
        #[ignore = "child process of writers_in_several_processes"]
        fn writers_child() {
            $crate::cases::writers_child::<$harness>()
        }
    };
    ($harness:ty, durable) => {
        const _: () = ::core::assert!(
            <$harness as $crate::Harness>::DURABLE,
            "the durable conformance cases need a harness with DURABLE = true"
        );
        $crate::conformance!(@base $harness);
        $crate::__conformance_cases!(async $harness; reopen_preserves_everything);

        #[$crate::__private::tokio::test(
            flavor = "multi_thread",
            worker_threads = 2,
            crate = "__flotilla_store_tests::tokio"
        )]
        async fn kill9_acknowledged_writes_survive() {
            let child = $crate::__private::child_test_name(::core::module_path!(), "kill9_child");
            $crate::cases::kill9_acknowledged_writes_survive::<$harness>(&child).await
        }

        #[test]
        #[ignore = "child process of kill9_acknowledged_writes_survive"]
        fn kill9_child() {
            $crate::cases::kill9_child::<$harness>()
        }
    };
    ($harness:ty) => {
        const _: () = ::core::assert!(
            !<$harness as $crate::Harness>::DURABLE,
            "a durable harness must run the durable cases too: conformance!(Harness, durable)"
        );
        $crate::conformance!(@base $harness);
    };
}

/// Emits one test per case name; used by [`conformance!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    (async $harness:ty; $($case:ident),* $(,)?) => {
        $(
            #[$crate::__private::tokio::test(
                flavor = "multi_thread",
                worker_threads = 2,
                crate = "__flotilla_store_tests::tokio"
            )]
            async fn $case() {
                $crate::cases::$case::<$harness>().await
            }
        )*
    };
    (sync $harness:ty; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::cases::$case::<$harness>()
            }
        )*
    };
}

/// What the expansion of [`conformance!`] refers to; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use tokio;

    /// The name libtest knows a test by, from the `module_path!()` where it was emitted:
    /// the path without its first segment (the crate), then the test's name.
    pub fn child_test_name(module_path: &str, test: &str) -> String {
        match module_path.split_once("::") {
            Some((_crate, module)) => format!("{module}::{test}"),
            None => test.to_owned(),
        }
    }
}

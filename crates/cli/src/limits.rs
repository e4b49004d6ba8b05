//! The open-file limit of a serving process.
//!
//! Every connection is a file descriptor: a hub holds one per member cluster for its drift
//! watch besides its clients' own, and the simulator serves every member's watches from
//! one process. Linux starts a process with a soft limit that is often 1,024 (a relic of
//! `select`; tokio uses epoll), so a long-running role raises it at start, as the Go
//! runtime does for every Go server: to the hard limit, and above it when the process is
//! privileged to.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// What a serving process asks for when it cannot tell its load: 65,536 descriptors.
pub const SERVING: u64 = 65_536;

/// The open-file limit before and after [`raise_open_files`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit the process started with (`u64::MAX` for none).
    pub before: u64,
    /// The soft limit now.
    pub now: u64,
}

impl OpenFiles {
    /// Whether the limit now reaches `wanted`.
    pub fn reaches(&self, wanted: u64) -> bool {
        self.now >= wanted
    }
}

/// How many descriptors a simulator of `members` clusters needs: four per member (the
/// hub's drift watch and request connections, and whatever else watches it) and 1,024 for
/// everything else.
pub fn needed_by_members(members: u64) -> u64 {
    members.saturating_mul(4).saturating_add(1024)
}

/// The warning to give when the limit reached is below what is `needed`, saying how many
/// that is; none when it is enough (a limit below [`SERVING`] alone is no reason to warn).
pub fn shortfall_warning(files: OpenFiles, needed: u64, what: &str) -> Option<String> {
    (!files.reaches(needed)).then(|| {
        format!(
            "the open-file limit is {}, below the {needed} that {what} need: raise it \
             (ulimit -n {needed}) or connections past it will wait",
            files.now
        )
    })
}

fn value(limit: Option<u64>) -> u64 {
    limit.unwrap_or(u64::MAX)
}

/// Raises this process's soft open-file limit to `wanted`: past the hard limit only when
/// the process may raise that too (it is privileged), otherwise up to the hard limit.
/// Never lowers either limit.
pub fn raise_open_files(wanted: u64) -> OpenFiles {
    let limit = getrlimit(Resource::Nofile);
    let (soft, hard) = (value(limit.current), value(limit.maximum));
    let before = soft;
    if soft >= wanted {
        return OpenFiles { before, now: soft };
    }
    if wanted > hard {
        let raised = Rlimit {
            current: Some(wanted),
            maximum: Some(wanted),
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return OpenFiles {
                before,
                now: wanted,
            };
        }
    }
    let target = wanted.min(hard);
    let raised = Rlimit {
        current: Some(target),
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => OpenFiles {
            before,
            now: target,
        },
        Err(_) => OpenFiles { before, now: soft },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The limit is the process's: under `cargo test` these share one, so they take turns.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn soft_and_hard() -> (u64, u64) {
        let limit = getrlimit(Resource::Nofile);
        (value(limit.current), value(limit.maximum))
    }

    fn set_soft(soft: u64) {
        let hard = getrlimit(Resource::Nofile).maximum;
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(soft),
                maximum: hard,
            },
        )
        .expect("lowering the soft limit is always allowed");
    }

    #[test]
    fn a_low_soft_limit_rises_to_what_is_wanted_within_the_hard_limit() {
        let _turn = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (_, hard) = soft_and_hard();
        assert!(hard > 300, "this machine's hard limit is {hard}");
        set_soft(100);
        let raised = raise_open_files(300);
        assert_eq!(
            raised,
            OpenFiles {
                before: 100,
                now: 300
            }
        );
        assert_eq!(soft_and_hard(), (300, hard), "the hard limit stays");
        assert!(raised.reaches(300) && !raised.reaches(301));
    }

    #[test]
    fn past_the_hard_limit_it_gets_the_hard_limit_at_least() {
        let _turn = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (_, hard) = soft_and_hard();
        set_soft(100);
        let wanted = hard.saturating_add(1000);
        let raised = raise_open_files(wanted);
        assert_eq!(raised.before, 100);
        // A privileged process gets what it asked for (the hard limit rises with it);
        // any other gets the hard limit.
        assert!(
            raised.now == wanted || raised.now == hard,
            "{raised:?}, hard limit {hard}"
        );
        assert_eq!(soft_and_hard().0, raised.now);
    }

    #[test]
    fn the_warning_comes_only_below_what_the_members_need_and_names_it() {
        let limit = |now| OpenFiles { before: 1024, now };
        let needed = needed_by_members(3);
        assert_eq!(needed, 1036);
        // A hard limit of 4,096 is below SERVING but plenty for 3 members: no warning.
        assert_eq!(shortfall_warning(limit(4096), needed, "3 clusters"), None);
        assert_eq!(shortfall_warning(limit(1036), needed, "3 clusters"), None);
        let warning = shortfall_warning(limit(1035), needed, "3 clusters").unwrap();
        assert!(
            warning.contains("is 1035, below the 1036 that 3 clusters need")
                && warning.contains("ulimit -n 1036"),
            "{warning}"
        );
        let needed = needed_by_members(20_000);
        assert_eq!(needed, 81_024);
        let warning = shortfall_warning(limit(65_536), needed, "20000 clusters").unwrap();
        assert!(warning.contains("below the 81024"), "{warning}");
        assert_eq!(needed_by_members(u64::MAX), u64::MAX);
    }

    #[test]
    fn a_limit_that_is_high_enough_is_left_alone() {
        let _turn = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        set_soft(500);
        assert_eq!(
            raise_open_files(200),
            OpenFiles {
                before: 500,
                now: 500
            }
        );
        assert_eq!(soft_and_hard().0, 500, "never lowered");
    }
}

//! When a Work's status is worth writing: after a new generation is applied, the member's
//! rollout reports back within moments, so the status is written once then, with its
//! availability, rather than now and again then. Push (the hub's Work controller) and pull
//! (the agent) both wait so: one status write per Work and change, not two.
//!
//! ```text
//!  sync ─► applied a generation the last status is not of, not Available yet?
//!            └─ yes: hold the status until the first sync SETTLING after the first such
//!                    sync (a report of the rollout still under way is held too)
//!            └─ no, or the wait is over: write it (if it changed)
//! ```

use std::time::{Duration, Instant};

use flotilla_api::WorkStatus;
use flotilla_api::condition::AVAILABLE;

/// The longest a Work's status waits for its member's rollout to report back after a new
/// generation was applied (twice the time the member's changes are gathered).
pub const SETTLING: Duration = Duration::from_secs(2);

/// Until when a sync's `status` is better left unwritten, for the member's rollout to
/// report back: a new generation was just `applied` (the `previous` status is of another)
/// and is not available yet. The wait starts at the first such sync (`now`, or the end of
/// a wait already under way, `waiting`) and lasts [`SETTLING`]; `None` once it is over,
/// or when the status is to be written now.
pub fn settles_until(
    previous: Option<&WorkStatus>,
    status: &WorkStatus,
    applied: bool,
    waiting: Option<Instant>,
    now: Instant,
) -> Option<Instant> {
    let available = status
        .conditions
        .iter()
        .any(|c| c.type_ == AVAILABLE && c.status == "True");
    let rolling_out = applied
        && !available
        && previous.and_then(|s| s.observed_generation) != status.observed_generation;
    let until = waiting.unwrap_or(now + SETTLING);
    (rolling_out && now < until).then_some(until)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    use super::*;

    #[test]
    fn a_new_generation_rolling_out_waits_for_its_availability_a_while() {
        let condition = |type_: &str, status: &str| Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: String::new(),
            last_transition_time: Time(Default::default()),
            observed_generation: None,
        };
        let status = |generation: i64, available: &str| WorkStatus {
            observed_generation: Some(generation),
            conditions: vec![
                condition(flotilla_api::condition::APPLIED, "True"),
                condition(flotilla_api::condition::AVAILABLE, available),
            ],
            ..WorkStatus::default()
        };
        let before = status(1, "True");
        let now = Instant::now();
        let later = now + SETTLING / 2;
        let over = now + SETTLING;
        // Generation 2 applied, rolling out: wait SETTLING from the first sync that saw it,
        // whatever syncs come in between (a report of the rollout still under way).
        let until = settles_until(Some(&before), &status(2, "False"), true, None, now);
        assert_eq!(until, Some(now + SETTLING));
        assert_eq!(
            settles_until(Some(&before), &status(2, "False"), true, until, later),
            until
        );
        assert_eq!(
            settles_until(Some(&before), &status(2, "False"), true, until, over),
            None
        );
        // First delivery alike.
        assert!(settles_until(None, &status(1, "Unknown"), true, None, now).is_some());
        // Available (at once, or while waiting), not applied, or the same generation:
        // written now.
        for (status, applied) in [
            (status(2, "True"), true),
            (status(2, "False"), false),
            (status(1, "False"), true),
        ] {
            assert_eq!(
                settles_until(Some(&before), &status, applied, None, now),
                None
            );
            assert_eq!(
                settles_until(Some(&before), &status, applied, until, later),
                None
            );
        }
    }
}

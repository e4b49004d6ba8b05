//! The `Applied` and `Available` conditions, per manifest and over a whole Work, with
//! transition times that move only when a condition's status does (so a sync that finds
//! nothing new returns an equal status).

use flotilla_api::ManifestStatus;
use flotilla_api::condition::{APPLIED, AVAILABLE};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    True,
    False,
    Unknown,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            State::True => "True",
            State::False => "False",
            State::Unknown => "Unknown",
        }
    }
}

impl From<bool> for State {
    fn from(ok: bool) -> Self {
        if ok { State::True } else { State::False }
    }
}

/// Now, to the second (what survives a round trip through the API).
pub(crate) fn now() -> Time {
    Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// A condition whose transition time is kept from `previous` (the same type in the last
/// status) when its status has not changed, and is `now` otherwise.
pub(crate) fn condition(
    type_: &str,
    state: State,
    reason: &str,
    message: String,
    generation: Option<i64>,
    previous: &[Condition],
    now: &Time,
) -> Condition {
    flotilla_api::condition::keep_time(
        type_,
        state.as_str(),
        reason,
        message,
        generation,
        previous,
        now,
    )
}

/// `Applied` and `Available` over every manifest, with counts. A condition that is
/// `True` changed when the last manifest became so; one that is not changed when the
/// earliest of the manifests holding it back did (the Work's own last status is not at
/// hand, so its times derive from the manifests'; with no manifests, the epoch).
pub(crate) fn summary(manifests: &[ManifestStatus], generation: Option<i64>) -> Vec<Condition> {
    let total = manifests.len();
    [
        (APPLIED, "applied", "Applied", "NotApplied"),
        (AVAILABLE, "available", "Available", "NotAvailable"),
    ]
    .into_iter()
    .map(|(type_, verb, yes, no)| {
        let of = |m| of_type(m, type_);
        let holding_back: Vec<(&ManifestStatus, &Condition)> = manifests
            .iter()
            .filter_map(|m| {
                let c = of(m)?;
                (c.status != "True").then_some((m, c))
            })
            .collect();
        let good = total - holding_back.len();
        let mut message = format!("{good}/{total} manifests {verb}");
        let times = manifests
            .iter()
            .filter_map(of)
            .map(|c| &c.last_transition_time);
        let (state, reason, time) = match holding_back.first() {
            None => (State::True, yes, times.max()),
            Some((first, c)) => {
                message += &format!("; {}: {}: {}", describe(first), c.reason, c.message);
                let earliest = holding_back
                    .iter()
                    .map(|(_, c)| &c.last_transition_time)
                    .min();
                (State::False, no, earliest)
            }
        };
        Condition {
            type_: type_.to_owned(),
            status: state.as_str().to_owned(),
            reason: reason.to_owned(),
            message,
            observed_generation: generation,
            last_transition_time: time.cloned().unwrap_or(Time(Timestamp::UNIX_EPOCH)),
        }
    })
    .collect()
}

fn of_type<'a>(manifest: &'a ManifestStatus, type_: &str) -> Option<&'a Condition> {
    manifest.conditions.iter().find(|c| c.type_ == type_)
}

/// `Kind namespace/name` (or `Kind name`).
pub(crate) fn describe(m: &ManifestStatus) -> String {
    match &m.namespace {
        Some(namespace) => format!("{} {namespace}/{}", m.kind, m.name),
        None => format!("{} {}", m.kind, m.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap())
    }

    fn manifest(name: &str, applied: (State, i64), available: (State, i64)) -> ManifestStatus {
        let c = |type_, (state, second): (State, i64), reason: &str| {
            condition(
                type_,
                state,
                reason,
                "why".into(),
                Some(1),
                &[],
                &at(second),
            )
        };
        ManifestStatus {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("shop".into()),
            name: name.into(),
            conditions: vec![
                c(APPLIED, applied, "Applied"),
                c(AVAILABLE, available, "Applied"),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn transition_times_move_with_the_status_only() {
        let first = condition(
            APPLIED,
            State::True,
            "Applied",
            "a".into(),
            Some(1),
            &[],
            &at(10),
        );
        let again = condition(
            APPLIED,
            State::True,
            "Applied",
            "b".into(),
            Some(2),
            std::slice::from_ref(&first),
            &at(20),
        );
        assert_eq!(again.last_transition_time, at(10));
        assert_eq!(again.message, "b");
        let flipped = condition(
            APPLIED,
            State::False,
            "Conflict",
            "c".into(),
            Some(2),
            &[again],
            &at(30),
        );
        assert_eq!(flipped.last_transition_time, at(30));
        assert_eq!(flipped.status, "False");
    }

    #[test]
    fn the_summary_counts_and_derives_its_times() {
        let all = [
            manifest("a", (State::True, 5), (State::True, 7)),
            manifest("b", (State::True, 6), (State::True, 9)),
        ];
        let summary = summary(&all, Some(3));
        assert_eq!(summary[0].type_, APPLIED);
        assert_eq!(summary[0].status, "True");
        assert_eq!(summary[0].message, "2/2 manifests applied");
        assert_eq!(summary[0].last_transition_time, at(6));
        assert_eq!(summary[1].last_transition_time, at(9));
        assert_eq!(summary[1].observed_generation, Some(3));

        let some = [
            manifest("a", (State::True, 5), (State::True, 7)),
            manifest("b", (State::False, 8), (State::Unknown, 8)),
            manifest("c", (State::False, 4), (State::Unknown, 4)),
        ];
        let summary = super::summary(&some, None);
        assert_eq!(summary[0].status, "False");
        assert_eq!(summary[0].reason, "NotApplied");
        assert_eq!(
            summary[0].message,
            "1/3 manifests applied; ConfigMap shop/b: Applied: why"
        );
        assert_eq!(summary[0].last_transition_time, at(4));
        assert_eq!(summary[1].status, "False");
        assert_eq!(
            summary[1].message.split(';').next(),
            Some("1/3 manifests available")
        );

        let none = super::summary(&[], None);
        assert_eq!(none[0].status, "True");
        assert_eq!(none[0].message, "0/0 manifests applied");
    }
}

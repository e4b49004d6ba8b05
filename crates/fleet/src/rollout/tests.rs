use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;

use super::Strategy;
use super::*;
use crate::LabelSelector;

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap()
}

const NOW: i64 = 10_000;

/// A member at revision `revision`, moved at `moved`, available since `up` (seconds).
fn member(name: &str, revision: Option<i64>, moved: Option<i64>, up: Option<i64>) -> Member {
    Member {
        name: name.to_owned(),
        labels: BTreeMap::new(),
        revision,
        moved_at: moved.map(at),
        available_since: up.map(at),
        unavailable: up.is_none().then(|| "ImagePullBackOff".to_owned()),
    }
}

fn labelled(mut m: Member, key: &str, value: &str) -> Member {
    m.labels.insert(key.to_owned(), value.to_owned());
    m
}

fn rolling(max_unavailable: Count, min_ready_seconds: i64) -> Strategy {
    Strategy {
        kind: Kind::Rolling {
            max_unavailable,
            max_surge: Count::Clusters(0),
            min_ready_seconds,
        },
        progress_deadline_seconds: 600,
        paused: false,
    }
}

fn run(members: &[Member], strategy: &Strategy, approved: &[&str]) -> Wave {
    let approved: BTreeSet<String> = approved.iter().map(|s| s.to_string()).collect();
    plan(Input {
        members,
        target: 2,
        strategy,
        approved: &approved,
        now: at(NOW),
    })
}

fn names(moves: &[String]) -> Vec<&str> {
    moves.iter().map(String::as_str).collect()
}

#[test]
fn all_moves_every_cluster_at_once() {
    let members: Vec<Member> = ["c", "a", "b"]
        .iter()
        .map(|n| member(n, Some(1), Some(0), Some(0)))
        .collect();
    let strategy = Strategy {
        kind: Kind::All,
        progress_deadline_seconds: 600,
        paused: false,
    };
    let wave = run(&members, &strategy, &[]);
    assert_eq!(names(&wave.moves), ["a", "b", "c"]);
    assert_eq!(wave.updated, 3);
    assert!(!wave.complete);
}

#[test]
fn rolling_moves_at_most_max_unavailable_and_the_next_once_ready() {
    let mut members: Vec<Member> = (0..10)
        .map(|i| member(&format!("c{i}"), Some(1), Some(0), Some(0)))
        .collect();
    let strategy = rolling(Count::Clusters(2), 5);
    let wave = run(&members, &strategy, &[]);
    assert_eq!(names(&wave.moves), ["c0", "c1"]);
    assert_eq!(wave.waiting.len(), 8);
    assert_eq!(wave.waiting[0].1, Wait::InFlight { limit: 2 });
    // c0 moved and available 3 s: not ready for 5 s yet; c1 moved, not available.
    members[0] = member("c0", Some(2), Some(NOW - 4), Some(NOW - 3));
    members[1] = member("c1", Some(2), Some(NOW - 4), None);
    let wave = run(&members, &strategy, &[]);
    assert!(wave.moves.is_empty());
    assert_eq!(wave.recheck_after, Some(2));
    // Ready for 5 s: one place is free.
    members[0] = member("c0", Some(2), Some(NOW - 10), Some(NOW - 5));
    let wave = run(&members, &strategy, &[]);
    assert_eq!(names(&wave.moves), ["c2"]);
    assert_eq!((wave.updated, wave.available), (3, 1));
}

#[test]
fn percentages_round_down_for_unavailable_and_up_for_surge() {
    assert_eq!(Count::Percent(25).down(10), 2);
    assert_eq!(Count::Percent(25).up(10), 3);
    assert_eq!(Count::Clusters(3).down(1), 3);
    // 25% of 3 is 0: still one at a time.
    let members: Vec<Member> = ["a", "b", "c"]
        .iter()
        .map(|n| member(n, Some(1), Some(0), Some(0)))
        .collect();
    let wave = run(&members, &rolling(Count::Percent(25), 0), &[]);
    assert_eq!(names(&wave.moves), ["a"]);
}

#[test]
fn a_cluster_past_its_deadline_fails_and_halts_the_rollout() {
    let members = vec![
        member("a", Some(2), Some(NOW - 601), None),
        member("b", Some(1), Some(0), Some(0)),
    ];
    let wave = run(&members, &rolling(Count::Clusters(2), 0), &[]);
    assert!(wave.moves.is_empty());
    assert_eq!(wave.failed.len(), 1);
    assert_eq!(wave.failed[0].0, "a");
    assert!(
        wave.failed[0].1.contains("ImagePullBackOff"),
        "{:?}",
        wave.failed
    );
    assert_eq!(wave.waiting, [("b".to_owned(), Wait::Halted)]);
    // Within the deadline it is only in flight, looked at again when the deadline passes.
    let members = vec![member("a", Some(2), Some(NOW - 590), None)];
    let wave = run(&members, &rolling(Count::Clusters(2), 0), &[]);
    assert!(wave.failed.is_empty());
    assert_eq!(wave.recheck_after, Some(11));
}

#[test]
fn a_paused_rollout_moves_nothing() {
    let members = vec![member("a", Some(1), Some(0), Some(0))];
    let mut strategy = rolling(Count::Clusters(2), 0);
    strategy.paused = true;
    let wave = run(&members, &strategy, &[]);
    assert!(wave.moves.is_empty());
    assert_eq!(wave.waiting, [("a".to_owned(), Wait::Paused)]);
}

fn stage(name: &str, label: Option<(&str, &str)>, approval: bool, soak: i64) -> Stage {
    Stage {
        name: name.to_owned(),
        clusters: label.map(|(k, v)| ClusterTerm {
            names: Vec::new(),
            label_selector: Some(LabelSelector {
                match_labels: BTreeMap::from([(k.to_owned(), v.to_owned())]),
                ..LabelSelector::default()
            }),
        }),
        max_concurrency: None,
        soak_seconds: soak,
        approval,
    }
}

fn staged_strategy() -> Strategy {
    let mut eu = stage("eu", Some(("region", "eu")), true, 30);
    eu.max_concurrency = Some(Count::Clusters(2));
    Strategy {
        kind: Kind::Staged(vec![
            stage("canary", Some(("ring", "canary")), false, 0),
            eu,
            stage("rest", None, false, 0),
        ]),
        progress_deadline_seconds: 120,
        paused: false,
    }
}

/// canary: c0; eu: e1..e4; rest: r5..r6.
fn fleet(revision: impl Fn(&str) -> (Option<i64>, Option<i64>)) -> Vec<Member> {
    let mut members = Vec::new();
    let mut add = |name: &str, key: &str, value: &str| {
        let (rev, up) = revision(name);
        members.push(labelled(member(name, rev, Some(0), up), key, value));
    };
    add("c0", "ring", "canary");
    for i in 1..=4 {
        add(&format!("e{i}"), "region", "eu");
    }
    for i in 5..=6 {
        add(&format!("r{i}"), "region", "us");
    }
    members
}

#[test]
fn stages_go_in_order_with_approval_soak_and_concurrency() {
    let strategy = staged_strategy();
    // Nothing moved: the canary first.
    let wave = run(&fleet(|_| (Some(1), Some(0))), &strategy, &[]);
    assert_eq!(names(&wave.moves), ["c0"]);
    assert_eq!(wave.stage.as_deref(), Some("canary"));
    assert!(wave.waiting.iter().all(|(_, w)| *w
        == Wait::EarlierStage {
            stage: "canary".into()
        }));
    // Canary done: eu waits for its approval.
    let canary_done = |n: &str| {
        if n == "c0" {
            (Some(2), Some(NOW - 1))
        } else {
            (Some(1), Some(0))
        }
    };
    let wave = run(&fleet(canary_done), &strategy, &[]);
    assert!(wave.moves.is_empty());
    assert_eq!(wave.stage.as_deref(), Some("eu"));
    assert!(wave.message.as_deref().unwrap().contains("approval"));
    assert_eq!(
        wave.waiting[0],
        ("e1".to_owned(), Wait::Approval { stage: "eu".into() })
    );
    // Approved: two at a time.
    let wave = run(&fleet(canary_done), &strategy, &["eu"]);
    assert_eq!(names(&wave.moves), ["e1", "e2"]);
    // eu done but soaking: rest waits, and the planner says when to look again.
    let eu_done = |n: &str| {
        if n.starts_with('r') {
            (Some(1), Some(0))
        } else {
            (Some(2), Some(NOW - 10))
        }
    };
    let wave = run(&fleet(eu_done), &strategy, &["eu"]);
    assert!(wave.moves.is_empty());
    assert_eq!(wave.recheck_after, Some(20));
    assert!(wave.message.as_deref().unwrap().contains("soaks"));
    let soaked = |n: &str| {
        if n.starts_with('r') {
            (Some(1), Some(0))
        } else {
            (Some(2), Some(NOW - 30))
        }
    };
    let wave = run(&fleet(soaked), &strategy, &["eu"]);
    assert_eq!(names(&wave.moves), ["r5", "r6"]);
    let wave = run(&fleet(|_| (Some(2), Some(NOW - 30))), &strategy, &["eu"]);
    assert!(wave.complete);
}

#[test]
fn only_the_revision_number_says_a_cluster_runs_the_target() {
    // Revision 2's objects rolled out again as revision 5 (an undo): a cluster at 2 holds
    // them, yet moves through the gates as any other.
    assert!(!runs_target(Some(2), 5, true));
    assert!(runs_target(Some(5), 5, false));
    // A Work written before rollouts: at the target when it holds the target's objects.
    assert!(runs_target(None, 5, true));
    assert!(!runs_target(None, 5, false));
    // Such clusters are old to the planner: an approval given to another revision does not
    // open their stage.
    let strategy = staged_strategy();
    let undone = |n: &str| {
        if n == "c0" {
            (Some(5), Some(NOW - 1))
        } else {
            (Some(2), Some(0))
        }
    };
    let approved: BTreeSet<String> = BTreeSet::new();
    let wave = plan(Input {
        members: &fleet(undone),
        target: 5,
        strategy: &strategy,
        approved: &approved,
        now: at(NOW),
    });
    assert!(wave.moves.is_empty());
    assert_eq!(wave.updated, 1);
    assert_eq!(
        wave.waiting[0],
        ("e1".to_owned(), Wait::Approval { stage: "eu".into() })
    );
}

#[test]
fn a_cluster_two_stages_select_goes_in_the_first_and_the_overlap_is_said() {
    let strategy = Strategy {
        kind: Kind::Staged(vec![
            stage("canary", Some(("ring", "canary")), false, 0),
            stage("eu", Some(("region", "eu")), false, 0),
        ]),
        progress_deadline_seconds: 120,
        paused: false,
    };
    let members = vec![labelled(
        labelled(member("both", Some(1), Some(0), Some(0)), "ring", "canary"),
        "region",
        "eu",
    )];
    let wave = run(&members, &strategy, &[]);
    assert_eq!(wave.stages[0].members, ["both"]);
    assert_eq!(
        wave.stages[0].overlaps,
        [("both".to_owned(), vec!["eu".to_owned()])]
    );
    assert!(wave.stages[1].members.is_empty());
    assert_eq!(names(&wave.moves), ["both"]);
}

#[test]
fn clusters_in_no_stage_go_in_an_implicit_last_stage() {
    let strategy = Strategy {
        kind: Kind::Staged(vec![stage("canary", Some(("ring", "canary")), false, 0)]),
        progress_deadline_seconds: 120,
        paused: false,
    };
    let members = fleet(|_| (Some(1), Some(0)));
    let wave = run(&members, &strategy, &[]);
    assert_eq!(wave.stages.len(), 2);
    assert!(wave.stages[1].implicit);
    assert_eq!(wave.stages[1].name, flotilla_api::IMPLICIT_STAGE);
    assert_eq!(wave.stages[1].members.len(), 6);
    assert_eq!(names(&wave.moves), ["c0"]);
}

/// A fleet of `n` members at revision 1, strategy Rolling with `max` unavailable.
fn simulate_rolling(n: usize, max: u32, ready: &[bool]) -> Result<(), TestCaseError> {
    let strategy = rolling(Count::Clusters(max), 0);
    let mut members: Vec<Member> = (0..n)
        .map(|i| member(&format!("m{i:03}"), Some(1), Some(0), Some(0)))
        .collect();
    let mut step = 0;
    for round in 0..(n * (ready.len() + 2) + 4) {
        let wave = run(&members, &strategy, &[]);
        for name in &wave.moves {
            let m = members.iter_mut().find(|m| &m.name == name).unwrap();
            *m = member(name, Some(2), Some(NOW), None);
        }
        let in_flight = members
            .iter()
            .filter(|m| m.revision == Some(2) && m.available_since.is_none())
            .count();
        prop_assert!(
            in_flight <= max.max(1) as usize,
            "round {round}: {in_flight} in flight"
        );
        if wave.complete {
            return Ok(());
        }
        // Some of those in flight become available.
        for m in members.iter_mut().filter(|m| m.revision == Some(2)) {
            if m.available_since.is_none() {
                step += 1;
                if ready[step % ready.len()] {
                    m.available_since = Some(at(NOW - 1));
                }
            }
        }
    }
    prop_assert!(false, "the rollout never completed");
    Ok(())
}

proptest! {
    #[test]
    fn never_more_than_max_unavailable_in_flight(
        n in 1usize..40,
        max in 1u32..6,
        ready in proptest::collection::vec(any::<bool>(), 1..8),
    ) {
        let mut ready = ready;
        ready.push(true);
        simulate_rolling(n, max, &ready)?;
    }

    #[test]
    fn the_wave_does_not_depend_on_the_members_order(
        states in proptest::collection::vec((0u8..4, any::<bool>()), 1..30),
        max in 1u32..5,
        rotate in 0usize..30,
    ) {
        let members: Vec<Member> = states
            .iter()
            .enumerate()
            .map(|(i, (state, region))| {
                let m = match state {
                    0 => member(&format!("m{i:02}"), Some(1), Some(0), Some(0)),
                    1 => member(&format!("m{i:02}"), Some(2), Some(NOW), None),
                    2 => member(&format!("m{i:02}"), Some(2), Some(0), Some(NOW - 100)),
                    _ => member(&format!("m{i:02}"), None, None, None),
                };
                let m = labelled(m, "region", if *region { "eu" } else { "us" });
                if i == 0 { labelled(m, "ring", "canary") } else { m }
            })
            .collect();
        let mut shuffled = members.clone();
        shuffled.rotate_left(rotate % members.len());
        shuffled.reverse();
        for strategy in [rolling(Count::Clusters(max), 0), staged_strategy()] {
            let a = run(&members, &strategy, &["eu"]);
            let b = run(&shuffled, &strategy, &["eu"]);
            prop_assert_eq!(&a, &b);
            // Deterministic: the first clusters by name move.
            let mut sorted = a.moves.clone();
            sorted.sort();
            prop_assert_eq!(&a.moves, &sorted);
        }
    }

    #[test]
    fn stage_order_is_respected(
        states in proptest::collection::vec((0u8..3, 0u8..3), 1..30),
    ) {
        let strategy = staged_strategy();
        let members: Vec<Member> = states
            .iter()
            .enumerate()
            .map(|(i, (state, group))| {
                let m = match state {
                    0 => member(&format!("m{i:02}"), Some(1), Some(0), Some(0)),
                    1 => member(&format!("m{i:02}"), Some(2), Some(NOW), None),
                    _ => member(&format!("m{i:02}"), Some(2), Some(0), Some(NOW - 100)),
                };
                match group {
                    0 => labelled(m, "ring", "canary"),
                    1 => labelled(m, "region", "eu"),
                    _ => m,
                }
            })
            .collect();
        let wave = run(&members, &strategy, &["eu"]);
        let stage_of = |name: &str| wave.stages.iter().position(|s| s.members.iter().any(|m| m == name)).unwrap();
        for moved in &wave.moves {
            let stage = stage_of(moved);
            // Every member of an earlier stage runs the target and is available.
            for m in &members {
                if stage_of(&m.name) < stage {
                    prop_assert!(m.revision == Some(2) && m.available_since.is_some(),
                        "{} moved while {} of an earlier stage is not done", moved, m.name);
                }
            }
        }
        // Within a stage, never more than maxConcurrency (eu: 2) in flight.
        let eu = wave.stages.iter().find(|s| s.name == "eu").unwrap();
        let in_flight = eu.members.iter().filter(|n| {
            wave.moves.contains(n) || members.iter().any(|m| &m.name == *n && m.revision == Some(2) && m.available_since.is_none())
        }).count();
        prop_assert!(in_flight <= 2 || wave.moves.iter().all(|n| !eu.members.contains(n)));
    }
}

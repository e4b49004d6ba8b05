//! The wave planner, computed without a server: which clusters move to the revision being
//! rolled out now, which wait and why, and which failed their gate.
//!
//! ```text
//!  members: (name, labels, revision run, moved at, available since)  ─┐
//!  target revision, Strategy (All | Rolling | Staged), approvals, now ─┼─► plan() ─► Wave
//!                                                                      │    { moves, waiting
//!  All:     every member moves at once                                 │      (name, Wait),
//!  Rolling: at most maxUnavailable + maxSurge between revisions        │      failed, stage,
//!  Staged:  stage after stage (done = every member moved, available    │      complete,
//!           and soaked); an approval opens a stage; maxConcurrency     │      recheck_after }
//! ```
//!
//! A member is *between revisions* ("in flight") when it runs the target revision and has
//! not been available at it for `minReadySeconds` yet. A member in flight past the
//! progress deadline (counted from when it moved) has *failed* its gate: the rollout halts
//! and nothing moves (the controller then rolls back, or not). Members are considered in
//! the order of their names, so the same inputs always give the same wave, whatever
//! their order. Nothing here keeps state: what a rollout has done is read back from the
//! members (which revision each runs, since when it is available) every time.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::{Approval, RolloutStrategy, StrategyType};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use crate::{ClusterTerm, ClusterView};

/// A count of clusters or a percentage of some total (`maxUnavailable: 25%`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// This many clusters.
    Clusters(u32),
    /// This percentage of the total.
    Percent(u32),
}

impl Count {
    /// The count out of `total`, a percentage rounded down.
    pub fn down(self, total: usize) -> usize {
        match self {
            Count::Clusters(n) => n as usize,
            Count::Percent(p) => total * p as usize / 100,
        }
    }

    /// The count out of `total`, a percentage rounded up.
    pub fn up(self, total: usize) -> usize {
        match self {
            Count::Clusters(n) => n as usize,
            Count::Percent(p) => (total * p as usize).div_ceil(100),
        }
    }
}

/// One stage of a `Staged` rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// Its name.
    pub name: String,
    /// Its clusters (of those no earlier stage took); `None`: every one left.
    pub clusters: Option<ClusterTerm>,
    /// How many of its clusters move at once (`None`: all of them).
    pub max_concurrency: Option<Count>,
    /// How long, in seconds, every one of its clusters must have been available before the
    /// next stage starts.
    pub soak_seconds: i64,
    /// Whether it waits for an approval of the target revision.
    pub approval: bool,
}

/// How clusters move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Every cluster at once.
    All,
    /// A few at a time.
    Rolling {
        /// Clusters between revisions at once, out of the members.
        max_unavailable: Count,
        /// Clusters allowed beyond `max_unavailable`.
        max_surge: Count,
        /// Seconds a moved cluster must stay available to count as done.
        min_ready_seconds: i64,
    },
    /// Stage after stage, in order.
    Staged(Vec<Stage>),
}

/// A rollout strategy as the planner reads it (the API's, defaults applied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strategy {
    /// How clusters move.
    pub kind: Kind,
    /// Seconds a moved cluster may take to become available.
    pub progress_deadline_seconds: i64,
    /// Whether nothing moves.
    pub paused: bool,
}

impl Count {
    /// A count from the API's int-or-string (`2`, `"25%"`).
    pub fn parse(value: &IntOrString, field: &str) -> Result<Count, String> {
        match value {
            IntOrString::Int(n) => u32::try_from(*n)
                .map(Count::Clusters)
                .map_err(|_| format!("{field} must not be negative")),
            IntOrString::String(text) => text
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .map(Count::Percent)
                .ok_or_else(|| format!("{field} must be a count or a percentage, not {text:?}")),
        }
    }
}

impl Strategy {
    /// The API's strategy (`None`: the default, `All`), defaults applied; an `Err` says
    /// what is wrong in it.
    pub fn from_api(strategy: Option<&RolloutStrategy>) -> Result<Strategy, String> {
        let default = RolloutStrategy::default();
        let s = strategy.unwrap_or(&default);
        let seconds = |v: Option<i32>, default: i32| i64::from(v.unwrap_or(default).max(0));
        let kind = match s.type_ {
            StrategyType::All => Kind::All,
            StrategyType::Rolling => {
                let max_unavailable = s
                    .max_unavailable
                    .as_ref()
                    .map(|v| Count::parse(v, "strategy.maxUnavailable"))
                    .transpose()?
                    .unwrap_or(Count::Percent(25));
                let max_surge = s
                    .max_surge
                    .as_ref()
                    .map(|v| Count::parse(v, "strategy.maxSurge"))
                    .transpose()?
                    .unwrap_or(Count::Clusters(0));
                if matches!(max_unavailable, Count::Clusters(0) | Count::Percent(0))
                    && matches!(max_surge, Count::Clusters(0) | Count::Percent(0))
                {
                    return Err(
                        "strategy.maxUnavailable and strategy.maxSurge cannot both be 0: \
                                no cluster could move"
                            .to_owned(),
                    );
                }
                Kind::Rolling {
                    max_unavailable,
                    max_surge,
                    min_ready_seconds: seconds(s.min_ready_seconds, 0),
                }
            }
            StrategyType::Staged => {
                if s.stages.is_empty() {
                    return Err("strategy.type Staged needs at least one stage".to_owned());
                }
                let mut stages = Vec::new();
                for stage in &s.stages {
                    if stages.iter().any(|s: &Stage| s.name == stage.name) {
                        return Err(format!("stage {} is named twice", stage.name));
                    }
                    stages.push(Stage {
                        name: stage.name.clone(),
                        clusters: stage
                            .clusters
                            .as_ref()
                            .map(ClusterTerm::try_from)
                            .transpose()
                            .map_err(|e| format!("stage {}: {e}", stage.name))?,
                        max_concurrency: stage
                            .max_concurrency
                            .as_ref()
                            .map(|v| Count::parse(v, "strategy.stages[].maxConcurrency"))
                            .transpose()?,
                        soak_seconds: seconds(stage.soak_seconds, 0),
                        approval: stage.approval == Some(Approval::Required),
                    });
                }
                Kind::Staged(stages)
            }
        };
        Ok(Strategy {
            kind,
            progress_deadline_seconds: seconds(
                s.progress_deadline_seconds,
                flotilla_api::DEFAULT_PROGRESS_DEADLINE_SECONDS,
            ),
            paused: s.paused,
        })
    }
}

/// One chosen cluster as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The cluster's name.
    pub name: String,
    /// Its labels (stages select on them).
    pub labels: BTreeMap<String, String>,
    /// The revision it runs (`None`: none yet).
    pub revision: Option<i64>,
    /// When it moved to `revision`.
    pub moved_at: Option<Timestamp>,
    /// Since when it is available with `revision` (`None`: not available).
    pub available_since: Option<Timestamp>,
    /// Why it is not available, if it is not (what its Work reports).
    pub unavailable: Option<String>,
}

/// What the planner is asked.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The chosen clusters.
    pub members: &'a [Member],
    /// The revision being rolled out.
    pub target: i64,
    /// How.
    pub strategy: &'a Strategy,
    /// The stages approved for `target`.
    pub approved: &'a BTreeSet<String>,
    /// The time now.
    pub now: Timestamp,
}

/// Why a member does not move now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// As many members as allowed are between revisions.
    InFlight {
        /// How many may be.
        limit: usize,
    },
    /// An earlier stage is not done.
    EarlierStage {
        /// That stage.
        stage: String,
    },
    /// Its stage waits for an approval.
    Approval {
        /// The stage.
        stage: String,
    },
    /// The rollout is paused.
    Paused,
    /// A member failed its gate: nothing moves.
    Halted,
}

impl std::fmt::Display for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wait::InFlight { limit } => write!(f, "{limit} clusters between revisions at most"),
            Wait::EarlierStage { stage } => write!(f, "stage {stage} is not done"),
            Wait::Approval { stage } => write!(f, "stage {stage} waits for an approval"),
            Wait::Paused => f.write_str("the rollout is paused"),
            Wait::Halted => f.write_str("the rollout halted"),
        }
    }
}

/// The members of one stage, in name order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagePlan {
    /// The stage's name ([`flotilla_api::IMPLICIT_STAGE`] for the implicit one).
    pub name: String,
    /// Its members.
    pub members: Vec<String>,
    /// Whether it is the implicit last stage (members no declared stage took).
    pub implicit: bool,
    /// Its members that later stages' selectors match too (they stay in this one, the
    /// first that matches), with those stages' names.
    pub overlaps: Vec<(String, Vec<String>)>,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Wave {
    /// Members to move to the target now, in name order.
    pub moves: Vec<String>,
    /// Members not at the target that stay where they are, and why.
    pub waiting: Vec<(String, Wait)>,
    /// Members whose gate failed, and why.
    pub failed: Vec<(String, String)>,
    /// The stage being rolled out (`Staged`).
    pub stage: Option<String>,
    /// The stages and their members (`Staged`).
    pub stages: Vec<StagePlan>,
    /// Members at the target (those moving now included).
    pub updated: usize,
    /// Members at the target and done (available, for `minReadySeconds`).
    pub available: usize,
    /// Every member runs the target and is done.
    pub complete: bool,
    /// Why the rollout is waiting, if it is, for a person: the approval, the soak.
    pub message: Option<String>,
    /// Seconds after which a time-based gate (readiness, soak, deadline) changes, if any:
    /// when to look again without any other change.
    pub recheck_after: Option<i64>,
}

/// Seconds from `since` to `now` (negative if `since` is later).
fn seconds(since: Timestamp, now: Timestamp) -> i64 {
    now.as_second() - since.as_second()
}

/// The state of one member against the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not at the target.
    Old,
    /// At the target, not done yet.
    InFlight,
    /// At the target and done.
    Done,
    /// At the target, past its deadline.
    Failed,
}

struct Planner<'a> {
    input: Input<'a>,
    wave: Wave,
    recheck: Option<i64>,
}

impl Planner<'_> {
    fn later(&mut self, after: i64) {
        let after = after.max(1);
        self.recheck = Some(self.recheck.map_or(after, |r| r.min(after)));
    }

    /// Where `m` stands, counting `min_ready` seconds of availability as done.
    fn state(&mut self, m: &Member, min_ready: i64) -> State {
        if m.revision != Some(self.input.target) {
            return State::Old;
        }
        let now = self.input.now;
        if let Some(since) = m.available_since {
            let up = seconds(since, now);
            if up >= min_ready {
                return State::Done;
            }
            self.later(min_ready - up);
            return State::InFlight;
        }
        let deadline = self.input.strategy.progress_deadline_seconds;
        match m.moved_at {
            Some(moved) if seconds(moved, now) > deadline => State::Failed,
            Some(moved) => {
                self.later(deadline + 1 - seconds(moved, now));
                State::InFlight
            }
            None => State::InFlight,
        }
    }
}

/// Whether a cluster whose Work carries revision `carried` runs `target`;
/// `same_content`: the Work holds the target's render for it.
///
/// Only the revision number counts. A Work holding the same objects under another revision
/// (after an undo, or a template changed back) is not at the target: the move is a
/// rollout of its own and passes every gate, an approval of the target revision
/// included, as `kubectl rollout undo` is a rollout of its own. Such a move only rewrites
/// the revision the Work carries, so member objects are not applied again. A Work carrying
/// no revision (written before rollouts) holding the target's render is at the target.
pub fn runs_target(carried: Option<i64>, target: i64, same_content: bool) -> bool {
    match carried {
        Some(n) => n == target,
        None => same_content,
    }
}

/// Plans the next wave.
pub fn plan(input: Input<'_>) -> Wave {
    let mut members: Vec<&Member> = input.members.iter().collect();
    members.sort_by(|a, b| a.name.cmp(&b.name));
    members.dedup_by(|a, b| a.name == b.name);
    let mut planner = Planner {
        input,
        wave: Wave::default(),
        recheck: None,
    };
    let min_ready = match &input.strategy.kind {
        Kind::Rolling {
            min_ready_seconds, ..
        } => *min_ready_seconds,
        _ => 0,
    };
    let states: Vec<State> = members
        .iter()
        .map(|m| planner.state(m, min_ready))
        .collect();
    for (m, s) in members.iter().zip(&states) {
        match s {
            State::Failed => {
                let why = m
                    .unavailable
                    .clone()
                    .unwrap_or_else(|| "not available".to_owned());
                planner.wave.failed.push((
                    m.name.clone(),
                    format!(
                        "not available {}s after it moved: {why}",
                        input.strategy.progress_deadline_seconds
                    ),
                ));
            }
            State::Done => planner.wave.available += 1,
            State::InFlight => {}
            State::Old => continue,
        }
        planner.wave.updated += 1;
    }
    let old: Vec<&str> = members
        .iter()
        .zip(&states)
        .filter(|(_, s)| **s == State::Old)
        .map(|(m, _)| m.name.as_str())
        .collect();
    let stop = if !planner.wave.failed.is_empty() {
        Some(Wait::Halted)
    } else if input.strategy.paused {
        Some(Wait::Paused)
    } else {
        None
    };
    if let Kind::Staged(stages) = &input.strategy.kind {
        planner.wave.stages = assign(stages, &members);
    }
    match (&stop, &input.strategy.kind) {
        (Some(wait), _) => {
            planner.wave.waiting = old.iter().map(|n| (n.to_string(), wait.clone())).collect();
            if *wait == Wait::Paused {
                planner.wave.message = Some("the rollout is paused".to_owned());
            }
        }
        (None, Kind::All) => planner.wave.moves = old.iter().map(|n| n.to_string()).collect(),
        (
            None,
            Kind::Rolling {
                max_unavailable,
                max_surge,
                ..
            },
        ) => {
            let total = members.len();
            let limit = (max_unavailable.down(total) + max_surge.up(total)).max(1);
            let in_flight = states.iter().filter(|s| **s == State::InFlight).count();
            let room = limit.saturating_sub(in_flight);
            planner.wave.moves = old.iter().take(room).map(|n| n.to_string()).collect();
            planner.wave.waiting = old
                .iter()
                .skip(room)
                .map(|n| (n.to_string(), Wait::InFlight { limit }))
                .collect();
        }
        (None, Kind::Staged(stages)) => staged(&mut planner, stages, &members, &states),
    }
    planner.wave.updated += planner.wave.moves.len();
    planner.wave.complete = planner.wave.available == members.len() && !members.is_empty();
    planner.wave.recheck_after = if planner.wave.complete {
        None
    } else {
        planner.recheck
    };
    planner.wave
}

/// Each member in the first stage whose clusters hold it; those no stage takes in an
/// implicit last stage.
fn assign(stages: &[Stage], members: &[&Member]) -> Vec<StagePlan> {
    let mut plans: Vec<StagePlan> = stages
        .iter()
        .map(|s| StagePlan {
            name: s.name.clone(),
            members: Vec::new(),
            implicit: false,
            overlaps: Vec::new(),
        })
        .collect();
    let mut left = Vec::new();
    for m in members {
        let view = ClusterView {
            name: m.name.clone(),
            labels: m.labels.clone(),
            ..ClusterView::default()
        };
        // Only selectors count as overlapping: a stage without one takes what is left.
        let matching: Vec<usize> = stages
            .iter()
            .enumerate()
            .filter(|(_, s)| s.clusters.as_ref().is_some_and(|t| t.matches(&view)))
            .map(|(i, _)| i)
            .collect();
        let first = stages
            .iter()
            .position(|s| s.clusters.as_ref().is_none_or(|t| t.matches(&view)));
        match first {
            Some(i) => {
                plans[i].members.push(m.name.clone());
                let later: Vec<String> = matching
                    .iter()
                    .filter(|j| **j > i)
                    .map(|j| stages[*j].name.clone())
                    .collect();
                if !later.is_empty() {
                    plans[i].overlaps.push((m.name.clone(), later));
                }
            }
            None => left.push(m.name.clone()),
        }
    }
    if !left.is_empty() {
        plans.push(StagePlan {
            name: flotilla_api::IMPLICIT_STAGE.to_owned(),
            members: left,
            implicit: true,
            overlaps: Vec::new(),
        });
    }
    plans
}

fn staged(planner: &mut Planner<'_>, stages: &[Stage], members: &[&Member], states: &[State]) {
    let index: BTreeMap<&str, (usize, State)> = members
        .iter()
        .zip(states)
        .enumerate()
        .map(|(i, (m, s))| (m.name.as_str(), (i, *s)))
        .collect();
    let now = planner.input.now;
    let plans = planner.wave.stages.clone();
    let mut blocked: Option<Wait> = None;
    for (i, plan) in plans.iter().enumerate() {
        // The implicit stage: one at a time is not asked for; all at once, no soak.
        let stage = stages.get(i).cloned().unwrap_or_else(|| Stage {
            name: plan.name.clone(),
            clusters: None,
            max_concurrency: None,
            soak_seconds: 0,
            approval: false,
        });
        let of = |name: &String| index[name.as_str()];
        if let Some(wait) = &blocked {
            for name in &plan.members {
                if of(name).1 == State::Old {
                    planner.wave.waiting.push((name.clone(), wait.clone()));
                }
            }
            continue;
        }
        let old: Vec<&String> = plan
            .members
            .iter()
            .filter(|n| of(n).1 == State::Old)
            .collect();
        let in_flight = plan
            .members
            .iter()
            .filter(|n| of(n).1 == State::InFlight)
            .count();
        if old.is_empty() && in_flight == 0 {
            // Every member moved and available: soaked long enough?
            let up = plan
                .members
                .iter()
                .filter_map(|n| members[of(n).0].available_since)
                .map(|since| seconds(since, now))
                .min();
            match up {
                Some(up) if up < stage.soak_seconds => {
                    let left = stage.soak_seconds - up;
                    planner.later(left);
                    planner.wave.stage = Some(plan.name.clone());
                    planner.wave.message =
                        Some(format!("stage {} soaks for {left}s more", plan.name));
                    blocked = Some(Wait::EarlierStage {
                        stage: plan.name.clone(),
                    });
                }
                _ => {}
            }
            continue;
        }
        planner.wave.stage = Some(plan.name.clone());
        if stage.approval && !old.is_empty() && !planner.input.approved.contains(&plan.name) {
            planner.wave.message = Some(format!(
                "stage {} waits for an approval of revision {}",
                plan.name, planner.input.target
            ));
            let wait = Wait::Approval {
                stage: plan.name.clone(),
            };
            for name in old {
                planner.wave.waiting.push((name.clone(), wait.clone()));
            }
        } else {
            let limit = stage
                .max_concurrency
                .map_or(plan.members.len(), |c| c.down(plan.members.len()))
                .max(1);
            let room = limit.saturating_sub(in_flight);
            for (k, name) in old.into_iter().enumerate() {
                if k < room {
                    planner.wave.moves.push(name.clone());
                } else {
                    planner
                        .wave
                        .waiting
                        .push((name.clone(), Wait::InFlight { limit }));
                }
            }
        }
        blocked = Some(Wait::EarlierStage {
            stage: plan.name.clone(),
        });
    }
    planner.wave.moves.sort();
    planner.wave.waiting.sort_by(|a, b| a.0.cmp(&b.0));
}

#[cfg(test)]
mod tests;

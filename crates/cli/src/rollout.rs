//! `flotilla rollout status|history|pause|resume|approve|undo placement/NAME -n NS`:
//! kubectl rollout's verbs for placements, as clients of the hub.
//!
//! ```text
//!  status  ─► reads status.rollout and Progressing until done (exit 0) or failed (exit 1,
//!             naming the cluster and why), or once with --watch=false
//!  history ─► lists the PlacementRevisions (number, hash, change cause, failed)
//!  pause / resume ─► spec.strategy.paused
//!  approve ─► annotation approve.rollout.flotilla.io/<stage>: {revision, by, at}
//!             (the stage must exist; `by` is who the hub says the caller is)
//!  undo    ─► annotation rollout.flotilla.io/undo-to: <revision>:<live hash> (the revision
//!             must still be kept): the controller rolls its content out as a new revision
//! ```

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use flotilla_api::revision::{PLACEMENT_LABEL, UNDO_ANNOTATION};
use flotilla_api::{
    APPROVAL_ANNOTATION_PREFIX, ClusterPlacement, IMPLICIT_STAGE, Placement, PlacementRevision,
    PlacementSpec, PlacementStatus, StageApproval,
};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::join::HubAccess;

/// `flotilla rollout VERB placement/NAME -n NS`
#[derive(Debug, Parser)]
pub struct RolloutArgs {
    /// What to do.
    #[command(subcommand)]
    pub verb: Verb,
}

/// The placement a verb is about, and how to reach the hub.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// `placement/NAME` (or `pl/NAME`), or `clusterplacement/NAME` (`cpl/NAME`).
    pub placement: String,
    /// The Placement's namespace.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// How the hub is reached.
    #[command(flatten)]
    pub hub: HubAccess,
}

/// The verbs.
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Follow the rollout until it completes (exit 0) or fails (exit 1).
    Status {
        /// The placement.
        #[command(flatten)]
        target: Target,
        /// Follow until done; `--watch=false` prints where it stands once.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        watch: bool,
    },
    /// List the placement's revisions.
    History {
        /// The placement.
        #[command(flatten)]
        target: Target,
    },
    /// Stop moving clusters.
    Pause {
        /// The placement.
        #[command(flatten)]
        target: Target,
    },
    /// Move clusters again.
    Resume {
        /// The placement.
        #[command(flatten)]
        target: Target,
    },
    /// Approve a stage for the revision being rolled out.
    Approve {
        /// The placement.
        #[command(flatten)]
        target: Target,
        /// The stage approved.
        #[arg(long)]
        stage: String,
    },
    /// Roll back to an earlier revision (as a new rollout).
    Undo {
        /// The placement.
        #[command(flatten)]
        target: Target,
        /// The revision to go back to (default: the one before the current one).
        #[arg(long, value_name = "N")]
        to_revision: Option<i64>,
    },
}

/// A Placement or a ClusterPlacement, read.
struct Read {
    spec: PlacementSpec,
    status: Option<PlacementStatus>,
    generation: Option<i64>,
}

/// The placement a target names, with its API.
struct Named {
    cluster_scoped: bool,
    name: String,
    namespace: String,
    client: Client,
}

impl Named {
    async fn of(target: &Target) -> anyhow::Result<Named> {
        let (kind, name) = target
            .placement
            .split_once('/')
            .with_context(|| format!("{:?} is not KIND/NAME", target.placement))?;
        let cluster_scoped = match kind {
            "placement" | "placements" | "pl" | "placement.flotilla.io" => false,
            "clusterplacement" | "clusterplacements" | "cpl" => true,
            other => bail!("rollouts are of placements or clusterplacements, not {other}"),
        };
        Ok(Named {
            cluster_scoped,
            name: name.to_owned(),
            namespace: target.namespace.clone(),
            client: target.hub.client().await?,
        })
    }

    fn what(&self) -> String {
        if self.cluster_scoped {
            format!("clusterplacement {:?}", self.name)
        } else {
            format!("placement {:?}", self.name)
        }
    }

    /// Where its revisions live.
    fn revisions_namespace(&self) -> &str {
        if self.cluster_scoped {
            flotilla_api::access::CREDENTIALS_NAMESPACE
        } else {
            &self.namespace
        }
    }

    async fn read(&self) -> anyhow::Result<Read> {
        let context = || format!("cannot read {}", self.what());
        if self.cluster_scoped {
            let api: Api<ClusterPlacement> = Api::all(self.client.clone());
            let p = api.get(&self.name).await.with_context(context)?;
            Ok(Read {
                spec: p.spec.placement,
                status: p.status,
                generation: p.metadata.generation,
            })
        } else {
            let api: Api<Placement> = Api::namespaced(self.client.clone(), &self.namespace);
            let p = api.get(&self.name).await.with_context(context)?;
            Ok(Read {
                spec: p.spec,
                status: p.status,
                generation: p.metadata.generation,
            })
        }
    }

    async fn patch(&self, patch: serde_json::Value) -> anyhow::Result<()> {
        let params = PatchParams::default();
        let context = || format!("cannot change {}", self.what());
        if self.cluster_scoped {
            let api: Api<ClusterPlacement> = Api::all(self.client.clone());
            api.patch(&self.name, &params, &Patch::Merge(&patch))
                .await
                .with_context(context)?;
        } else {
            let api: Api<Placement> = Api::namespaced(self.client.clone(), &self.namespace);
            api.patch(&self.name, &params, &Patch::Merge(&patch))
                .await
                .with_context(context)?;
        }
        Ok(())
    }

    async fn revisions(&self) -> anyhow::Result<Vec<PlacementRevision>> {
        let api: Api<PlacementRevision> =
            Api::namespaced(self.client.clone(), self.revisions_namespace());
        let selector = format!("{PLACEMENT_LABEL}={}", self.name);
        let mut all: Vec<PlacementRevision> = api
            .list(&ListParams::default().labels(&selector))
            .await
            .context("cannot list the revisions")?
            .items
            .into_iter()
            .filter(|r| r.spec.placement.namespace.is_none() == self.cluster_scoped)
            .collect();
        all.sort_by_key(|r| r.spec.revision);
        Ok(all)
    }
}

impl RolloutArgs {
    /// Runs the verb.
    pub fn run(self) -> anyhow::Result<()> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(self.verb.run())
    }
}

/// Where a rollout stands, as `status` reports it.
enum Standing {
    Done(String),
    Failed(String),
    Going(String),
}

fn standing(named: &Named, read: &Read) -> Standing {
    let Some(status) = &read.status else {
        return Standing::Going("waiting for the controller".to_owned());
    };
    if status.observed_generation < read.generation {
        return Standing::Going("waiting for the controller to see the change".to_owned());
    }
    let rollout = status.rollout.clone().unwrap_or_default();
    let revision = rollout.revision.unwrap_or_default();
    let progressing = status
        .conditions
        .iter()
        .find(|c| c.type_ == flotilla_api::condition::PROGRESSING);
    let Some(progressing) = progressing else {
        return Standing::Going("waiting for the rollout to start".to_owned());
    };
    match (progressing.status.as_str(), progressing.reason.as_str()) {
        ("True", "RolloutComplete") => Standing::Done(format!(
            "{} successfully rolled out (revision {revision})",
            named.what()
        )),
        (_, "ProgressDeadlineExceeded" | "RevisionFailed" | "InvalidStrategy") => {
            Standing::Failed(format!("{} failed: {}", named.what(), progressing.message))
        }
        _ => {
            let total = rollout.updated + rollout.waiting;
            let mut line = format!(
                "Waiting for rollout of revision {revision} to finish: {} of {total} clusters updated, {} available",
                rollout.updated, rollout.available
            );
            if let Some(stage) = &rollout.stage {
                line.push_str(&format!(" (stage {stage})"));
            }
            if let Some(message) = &rollout.message {
                line.push_str(&format!(": {message}"));
            }
            Standing::Going(line)
        }
    }
}

impl Verb {
    async fn run(self) -> anyhow::Result<()> {
        match self {
            Verb::Status { target, watch } => {
                let named = Named::of(&target).await?;
                let deadline = Instant::now() + target.hub.timeout;
                let mut last = String::new();
                loop {
                    let read = named.read().await?;
                    match standing(&named, &read) {
                        Standing::Done(line) => {
                            println!("{line}");
                            return Ok(());
                        }
                        Standing::Failed(line) => bail!("{line}"),
                        Standing::Going(line) => {
                            if line != last {
                                println!("{line}");
                                last = line;
                            }
                            if !watch {
                                return Ok(());
                            }
                        }
                    }
                    if Instant::now() > deadline {
                        bail!("{} did not finish its rollout in time", named.what());
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            Verb::History { target } => {
                let named = Named::of(&target).await?;
                let read = named.read().await?;
                let failed: Vec<i64> = read
                    .status
                    .and_then(|s| s.rollout)
                    .map(|r| r.failed_revisions.iter().map(|f| f.revision).collect())
                    .unwrap_or_default();
                println!("{} history:", named.what());
                println!("{:<9} {:<11} CHANGE-CAUSE", "REVISION", "HASH");
                for r in named.revisions().await? {
                    let mut cause = r.spec.change_cause.clone().unwrap_or_default();
                    if failed.contains(&r.spec.revision) {
                        cause.push_str(" (failed)");
                    }
                    println!("{:<9} {:<11} {cause}", r.spec.revision, r.spec.hash);
                }
                Ok(())
            }
            Verb::Pause { target } => {
                let named = Named::of(&target).await?;
                named
                    .patch(json!({"spec": {"strategy": {"paused": true}}}))
                    .await?;
                println!("{} paused", named.what());
                Ok(())
            }
            Verb::Resume { target } => {
                let named = Named::of(&target).await?;
                named
                    .patch(json!({"spec": {"strategy": {"paused": null}}}))
                    .await?;
                println!("{} resumed", named.what());
                Ok(())
            }
            Verb::Approve { target, stage } => {
                let named = Named::of(&target).await?;
                let read = named.read().await?;
                let stages: Vec<&str> = read
                    .spec
                    .strategy
                    .as_ref()
                    .map(|s| s.stages.iter().map(|s| s.name.as_str()).collect())
                    .unwrap_or_default();
                if !stages.contains(&stage.as_str()) && stage != IMPLICIT_STAGE {
                    bail!(
                        "{} has no stage {stage:?} (its stages: {}); nothing was approved",
                        named.what(),
                        if stages.is_empty() {
                            "none".to_owned()
                        } else {
                            stages.join(", ")
                        }
                    );
                }
                let Some(revision) = read.status.and_then(|s| s.rollout).and_then(|r| r.revision)
                else {
                    bail!("{} has no rollout to approve yet", named.what());
                };
                let review: Api<SelfSubjectReview> = Api::all(named.client.clone());
                let by = review
                    .create(&PostParams::default(), &SelfSubjectReview::default())
                    .await
                    .ok()
                    .and_then(|r| r.status?.user_info?.username)
                    .unwrap_or_default();
                let approval = StageApproval {
                    stage: stage.clone(),
                    revision,
                    by,
                    at: Some(Time(k8s_openapi::jiff::Timestamp::now())),
                };
                let key = format!("{APPROVAL_ANNOTATION_PREFIX}{stage}");
                named
                    .patch(json!({"metadata": {"annotations": {
                        key: serde_json::to_string(&approval)?,
                    }}}))
                    .await?;
                println!(
                    "{} stage {stage} approved for revision {revision}",
                    named.what()
                );
                Ok(())
            }
            Verb::Undo {
                target,
                to_revision,
            } => {
                let named = Named::of(&target).await?;
                let read = named.read().await?;
                let rollout = read.status.and_then(|s| s.rollout).unwrap_or_default();
                let Some(live) = rollout.live_hash.clone() else {
                    bail!("{} has no revision yet", named.what());
                };
                let revisions = named.revisions().await?;
                let current = rollout.revision.unwrap_or_default();
                let to = match to_revision {
                    Some(n) => n,
                    None => revisions
                        .iter()
                        .rev()
                        .map(|r| r.spec.revision)
                        .find(|n| *n < current)
                        .with_context(|| format!("{} has no earlier revision", named.what()))?,
                };
                if !revisions.iter().any(|r| r.spec.revision == to) {
                    let kept: Vec<String> = revisions
                        .iter()
                        .map(|r| r.spec.revision.to_string())
                        .collect();
                    bail!(
                        "revision {to} of {} is not kept (kept: {}); nothing was changed",
                        named.what(),
                        kept.join(", ")
                    );
                }
                named
                    .patch(json!({"metadata": {"annotations": {
                        UNDO_ANNOTATION: format!("{to}:{live}"),
                    }}}))
                    .await?;
                println!("{} rolling back to revision {to}", named.what());
                Ok(())
            }
        }
    }
}

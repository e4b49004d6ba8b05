//! A Job's generated selector, as Kubernetes 1.27+ makes it when a Job is created without
//! `manualSelector: true`.
//!
//! ```text
//!  new Job (uid U, name N), manualSelector not true
//!    template labels += controller-uid: U, batch.kubernetes.io/controller-uid: U,
//!                       job-name: N, batch.kubernetes.io/job-name: N   (those absent)
//!    selector        =  {matchLabels: {batch.kubernetes.io/controller-uid: U}}
//!    a selector or a controller-uid label the client set otherwise ─► 422
//! ```
//!
//! It runs once the Job has its uid (after admission, as Kubernetes' strategy does it
//! after mutating admission). Delivery leaves all of it out of what a member is sent
//! (`flotilla_delivery`'s `allocated`), so that each member generates its own.

use serde_json::{Map, Value, json};

use crate::http::error::{ApiError, ApiResult, Cause};
use crate::registry::object::meta_str;

/// The label the generated selector matches, with the Job's uid.
pub(crate) const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
/// The label with the Job's name.
pub(crate) const JOB_NAME: &str = "batch.kubernetes.io/job-name";
/// The labels' names before Kubernetes 1.27, still set beside the new ones.
const LEGACY_CONTROLLER_UID: &str = "controller-uid";
const LEGACY_JOB_NAME: &str = "job-name";

/// Fills a new Job's generated selector and template labels (unless `manualSelector`),
/// or refuses one whose selector or labels would not be the generated ones (422).
pub(crate) fn generate_selector(job: &mut Value) -> ApiResult<()> {
    if job["spec"]["manualSelector"] == true || !job["spec"].is_object() {
        return Ok(());
    }
    let uid = meta_str(job, "uid").to_owned();
    let name = meta_str(job, "name").to_owned();
    let generated = json!({"matchLabels": {CONTROLLER_UID: uid}});
    let mut causes = Vec::new();
    let spec = &mut job["spec"];
    if spec["selector"].is_null() {
        spec["selector"] = generated;
    } else if spec["selector"] != generated {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: format!(
                "Invalid value: {}: `selector` not auto-generated",
                spec["selector"]
            ),
            field: "spec.selector".into(),
        });
    }
    if !spec["template"].is_object() {
        spec["template"] = json!({});
    }
    let template = &mut spec["template"];
    if !template["metadata"].is_object() {
        template["metadata"] = json!({});
    }
    let metadata = &mut template["metadata"];
    if !metadata["labels"].is_object() {
        metadata["labels"] = Value::Object(Map::new());
    }
    let labels = &mut metadata["labels"];
    for (label, value) in [
        (LEGACY_JOB_NAME, &name),
        (JOB_NAME, &name),
        (LEGACY_CONTROLLER_UID, &uid),
        (CONTROLLER_UID, &uid),
    ] {
        match labels[label].as_str() {
            None => labels[label] = json!(value),
            Some(set) if set == value.as_str() => {}
            Some(set) if label == CONTROLLER_UID || label == LEGACY_CONTROLLER_UID => {
                causes.push(Cause {
                    reason: "FieldValueInvalid".into(),
                    message: format!("Invalid value: \"{set}\": must be '{uid}'"),
                    field: format!("spec.template.metadata.labels[{label}]"),
                });
            }
            Some(_) => {}
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid("batch", "Job", &name, causes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(spec: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "pi", "uid": "u-1"}, "spec": spec})
    }

    #[test]
    fn a_new_job_gets_its_selector_and_labels() {
        let mut pi = job(json!({"template": {"metadata": {"labels": {"app": "pi"}},
            "spec": {"restartPolicy": "Never"}}}));
        generate_selector(&mut pi).unwrap();
        assert_eq!(
            pi["spec"]["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
        );
        assert_eq!(
            pi["spec"]["template"]["metadata"]["labels"],
            json!({"app": "pi", "controller-uid": "u-1", "job-name": "pi",
                "batch.kubernetes.io/controller-uid": "u-1", "batch.kubernetes.io/job-name": "pi"})
        );
        // Without labels or metadata at all.
        let mut bare = job(json!({"template": {"spec": {"restartPolicy": "Never"}}}));
        generate_selector(&mut bare).unwrap();
        assert_eq!(
            bare["spec"]["template"]["metadata"]["labels"]["job-name"],
            "pi"
        );
    }

    #[test]
    fn a_manual_selector_is_the_clients_and_a_set_one_is_refused() {
        let manual = job(
            json!({"manualSelector": true, "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}}}),
        );
        let mut kept = manual.clone();
        generate_selector(&mut kept).unwrap();
        assert_eq!(kept, manual);
        let mut chosen = job(json!({"selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b", "controller-uid": "other"}}}}));
        let e = generate_selector(&mut chosen).unwrap_err();
        assert_eq!(e.code, 422);
        let fields: Vec<_> = e
            .details
            .unwrap()
            .causes
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(
            fields,
            [
                "spec.selector",
                "spec.template.metadata.labels[controller-uid]"
            ]
        );
    }
}

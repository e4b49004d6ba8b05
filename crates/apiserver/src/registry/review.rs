//! Self-reviews (`kubectl auth can-i`, `kubectl auth whoami`): answered, never stored.
//!
//! ```text
//!  POST selfsubjectaccessreviews ─► allowed: true   (the admin token may do everything;
//!  POST selfsubjectrulesreviews  ─► every verb        fine-grained RBAC comes later)
//!  POST selfsubjectreviews       ─► userInfo of the user asking
//! ```

use serde_json::{Value, json};

use crate::auth::UserInfo;
use crate::registry::resources::ResourceType;

/// The answer to a review request of type `rt`, or `None` if `rt` is not a review.
pub fn answer(rt: &ResourceType, user: &UserInfo, request: &Value) -> Option<Value> {
    let status = match (rt.group.as_str(), rt.kind.as_str()) {
        ("authorization.k8s.io", "SelfSubjectAccessReview") => json!({
            "allowed": true,
            "reason": "the admin token may do everything on this hub",
        }),
        ("authorization.k8s.io", "SelfSubjectRulesReview") => json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        }),
        ("authentication.k8s.io", "SelfSubjectReview") => json!({
            "userInfo": user.to_json(),
        }),
        _ => return None,
    };
    let mut answer = request.clone();
    answer["apiVersion"] = json!(rt.api_version());
    answer["kind"] = json!(rt.kind);
    if !answer["metadata"].is_object() {
        answer["metadata"] = json!({});
    }
    answer["status"] = status;
    Some(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::Registry;

    #[test]
    fn reviews_are_answered_and_other_kinds_are_not() {
        let registry = Registry::builtin();
        let ssar = registry
            .get("authorization.k8s.io", "v1", "selfsubjectaccessreviews")
            .unwrap();
        let request =
            json!({"spec": {"resourceAttributes": {"verb": "create", "resource": "pods"}}});
        let answered = answer(&ssar, &UserInfo::admin(), &request).unwrap();
        assert_eq!(answered["status"]["allowed"], true);
        assert_eq!(answered["spec"], request["spec"]);
        assert_eq!(answered["kind"], "SelfSubjectAccessReview");
        let ssr = registry
            .get("authentication.k8s.io", "v1", "selfsubjectreviews")
            .unwrap();
        assert_eq!(
            answer(&ssr, &UserInfo::admin(), &json!({})).unwrap()["status"]["userInfo"]["username"],
            crate::auth::ADMIN_USER
        );
        let configmaps = registry.get("", "v1", "configmaps").unwrap();
        assert!(answer(&configmaps, &UserInfo::admin(), &json!({})).is_none());
    }
}

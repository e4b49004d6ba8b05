//! Which writes a policy or webhook applies to, as Kubernetes decides it: resource rules
//! (with `excludeResourceRules` and `matchPolicy`), then the object selector, then the
//! namespace selector.
//!
//! ```text
//!  Attributes ─► Criteria::matches
//!     rules: operation, group, version, resource[/subresource] ("*", "*/*", "pods/*",
//!            "*/status"), scope, resourceNames; none of the excluded rules
//!            (Equivalent: the same resource in another served version matches too,
//!            and the request is then shown in that version)
//!     objectSelector: the object's labels, or the old object's
//!     namespaceSelector: the namespace's labels (a Namespace written: its own); always
//!            true for other cluster-scoped objects      ─► Match (resource, kind)
//! ```
//!
//! The checks that need nothing but the request come first: a configuration that does
//! not apply to a write costs no read and no allocation.

use std::sync::Arc;

use serde_json::Value;

use super::{Attributes, Operation};
use crate::http::error::{ApiError, ApiResult};
use crate::registry::keys;
use crate::registry::resources::{GroupVersionKind, ResourceType, Subresource};
use crate::registry::selector::LabelSelector;

/// Which objects a rule's `scope` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Every object (`*`, the default).
    All,
    /// Cluster-scoped objects (Namespaces among them).
    Cluster,
    /// Namespaced objects.
    Namespaced,
}

/// One rule: operations, API groups, versions, resources, scope and (for policies) names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rule {
    operations: Vec<String>,
    groups: Vec<String>,
    versions: Vec<String>,
    resources: Vec<String>,
    scope: Option<Scope>,
    names: Vec<String>,
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

fn any_or(list: &[String], value: &str) -> bool {
    list.iter().any(|item| item == "*" || item == value)
}

impl Rule {
    /// A rule as a configuration holds it (`operations`, `apiGroups`, `apiVersions`,
    /// `resources`, `scope`, `resourceNames`); validated where it is written.
    pub(crate) fn parse(rule: &Value) -> Rule {
        Rule {
            operations: strings(&rule["operations"]),
            groups: strings(&rule["apiGroups"]),
            versions: strings(&rule["apiVersions"]),
            resources: strings(&rule["resources"]),
            scope: match rule["scope"].as_str() {
                Some("Cluster") => Some(Scope::Cluster),
                Some("Namespaced") => Some(Scope::Namespaced),
                _ => Some(Scope::All),
            },
            names: strings(&rule["resourceNames"]),
        }
    }

    /// Whether the rule takes a write of `resource` (its group, version, plural) by
    /// `attributes`; of any version if `version` is `None`.
    fn takes(
        &self,
        attributes: &Attributes<'_>,
        group: &str,
        version: Option<&str>,
        plural: &str,
    ) -> bool {
        any_or(&self.operations, attributes.operation.as_str())
            && any_or(&self.groups, group)
            && version.is_none_or(|v| any_or(&self.versions, v))
            && self.resource(plural, attributes.subresource)
            && self.scope(attributes, group, plural)
            && (self.names.is_empty() || self.names.iter().any(|n| n == attributes.name))
    }

    fn resource(&self, plural: &str, subresource: &str) -> bool {
        self.resources.iter().any(|r| {
            let (res, sub) = r.split_once('/').unwrap_or((r, ""));
            (res == "*" || res == plural) && (sub == "*" || sub == subresource)
        })
    }

    fn scope(&self, attributes: &Attributes<'_>, group: &str, plural: &str) -> bool {
        let namespace_object = group.is_empty() && plural == "namespaces";
        match self.scope.unwrap_or(Scope::All) {
            Scope::All => true,
            Scope::Namespaced => !namespace_object && !attributes.namespace.is_empty(),
            Scope::Cluster => namespace_object || attributes.namespace.is_empty(),
        }
    }

    /// The concrete resources a rule names (no wildcard in groups or versions, resources
    /// without `*` or a subresource): what type checking checks expressions against.
    pub(crate) fn named_resources(&self) -> Vec<(String, String, String)> {
        let concrete = |list: &[String]| list.iter().all(|s| !s.contains('*'));
        if !concrete(&self.groups) || !concrete(&self.versions) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for group in &self.groups {
            for version in &self.versions {
                for resource in &self.resources {
                    if !resource.contains(['*', '/']) {
                        out.push((group.clone(), version.clone(), resource.clone()));
                    }
                }
            }
        }
        out
    }
}

/// What a configuration matches: `matchConstraints` of a policy, `matchResources` of a
/// binding, the rules and selectors of a webhook.
#[derive(Clone, Debug, Default)]
pub(crate) struct Criteria {
    /// Empty: every resource (a binding without `resourceRules`).
    pub(crate) rules: Vec<Rule>,
    pub(crate) exclude: Vec<Rule>,
    pub(crate) namespace_selector: LabelSelector,
    pub(crate) object_selector: LabelSelector,
    /// `matchPolicy: Equivalent` (the default).
    pub(crate) equivalent: bool,
}

/// The resource and kind a configuration matched a write as: the request's own, or (by
/// `matchPolicy: Equivalent`) another served version of the same resource.
#[derive(Clone, Debug)]
pub(crate) struct Match {
    /// The matched type.
    pub(crate) rt: Arc<ResourceType>,
    /// Whether it is another version than the request's.
    pub(crate) converted: bool,
}

impl Match {
    /// The kind objects are shown with (a subresource's own: `Scale`; `status`: the
    /// parent's).
    pub(crate) fn kind(&self, subresource: &str) -> GroupVersionKind {
        match self.rt.subresource(subresource) {
            Some(sub) => sub.response_kind(&self.rt),
            None => Subresource::Status.response_kind(&self.rt),
        }
    }
}

impl Criteria {
    /// Reads the matching fields of a configuration: `resourceRules` (or `rules`) and
    /// `excludeResourceRules`, `namespaceSelector`, `objectSelector`, `matchPolicy`.
    /// Selectors were validated where the configuration was written; one that cannot be
    /// read selects nothing.
    pub(crate) fn parse(match_resources: &Value, rules_field: &str) -> Result<Criteria, String> {
        let rules = |field: &str| -> Vec<Rule> {
            match_resources[field]
                .as_array()
                .into_iter()
                .flatten()
                .map(Rule::parse)
                .collect()
        };
        let selector = |field: &str| LabelSelector::from_object(&match_resources[field]);
        Ok(Criteria {
            rules: rules(rules_field),
            exclude: rules("excludeResourceRules"),
            namespace_selector: selector("namespaceSelector")
                .map_err(|e| format!("namespaceSelector: {e}"))?,
            object_selector: selector("objectSelector")
                .map_err(|e| format!("objectSelector: {e}"))?,
            equivalent: match_resources["matchPolicy"].as_str() != Some("Exact"),
        })
    }

    /// The rules' verdict on a write: the type matched, or `None`; nothing read, nothing
    /// allocated unless it matches.
    pub(crate) fn rules_match(&self, attributes: &Attributes<'_>) -> Option<Match> {
        let rt = attributes.rt;
        let takes = |rules: &[Rule], rt: &ResourceType| {
            rules
                .iter()
                .any(|r| r.takes(attributes, &rt.group, Some(&rt.version), &rt.plural))
        };
        if takes(&self.exclude, rt) {
            return None;
        }
        if self.rules.is_empty() || takes(&self.rules, rt) {
            return Some(Match {
                rt: rt.clone(),
                converted: false,
            });
        }
        // Another version can match only a rule that takes this one but for its version.
        let other_version = self
            .rules
            .iter()
            .any(|r| r.takes(attributes, &rt.group, None, &rt.plural));
        if !self.equivalent || !other_version {
            return None;
        }
        // The same resource in the other versions served.
        let registry = attributes.api.registry();
        registry
            .all()
            .into_iter()
            .filter(|other| {
                other.group == rt.group && other.plural == rt.plural && other.version != rt.version
            })
            .find(|other| takes(&self.rules, other) && !takes(&self.exclude, other))
            .map(|other| Match {
                rt: other,
                converted: true,
            })
    }

    /// The object selector's verdict: the object's labels or the old object's.
    pub(crate) fn object_matches(&self, object: &Value, old: Option<&Value>) -> bool {
        if self.object_selector.is_empty() {
            return true;
        }
        let matches = |o: &Value| o.is_object() && self.object_selector.matches(o);
        matches(object) || old.is_some_and(matches)
    }

    /// The namespace selector's verdict, reading the namespace through `request` (once
    /// per request); a Namespace written is its own (`object`).
    pub(crate) async fn namespace_matches(
        &self,
        request: &Request<'_>,
        object: &Value,
    ) -> ApiResult<bool> {
        if self.namespace_selector.is_empty() {
            return Ok(true);
        }
        match request.namespace_labels(object).await? {
            None => Ok(true),
            Some(labels) => Ok(self.namespace_selector.matches(&labels)),
        }
    }

    /// Rules, then the object selector, then the namespace selector.
    pub(crate) async fn matches(
        &self,
        request: &Request<'_>,
        object: &Value,
        old: Option<&Value>,
    ) -> ApiResult<Option<Match>> {
        let Some(matched) = self.rules_match(request.attributes) else {
            return Ok(None);
        };
        if !self.object_matches(object, old) || !self.namespace_matches(request, object).await? {
            return Ok(None);
        }
        Ok(Some(matched))
    }
}

/// A write as the configurations see it, with what is read for them at most once: its
/// namespace.
pub(crate) struct Request<'a> {
    pub(crate) attributes: &'a Attributes<'a>,
    namespace: tokio::sync::OnceCell<Option<Value>>,
}

impl<'a> Request<'a> {
    pub(crate) fn new(attributes: &'a Attributes<'a>) -> Self {
        Request {
            attributes,
            namespace: tokio::sync::OnceCell::new(),
        }
    }

    /// Whether the write is of a Namespace itself.
    fn of_namespace(&self) -> bool {
        let rt = self.attributes.rt;
        rt.group.is_empty() && rt.plural == "namespaces"
    }

    /// The name of the namespace the write is in (a Namespace's own name), `""` if none.
    fn namespace_name(&self) -> &str {
        if self.of_namespace() {
            self.attributes.name
        } else {
            self.attributes.namespace
        }
    }

    /// The namespace the write is in, as stored (`None` for a cluster-scoped object);
    /// 404 if it does not exist.
    pub(crate) async fn namespace(&self) -> ApiResult<Option<&Value>> {
        let name = self.namespace_name();
        if name.is_empty() {
            return Ok(None);
        }
        let found = self
            .namespace
            .get_or_try_init(|| async {
                let api = self.attributes.api;
                let rt = api.resource("", "v1", "namespaces")?;
                let key = keys::key(&rt, api.cluster(), "", name);
                match api.read(&key).await? {
                    Some((json, _)) => serde_json::from_slice(&json).map(Some).map_err(|e| {
                        ApiError::internal(format!("the namespace {name} cannot be read: {e}"))
                    }),
                    None => Ok(None),
                }
            })
            .await?;
        Ok(found.as_ref())
    }

    /// The labels a namespace selector is matched against, as an object with
    /// `metadata.labels`: a Namespace created or updated: its own; an object of a
    /// namespace: that namespace's (404 if it does not exist); `None` for other
    /// cluster-scoped objects (which every namespace selector takes).
    async fn namespace_labels(&self, object: &Value) -> ApiResult<Option<Value>> {
        let writes = matches!(
            self.attributes.operation,
            Operation::Create | Operation::Update
        );
        if self.of_namespace() && self.attributes.subresource.is_empty() && writes {
            return Ok(Some(object.clone()));
        }
        let name = self.namespace_name();
        if name.is_empty() {
            return Ok(None);
        }
        match self.namespace().await? {
            Some(namespace) => Ok(Some(namespace.clone())),
            None => Err(ApiError::not_found("", "namespaces", name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::admission::FieldValidation;
    use crate::api::Api;
    use crate::auth::UserInfo;
    use crate::registry::resources::Registry;

    fn api() -> Api {
        let store = Arc::new(flotilla_store_memory::MemoryStore::new());
        Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1")
    }

    fn attributes<'a>(
        api: &'a Api,
        user: &'a Arc<UserInfo>,
        rt: &'a Arc<ResourceType>,
        operation: Operation,
        namespace: &'a str,
        name: &'a str,
        subresource: &'a str,
    ) -> Attributes<'a> {
        Attributes {
            api,
            user,
            cluster: crate::api::ROOT_CLUSTER,
            operation,
            rt,
            namespace,
            name,
            subresource,
            field_validation: FieldValidation::Warn,
            dry_run: false,
            field_manager: "",
            delete_options: None,
        }
    }

    #[test]
    fn rules_take_operations_groups_versions_resources_subresources_and_scope() {
        let api = api();
        let user = UserInfo::loopback();
        let deployments = api.resource("apps", "v1", "deployments").unwrap();
        let namespaces = api.resource("", "v1", "namespaces").unwrap();
        let create = attributes(
            &api,
            &user,
            &deployments,
            Operation::Create,
            "shop",
            "web",
            "",
        );
        let status = attributes(
            &api,
            &user,
            &deployments,
            Operation::Update,
            "shop",
            "web",
            "status",
        );
        let namespace = attributes(&api, &user, &namespaces, Operation::Create, "", "shop", "");
        let rule = |r: Value| {
            let criteria = Criteria {
                rules: vec![Rule::parse(&r)],
                ..Criteria::default()
            };
            (
                criteria.rules_match(&create).is_some(),
                criteria.rules_match(&status).is_some(),
                criteria.rules_match(&namespace).is_some(),
            )
        };
        let base = |resources: Value| {
            json!({"operations": ["*"], "apiGroups": ["*"],
            "apiVersions": ["*"], "resources": resources})
        };
        assert_eq!(rule(base(json!(["*"]))), (true, false, true));
        assert_eq!(rule(base(json!(["*/*"]))), (true, true, true));
        assert_eq!(rule(base(json!(["deployments"]))), (true, false, false));
        assert_eq!(rule(base(json!(["deployments/*"]))), (true, true, false));
        assert_eq!(rule(base(json!(["*/status"]))), (false, true, false));
        let mut only_create = base(json!(["*/*"]));
        only_create["operations"] = json!(["CREATE"]);
        assert_eq!(rule(only_create), (true, false, true));
        let mut core = base(json!(["*"]));
        core["apiGroups"] = json!([""]);
        assert_eq!(rule(core), (false, false, true));
        let mut namespaced = base(json!(["*/*"]));
        namespaced["scope"] = json!("Namespaced");
        assert_eq!(rule(namespaced), (true, true, false));
        let mut cluster = base(json!(["*/*"]));
        cluster["scope"] = json!("Cluster");
        assert_eq!(rule(cluster), (false, false, true));
        let mut named = base(json!(["*"]));
        named["resourceNames"] = json!(["web"]);
        assert_eq!(rule(named), (true, false, false));

        let excluded = Criteria {
            rules: vec![Rule::parse(&base(json!(["*"])))],
            exclude: vec![Rule::parse(&base(json!(["namespaces"])))],
            ..Criteria::default()
        };
        assert!(excluded.rules_match(&create).is_some());
        assert!(excluded.rules_match(&namespace).is_none());
        // A binding without rules takes everything its policy does.
        assert!(Criteria::default().rules_match(&status).is_some());
    }

    #[test]
    fn an_equivalent_version_matches_unless_the_policy_is_exact() {
        let api = api();
        let mut v2 = (*api.resource("apps", "v1", "deployments").unwrap()).clone();
        v2.version = "v2".into();
        api.registry().add(v2.clone()).unwrap();
        let v2 = Arc::new(v2);
        let user = UserInfo::loopback();
        let create = attributes(&api, &user, &v2, Operation::Create, "shop", "web", "");
        let rules = vec![Rule::parse(
            &json!({"operations": ["CREATE"], "apiGroups": ["apps"],
            "apiVersions": ["v1"], "resources": ["deployments"]}),
        )];
        let equivalent = Criteria {
            rules: rules.clone(),
            equivalent: true,
            ..Criteria::default()
        };
        let matched = equivalent.rules_match(&create).unwrap();
        assert_eq!(
            (matched.rt.version.as_str(), matched.converted),
            ("v1", true)
        );
        assert_eq!(matched.kind("").kind, "Deployment");
        let exact = Criteria {
            rules,
            equivalent: false,
            ..Criteria::default()
        };
        assert!(exact.rules_match(&create).is_none());
    }

    #[tokio::test]
    async fn selectors_read_the_object_its_old_self_and_its_namespace() {
        let api = api();
        api.bootstrap().await.unwrap();
        let client = crate::client::Client::new(api.clone());
        client
            .create(
                "/api/v1/namespaces",
                &json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": "prod", "labels": {"env": "prod"}}}),
            )
            .await
            .unwrap();
        let user = UserInfo::loopback();
        let configmaps = api.resource("", "v1", "configmaps").unwrap();
        let namespaces = api.resource("", "v1", "namespaces").unwrap();
        let criteria = Criteria::parse(
            &json!({"resourceRules": [{"operations": ["*"], "apiGroups": ["*"],
                "apiVersions": ["*"], "resources": ["*"]}],
                "namespaceSelector": {"matchLabels": {"env": "prod"}},
                "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}}),
            "resourceRules",
        )
        .unwrap();
        let object = json!({"metadata": {"name": "a"}});
        let skipped = json!({"metadata": {"name": "a", "labels": {"skip": "yes"}}});
        let outcome = async |namespace: &str, object: &Value, old: Option<&Value>| {
            let attributes = attributes(
                &api,
                &user,
                &configmaps,
                Operation::Update,
                namespace,
                "a",
                "",
            );
            let request = Request::new(&attributes);
            criteria
                .matches(&request, object, old)
                .await
                .map(|m| m.is_some())
        };
        assert_eq!(outcome("prod", &object, None).await, Ok(true));
        assert_eq!(outcome("default", &object, None).await, Ok(false));
        assert_eq!(outcome("prod", &skipped, None).await, Ok(false));
        // Either the object or its old self.
        assert_eq!(outcome("prod", &skipped, Some(&object)).await, Ok(true));
        let missing = outcome("nowhere", &object, None).await.unwrap_err();
        assert_eq!(missing.code, 404);
        // A Namespace written: its own labels.
        let labelled = json!({"metadata": {"name": "new", "labels": {"env": "prod"}}});
        let create = attributes(&api, &user, &namespaces, Operation::Create, "", "new", "");
        let request = Request::new(&create);
        assert!(
            criteria
                .matches(&request, &labelled, None)
                .await
                .unwrap()
                .is_some()
        );
    }
}

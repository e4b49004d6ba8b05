//! Policy rules: what a Role or ClusterRole grants, matched against a request as
//! Kubernetes' RBAC authorizer matches it (`RuleAllows`), and compared with other rules as
//! its escalation check compares them (`Covers`).
//!
//! ```text
//!  request ─► verb ∈ verbs or "*"
//!             resource request: group ∈ apiGroups or "*"; "res", "res/sub", "*/sub" or "*"
//!                               ∈ resources; no resourceNames, or the name among them (a
//!                               request without a name, a list or a create, never matches)
//!             path: ∈ nonResourceURLs, or under one ending in "*"
//!  servant rules ─► broken down to one verb, group, resource, name each ─► each covered by
//!                   one owner rule? the rest are missing (compacted for the message)
//! ```

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::auth::Attributes;

/// The values of one field of a rule (interned in the index: rules of many roles share
/// their strings).
pub type Strings = Box<[Arc<str>]>;

/// One `PolicyRule` of a Role or ClusterRole.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Rule {
    /// `get`, `list`, …, or `*`.
    pub verbs: Strings,
    /// API groups (`""` the core group), or `*`.
    pub api_groups: Strings,
    /// Resources (`pods`, `pods/log`, `*/scale`), or `*`.
    pub resources: Strings,
    /// The objects' names it is limited to (none: every object).
    pub resource_names: Strings,
    /// Paths that are not resources (`/healthz`, `/api/*`).
    pub non_resource_urls: Strings,
}

/// Every value of `field` of a rule given as JSON, made shared by `intern`.
fn strings(rule: &Value, field: &str, intern: &mut impl FnMut(&str) -> Arc<str>) -> Strings {
    rule[field]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(intern)
        .collect()
}

impl Rule {
    /// A rule of these verbs on these resources of these groups.
    pub fn resources(verbs: &[&str], api_groups: &[&str], resources: &[&str]) -> Self {
        Rule {
            verbs: owned(verbs),
            api_groups: owned(api_groups),
            resources: owned(resources),
            ..Rule::default()
        }
    }

    /// A rule of these verbs on these paths.
    pub fn urls(verbs: &[&str], urls: &[&str]) -> Self {
        Rule {
            verbs: owned(verbs),
            non_resource_urls: owned(urls),
            ..Rule::default()
        }
    }

    /// Limits the rule to objects of these names.
    pub fn named(mut self, names: &[&str]) -> Self {
        self.resource_names = owned(names);
        self
    }

    /// Everything on every resource and path (`cluster-admin`'s rules).
    pub fn everything() -> Vec<Rule> {
        vec![
            Rule::resources(&["*"], &["*"], &["*"]),
            Rule::urls(&["*"], &["*"]),
        ]
    }

    /// A rule as the API gives it (`verbs`, `apiGroups`, `resources`, `resourceNames`,
    /// `nonResourceURLs`; missing fields are empty), its strings made by `intern`.
    pub fn from_json(rule: &Value, intern: &mut impl FnMut(&str) -> Arc<str>) -> Self {
        Rule {
            verbs: strings(rule, "verbs", intern),
            api_groups: strings(rule, "apiGroups", intern),
            resources: strings(rule, "resources", intern),
            resource_names: strings(rule, "resourceNames", intern),
            non_resource_urls: strings(rule, "nonResourceURLs", intern),
        }
    }

    /// The rules of an object's `rules` field (none when it is missing or null).
    pub fn all_from_json(rules: &Value, intern: &mut impl FnMut(&str) -> Arc<str>) -> Vec<Self> {
        rules
            .as_array()
            .into_iter()
            .flatten()
            .map(|rule| Rule::from_json(rule, intern))
            .collect()
    }

    /// The rule as the API writes it: `verbs` always, the other fields when not empty.
    pub fn to_json(&self) -> Value {
        let mut rule = Map::new();
        let list = |values: &Strings| json!(values.iter().map(|v| &**v).collect::<Vec<_>>());
        for (field, values) in [
            ("apiGroups", &self.api_groups),
            ("nonResourceURLs", &self.non_resource_urls),
            ("resourceNames", &self.resource_names),
            ("resources", &self.resources),
        ] {
            if !values.is_empty() {
                rule.insert(field.into(), list(values));
            }
        }
        rule.insert("verbs".into(), list(&self.verbs));
        Value::Object(rule)
    }

    /// Whether the rule allows the request `a` (Kubernetes' `RuleAllows`).
    pub fn allows(&self, a: &Attributes<'_>) -> bool {
        if !has_or_all(&self.verbs, a.verb) {
            return false;
        }
        if a.resource_request {
            has_or_all(&self.api_groups, a.group)
                && self.resource_matches(a.resource, a.subresource)
                && (self.resource_names.is_empty() || has(&self.resource_names, a.name))
        } else {
            self.non_resource_urls
                .iter()
                .any(|url| url_covers(url, a.path))
        }
    }

    /// Whether `resource` (with `subresource`, if any) is among the rule's resources:
    /// exactly, as `*`, or as `*/subresource`.
    fn resource_matches(&self, resource: &str, subresource: &str) -> bool {
        self.resources.iter().any(|r| {
            if &**r == "*" {
                return true;
            }
            if subresource.is_empty() {
                return &**r == resource;
            }
            let combined = r.len() == resource.len() + 1 + subresource.len()
                && r.starts_with(resource)
                && r[resource.len()..].starts_with('/')
                && r.ends_with(subresource);
            let any_parent =
                r.len() == subresource.len() + 2 && r.starts_with("*/") && r.ends_with(subresource);
            combined || any_parent
        })
    }

    /// The rule as Kubernetes' escalation messages show it:
    /// `{APIGroups:["apps"], Resources:["deployments"], Verbs:["create"]}`.
    pub fn compact_string(&self) -> String {
        let mut parts = Vec::new();
        for (name, values) in [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ] {
            if !values.is_empty() {
                parts.push(format!("{name}:{}", go_quoted(values.iter().map(|v| &**v))));
            }
        }
        format!("{{{}}}", parts.join(", "))
    }

    /// The rule as single-valued rules: one verb, group, resource and name each, or one
    /// verb and path each (Kubernetes' `BreakdownRule`).
    fn breakdown(&self) -> Vec<Rule> {
        let one = |value: &Arc<str>| -> Strings { Box::new([value.clone()]) };
        let mut rules = Vec::new();
        for group in &self.api_groups {
            for resource in &self.resources {
                for verb in &self.verbs {
                    let base = Rule {
                        verbs: one(verb),
                        api_groups: one(group),
                        resources: one(resource),
                        ..Rule::default()
                    };
                    if self.resource_names.is_empty() {
                        rules.push(base);
                    } else {
                        for name in &self.resource_names {
                            rules.push(Rule {
                                resource_names: one(name),
                                ..base.clone()
                            });
                        }
                    }
                }
            }
        }
        for url in &self.non_resource_urls {
            for verb in &self.verbs {
                rules.push(Rule {
                    verbs: one(verb),
                    non_resource_urls: one(url),
                    ..Rule::default()
                });
            }
        }
        rules
    }

    /// Whether this (owner) rule covers `sub`, a rule of single values (Kubernetes'
    /// `ruleCovers`).
    fn covers(&self, sub: &Rule) -> bool {
        let verbs = has(&self.verbs, "*") || has_all(&self.verbs, &sub.verbs);
        let groups = has(&self.api_groups, "*") || has_all(&self.api_groups, &sub.api_groups);
        let resources = resources_cover(&self.resources, &sub.resources);
        let urls = sub
            .non_resource_urls
            .iter()
            .all(|path| self.non_resource_urls.iter().any(|u| url_covers(u, path)));
        let names = if sub.resource_names.is_empty() {
            self.resource_names.is_empty()
        } else {
            self.resource_names.is_empty() || has_all(&self.resource_names, &sub.resource_names)
        };
        verbs && groups && resources && names && urls
    }
}

/// Owned copies of `values`.
fn owned(values: &[&str]) -> Strings {
    values.iter().map(|v| Arc::from(*v)).collect()
}

fn has(set: &[Arc<str>], value: &str) -> bool {
    set.iter().any(|v| &**v == value)
}

fn has_or_all(set: &[Arc<str>], value: &str) -> bool {
    set.iter().any(|v| &**v == "*" || &**v == value)
}

fn has_all(set: &[Arc<str>], values: &[Arc<str>]) -> bool {
    values.iter().all(|v| has(set, v))
}

/// Whether `owner` (a path, or a prefix ending in `*`) covers `path`.
fn url_covers(owner: &str, path: &str) -> bool {
    owner == path
        || owner
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
}

/// Whether the owner's resources cover each of `wanted` (`*`, exact, or `*/sub` for a
/// subresource).
fn resources_cover(owner: &[Arc<str>], wanted: &[Arc<str>]) -> bool {
    if has(owner, "*") {
        return true;
    }
    wanted.iter().all(|resource| {
        has(owner, resource)
            || resource
                .split_once('/')
                .is_some_and(|(_, sub)| owner.iter().any(|o| o.strip_prefix("*/") == Some(sub)))
    })
}

/// Whether `owner` covers every rule of `servant`; if not, the single-valued rules it
/// does not cover (Kubernetes' `Covers`).
pub fn covers(owner: &[Rule], servant: &[Rule]) -> Result<(), Vec<Rule>> {
    let missing: Vec<Rule> = servant
        .iter()
        .flat_map(Rule::breakdown)
        .filter(|sub| !owner.iter().any(|o| o.covers(sub)))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing)
    }
}

/// Rules of one group and one resource that differ only by verb, merged into one
/// (Kubernetes' `CompactRules`); others are kept as they are.
pub fn compact(rules: Vec<Rule>) -> Vec<Rule> {
    // Verbs by group and resource.
    type Simple = BTreeMap<(Arc<str>, Arc<str>), Vec<Arc<str>>>;
    let mut simple = Simple::new();
    let mut compacted = Vec::new();
    for rule in rules {
        let is_simple = rule.resource_names.is_empty()
            && rule.non_resource_urls.is_empty()
            && rule.api_groups.len() == 1
            && rule.resources.len() == 1;
        if is_simple {
            let key = (rule.api_groups[0].clone(), rule.resources[0].clone());
            simple
                .entry(key)
                .or_default()
                .extend(rule.verbs.iter().cloned());
        } else {
            compacted.push(rule);
        }
    }
    compacted.extend(simple.into_iter().map(|((group, resource), verbs)| Rule {
        verbs: verbs.into(),
        api_groups: Box::new([group]),
        resources: Box::new([resource]),
        ..Rule::default()
    }));
    compacted
}

/// The missing rules as an escalation message lists them: compacted, one per line,
/// sorted.
pub fn describe_missing(missing: Vec<Rule>) -> String {
    let lines: BTreeSet<String> = compact(missing).iter().map(Rule::compact_string).collect();
    lines.into_iter().collect::<Vec<_>>().join("\n")
}

/// `values` as Go's `%q` prints a `[]string`: `["a" "b"]`.
pub fn go_quoted<'s>(values: impl IntoIterator<Item = &'s str>) -> String {
    let quoted: Vec<String> = values.into_iter().map(|v| format!("{v:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// Values of the index held once each: the strings of rules and bindings, and the rule
/// sets of roles (a thousand roles granting the same rules hold one copy).
#[derive(Debug)]
pub(crate) struct Shared<T: ?Sized> {
    values: HashSet<Arc<T>>,
    /// How many values there were after the last purge.
    kept: usize,
}

impl<T: ?Sized> Default for Shared<T> {
    fn default() -> Self {
        Shared {
            values: HashSet::new(),
            kept: 0,
        }
    }
}

impl<T: ?Sized + Eq + std::hash::Hash> Shared<T>
where
    for<'v> Arc<T>: From<&'v T>,
{
    /// The shared copy of `value`.
    pub(crate) fn get(&mut self, value: &T) -> Arc<T> {
        if let Some(found) = self.values.get(value) {
            return found.clone();
        }
        let value: Arc<T> = Arc::from(value);
        self.values.insert(value.clone());
        if self.values.len() > 2 * self.kept.max(1024) {
            self.purge();
        }
        value
    }

    /// Forgets the values nothing else holds any more.
    pub(crate) fn purge(&mut self) {
        self.values.retain(|v| Arc::strong_count(v) > 1);
        self.kept = self.values.len();
    }

    /// How many values it holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserInfo;

    fn attributes<'a>(
        user: &'a UserInfo,
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        subresource: &'a str,
        name: &'a str,
    ) -> Attributes<'a> {
        Attributes {
            cluster: "root",
            user,
            verb,
            resource_request: true,
            group,
            version: "v1",
            resource,
            subresource,
            namespace: "shop",
            name,
            path: "",
        }
    }

    /// Upstream's RuleAllows cases (`plugin/pkg/auth/authorizer/rbac/rbac_test.go`), as a
    /// table: the rule, the request, allowed or not.
    #[test]
    fn rules_match_requests_as_kubernetes_matches_them() {
        let jane = UserInfo::new("jane", &[]);
        // (rule, verb, group, resource, subresource, name, allowed)
        let cases: Vec<(Rule, [&str; 5], bool)> = vec![
            (
                Rule::resources(&["get"], &[""], &["pods"]),
                ["get", "", "pods", "", ""],
                true,
            ),
            (
                Rule::resources(&["get"], &[""], &["pods"]),
                ["list", "", "pods", "", ""],
                false,
            ),
            (
                Rule::resources(&["*"], &[""], &["pods"]),
                ["delete", "", "pods", "", "a"],
                true,
            ),
            (
                Rule::resources(&["get"], &["*"], &["pods"]),
                ["get", "x.io", "pods", "", ""],
                true,
            ),
            (
                Rule::resources(&["get"], &[""], &["pods"]),
                ["get", "apps", "pods", "", ""],
                false,
            ),
            (
                Rule::resources(&["get"], &[""], &["*"]),
                ["get", "", "secrets", "", ""],
                true,
            ),
            // subresources: only as named, or */sub
            (
                Rule::resources(&["get"], &[""], &["pods"]),
                ["get", "", "pods", "log", ""],
                false,
            ),
            (
                Rule::resources(&["get"], &[""], &["pods/log"]),
                ["get", "", "pods", "log", ""],
                true,
            ),
            (
                Rule::resources(&["get"], &[""], &["pods/log"]),
                ["get", "", "pods", "", ""],
                false,
            ),
            (
                Rule::resources(&["get"], &[""], &["*/scale"]),
                ["get", "apps", "deployments", "scale", ""],
                false,
            ),
            (
                Rule::resources(&["get"], &["apps"], &["*/scale"]),
                ["get", "apps", "deployments", "scale", ""],
                true,
            ),
            (
                Rule::resources(&["get"], &["apps"], &["*/scale"]),
                ["get", "apps", "deployments", "status", ""],
                false,
            ),
            (
                Rule::resources(&["get"], &["apps"], &["*/scale"]),
                ["get", "apps", "deployments", "", ""],
                false,
            ),
            (
                Rule::resources(&["get"], &["apps"], &["deployments/scalex"]),
                ["get", "apps", "deployments", "scale", ""],
                false,
            ),
            // resourceNames: never a request without a name (list, create)
            (
                Rule::resources(&["get", "list"], &[""], &["configmaps"]).named(&["a"]),
                ["get", "", "configmaps", "", "a"],
                true,
            ),
            (
                Rule::resources(&["get", "list"], &[""], &["configmaps"]).named(&["a"]),
                ["get", "", "configmaps", "", "b"],
                false,
            ),
            (
                Rule::resources(&["get", "list"], &[""], &["configmaps"]).named(&["a"]),
                ["list", "", "configmaps", "", ""],
                false,
            ),
            (
                Rule::resources(&["create"], &[""], &["configmaps"]).named(&["a"]),
                ["create", "", "configmaps", "", ""],
                false,
            ),
            // a path rule never allows a resource request
            (
                Rule::urls(&["*"], &["*"]),
                ["get", "", "pods", "", ""],
                false,
            ),
        ];
        for (rule, [verb, group, resource, sub, name], allowed) in cases {
            let a = attributes(&jane, verb, group, resource, sub, name);
            assert_eq!(rule.allows(&a), allowed, "{rule:?} on {a:?}");
        }
    }

    #[test]
    fn paths_match_exactly_or_under_a_star() {
        let jane = UserInfo::new("jane", &[]);
        let rule = Rule::urls(&["get"], &["/api", "/apis/*", "/healthz"]);
        for (verb, path, allowed) in [
            ("get", "/api", true),
            ("get", "/api/v1", false),
            ("get", "/apis", false),
            ("get", "/apis/", true),
            ("get", "/apis/apps/v1", true),
            ("post", "/apis/apps", false),
            ("get", "/healthz/ping", false),
        ] {
            let a = Attributes::path("root", &jane, verb, path);
            assert_eq!(rule.allows(&a), allowed, "{verb} {path}");
        }
        assert!(Rule::urls(&["*"], &["*"]).allows(&Attributes::path("root", &jane, "put", "/x")));
        // a resource rule never allows a path
        let resources = Rule::resources(&["*"], &["*"], &["*"]);
        assert!(!resources.allows(&Attributes::path("root", &jane, "get", "/api")));
    }

    #[test]
    fn owner_rules_cover_servant_rules_as_kubernetes_compares_them() {
        let r = Rule::resources;
        // (owner, servant, covered)
        let cases: Vec<(Vec<Rule>, Vec<Rule>, bool)> = vec![
            (Rule::everything(), Rule::everything(), true),
            (
                vec![r(&["get", "list"], &[""], &["pods"])],
                vec![r(&["get"], &[""], &["pods"])],
                true,
            ),
            (
                vec![r(&["get"], &[""], &["pods"])],
                vec![r(&["get", "list"], &[""], &["pods"])],
                false,
            ),
            // split over two owner rules
            (
                vec![
                    r(&["get"], &[""], &["pods"]),
                    r(&["list"], &[""], &["pods"]),
                ],
                vec![r(&["get", "list"], &[""], &["pods"])],
                true,
            ),
            (
                vec![r(&["*"], &["*"], &["*"])],
                vec![r(&["get"], &["apps"], &["deployments/scale"])],
                true,
            ),
            (
                vec![r(&["get"], &["apps"], &["*/scale"])],
                vec![r(&["get"], &["apps"], &["deployments/scale"])],
                true,
            ),
            (
                vec![r(&["get"], &["apps"], &["deployments"])],
                vec![r(&["get"], &["apps"], &["deployments/scale"])],
                false,
            ),
            // names: an unrestricted owner covers names; a restricted one only its own
            (
                vec![r(&["get"], &[""], &["secrets"])],
                vec![r(&["get"], &[""], &["secrets"]).named(&["a"])],
                true,
            ),
            (
                vec![r(&["get"], &[""], &["secrets"]).named(&["a"])],
                vec![r(&["get"], &[""], &["secrets"])],
                false,
            ),
            (
                vec![r(&["get"], &[""], &["secrets"]).named(&["a", "b"])],
                vec![r(&["get"], &[""], &["secrets"]).named(&["b"])],
                true,
            ),
            // paths
            (
                vec![Rule::urls(&["get"], &["/apis/*"])],
                vec![Rule::urls(&["get"], &["/apis/apps"])],
                true,
            ),
            (
                vec![Rule::urls(&["get"], &["/apis/*"])],
                vec![Rule::urls(&["get"], &["/api"])],
                false,
            ),
            (
                vec![r(&["*"], &["*"], &["*"])],
                vec![Rule::urls(&["get"], &["/healthz"])],
                false,
            ),
            // a servant rule without groups grants nothing, so nothing is missing
            (vec![], vec![r(&["get"], &[], &["pods"])], true),
        ];
        for (owner, servant, covered) in cases {
            assert_eq!(
                covers(&owner, &servant).is_ok(),
                covered,
                "{owner:?} covers {servant:?}"
            );
        }
    }

    #[test]
    fn missing_rules_are_compacted_and_worded_as_kubernetes_words_them() {
        let owner = vec![Rule::resources(&["get"], &["apps"], &["deployments"])];
        let servant = vec![
            Rule::resources(&["get", "create", "delete"], &["apps"], &["deployments"]),
            Rule::resources(&["get"], &[""], &["secrets"]).named(&["db"]),
            Rule::urls(&["get"], &["/metrics"]),
        ];
        let missing = covers(&owner, &servant).unwrap_err();
        assert_eq!(missing.len(), 4);
        assert_eq!(
            describe_missing(missing),
            [
                r#"{APIGroups:[""], Resources:["secrets"], ResourceNames:["db"], Verbs:["get"]}"#,
                r#"{APIGroups:["apps"], Resources:["deployments"], Verbs:["create" "delete"]}"#,
                r#"{NonResourceURLs:["/metrics"], Verbs:["get"]}"#,
            ]
            .join("\n")
        );
    }

    #[test]
    fn rules_read_and_write_as_the_api_spells_them() {
        let json = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"],
            "resourceNames": ["a"]});
        let rule = Rule::from_json(&json, &mut |s| Arc::from(s));
        assert_eq!(
            rule,
            Rule::resources(&["get"], &[""], &["pods"]).named(&["a"])
        );
        assert_eq!(rule.to_json(), json);
        assert_eq!(
            Rule::urls(&["get"], &["/x"]).to_json(),
            json!({"nonResourceURLs": ["/x"], "verbs": ["get"]})
        );
    }

    #[test]
    fn shared_values_are_held_once_and_forgotten_when_nobody_holds_them() {
        let mut interner = Shared::<str>::default();
        let a = interner.get("get");
        let b = interner.get("get");
        assert!(Arc::ptr_eq(&a, &b));
        let c = interner.get("list");
        drop(c);
        interner.purge();
        assert_eq!(interner.len(), 1, "\"list\" is held by nothing");
        drop((a, b));
        interner.purge();
        assert_eq!(interner.len(), 0);
        let mut sets = Shared::<[Rule]>::default();
        let one = sets.get(&Rule::everything());
        let two = sets.get(&Rule::everything());
        assert!(Arc::ptr_eq(&one, &two));
    }
}

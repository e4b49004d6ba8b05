//! The audit policy: Kubernetes' `audit.k8s.io/v1` `Policy` (kube-apiserver's
//! `--audit-policy-file`), read from YAML or JSON. Its rules are tried in order and the
//! first that matches a request decides its level and the stages left out; a request no
//! rule matches is not recorded.

use std::path::Path;

use serde::Deserialize;

use super::{Level, Recording, RequestInfo, Stage, StageSet};
use crate::auth::UserInfo;

/// Why a policy file was refused (one line).
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("cannot read the audit policy {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// It is not a valid policy.
    #[error("invalid audit policy{at}: {why}")]
    Invalid {
        /// ` FILE` when read from a file.
        at: String,
        /// What is wrong.
        why: String,
    },
}

/// An audit policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    rules: Vec<Rule>,
    /// Stages no request is recorded at.
    omit: StageSet,
}

/// One rule: a request that matches every condition given is recorded at `level`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    level: Level,
    users: Vec<String>,
    user_groups: Vec<String>,
    verbs: Vec<String>,
    resources: Vec<GroupResources>,
    namespaces: Vec<String>,
    non_resource_urls: Vec<String>,
    omit: StageSet,
}

/// Resources of one API group a rule names.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GroupResources {
    /// The API group (`""`: the core group).
    #[serde(default)]
    group: String,
    /// `pods`, `pods/status`, `pods/*`, `*/status`, `*`; none: every resource of the group.
    #[serde(default)]
    resources: Vec<String>,
    /// Only objects of these names; none: any.
    #[serde(default)]
    resource_names: Vec<String>,
}

/// The file's form.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyFile {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    #[allow(dead_code)] // Accepted, as in Kubernetes; nothing in it is used.
    metadata: Option<serde_json::Value>,
    #[serde(default)]
    rules: Vec<RuleFile>,
    #[serde(default)]
    omit_stages: Vec<String>,
    #[serde(default)]
    #[allow(dead_code)] // Accepted; managedFields are kept in recorded bodies.
    omit_managed_fields: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RuleFile {
    level: String,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<String>,
    #[serde(default)]
    #[allow(dead_code)] // Accepted; managedFields are kept in recorded bodies.
    omit_managed_fields: Option<bool>,
}

/// The stages named, refusing any other name (`Panic` is a stage, never recorded).
fn stages(names: &[String]) -> Result<StageSet, String> {
    let mut set = StageSet::EMPTY;
    for name in names {
        set = match name.as_str() {
            "RequestReceived" => set.with(Stage::RequestReceived),
            "ResponseStarted" => set.with(Stage::ResponseStarted),
            "ResponseComplete" => set.with(Stage::ResponseComplete),
            "Panic" => set,
            other => {
                return Err(format!(
                    "unknown stage {other:?} in omitStages: expected RequestReceived, \
                     ResponseStarted, ResponseComplete or Panic"
                ));
            }
        };
    }
    Ok(set)
}

impl Policy {
    /// Every request at Metadata, every stage (the hub's policy without
    /// `--audit-policy-file`).
    pub fn metadata() -> Policy {
        Policy {
            rules: vec![Rule {
                level: Level::Metadata,
                users: Vec::new(),
                user_groups: Vec::new(),
                verbs: Vec::new(),
                resources: Vec::new(),
                namespaces: Vec::new(),
                non_resource_urls: Vec::new(),
                omit: StageSet::EMPTY,
            }],
            omit: StageSet::EMPTY,
        }
    }

    /// Reads the policy in `path` (YAML or JSON).
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|error| PolicyError::Read {
            path: path.display().to_string(),
            error,
        })?;
        Policy::parse(&text).map_err(|e| match e {
            PolicyError::Invalid { why, .. } => PolicyError::Invalid {
                at: format!(" {}", path.display()),
                why,
            },
            e => e,
        })
    }

    /// A policy written as YAML or JSON.
    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        Policy::read(text).map_err(|why| PolicyError::Invalid {
            at: String::new(),
            why: why.split_whitespace().collect::<Vec<_>>().join(" "),
        })
    }

    fn read(text: &str) -> Result<Policy, String> {
        let file: PolicyFile = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
        match file.api_version.as_deref() {
            Some("audit.k8s.io/v1") => {}
            Some(other) => {
                return Err(format!(
                    "apiVersion {other:?} is not served: write audit.k8s.io/v1"
                ));
            }
            None => return Err("apiVersion is missing: write audit.k8s.io/v1".into()),
        }
        if file.kind.as_deref() != Some("Policy") {
            return Err(format!(
                "kind {:?} is not a Policy",
                file.kind.unwrap_or_default()
            ));
        }
        if file.rules.is_empty() {
            return Err("it has no rules (a request no rule matches is not recorded)".into());
        }
        let omit = stages(&file.omit_stages)?;
        let rules = file
            .rules
            .into_iter()
            .enumerate()
            .map(|(i, rule)| Rule::read(rule).map_err(|why| format!("rules[{i}]: {why}")))
            .collect::<Result<_, _>>()?;
        Ok(Policy { rules, omit })
    }

    /// How a request of `user` asking `info` is recorded: by the first rule that matches
    /// it; not at all if none does.
    pub fn decide(&self, user: &UserInfo, info: &RequestInfo) -> Recording {
        match self.rules.iter().find(|rule| rule.matches(user, info)) {
            Some(rule) => Recording {
                level: rule.level,
                omit: self.omit.union(rule.omit),
            },
            None => Recording::at(Level::None),
        }
    }
}

impl Rule {
    fn read(rule: RuleFile) -> Result<Rule, String> {
        let level = Level::parse(&rule.level).ok_or_else(|| {
            format!(
                "unknown level {:?}: expected None, Metadata, Request or RequestResponse",
                rule.level
            )
        })?;
        if !rule.non_resource_urls.is_empty()
            && (!rule.resources.is_empty() || !rule.namespaces.is_empty())
        {
            return Err(
                "a rule cannot apply to both resources (resources, namespaces) and \
                 nonResourceURLs"
                    .into(),
            );
        }
        for url in &rule.non_resource_urls {
            let stem = url.strip_suffix('*').unwrap_or(url);
            if url != "*" && !url.starts_with('/') {
                return Err(format!("nonResourceURLs {url:?} must begin with '/'"));
            }
            if stem.contains('*') {
                return Err(format!(
                    "nonResourceURLs {url:?}: '*' may only be the last character"
                ));
            }
        }
        for group in &rule.resources {
            if group.group.contains('/') {
                return Err(format!(
                    "resources group {:?} is a group name, without a version",
                    group.group
                ));
            }
            if !group.resource_names.is_empty() && group.resources.is_empty() {
                return Err("resourceNames needs at least one resource".into());
            }
        }
        Ok(Rule {
            level,
            users: rule.users,
            user_groups: rule.user_groups,
            verbs: rule.verbs,
            resources: rule.resources,
            namespaces: rule.namespaces,
            non_resource_urls: rule.non_resource_urls,
            omit: stages(&rule.omit_stages)?,
        })
    }

    /// Kubernetes' `ruleMatches`: every condition given holds.
    fn matches(&self, user: &UserInfo, info: &RequestInfo) -> bool {
        let has = |list: &[String], item: &str| list.iter().any(|s| s == item);
        if !self.users.is_empty() && !has(&self.users, &user.name) {
            return false;
        }
        if !self.user_groups.is_empty() && !user.groups.iter().any(|g| has(&self.user_groups, g)) {
            return false;
        }
        if !self.verbs.is_empty() && !has(&self.verbs, info.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(info);
        }
        if !self.non_resource_urls.is_empty() {
            return !info.resource_request
                && self
                    .non_resource_urls
                    .iter()
                    .any(|spec| path_matches(&info.path, spec));
        }
        true
    }

    /// Kubernetes' `ruleMatchesResource`: a resource request in one of the namespaces
    /// (`""` for cluster-scoped objects), of one of the resources.
    fn matches_resource(&self, info: &RequestInfo) -> bool {
        if !info.resource_request {
            return false;
        }
        if !self.namespaces.is_empty() && !self.namespaces.contains(&info.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let (resource, sub) = (info.resource.as_str(), info.subresource.as_str());
        let combined = match sub {
            "" => resource.to_owned(),
            sub => format!("{resource}/{sub}"),
        };
        self.resources
            .iter()
            .filter(|gr| gr.group == info.group)
            .any(|gr| {
                if gr.resources.is_empty() {
                    return true;
                }
                if !gr.resource_names.is_empty() && !gr.resource_names.contains(&info.name) {
                    return false;
                }
                gr.resources.iter().any(|spec| {
                    spec == "*"
                        || *spec == combined
                        || (!sub.is_empty() && spec.strip_prefix("*/") == Some(sub))
                        || spec.strip_suffix("/*") == Some(resource)
                })
            })
    }
}

/// Kubernetes' `pathMatches`: `*`, the path itself, or a prefix ending in `*`.
fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || spec
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::*;
    use crate::auth::{ADMIN_USER, AUTHENTICATED, MASTERS};

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
metadata: {name: test}
omitStages: [RequestReceived]
rules:
  # Nothing of watches by the controllers.
  - level: None
    users: ["system:apiserver"]
    verbs: ["watch"]
  - level: None
    nonResourceURLs: ["/version", "/openapi/*"]
  - level: RequestResponse
    userGroups: ["auditors"]
    resources:
      - group: ""
        resources: ["secrets"]
        resourceNames: ["watched"]
  - level: Request
    resources:
      - group: apps
        resources: ["deployments/scale", "*/status"]
      - group: ""
        resources: ["pods/*"]
  - level: Metadata
    namespaces: ["kube-system"]
    omitStages: [ResponseComplete]
  - level: None
    resources:
      - group: ""
        resources: ["configmaps", "events"]
  - level: Metadata
    resources: [{group: "batch"}]
  - level: RequestResponse
    verbs: ["get"]
    nonResourceURLs: ["/api*"]
"#;

    fn level(policy: &Policy, user: &UserInfo, method: Method, uri: &str) -> Level {
        let (path, query) = uri
            .split_once('?')
            .map_or((uri, None), |(p, q)| (p, Some(q)));
        policy
            .decide(user, &RequestInfo::parse(&method, path, query))
            .level
    }

    #[test]
    fn the_first_rule_that_matches_decides() {
        let policy = Policy::parse(POLICY).unwrap();
        let admin = UserInfo::admin();
        let loopback = UserInfo::loopback();
        let loopback: &UserInfo = &loopback;
        let auditor = UserInfo::new("ann", &["auditors", AUTHENTICATED]);
        let cases: [(&UserInfo, Method, &str, Level); 20] = [
            // users and verbs
            (loopback, Method::GET, "/api/v1/pods?watch=1", Level::None),
            (&admin, Method::GET, "/version", Level::None),
            (&admin, Method::GET, "/openapi/v3/apis/apps/v1", Level::None),
            // groups and resourceNames
            (
                &auditor,
                Method::GET,
                "/api/v1/namespaces/a/secrets/watched",
                Level::RequestResponse,
            ),
            (
                &auditor,
                Method::GET,
                "/api/v1/namespaces/a/secrets/other",
                Level::None,
            ),
            (
                &admin,
                Method::GET,
                "/api/v1/namespaces/a/secrets/watched",
                Level::None,
            ),
            // subresources: named, */status, pods/*
            (
                &admin,
                Method::PUT,
                "/apis/apps/v1/namespaces/a/deployments/w/scale",
                Level::Request,
            ),
            (
                &admin,
                Method::PUT,
                "/apis/apps/v1/namespaces/a/deployments/w/status",
                Level::Request,
            ),
            (
                &admin,
                Method::PUT,
                "/apis/apps/v1/namespaces/a/deployments/w",
                Level::None,
            ),
            (
                &admin,
                Method::GET,
                "/api/v1/namespaces/a/pods/p/log",
                Level::Request,
            ),
            (
                &admin,
                Method::GET,
                "/api/v1/namespaces/a/pods/p",
                Level::Request,
            ),
            (
                &admin,
                Method::GET,
                "/api/v1/namespaces/a/services/s/status",
                Level::None,
            ),
            // namespaces, before the configmaps rule
            (
                &admin,
                Method::GET,
                "/api/v1/namespaces/kube-system/configmaps/c",
                Level::Metadata,
            ),
            (
                &admin,
                Method::GET,
                "/api/v1/namespaces/default/configmaps/c",
                Level::None,
            ),
            (
                &admin,
                Method::DELETE,
                "/api/v1/namespaces/default/events",
                Level::None,
            ),
            // a group with no resources: all of it
            (
                &admin,
                Method::POST,
                "/apis/batch/v1/namespaces/a/jobs",
                Level::Metadata,
            ),
            (
                &admin,
                Method::POST,
                "/apis/batch/v1/namespaces/a/cronjobs",
                Level::Metadata,
            ),
            // nonResourceURLs with a * suffix, never a resource request
            (&admin, Method::GET, "/apis", Level::RequestResponse),
            (&admin, Method::GET, "/api/v1/nodes", Level::None),
            (&admin, Method::POST, "/apis", Level::None),
        ];
        for (user, method, path, expected) in cases {
            assert_eq!(
                level(&policy, user, method.clone(), path),
                expected,
                "{method} {path}"
            );
        }
    }

    #[test]
    fn stages_are_omitted_by_the_policy_and_by_the_rule() {
        let policy = Policy::parse(POLICY).unwrap();
        let admin = UserInfo::admin();
        let info = RequestInfo::parse(
            &Method::GET,
            "/api/v1/namespaces/kube-system/configmaps",
            None,
        );
        let recording = policy.decide(&admin, &info);
        assert!(recording.omit.contains(Stage::RequestReceived));
        assert!(recording.omit.contains(Stage::ResponseComplete));
        assert!(!recording.omit.contains(Stage::ResponseStarted));
        let info = RequestInfo::parse(&Method::POST, "/apis/batch/v1/namespaces/a/jobs", None);
        let recording = policy.decide(&admin, &info);
        assert!(recording.omit.contains(Stage::RequestReceived));
        assert!(!recording.omit.contains(Stage::ResponseComplete));
    }

    #[test]
    fn a_json_policy_reads_as_its_yaml() {
        let json = r#"{"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            "rules": [{"level": "Request", "users": ["flotilla:admin"]}]}"#;
        let policy = Policy::parse(json).unwrap();
        let admin = UserInfo::new(ADMIN_USER, &[MASTERS]);
        assert_eq!(
            level(&policy, &admin, Method::GET, "/version"),
            Level::Request
        );
        let jane = UserInfo::new("jane", &[MASTERS]);
        assert_eq!(level(&policy, &jane, Method::GET, "/version"), Level::None);
        assert_eq!(
            level(&Policy::metadata(), &jane, Method::GET, "/version"),
            Level::Metadata
        );
    }

    #[test]
    fn a_bad_policy_is_refused_in_one_line_saying_what_is_wrong() {
        let head = "apiVersion: audit.k8s.io/v1\nkind: Policy\n";
        let rules = |rules: &str| format!("{head}rules: [{rules}]");
        let cases: Vec<(String, &str)> = vec![
            (
                "kind: Policy\nrules: [{level: None}]".into(),
                "apiVersion is missing",
            ),
            (
                "apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules: [{level: None}]".into(),
                "not served",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Pod\nrules: [{level: None}]".into(),
                "not a Policy",
            ),
            (head.into(), "no rules"),
            (
                rules("{level: Everything}"),
                "rules[0]: unknown level \"Everything\"",
            ),
            (
                rules("{level: None}, {level: None, verb: [get]}"),
                "unknown field",
            ),
            (
                format!("{head}omitStages: [Start]\nrules: [{{level: None}}]"),
                "unknown stage \"Start\"",
            ),
            (
                rules("{level: None, nonResourceURLs: [\"/a\"], namespaces: [a]}"),
                "both resources",
            ),
            (
                rules("{level: None, nonResourceURLs: [\"a\"]}"),
                "must begin with '/'",
            ),
            (
                rules("{level: None, nonResourceURLs: [\"/a*b\"]}"),
                "last character",
            ),
            (
                rules("{level: None, resources: [{group: apps/v1}]}"),
                "without a version",
            ),
            (
                rules("{level: None, resources: [{resourceNames: [a]}]}"),
                "needs at least one resource",
            ),
            ("rules: [".into(), ""),
        ];
        for (text, why) in cases {
            let e = Policy::parse(&text).unwrap_err().to_string();
            assert!(e.starts_with("invalid audit policy: "), "{e}");
            assert!(e.contains(why), "{text}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}

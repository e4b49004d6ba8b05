//! The RBAC objects of every logical cluster, indexed for the questions a request asks:
//! which bindings name this user or one of its groups, cluster-wide and in this
//! namespace, and what their roles grant.
//!
//! ```text
//!  Index ── clusters: name ─► Cluster
//!             cluster_roles: name ─► rules (Arc, shared), labels, aggregation selectors
//!             cluster_bindings: name ─► role, subjects    subjects: user/group ─► bindings
//!             namespaces: name ─► roles: name ─► rules
//!                                 bindings: name ─► role, subjects
//!                                 subjects: user/group ─► bindings
//! ```
//!
//! A request for user U in groups G, namespace N, looks up U and each of G among the
//! cluster's subjects, then among N's: it never looks at a binding that cannot apply. A
//! ServiceAccount subject is indexed as its user name (`system:serviceaccount:NS:NAME`;
//! in a RoleBinding, NS defaults to the binding's namespace). Every string and rule set is
//! held once ([`Shared`]).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use smallvec::SmallVec;

use super::rule::{Rule, Shared};
use crate::auth::serviceaccount;
use crate::auth::{Attributes, Rules, UserInfo};
use crate::registry::selector::LabelSelector;

/// The four kinds of RBAC objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A namespaced set of rules.
    Role,
    /// A cluster-wide set of rules (granted cluster-wide, or in one namespace by a
    /// RoleBinding).
    ClusterRole,
    /// Grants a Role or ClusterRole in its namespace.
    RoleBinding,
    /// Grants a ClusterRole cluster-wide.
    ClusterRoleBinding,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 4] = [
        Kind::Role,
        Kind::ClusterRole,
        Kind::RoleBinding,
        Kind::ClusterRoleBinding,
    ];

    /// The resource (plural) of the kind.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Role => "roles",
            Kind::ClusterRole => "clusterroles",
            Kind::RoleBinding => "rolebindings",
            Kind::ClusterRoleBinding => "clusterrolebindings",
        }
    }

    /// The kind's name (`Role`, …).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Role => "Role",
            Kind::ClusterRole => "ClusterRole",
            Kind::RoleBinding => "RoleBinding",
            Kind::ClusterRoleBinding => "ClusterRoleBinding",
        }
    }

    /// The kind whose resource is `plural`.
    pub fn of_plural(plural: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.plural() == plural)
    }

    /// The kind named `name`.
    pub fn of_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether objects of the kind live in a namespace.
    pub fn namespaced(self) -> bool {
        matches!(self, Kind::Role | Kind::RoleBinding)
    }
}

/// The role a binding grants.
#[derive(Clone, Debug, PartialEq, Eq)]
enum RoleRef {
    /// A Role of the binding's namespace.
    Role(Arc<str>),
    /// A ClusterRole.
    ClusterRole(Arc<str>),
}

/// Who a binding grants its role to, as requests are matched.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Subject {
    /// A user by name (ServiceAccount subjects are their user name).
    User(Arc<str>),
    /// Every member of a group.
    Group(Arc<str>),
}

/// A RoleBinding or ClusterRoleBinding.
#[derive(Debug)]
struct Binding {
    /// `None` for a reference to another kind than Role or ClusterRole (grants nothing).
    role: Option<RoleRef>,
    subjects: Box<[Subject]>,
}

/// A ClusterRole: its rules, and what aggregation needs.
#[derive(Debug)]
struct ClusterRole {
    rules: Arc<[Rule]>,
    labels: Box<[(Arc<str>, Arc<str>)]>,
    /// The selectors of its `aggregationRule`, if it has one.
    aggregation: Option<Box<[LabelSelector]>>,
}

/// The names of the bindings that name each user (or each group). A user is most often
/// named by one binding: kept in place, not in a vector of its own (which would cost an
/// allocation of four names per user).
type Named = HashMap<Arc<str>, SmallVec<[Arc<str>; 1]>>;

/// Binding names by the user or group they name.
#[derive(Debug, Default)]
struct Subjects {
    users: Named,
    groups: Named,
}

impl Subjects {
    /// The map that holds `subject`, and its key there.
    fn of<'s, 'x>(&'s mut self, subject: &'x Subject) -> (&'s mut Named, &'x Arc<str>) {
        match subject {
            Subject::User(name) => (&mut self.users, name),
            Subject::Group(name) => (&mut self.groups, name),
        }
    }

    fn add(&mut self, binding: &Arc<str>, subjects: &[Subject]) {
        for subject in subjects {
            let (map, key) = self.of(subject);
            let names = map.entry(key.clone()).or_default();
            if !names.contains(binding) {
                names.push(binding.clone());
            }
        }
    }

    fn remove(&mut self, binding: &str, subjects: &[Subject]) {
        for subject in subjects {
            let (map, key) = self.of(subject);
            if let Some(names) = map.get_mut(&**key) {
                names.retain(|n| &**n != binding);
                if names.is_empty() {
                    map.remove(&**key);
                }
            }
        }
    }

    /// The bindings that name `user` or one of its groups (one that names both, more than
    /// once).
    fn of_user<'s>(&'s self, user: &'s UserInfo) -> impl Iterator<Item = &'s Arc<str>> {
        let by_user = self.users.get(user.name.as_str()).into_iter().flatten();
        let by_group = user
            .groups
            .iter()
            .filter_map(|g| self.groups.get(g.as_str()))
            .flatten();
        by_user.chain(by_group)
    }

    fn is_empty(&self) -> bool {
        self.users.is_empty() && self.groups.is_empty()
    }
}

/// The Roles and RoleBindings of one namespace.
#[derive(Debug, Default)]
struct Namespace {
    roles: HashMap<Arc<str>, Arc<[Rule]>>,
    bindings: HashMap<Arc<str>, Binding>,
    subjects: Subjects,
}

impl Namespace {
    fn is_empty(&self) -> bool {
        self.roles.is_empty() && self.bindings.is_empty()
    }
}

/// The RBAC objects of one logical cluster.
#[derive(Debug, Default)]
struct Cluster {
    cluster_roles: HashMap<Arc<str>, ClusterRole>,
    cluster_bindings: HashMap<Arc<str>, Binding>,
    subjects: Subjects,
    namespaces: HashMap<Arc<str>, Namespace>,
}

impl Cluster {
    fn is_empty(&self) -> bool {
        self.cluster_roles.is_empty()
            && self.cluster_bindings.is_empty()
            && self.namespaces.is_empty()
    }

    /// The rules of the role `role` refers to from `namespace` (`None` for a
    /// ClusterRoleBinding), or why there are none.
    fn rules_of<'c>(
        &'c self,
        role: &Option<RoleRef>,
        namespace: Option<&'c Namespace>,
    ) -> Result<&'c Arc<[Rule]>, String> {
        match role {
            Some(RoleRef::ClusterRole(name)) => self
                .cluster_roles
                .get(name)
                .map(|r| &r.rules)
                .ok_or_else(|| format!("clusterrole.rbac.authorization.k8s.io {name:?} not found")),
            Some(RoleRef::Role(name)) => namespace
                .and_then(|ns| ns.roles.get(name))
                .ok_or_else(|| format!("role.rbac.authorization.k8s.io {name:?} not found")),
            None => Err("unsupported role reference kind".to_owned()),
        }
    }

    /// Calls `visit` with each rule that applies to `user` in `namespace` (cluster-wide
    /// bindings first), until it answers `false`; `error` with each binding whose role is
    /// missing. With `once`, a binding that names the user and one of its groups is
    /// visited once (a decision needs no such care, and allocates nothing).
    fn visit(
        &self,
        user: &UserInfo,
        namespace: &str,
        once: bool,
        visit: &mut dyn FnMut(&Rule) -> bool,
        error: &mut dyn FnMut(String),
    ) {
        // The bindings visited: whether namespaced, and the name's address (a name is
        // unique in its scope; names are shared strings).
        let mut seen: Vec<(bool, *const str)> = Vec::new();
        let mut first = |namespaced: bool, name: &Arc<str>| {
            if !once {
                return true;
            }
            let key = (namespaced, Arc::as_ptr(name));
            let fresh = !seen.contains(&key);
            if fresh {
                seen.push(key);
            }
            fresh
        };
        for name in self.subjects.of_user(user) {
            let Some((name, binding)) = self.cluster_bindings.get_key_value(name) else {
                continue;
            };
            if !first(false, name) {
                continue;
            }
            match self.rules_of(&binding.role, None) {
                Ok(rules) => {
                    if !rules.iter().all(&mut *visit) {
                        return;
                    }
                }
                Err(e) => error(e),
            }
        }
        let Some(ns) = Some(namespace)
            .filter(|n| !n.is_empty())
            .and_then(|n| self.namespaces.get(n))
        else {
            return;
        };
        for name in ns.subjects.of_user(user) {
            let Some((name, binding)) = ns.bindings.get_key_value(name) else {
                continue;
            };
            if !first(true, name) {
                continue;
            }
            match self.rules_of(&binding.role, Some(ns)) {
                Ok(rules) => {
                    if !rules.iter().all(&mut *visit) {
                        return;
                    }
                }
                Err(e) => error(e),
            }
        }
    }
}

/// The RBAC objects of every logical cluster.
#[derive(Debug, Default)]
pub(crate) struct Index {
    clusters: HashMap<Arc<str>, Cluster>,
    strings: Shared<str>,
    rule_sets: Shared<[Rule]>,
}

impl Index {
    /// Whether some rule that applies to the request's user allows it.
    pub(crate) fn allows(&self, a: &Attributes<'_>) -> bool {
        let Some(cluster) = self.clusters.get(a.cluster) else {
            return false;
        };
        let mut allowed = false;
        cluster.visit(
            a.user,
            a.namespace,
            false,
            &mut |rule| {
                allowed = rule.allows(a);
                !allowed
            },
            &mut |_| {},
        );
        allowed
    }

    /// Every rule that applies to `user` in `namespace` of `cluster`.
    pub(crate) fn rules(&self, user: &UserInfo, cluster: &str, namespace: &str) -> Rules {
        let mut rules = Rules::default();
        if let Some(cluster) = self.clusters.get(cluster) {
            let mut found = Vec::new();
            cluster.visit(
                user,
                namespace,
                true,
                &mut |rule| {
                    found.push(rule.clone());
                    true
                },
                &mut |e| rules.errors.push(e),
            );
            rules.rules = found;
        }
        rules
    }

    /// Records the object `name` of `kind` (in `namespace`, for a namespaced kind) of
    /// logical cluster `cluster`, as stored: replaces what was there.
    pub(crate) fn put(
        &mut self,
        kind: Kind,
        cluster: &str,
        namespace: Option<&str>,
        name: &str,
        object: &Value,
    ) {
        self.remove(kind, cluster, namespace, name);
        let strings = &mut self.strings;
        let mut intern = |s: &str| strings.get(s);
        let name = intern(name);
        let cluster = intern(cluster);
        let namespace = namespace.map(&mut intern);
        match kind {
            Kind::Role | Kind::ClusterRole => {
                let rules = Rule::all_from_json(&object["rules"], &mut intern);
                let rules = self.rule_sets.get(&rules);
                let entry = self.clusters.entry(cluster).or_default();
                match (kind, namespace) {
                    (Kind::Role, Some(namespace)) => {
                        let ns = entry.namespaces.entry(namespace).or_default();
                        ns.roles.insert(name, rules);
                    }
                    (Kind::ClusterRole, _) => {
                        let labels = object["metadata"]["labels"]
                            .as_object()
                            .into_iter()
                            .flatten()
                            .map(|(k, v)| (intern(k), intern(v.as_str().unwrap_or(""))))
                            .collect();
                        let aggregation = object
                            .get("aggregationRule")
                            .filter(|a| !a.is_null())
                            .map(|rule| {
                                rule["clusterRoleSelectors"]
                                    .as_array()
                                    .into_iter()
                                    .flatten()
                                    // A selector that is not one selects nothing (the API refuses
                                    // such roles; a stored one grants no more for it).
                                    .filter_map(|s| LabelSelector::from_object(s).ok())
                                    .collect()
                            });
                        entry.cluster_roles.insert(
                            name,
                            ClusterRole {
                                rules,
                                labels,
                                aggregation,
                            },
                        );
                    }
                    _ => {}
                }
            }
            Kind::RoleBinding | Kind::ClusterRoleBinding => {
                let reference = &object["roleRef"];
                let role_name = intern(reference["name"].as_str().unwrap_or(""));
                let role = match reference["kind"].as_str() {
                    Some("Role") if kind == Kind::RoleBinding => Some(RoleRef::Role(role_name)),
                    Some("ClusterRole") => Some(RoleRef::ClusterRole(role_name)),
                    _ => None,
                };
                let subjects: Box<[Subject]> = object["subjects"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| subject(s, namespace.as_deref(), &mut intern))
                    .collect();
                let binding = Binding { role, subjects };
                let entry = self.clusters.entry(cluster).or_default();
                match (kind, namespace) {
                    (Kind::RoleBinding, Some(namespace)) => {
                        let ns = entry.namespaces.entry(namespace).or_default();
                        ns.subjects.add(&name, &binding.subjects);
                        ns.bindings.insert(name, binding);
                    }
                    (Kind::ClusterRoleBinding, _) => {
                        entry.subjects.add(&name, &binding.subjects);
                        entry.cluster_bindings.insert(name, binding);
                    }
                    _ => {}
                }
            }
        }
    }

    /// Forgets the object `name` of `kind` (in `namespace`) of `cluster`, if it is there.
    pub(crate) fn remove(
        &mut self,
        kind: Kind,
        cluster: &str,
        namespace: Option<&str>,
        name: &str,
    ) {
        let Some(entry) = self.clusters.get_mut(cluster) else {
            return;
        };
        match (kind, namespace) {
            (Kind::ClusterRole, _) => {
                entry.cluster_roles.remove(name);
            }
            (Kind::ClusterRoleBinding, _) => {
                if let Some(binding) = entry.cluster_bindings.remove(name) {
                    entry.subjects.remove(name, &binding.subjects);
                }
            }
            (Kind::Role | Kind::RoleBinding, Some(namespace)) => {
                if let Some(ns) = entry.namespaces.get_mut(namespace) {
                    if kind == Kind::Role {
                        ns.roles.remove(name);
                    } else if let Some(binding) = ns.bindings.remove(name) {
                        ns.subjects.remove(name, &binding.subjects);
                    }
                    if ns.is_empty() {
                        debug_assert!(ns.subjects.is_empty());
                        entry.namespaces.remove(namespace);
                    }
                }
            }
            (Kind::Role | Kind::RoleBinding, None) => {}
        }
        if entry.is_empty() {
            self.clusters.remove(cluster);
        }
    }

    /// The logical clusters that hold RBAC objects.
    pub(crate) fn clusters(&self) -> Vec<Arc<str>> {
        self.clusters.keys().cloned().collect()
    }

    /// The aggregated ClusterRoles of `cluster` whose rules are not what their selectors
    /// gather now, each with the rules it should have, as Kubernetes' clusterrole
    /// aggregation controller gathers them: for each selector in order, the rules of the
    /// roles it selects (the role itself left out) by name, each rule once.
    pub(crate) fn aggregations(&self, cluster: &str) -> Vec<(Arc<str>, Vec<Rule>)> {
        let Some(cluster) = self.clusters.get(cluster) else {
            return Vec::new();
        };
        let mut by_name: Vec<(&Arc<str>, &ClusterRole)> = cluster.cluster_roles.iter().collect();
        by_name.sort_by(|a, b| a.0.cmp(b.0));
        let mut changes = Vec::new();
        for (name, role) in &by_name {
            let Some(selectors) = &role.aggregation else {
                continue;
            };
            let mut rules: Vec<Rule> = Vec::new();
            for selector in selectors.iter() {
                for (other, selected) in &by_name {
                    if other == name {
                        continue;
                    }
                    let label = |key: &str| {
                        selected
                            .labels
                            .iter()
                            .find(|(k, _)| &**k == key)
                            .map(|(_, v)| &**v)
                    };
                    if !selector.matches_with(label) {
                        continue;
                    }
                    for rule in selected.rules.iter() {
                        if !rules.contains(rule) {
                            rules.push(rule.clone());
                        }
                    }
                }
            }
            if rules[..] != role.rules[..] {
                changes.push(((*name).clone(), rules));
            }
        }
        changes
    }

    /// How many strings and rule sets it holds (for tests of its sharing).
    #[cfg(test)]
    pub(crate) fn shared(&mut self) -> (usize, usize) {
        self.strings.purge();
        self.rule_sets.purge();
        (self.strings.len(), self.rule_sets.len())
    }
}

/// A binding's subject as requests are matched (`None` for one that matches nobody: an
/// unknown kind, a ServiceAccount without a namespace in a ClusterRoleBinding).
fn subject(
    subject: &Value,
    binding_namespace: Option<&str>,
    intern: &mut impl FnMut(&str) -> Arc<str>,
) -> Option<Subject> {
    let name = subject["name"].as_str().unwrap_or("");
    match subject["kind"].as_str()? {
        "User" => Some(Subject::User(intern(name))),
        "Group" => Some(Subject::Group(intern(name))),
        "ServiceAccount" => {
            let namespace = subject["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .or(binding_namespace)
                .filter(|n| !n.is_empty())?;
            Some(Subject::User(intern(&serviceaccount::user_name(
                namespace, name,
            ))))
        }
        _ => None,
    }
}

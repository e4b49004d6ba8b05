//! The resource types the server serves: the built-in kinds, and later one entry per
//! served version of each CustomResourceDefinition.
//!
//! ```text
//!  Registry (RwLock) ── get(group, version, plural) ─► Arc<ResourceType> ─► handlers
//!        │            └─ by_kind(group, version, kind)
//!        ├── all() / groups() ─► discovery documents
//!        └── add / remove (CRDs) ─► generation += 1 (discovery caches key on it)
//! ```

use std::cmp::{Ordering, Reverse};

use crate::registry::strategy::{Behaviour, Strategy};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The verbs of a resource backed by ordinary storage, in the order discovery lists them.
pub const STANDARD_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The verbs of the `status`, `scale` and `approval` subresources.
pub const SUBRESOURCE_VERBS: [&str; 3] = ["get", "patch", "update"];

/// The verbs of the `token` subresource (a TokenRequest is created, never stored).
pub const TOKEN_VERBS: [&str; 1] = ["create"];

/// A group, version and kind: what a request or response body is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupVersionKind {
    /// The API group, `""` for the core group.
    pub group: String,
    /// The version within the group.
    pub version: String,
    /// The kind, e.g. `Deployment`.
    pub kind: String,
}

/// A subresource served under `…/{plural}/{name}/{subresource}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Subresource {
    /// `status`: reads and writes only `.status` of the parent object (kind = parent kind).
    Status,
    /// `scale`: an `autoscaling/v1` `Scale` view of the parent's replica count.
    Scale,
    /// `token` of a ServiceAccount: creating an `authentication.k8s.io/v1` TokenRequest
    /// issues a token.
    Token,
    /// `approval` of a CertificateSigningRequest: writes its Approved/Denied conditions
    /// alone.
    Approval,
}

impl Subresource {
    /// The URL segment: `status` or `scale`.
    pub fn name(self) -> &'static str {
        match self {
            Subresource::Status => "status",
            Subresource::Scale => "scale",
            Subresource::Token => "token",
            Subresource::Approval => "approval",
        }
    }

    /// The kind this subresource's endpoint returns for `parent`.
    pub fn response_kind(self, parent: &ResourceType) -> GroupVersionKind {
        match self {
            Subresource::Status | Subresource::Approval => GroupVersionKind {
                group: parent.group.clone(),
                version: parent.version.clone(),
                kind: parent.kind.clone(),
            },
            Subresource::Scale => GroupVersionKind {
                group: "autoscaling".to_owned(),
                version: "v1".to_owned(),
                kind: "Scale".to_owned(),
            },
            Subresource::Token => GroupVersionKind {
                group: "authentication.k8s.io".to_owned(),
                version: "v1".to_owned(),
                kind: "TokenRequest".to_owned(),
            },
        }
    }

    /// The verbs discovery reports for this subresource.
    pub fn verbs(self) -> &'static [&'static str] {
        match self {
            Subresource::Token => &TOKEN_VERBS,
            _ => &SUBRESOURCE_VERBS,
        }
    }
}

/// The OpenAPI v3 schema of a resource's objects, as a CustomResourceDefinition version
/// gives it (`openAPIV3Schema`). Built-in kinds have none here: their schemas come from the
/// generated table of the Kubernetes release the server emulates.
#[derive(Clone, Debug, PartialEq)]
pub struct Schema(pub Arc<serde_json::Value>);

// JSON values parsed from documents hold no NaN, so equality is an equivalence.
impl Eq for Schema {}

/// Where the `scale` subresource finds the replica counts in an object (simple JSON paths
/// such as `.spec.replicas`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    /// The desired replicas.
    pub spec_replicas: String,
    /// The observed replicas.
    pub status_replicas: String,
    /// A label selector in string form, if the object has one there.
    pub label_selector: Option<String>,
}

impl Default for ScalePaths {
    /// The built-in workloads': `.spec.replicas`, `.status.replicas`, the selector from
    /// `.spec.selector`.
    fn default() -> Self {
        ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: None,
        }
    }
}

/// A CRD version's `additionalPrinterColumns` (a JSON array), for `as=Table`.
#[derive(Clone, Debug, PartialEq)]
pub struct PrinterColumns(pub Arc<serde_json::Value>);

impl Eq for PrinterColumns {}

/// One resource the API serves (a built-in kind, or later one version of a CRD).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// The API group, `""` for the core group.
    pub group: String,
    /// The version within the group, e.g. `v1`.
    pub version: String,
    /// The kind, e.g. `Deployment`.
    pub kind: String,
    /// The URL segment, e.g. `deployments`.
    pub plural: String,
    /// The lowercase kind, e.g. `deployment`.
    pub singular: String,
    /// kubectl's abbreviations, e.g. `["deploy"]`.
    pub short_names: Vec<String>,
    /// The categories the resource belongs to, e.g. `["all"]`.
    pub categories: Vec<String>,
    /// Whether objects live in a namespace (else cluster-scoped).
    pub namespaced: bool,
    /// The subresources served for each object.
    pub subresources: Vec<Subresource>,
    /// The verbs supported on the resource itself.
    pub verbs: Vec<String>,
    /// The schema of a custom resource's objects (`None` for built-in kinds).
    pub schema: Option<Schema>,
    /// The columns a custom resource's tables show (`None`: built-in columns, or Name and Age).
    pub printer_columns: Option<PrinterColumns>,
    /// A custom resource's scale paths (built-in kinds with `scale` use the defaults).
    pub scale: Option<ScalePaths>,
    /// A custom resource's `selectableFields` (as `spec.color`), for field selectors.
    pub selectable_fields: Vec<String>,
    /// What the resource does differently from the generic registry.
    pub behaviour: Behaviour,
}

impl ResourceType {
    /// A resource with the standard verbs, singular = lowercase kind, and no short names,
    /// categories or subresources (set those fields afterwards as needed).
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        ResourceType {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            plural: plural.to_owned(),
            singular: kind.to_ascii_lowercase(),
            short_names: Vec::new(),
            categories: Vec::new(),
            namespaced,
            subresources: Vec::new(),
            verbs: STANDARD_VERBS.iter().map(|v| (*v).to_owned()).collect(),
            schema: None,
            printer_columns: None,
            scale: None,
            selectable_fields: Vec::new(),
            behaviour: Behaviour::builtin(group, plural),
        }
    }

    /// Its strategy: the hooks the registry calls where the resource differs.
    pub(crate) fn strategy(&self) -> &'static dyn Strategy {
        self.behaviour.strategy()
    }

    /// The `apiVersion` of objects of this type: `v1` for the core group, else `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The kind of a list of these objects, e.g. `DeploymentList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Whether the type has a `status` subresource (so `.status` is written only through it).
    pub fn has_status(&self) -> bool {
        self.has_subresource(Subresource::Status)
    }

    /// Whether the type serves the given subresource.
    pub fn has_subresource(&self, subresource: Subresource) -> bool {
        self.subresources.contains(&subresource)
    }

    /// The subresource with URL segment `name`, if this type serves it.
    pub fn subresource(&self, name: &str) -> Option<Subresource> {
        self.subresources.iter().copied().find(|s| s.name() == name)
    }

    /// Whether the type supports `verb` (e.g. `deletecollection`).
    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }
}

/// An API group and the versions it serves, preferred version first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupVersions {
    /// The group name, `""` for the core group.
    pub name: String,
    /// The served versions, most preferred first (never empty).
    pub versions: Vec<String>,
}

impl GroupVersions {
    /// The version clients should use by default.
    pub fn preferred_version(&self) -> &str {
        self.versions
            .first()
            .map(String::as_str)
            .unwrap_or_default()
    }
}

/// Why [`Registry::add`] refused a resource type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConflictError {
    /// Another resource of the group/version already uses this plural.
    #[error("resource \"{plural}\" is already served in {group_version}")]
    Plural {
        /// `group/version` (or `v1` for the core group).
        group_version: String,
        /// The clashing plural.
        plural: String,
    },
    /// Another resource of the group/version already has this kind.
    #[error("kind \"{kind}\" is already served in {group_version}")]
    Kind {
        /// `group/version` (or `v1` for the core group).
        group_version: String,
        /// The clashing kind.
        kind: String,
    },
}

/// The set of resource types: built-ins plus ones added at run time (CRDs).
///
/// Reads take a shared lock and clone `Arc`s, so many request threads can read at once.
#[derive(Debug, Default)]
pub struct Registry {
    inner: RwLock<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Kept sorted by [`order`]: group (core first), version (preferred first), plural.
    types: Vec<Arc<ResourceType>>,
    generation: u64,
}

/// [`Registry::add`] under its write lock.
fn add_to(inner: &mut Inner, rt: ResourceType) -> Result<(), ConflictError> {
    let same_gv = |t: &&Arc<ResourceType>| t.group == rt.group && t.version == rt.version;
    if inner
        .types
        .iter()
        .filter(same_gv)
        .any(|t| t.plural == rt.plural)
    {
        return Err(ConflictError::Plural {
            group_version: rt.api_version(),
            plural: rt.plural,
        });
    }
    if inner
        .types
        .iter()
        .filter(same_gv)
        .any(|t| t.kind == rt.kind)
    {
        return Err(ConflictError::Kind {
            group_version: rt.api_version(),
            kind: rt.kind,
        });
    }
    let rt = Arc::new(rt);
    let at = inner
        .types
        .partition_point(|t| order(t, &rt) == Ordering::Less);
    inner.types.insert(at, rt);
    inner.generation += 1;
    Ok(())
}

impl Registry {
    /// An empty registry (no resource types at all).
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry holding exactly the built-in kinds.
    pub fn builtin() -> Self {
        let mut types: Vec<Arc<ResourceType>> = BUILTINS
            .iter()
            .map(|b| Arc::new(b.resource_type()))
            .collect();
        types.sort_by(|a, b| order(a, b));
        Registry {
            inner: RwLock::new(Inner {
                types,
                generation: 0,
            }),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The type served at `/apis/{group}/{version}/{plural}` (or `/api/{version}/{plural}`).
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.read()
            .types
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
            .cloned()
    }

    /// The type of `kind` in `group`/`version`.
    pub fn by_kind(&self, group: &str, version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        self.read()
            .types
            .iter()
            .find(|t| t.group == group && t.version == version && t.kind == kind)
            .cloned()
    }

    /// Every type, ordered by group (core first, then by name), version (preferred first),
    /// then plural.
    pub fn all(&self) -> Vec<Arc<ResourceType>> {
        self.read().types.clone()
    }

    /// The types served in one group/version, ordered by plural.
    pub fn group_version(&self, group: &str, version: &str) -> Vec<Arc<ResourceType>> {
        self.read()
            .types
            .iter()
            .filter(|t| t.group == group && t.version == version)
            .cloned()
            .collect()
    }

    /// Every served group (the core group `""` first, then by name), each with its versions
    /// in Kubernetes version priority (`v2` > `v1` > `v1beta2` > `v1beta1` > `v1alpha1` >
    /// other strings); the first is the preferred version.
    pub fn groups(&self) -> Vec<GroupVersions> {
        let inner = self.read();
        let mut groups: Vec<GroupVersions> = Vec::new();
        for t in &inner.types {
            match groups.last_mut() {
                Some(g) if g.name == t.group => {
                    if g.versions.last() != Some(&t.version) {
                        g.versions.push(t.version.clone());
                    }
                }
                _ => groups.push(GroupVersions {
                    name: t.group.clone(),
                    versions: vec![t.version.clone()],
                }),
            }
        }
        groups
    }

    /// Adds a type. Refused if its group/version already serves the same plural or kind.
    /// Bumps [`Registry::generation`] on success.
    pub fn add(&self, rt: ResourceType) -> Result<(), ConflictError> {
        add_to(&mut self.write(), rt)
    }

    /// Serves `types` as the whole of what a CRD defines for `group`/`plural`, in place of
    /// what it defined before, in one step: a request meanwhile finds the old types or
    /// the new ones, never neither. Types already served exactly so are left as they are
    /// (no generation bump); each type that conflicts with another is left out and
    /// returned with its error.
    pub fn define(
        &self,
        group: &str,
        plural: &str,
        types: &[ResourceType],
    ) -> Vec<(String, ConflictError)> {
        let mut inner = self.write();
        let defined =
            |t: &Arc<ResourceType>| t.group == group && t.plural == plural && t.schema.is_some();
        let current: Vec<&ResourceType> = inner
            .types
            .iter()
            .filter(|t| defined(t))
            .map(|t| t.as_ref())
            .collect();
        if current.len() == types.len() && types.iter().all(|t| current.contains(&t)) {
            return Vec::new();
        }
        let before = inner.types.len();
        inner.types.retain(|t| !defined(t));
        if inner.types.len() != before {
            inner.generation += 1;
        }
        let mut refused = Vec::new();
        for rt in types {
            let version = rt.version.clone();
            if let Err(e) = add_to(&mut inner, rt.clone()) {
                refused.push((version, e));
            }
        }
        refused
    }

    /// Removes and returns the type served at `group`/`version`/`plural`.
    /// Bumps [`Registry::generation`] when something was removed.
    pub fn remove(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        let mut inner = self.write();
        let at = inner
            .types
            .iter()
            .position(|t| t.group == group && t.version == version && t.plural == plural)?;
        let removed = inner.types.remove(at);
        inner.generation += 1;
        Some(removed)
    }

    /// A counter bumped by every successful [`add`](Registry::add) and
    /// [`remove`](Registry::remove); discovery caches and hashes key on it.
    pub fn generation(&self) -> u64 {
        self.read().generation
    }
}

/// The registry order: group (core `""` sorts first), version by descending priority, plural.
fn order(a: &ResourceType, b: &ResourceType) -> Ordering {
    a.group
        .cmp(&b.group)
        .then_with(|| {
            Reverse(version_priority(&a.version)).cmp(&Reverse(version_priority(&b.version)))
        })
        .then_with(|| a.plural.cmp(&b.plural))
}

/// Kubernetes version priority as a sortable key (greater = preferred), as the API server
/// orders versions: names matching `v<major>[(alpha|beta)<minor>]` come first, GA before
/// beta before alpha, higher major first, then higher minor; any other string sorts after
/// them, alphabetically.
fn version_priority(version: &str) -> (u8, u64, u64, Reverse<String>) {
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let parsed = version.strip_prefix('v').and_then(|rest| {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (major, tail) = rest.split_at(digits);
        if !all_digits(major) {
            return None;
        }
        let major: u64 = major.parse().ok()?;
        if tail.is_empty() {
            return Some((3, major, 0));
        }
        let (stability, minor) = if let Some(minor) = tail.strip_prefix("beta") {
            (2, minor)
        } else {
            (1, tail.strip_prefix("alpha")?)
        };
        if !all_digits(minor) {
            return None;
        }
        Some((stability, major, minor.parse().ok()?))
    });
    let (stability, major, minor) = parsed.unwrap_or_default();
    (stability, major, minor, Reverse(version.to_owned()))
}

/// One row of the built-in table.
struct Builtin {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    namespaced: bool,
    subresources: &'static [Subresource],
    verbs: &'static [&'static str],
}

impl Builtin {
    fn resource_type(&self) -> ResourceType {
        let strings = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        ResourceType {
            group: self.group.to_owned(),
            version: self.version.to_owned(),
            kind: self.kind.to_owned(),
            plural: self.plural.to_owned(),
            singular: self.kind.to_ascii_lowercase(),
            short_names: strings(self.short_names),
            categories: strings(self.categories),
            namespaced: self.namespaced,
            subresources: self.subresources.to_vec(),
            verbs: strings(self.verbs),
            schema: None,
            printer_columns: None,
            scale: None,
            selectable_fields: Vec::new(),
            behaviour: Behaviour::builtin(self.group, self.plural),
        }
    }
}

const NS: bool = true;
const CLUSTER: bool = false;
const NONE: &[&str] = &[];
const ALL: &[&str] = &["all"];
const NO_SUB: &[Subresource] = &[];
const STATUS: &[Subresource] = &[Subresource::Status];
const STATUS_SCALE: &[Subresource] = &[Subresource::Status, Subresource::Scale];
const TOKEN: &[Subresource] = &[Subresource::Token];
const APPROVAL_STATUS: &[Subresource] = &[Subresource::Approval, Subresource::Status];
const VERBS: &[&str] = &STANDARD_VERBS;
/// Reviews can only be created.
const CREATE_ONLY: &[&str] = &["create"];
/// Namespaces have no `deletecollection` upstream.
const NAMESPACE_VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

#[rustfmt::skip]
const BUILTINS: &[Builtin] = &[
    // core/v1
    Builtin { group: "", version: "v1", kind: "ConfigMap", plural: "configmaps", short_names: &["cm"], categories: NONE, namespaced: NS, subresources: NO_SUB, verbs: VERBS },
    Builtin { group: "", version: "v1", kind: "Endpoints", plural: "endpoints", short_names: &["ep"], categories: NONE, namespaced: NS, subresources: NO_SUB, verbs: VERBS },
    Builtin { group: "", version: "v1", kind: "Event", plural: "events", short_names: &["ev"], categories: NONE, namespaced: NS, subresources: NO_SUB, verbs: VERBS },
    Builtin { group: "", version: "v1", kind: "LimitRange", plural: "limitranges", short_names: &["limits"], categories: NONE, namespaced: NS, subresources: NO_SUB, verbs: VERBS },
    Builtin { group: "", version: "v1", kind: "Namespace", plural: "namespaces", short_names: &["ns"], categories: NONE, namespaced: CLUSTER, subresources: STATUS, verbs: NAMESPACE_VERBS },
    Builtin { group: "", version: "v1", kind: "Node", plural: "nodes", short_names: &["no"], categories: NONE, namespaced: CLUSTER, subresources: STATUS, verbs: VERBS },
    Builtin { group: "", version: "v1", kind: "PersistentVolumeClaim", plural: "persistentvolumeclaims", short_names: &["pvc"], categories: NONE, namespaced: NS, subresources: STATUS, verbs: VERBS },
    Builtin { group: "", version: "v1", kind: "Pod", plural: "pods", short_names: &["po"], categories: ALL, namespaced: NS, subresources: STATUS, verbs: VERBS },
    Builtin { group: "", version: "v1", kind: "ResourceQuota", plural: "resourcequotas", short_names: &["quota"], categories: NONE, namespaced: NS, subresources: STATUS, verbs: VERBS },
    Builtin { group: "", version: "v1", kind: "Secret", plural: "secrets", short_names: NONE, categories: NONE, namespaced: NS, subresources: NO_SUB, verbs: VERBS },
    Builtin { group: "", version: "v1", kind: "ServiceAccount", plural: "serviceaccounts", short_names: &["sa"], categories: NONE, namespaced: NS, subresources: TOKEN, verbs: VERBS },
    Builtin { group: "", version: "v1", kind: "Service", plural: "services", short_names: &["svc"], categories: ALL, namespaced: NS, subresources: STATUS, verbs: VERBS },
    // apps/v1
    Builtin { group: "apps", version: "v1", kind: "DaemonSet", plural: "daemonsets", short_names: &["ds"], categories: ALL, namespaced: NS, subresources: STATUS, verbs: VERBS },
    Builtin { group: "apps", version: "v1", kind: "Deployment", plural: "deployments", short_names: &["deploy"], categories: ALL, namespaced: NS, subresources: STATUS_SCALE, verbs: VERBS },
    Builtin { group: "apps", version: "v1", kind: "ReplicaSet", plural: "replicasets", short_names: &["rs"], categories: ALL, namespaced: NS, subresources: STATUS_SCALE, verbs: VERBS },
    Builtin { group: "apps", version: "v1", kind: "StatefulSet", plural: "statefulsets", short_names: &["sts"], categories: ALL, namespaced: NS, subresources: STATUS_SCALE, verbs: VERBS },
    // batch/v1
    Builtin { group: "batch", version: "v1", kind: "CronJob", plural: "cronjobs", short_names: &["cj"], categories: ALL, namespaced: NS, subresources: STATUS, verbs: VERBS },
    Builtin { group: "batch", version: "v1", kind: "Job", plural: "jobs", short_names: NONE, categories: ALL, namespaced: NS, subresources: STATUS, verbs: VERBS },
    // networking.k8s.io/v1
    Builtin { group: "networking.k8s.io", version: "v1", kind: "Ingress", plural: "ingresses", short_names: &["ing"], categories: NONE, namespaced: NS, subresources: STATUS, verbs: VERBS },
    Builtin { group: "networking.k8s.io", version: "v1", kind: "NetworkPolicy", plural: "networkpolicies", short_names: &["netpol"], categories: NONE, namespaced: NS, subresources: NO_SUB, verbs: VERBS },
    // rbac.authorization.k8s.io/v1
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "ClusterRoleBinding", plural: "clusterrolebindings", short_names: NONE, categories: NONE, namespaced: CLUSTER, subresources: NO_SUB, verbs: VERBS },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "ClusterRole", plural: "clusterroles", short_names: NONE, categories: NONE, namespaced: CLUSTER, subresources: NO_SUB, verbs: VERBS },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "RoleBinding", plural: "rolebindings", short_names: NONE, categories: NONE, namespaced: NS, subresources: NO_SUB, verbs: VERBS },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "Role", plural: "roles", short_names: NONE, categories: NONE, namespaced: NS, subresources: NO_SUB, verbs: VERBS },
    // coordination.k8s.io/v1
    Builtin { group: "coordination.k8s.io", version: "v1", kind: "Lease", plural: "leases", short_names: NONE, categories: NONE, namespaced: NS, subresources: NO_SUB, verbs: VERBS },
    // events.k8s.io/v1
    Builtin { group: "events.k8s.io", version: "v1", kind: "Event", plural: "events", short_names: &["ev"], categories: NONE, namespaced: NS, subresources: NO_SUB, verbs: VERBS },
    // policy/v1
    Builtin { group: "policy", version: "v1", kind: "PodDisruptionBudget", plural: "poddisruptionbudgets", short_names: &["pdb"], categories: NONE, namespaced: NS, subresources: STATUS, verbs: VERBS },
    // autoscaling/v2
    Builtin { group: "autoscaling", version: "v2", kind: "HorizontalPodAutoscaler", plural: "horizontalpodautoscalers", short_names: &["hpa"], categories: ALL, namespaced: NS, subresources: STATUS, verbs: VERBS },
    // discovery.k8s.io/v1
    Builtin { group: "discovery.k8s.io", version: "v1", kind: "EndpointSlice", plural: "endpointslices", short_names: NONE, categories: NONE, namespaced: NS, subresources: NO_SUB, verbs: VERBS },
    // authentication.k8s.io/v1 and authorization.k8s.io/v1: reviews, answered by the
    // authorizer, never stored
    Builtin { group: "authentication.k8s.io", version: "v1", kind: "SelfSubjectReview", plural: "selfsubjectreviews", short_names: NONE, categories: NONE, namespaced: CLUSTER, subresources: NO_SUB, verbs: CREATE_ONLY },
    Builtin { group: "authorization.k8s.io", version: "v1", kind: "SelfSubjectAccessReview", plural: "selfsubjectaccessreviews", short_names: NONE, categories: NONE, namespaced: CLUSTER, subresources: NO_SUB, verbs: CREATE_ONLY },
    Builtin { group: "authorization.k8s.io", version: "v1", kind: "SelfSubjectRulesReview", plural: "selfsubjectrulesreviews", short_names: NONE, categories: NONE, namespaced: CLUSTER, subresources: NO_SUB, verbs: CREATE_ONLY },
    Builtin { group: "authorization.k8s.io", version: "v1", kind: "SubjectAccessReview", plural: "subjectaccessreviews", short_names: NONE, categories: NONE, namespaced: CLUSTER, subresources: NO_SUB, verbs: CREATE_ONLY },
    Builtin { group: "authorization.k8s.io", version: "v1", kind: "LocalSubjectAccessReview", plural: "localsubjectaccessreviews", short_names: NONE, categories: NONE, namespaced: NS, subresources: NO_SUB, verbs: CREATE_ONLY },
    // admissionregistration.k8s.io/v1: dynamic admission's configurations
    Builtin { group: "admissionregistration.k8s.io", version: "v1", kind: "MutatingWebhookConfiguration", plural: "mutatingwebhookconfigurations", short_names: NONE, categories: &["api-extensions"], namespaced: CLUSTER, subresources: NO_SUB, verbs: VERBS },
    Builtin { group: "admissionregistration.k8s.io", version: "v1", kind: "ValidatingAdmissionPolicy", plural: "validatingadmissionpolicies", short_names: NONE, categories: &["api-extensions"], namespaced: CLUSTER, subresources: STATUS, verbs: VERBS },
    Builtin { group: "admissionregistration.k8s.io", version: "v1", kind: "ValidatingAdmissionPolicyBinding", plural: "validatingadmissionpolicybindings", short_names: NONE, categories: &["api-extensions"], namespaced: CLUSTER, subresources: NO_SUB, verbs: VERBS },
    Builtin { group: "admissionregistration.k8s.io", version: "v1", kind: "ValidatingWebhookConfiguration", plural: "validatingwebhookconfigurations", short_names: NONE, categories: &["api-extensions"], namespaced: CLUSTER, subresources: NO_SUB, verbs: VERBS },
    // certificates.k8s.io/v1
    Builtin { group: "certificates.k8s.io", version: "v1", kind: "CertificateSigningRequest", plural: "certificatesigningrequests", short_names: &["csr"], categories: NONE, namespaced: CLUSTER, subresources: APPROVAL_STATUS, verbs: VERBS },
    // apiextensions.k8s.io/v1
    Builtin { group: "apiextensions.k8s.io", version: "v1", kind: "CustomResourceDefinition", plural: "customresourcedefinitions", short_names: &["crd", "crds"], categories: &["api-extensions"], namespaced: CLUSTER, subresources: STATUS, verbs: VERBS },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// (group, version, plural, kind, namespaced) of every built-in, as upstream names them.
    const EXPECTED: &[(&str, &str, &str, &str, bool)] = &[
        ("", "v1", "configmaps", "ConfigMap", true),
        ("", "v1", "endpoints", "Endpoints", true),
        ("", "v1", "events", "Event", true),
        ("", "v1", "limitranges", "LimitRange", true),
        ("", "v1", "namespaces", "Namespace", false),
        ("", "v1", "nodes", "Node", false),
        (
            "",
            "v1",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
        ),
        ("", "v1", "pods", "Pod", true),
        ("", "v1", "resourcequotas", "ResourceQuota", true),
        ("", "v1", "secrets", "Secret", true),
        ("", "v1", "serviceaccounts", "ServiceAccount", true),
        ("", "v1", "services", "Service", true),
        (
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            false,
        ),
        (
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
            "ValidatingAdmissionPolicy",
            false,
        ),
        (
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding",
            false,
        ),
        (
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            false,
        ),
        (
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
        ),
        ("apps", "v1", "daemonsets", "DaemonSet", true),
        ("apps", "v1", "deployments", "Deployment", true),
        ("apps", "v1", "replicasets", "ReplicaSet", true),
        ("apps", "v1", "statefulsets", "StatefulSet", true),
        (
            "authentication.k8s.io",
            "v1",
            "selfsubjectreviews",
            "SelfSubjectReview",
            false,
        ),
        (
            "authorization.k8s.io",
            "v1",
            "localsubjectaccessreviews",
            "LocalSubjectAccessReview",
            true,
        ),
        (
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            false,
        ),
        (
            "authorization.k8s.io",
            "v1",
            "selfsubjectrulesreviews",
            "SelfSubjectRulesReview",
            false,
        ),
        (
            "authorization.k8s.io",
            "v1",
            "subjectaccessreviews",
            "SubjectAccessReview",
            false,
        ),
        (
            "autoscaling",
            "v2",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
            true,
        ),
        ("batch", "v1", "cronjobs", "CronJob", true),
        ("batch", "v1", "jobs", "Job", true),
        (
            "certificates.k8s.io",
            "v1",
            "certificatesigningrequests",
            "CertificateSigningRequest",
            false,
        ),
        ("coordination.k8s.io", "v1", "leases", "Lease", true),
        (
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "EndpointSlice",
            true,
        ),
        ("events.k8s.io", "v1", "events", "Event", true),
        ("networking.k8s.io", "v1", "ingresses", "Ingress", true),
        (
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            "NetworkPolicy",
            true,
        ),
        (
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
        ),
        (
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
        ),
        (
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
        ),
        (
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
        ),
        ("rbac.authorization.k8s.io", "v1", "roles", "Role", true),
    ];

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn widget(group: &str, version: &str) -> ResourceType {
        ResourceType::new(group, version, "Widget", "widgets", true)
    }

    #[test]
    fn builtin_is_exactly_the_expected_set_in_order() {
        let registry = Registry::builtin();
        let all: Vec<_> = registry
            .all()
            .iter()
            .map(|t| {
                (
                    t.group.clone(),
                    t.version.clone(),
                    t.plural.clone(),
                    t.kind.clone(),
                    t.namespaced,
                )
            })
            .collect();
        let expected: Vec<_> = EXPECTED
            .iter()
            .map(|(g, v, p, k, n)| {
                (
                    (*g).to_owned(),
                    (*v).to_owned(),
                    (*p).to_owned(),
                    (*k).to_owned(),
                    *n,
                )
            })
            .collect();
        assert_eq!(all, expected);
        assert_eq!(registry.generation(), 0);
    }

    #[test]
    fn every_builtin_resolves_by_plural_and_by_kind() {
        let registry = Registry::builtin();
        for (group, version, plural, kind, namespaced) in EXPECTED {
            let by_plural = registry
                .get(group, version, plural)
                .unwrap_or_else(|| panic!("{group}/{version}/{plural}"));
            assert_eq!(by_plural.kind, *kind);
            assert_eq!(by_plural.namespaced, *namespaced);
            assert_eq!(by_plural.singular, kind.to_ascii_lowercase());
            let by_kind = registry
                .by_kind(group, version, kind)
                .unwrap_or_else(|| panic!("{group}/{version}/{kind}"));
            assert_eq!(by_kind, by_plural);
        }
        assert!(registry.get("", "v1", "persistentvolumes").is_none());
        assert!(registry.get("apps", "v1beta1", "deployments").is_none());
        assert!(registry.get("", "v1", "deployments").is_none());
        assert!(registry.by_kind("apps", "v1", "deployments").is_none());
        assert!(registry.by_kind("", "v1", "Deployment").is_none());
    }

    #[test]
    fn deployments() {
        let rt = Registry::builtin()
            .get("apps", "v1", "deployments")
            .unwrap();
        assert_eq!(
            *rt,
            ResourceType {
                group: "apps".into(),
                version: "v1".into(),
                kind: "Deployment".into(),
                plural: "deployments".into(),
                singular: "deployment".into(),
                short_names: strings(&["deploy"]),
                categories: strings(&["all"]),
                namespaced: true,
                subresources: vec![Subresource::Status, Subresource::Scale],
                verbs: strings(&STANDARD_VERBS),
                schema: None,
                printer_columns: None,
                scale: None,
                selectable_fields: Vec::new(),
                behaviour: Behaviour::Plain,
            }
        );
        assert_eq!(rt.api_version(), "apps/v1");
        assert_eq!(rt.list_kind(), "DeploymentList");
        assert!(rt.has_status());
        assert!(rt.has_subresource(Subresource::Scale));
        assert_eq!(rt.subresource("scale"), Some(Subresource::Scale));
        assert_eq!(rt.subresource("status"), Some(Subresource::Status));
        assert_eq!(rt.subresource("log"), None);
        assert_eq!(
            Subresource::Scale.response_kind(&rt),
            GroupVersionKind {
                group: "autoscaling".into(),
                version: "v1".into(),
                kind: "Scale".into()
            }
        );
        assert_eq!(
            Subresource::Status.response_kind(&rt),
            GroupVersionKind {
                group: "apps".into(),
                version: "v1".into(),
                kind: "Deployment".into()
            }
        );
        assert_eq!(Subresource::Status.verbs(), ["get", "patch", "update"]);
    }

    #[test]
    fn namespaces() {
        let rt = Registry::builtin().get("", "v1", "namespaces").unwrap();
        assert!(!rt.namespaced);
        assert_eq!(rt.api_version(), "v1");
        assert_eq!(rt.list_kind(), "NamespaceList");
        assert_eq!(rt.short_names, strings(&["ns"]));
        assert!(rt.categories.is_empty());
        assert_eq!(rt.subresources, vec![Subresource::Status]);
        assert!(!rt.supports("deletecollection"));
        assert!(rt.supports("delete") && rt.supports("watch"));
    }

    #[test]
    fn customresourcedefinitions() {
        let rt = Registry::builtin()
            .get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .unwrap();
        assert!(!rt.namespaced);
        assert_eq!(rt.kind, "CustomResourceDefinition");
        assert_eq!(rt.singular, "customresourcedefinition");
        assert_eq!(rt.short_names, strings(&["crd", "crds"]));
        assert_eq!(rt.categories, strings(&["api-extensions"]));
        assert_eq!(rt.subresources, vec![Subresource::Status]);
        assert_eq!(rt.api_version(), "apiextensions.k8s.io/v1");
        assert_eq!(rt.verbs, strings(&STANDARD_VERBS));
    }

    #[test]
    fn events_in_both_groups() {
        let registry = Registry::builtin();
        let core = registry.get("", "v1", "events").unwrap();
        let events = registry.get("events.k8s.io", "v1", "events").unwrap();
        for rt in [&core, &events] {
            assert_eq!(rt.kind, "Event");
            assert_eq!(rt.singular, "event");
            assert_eq!(rt.short_names, strings(&["ev"]));
            assert!(rt.namespaced);
            assert!(rt.subresources.is_empty());
            assert!(!rt.has_status());
        }
        assert_eq!(core.api_version(), "v1");
        assert_eq!(events.api_version(), "events.k8s.io/v1");
        assert_ne!(core, events);
    }

    #[test]
    fn short_names_categories_and_subresources_of_the_builtins() {
        let registry = Registry::builtin();
        let short = |g: &str, p: &str| {
            registry
                .get(g, if g == "autoscaling" { "v2" } else { "v1" }, p)
                .unwrap()
                .short_names
                .clone()
        };
        assert_eq!(short("", "configmaps"), ["cm"]);
        assert_eq!(short("", "services"), ["svc"]);
        assert_eq!(short("", "serviceaccounts"), ["sa"]);
        assert_eq!(short("", "endpoints"), ["ep"]);
        assert_eq!(short("", "limitranges"), ["limits"]);
        assert_eq!(short("", "resourcequotas"), ["quota"]);
        assert_eq!(short("", "persistentvolumeclaims"), ["pvc"]);
        assert_eq!(short("", "pods"), ["po"]);
        assert_eq!(short("", "nodes"), ["no"]);
        assert!(short("", "secrets").is_empty());
        assert_eq!(short("apps", "statefulsets"), ["sts"]);
        assert_eq!(short("apps", "daemonsets"), ["ds"]);
        assert_eq!(short("apps", "replicasets"), ["rs"]);
        assert_eq!(short("batch", "cronjobs"), ["cj"]);
        assert!(short("batch", "jobs").is_empty());
        assert_eq!(short("networking.k8s.io", "ingresses"), ["ing"]);
        assert_eq!(short("networking.k8s.io", "networkpolicies"), ["netpol"]);
        assert_eq!(short("policy", "poddisruptionbudgets"), ["pdb"]);
        assert_eq!(short("autoscaling", "horizontalpodautoscalers"), ["hpa"]);

        let in_all: Vec<String> = registry
            .all()
            .iter()
            .filter(|t| t.categories.iter().any(|c| c == "all"))
            .map(|t| t.plural.clone())
            .collect();
        assert_eq!(
            in_all,
            [
                "pods",
                "services",
                "daemonsets",
                "deployments",
                "replicasets",
                "statefulsets",
                "horizontalpodautoscalers",
                "cronjobs",
                "jobs"
            ]
        );

        let with_scale: Vec<String> = registry
            .all()
            .iter()
            .filter(|t| t.has_subresource(Subresource::Scale))
            .map(|t| t.plural.clone())
            .collect();
        assert_eq!(with_scale, ["deployments", "replicasets", "statefulsets"]);

        let without_status: Vec<String> = registry
            .all()
            .iter()
            .filter(|t| !t.has_status())
            .map(|t| format!("{}/{}", t.api_version(), t.plural))
            .collect();
        assert_eq!(
            without_status,
            [
                "v1/configmaps",
                "v1/endpoints",
                "v1/events",
                "v1/limitranges",
                "v1/secrets",
                "v1/serviceaccounts",
                "admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
                "admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
                "admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
                "authentication.k8s.io/v1/selfsubjectreviews",
                "authorization.k8s.io/v1/localsubjectaccessreviews",
                "authorization.k8s.io/v1/selfsubjectaccessreviews",
                "authorization.k8s.io/v1/selfsubjectrulesreviews",
                "authorization.k8s.io/v1/subjectaccessreviews",
                "coordination.k8s.io/v1/leases",
                "discovery.k8s.io/v1/endpointslices",
                "events.k8s.io/v1/events",
                "networking.k8s.io/v1/networkpolicies",
                "rbac.authorization.k8s.io/v1/clusterrolebindings",
                "rbac.authorization.k8s.io/v1/clusterroles",
                "rbac.authorization.k8s.io/v1/rolebindings",
                "rbac.authorization.k8s.io/v1/roles",
            ]
        );
    }

    #[test]
    fn add_refuses_a_clashing_plural_or_kind() {
        let registry = Registry::builtin();
        let mut clash = ResourceType::new("apps", "v1", "Widget", "deployments", true);
        assert_eq!(
            registry.add(clash.clone()),
            Err(ConflictError::Plural {
                group_version: "apps/v1".into(),
                plural: "deployments".into()
            })
        );
        clash.plural = "widgets".into();
        clash.kind = "Deployment".into();
        assert_eq!(
            registry.add(clash),
            Err(ConflictError::Kind {
                group_version: "apps/v1".into(),
                kind: "Deployment".into()
            })
        );
        let err = registry
            .add(ResourceType::new("", "v1", "Pod2", "pods", true))
            .unwrap_err();
        assert_eq!(err.to_string(), "resource \"pods\" is already served in v1");
        assert_eq!(
            registry.generation(),
            0,
            "refused adds leave the generation alone"
        );
        // The same plural and kind in another group, or another version, are fine.
        registry
            .add(ResourceType::new(
                "example.com",
                "v1",
                "Deployment",
                "deployments",
                true,
            ))
            .unwrap();
        registry
            .add(ResourceType::new(
                "apps",
                "v2",
                "Deployment",
                "deployments",
                true,
            ))
            .unwrap();
        assert_eq!(registry.generation(), 2);
    }

    #[test]
    fn add_and_remove_bump_generation_and_change_all() {
        let registry = Registry::builtin();
        let before = registry.all();
        registry.add(widget("example.com", "v1")).unwrap();
        assert_eq!(registry.generation(), 1);
        assert_eq!(registry.all().len(), before.len() + 1);
        let got = registry.get("example.com", "v1", "widgets").unwrap();
        assert_eq!(got.singular, "widget");
        assert_eq!(got.verbs, strings(&STANDARD_VERBS));
        assert_eq!(
            registry.by_kind("example.com", "v1", "Widget"),
            Some(got.clone())
        );
        // Sorted in place: after events.k8s.io, before networking.k8s.io.
        let groups: Vec<String> = registry.all().iter().map(|t| t.group.clone()).collect();
        let at = groups.iter().position(|g| g == "example.com").unwrap();
        assert_eq!(groups[at - 1], "events.k8s.io");
        assert_eq!(groups[at + 1], "networking.k8s.io");

        assert_eq!(registry.remove("example.com", "v1", "widgets"), Some(got));
        assert_eq!(registry.generation(), 2);
        assert_eq!(registry.all(), before);
        assert!(registry.get("example.com", "v1", "widgets").is_none());
        assert_eq!(registry.remove("example.com", "v1", "widgets"), None);
        assert_eq!(
            registry.generation(),
            2,
            "removing nothing leaves the generation alone"
        );

        // Built-ins can be removed too.
        assert!(registry.remove("", "v1", "secrets").is_some());
        assert!(registry.get("", "v1", "secrets").is_none());
        assert_eq!(registry.generation(), 3);
    }

    #[test]
    fn groups_core_first_then_by_name_with_versions_preferred_first() {
        let registry = Registry::builtin();
        let names: Vec<String> = registry.groups().into_iter().map(|g| g.name).collect();
        assert_eq!(
            names,
            [
                "",
                "admissionregistration.k8s.io",
                "apiextensions.k8s.io",
                "apps",
                "authentication.k8s.io",
                "authorization.k8s.io",
                "autoscaling",
                "batch",
                "certificates.k8s.io",
                "coordination.k8s.io",
                "discovery.k8s.io",
                "events.k8s.io",
                "networking.k8s.io",
                "policy",
                "rbac.authorization.k8s.io",
            ]
        );
        for g in registry.groups() {
            let expected = if g.name == "autoscaling" { "v2" } else { "v1" };
            assert_eq!(g.versions, [expected], "{}", g.name);
            assert_eq!(g.preferred_version(), expected);
        }

        for v in [
            "v1alpha1", "v1", "v2beta1", "v1beta2", "v10", "v2", "foo", "v1beta1", "bar", "v2alpha",
        ] {
            registry.add(widget("example.com", v)).unwrap();
        }
        let example = registry
            .groups()
            .into_iter()
            .find(|g| g.name == "example.com")
            .unwrap();
        assert_eq!(
            example.versions,
            [
                "v10", "v2", "v1", "v2beta1", "v1beta2", "v1beta1", "v1alpha1", "bar", "foo",
                "v2alpha"
            ]
        );
        assert_eq!(example.preferred_version(), "v10");
        // all() follows the same version order within the group.
        let versions: Vec<String> = registry
            .all()
            .iter()
            .filter(|t| t.group == "example.com")
            .map(|t| t.version.clone())
            .collect();
        assert_eq!(versions, example.versions);
        assert_eq!(registry.group_version("example.com", "v2").len(), 1);
        assert_eq!(registry.group_version("", "v1").len(), 12);
    }

    #[test]
    fn version_priority_orders_like_kubernetes() {
        let mut versions = vec![
            "v11alpha2",
            "v10beta3",
            "foo10",
            "v2",
            "v1",
            "v3beta1",
            "v12alpha1",
            "foo1",
            "v10",
            "v11beta2",
        ];
        versions.sort_by_key(|v| Reverse(version_priority(v)));
        assert_eq!(
            versions,
            [
                "v10",
                "v2",
                "v1",
                "v11beta2",
                "v10beta3",
                "v3beta1",
                "v12alpha1",
                "v11alpha2",
                "foo1",
                "foo10"
            ]
        );
        // Not conforming: a bare "v", alpha/beta without a number, unknown suffixes.
        for v in ["v", "vbeta1", "v1beta", "v1gamma1", "1", "V1", "v1.0"] {
            assert_eq!(version_priority(v).0, 0, "{v}");
        }
        assert_eq!(version_priority("v0").0, 3);
    }

    #[test]
    fn registry_is_shareable_across_threads() {
        let registry = Arc::new(Registry::builtin());
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let registry = Arc::clone(&registry);
                std::thread::spawn(move || {
                    let group = format!("t{i}.example.com");
                    registry.add(widget(&group, "v1")).unwrap();
                    assert!(registry.get(&group, "v1", "widgets").is_some());
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(registry.generation(), 4);
        assert_eq!(registry.all().len(), EXPECTED.len() + 4);
    }
}

//! The discovery documents: what `/api`, `/apis`, `/apis/{group}`, `/api/v1`,
//! `/apis/{group}/{version}` and `/version` answer. Pure functions over a [`Registry`];
//! the HTTP layer sets the Content-Type from [`Format::content_type`] and `Vary: Accept`.
//!
//! ```text
//!  Accept ─► negotiate() ─► AggregatedV2 | AggregatedV2Beta1 ─► aggregated(registry, core)
//!                        └► Legacy ─► api_versions (/api) | api_group_list (/apis)
//!  /apis/{g} ─► api_group        /api/v1, /apis/{g}/{v} ─► resource_list
//! ```

pub mod openapi;
pub mod openapi_v2;
pub mod table;

use serde_json::{Map, Value, json};

use crate::http::negotiate::{MediaRange, media_ranges};
use crate::registry::resources::{Registry, ResourceType};

/// The aggregated discovery group.
const DISCOVERY_GROUP: &str = "apidiscovery.k8s.io";
/// The kind aggregated discovery documents are served as.
const DISCOVERY_LIST_KIND: &str = "APIGroupDiscoveryList";

/// Content-Type of an aggregated `apidiscovery.k8s.io/v2` document.
pub const CONTENT_TYPE_AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
/// Content-Type of an aggregated `apidiscovery.k8s.io/v2beta1` document.
pub const CONTENT_TYPE_AGGREGATED_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
/// Content-Type of the legacy (unaggregated) documents.
pub const CONTENT_TYPE_JSON: &str = "application/json";
/// Every Content-Type `/api` and `/apis` may answer with (the response varies on `Accept`).
pub const CONTENT_TYPES: [&str; 3] = [
    CONTENT_TYPE_AGGREGATED_V2,
    CONTENT_TYPE_AGGREGATED_V2BETA1,
    CONTENT_TYPE_JSON,
];

/// The Kubernetes version this server implements.
pub const KUBERNETES_MAJOR: &str = "1";
/// The Kubernetes minor version this server implements.
pub const KUBERNETES_MINOR: &str = "32";
/// The `gitVersion` reported at `/version`.
pub const GIT_VERSION: &str = "v1.32.0-flotilla";

/// The format of the `/api` and `/apis` documents, chosen from the request's `Accept`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// `APIGroupDiscoveryList` of `apidiscovery.k8s.io/v2`.
    AggregatedV2,
    /// `APIGroupDiscoveryList` of `apidiscovery.k8s.io/v2beta1` (same shape as v2).
    AggregatedV2Beta1,
    /// `APIVersions` (`/api`) or `APIGroupList` (`/apis`).
    Legacy,
}

impl Format {
    /// The exact response Content-Type for this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::AggregatedV2 => CONTENT_TYPE_AGGREGATED_V2,
            Format::AggregatedV2Beta1 => CONTENT_TYPE_AGGREGATED_V2BETA1,
            Format::Legacy => CONTENT_TYPE_JSON,
        }
    }

    /// The version of `apidiscovery.k8s.io` for the aggregated formats.
    fn discovery_version(self) -> Option<&'static str> {
        match self {
            Format::AggregatedV2 => Some("v2"),
            Format::AggregatedV2Beta1 => Some("v2beta1"),
            Format::Legacy => None,
        }
    }
}

/// The media types we can answer, in our own order of preference for equal client weights.
const OFFERS: [Format; 3] = [
    Format::AggregatedV2,
    Format::AggregatedV2Beta1,
    Format::Legacy,
];

/// How specifically `range` matches `offer` (higher = more specific), if it does.
fn matches(range: &MediaRange, offer: Format) -> Option<u8> {
    let type_match = match (range.kind.as_str(), range.subtype.as_str()) {
        ("application", "json") => 2,
        ("application", "*") => 1,
        ("*", "*") => 0,
        _ => return None,
    };
    match (&range.target, offer.discovery_version()) {
        // A plain range means the plain JSON documents.
        (None, None) => Some(type_match),
        (None, Some(_)) => None,
        (Some((group, version, kind)), Some(offered)) => {
            let wanted = group.as_deref() == Some(DISCOVERY_GROUP)
                && version.as_deref() == Some(offered)
                && kind.as_deref() == Some(DISCOVERY_LIST_KIND)
                && type_match == 2;
            wanted.then_some(3)
        }
        (Some(_), None) => None,
    }
}

/// Chooses the discovery format from an `Accept` header.
///
/// The header is a comma-separated list of media ranges with `;`-separated parameters
/// (whitespace tolerated, malformed ranges ignored). Each format we serve gets the weight
/// (`q`, default 1) of the most specific range that matches it: the exact aggregated media
/// type with its `g`/`v`/`as` parameters, else `application/json`, `application/*` or `*/*`
/// (which stand for the plain JSON documents only); `q=0` means not acceptable. The
/// acceptable format with the highest weight wins, ties going to the one the client listed
/// first. Absent, empty, or nothing acceptable: [`Format::Legacy`].
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Legacy;
    };
    let ranges: Vec<MediaRange> = media_ranges(accept).collect();
    let mut best: Option<(f32, usize, Format)> = None;
    for offer in OFFERS {
        // The most specific matching range decides; among equally specific ones, the first.
        let mut decisive: Option<(u8, usize)> = None;
        for (index, range) in ranges.iter().enumerate() {
            if let Some(specificity) = matches(range, offer)
                && decisive.is_none_or(|(s, _)| specificity > s)
            {
                decisive = Some((specificity, index));
            }
        }
        let Some((_, index)) = decisive else { continue };
        let quality = ranges[index].quality;
        if quality <= 0.0 {
            continue;
        }
        if best.is_none_or(|(q, i, _)| quality > q || (quality == q && index < i)) {
            best = Some((quality, index, offer));
        }
    }
    best.map_or(Format::Legacy, |(_, _, format)| format)
}

/// The aggregated discovery document: for `/api` (`core = true`: only the core group,
/// named `""`) or `/apis` (`core = false`: every other group), as `apidiscovery.k8s.io/v2`
/// or `v2beta1` according to `format` ([`Format::Legacy`] is treated as v2).
pub fn aggregated(registry: &Registry, core: bool, format: Format) -> Value {
    let api_version = format.discovery_version().unwrap_or("v2");
    // One snapshot, already ordered by group, version (preferred first) and plural.
    type Resources = Vec<Value>;
    let mut groups: Vec<(String, Vec<(String, Resources)>)> = Vec::new();
    for rt in registry
        .all()
        .iter()
        .filter(|rt| rt.group.is_empty() == core)
    {
        if groups.last().is_none_or(|(name, _)| *name != rt.group) {
            groups.push((rt.group.clone(), Vec::new()));
        }
        let versions = &mut groups.last_mut().expect("pushed above").1;
        if versions
            .last()
            .is_none_or(|(version, _)| *version != rt.version)
        {
            versions.push((rt.version.clone(), Vec::new()));
        }
        versions
            .last_mut()
            .expect("pushed above")
            .1
            .push(resource_discovery(rt));
    }
    let items: Vec<Value> = groups
        .into_iter()
        .map(|(name, versions)| {
            let versions: Vec<Value> = versions
                .into_iter()
                .map(|(version, resources)| {
                    json!({"version": version, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({
                "metadata": {"name": name, "creationTimestamp": null},
                "versions": versions,
            })
        })
        .collect();
    json!({
        "kind": DISCOVERY_LIST_KIND,
        "apiVersion": format!("{DISCOVERY_GROUP}/{api_version}"),
        "metadata": {},
        "items": items,
    })
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

/// One `APIResourceDiscovery`.
fn resource_discovery(rt: &ResourceType) -> Value {
    let mut out = Map::new();
    out.insert("resource".into(), json!(rt.plural));
    out.insert("responseKind".into(), gvk(&rt.group, &rt.version, &rt.kind));
    out.insert(
        "scope".into(),
        json!(if rt.namespaced {
            "Namespaced"
        } else {
            "Cluster"
        }),
    );
    out.insert("singularResource".into(), json!(rt.singular));
    out.insert("verbs".into(), json!(rt.verbs));
    if !rt.short_names.is_empty() {
        out.insert("shortNames".into(), json!(rt.short_names));
    }
    if !rt.categories.is_empty() {
        out.insert("categories".into(), json!(rt.categories));
    }
    if !rt.subresources.is_empty() {
        let subresources: Vec<Value> = rt
            .subresources
            .iter()
            .map(|sub| {
                let kind = sub.response_kind(rt);
                json!({
                    "subresource": sub.name(),
                    "responseKind": gvk(&kind.group, &kind.version, &kind.kind),
                    "verbs": sub.verbs(),
                })
            })
            .collect();
        out.insert("subresources".into(), Value::Array(subresources));
    }
    Value::Object(out)
}

/// The legacy `/api` document (`APIVersions`). `server_address` is the `host:port`
/// clients reach the server at.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_version_entry(group: &str, version: &str) -> Value {
    json!({"groupVersion": format!("{group}/{version}"), "version": version})
}

/// The `APIGroup` body (without kind/apiVersion) of a named group.
fn group_body(name: &str, versions: &[String]) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("name".into(), json!(name));
    out.insert(
        "versions".into(),
        versions
            .iter()
            .map(|v| group_version_entry(name, v))
            .collect(),
    );
    if let Some(preferred) = versions.first() {
        out.insert(
            "preferredVersion".into(),
            group_version_entry(name, preferred),
        );
    }
    out
}

/// The legacy `/apis` document (`APIGroupList`): every group except the core group.
pub fn api_group_list(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .into_iter()
        .filter(|g| !g.name.is_empty())
        .map(|g| Value::Object(group_body(&g.name, &g.versions)))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// The `/apis/{group}` document (`APIGroup`); `None` for an unknown group or the core group.
pub fn api_group(registry: &Registry, group: &str) -> Option<Value> {
    if group.is_empty() {
        return None;
    }
    let found = registry.groups().into_iter().find(|g| g.name == group)?;
    let mut out = Map::new();
    out.insert("kind".into(), json!("APIGroup"));
    out.insert("apiVersion".into(), json!("v1"));
    out.extend(group_body(&found.name, &found.versions));
    Some(Value::Object(out))
}

/// The `/api/{version}` (group `""`) or `/apis/{group}/{version}` document
/// (`APIResourceList`): each resource, then one entry per subresource named
/// `{plural}/{subresource}`. `None` if the group/version serves nothing.
pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types = registry.group_version(group, version);
    if types.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for rt in &types {
        let mut entry = Map::new();
        entry.insert("name".into(), json!(rt.plural));
        entry.insert("singularName".into(), json!(rt.singular));
        entry.insert("namespaced".into(), json!(rt.namespaced));
        entry.insert("kind".into(), json!(rt.kind));
        entry.insert("verbs".into(), json!(rt.verbs));
        if !rt.short_names.is_empty() {
            entry.insert("shortNames".into(), json!(rt.short_names));
        }
        if !rt.categories.is_empty() {
            entry.insert("categories".into(), json!(rt.categories));
        }
        resources.push(Value::Object(entry));
        for sub in &rt.subresources {
            let kind = sub.response_kind(rt);
            let mut entry = Map::new();
            entry.insert(
                "name".into(),
                json!(format!("{}/{}", rt.plural, sub.name())),
            );
            entry.insert("singularName".into(), json!(""));
            entry.insert("namespaced".into(), json!(rt.namespaced));
            // group/version appear only where they differ from the list's (e.g. scale).
            if kind.group != rt.group || kind.version != rt.version {
                entry.insert("group".into(), json!(kind.group));
                entry.insert("version".into(), json!(kind.version));
            }
            entry.insert("kind".into(), json!(kind.kind));
            entry.insert("verbs".into(), json!(sub.verbs()));
            resources.push(Value::Object(entry));
        }
    }
    let mut out = Map::new();
    out.insert("kind".into(), json!("APIResourceList"));
    // Upstream omits apiVersion on the core list (/api/v1) and sets it on group lists.
    if !group.is_empty() {
        out.insert("apiVersion".into(), json!("v1"));
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    out.insert("groupVersion".into(), json!(group_version));
    out.insert("resources".into(), Value::Array(resources));
    Some(Value::Object(out))
}

/// The `/version` document (`version.Info` of the Kubernetes version implemented).
///
/// `buildDate` is taken from the `FLOTILLA_BUILD_DATE` environment variable at compile
/// time (RFC 3339), else the Unix epoch, so builds stay reproducible.
pub fn version() -> Value {
    json!({
        "major": KUBERNETES_MAJOR,
        "minor": KUBERNETES_MINOR,
        "gitVersion": GIT_VERSION,
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": option_env!("FLOTILLA_BUILD_DATE").unwrap_or("1970-01-01T00:00:00Z"),
        "goVersion": "",
        "compiler": "rustc",
        "platform": platform(),
    })
}

/// `os/arch` with Go's architecture names, as Kubernetes reports them (`linux/amd64`).
fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "x86" => "386",
        "aarch64" => "arm64",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "loongarch64" => "loong64",
        other => other,
    };
    format!("{}/{arch}", std::env::consts::OS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::{STANDARD_VERBS, Subresource};

    const KUBECTL_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
    const KUBE_RS_ACCEPT: &str =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

    fn names(value: &Value, field: &str) -> Vec<String> {
        value
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v[field].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn negotiate_what_clients_send() {
        assert_eq!(negotiate(Some(KUBECTL_ACCEPT)), Format::AggregatedV2);
        assert_eq!(negotiate(Some(KUBE_RS_ACCEPT)), Format::AggregatedV2);
        assert_eq!(negotiate(Some("application/json")), Format::Legacy);
        assert_eq!(negotiate(Some("*/*")), Format::Legacy);
        assert_eq!(negotiate(Some("application/json, */*")), Format::Legacy);
        assert_eq!(negotiate(None), Format::Legacy);
        assert_eq!(negotiate(Some("")), Format::Legacy);
        // client-go when only v2beta1 is wanted.
        assert_eq!(
            negotiate(Some(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
            )),
            Format::AggregatedV2Beta1
        );
        // Protobuf first (client-go with protobuf on): we skip to the JSON variants.
        assert_eq!(
            negotiate(Some(
                "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
            )),
            Format::AggregatedV2Beta1
        );
    }

    #[test]
    fn negotiate_honours_order_quality_and_whitespace() {
        // Client order decides among equal weights.
        assert_eq!(
            negotiate(Some(&format!("application/json, {KUBE_RS_ACCEPT}"))),
            Format::Legacy
        );
        assert_eq!(
            negotiate(Some(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList, application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
            )),
            Format::AggregatedV2Beta1
        );
        // q=0: not acceptable.
        assert_eq!(
            negotiate(Some(&format!("{KUBE_RS_ACCEPT};q=0, application/json"))),
            Format::Legacy
        );
        assert_eq!(
            negotiate(Some(
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
            )),
            Format::AggregatedV2Beta1
        );
        // A specific q=0 beats a wildcard.
        assert_eq!(
            negotiate(Some(&format!(
                "application/json;q=0, */*, {KUBE_RS_ACCEPT};q=0.1"
            ))),
            Format::AggregatedV2
        );
        // Weights beat order.
        assert_eq!(
            negotiate(Some(&format!(
                "application/json;q=0.5, {KUBE_RS_ACCEPT};q=0.9"
            ))),
            Format::AggregatedV2
        );
        assert_eq!(
            negotiate(Some(&format!("{KUBE_RS_ACCEPT};q=0.4, application/json"))),
            Format::Legacy
        );
        // Whitespace, case and quoting.
        assert_eq!(
            negotiate(Some(
                " Application/JSON ; g = apidiscovery.k8s.io ; v=\"v2\" ;as=APIGroupDiscoveryList ; q=1.0 , application/json;q=0.5"
            )),
            Format::AggregatedV2
        );
        // Nothing acceptable, or junk: legacy.
        assert_eq!(
            negotiate(Some(&format!("{KUBE_RS_ACCEPT};q=0"))),
            Format::Legacy
        );
        assert_eq!(
            negotiate(Some("text/html, application/yaml")),
            Format::Legacy
        );
        assert_eq!(negotiate(Some(",,;;garbage, /json")), Format::Legacy);
        // An invalid q value drops that range.
        assert_eq!(
            negotiate(Some(&format!(
                "application/json;q=2, {KUBE_RS_ACCEPT};q=0.3"
            ))),
            Format::AggregatedV2
        );
        // Wrong group, version or kind does not match the aggregated documents.
        assert_eq!(
            negotiate(Some(
                "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList, application/json;g=meta.k8s.io;v=v1;as=Table"
            )),
            Format::Legacy
        );
        // kubectl get's Table Accept header, if it ever reached discovery.
        assert_eq!(
            negotiate(Some(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
            )),
            Format::Legacy
        );
        // Parameter order does not matter; extra parameters are ignored.
        assert_eq!(
            negotiate(Some(
                "application/json;as=APIGroupDiscoveryList;v=v2;g=apidiscovery.k8s.io;charset=utf-8"
            )),
            Format::AggregatedV2
        );
    }

    #[test]
    fn content_types() {
        assert_eq!(
            Format::AggregatedV2.content_type(),
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        );
        assert_eq!(
            Format::AggregatedV2Beta1.content_type(),
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
        );
        assert_eq!(Format::Legacy.content_type(), "application/json");
        // Each content type we answer with negotiates back to its own format.
        for format in OFFERS {
            assert_eq!(negotiate(Some(format.content_type())), format);
        }
        assert_eq!(CONTENT_TYPES.map(|t| negotiate(Some(t))), OFFERS);
    }

    #[test]
    fn aggregated_core_has_exactly_the_core_group() {
        let registry = Registry::builtin();
        let doc = aggregated(&registry, true, Format::AggregatedV2);
        assert_eq!(doc["kind"], "APIGroupDiscoveryList");
        assert_eq!(doc["apiVersion"], "apidiscovery.k8s.io/v2");
        assert_eq!(doc["metadata"], json!({}));
        let items = doc["items"].as_array().unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(
            items[0]["metadata"],
            json!({"name": "", "creationTimestamp": null})
        );
        let versions = items[0]["versions"].as_array().unwrap();
        assert_eq!(versions.len(), 1);
        assert_eq!(versions[0]["version"], "v1");
        assert_eq!(versions[0]["freshness"], "Current");
        assert_eq!(
            names(&versions[0]["resources"], "resource"),
            [
                "configmaps",
                "endpoints",
                "events",
                "limitranges",
                "namespaces",
                "nodes",
                "persistentvolumeclaims",
                "pods",
                "resourcequotas",
                "secrets",
                "serviceaccounts",
                "services"
            ]
        );
        let namespaces = &versions[0]["resources"][4];
        assert_eq!(
            *namespaces,
            json!({
                "resource": "namespaces",
                "responseKind": {"group": "", "version": "v1", "kind": "Namespace"},
                "scope": "Cluster",
                "singularResource": "namespace",
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                "shortNames": ["ns"],
                "subresources": [{
                    "subresource": "status",
                    "responseKind": {"group": "", "version": "v1", "kind": "Namespace"},
                    "verbs": ["get", "patch", "update"],
                }],
            })
        );
        let secrets = &versions[0]["resources"][9];
        assert_eq!(
            *secrets,
            json!({
                "resource": "secrets",
                "responseKind": {"group": "", "version": "v1", "kind": "Secret"},
                "scope": "Namespaced",
                "singularResource": "secret",
                "verbs": STANDARD_VERBS,
            })
        );
        assert_eq!(versions[0]["resources"][7]["categories"], json!(["all"]));
    }

    #[test]
    fn aggregated_apis_has_every_other_group() {
        let registry = Registry::builtin();
        let doc = aggregated(&registry, false, Format::AggregatedV2);
        let items = doc["items"].as_array().unwrap();
        let groups: Vec<&str> = items
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            groups,
            [
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
                "rbac.authorization.k8s.io"
            ]
        );
        let total: usize = items
            .iter()
            .flat_map(|i| i["versions"].as_array().unwrap())
            .map(|v| v["resources"].as_array().unwrap().len())
            .sum();
        assert_eq!(
            total,
            registry
                .all()
                .iter()
                .filter(|t| !t.group.is_empty())
                .count()
        );

        let apps = items
            .iter()
            .find(|i| i["metadata"]["name"] == "apps")
            .unwrap();
        assert_eq!(
            apps["versions"][0]["resources"][1],
            json!({
                "resource": "deployments",
                "responseKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                "scope": "Namespaced",
                "singularResource": "deployment",
                "verbs": STANDARD_VERBS,
                "shortNames": ["deploy"],
                "categories": ["all"],
                "subresources": [
                    {
                        "subresource": "status",
                        "responseKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                        "verbs": ["get", "patch", "update"],
                    },
                    {
                        "subresource": "scale",
                        "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                        "verbs": ["get", "patch", "update"],
                    },
                ],
            })
        );
        let autoscaling = items
            .iter()
            .find(|i| i["metadata"]["name"] == "autoscaling")
            .unwrap();
        assert_eq!(autoscaling["versions"][0]["version"], "v2");
        let crds = &items[1]["versions"][0]["resources"][0];
        assert_eq!(crds["scope"], "Cluster");
        assert_eq!(crds["shortNames"], json!(["crd", "crds"]));
    }

    #[test]
    fn aggregated_follows_the_negotiated_version() {
        let registry = Registry::builtin();
        let v2 = aggregated(&registry, false, Format::AggregatedV2);
        let v2beta1 = aggregated(&registry, false, Format::AggregatedV2Beta1);
        assert_eq!(v2beta1["apiVersion"], "apidiscovery.k8s.io/v2beta1");
        assert_eq!(v2["items"], v2beta1["items"]);
        assert_eq!(
            aggregated(&registry, true, Format::Legacy)["apiVersion"],
            "apidiscovery.k8s.io/v2"
        );
    }

    #[test]
    fn aggregated_uses_only_upstream_field_names() {
        // Field names of apidiscovery.k8s.io/v2 APIGroupDiscoveryList and its parts.
        let registry = Registry::builtin();
        for core in [true, false] {
            let doc = aggregated(&registry, core, Format::AggregatedV2);
            let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
            let within = |v: &Value, allowed: &[&str], required: &[&str]| {
                let k = keys(v);
                assert!(k.iter().all(|k| allowed.contains(&k.as_str())), "{k:?}");
                assert!(
                    required.iter().all(|r| k.iter().any(|k| k == r)),
                    "{k:?} lacks one of {required:?}"
                );
            };
            within(
                &doc,
                &["kind", "apiVersion", "metadata", "items"],
                &["kind", "apiVersion", "metadata", "items"],
            );
            for item in doc["items"].as_array().unwrap() {
                within(item, &["metadata", "versions"], &["metadata", "versions"]);
                for version in item["versions"].as_array().unwrap() {
                    within(
                        version,
                        &["version", "resources", "freshness"],
                        &["version", "resources", "freshness"],
                    );
                    for resource in version["resources"].as_array().unwrap() {
                        within(
                            resource,
                            &[
                                "resource",
                                "responseKind",
                                "scope",
                                "singularResource",
                                "verbs",
                                "shortNames",
                                "categories",
                                "subresources",
                            ],
                            &[
                                "resource",
                                "responseKind",
                                "scope",
                                "singularResource",
                                "verbs",
                            ],
                        );
                        within(
                            &resource["responseKind"],
                            &["group", "version", "kind"],
                            &["group", "version", "kind"],
                        );
                        for sub in resource["subresources"].as_array().into_iter().flatten() {
                            within(
                                sub,
                                &["subresource", "responseKind", "acceptedTypes", "verbs"],
                                &["subresource", "responseKind", "verbs"],
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn aggregated_changes_with_the_registry() {
        let registry = Registry::builtin();
        let mut widget = ResourceType::new("example.com", "v1", "Widget", "widgets", false);
        widget.short_names = vec!["wd".into()];
        widget.categories = vec!["all".into()];
        widget.subresources = vec![Subresource::Status];
        registry.add(widget).unwrap();
        registry
            .add(ResourceType::new(
                "example.com",
                "v1beta1",
                "Widget",
                "widgets",
                false,
            ))
            .unwrap();
        let doc = aggregated(&registry, false, Format::AggregatedV2);
        let example = doc["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["metadata"]["name"] == "example.com")
            .unwrap();
        assert_eq!(names(&example["versions"], "version"), ["v1", "v1beta1"]);
        assert_eq!(
            example["versions"][0]["resources"],
            json!([{
                "resource": "widgets",
                "responseKind": {"group": "example.com", "version": "v1", "kind": "Widget"},
                "scope": "Cluster",
                "singularResource": "widget",
                "verbs": STANDARD_VERBS,
                "shortNames": ["wd"],
                "categories": ["all"],
                "subresources": [{
                    "subresource": "status",
                    "responseKind": {"group": "example.com", "version": "v1", "kind": "Widget"},
                    "verbs": ["get", "patch", "update"],
                }],
            }])
        );
        registry.remove("example.com", "v1", "widgets");
        registry.remove("example.com", "v1beta1", "widgets");
        assert_eq!(
            aggregated(&registry, false, Format::AggregatedV2),
            aggregated(&Registry::builtin(), false, Format::AggregatedV2)
        );
    }

    #[test]
    fn legacy_api_versions() {
        assert_eq!(
            api_versions("10.0.0.1:6443"),
            json!({
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.1:6443"}],
            })
        );
    }

    #[test]
    fn legacy_api_group_list() {
        let registry = Registry::builtin();
        let doc = api_group_list(&registry);
        assert_eq!(doc["kind"], "APIGroupList");
        assert_eq!(doc["apiVersion"], "v1");
        let groups = doc["groups"].as_array().unwrap();
        assert_eq!(groups.len(), 14);
        assert!(groups.iter().all(|g| g["name"] != ""));
        assert_eq!(
            groups[2],
            json!({
                "name": "apps",
                "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"},
            })
        );
        registry
            .add(ResourceType::new(
                "apps",
                "v1beta2",
                "Deployment",
                "deployments",
                true,
            ))
            .unwrap();
        assert_eq!(
            api_group_list(&registry)["groups"][2],
            json!({
                "name": "apps",
                "versions": [
                    {"groupVersion": "apps/v1", "version": "v1"},
                    {"groupVersion": "apps/v1beta2", "version": "v1beta2"},
                ],
                "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"},
            })
        );
    }

    #[test]
    fn legacy_api_group() {
        let registry = Registry::builtin();
        assert_eq!(
            api_group(&registry, "autoscaling"),
            Some(json!({
                "kind": "APIGroup",
                "apiVersion": "v1",
                "name": "autoscaling",
                "versions": [{"groupVersion": "autoscaling/v2", "version": "v2"}],
                "preferredVersion": {"groupVersion": "autoscaling/v2", "version": "v2"},
            }))
        );
        assert_eq!(api_group(&registry, ""), None);
        assert_eq!(api_group(&registry, "example.com"), None);
    }

    #[test]
    fn legacy_resource_list_core() {
        let registry = Registry::builtin();
        let doc = resource_list(&registry, "", "v1").unwrap();
        assert_eq!(doc["kind"], "APIResourceList");
        assert!(doc.get("apiVersion").is_none());
        assert_eq!(doc["groupVersion"], "v1");
        assert_eq!(
            names(&doc["resources"], "name"),
            [
                "configmaps",
                "endpoints",
                "events",
                "limitranges",
                "namespaces",
                "namespaces/status",
                "nodes",
                "nodes/status",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "pods/status",
                "resourcequotas",
                "resourcequotas/status",
                "secrets",
                "serviceaccounts",
                "serviceaccounts/token",
                "services",
                "services/status"
            ]
        );
        assert_eq!(
            doc["resources"][10],
            json!({
                "name": "pods",
                "singularName": "pod",
                "namespaced": true,
                "kind": "Pod",
                "verbs": STANDARD_VERBS,
                "shortNames": ["po"],
                "categories": ["all"],
            })
        );
        assert_eq!(
            doc["resources"][5],
            json!({
                "name": "namespaces/status",
                "singularName": "",
                "namespaced": false,
                "kind": "Namespace",
                "verbs": ["get", "patch", "update"],
            })
        );
        assert_eq!(
            doc["resources"][14],
            json!({"name": "secrets", "singularName": "secret", "namespaced": true, "kind": "Secret", "verbs": STANDARD_VERBS})
        );
        assert_eq!(resource_list(&registry, "", "v2"), None);
    }

    #[test]
    fn legacy_resource_list_group() {
        let registry = Registry::builtin();
        let doc = resource_list(&registry, "apps", "v1").unwrap();
        assert_eq!(doc["kind"], "APIResourceList");
        assert_eq!(doc["apiVersion"], "v1");
        assert_eq!(doc["groupVersion"], "apps/v1");
        assert_eq!(
            names(&doc["resources"], "name"),
            [
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/status",
                "deployments/scale",
                "replicasets",
                "replicasets/status",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/status",
                "statefulsets/scale"
            ]
        );
        assert_eq!(
            doc["resources"][4],
            json!({
                "name": "deployments/scale",
                "singularName": "",
                "namespaced": true,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            })
        );
        assert_eq!(
            doc["resources"][3],
            json!({
                "name": "deployments/status",
                "singularName": "",
                "namespaced": true,
                "kind": "Deployment",
                "verbs": ["get", "patch", "update"],
            })
        );
        let crds = resource_list(&registry, "apiextensions.k8s.io", "v1").unwrap();
        assert_eq!(
            crds["resources"][0],
            json!({
                "name": "customresourcedefinitions",
                "singularName": "customresourcedefinition",
                "namespaced": false,
                "kind": "CustomResourceDefinition",
                "verbs": STANDARD_VERBS,
                "shortNames": ["crd", "crds"],
                "categories": ["api-extensions"],
            })
        );
        assert_eq!(resource_list(&registry, "apps", "v1beta1"), None);
        assert_eq!(resource_list(&registry, "example.com", "v1"), None);
        assert_eq!(resource_list(&registry, "autoscaling", "v1"), None);
    }

    #[test]
    fn version_document() {
        let doc = version();
        let keys: Vec<&str> = doc
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            [
                "buildDate",
                "compiler",
                "gitCommit",
                "gitTreeState",
                "gitVersion",
                "goVersion",
                "major",
                "minor",
                "platform"
            ]
        );
        assert_eq!(doc["major"], "1");
        assert_eq!(doc["minor"], "32");
        assert_eq!(doc["gitVersion"], "v1.32.0-flotilla");
        assert_eq!(doc["gitTreeState"], "clean");
        assert_eq!(doc["compiler"], "rustc");
        let platform = doc["platform"].as_str().unwrap();
        assert!(
            platform.starts_with(&format!("{}/", std::env::consts::OS)),
            "{platform}"
        );
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        assert_eq!(platform, "linux/amd64");
        #[cfg(all(target_os = "linux", target_arch = "aarch64"))]
        assert_eq!(platform, "linux/arm64");
        let build_date = doc["buildDate"].as_str().unwrap();
        assert!(
            build_date.ends_with('Z') && build_date.contains('T'),
            "{build_date}"
        );
    }
}

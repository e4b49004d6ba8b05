//! A member's health facts: its Kubernetes version, the capacity its Nodes offer and
//! its `about.k8s.io` ClusterProperties.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flotilla_api::quantity::Amount;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::Resource;
use kube::api::{Api, DynamicObject, ListParams, ObjectList};
use kube::discovery::ApiResource;
use serde::de::DeserializeOwned;
use tracing::{Instrument, info_span, warn};

use crate::{Error, Member};

/// What [`Member::probe`] found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Health {
    /// The member's Kubernetes version (`GET /version`'s `gitVersion`, like `v1.33.1`).
    pub kubernetes_version: String,
    /// The sum of its Nodes' `status.allocatable`, per resource (`cpu`, `memory`,
    /// `pods`, ...), exact.
    pub allocatable: BTreeMap<String, Quantity>,
    /// Its ClusterProperties (`about.k8s.io/v1alpha1`): name → `spec.value`; empty when
    /// that API is not served.
    pub properties: BTreeMap<String, String>,
}

/// The page size of the lists a probe makes.
const PAGE: u32 = 500;

/// A member's capacity and properties as last listed, shared by a member's clones.
#[derive(Clone, Default)]
pub(crate) struct Facts(Arc<Mutex<Option<Listed>>>);

/// What a probe listed, and when.
#[derive(Clone)]
struct Listed {
    at: Instant,
    allocatable: BTreeMap<String, Quantity>,
    properties: BTreeMap<String, String>,
}

impl Facts {
    fn fresh(&self, max_age: Duration) -> Option<Listed> {
        let listed = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        (listed.at.elapsed() < max_age).then_some(listed)
    }

    fn keep(&self, listed: Listed) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(listed);
    }
}

impl Member {
    /// `GET /version`, and the Nodes and ClusterProperties unless they were listed less
    /// than `facts_max_age` ago.
    pub(crate) async fn probe_health(&self, facts_max_age: Duration) -> Result<Health, Error> {
        async {
            let version = self
                .client
                .apiserver_version()
                .await
                .map_err(|e| Error::request("GET /version", e))?;
            let listed = match self.facts.fresh(facts_max_age) {
                Some(listed) => listed,
                None => {
                    let listed = self.list_facts().await?;
                    self.facts.keep(listed.clone());
                    listed
                }
            };
            Ok(Health {
                kubernetes_version: version.git_version,
                allocatable: listed.allocatable,
                properties: listed.properties,
            })
        }
        .instrument(info_span!("probe"))
        .await
    }

    /// The sum of the Nodes' allocatable resources and the ClusterProperties, now.
    async fn list_facts(&self) -> Result<Listed, Error> {
        let at = Instant::now();
        let nodes: Api<Node> = Api::all(self.client.clone());
        let mut sums: BTreeMap<String, Amount> = BTreeMap::new();
        for node in list_all(&nodes).await? {
            let name = node.metadata.name.unwrap_or_default();
            let allocatable = node.status.and_then(|s| s.allocatable).unwrap_or_default();
            for (resource, Quantity(text)) in allocatable {
                let Some(amount) = Amount::parse(&text) else {
                    warn!(node = %name, %resource, quantity = %text, "not a quantity: left out");
                    continue;
                };
                let sum = sums
                    .entry(resource.clone())
                    .or_insert_with(|| Amount::zero(amount.is_binary()));
                match sum.checked_add(amount) {
                    Some(total) => *sum = total,
                    None => warn!(node = %name, %resource, "sum too large: left out"),
                }
            }
        }
        let properties: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &cluster_property());
        let properties = list_all(&properties)
            .await?
            .into_iter()
            .filter_map(|p| {
                let value = p.data["spec"]["value"].as_str()?.to_owned();
                Some((p.metadata.name?, value))
            })
            .collect();
        Ok(Listed {
            at,
            allocatable: sums
                .into_iter()
                .map(|(resource, sum)| (resource, Quantity(sum.to_string())))
                .collect(),
            properties,
        })
    }
}

/// `about.k8s.io/v1alpha1` ClusterProperty (KEP-2149), cluster-scoped.
fn cluster_property() -> ApiResource {
    ApiResource {
        group: "about.k8s.io".into(),
        version: "v1alpha1".into(),
        api_version: "about.k8s.io/v1alpha1".into(),
        kind: "ClusterProperty".into(),
        plural: "clusterproperties".into(),
    }
}

/// Every object, page by page; none when the member does not serve the resource.
async fn list_all<K>(api: &Api<K>) -> Result<Vec<K>, Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut params = ListParams::default().limit(PAGE);
    let mut all = Vec::new();
    loop {
        let page: ObjectList<K> = match api.list(&params).await {
            Ok(page) => page,
            Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(all),
            Err(e) => return Err(Error::request(format!("list {}", api.resource_url()), e)),
        };
        all.extend(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(all),
        }
    }
}

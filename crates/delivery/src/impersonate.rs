//! Acting on the member as one of its service accounts (`ApplyPolicy::service_account_name`),
//! so the member's RBAC, not delivery's own identity, decides what a placement may create.
//!
//! ```text
//!  serviceAccountName  NAME            ─► NS = the placement's namespace (Placement only)
//!                      NAMESPACE/NAME  ─► NS = NAMESPACE
//!  every request about the placement's objects (GET, apply, delete, orphan patch):
//!     Impersonate-User:  system:serviceaccount:NS:NAME
//!     Impersonate-Group: system:serviceaccounts, system:serviceaccounts:NS,
//!                        system:authenticated
//!  discovery and the change watches stay delivery's own (they name no object)
//! ```
//!
//! The member checks that delivery's identity may `impersonate` that user and those
//! groups (`flotilla agent print-rbac` prints such a role), then authorizes the request as
//! the service account: a refusal is the manifest's `Forbidden` status, with the member's
//! message.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use http::{HeaderName, HeaderValue};

use crate::Provenance;

/// The header naming the user acted as.
const USER: HeaderName = HeaderName::from_static("impersonate-user");
/// The header naming a group acted in (one per group).
const GROUP: HeaderName = HeaderName::from_static("impersonate-group");

/// A member's service account: namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServiceAccount {
    /// Its namespace on the member.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl ServiceAccount {
    /// The service account `spec` (`NAME` or `NAMESPACE/NAME`) names for the placement of
    /// `provenance` (`namespace/name` for a Placement, `name` for a ClusterPlacement): a
    /// bare name lives in the placement's namespace. Why not, when it names none.
    pub fn resolve(spec: &str, provenance: &Provenance) -> Result<Self, String> {
        let (namespace, name) = match spec.split_once('/') {
            Some((namespace, name)) => (namespace, name),
            None => match provenance.placement.split_once('/') {
                Some((namespace, _)) => (namespace, spec),
                None => {
                    return Err(format!(
                        "serviceAccountName {spec:?} names no namespace, and ClusterPlacement {} has none: write NAMESPACE/NAME",
                        provenance.placement
                    ));
                }
            },
        };
        if namespace.is_empty() || name.is_empty() || name.contains('/') {
            return Err(format!(
                "serviceAccountName {spec:?} is neither NAME nor NAMESPACE/NAME"
            ));
        }
        Ok(ServiceAccount {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The user name the member knows it by: `system:serviceaccount:NS:NAME`.
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }

    /// The groups a service account's requests carry: all service accounts', those of
    /// its namespace, and every authenticated user's.
    pub fn groups(&self) -> [String; 3] {
        [
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{}", self.namespace),
            "system:authenticated".to_owned(),
        ]
    }
}

/// Clients acting as service accounts, made once per account and shared by a member's
/// clones.
#[derive(Clone, Default)]
pub(crate) struct Impersonating {
    clients: Arc<Mutex<HashMap<ServiceAccount, kube::Client>>>,
}

impl Impersonating {
    /// A client that sends `own`'s requests as `account`.
    pub(crate) fn client(&self, own: &kube::Client, account: &ServiceAccount) -> kube::Client {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        clients
            .entry(account.clone())
            .or_insert_with(|| acting_as(own, account))
            .clone()
    }
}

/// `own`, with the impersonation headers of `account` added to every request.
fn acting_as(own: &kube::Client, account: &ServiceAccount) -> kube::Client {
    let mut headers = vec![(USER, value(&account.user()))];
    headers.extend(account.groups().iter().map(|g| (GROUP, value(g))));
    let headers = Arc::new(headers);
    let inner = own.clone();
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let inner = inner.clone();
        let headers = headers.clone();
        async move {
            for (name, value) in headers.iter() {
                request.headers_mut().append(name.clone(), value.clone());
            }
            inner.send(request).await
        }
    });
    kube::Client::new(service, own.default_namespace())
}

/// A header value of a user or group name: names are DNS labels and subdomains (the API
/// validates them), so they are always valid header text.
fn value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provenance(placement: &str) -> Provenance {
        Provenance {
            hub: "hub".into(),
            placement: placement.into(),
            work: "w".into(),
        }
    }

    #[test]
    fn a_bare_name_lives_in_the_placements_namespace() {
        let sa = ServiceAccount::resolve("deployer", &provenance("shop/web")).unwrap();
        assert_eq!(sa.user(), "system:serviceaccount:shop:deployer");
        assert_eq!(
            sa.groups(),
            [
                "system:serviceaccounts",
                "system:serviceaccounts:shop",
                "system:authenticated"
            ]
        );
        let sa = ServiceAccount::resolve("ops/deployer", &provenance("shop/web")).unwrap();
        assert_eq!(sa.user(), "system:serviceaccount:ops:deployer");
        let sa = ServiceAccount::resolve("ops/deployer", &provenance("global")).unwrap();
        assert_eq!(sa.namespace, "ops");
    }

    #[test]
    fn a_cluster_placement_names_the_namespace() {
        let why = ServiceAccount::resolve("deployer", &provenance("global")).unwrap_err();
        assert!(why.contains("NAMESPACE/NAME"), "{why}");
        for bad in ["/x", "x/", "a/b/c"] {
            assert!(
                ServiceAccount::resolve(bad, &provenance("shop/web")).is_err(),
                "{bad}"
            );
        }
    }
}

//! Validating and mutating webhook configurations: defaulted and validated as they are
//! written (a malformed URL or caBundle is a 422, as is a configuration that does not
//! speak AdmissionReview v1), compiled once per change: rules, selectors, match
//! conditions, and one pooled HTTPS client per trust setup of the configuration.
//!
//! ```text
//!  write ─► default (failurePolicy Fail, matchPolicy Equivalent, selectors {}, scope *,
//!           timeoutSeconds 10, reinvocationPolicy Never, service port 443)
//!        ─► validate (names, rules, selectors, sideEffects, timeout 1–30, v1 reviews,
//!           clientConfig: an https URL or a service, caBundle PEM certificates)
//!  store watch ─► Configuration::compile ─► Webhook per entry (endpoint: URI + client)
//! ```
//!
//! A `service` reference is called at `https://NAME.NAMESPACE.svc:PORT/PATH`: the hub runs
//! no Services, so the address it connects to comes from `flotilla hub --webhook-service
//! NAMESPACE/NAME=HOST[:PORT]` ([`ServiceAddresses`]); the server's certificate must be
//! valid for `NAME.NAMESPACE.svc` as in Kubernetes. A service with no address is a failure
//! to call the webhook, under its failurePolicy.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use super::client::{Client, Endpoint, Trust};
use crate::admission::cel::Declarations;
use crate::admission::cel::Expression;
use crate::admission::matching::Criteria;
use crate::admission::policy::model::{Compiled, FailurePolicy};
use crate::admission::validation::{
    Causes, check_enum, check_match_conditions, check_rule, check_selector, default_field,
    is_subdomain, items, text,
};
use crate::http::error::Cause;

/// The addresses `service` references are reached at: `namespace/name` → `host[:port]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceAddresses(HashMap<String, String>);

impl ServiceAddresses {
    /// No service reachable.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses `NAMESPACE/NAME=HOST[:PORT]` and adds it.
    pub fn add(&mut self, mapping: &str) -> Result<(), String> {
        let bad = |why: &str| {
            format!(
                "invalid webhook service {mapping:?}: {why}; expected NAMESPACE/NAME=HOST[:PORT]"
            )
        };
        let (service, address) = mapping.split_once('=').ok_or_else(|| bad("no '='"))?;
        let (namespace, name) = service
            .split_once('/')
            .ok_or_else(|| bad("the service is NAMESPACE/NAME"))?;
        if namespace.is_empty() || name.is_empty() || name.contains('/') {
            return Err(bad("the service is NAMESPACE/NAME"));
        }
        if address.is_empty() || address.contains(['/', '?', '#', '@']) {
            return Err(bad("the address is HOST or HOST:PORT"));
        }
        self.0.insert(service.to_owned(), address.to_owned());
        Ok(())
    }

    /// The address of service `namespace/name`, if it has one.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&str> {
        self.0
            .get(&format!("{namespace}/{name}"))
            .map(String::as_str)
    }
}

/// What a webhook does when it is asked about a dry run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SideEffects {
    /// None: it may be called for dry runs.
    None,
    /// Only when not a dry run: it may be called for dry runs (it is told).
    NoneOnDryRun,
    /// Some or Unknown (written before v1): a dry run it matches is refused.
    Some,
}

/// One webhook of a configuration, compiled.
pub(crate) struct Webhook {
    pub(crate) configuration: String,
    pub(crate) name: String,
    pub(crate) criteria: Result<Criteria, String>,
    pub(crate) failure_policy: FailurePolicy,
    pub(crate) side_effects: SideEffects,
    pub(crate) timeout: Duration,
    /// `reinvocationPolicy: IfNeeded`.
    pub(crate) reinvoke: bool,
    pub(crate) match_conditions: Vec<(String, Compiled)>,
    /// Where it is called, or why it cannot be.
    pub(crate) endpoint: Result<Endpoint, String>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("configuration", &self.configuration)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The CEL a webhook's match conditions may use.
pub(crate) const DECLARED: Declarations<'static> = Declarations {
    params: false,
    namespace_object: false,
    authorizer: true,
    variables: None,
};

/// Compiles a stored configuration's webhooks; one client per trust setup (the same
/// caBundle and server name share a connection pool).
pub(crate) fn compile(object: &Value, services: &ServiceAddresses) -> Vec<Arc<Webhook>> {
    let configuration = text(&object["metadata"]["name"]).to_owned();
    let mut clients: HashMap<Trust, Client> = HashMap::new();
    items(&object["webhooks"])
        .iter()
        .map(|hook| {
            let match_conditions = items(&hook["matchConditions"])
                .iter()
                .map(|c| {
                    let compiled = Expression::compile(text(&c["expression"]), DECLARED)
                        .map_err(|e| format!("compilation error: {e}"));
                    (text(&c["name"]).to_owned(), compiled)
                })
                .collect();
            let timeout = hook["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30);
            let side_effects = match hook["sideEffects"].as_str() {
                Some("None") => SideEffects::None,
                Some("NoneOnDryRun") => SideEffects::NoneOnDryRun,
                _ => SideEffects::Some,
            };
            let endpoint = endpoint(&hook["clientConfig"], services, &mut clients, timeout);
            Arc::new(Webhook {
                configuration: configuration.clone(),
                name: text(&hook["name"]).to_owned(),
                criteria: Criteria::parse(hook, "rules"),
                failure_policy: FailurePolicy::parse(&hook["failurePolicy"]),
                side_effects,
                timeout: Duration::from_secs(timeout),
                reinvoke: hook["reinvocationPolicy"] == "IfNeeded",
                match_conditions,
                endpoint,
            })
        })
        .collect()
}

/// The endpoint of a `clientConfig`: its URI (with `?timeout=Ns`, as Kubernetes tells the
/// webhook) and a client trusting its caBundle (else the system's roots).
fn endpoint(
    config: &Value,
    services: &ServiceAddresses,
    clients: &mut HashMap<Trust, Client>,
    timeout: u64,
) -> Result<Endpoint, String> {
    let ca = match config["caBundle"].as_str() {
        Some(bundle) if !bundle.is_empty() => Some(ca_bundle(bundle)?),
        _ => None,
    };
    let (url, connect, server_name) = match config["url"].as_str() {
        Some(url) => (url.to_owned(), url.to_owned(), None),
        None => {
            let service = &config["service"];
            let (namespace, name) = (text(&service["namespace"]), text(&service["name"]));
            let port = service["port"].as_u64().unwrap_or(443);
            let path = service["path"].as_str().unwrap_or("/");
            let host = format!("{name}.{namespace}.svc");
            let url = format!("https://{host}:{port}{path}");
            let address = services.get(namespace, name).ok_or_else(|| {
                format!(
                    "service \"{namespace}/{name}\" has no address: the hub runs no Services \
                     (give one with flotilla hub --webhook-service {namespace}/{name}=HOST:PORT)"
                )
            })?;
            let address = match address.contains(':') && !address.ends_with(']') {
                true => address.to_owned(),
                false => format!("{address}:{port}"),
            };
            (url, format!("https://{address}{path}"), Some(host))
        }
    };
    let separator = if connect.contains('?') { '&' } else { '?' };
    let uri: hyper::Uri = format!("{connect}{separator}timeout={timeout}s")
        .parse()
        .map_err(|e| format!("invalid URL {url:?}: {e}"))?;
    let trust = Trust { ca, server_name };
    let client = match clients.get(&trust) {
        Some(client) => client.clone(),
        None => {
            let client = Client::new(&trust)?;
            clients.insert(trust, client.clone());
            client
        }
    };
    Ok(Endpoint {
        url: format!("{url}{separator}timeout={timeout}s"),
        uri,
        client,
    })
}

/// The certificates of a caBundle (base64 of PEM), or why it is not one.
pub(crate) fn ca_bundle(bundle: &str) -> Result<Vec<Vec<u8>>, String> {
    let pem = base64::engine::general_purpose::STANDARD
        .decode(bundle.trim())
        .map_err(|e| format!("caBundle is not base64: {e}"))?;
    let mut reader = std::io::BufReader::new(pem.as_slice());
    let mut certificates = Vec::new();
    for item in rustls_pemfile::certs(&mut reader) {
        let der = item.map_err(|e| format!("caBundle holds an unreadable PEM block: {e}"))?;
        certificates.push(der.to_vec());
    }
    if certificates.is_empty() {
        return Err("caBundle holds no PEM certificate".into());
    }
    for der in &certificates {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls::pki_types::CertificateDer::from(der.as_slice()))
            .map_err(|e| format!("caBundle holds a certificate that cannot be used: {e}"))?;
    }
    Ok(certificates)
}

/// Fills what the API defaults on a configuration's webhooks.
pub(crate) fn default(object: &mut Value, mutating: bool) {
    let Some(webhooks) = object["webhooks"].as_array_mut() else {
        return;
    };
    for hook in webhooks {
        if !hook.is_object() {
            continue;
        }
        default_field(hook, "failurePolicy", json!("Fail"));
        default_field(hook, "matchPolicy", json!("Equivalent"));
        default_field(hook, "namespaceSelector", json!({}));
        default_field(hook, "objectSelector", json!({}));
        default_field(hook, "timeoutSeconds", json!(10));
        if mutating {
            default_field(hook, "reinvocationPolicy", json!("Never"));
        }
        if let Some(rules) = hook["rules"].as_array_mut() {
            for rule in rules {
                default_field(rule, "scope", json!("*"));
            }
        }
        let service = &mut hook["clientConfig"]["service"];
        if service.is_object() {
            default_field(service, "port", json!(443));
        }
    }
}

/// Why a configuration cannot be stored, as 422 causes. `old`: the stored configuration
/// on an update (a side-effect class written before v1 may be kept).
pub(crate) fn validate(object: &Value, old: Option<&Value>, mutating: bool) -> Vec<Cause> {
    let mut causes = Causes::default();
    let mut names: Vec<&str> = Vec::new();
    let old_side_effects_kept = old.is_some_and(|old| {
        items(&old["webhooks"])
            .iter()
            .any(|h| matches!(h["sideEffects"].as_str(), Some("Some" | "Unknown")))
    });
    for (i, hook) in items(&object["webhooks"]).iter().enumerate() {
        let at = format!("webhooks[{i}]");
        let name = text(&hook["name"]);
        if name.is_empty() {
            causes.required(&format!("{at}.name"), "");
        } else if !is_subdomain(name) || name.split('.').count() < 3 {
            causes.invalid(
                &format!("{at}.name"),
                &hook["name"],
                "should be a domain with at least three segments separated by dots",
            );
        } else if names.contains(&name) {
            causes.duplicate(&format!("{at}.name"), &hook["name"]);
        }
        names.push(name);
        for (j, rule) in items(&hook["rules"]).iter().enumerate() {
            check_rule(&mut causes, &format!("{at}.rules[{j}]"), rule, false);
        }
        check_enum(
            &mut causes,
            &format!("{at}.failurePolicy"),
            &hook["failurePolicy"],
            &["Fail", "Ignore"],
        );
        check_enum(
            &mut causes,
            &format!("{at}.matchPolicy"),
            &hook["matchPolicy"],
            &["Exact", "Equivalent"],
        );
        check_selector(
            &mut causes,
            &format!("{at}.namespaceSelector"),
            &hook["namespaceSelector"],
        );
        check_selector(
            &mut causes,
            &format!("{at}.objectSelector"),
            &hook["objectSelector"],
        );
        let side_effects = &hook["sideEffects"];
        if side_effects.is_null() {
            causes.required(
                &format!("{at}.sideEffects"),
                "must specify one of None, NoneOnDryRun",
            );
        } else if old_side_effects_kept {
            check_enum(
                &mut causes,
                &format!("{at}.sideEffects"),
                side_effects,
                &["None", "NoneOnDryRun", "Some", "Unknown"],
            );
        } else {
            check_enum(
                &mut causes,
                &format!("{at}.sideEffects"),
                side_effects,
                &["None", "NoneOnDryRun"],
            );
        }
        if let Some(timeout) = hook.get("timeoutSeconds").filter(|t| !t.is_null())
            && !timeout.as_i64().is_some_and(|t| (1..=30).contains(&t))
        {
            causes.invalid(
                &format!("{at}.timeoutSeconds"),
                timeout,
                "the timeout value must be between 1 and 30 seconds",
            );
        }
        let versions = items(&hook["admissionReviewVersions"]);
        if versions.is_empty() {
            causes.required(
                &format!("{at}.admissionReviewVersions"),
                "must specify one of v1",
            );
        } else if !versions.iter().any(|v| v == "v1") {
            causes.invalid(
                &format!("{at}.admissionReviewVersions"),
                &hook["admissionReviewVersions"],
                "must include at least one of v1",
            );
        }
        if mutating {
            check_enum(
                &mut causes,
                &format!("{at}.reinvocationPolicy"),
                &hook["reinvocationPolicy"],
                &["Never", "IfNeeded"],
            );
        } else if !hook["reinvocationPolicy"].is_null() {
            causes.forbidden(
                &format!("{at}.reinvocationPolicy"),
                "not allowed on a validating webhook",
            );
        }
        check_client_config(
            &mut causes,
            &format!("{at}.clientConfig"),
            &hook["clientConfig"],
        );
        check_match_conditions(
            &mut causes,
            &format!("{at}.matchConditions"),
            &hook["matchConditions"],
            DECLARED,
        );
    }
    causes.0
}

fn check_client_config(causes: &mut Causes, at: &str, config: &Value) {
    if let Some(bundle) = config["caBundle"].as_str()
        && !bundle.is_empty()
        && let Err(e) = ca_bundle(bundle)
    {
        causes.invalid(&format!("{at}.caBundle"), &json!("<bytes>"), &e);
    }
    let url = &config["url"];
    let service = &config["service"];
    match (url.is_null(), service.is_null()) {
        (false, false) => causes.required(at, "exactly one of url or service is required"),
        (true, true) => causes.required(at, "exactly one of url or service is required"),
        (false, true) => {
            if let Err(why) = check_url(text(url)) {
                causes.invalid(&format!("{at}.url"), url, &why);
            }
        }
        (true, false) => {
            if text(&service["namespace"]).is_empty() {
                causes.required(
                    &format!("{at}.service.namespace"),
                    "service namespace is required",
                );
            }
            if text(&service["name"]).is_empty() {
                causes.required(&format!("{at}.service.name"), "service name is required");
            }
            if let Some(port) = service.get("port").filter(|p| !p.is_null())
                && !port.as_i64().is_some_and(|p| (1..=65535).contains(&p))
            {
                causes.invalid(
                    &format!("{at}.service.port"),
                    port,
                    "port is not valid: must be between 1 and 65535, inclusive",
                );
            }
            if let Some(path) = service["path"].as_str()
                && (!path.starts_with('/') || path.contains(['?', '#']) || path.contains("//"))
            {
                causes.invalid(
                    &format!("{at}.service.path"),
                    &service["path"],
                    "must be an absolute path starting with '/', without a query or fragment",
                );
            }
        }
    }
}

/// Whether `url` is what a webhook may be called at: `https://HOST[:PORT][/PATH]`, no user
/// information, query or fragment.
fn check_url(url: &str) -> Result<(), String> {
    if url
        .split_once("://")
        .is_none_or(|(scheme, _)| scheme != "https")
    {
        return Err("'https' is the only allowed URL scheme".into());
    }
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| format!("host must be specified: {e}"))?;
    let Some(authority) = uri.authority() else {
        return Err("host must be specified".into());
    };
    if authority.as_str().contains('@') {
        return Err("user information is not permitted in the URL".into());
    }
    if authority.host().is_empty() {
        return Err("host must be specified".into());
    }
    if url.contains('#') {
        return Err("fragments are not permitted in the URL".into());
    }
    if uri.query().is_some() {
        return Err("query parameters are not permitted in the URL".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configuration(hook: Value) -> Value {
        json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "deny"},
            "webhooks": [hook]})
    }

    fn hook() -> Value {
        json!({"name": "deny.example.com", "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:8443/validate"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                "resources": ["configmaps"]}]})
    }

    fn fields(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{} {}", c.field, c.reason))
            .collect()
    }

    #[test]
    fn a_configuration_is_defaulted_and_validated() {
        let mut valid = configuration(hook());
        default(&mut valid, false);
        let hook = &valid["webhooks"][0];
        assert_eq!(
            (
                &hook["failurePolicy"],
                &hook["matchPolicy"],
                &hook["timeoutSeconds"]
            ),
            (&json!("Fail"), &json!("Equivalent"), &json!(10))
        );
        assert_eq!(hook["rules"][0]["scope"], "*");
        assert_eq!(validate(&valid, None, false), []);

        let mut bad = super::tests::hook();
        bad["name"] = json!("deny");
        bad["sideEffects"] = json!("Some");
        bad["timeoutSeconds"] = json!(31);
        bad["admissionReviewVersions"] = json!(["v1beta1"]);
        bad["clientConfig"] = json!({"url": "http://example.com/x", "caBundle": "bm90IGEgcGVt"});
        bad["matchConditions"] = json!([{"name": "a", "expression": "object.x >"}]);
        assert_eq!(
            fields(&validate(&configuration(bad), None, false)),
            [
                "webhooks[0].name FieldValueInvalid",
                "webhooks[0].sideEffects FieldValueNotSupported",
                "webhooks[0].timeoutSeconds FieldValueInvalid",
                "webhooks[0].admissionReviewVersions FieldValueInvalid",
                "webhooks[0].clientConfig.caBundle FieldValueInvalid",
                "webhooks[0].clientConfig.url FieldValueInvalid",
                "webhooks[0].matchConditions[0].expression FieldValueInvalid",
            ]
        );
        for (url, why) in [
            ("https://user@example.com/", "user information"),
            ("https://example.com/?a=b", "query parameters"),
            ("https:///x", "host must be specified"),
            ("example.com/x", "https"),
        ] {
            let error = check_url(url).unwrap_err();
            assert!(error.contains(why), "{url}: {error}");
        }
        // Some side effects written before v1 may stay on an update.
        let mut old = super::tests::hook();
        old["sideEffects"] = json!("Unknown");
        let mut kept = super::tests::hook();
        kept["sideEffects"] = json!("Some");
        assert_eq!(
            validate(&configuration(kept), Some(&configuration(old)), false),
            []
        );
    }

    #[test]
    fn service_addresses_are_namespace_name_and_host_port() {
        let mut services = ServiceAddresses::new();
        services.add("webhooks/deny=127.0.0.1:8443").unwrap();
        assert_eq!(services.get("webhooks", "deny"), Some("127.0.0.1:8443"));
        assert_eq!(services.get("webhooks", "other"), None);
        assert!(services.add("deny=127.0.0.1").is_err());
        assert!(services.add("webhooks/deny").is_err());
        assert!(services.add("webhooks/deny=https://x/").is_err());
        let config = json!({"service": {"namespace": "webhooks", "name": "nowhere", "port": 443}});
        let error = endpoint(&config, &services, &mut HashMap::new(), 10).unwrap_err();
        assert!(
            error.contains("--webhook-service webhooks/nowhere="),
            "{error}"
        );
        let config = json!({"service": {"namespace": "webhooks", "name": "deny", "path": "/v"}});
        let endpoint = endpoint(&config, &services, &mut HashMap::new(), 7).unwrap();
        assert_eq!(endpoint.url, "https://deny.webhooks.svc:443/v?timeout=7s");
        assert_eq!(
            endpoint.uri.to_string(),
            "https://127.0.0.1:8443/v?timeout=7s"
        );
    }
}

//! Prometheus metrics at `/metrics`, named as kube-apiserver names them where they match.
//!
//! ```text
//!  request ─► classify(method, path, query) ─► apiserver_request_total{verb,group,resource,code}
//!                                            └► apiserver_request_duration_seconds{verb,group,resource}
//!  scrape  ─► gauges read at that moment (watchers, store watches, store revision) ─► text
//! ```
//!
//! A request's counter and histogram are looked up by its labels as borrowed from the path
//! (`observe_request`): the label strings are allocated once per label set, not per request.
//!
//! `prometheus-client` (the Prometheus project's Rust client) does the encoding.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::AtomicI64;
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The labels of a request metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// LIST, WATCH, GET, POST, PUT, PATCH, DELETE, DELETECOLLECTION, or the HTTP method
    /// for paths that name no resource.
    pub verb: String,
    /// The API group (`""` for core).
    pub group: String,
    /// The resource (plural), with `/subresource` if any; `""` for other paths.
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    verb: String,
    group: String,
    resource: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

fn request_histogram() -> Histogram {
    // 0.5 ms to about 4 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 14))
}

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<CodeLabels, Counter>,
    durations: Family<RequestLabels, Histogram, fn() -> Histogram>,
    watchers: Family<ResourceLabels, Gauge<i64, AtomicI64>>,
    store_watches: Gauge<i64, AtomicI64>,
    revision: Gauge<i64, AtomicI64>,
    /// The metrics of each label set and code seen, by a hash of them (handles shared with
    /// the families above).
    interned: RwLock<HashMap<u64, Vec<Interned>>>,
    hasher: RandomState,
}

/// One label set and code, with its metrics.
struct Interned {
    code: u16,
    labels: RequestLabels,
    requests: Counter,
    /// `None` for watches, which are not timed.
    duration: Option<Histogram>,
}

/// A request's labels, borrowed from its method and path.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct Classified<'a> {
    verb: &'a str,
    group: &'a str,
    plural: &'a str,
    sub: Option<&'a str>,
}

impl Classified<'_> {
    fn is(&self, labels: &RequestLabels) -> bool {
        let resource = match self.sub {
            None => labels.resource == self.plural,
            Some(sub) => {
                labels
                    .resource
                    .strip_prefix(self.plural)
                    .and_then(|r| r.strip_prefix('/'))
                    == Some(sub)
            }
        };
        resource && labels.verb == self.verb && labels.group == self.group
    }

    fn labels(&self) -> RequestLabels {
        RequestLabels {
            verb: self.verb.to_owned(),
            group: self.group.to_owned(),
            resource: match self.sub {
                None => self.plural.to_owned(),
                Some(sub) => format!("{}/{sub}", self.plural),
            },
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Empty metrics, registered.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<CodeLabels, Counter>::default();
        registry.register(
            "apiserver_request",
            "Requests by verb, group, resource and HTTP code",
            requests.clone(),
        );
        let durations: Family<RequestLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(request_histogram);
        registry.register(
            "apiserver_request_duration_seconds",
            "Request latency in seconds by verb, group and resource (watches excluded)",
            durations.clone(),
        );
        let watchers = Family::<ResourceLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "apiserver_registered_watchers",
            "Client watches being served",
            watchers.clone(),
        );
        let store_watches = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "flotilla_watch_cache_store_watches",
            "Store watches open for the watch cache (one feeds every client watch)",
            store_watches.clone(),
        );
        let revision = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "flotilla_store_revision",
            "The store's current revision",
            revision.clone(),
        );
        Metrics {
            registry,
            requests,
            durations,
            watchers,
            store_watches,
            revision,
            interned: RwLock::default(),
            hasher: RandomState::new(),
        }
    }

    /// The registry, for the embedding program to add its own metrics to.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Counts a finished request by its method, path and query (and times it, unless it was
    /// a watch), as [`classify`] labels it.
    pub fn observe_request(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        code: u16,
        elapsed: Duration,
    ) {
        let classified = classify_parts(method, path, query);
        let hash = self.hasher.hash_one((classified, code));
        let observe = |interned: &Interned| {
            if let Some(duration) = &interned.duration {
                duration.observe(elapsed.as_secs_f64());
            }
            interned.requests.inc();
        };
        let find = |list: &Vec<Interned>| {
            list.iter()
                .position(|i| i.code == code && classified.is(&i.labels))
        };
        {
            let interned = self.interned.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(list) = interned.get(&hash)
                && let Some(at) = find(list)
            {
                observe(&list[at]);
                return;
            }
        }
        let mut interned = self
            .interned
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let list = interned.entry(hash).or_default();
        let at = match find(list) {
            Some(at) => at,
            None => {
                let labels = classified.labels();
                let requests = self
                    .requests
                    .get_or_create(&CodeLabels {
                        verb: labels.verb.clone(),
                        group: labels.group.clone(),
                        resource: labels.resource.clone(),
                        code: code.to_string(),
                    })
                    .clone();
                let duration =
                    (labels.verb != "WATCH").then(|| self.durations.get_or_create(&labels).clone());
                list.push(Interned {
                    code,
                    labels,
                    requests,
                    duration,
                });
                list.len() - 1
            }
        };
        observe(&list[at]);
    }

    /// Counts a finished request (and times it, unless it was a watch).
    pub fn observe(&self, labels: RequestLabels, code: u16, elapsed: Duration) {
        if labels.verb != "WATCH" {
            self.durations
                .get_or_create(&labels)
                .observe(elapsed.as_secs_f64());
        }
        let RequestLabels {
            verb,
            group,
            resource,
        } = labels;
        self.requests
            .get_or_create(&CodeLabels {
                verb,
                group,
                resource,
                code: code.to_string(),
            })
            .inc();
    }

    /// The text exposition, with the gauges set to the values given now.
    pub fn render(&self, watchers: usize, store_watches: usize, revision: u64) -> String {
        self.watchers
            .get_or_create(&ResourceLabels {
                resource: String::new(),
            })
            .set(i64::try_from(watchers).unwrap_or(i64::MAX));
        self.store_watches
            .set(i64::try_from(store_watches).unwrap_or(i64::MAX));
        self.revision
            .set(i64::try_from(revision).unwrap_or(i64::MAX));
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// The verb, group and resource of a request, as the metrics label it.
pub fn classify(method: &str, path: &str, query: Option<&str>) -> RequestLabels {
    classify_parts(method, path, query).labels()
}

fn classify_parts<'a>(method: &'a str, path: &'a str, query: Option<&str>) -> Classified<'a> {
    // A logical cluster's requests count with the same labels as the root's.
    let path = match path.strip_prefix("/clusters/") {
        Some(rest) => rest.split_once('/').map_or("/", |(_, rest)| rest),
        None => path,
    };
    let mut buffer = [""; 10];
    let segments = crate::http::route::segments(path, &mut buffer);
    let rest: Option<(&str, &[&str])> = match &*segments {
        ["api", _version, rest @ ..] if !rest.is_empty() => Some(("", rest)),
        ["apis", group, _version, rest @ ..] if !rest.is_empty() => Some((group, rest)),
        _ => None,
    };
    let Some((group, rest)) = rest else {
        return Classified {
            verb: method,
            group: "",
            plural: "",
            sub: None,
        };
    };
    let rest = match rest {
        ["namespaces", _ns, more @ ..] if !more.is_empty() => more,
        other => other,
    };
    let (plural, sub, named) = match rest {
        [plural] => (*plural, None, false),
        [plural, _name] => (*plural, None, true),
        [plural, _name, sub, ..] => (*plural, Some(*sub), true),
        [] => ("", None, false),
    };
    let watch = query.is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let verb = match (method, named) {
        ("GET", false) if watch => "WATCH",
        ("GET", false) => "LIST",
        ("DELETE", false) => "DELETECOLLECTION",
        (other, _) => other,
    };
    Classified {
        verb,
        group,
        plural,
        sub,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(verb: &str, group: &str, resource: &str) -> RequestLabels {
        RequestLabels {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
        }
    }

    #[test]
    fn requests_are_classified_as_kubernetes_does() {
        assert_eq!(
            classify("GET", "/api/v1/namespaces/default/configmaps", None),
            labels("LIST", "", "configmaps")
        );
        assert_eq!(
            classify(
                "GET",
                "/api/v1/configmaps",
                Some("watch=true&resourceVersion=5")
            ),
            labels("WATCH", "", "configmaps")
        );
        assert_eq!(
            classify("GET", "/api/v1/namespaces/default", None),
            labels("GET", "", "namespaces")
        );
        assert_eq!(
            classify("GET", "/api/v1/namespaces", None),
            labels("LIST", "", "namespaces")
        );
        assert_eq!(
            classify(
                "PUT",
                "/apis/apps/v1/namespaces/a/deployments/web/status",
                None
            ),
            labels("PUT", "apps", "deployments/status")
        );
        assert_eq!(
            classify("DELETE", "/apis/apps/v1/namespaces/a/deployments", None),
            labels("DELETECOLLECTION", "apps", "deployments")
        );
        assert_eq!(
            classify("POST", "/apis/example.com/v1/widgets", None),
            labels("POST", "example.com", "widgets")
        );
        assert_eq!(classify("GET", "/openapi/v3", None), labels("GET", "", ""));
        assert_eq!(
            classify("GET", "/clusters/a/api/v1/namespaces", None),
            labels("LIST", "", "namespaces")
        );
        assert_eq!(
            classify("GET", "/apis/apps/v1", None),
            labels("GET", "", "")
        );
    }

    #[test]
    fn requests_observed_by_path_count_as_their_labels_do() {
        let metrics = Metrics::new();
        for _ in 0..3 {
            metrics.observe_request(
                "GET",
                "/api/v1/namespaces/a/configmaps/x",
                None,
                200,
                Duration::from_millis(1),
            );
        }
        metrics.observe_request(
            "GET",
            "/api/v1/namespaces/a/configmaps/x",
            None,
            404,
            Duration::ZERO,
        );
        metrics.observe_request(
            "PUT",
            "/apis/apps/v1/namespaces/a/deployments/web/status",
            None,
            200,
            Duration::ZERO,
        );
        metrics.observe_request(
            "GET",
            "/api/v1/configmaps",
            Some("watch=1"),
            200,
            Duration::ZERO,
        );
        metrics.observe(labels("GET", "", "configmaps"), 200, Duration::ZERO);
        let text = metrics.render(0, 0, 0);
        for line in [
            r#"apiserver_request_total{verb="GET",group="",resource="configmaps",code="200"} 4"#,
            r#"apiserver_request_total{verb="GET",group="",resource="configmaps",code="404"} 1"#,
            r#"apiserver_request_total{verb="PUT",group="apps",resource="deployments/status",code="200"} 1"#,
            r#"apiserver_request_total{verb="WATCH",group="",resource="configmaps",code="200"} 1"#,
            r#"apiserver_request_duration_seconds_count{verb="GET",group="",resource="configmaps"} 5"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(!text.contains(r#"apiserver_request_duration_seconds_count{verb="WATCH""#));
    }

    #[test]
    fn the_exposition_counts_requests_and_reports_gauges() {
        let metrics = Metrics::new();
        metrics.observe(
            labels("LIST", "", "configmaps"),
            200,
            Duration::from_millis(3),
        );
        metrics.observe(
            labels("LIST", "", "configmaps"),
            200,
            Duration::from_millis(1),
        );
        metrics.observe(
            labels("WATCH", "", "configmaps"),
            200,
            Duration::from_secs(300),
        );
        let text = metrics.render(7, 1, 42);
        assert!(text.contains(r#"apiserver_request_total{verb="LIST",group="",resource="configmaps",code="200"} 2"#), "{text}");
        assert!(text.contains(r#"apiserver_request_total{verb="WATCH",group="",resource="configmaps",code="200"} 1"#), "{text}");
        assert!(text.contains(r#"apiserver_request_duration_seconds_count{verb="LIST",group="",resource="configmaps"} 2"#), "{text}");
        assert!(
            !text.contains(r#"apiserver_request_duration_seconds_count{verb="WATCH""#),
            "{text}"
        );
        assert!(
            text.contains(r#"apiserver_registered_watchers{resource=""} 7"#),
            "{text}"
        );
        assert!(
            text.contains("flotilla_watch_cache_store_watches 1"),
            "{text}"
        );
        assert!(text.contains("flotilla_store_revision 42"), "{text}");
    }
}

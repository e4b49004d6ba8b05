//! The rbac scenario: what authorization costs a request when the hub holds a large RBAC
//! policy, measured against the admin (`system:masters`, allowed before RBAC is asked) in
//! the same run, on the same hub process.
//!
//! ```text
//!  flotilla hub (a process of its own, DIR/rbac/data)
//!    idle RSS, empty ─► load: N namespaces, C ClusterRoles, B RoleBindings (subjects: G
//!    groups and a user each) ─► restart ─► idle RSS, loaded
//!    ServiceAccount `bench` in ns-0, RoleBinding to `edit`; its token (TokenRequest)
//!    rounds × (admin, service account): GET and create of ConfigMaps in ns-0, K clients
//! ```
//!
//! The admin and the service account take turns, round after round, in the order
//! A B, B A, A B, … so that a machine getting busier or quieter over a round pair favours
//! neither; what authorization adds is the median over the rounds of the service account's
//! p50 over the admin's in the same round (paired, so that a busy round of the machine
//! shifts both). The service account's requests pay for its token's verification and for
//! RBAC; the admin's for neither.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::api::{Call, PADDING_HEADER, Target, api_phase, io};
use crate::harness::{LoneHub, trusting};
use crate::system::cpu_ns;
use crate::{Error, Latency};

/// What to load and measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where the hub's data directory goes (`DIR/rbac`, emptied first).
    pub dir: PathBuf,
    /// The `flotilla` binary whose hub is measured.
    pub hub_binary: PathBuf,
    /// Namespaces the RoleBindings are spread over.
    pub namespaces: usize,
    /// ClusterRoles.
    pub cluster_roles: usize,
    /// RoleBindings.
    pub role_bindings: usize,
    /// Groups the RoleBindings name.
    pub groups: usize,
    /// Concurrent clients of each measured phase.
    pub clients: usize,
    /// Creates of each phase.
    pub requests: usize,
    /// GETs of each phase: more than creates, as a GET takes a fraction of a create's time
    /// and a phase must last long enough (a second or so) for a hiccup of the machine not
    /// to be its median.
    pub get_requests: usize,
    /// Rounds, each measuring the admin then the service account.
    pub rounds: usize,
}

impl Options {
    /// The issue's sizes: 1,000 ClusterRoles, 10,000 RoleBindings over 1,000 namespaces,
    /// 100 groups; 16 clients.
    pub fn new(dir: impl Into<PathBuf>, hub_binary: PathBuf) -> Self {
        Options {
            dir: dir.into(),
            hub_binary,
            namespaces: 1_000,
            cluster_roles: 1_000,
            role_bindings: 10_000,
            groups: 100,
            clients: 16,
            requests: 4_000,
            get_requests: 10_000,
            rounds: 12,
        }
    }

    /// A smoke run: a tenth of the policy, fewer requests.
    pub fn quick(dir: impl Into<PathBuf>, hub_binary: PathBuf) -> Self {
        Options {
            namespaces: 100,
            cluster_roles: 100,
            role_bindings: 1_000,
            groups: 10,
            clients: 4,
            requests: 400,
            get_requests: 400,
            rounds: 2,
            ..Options::new(dir, hub_binary)
        }
    }
}

/// One operation's latency as each identity.
#[derive(Clone, Debug, Default)]
pub struct Pair {
    /// `get` or `create`.
    pub op: &'static str,
    /// As the admin: the median round.
    pub admin: Latency,
    /// As the service account: the median round.
    pub service_account: Latency,
    /// Every round's p50, admin then service account, in milliseconds.
    pub rounds_p50_ms: Vec<(f64, f64)>,
    /// As the admin sending as many bytes per request as the service account (its short
    /// token and a header no one reads): the median round.
    pub padded: Latency,
    /// Every round's p50 of that admin, in milliseconds (paired with `rounds_p50_ms`).
    pub rounds_padded_p50_ms: Vec<f64>,
    /// CPU per request, admin, service account, padded admin: the median over the rounds.
    pub cpu: [CpuPerRequest; 3],
}

/// The CPU one request cost during a phase, in microseconds: the hub's, and this process's
/// (the clients': building, encrypting and sending the request, reading the answer).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuPerRequest {
    /// The hub process's.
    pub hub_us: f64,
    /// The benchmark's own (its clients').
    pub client_us: f64,
}

impl CpuPerRequest {
    /// The median of each field over `rounds`.
    fn median(rounds: &[CpuPerRequest]) -> CpuPerRequest {
        let of = |f: fn(&CpuPerRequest) -> f64| crate::median(rounds.iter().map(f).collect());
        CpuPerRequest {
            hub_us: of(|c| c.hub_us),
            client_us: of(|c| c.client_us),
        }
    }

    fn json(&self) -> Value {
        json!({"hub_us": self.hub_us, "client_us": self.client_us})
    }
}

impl Pair {
    /// What authorization adds: the median over the rounds of the service account's p50
    /// over the admin's in the same round, less one (the median rounds' p50s when no round
    /// is recorded).
    pub fn overhead(&self) -> f64 {
        if self.rounds_p50_ms.is_empty() {
            return crate::ratio(self.service_account.p50_ms, self.admin.p50_ms) - 1.0;
        }
        crate::paired_ratio(&self.rounds_p50_ms) - 1.0
    }

    /// What the service account's longer request alone adds (sending, receiving, parsing
    /// a kilobyte more): the padded admin over the admin, paired by round, less one. The
    /// floor under [`Pair::overhead`] that no authenticator can take away.
    pub fn bytes_overhead(&self) -> f64 {
        self.padded_overhead(|[admin, _, padded]| (admin, padded))
    }

    /// What authentication and authorization add over the same bytes: the service account
    /// over the padded admin, paired by round, less one.
    pub fn auth_overhead(&self) -> f64 {
        self.padded_overhead(|[_, service_account, padded]| (padded, service_account))
    }

    /// The median over the rounds of one identity's p50 over another's, less one, the two
    /// chosen by `pick` from (admin, service account, padded admin); the median rounds'
    /// when no round is recorded.
    fn padded_overhead(&self, pick: fn([f64; 3]) -> (f64, f64)) -> f64 {
        let pairs: Vec<(f64, f64)> = self
            .rounds_p50_ms
            .iter()
            .zip(&self.rounds_padded_p50_ms)
            .map(|(&(admin, service_account), &padded)| pick([admin, service_account, padded]))
            .collect();
        if pairs.is_empty() {
            let (from, to) = pick([
                self.admin.p50_ms,
                self.service_account.p50_ms,
                self.padded.p50_ms,
            ]);
            return crate::ratio(to, from) - 1.0;
        }
        crate::paired_ratio(&pairs) - 1.0
    }
}

/// The results of the rbac scenario.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// What was loaded: namespaces, ClusterRoles, RoleBindings, groups.
    pub loaded: (usize, usize, usize, usize),
    /// Seconds the load took through the API.
    pub load_seconds: f64,
    /// Concurrent clients of the measured phases.
    pub clients: usize,
    /// GET and create, as each identity.
    pub ops: Vec<Pair>,
    /// The idle hub's resident memory on an empty store, in MiB.
    pub idle_rss_empty_mib: f64,
    /// The idle hub's resident memory restarted on the loaded store, in MiB.
    pub idle_rss_loaded_mib: f64,
}

impl Report {
    /// The report as JSON.
    pub fn json(&self) -> Value {
        let (namespaces, cluster_roles, role_bindings, groups) = self.loaded;
        json!({
            "loaded": {"namespaces": namespaces, "cluster_roles": cluster_roles,
                "role_bindings": role_bindings, "groups": groups},
            "load_seconds": self.load_seconds,
            "clients": self.clients,
            "ops": self.ops.iter().map(|p| json!({
                "op": p.op, "admin": p.admin.json(), "service_account": p.service_account.json(),
                "overhead": p.overhead(), "rounds_p50_ms": p.rounds_p50_ms,
                "padded_admin": p.padded.json(), "rounds_padded_p50_ms": p.rounds_padded_p50_ms,
                "bytes_overhead": p.bytes_overhead(), "auth_overhead": p.auth_overhead(),
                "cpu_per_request": {"admin": p.cpu[0].json(), "service_account": p.cpu[1].json(),
                    "padded_admin": p.cpu[2].json()},
            })).collect::<Vec<_>>(),
            "idle_rss_empty_mib": self.idle_rss_empty_mib,
            "idle_rss_loaded_mib": self.idle_rss_loaded_mib,
            "idle_rss_growth_mib": self.idle_rss_loaded_mib - self.idle_rss_empty_mib,
        })
    }

    /// The summary's rows: what authorization adds to each operation (target ≤ 10 %), and
    /// the idle RSS the policy costs (target < 10 MiB).
    pub fn summary(&self) -> Vec<crate::Row> {
        let mut rows: Vec<crate::Row> = self
            .ops
            .iter()
            .flat_map(|p| {
                [
                    crate::Row::new(
                        "rbac",
                        format!(
                            "{} p50, service account vs admin, {} clients",
                            p.op, self.clients
                        ),
                        format!("{:+.1} %", p.overhead() * 100.0),
                        "≤ +10 %",
                    ),
                    crate::Row::new(
                        "rbac",
                        format!("{} p50, of which the token's bytes alone", p.op),
                        format!(
                            "{:+.1} % (then auth {:+.1} %)",
                            p.bytes_overhead() * 100.0,
                            p.auth_overhead() * 100.0
                        ),
                        "floor: admin padded to the same bytes",
                    ),
                ]
            })
            .collect();
        rows.push(crate::Row::new(
            "rbac",
            "idle hub RSS with the policy loaded",
            format!(
                "{:+.1} MiB",
                self.idle_rss_loaded_mib - self.idle_rss_empty_mib
            ),
            "< 10 MiB",
        ));
        rows
    }

    /// The report as a table.
    pub fn table(&self) -> String {
        let (namespaces, cluster_roles, role_bindings, groups) = self.loaded;
        let mut out = format!(
            "rbac: {cluster_roles} ClusterRoles, {role_bindings} RoleBindings over {namespaces} \
             namespaces, {groups} groups (loaded in {:.1} s); {} clients\n\
             op       admin p50 / p99 ms      service account p50 / p99 ms   added (p50)   \
             padded admin p50 ms (added)   CPU µs per request, hub + clients: admin, \
             service account, padded admin\n",
            self.load_seconds, self.clients
        );
        for p in &self.ops {
            out.push_str(&format!(
                "{:<8} {:>8.3} / {:>8.3}        {:>8.3} / {:>8.3}              {:>+6.1} %      \
                 {:>8.3} ({:+.1} %)          {:.1} + {:.1}, {:.1} + {:.1}, {:.1} + {:.1}\n",
                p.op,
                p.admin.p50_ms,
                p.admin.p99_ms,
                p.service_account.p50_ms,
                p.service_account.p99_ms,
                p.overhead() * 100.0,
                p.padded.p50_ms,
                p.bytes_overhead() * 100.0,
                p.cpu[0].hub_us,
                p.cpu[0].client_us,
                p.cpu[1].hub_us,
                p.cpu[1].client_us,
                p.cpu[2].hub_us,
                p.cpu[2].client_us,
            ));
        }
        out.push_str(&format!(
            "idle hub RSS: {:.1} MiB empty, {:.1} MiB with the policy loaded ({:+.1} MiB)\n",
            self.idle_rss_empty_mib,
            self.idle_rss_loaded_mib,
            self.idle_rss_loaded_mib - self.idle_rss_empty_mib
        ));
        out
    }
}

/// `calls` sent from `clients` connections at once, each answered as it expects.
async fn send_all(target: &Target, clients: usize, calls: Vec<Call>) -> Result<(), Error> {
    let calls = Arc::new(calls);
    let total = calls.len();
    api_phase(target, clients, total, move |i| calls[i].clone()).await?;
    Ok(())
}

fn post(path: &str, object: Value) -> Call {
    (
        Method::POST,
        path.to_owned(),
        Some(Bytes::from(object.to_string())),
        StatusCode::CREATED,
    )
}

/// The policy: namespaces, ClusterRoles with a few rules each (some naming objects), and
/// RoleBindings spread over the namespaces, each binding a ClusterRole to a group and a
/// user of its own.
fn policy(options: &Options) -> (Vec<Call>, Vec<Call>, Vec<Call>) {
    let namespaces = (0..options.namespaces)
        .map(|n| {
            post(
                "/api/v1/namespaces",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("ns-{n}")}}),
            )
        })
        .collect();
    let cluster_roles = (0..options.cluster_roles)
        .map(|r| {
            post(
                "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": format!("role-{r}")},
                "rules": [
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"],
                        "resourceNames": [format!("cm-{r}")]},
                    {"apiGroups": ["apps"], "resources": ["deployments", "deployments/scale"],
                        "verbs": ["get", "list", "watch"]},
                    {"apiGroups": ["flotilla.io"], "resources": ["placements"],
                        "verbs": ["get", "list"]},
                ]}),
            )
        })
        .collect();
    let role_bindings = (0..options.role_bindings)
        .map(|b| {
            let namespace = format!("ns-{}", b % options.namespaces.max(1));
            post(
                &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings"),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": format!("binding-{b}"), "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": format!("role-{}", b % options.cluster_roles.max(1))},
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                        "name": format!("group-{}", b % options.groups.max(1))},
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                        "name": format!("user-{b}")},
                ]}),
            )
        })
        .collect();
    (namespaces, cluster_roles, role_bindings)
}

/// Runs the scenario.
pub async fn run(options: &Options) -> Result<Report, Error> {
    let progress = |what: &str| eprintln!("rbac: {what}");
    let dir = options.dir.join("rbac");
    let _ = std::fs::remove_dir_all(&dir);
    let mut hub = LoneHub::start(&options.hub_binary, &dir).await?;
    let mut report = Report {
        loaded: (
            options.namespaces,
            options.cluster_roles,
            options.role_bindings,
            options.groups,
        ),
        clients: options.clients,
        ..Report::default()
    };
    report.idle_rss_empty_mib = hub.idle_rss_mib().await?;

    let data = hub.data_dir();
    let admin = Target {
        address: hub.address(),
        tls: trusting(&data.join(flotilla_pki::CA_CERT_FILE))?,
        token: std::fs::read_to_string(data.join(flotilla_pki::ADMIN_TOKEN_FILE))?
            .trim()
            .to_owned(),
        padding: 0,
    };
    progress("loading the policy");
    let started = std::time::Instant::now();
    let (namespaces, cluster_roles, role_bindings) = policy(options);
    let loaders = options.clients.max(16);
    send_all(&admin, loaders, namespaces).await?;
    send_all(&admin, loaders, cluster_roles).await?;
    send_all(&admin, loaders, role_bindings).await?;
    report.load_seconds = started.elapsed().as_secs_f64();

    progress("restarting the hub on the loaded store");
    hub.restart().await?;
    report.idle_rss_loaded_mib = hub.idle_rss_mib().await?;

    // The service account, bound to `edit` in ns-0, and its token.
    let mut connection = admin.open().await?;
    for call in [
        post(
            "/api/v1/namespaces/ns-0/serviceaccounts",
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bench"}}),
        ),
        post(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/ns-0/rolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "bench-edit"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"kind": "ServiceAccount", "name": "bench", "namespace": "ns-0"}]}),
        ),
        post(
            "/api/v1/namespaces/ns-0/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "read"},
                "data": {"payload": "x".repeat(1024)}}),
        ),
    ] {
        let (method, uri, body, code) = call;
        connection.expect(method, &uri, body, code).await?;
    }
    let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600}});
    let answer = connection
        .expect(
            Method::POST,
            "/api/v1/namespaces/ns-0/serviceaccounts/bench/token",
            Some(Bytes::from(request.to_string())),
            StatusCode::CREATED,
        )
        .await?;
    let answer: Value = serde_json::from_slice(&answer).map_err(io)?;
    let token = answer["status"]["token"]
        .as_str()
        .ok_or_else(|| Error::Check("the TokenRequest answered no token".into()))?;
    let service_account = Target {
        token: token.to_owned(),
        ..admin.clone()
    };
    // The admin with as many bytes in each request's header block: its token, then a
    // header of its own (name, ": ", value, CRLF) making up the difference.
    let padded = Target {
        padding: token
            .len()
            .saturating_sub(admin.token.len() + PADDING_HEADER.len() + 4),
        ..admin.clone()
    };
    // Authorization is what is measured: the service account must be allowed, and must
    // not be the admin.
    let mut probe = service_account.open().await?;
    probe
        .expect(
            Method::GET,
            "/api/v1/namespaces/ns-0/configmaps/read",
            None,
            StatusCode::OK,
        )
        .await?;
    probe
        .expect(
            Method::GET,
            "/api/v1/namespaces/ns-1/configmaps/read",
            None,
            StatusCode::FORBIDDEN,
        )
        .await?;

    let mut gets: [Vec<Latency>; 3] = Default::default();
    let mut creates: [Vec<Latency>; 3] = Default::default();
    let mut gets_cpu: [Vec<CpuPerRequest>; 3] = Default::default();
    let mut creates_cpu: [Vec<CpuPerRequest>; 3] = Default::default();
    let (hub_pid, own_pid) = (hub.pid()?, std::process::id());
    let cpu_now = || -> Result<(u64, u64), Error> { Ok((cpu_ns(hub_pid)?, cpu_ns(own_pid)?)) };
    for round in 0..options.rounds {
        // A B C, B C A, C A B, …: each identity takes each place in a third of the rounds.
        for who in order_of(round) {
            let target = [&admin, &service_account, &padded][who];
            progress(&format!(
                "round {} of {}, {}",
                round + 1,
                options.rounds,
                ["admin", "service account", "admin with padding"][who]
            ));
            let get = |_| {
                (
                    Method::GET,
                    "/api/v1/namespaces/ns-0/configmaps/read".to_owned(),
                    None,
                    StatusCode::OK,
                )
            };
            let before = cpu_now()?;
            let (latency, _) =
                api_phase(target, options.clients, options.get_requests, get).await?;
            gets[who].push(latency);
            gets_cpu[who].push(per_request(before, cpu_now()?, options.get_requests));
            let create = move |i: usize| {
                post(
                    "/api/v1/namespaces/ns-0/configmaps",
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("r{round}-{who}-{i}")},
                        "data": {"payload": "x".repeat(1024)}}),
                )
            };
            let before = cpu_now()?;
            let (latency, _) = api_phase(target, options.clients, options.requests, create).await?;
            creates[who].push(latency);
            creates_cpu[who].push(per_request(before, cpu_now()?, options.requests));
        }
    }
    for (op, rounds, cpu) in [("get", gets, gets_cpu), ("create", creates, creates_cpu)] {
        let [admin, service_account, padded] = rounds;
        report.ops.push(Pair {
            cpu: cpu.map(|rounds| CpuPerRequest::median(&rounds)),
            op,
            rounds_padded_p50_ms: padded.iter().map(|l| l.p50_ms).collect(),
            padded: median_round(padded),
            rounds_p50_ms: admin
                .iter()
                .zip(&service_account)
                .map(|(a, s)| (a.p50_ms, s.p50_ms))
                .collect(),
            admin: median_round(admin),
            service_account: median_round(service_account),
        });
    }
    Ok(report)
}

/// The order the three identities (admin, service account, padded admin) take in `round`.
fn order_of(round: usize) -> [usize; 3] {
    let first = round % 3;
    [first, (first + 1) % 3, (first + 2) % 3]
}

/// The CPU per request of a phase of `requests` that began at `before` and ended at `after`
/// (the hub's and this process's CPU nanoseconds).
fn per_request(before: (u64, u64), after: (u64, u64), requests: usize) -> CpuPerRequest {
    let us = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1_000.0 / requests.max(1) as f64;
    CpuPerRequest {
        hub_us: us(before.0, after.0),
        client_us: us(before.1, after.1),
    }
}

/// The round whose p50 is the median of the rounds'.
fn median_round(mut rounds: Vec<Latency>) -> Latency {
    rounds.sort_by(|a, b| a.p50_ms.total_cmp(&b.p50_ms));
    rounds.get(rounds.len() / 2).copied().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_spreads_bindings_over_namespaces_roles_and_groups() {
        let options = Options {
            namespaces: 3,
            cluster_roles: 2,
            role_bindings: 7,
            groups: 2,
            ..Options::quick("x", "flotilla".into())
        };
        let (namespaces, roles, bindings) = policy(&options);
        assert_eq!((namespaces.len(), roles.len(), bindings.len()), (3, 2, 7));
        let body = |call: &Call| -> Value {
            serde_json::from_slice(call.2.as_deref().unwrap_or_default()).unwrap()
        };
        let last = body(&bindings[6]);
        assert_eq!(last["metadata"]["namespace"], "ns-0");
        assert_eq!(last["roleRef"]["name"], "role-0");
        assert_eq!(last["subjects"][0]["name"], "group-0");
        assert_eq!(last["subjects"][1]["name"], "user-6");
        assert_eq!(
            bindings[4].1,
            "/apis/rbac.authorization.k8s.io/v1/namespaces/ns-1/rolebindings"
        );
        assert_eq!(body(&roles[1])["rules"][0]["resourceNames"][0], "cm-1");
    }

    #[test]
    fn the_median_round_is_taken_by_p50() {
        let at = |p50_ms| Latency {
            p50_ms,
            ..Latency::default()
        };
        assert_eq!(median_round(vec![at(3.0), at(1.0), at(2.0)]).p50_ms, 2.0);
        let pair = Pair {
            op: "get",
            admin: at(2.0),
            service_account: at(2.2),
            rounds_p50_ms: Vec::new(),
            padded: at(2.1),
            rounds_padded_p50_ms: Vec::new(),
            cpu: [CpuPerRequest::default(); 3],
        };
        assert!((pair.overhead() - 0.1).abs() < 1e-9);
        // No rounds recorded: the median rounds', padded admin over admin and service
        // account over padded admin.
        assert!((pair.bytes_overhead() - 0.05).abs() < 1e-9);
        assert!((pair.auth_overhead() - (2.2 / 2.1 - 1.0)).abs() < 1e-9);
        // Paired by round: a slow round of the machine moves both of its columns.
        let paired = Pair {
            rounds_p50_ms: vec![(1.0, 1.05), (4.0, 4.2), (2.0, 2.6), (1.0, 0.9)],
            ..pair
        };
        assert!(
            (paired.overhead() - 0.05).abs() < 1e-9,
            "{}",
            paired.overhead()
        );
    }

    #[test]
    fn the_token_bytes_and_auth_split_the_overhead_by_round() {
        let pair = Pair {
            op: "get",
            rounds_p50_ms: vec![(1.0, 1.2), (2.0, 2.4), (1.0, 1.1)],
            rounds_padded_p50_ms: vec![1.1, 2.0, 1.0],
            ..Pair::default()
        };
        // Padded over admin: 1.1, 1.0, 1.0 → median 1.0; service account over padded:
        // 1.2/1.1, 1.2, 1.1 → median 1.1.
        assert!(
            pair.bytes_overhead().abs() < 1e-9,
            "{}",
            pair.bytes_overhead()
        );
        assert!(
            (pair.auth_overhead() - 0.1).abs() < 1e-9,
            "{}",
            pair.auth_overhead()
        );
        // Each identity takes each place once in three rounds.
        let orders: Vec<[usize; 3]> = (0..3).map(order_of).collect();
        assert_eq!(orders, [[0, 1, 2], [1, 2, 0], [2, 0, 1]]);
    }

    #[test]
    fn cpu_is_per_request_and_its_median_is_per_field() {
        let phase = per_request((1_000_000, 5_000_000), (3_000_000, 6_000_000), 100);
        assert_eq!(
            phase,
            CpuPerRequest {
                hub_us: 20.0,
                client_us: 10.0
            }
        );
        let rounds = [
            phase,
            CpuPerRequest {
                hub_us: 30.0,
                client_us: 2.0,
            },
            CpuPerRequest {
                hub_us: 25.0,
                client_us: 40.0,
            },
        ];
        assert_eq!(
            CpuPerRequest::median(&rounds),
            CpuPerRequest {
                hub_us: 25.0,
                client_us: 10.0
            }
        );
    }
}

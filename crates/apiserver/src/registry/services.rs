//! Service cluster IPs: a Service that needs one gets a free address of the service range
//! (`--service-cidr`, kube-apiserver's `--service-cluster-ip-range`); one it asks for is
//! kept if it is in the range and free. Node ports ([`NodePorts`], at the end) are
//! allocated from `--service-node-port-range` the same way.
//!
//! ```text
//!  create of a Service of type ClusterIP, NodePort or LoadBalancer, clusterIP not "None"
//!    (after admission and after its fields' owners are recorded: nobody owns what the
//!    server allocates, as in Kubernetes)
//!    ─► Taken (its logical cluster's addresses, in memory)
//!         clusterIP asked for: outside the range ─► 422   held ─► rebuilt, still held ─► 422
//!         none asked for:      a random free address above the static band, else in it
//!    ─► claim in the store: create ~flotilla/clusterips/{cluster}/{ip} (pending)
//!         exists: its Service holds the IP (uid and address match), or it is pending and
//!         younger than 30 s ─► held elsewhere: held here too, pick again (asked: 422)
//!         else stale ─► taken over by compare-and-swap (update at its revision)
//!    ─► Reservation (pending) ─► stored: committed, claim marked bound
//!                                refused, failed, dry run: released, claim deleted
//!  an update keeps what the stored Service was allocated when the client leaves it out
//!  (`keep_allocated`), and allocates when the type changes from ExternalName
//! ```
//!
//! The truth is the stored Services; the addresses held in memory are derived from them,
//! per logical cluster: listed from the store the first time that cluster allocates after
//! the hub starts, then kept as a superset of the truth: an address is added when a create
//! takes it, and nothing is removed when a Service goes (a Service goes by many paths: a
//! delete, a deletecollection, its namespace's cleanup, garbage collection). Wherever
//! "held" would refuse or fail something — an address asked for that the set holds, a
//! range with nothing free — the set is listed again from the store and asked again; so an
//! address is free once its Service is gone, at the moment it is needed. Reservations not
//! yet stored and addresses committed while a listing runs are kept across it, so that two
//! concurrent creates never get one address in this process. Across processes on one
//! store (hub replicas) the claims decide, as Kubernetes' `IPAddress` objects do: the
//! store has no multi-key transactions, so the claim is made before the Service is stored
//! and is left behind when the Service goes; a claim is therefore trusted only while its
//! Service holds the address, and is taken over by compare-and-swap once it does not.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};

use flotilla_store::{Revision, Store};

use crate::api::Api;
use crate::http::error::{ApiError, ApiResult, Cause};
use crate::registry::keys;

/// kube-apiserver's default service range.
pub const DEFAULT_SERVICE_CIDR: &str = "10.96.0.0/12";

/// An IPv4 service range: its network address and prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceCidr {
    network: u32,
    prefix: u8,
}

/// Why a service range is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CidrError {
    /// Not `ADDRESS/PREFIX` with an IPv4 address.
    #[error("{0:?} is not an IPv4 CIDR (ADDRESS/PREFIX, such as 10.96.0.0/12)")]
    Syntax(String),
    /// Fewer than 8 addresses, or more than 2^20, as kube-apiserver bounds it.
    #[error("{0:?}: the prefix must be between /12 and /29 (at least 8 addresses, at most 2^20)")]
    Size(String),
    /// Bits set past the prefix.
    #[error("{0:?} is not a network address (did you mean {1}?)")]
    NotNetwork(String, String),
}

impl FromStr for ServiceCidr {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Self, CidrError> {
        let syntax = || CidrError::Syntax(text.to_owned());
        let (address, prefix) = text.split_once('/').ok_or_else(syntax)?;
        let address: Ipv4Addr = address.parse().map_err(|_| syntax())?;
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) || prefix.len() > 2 {
            return Err(syntax());
        }
        let prefix: u8 = prefix.parse().map_err(|_| syntax())?;
        if prefix > 32 {
            return Err(syntax());
        }
        if !(12..=29).contains(&prefix) {
            return Err(CidrError::Size(text.to_owned()));
        }
        let cidr = ServiceCidr {
            network: u32::from(address) & mask(prefix),
            prefix,
        };
        if cidr.network != u32::from(address) {
            return Err(CidrError::NotNetwork(text.to_owned(), cidr.to_string()));
        }
        Ok(cidr)
    }
}

impl fmt::Display for ServiceCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.network), self.prefix)
    }
}

impl Default for ServiceCidr {
    fn default() -> Self {
        DEFAULT_SERVICE_CIDR.parse().unwrap_or(ServiceCidr {
            network: 0x0a60_0000,
            prefix: 12,
        })
    }
}

fn mask(prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p => u32::MAX << (32 - u32::from(p)),
    }
}

impl ServiceCidr {
    /// How many addresses the range spans (network and broadcast included).
    fn size(self) -> u32 {
        1 << (32 - u32::from(self.prefix))
    }

    /// The offset of `ip` in the range, if it is inside (not the network address, not
    /// the broadcast address).
    fn offset(self, ip: Ipv4Addr) -> Option<u32> {
        let offset = u32::from(ip).wrapping_sub(self.network);
        (u32::from(ip) & mask(self.prefix) == self.network
            && offset != 0
            && offset != self.size() - 1)
            .then_some(offset)
    }

    fn address(self, offset: u32) -> Ipv4Addr {
        Ipv4Addr::from(self.network + offset)
    }

    /// The first address, which kube-apiserver gives the `kubernetes` Service.
    pub fn first(self) -> Ipv4Addr {
        self.address(1)
    }

    /// The end of the static band: addresses below it are left to Services that ask for
    /// one, as long as others are free (Kubernetes' `ServiceIPStaticSubrange`).
    fn band(self) -> u32 {
        let usable = self.size() - 2;
        (usable / 16).clamp(16, 256).min(usable) + 1
    }
}

/// A logical cluster's addresses: those held (a superset of the stored Services'), those
/// reserved by creates not yet stored, and, while a listing runs, those committed since it
/// began.
#[derive(Default)]
struct Taken {
    loaded: bool,
    held: HashSet<u32>,
    pending: HashSet<u32>,
    listing: bool,
    committed_while_listing: Vec<u32>,
}

impl Taken {
    fn free(&self, offset: u32) -> bool {
        !self.held.contains(&offset) && !self.pending.contains(&offset)
    }
}

/// The cluster IP allocator of every logical cluster of one store (shared by every clone
/// of an [`Api`] and every logical cluster's view).
pub struct ClusterIps {
    state: Mutex<State>,
    /// One listing at a time (held across the store's list).
    listing: tokio::sync::Mutex<()>,
}

impl Default for ClusterIps {
    fn default() -> Self {
        Self::new(ServiceCidr::default())
    }
}

impl fmt::Debug for ClusterIps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterIps")
            .field("cidr", &self.cidr())
            .finish_non_exhaustive()
    }
}

/// The range and what each logical cluster holds of it.
struct State {
    cidr: ServiceCidr,
    clusters: HashMap<String, Taken>,
}

/// An address reserved for a create: released when dropped unless committed.
pub(crate) struct Reservation {
    ips: Arc<ClusterIps>,
    cluster: String,
    offset: u32,
    ip: Ipv4Addr,
    committed: bool,
    /// The address's claim in the store, once made: its key, the revision it was
    /// written at, and what it says.
    claim: Option<Claimed>,
}

/// A claim made in the store: the store, the claim's key, the revision it was written
/// at, and what it says.
type Claimed = (Arc<dyn Store>, Vec<u8>, Revision, Claim);

impl Reservation {
    /// The Service is stored: the address is held, and its claim says so (bound: from
    /// now on the claim is stale as soon as the Service is gone).
    pub(crate) async fn commit(mut self) {
        self.committed = true;
        {
            let mut state = self.ips.lock();
            let taken = state.clusters.entry(self.cluster.clone()).or_default();
            taken.pending.remove(&self.offset);
            taken.held.insert(self.offset);
            if taken.listing {
                taken.committed_while_listing.push(self.offset);
            }
        }
        if let Some((store, key, revision, claim)) = self.claim.take() {
            let bound = Claim {
                bound: true,
                ..claim
            };
            // Left pending if this fails: held as long as the Service is, and taken over
            // PENDING_GRACE after it goes.
            if let Err(e) = store.update(&key, bound.to_bytes(), revision).await {
                tracing::warn!(ip = %self.ip, error = %e, "cannot mark the cluster IP's claim bound");
            }
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        if let Some(taken) = self.ips.lock().clusters.get_mut(&self.cluster) {
            taken.pending.remove(&self.offset);
        }
        // Not stored (refused, failed, a dry run): the claim goes too.
        if let Some((store, key, revision, _)) = self.claim.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = store.delete(&key, Some(revision)).await;
            });
        }
    }
}

/// How long a claim whose Service is not stored (yet) holds its address: the time
/// between a claim and its Service's create, with room to spare. Only a server that
/// stops in between leaves one that long.
const PENDING_GRACE_SECONDS: i64 = 30;

/// A claim on a cluster IP, kept in the store (`keys::cluster_ip_claim`), so that
/// servers sharing the store (hub replicas) never hand out one address twice: made by
/// create-if-absent before the Service is stored, marked bound once it is; one whose
/// Service no longer holds the address is taken over by compare-and-swap.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Claim {
    /// The Service's namespace.
    namespace: String,
    /// The Service's name.
    name: String,
    /// The Service's uid.
    uid: String,
    /// Whether the Service was stored.
    bound: bool,
    /// When the claim was made (Unix seconds).
    since: i64,
}

impl Claim {
    fn to_bytes(&self) -> bytes::Bytes {
        bytes::Bytes::from(
            json!({"namespace": self.namespace, "name": self.name, "uid": self.uid,
                "bound": self.bound, "since": self.since})
            .to_string(),
        )
    }

    fn parse(bytes: &[u8]) -> Option<Claim> {
        let value: Value = serde_json::from_slice(bytes).ok()?;
        Some(Claim {
            namespace: value["namespace"].as_str()?.to_owned(),
            name: value["name"].as_str()?.to_owned(),
            uid: value["uid"].as_str()?.to_owned(),
            bound: value["bound"].as_bool()?,
            since: value["since"].as_i64()?,
        })
    }
}

/// Whether the claim stored as `value` still holds `ip`: its Service is stored with that
/// address and the claim's uid, or it is a recent claim whose Service is not stored yet.
async fn holds(api: &Api, value: &[u8], ip: Ipv4Addr) -> ApiResult<bool> {
    let Some(claim) = Claim::parse(value) else {
        return Ok(false);
    };
    let rt = api.resource("", "v1", "services")?;
    let key = keys::key(&rt, &api.cluster, &claim.namespace, &claim.name);
    if let Some(kv) = api.store.get(&key, None).await? {
        let service: Value = serde_json::from_slice(&kv.value).unwrap_or_default();
        let ip = ip.to_string();
        let spec = &service["spec"];
        let has = spec["clusterIP"] == ip.as_str()
            || spec["clusterIPs"]
                .as_array()
                .is_some_and(|ips| ips.iter().any(|i| i == ip.as_str()));
        if has && service["metadata"]["uid"] == claim.uid.as_str() {
            return Ok(true);
        }
    }
    Ok(!claim.bound && jiff::Timestamp::now().as_second() - claim.since < PENDING_GRACE_SECONDS)
}

/// Claims `ip` for `owner` in the store: `Some` (the key and revision) if this server
/// now holds it, `None` if another Service does.
async fn claim(api: &Api, ip: Ipv4Addr, owner: &Claim) -> ApiResult<Option<(Vec<u8>, Revision)>> {
    let key = keys::cluster_ip_claim(&api.cluster, &ip.to_string());
    for _ in 0..8 {
        match api.store.create(&key, owner.to_bytes()).await {
            Ok(revision) => return Ok(Some((key, revision))),
            Err(flotilla_store::Error::AlreadyExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let Some(kv) = api.store.get(&key, None).await? else {
            continue;
        };
        if holds(api, &kv.value, ip).await? {
            return Ok(None);
        }
        // Stale: taken over, unless another server changed it first.
        match api
            .store
            .update(&key, owner.to_bytes(), kv.mod_revision)
            .await
        {
            Ok(revision) => return Ok(Some((key, revision))),
            Err(
                flotilla_store::Error::Conflict { .. } | flotilla_store::Error::NotFound { .. },
            ) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

/// Which address a create asks for.
#[derive(Clone, Copy)]
enum Asked {
    /// None: any free one.
    Any,
    /// This one.
    Address(Ipv4Addr),
}

impl ClusterIps {
    /// An allocator over `cidr`.
    pub fn new(cidr: ServiceCidr) -> Self {
        ClusterIps {
            state: Mutex::new(State {
                cidr,
                clusters: HashMap::new(),
            }),
            listing: tokio::sync::Mutex::new(()),
        }
    }

    /// The service range.
    pub fn cidr(&self) -> ServiceCidr {
        self.lock().cidr
    }

    /// Allocates from `cidr` from now on (set as the server starts, before any Service is
    /// written: what was held is listed again from the store).
    pub fn set_cidr(&self, cidr: ServiceCidr) {
        let mut state = self.lock();
        state.cidr = cidr;
        state.clusters.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lists the addresses of `api`'s stored Services and holds exactly those (with what
    /// is pending or committed meanwhile).
    async fn list(&self, api: &Api) -> ApiResult<()> {
        let _one = self.listing.lock().await;
        let cluster = api.cluster().to_owned();
        self.lock()
            .clusters
            .entry(cluster.clone())
            .or_default()
            .listing = true;
        let listed = self.stored(api).await;
        let mut state = self.lock();
        let taken = state.clusters.entry(cluster).or_default();
        taken.listing = false;
        let committed = std::mem::take(&mut taken.committed_while_listing);
        let mut held = listed?;
        held.extend(committed);
        taken.held = held;
        taken.loaded = true;
        Ok(())
    }

    /// The offsets of the addresses the stored Services of `api`'s cluster hold.
    async fn stored(&self, api: &Api) -> ApiResult<HashSet<u32>> {
        let rt = api.resource("", "v1", "services")?;
        let prefix = keys::prefix(&rt, &api.cluster, None);
        let (kvs, _) = api.store.list_all(&prefix).await?;
        let cidr = self.cidr();
        let mut held = HashSet::new();
        for kv in kvs {
            let Ok(service) = serde_json::from_slice::<Value>(&kv.value) else {
                continue;
            };
            let spec = &service["spec"];
            let ips = spec["clusterIPs"].as_array().into_iter().flatten();
            for ip in ips.chain(std::iter::once(&spec["clusterIP"])) {
                if let Some(offset) = ip
                    .as_str()
                    .and_then(|ip| ip.parse().ok())
                    .and_then(|ip| cidr.offset(ip))
                {
                    held.insert(offset);
                }
            }
        }
        Ok(held)
    }

    /// Reserves `asked` in `api`'s logical cluster for `owner` and claims it in the
    /// store (no owner: a dry run, nothing claimed); `Err` the cause of a refusal. An address another server's Service holds
    /// (its claim says so) is held here from then on, and another one is picked.
    async fn reserve(
        self: &Arc<Self>,
        api: &Api,
        asked: Asked,
        owner: Option<Claim>,
    ) -> ApiResult<Result<Reservation, Cause>> {
        let Some(owner) = owner else {
            return self.reserve_locally(api, asked).await;
        };
        let specific = matches!(asked, Asked::Address(_));
        for _ in 0..16 {
            let mut reservation = match self.reserve_locally(api, asked).await? {
                Ok(reservation) => reservation,
                refused => return Ok(refused),
            };
            match claim(api, reservation.ip, &owner).await? {
                Some((key, revision)) => {
                    reservation.claim = Some((api.store.clone(), key, revision, owner));
                    return Ok(Ok(reservation));
                }
                None => {
                    let (ip, offset) = (reservation.ip, reservation.offset);
                    drop(reservation);
                    self.lock()
                        .clusters
                        .entry(api.cluster().to_owned())
                        .or_default()
                        .held
                        .insert(offset);
                    if specific {
                        return Ok(Err(refused(ip, "provided IP is already allocated")));
                    }
                }
            }
        }
        Err(ApiError::internal(format!(
            "failed to allocate a serviceIP in {}: every address tried is claimed",
            self.cidr()
        )))
    }

    /// Reserves `asked` in `api`'s logical cluster in memory; `Err` the cause of a refusal.
    async fn reserve_locally(
        self: &Arc<Self>,
        api: &Api,
        asked: Asked,
    ) -> ApiResult<Result<Reservation, Cause>> {
        let cluster = api.cluster().to_owned();
        let cidr = self.cidr();
        if !self.lock().clusters.get(&cluster).is_some_and(|t| t.loaded) {
            self.list(api).await?;
        }
        let reservation = |offset| Reservation {
            ips: self.clone(),
            cluster: cluster.clone(),
            offset,
            ip: cidr.address(offset),
            committed: false,
            claim: None,
        };
        match asked {
            Asked::Address(ip) => {
                let Some(offset) = cidr.offset(ip) else {
                    return Ok(Err(refused(
                        ip,
                        &format!(
                            "the provided IP ({ip}) is not in the valid range. The range of valid IPs is {}",
                            cidr
                        ),
                    )));
                };
                if offset == 1 {
                    return Ok(Err(refused(ip, "provided IP is already allocated")));
                }
                for listed in [false, true] {
                    if listed {
                        self.list(api).await?;
                    }
                    let mut state = self.lock();
                    let taken = state.clusters.entry(cluster.clone()).or_default();
                    if taken.free(offset) {
                        taken.pending.insert(offset);
                        return Ok(Ok(reservation(offset)));
                    }
                }
                Ok(Err(refused(ip, "provided IP is already allocated")))
            }
            Asked::Any => {
                for listed in [false, true] {
                    if listed {
                        self.list(api).await?;
                    }
                    let mut state = self.lock();
                    let taken = state.clusters.entry(cluster.clone()).or_default();
                    if let Some(offset) = pick(cidr, taken) {
                        taken.pending.insert(offset);
                        return Ok(Ok(reservation(offset)));
                    }
                }
                Err(ApiError::internal(format!(
                    "failed to allocate a serviceIP: range is full ({cidr})"
                )))
            }
        }
    }
}

/// A free offset of `cidr`: random above the static band, else the first free one from a
/// random point above it, else in the band.
fn pick(cidr: ServiceCidr, taken: &Taken) -> Option<u32> {
    let (low, band, end) = (2, cidr.band(), cidr.size() - 1);
    let random = || {
        u32::from_le_bytes(
            uuid::Uuid::new_v4().into_bytes()[..4]
                .try_into()
                .unwrap_or_default(),
        )
    };
    if band < end {
        let span = end - band;
        for _ in 0..8 {
            let offset = band + random() % span;
            if taken.free(offset) {
                return Some(offset);
            }
        }
        let start = random() % span;
        if let Some(offset) = (0..span)
            .map(|i| band + (start + i) % span)
            .find(|o| taken.free(*o))
        {
            return Some(offset);
        }
    }
    (low..band.min(end)).find(|o| taken.free(*o))
}

fn refused(ip: Ipv4Addr, why: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: \"{ip}\": failed to allocate IP {ip}: {why}"),
        field: "spec.clusterIPs[0]".into(),
    }
}

/// Whether a Service's spec needs a cluster IP (not ExternalName, not headless).
fn needs_cluster_ip(spec: &Value) -> bool {
    spec["type"] != "ExternalName" && spec["clusterIP"] != "None"
}

/// An address that is set (not empty, not "None").
fn set(ip: &Value) -> Option<&str> {
    ip.as_str().filter(|ip| !ip.is_empty() && *ip != "None")
}

/// On an update of a Service, what the stored one was allocated and the client left out
/// is kept (its cluster IPs while both need one, and node ports, by port and protocol,
/// while both have them), as Kubernetes does, so that a replace or an apply without them
/// is not a change of an immutable field.
pub(crate) fn keep_allocated(object: &mut Value, current: &Value) {
    let old = &current["spec"];
    let Some(spec) = object.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    let ty = |s: &Value| s["type"].as_str().unwrap_or("ClusterIP").to_owned();
    let (old_type, new_type) = (ty(old), ty(spec));
    if old_type != "ExternalName" && new_type != "ExternalName" && spec["clusterIP"] != "None" {
        if set(&spec["clusterIP"]).is_none() && set(&old["clusterIP"]).is_some() {
            spec["clusterIP"] = old["clusterIP"].clone();
        }
        if spec["clusterIPs"].as_array().is_none_or(Vec::is_empty) && !old["clusterIPs"].is_null() {
            spec["clusterIPs"] = old["clusterIPs"].clone();
        }
    }
    let node_ports = |t: &str| t == "NodePort" || t == "LoadBalancer";
    if node_ports(&old_type) && node_ports(&new_type) {
        let old_ports = old["ports"].as_array().cloned().unwrap_or_default();
        for port in spec
            .get_mut("ports")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if !port["nodePort"].is_null() && port["nodePort"] != 0 {
                continue;
            }
            let protocol = |p: &Value| p["protocol"].as_str().unwrap_or("TCP").to_owned();
            let same = old_ports
                .iter()
                .find(|o| o["port"] == port["port"] && protocol(o) == protocol(port));
            if let Some(node_port) = same.map(|o| &o["nodePort"]).filter(|n| !n.is_null()) {
                port["nodePort"] = node_port.clone();
            }
        }
        if spec["healthCheckNodePort"].is_null() && !old["healthCheckNodePort"].is_null() {
            spec["healthCheckNodePort"] = old["healthCheckNodePort"].clone();
        }
    }
    // To a type without node ports: the ones the stored Service had, sent back, are
    // dropped (and so freed), as kube-apiserver drops them; a new one stays, for
    // validation to refuse.
    if node_ports(&old_type) && !node_ports(&new_type) {
        let had: HashSet<u32> = node_ports_of(old).collect();
        let ports = spec.get_mut("ports").and_then(Value::as_array_mut);
        let mut ports: Vec<&mut Value> = ports.into_iter().flatten().collect();
        let sent_back = ports.iter().all(|p| {
            p["nodePort"]
                .as_u64()
                .is_none_or(|n| n == 0 || u32::try_from(n).is_ok_and(|n| had.contains(&n)))
        });
        if sent_back {
            for port in ports.iter_mut() {
                if let Some(port) = port.as_object_mut() {
                    port.remove("nodePort");
                }
            }
        }
    }
    if !has_health_check_port(spec)
        && spec["healthCheckNodePort"] == old["healthCheckNodePort"]
        && let Some(spec) = spec.as_object_mut()
    {
        spec.remove("healthCheckNodePort");
    }
}

/// Allocates a new Service's cluster IP (`old`: the stored Service, on an update: only a
/// Service that had none and needs one now is given one). `Ok(None)` when nothing was
/// reserved; a refusal is a 422 naming `spec.clusterIPs[0]`.
pub(crate) async fn allocate(
    api: &Api,
    object: &mut Value,
    old: Option<&Value>,
    dry_run: bool,
) -> ApiResult<Option<Reservation>> {
    let Some(spec) = object.get_mut("spec").filter(|s| s.is_object()) else {
        return Ok(None);
    };
    if spec["clusterIP"] == "None" && spec["clusterIPs"].is_null() {
        spec["clusterIPs"] = json!(["None"]);
    }
    if !needs_cluster_ip(spec) {
        return Ok(None);
    }
    if let Some(old) = old
        && needs_cluster_ip(&old["spec"])
    {
        return Ok(None);
    }
    let name = crate::registry::object::meta_str(object, "name").to_owned();
    let spec = &mut object["spec"];
    let first = set(&spec["clusterIPs"][0]).map(str::to_owned);
    let asked = match (set(&spec["clusterIP"]), first.as_deref()) {
        (Some(ip), Some(first)) if ip != first => {
            let cause = Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: \"{first}\": must match `clusterIP`"),
                field: "spec.clusterIPs[0]".into(),
            };
            return Err(ApiError::invalid("", "Service", &name, vec![cause]));
        }
        (Some(ip), _) | (None, Some(ip)) => match ip.parse::<Ipv4Addr>() {
            Ok(ip) => Asked::Address(ip),
            // Validation names an address that is not one; an IPv6 one is not in range.
            Err(_) => {
                let cause = Cause {
                    reason: "FieldValueInvalid".into(),
                    message: format!(
                        "Invalid value: \"{ip}\": not an IPv4 address of the service range {}",
                        api.cluster_ips.cidr()
                    ),
                    field: "spec.clusterIPs[0]".into(),
                };
                return Err(ApiError::invalid("", "Service", &name, vec![cause]));
            }
        },
        (None, None) => Asked::Any,
    };
    let owner = Claim {
        namespace: crate::registry::object::meta_str(object, "namespace").to_owned(),
        name: name.clone(),
        uid: crate::registry::object::meta_str(object, "uid").to_owned(),
        bound: false,
        since: jiff::Timestamp::now().as_second(),
    };
    let spec = &mut object["spec"];
    // A dry run checks the range in memory and claims nothing.
    let owner = (!dry_run).then_some(owner);
    let reservation = match api.cluster_ips.reserve(api, asked, owner).await? {
        Ok(reservation) => reservation,
        Err(cause) => return Err(ApiError::invalid("", "Service", &name, vec![cause])),
    };
    let ip = reservation.ip.to_string();
    spec["clusterIP"] = json!(ip);
    spec["clusterIPs"] = json!([ip]);
    if spec["ipFamilies"].is_null() {
        spec["ipFamilies"] = json!(["IPv4"]);
    }
    if spec["ipFamilyPolicy"].is_null() {
        spec["ipFamilyPolicy"] = json!("SingleStack");
    }
    Ok(Some(reservation))
}

/// kube-apiserver's default node port range (`--service-node-port-range`).
pub const DEFAULT_NODE_PORT_RANGE: &str = "30000-32767";

/// A range of node ports: `base` and the `size` ports from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodePortRange {
    base: u32,
    size: u32,
}

/// Why a node port range is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PortRangeError {
    /// Not `FIRST-LAST`, `BASE+OFFSET` or `PORT`, with ports from 1 to 65535.
    #[error("{0:?} is not a port range (FIRST-LAST, such as 30000-32767, or BASE+SIZE)")]
    Syntax(String),
    /// The last port before the first.
    #[error("{0:?}: the last port is below the first")]
    Reversed(String),
}

impl FromStr for NodePortRange {
    type Err = PortRangeError;

    fn from_str(text: &str) -> Result<Self, PortRangeError> {
        let syntax = || PortRangeError::Syntax(text.to_owned());
        let port = |part: &str| -> Result<u32, PortRangeError> {
            if part.is_empty() || part.len() > 5 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax());
            }
            part.parse::<u32>()
                .ok()
                .filter(|p| (1..=65535).contains(p))
                .ok_or_else(syntax)
        };
        let (first, last) = match (text.split_once('-'), text.split_once('+')) {
            (Some((first, last)), None) => (port(first)?, port(last)?),
            (None, Some((base, offset))) => {
                let base = port(base)?;
                let offset = match offset {
                    "0" => 0,
                    offset => port(offset)?,
                };
                (
                    base,
                    base.checked_add(offset)
                        .filter(|l| *l <= 65535)
                        .ok_or_else(syntax)?,
                )
            }
            (None, None) => (port(text)?, port(text)?),
            (Some(_), Some(_)) => return Err(syntax()),
        };
        if last < first {
            return Err(PortRangeError::Reversed(text.to_owned()));
        }
        Ok(NodePortRange {
            base: first,
            size: last - first + 1,
        })
    }
}

impl fmt::Display for NodePortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.base, self.base + self.size - 1)
    }
}

impl Default for NodePortRange {
    fn default() -> Self {
        NodePortRange {
            base: 30000,
            size: 2768,
        }
    }
}

impl NodePortRange {
    /// Whether `port` is in the range.
    pub fn contains(self, port: u32) -> bool {
        port >= self.base && port - self.base < self.size
    }

    /// The end of the static band (offsets below it are left to Services that ask for a
    /// port, as long as others are free: Kubernetes' `ServiceNodePortStaticSubrange`).
    fn band(self) -> u32 {
        (self.size / 32).clamp(16, 128).min(self.size)
    }
}

/// The node port allocator of every logical cluster of one store: as [`ClusterIps`], each
/// logical cluster's ports held in memory as a superset of its stored Services' (listed
/// again from the store wherever "held" would refuse or fail something), so that a port
/// is free once its Service is gone (deleted, or its type changed to one without node
/// ports) at the moment it is needed.
pub struct NodePorts {
    state: Mutex<PortState>,
    /// One listing at a time (held across the store's list).
    listing: tokio::sync::Mutex<()>,
}

impl Default for NodePorts {
    fn default() -> Self {
        Self::new(NodePortRange::default())
    }
}

impl fmt::Debug for NodePorts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodePorts")
            .field("range", &self.range())
            .finish_non_exhaustive()
    }
}

/// The range and what each logical cluster holds of it (ports, as [`Taken`] offsets).
struct PortState {
    range: NodePortRange,
    clusters: HashMap<String, Taken>,
}

/// A node port reserved for a write: released when dropped unless committed.
pub(crate) struct PortReservation {
    ports: Arc<NodePorts>,
    cluster: String,
    port: u32,
    committed: bool,
}

impl PortReservation {
    /// The Service is stored: the port is held.
    pub(crate) fn commit(mut self) {
        self.committed = true;
        let mut state = self.ports.lock();
        let taken = state.clusters.entry(self.cluster.clone()).or_default();
        taken.pending.remove(&self.port);
        taken.held.insert(self.port);
        if taken.listing {
            taken.committed_while_listing.push(self.port);
        }
    }
}

impl Drop for PortReservation {
    fn drop(&mut self) {
        if !self.committed
            && let Some(taken) = self.ports.lock().clusters.get_mut(&self.cluster)
        {
            taken.pending.remove(&self.port);
        }
    }
}

/// Why a node port asked for is refused (the allocator's words, as Kubernetes').
enum PortRefusal {
    /// Outside the range.
    NotInRange,
    /// Held by another Service.
    Allocated,
}

impl NodePorts {
    /// An allocator over `range`.
    pub fn new(range: NodePortRange) -> Self {
        NodePorts {
            state: Mutex::new(PortState {
                range,
                clusters: HashMap::new(),
            }),
            listing: tokio::sync::Mutex::new(()),
        }
    }

    /// The node port range.
    pub fn range(&self) -> NodePortRange {
        self.lock().range
    }

    /// Allocates from `range` from now on (set as the server starts, before any Service
    /// is written: what was held is listed again from the store).
    pub fn set_range(&self, range: NodePortRange) {
        let mut state = self.lock();
        state.range = range;
        state.clusters.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PortState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lists the node ports of `api`'s stored Services and holds exactly those (with what
    /// is pending or committed meanwhile).
    async fn list(&self, api: &Api) -> ApiResult<()> {
        let _one = self.listing.lock().await;
        let cluster = api.cluster().to_owned();
        self.lock()
            .clusters
            .entry(cluster.clone())
            .or_default()
            .listing = true;
        let listed = self.stored(api).await;
        let mut state = self.lock();
        let taken = state.clusters.entry(cluster).or_default();
        taken.listing = false;
        let committed = std::mem::take(&mut taken.committed_while_listing);
        let mut held = listed?;
        held.extend(committed);
        taken.held = held;
        taken.loaded = true;
        Ok(())
    }

    /// The node ports (and health check node ports) the stored Services of `api`'s
    /// cluster hold.
    async fn stored(&self, api: &Api) -> ApiResult<HashSet<u32>> {
        let rt = api.resource("", "v1", "services")?;
        let prefix = keys::prefix(&rt, &api.cluster, None);
        let (kvs, _) = api.store.list_all(&prefix).await?;
        let range = self.range();
        let mut held = HashSet::new();
        for kv in kvs {
            let Ok(service) = serde_json::from_slice::<Value>(&kv.value) else {
                continue;
            };
            held.extend(node_ports_of(&service["spec"]).filter(|p| range.contains(*p)));
        }
        Ok(held)
    }

    /// Reserves `asked` (`None`: any free port) in `api`'s logical cluster.
    async fn reserve(
        self: &Arc<Self>,
        api: &Api,
        asked: Option<u32>,
    ) -> ApiResult<Result<PortReservation, PortRefusal>> {
        let cluster = api.cluster().to_owned();
        let range = self.range();
        if !self.lock().clusters.get(&cluster).is_some_and(|t| t.loaded) {
            self.list(api).await?;
        }
        if asked.is_some_and(|port| !range.contains(port)) {
            return Ok(Err(PortRefusal::NotInRange));
        }
        for listed in [false, true] {
            if listed {
                self.list(api).await?;
            }
            let mut state = self.lock();
            let taken = state.clusters.entry(cluster.clone()).or_default();
            let port = match asked {
                Some(port) => Some(port).filter(|p| taken.free(*p)),
                None => pick_port(range, taken),
            };
            if let Some(port) = port {
                taken.pending.insert(port);
                return Ok(Ok(PortReservation {
                    ports: self.clone(),
                    cluster: cluster.clone(),
                    port,
                    committed: false,
                }));
            }
        }
        match asked {
            Some(_) => Ok(Err(PortRefusal::Allocated)),
            None => Err(ApiError::internal(format!(
                "failed to allocate a nodePort: range is full ({range})"
            ))),
        }
    }
}

/// A free port of `range`: random above the static band, else the first free one from a
/// random point above it, else in the band.
fn pick_port(range: NodePortRange, taken: &Taken) -> Option<u32> {
    let random = || {
        u32::from_le_bytes(
            uuid::Uuid::new_v4().into_bytes()[..4]
                .try_into()
                .unwrap_or_default(),
        )
    };
    let band = range.band();
    let port = |offset: u32| range.base + offset;
    if band < range.size {
        let span = range.size - band;
        for _ in 0..8 {
            let candidate = port(band + random() % span);
            if taken.free(candidate) {
                return Some(candidate);
            }
        }
        let start = random() % span;
        if let Some(candidate) = (0..span)
            .map(|i| port(band + (start + i) % span))
            .find(|p| taken.free(*p))
        {
            return Some(candidate);
        }
    }
    (0..band).map(port).find(|p| taken.free(*p))
}

/// Whether a Service of this spec has node ports (NodePort and LoadBalancer).
fn has_node_ports(spec: &Value) -> bool {
    spec["type"] == "NodePort" || spec["type"] == "LoadBalancer"
}

/// Whether a Service of this spec has a health check node port (a LoadBalancer whose
/// external traffic stays on the node that receives it).
fn has_health_check_port(spec: &Value) -> bool {
    spec["type"] == "LoadBalancer" && spec["externalTrafficPolicy"] == "Local"
}

/// The node ports a stored Service's spec holds (its ports', and its health check's).
fn node_ports_of(spec: &Value) -> impl Iterator<Item = u32> + '_ {
    let ports = spec["ports"].as_array().into_iter().flatten();
    ports
        .map(|p| &p["nodePort"])
        .chain(std::iter::once(&spec["healthCheckNodePort"]))
        .filter_map(|p| p.as_u64().and_then(|p| u32::try_from(p).ok()))
        .filter(|p| *p != 0)
}

/// The 422 of a node port that cannot be had, naming `field`.
fn port_refused(
    name: &str,
    field: &str,
    port: u32,
    why: PortRefusal,
    range: NodePortRange,
) -> ApiError {
    let why = match why {
        PortRefusal::NotInRange => {
            format!("provided port is not in the valid range. The range of valid ports is {range}")
        }
        PortRefusal::Allocated => "provided port is already allocated".to_owned(),
    };
    let cause = Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {port}: {why}"),
        field: field.into(),
    };
    ApiError::invalid("", "Service", name, vec![cause])
}

/// Allocates the node ports of a NodePort or LoadBalancer Service (`old`: the stored
/// Service, on an update), as kube-apiserver does: each port without one gets a free
/// port of the range (a LoadBalancer only unless `allocateLoadBalancerNodePorts` is
/// false), ports of one number (TCP and UDP of 53) share one, and a port asked for must be
/// in the range and free, else a 422 naming `spec.ports[i].nodePort`; what the stored
/// Service already holds is its own. A LoadBalancer with `externalTrafficPolicy: Local`
/// gets a `healthCheckNodePort` likewise.
pub(crate) async fn allocate_node_ports(
    api: &Api,
    object: &mut Value,
    old: Option<&Value>,
) -> ApiResult<Vec<PortReservation>> {
    let mut reservations = Vec::new();
    let Some(spec) = object.get("spec").filter(|s| s.is_object()) else {
        return Ok(reservations);
    };
    if !has_node_ports(spec) {
        return Ok(reservations);
    }
    let fill = spec["type"] == "NodePort" || spec["allocateLoadBalancerNodePorts"] != false;
    let owned: HashSet<u32> = old
        .map(|o| &o["spec"])
        .filter(|o| has_node_ports(o))
        .map(|o| node_ports_of(o).collect())
        .unwrap_or_default();
    let name = crate::registry::object::meta_str(object, "name").to_owned();
    let range = api.node_ports.range();
    let count = object["spec"]["ports"].as_array().map_or(0, Vec::len);
    // Service port number ─► the node port its ports have here.
    let mut by_port: HashMap<String, u32> = HashMap::new();
    for i in 0..count {
        let port = &object["spec"]["ports"][i];
        let number = port["port"].to_string();
        let asked = port["nodePort"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p != 0);
        let given = by_port.get(&number).copied();
        let node_port = match (asked, given) {
            (Some(asked), Some(given)) if asked == given => continue,
            (None, Some(given)) => given,
            (None, None) if !fill => continue,
            (Some(asked), _) if owned.contains(&asked) => asked,
            (asked, _) => {
                let taken_here = asked.is_some_and(|a| by_port.values().any(|p| *p == a));
                let reserved = match taken_here {
                    true => Err(PortRefusal::Allocated),
                    false => api.node_ports.reserve(api, asked).await?,
                };
                match reserved {
                    Ok(reservation) => {
                        let port = reservation.port;
                        reservations.push(reservation);
                        port
                    }
                    Err(why) => {
                        let field = format!("spec.ports[{i}].nodePort");
                        return Err(port_refused(&name, &field, asked.unwrap_or(0), why, range));
                    }
                }
            }
        };
        by_port.entry(number).or_insert(node_port);
        object["spec"]["ports"][i]["nodePort"] = json!(node_port);
    }
    if has_health_check_port(&object["spec"]) {
        let asked = object["spec"]["healthCheckNodePort"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p != 0);
        if asked.is_none_or(|a| !owned.contains(&a)) {
            match api.node_ports.reserve(api, asked).await? {
                Ok(reservation) => {
                    object["spec"]["healthCheckNodePort"] = json!(reservation.port);
                    reservations.push(reservation);
                }
                Err(why) => {
                    let field = "spec.healthCheckNodePort";
                    return Err(port_refused(&name, field, asked.unwrap_or(0), why, range));
                }
            }
        }
    }
    Ok(reservations)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_as_kube_apiserver_bounds_them() {
        let cidr: ServiceCidr = "10.96.0.0/12".parse().unwrap();
        assert_eq!(cidr, ServiceCidr::default());
        assert_eq!(cidr.to_string(), "10.96.0.0/12");
        assert_eq!(cidr.first(), Ipv4Addr::new(10, 96, 0, 1));
        assert_eq!(cidr.band(), 257);
        assert_eq!(cidr.offset(Ipv4Addr::new(10, 96, 0, 0)), None);
        assert_eq!(cidr.offset(Ipv4Addr::new(10, 111, 255, 255)), None);
        assert_eq!(cidr.offset(Ipv4Addr::new(10, 112, 0, 1)), None);
        assert_eq!(cidr.offset(Ipv4Addr::new(10, 96, 1, 2)), Some(258));
        let small: ServiceCidr = "192.168.7.0/29".parse().unwrap();
        assert_eq!(small.band(), 7);
        for (text, error) in [
            ("10.96.0.0", CidrError::Syntax("10.96.0.0".into())),
            ("10.96.0.0/", CidrError::Syntax("10.96.0.0/".into())),
            ("fd00::/108", CidrError::Syntax("fd00::/108".into())),
            ("10.96.0.0/33", CidrError::Syntax("10.96.0.0/33".into())),
            ("10.0.0.0/8", CidrError::Size("10.0.0.0/8".into())),
            ("10.0.0.0/30", CidrError::Size("10.0.0.0/30".into())),
            (
                "10.96.0.1/12",
                CidrError::NotNetwork("10.96.0.1/12".into(), "10.96.0.0/12".into()),
            ),
        ] {
            assert_eq!(text.parse::<ServiceCidr>(), Err(error), "{text}");
        }
    }

    #[test]
    fn a_pick_is_never_taken_nor_reserved_and_fills_the_band_last() {
        let cidr: ServiceCidr = "192.168.7.0/28".parse().unwrap();
        // 14 usable, the first kept: the band is all of it but the first.
        let mut taken = Taken::default();
        let mut seen = HashSet::new();
        while let Some(offset) = pick(cidr, &taken) {
            assert!((2..15).contains(&offset), "{offset}");
            assert!(seen.insert(offset));
            taken.pending.insert(offset);
        }
        assert_eq!(seen.len(), 13);
        let cidr: ServiceCidr = "10.0.0.0/22".parse().unwrap();
        let mut taken = Taken::default();
        // 959 above the band (64..1023).
        for _ in 0..(1023 - 64) {
            let offset = pick(cidr, &taken).unwrap();
            assert!(offset >= cidr.band(), "above the band first: {offset}");
            taken.held.insert(offset);
        }
        let offset = pick(cidr, &taken).unwrap();
        assert!((2..cidr.band()).contains(&offset), "{offset}");
    }

    #[test]
    fn an_update_keeps_what_was_allocated() {
        let current = json!({"spec": {"type": "NodePort", "clusterIP": "10.96.0.20",
            "clusterIPs": ["10.96.0.20"], "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080},
                {"port": 53, "protocol": "UDP", "nodePort": 30053}]}});
        let mut replaced = json!({"spec": {"type": "NodePort", "ports": [
            {"port": 53, "protocol": "UDP"}, {"port": 80, "protocol": "TCP"}, {"port": 81}]}});
        keep_allocated(&mut replaced, &current);
        assert_eq!(
            replaced,
            json!({"spec": {"type": "NodePort", "clusterIP": "10.96.0.20",
                "clusterIPs": ["10.96.0.20"], "ports": [
                    {"port": 53, "protocol": "UDP", "nodePort": 30053},
                    {"port": 80, "protocol": "TCP", "nodePort": 30080}, {"port": 81}]}})
        );
        // To ExternalName: nothing kept; to ClusterIP: the address, not the node ports.
        let mut external = json!({"spec": {"type": "ExternalName", "externalName": "a.example"}});
        keep_allocated(&mut external, &current);
        assert_eq!(external["spec"].get("clusterIP"), None);
        let mut plain = json!({"spec": {"type": "ClusterIP", "ports": [{"port": 80}]}});
        keep_allocated(&mut plain, &current);
        assert_eq!(plain["spec"]["clusterIP"], "10.96.0.20");
        assert_eq!(plain["spec"]["ports"][0].get("nodePort"), None);
    }

    #[test]
    fn node_port_ranges_parse_as_kube_apiserver_reads_them() {
        let range: NodePortRange = DEFAULT_NODE_PORT_RANGE.parse().unwrap();
        assert_eq!(range, NodePortRange::default());
        assert!(range.contains(30000) && range.contains(32767));
        assert!(!range.contains(29999) && !range.contains(32768));
        assert_eq!("30000+2767".parse::<NodePortRange>(), Ok(range));
        assert_eq!(
            "8080".parse::<NodePortRange>().unwrap().to_string(),
            "8080-8080"
        );
        for bad in [
            "",
            "30000-",
            "-1",
            "a-b",
            "0-100",
            "30000-70000",
            "1-2-3",
            "1+2-3",
        ] {
            assert!(
                matches!(bad.parse::<NodePortRange>(), Err(PortRangeError::Syntax(_))),
                "{bad}"
            );
        }
        assert_eq!(
            "32767-30000".parse::<NodePortRange>(),
            Err(PortRangeError::Reversed("32767-30000".into()))
        );
    }

    #[test]
    fn a_port_pick_is_never_taken_and_fills_the_band_last() {
        let range: NodePortRange = "31000-31099".parse().unwrap();
        assert_eq!(range.band(), 16);
        let mut taken = Taken::default();
        for _ in 0..84 {
            let port = pick_port(range, &taken).unwrap();
            assert!(
                (31016..31100).contains(&port),
                "above the band first: {port}"
            );
            assert!(taken.pending.insert(port));
        }
        for _ in 0..16 {
            let port = pick_port(range, &taken).unwrap();
            assert!((31000..31016).contains(&port), "{port}");
            assert!(taken.held.insert(port));
        }
        assert_eq!(pick_port(range, &taken), None);
    }

    #[test]
    fn a_change_to_cluster_ip_drops_the_node_ports_sent_back() {
        let current = json!({"spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.20",
            "externalTrafficPolicy": "Local", "healthCheckNodePort": 30999,
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}});
        let mut sent_back = json!({"spec": {"type": "ClusterIP", "clusterIP": "10.96.0.20",
            "externalTrafficPolicy": "Local", "healthCheckNodePort": 30999,
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}});
        keep_allocated(&mut sent_back, &current);
        assert_eq!(sent_back["spec"]["ports"][0].get("nodePort"), None);
        assert_eq!(sent_back["spec"].get("healthCheckNodePort"), None);
        // A new one is left, for validation to refuse.
        let mut new = json!({"spec": {"type": "ClusterIP",
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30081}]}});
        keep_allocated(&mut new, &current);
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30081);
    }
}

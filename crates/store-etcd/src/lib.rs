//! Flotilla's etcd store: the [`Store`] trait on etcd's own revisions, compare-and-swap,
//! watches and compaction, every key under one prefix so that one etcd holds several hubs.
//!
//! ```text
//!  store key K ──► etcd key ROOT + K          ROOT = PREFIX + "/"  (default /flotilla/)
//!  ROOT itself: the marker ("flotilla-store schema=1"); its create revision is BASE
//!  store revision R ◄──► etcd revision BASE + R   (0 = the store just claimed: empty)
//!
//!  create  txn: create_revision(ROOT+K) = 0          ? put             : get
//!  update  txn: mod_revision(ROOT+K) = BASE+expected  ? put             : get
//!  delete  txn: mod_revision = … (or exists)         ? delete(prev_kv) : get
//!  list    range [ROOT+P, end(ROOT+P)) at a revision, limit, `more` for the next page
//!  watch   etcd watch of the range from BASE+since+1 with prev_kv, created in etcd before
//!          watch() returns; resumed after a lost connection from the last revision
//!          delivered
//!  compact etcd compact(BASE+R)
//! ```
//!
//! **Revisions.** The store's revisions are etcd's, counted from the revision at which the
//! store's prefix was claimed (the marker's create revision), so a new store starts at 0
//! as every backend does and its first write is 1. A refused write takes none (a
//! transaction whose comparison fails writes nothing), so on an etcd of its own the
//! store's revisions are consecutive. On an etcd shared with others (several hubs under
//! their own prefixes, or anything else) etcd's one counter moves with their writes too:
//! the store's revisions then skip theirs, which the [`Store`] trait allows (strictly
//! increasing, gap-free watches, not consecutive numbers). Compaction is etcd's, and so
//! global: every hub's compaction compacts the whole etcd, as kube-apiservers sharing an
//! etcd do; each compacts to a revision one interval old.
//!
//! **The prefix is claimed** by a transaction that writes the marker only if no key at
//! all is under the prefix; a prefix holding keys without the marker is refused
//! ([`OpenFailure::Foreign`]), a marker of a newer schema too
//! ([`OpenFailure::NewerSchema`]). Prefixes of two hubs must not nest (`/a` and `/a/b`).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, Identity,
    KvClient, TlsOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use flotilla_store::{
    Bytes, Error, EventKind, KeyValue, ListOptions, ListPage, OpenFailure, Result, Revision, Store,
    WatchEvent, WatchStream,
};
use futures_util::StreamExt;
use tracing::{debug, info};

mod members;
use members::Members;

/// The schema this build writes into the marker, and the newest it understands.
pub const SCHEMA_VERSION: i64 = 1;

/// The marker's value: what a Flotilla store's prefix holds at its root.
fn marker_value(version: i64) -> String {
    format!("flotilla-store schema={version}")
}

/// The schema version of a marker's value, or `None` if it is not a Flotilla marker.
fn marker_version(value: &[u8]) -> Option<i64> {
    std::str::from_utf8(value)
        .ok()?
        .strip_prefix("flotilla-store schema=")?
        .parse()
        .ok()
}

/// The TLS files of an etcd connection (etcdctl's `--cacert`, `--cert`, `--key`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA that signed the servers' certificates (PEM).
    pub ca: Option<PathBuf>,
    /// The client certificate (PEM), with `key`.
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub key: Option<PathBuf>,
}

impl TlsFiles {
    fn any(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }
}

/// How an [`EtcdStore`] is opened.
#[derive(Clone, Debug)]
pub struct Config {
    /// `host:port` of each member.
    pub endpoints: Vec<String>,
    /// The key prefix every key of the store lives under (no trailing `/`).
    pub prefix: String,
    /// TLS, when any file is given (the endpoints are then `https`).
    pub tls: TlsFiles,
    /// How long connecting and each request may take.
    pub timeout: Duration,
    /// The largest value accepted, in bytes (etcd refuses values past its own
    /// `--max-request-bytes`, 1.5 MiB by default, too).
    pub max_value_size: usize,
}

/// The prefix of `etcd://` URLs without one.
pub const DEFAULT_PREFIX: &str = "/flotilla";

impl Config {
    /// Reads `etcd://h1:2379,h2:2379[/prefix]`.
    pub fn from_url(url: &str) -> Result<Self> {
        let invalid = |why: String| Error::Open {
            path: url.into(),
            reason: OpenFailure::Invalid(why),
            source: None,
        };
        let rest = url
            .strip_prefix("etcd://")
            .ok_or_else(|| invalid("an etcd URL starts with etcd://".into()))?;
        let (hosts, prefix) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, DEFAULT_PREFIX),
        };
        let prefix = prefix.trim_end_matches('/');
        let prefix = if prefix.is_empty() {
            DEFAULT_PREFIX
        } else {
            prefix
        };
        let mut endpoints = Vec::new();
        for host in hosts.split(',') {
            let (name, port) = host
                .rsplit_once(':')
                .ok_or_else(|| invalid(format!("the endpoint {host:?} has no port (HOST:PORT)")))?;
            if name.is_empty() || port.parse::<u16>().is_err() {
                return Err(invalid(format!(
                    "the endpoint {host:?} is not HOST:PORT with a numeric port"
                )));
            }
            endpoints.push(host.to_owned());
        }
        if prefix.contains(['?', '#']) {
            return Err(invalid(format!("the prefix {prefix:?} has a query")));
        }
        Ok(Config {
            endpoints,
            prefix: prefix.to_owned(),
            tls: TlsFiles::default(),
            timeout: Duration::from_secs(10),
            max_value_size: 16 << 20,
        })
    }
}

/// A [`Store`] under one prefix of an etcd cluster.
#[derive(Clone)]
pub struct EtcdStore {
    client: Client,
    /// Which endpoints the client's balancer may pick.
    members: Members,
    /// `prefix + "/"`: every etcd key of the store starts with it; the marker is it.
    root: Arc<[u8]>,
    /// The etcd revision of the store's revision 0.
    base: i64,
    /// The newest etcd compaction revision known to be in force (0 if none seen).
    compacted: Arc<AtomicI64>,
    /// `host:port,…/prefix`, for messages.
    name: Arc<str>,
    max_value_size: usize,
    /// How long connecting and each request may take (a watch's creation too).
    timeout: Duration,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("name", &self.name)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// What an etcd error means for the store.
enum Fault {
    Compacted,
    Future,
    Other(Error),
}

fn classify(what: &str, name: &str, e: etcd_client::Error) -> Fault {
    use tonic_code::*;
    match &e {
        etcd_client::Error::GRpcStatus(status) => {
            let message = status.message();
            if message.contains("required revision has been compacted") {
                return Fault::Compacted;
            }
            if message.contains("required revision is a future revision") {
                return Fault::Future;
            }
            let text = format!("{what} on {name}");
            Fault::Other(match status.code() as i32 {
                UNAVAILABLE | DEADLINE_EXCEEDED | CANCELLED | ABORTED | UNKNOWN => {
                    Error::unavailable(text, e)
                }
                RESOURCE_EXHAUSTED if message.contains("space") => Error::NoSpace {
                    source: Box::new(e),
                },
                INVALID_ARGUMENT if message.contains("too large") => {
                    Error::InvalidArgument(message.to_owned())
                }
                _ => Error::backend(text, e),
            })
        }
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => {
            Fault::Other(Error::unavailable(format!("{what} on {name}"), e))
        }
        _ => Fault::Other(Error::backend(format!("{what} on {name}"), e)),
    }
}

/// gRPC's status codes, as numbers (tonic is not a direct dependency).
mod tonic_code {
    pub const CANCELLED: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const DEADLINE_EXCEEDED: i32 = 4;
    pub const RESOURCE_EXHAUSTED: i32 = 8;
    pub const ABORTED: i32 = 10;
    pub const UNAVAILABLE: i32 = 14;
}

/// An error and its causes, as one line (`a: b: c`), each cause once.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(next) = cause {
        let more = next.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = next.source();
    }
    text
}

/// Why opening failed, naming the endpoints.
fn open_error(name: &str, e: Error) -> Error {
    match e {
        Error::Unavailable { message, source } => Error::Open {
            path: name.into(),
            reason: OpenFailure::Unreachable(match source {
                Some(source) => format!("{message}: {}", chain(&*source)),
                None => message,
            }),
            source: None,
        },
        Error::Backend {
            message,
            source: Some(source),
        } => Error::Open {
            path: name.into(),
            reason: OpenFailure::Refused(format!("{message}: {}", chain(&*source))),
            source: None,
        },
        other => other,
    }
}

fn read_file(name: &str, path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::Open {
        path: name.into(),
        reason: OpenFailure::Invalid(format!("{}: {e}", path.display())),
        source: None,
    })
}

impl EtcdStore {
    /// Opens the store at `url` (`etcd://h1:2379,h2:2379[/prefix]`) without TLS.
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_with(Config::from_url(url)?).await
    }

    /// Connects, and claims the prefix or checks that it is a Flotilla store's.
    pub async fn open_with(config: Config) -> Result<Self> {
        let name = format!("etcd://{}{}", config.endpoints.join(","), config.prefix);
        let scheme = if config.tls.any() { "https" } else { "http" };
        let endpoints: Vec<String> = config
            .endpoints
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect();
        let mut options = ConnectOptions::new()
            .with_connect_timeout(config.timeout)
            .with_timeout(config.timeout)
            .with_keep_alive(Duration::from_secs(10), config.timeout);
        if config.tls.any() {
            let mut tls = TlsOptions::new();
            if let Some(ca) = &config.tls.ca {
                tls = tls.ca_certificate(Certificate::from_pem(read_file(&name, ca)?));
            }
            match (&config.tls.cert, &config.tls.key) {
                (Some(cert), Some(key)) => {
                    tls = tls.identity(Identity::from_pem(
                        read_file(&name, cert)?,
                        read_file(&name, key)?,
                    ));
                }
                (None, None) => {}
                _ => {
                    return Err(Error::Open {
                        path: name.into(),
                        reason: OpenFailure::Invalid(
                            "--etcd-certfile and --etcd-keyfile go together".into(),
                        ),
                        source: None,
                    });
                }
            }
            options = options.with_tls(tls);
        }
        let connect = Client::connect(endpoints.clone(), Some(options));
        let client = match tokio::time::timeout(config.timeout, connect).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                let e = match classify("connect", &name, e) {
                    Fault::Other(e) => e,
                    _ => Error::Closed,
                };
                return Err(open_error(&name, e));
            }
            Err(_) => {
                return Err(Error::Open {
                    path: name.into(),
                    reason: OpenFailure::Unreachable(format!(
                        "no answer within {:?}",
                        config.timeout
                    )),
                    source: None,
                });
            }
        };
        let root: Arc<[u8]> = format!("{}/", config.prefix).into_bytes().into();
        let claim = tokio::time::timeout(config.timeout, claim(client.clone(), &root, &name));
        let base = match claim.await {
            Ok(result) => result.map_err(|e| open_error(&name, e))?,
            Err(_) => {
                return Err(Error::Open {
                    path: name.into(),
                    reason: OpenFailure::Unreachable(format!(
                        "no answer within {:?}",
                        config.timeout
                    )),
                    source: None,
                });
            }
        };
        info!(store = %name, base, "store open");
        let members = Members::new(client.clone(), &endpoints);
        Ok(EtcdStore {
            client,
            members,
            root,
            base,
            compacted: Arc::new(AtomicI64::new(0)),
            name: name.into(),
            max_value_size: config.max_value_size,
            timeout: config.timeout,
        })
    }

    fn fail(&self, what: &str, e: etcd_client::Error) -> Error {
        self.check_members(&e);
        match classify(what, &self.name, e) {
            Fault::Other(e) => e,
            Fault::Compacted => Error::Backend {
                message: format!("{what} on etcd {}: compacted", self.name),
                source: None,
            },
            Fault::Future => Error::Backend {
                message: format!("{what} on etcd {}: a future revision", self.name),
                source: None,
            },
        }
    }

    /// A failed read at `revision`: compacted and future revisions named as the store's.
    async fn read_fail(&self, what: &str, revision: Revision, e: etcd_client::Error) -> Error {
        self.check_members(&e);
        match classify(what, &self.name, e) {
            Fault::Compacted => match self.compacted_revision().await {
                Ok(compacted) => Error::Compacted {
                    requested: revision,
                    compacted,
                },
                Err(e) => e,
            },
            Fault::Future => match self.current_revision().await {
                Ok(current) => Error::FutureRevision {
                    requested: revision,
                    current,
                },
                Err(e) => e,
            },
            Fault::Other(e) => e,
        }
    }

    /// After an endpoint could not be reached: the endpoints are checked (in the
    /// background), so that the balancer stops picking a member that is down.
    fn check_members(&self, e: &etcd_client::Error) {
        if self.members.len() > 1 && members::unreachable(e) {
            debug!(store = %self.name, error = %e, "an etcd endpoint did not answer; checking them");
            let members = self.members.clone();
            tokio::spawn(async move { members.check().await });
        }
    }

    /// Sends a KV request; one refused on connecting (it never reached etcd) is sent again
    /// once the endpoints were checked, at most once per endpoint.
    async fn send<T, F, Fut>(&self, request: F) -> std::result::Result<T, etcd_client::Error>
    where
        F: Fn(KvClient) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let mut again = 0;
        loop {
            match request(self.client.kv_client()).await {
                Err(e) if again < self.members.len() && members::refused(&e) => {
                    again += 1;
                    debug!(store = %self.name, error = %e, "an etcd endpoint refused; checking them, then again");
                    self.members.check().await;
                }
                result => return result,
            }
        }
    }

    fn key(&self, key: &[u8]) -> Vec<u8> {
        [&self.root[..], key].concat()
    }

    /// The etcd range of a store prefix: the empty prefix starts past the marker.
    fn range(&self, prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let start = if prefix.is_empty() {
            self.key(b"\0")
        } else {
            self.key(prefix)
        };
        let end = flotilla_store::prefix_end(&self.key(prefix))
            .expect("the root is not all 0xff bytes, so its range has an end");
        (start, end)
    }

    fn to_etcd(&self, revision: Revision) -> i64 {
        i64::try_from(revision.get())
            .ok()
            .and_then(|r| r.checked_add(self.base))
            .unwrap_or(i64::MAX)
    }

    fn to_store(&self, revision: i64) -> Revision {
        Revision::new(u64::try_from(revision - self.base).unwrap_or(0))
    }

    fn kv(&self, kv: &etcd_client::KeyValue) -> KeyValue {
        KeyValue {
            key: Bytes::copy_from_slice(kv.key().get(self.root.len()..).unwrap_or_default()),
            value: Bytes::copy_from_slice(kv.value()),
            create_revision: self.to_store(kv.create_revision()),
            mod_revision: self.to_store(kv.mod_revision()),
        }
    }

    fn header_revision(&self, header: Option<&etcd_client::ResponseHeader>) -> Result<Revision> {
        header
            .map(|h| self.to_store(h.revision()))
            .ok_or_else(|| Error::Backend {
                message: format!("{} answered without a header", self.name),
                source: None,
            })
    }

    fn check_key(key: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(Error::InvalidArgument("the key is empty".into()));
        }
        Ok(())
    }

    fn check_value(&self, value: &Bytes) -> Result<()> {
        if value.len() > self.max_value_size {
            return Err(Error::InvalidArgument(format!(
                "the value is {} bytes, over the limit of {}",
                value.len(),
                self.max_value_size
            )));
        }
        Ok(())
    }

    /// A conditional write: `when` holds → `then`, else the key is read back.
    async fn txn(&self, key: &[u8], when: Compare, then: TxnOp) -> Result<Written> {
        let etcd_key = self.key(key);
        let txn = Txn::new()
            .when([when])
            .and_then([then])
            .or_else([TxnOp::get(etcd_key, None)]);
        let response = self
            .send(|mut kv| {
                let txn = txn.clone();
                async move { kv.txn(txn).await }
            })
            .await
            .map_err(|e| self.fail("write", e))?;
        let revision = self.header_revision(response.header())?;
        let first = response.op_responses().into_iter().next();
        if response.succeeded() {
            let deleted = match first {
                Some(TxnOpResponse::Delete(d)) => d.prev_kvs().first().map(|kv| self.kv(kv)),
                _ => None,
            };
            return Ok(Written::Done(revision, deleted));
        }
        let current = match first {
            Some(TxnOpResponse::Get(g)) => g.kvs().first().map(|kv| self.kv(kv)),
            _ => None,
        };
        Ok(Written::Refused(current))
    }

    /// The etcd compaction revision in force, exactly.
    async fn etcd_compacted(&self) -> Result<i64> {
        // A read at the newest compaction seen succeeds only if no newer one happened.
        let known = self.compacted.load(Ordering::Acquire).max(1);
        let probe = self
            .send(|mut kv| async move {
                kv.get(
                    &self.root[..],
                    Some(GetOptions::new().with_revision(known).with_count_only()),
                )
                .await
            })
            .await;
        match probe {
            Ok(_) => return Ok(if known > 1 { known } else { 0 }),
            Err(e) => match classify("read", &self.name, e) {
                Fault::Compacted => {}
                Fault::Future => return Ok(0),
                Fault::Other(e) => return Err(e),
            },
        }
        // A watch from before it is cancelled with the compaction's revision.
        let mut watch_client = self.client.watch_client();
        let mut stream = watch_client
            .watch(
                &self.root[..],
                Some(WatchOptions::new().with_start_revision(known)),
            )
            .await
            .map_err(|e| self.fail("watch", e))?;
        let wait = async {
            while let Some(response) = stream.next().await {
                let response = response.map_err(|e| self.fail("watch", e))?;
                if response.compact_revision() > 0 {
                    return Ok(response.compact_revision());
                }
            }
            Err(Error::Unavailable {
                message: format!("{} ended a watch", self.name),
                source: None,
            })
        };
        let compacted = tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .map_err(|_| Error::Unavailable {
                message: format!("{} did not say its compacted revision", self.name),
                source: None,
            })??;
        self.compacted.fetch_max(compacted, Ordering::AcqRel);
        Ok(compacted)
    }
}

/// A conditional write's outcome.
enum Written {
    /// Applied at this revision (with the deleted key-value for a delete).
    Done(Revision, Option<KeyValue>),
    /// The comparison failed; the key as it is now.
    Refused(Option<KeyValue>),
}

/// Claims `root` for a store, or checks it is one's; the etcd revision of its revision 0.
async fn claim(mut client: Client, root: &[u8], name: &str) -> Result<i64> {
    let fail = |e| match classify("claim the prefix", name, e) {
        Fault::Other(e) => e,
        _ => Error::Closed,
    };
    let end = flotilla_store::prefix_end(root).expect("the root has an end");
    for _ in 0..3 {
        let marker = client.get(root, None).await.map_err(fail)?;
        if let Some(kv) = marker.kvs().first() {
            return match marker_version(kv.value()) {
                Some(found) if found > SCHEMA_VERSION => Err(Error::Open {
                    path: name.into(),
                    reason: OpenFailure::NewerSchema {
                        found,
                        supported: SCHEMA_VERSION,
                    },
                    source: None,
                }),
                Some(_) => Ok(kv.create_revision()),
                None => Err(Error::Open {
                    path: name.into(),
                    reason: OpenFailure::Foreign,
                    source: None,
                }),
            };
        }
        // Claim it only if nothing at all is under the prefix.
        let txn = Txn::new()
            .when([Compare::create_revision(root, CompareOp::Equal, 0).with_range(end.clone())])
            .and_then([TxnOp::put(root, marker_value(SCHEMA_VERSION), None)]);
        let response = client.txn(txn).await.map_err(fail)?;
        if response.succeeded() {
            let header = response.header().ok_or_else(|| Error::Backend {
                message: format!("{name} answered without a header"),
                source: None,
            })?;
            debug!(store = %name, revision = header.revision(), "prefix claimed");
            return Ok(header.revision());
        }
        // Either keys of someone else, or another hub claimed it meanwhile: look again.
        let inside = client
            .get(
                root,
                Some(GetOptions::new().with_range(end.clone()).with_count_only()),
            )
            .await
            .map_err(fail)?;
        let marker = client.get(root, None).await.map_err(fail)?;
        if marker.kvs().is_empty() && inside.count() > 0 {
            return Err(Error::Open {
                path: name.into(),
                reason: OpenFailure::Foreign,
                source: None,
            });
        }
    }
    Err(Error::Unavailable {
        message: format!("{name}: the prefix could not be claimed"),
        source: None,
    })
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &[u8], revision: Option<Revision>) -> Result<Option<KeyValue>> {
        Self::check_key(key)?;
        let options = revision.map(|r| GetOptions::new().with_revision(self.to_etcd(r)));
        let response = match self
            .send(|mut kv| {
                let options = options.clone();
                async move { kv.get(self.key(key), options).await }
            })
            .await
        {
            Ok(response) => response,
            Err(e) => {
                return Err(self.read_fail("get", revision.unwrap_or_default(), e).await);
            }
        };
        Ok(response.kvs().first().map(|kv| self.kv(kv)))
    }

    async fn list(&self, prefix: &[u8], options: ListOptions) -> Result<ListPage> {
        let (mut start, end) = self.range(prefix);
        if let Some(after) = &options.after {
            let past = [&self.root[..], after, b"\0"].concat();
            if past > start {
                start = past;
            }
        }
        let mut get = GetOptions::new().with_range(end);
        if let Some(revision) = options.revision {
            get = get.with_revision(self.to_etcd(revision));
        }
        if options.limit > 0 {
            get = get.with_limit(i64::try_from(options.limit).unwrap_or(i64::MAX));
        }
        let response = match self
            .send(|mut kv| {
                let (start, get) = (start.clone(), get.clone());
                async move { kv.get(start, Some(get)).await }
            })
            .await
        {
            Ok(response) => response,
            Err(e) => {
                return Err(self
                    .read_fail("list", options.revision.unwrap_or_default(), e)
                    .await);
            }
        };
        let revision = match options.revision {
            Some(revision) => revision,
            None => self.header_revision(response.header())?,
        };
        let kvs: Vec<KeyValue> = response.kvs().iter().map(|kv| self.kv(kv)).collect();
        let next = if response.more() {
            kvs.last().map(|kv| kv.key.clone())
        } else {
            None
        };
        Ok(ListPage {
            kvs,
            revision,
            next,
        })
    }

    async fn count(&self, prefix: &[u8]) -> Result<u64> {
        let (start, end) = self.range(prefix);
        let response = self
            .send(|mut kv| {
                let (start, end) = (start.clone(), end.clone());
                async move {
                    kv.get(
                        start,
                        Some(GetOptions::new().with_range(end).with_count_only()),
                    )
                    .await
                }
            })
            .await
            .map_err(|e| self.fail("count", e))?;
        Ok(u64::try_from(response.count()).unwrap_or(0))
    }

    async fn create(&self, key: &[u8], value: Bytes) -> Result<Revision> {
        Self::check_key(key)?;
        self.check_value(&value)?;
        let etcd_key = self.key(key);
        let when = Compare::create_revision(etcd_key.clone(), CompareOp::Equal, 0);
        match self
            .txn(key, when, TxnOp::put(etcd_key, value.to_vec(), None))
            .await?
        {
            Written::Done(revision, _) => Ok(revision),
            Written::Refused(_) => Err(Error::AlreadyExists {
                key: Bytes::copy_from_slice(key),
            }),
        }
    }

    async fn update(&self, key: &[u8], value: Bytes, expected: Revision) -> Result<Revision> {
        Self::check_key(key)?;
        self.check_value(&value)?;
        let etcd_key = self.key(key);
        let when =
            Compare::mod_revision(etcd_key.clone(), CompareOp::Equal, self.to_etcd(expected));
        match self
            .txn(key, when, TxnOp::put(etcd_key, value.to_vec(), None))
            .await?
        {
            Written::Done(revision, _) => Ok(revision),
            Written::Refused(None) => Err(Error::NotFound {
                key: Bytes::copy_from_slice(key),
            }),
            Written::Refused(Some(current)) => Err(Error::Conflict {
                expected,
                current: Box::new(current),
            }),
        }
    }

    async fn delete(&self, key: &[u8], expected: Option<Revision>) -> Result<(Revision, KeyValue)> {
        Self::check_key(key)?;
        let etcd_key = self.key(key);
        let when = match expected {
            Some(expected) => {
                Compare::mod_revision(etcd_key.clone(), CompareOp::Equal, self.to_etcd(expected))
            }
            None => Compare::create_revision(etcd_key.clone(), CompareOp::Greater, 0),
        };
        let delete = TxnOp::delete(
            etcd_key,
            Some(etcd_client::DeleteOptions::new().with_prev_key()),
        );
        match self.txn(key, when, delete).await? {
            Written::Done(revision, Some(deleted)) => Ok((revision, deleted)),
            Written::Done(revision, None) => Err(Error::Backend {
                message: format!("{} deleted nothing at {revision}", self.name),
                source: None,
            }),
            Written::Refused(None) => Err(Error::NotFound {
                key: Bytes::copy_from_slice(key),
            }),
            Written::Refused(Some(current)) => Err(Error::Conflict {
                expected: expected.unwrap_or_default(),
                current: Box::new(current),
            }),
        }
    }

    async fn watch(&self, prefix: &[u8], since: Revision) -> Result<WatchStream> {
        // A watch from a compacted revision fails now, not on its first read.
        let probe = self
            .send(|mut kv| async move {
                kv.get(
                    &self.root[..],
                    Some(
                        GetOptions::new()
                            .with_revision(self.to_etcd(since).max(1))
                            .with_count_only(),
                    ),
                )
                .await
            })
            .await;
        if let Err(e) = probe {
            match classify("watch", &self.name, e) {
                Fault::Compacted => {
                    return Err(Error::Compacted {
                        requested: since,
                        compacted: self.compacted_revision().await?,
                    });
                }
                Fault::Future => {}
                Fault::Other(e) => return Err(e),
            }
        }
        let (start, end) = self.range(prefix);
        let mut feed = Feed {
            store: self.clone(),
            start,
            end,
            delivered: since,
            stream: None,
            buf: std::collections::VecDeque::new(),
            failure: None,
            done: false,
        };
        // Created in etcd now, not when the stream is first polled: etcd then follows the
        // watch from here on, and a compaction after this call does not end it (a watch
        // created later, once writes went past `since`, would have to be caught up from
        // the history, and a compaction meanwhile ends it).
        match tokio::time::timeout(self.timeout, feed.start()).await {
            Err(_) => {
                return Err(Error::Unavailable {
                    message: format!(
                        "watch on {}: not created within {:?}",
                        self.name, self.timeout
                    ),
                    source: None,
                });
            }
            Ok(Err(e)) => return Err(self.fail("watch", e)),
            Ok(Ok(Started::Following)) => {}
            Ok(Ok(Started::Ended(reason))) => {
                return Err(feed.failure.take().unwrap_or_else(|| Error::Backend {
                    message: format!("watch on {}: etcd cancelled it: {reason}", self.name),
                    source: None,
                }));
            }
        }
        Ok(Box::pin(futures_util::stream::unfold(
            feed,
            |mut feed| async move { feed.next().await.map(|item| (item, feed)) },
        )))
    }

    async fn current_revision(&self) -> Result<Revision> {
        let response = self
            .send(|mut kv| async move {
                kv.get(&self.root[..], Some(GetOptions::new().with_count_only()))
                    .await
            })
            .await
            .map_err(|e| self.fail("read the revision", e))?;
        self.header_revision(response.header())
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        Ok(self.to_store(self.etcd_compacted().await?))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let current = self.current_revision().await?;
        if revision > current {
            return Err(Error::FutureRevision {
                requested: revision,
                current,
            });
        }
        if revision <= self.compacted_revision().await? {
            return Ok(());
        }
        let at = self.to_etcd(revision);
        match self
            .send(|mut kv| async move { kv.compact(at, None).await })
            .await
        {
            Ok(_) => {
                self.compacted.fetch_max(at, Ordering::AcqRel);
                Ok(())
            }
            Err(e) => match classify("compact", &self.name, e) {
                // Someone compacted at or past it meanwhile.
                Fault::Compacted => Ok(()),
                Fault::Future => Err(Error::FutureRevision {
                    requested: revision,
                    current: self.current_revision().await?,
                }),
                Fault::Other(e) => Err(e),
            },
        }
    }
}

/// One watcher: an etcd watch of the store's range, resumed after a lost connection from
/// the last revision it delivered.
struct Feed {
    store: EtcdStore,
    start: Vec<u8>,
    end: Vec<u8>,
    /// Every change up to this store revision has been delivered.
    delivered: Revision,
    stream: Option<etcd_client::WatchStream>,
    buf: std::collections::VecDeque<WatchEvent>,
    /// The error that ends the stream once `buf` is delivered.
    failure: Option<Error>,
    done: bool,
}

/// What became of a watch [`Feed::start`] asked etcd for.
enum Started {
    /// etcd created it and follows it.
    Following,
    /// etcd ended it at once (with the reason it gave); a compaction sets `failure`.
    Ended(String),
}

impl Feed {
    async fn next(&mut self) -> Option<Result<WatchEvent>> {
        let mut backoff = Duration::from_millis(50);
        loop {
            if let Some(event) = self.buf.pop_front() {
                self.delivered = event.revision();
                return Some(Ok(event));
            }
            if let Some(e) = self.failure.take() {
                self.done = true;
                return Some(Err(e));
            }
            if self.done {
                return None;
            }
            let Some(stream) = self.stream.as_mut() else {
                match tokio::time::timeout(self.store.timeout, self.start()).await {
                    Ok(Ok(Started::Following)) => {}
                    Ok(Ok(Started::Ended(reason))) => {
                        if self.failure.is_none() {
                            debug!(%reason, "etcd cancelled the watch; retrying");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_secs(2));
                        }
                    }
                    Ok(Err(e)) => {
                        // Unreachable: try again until it is back (the watcher waits).
                        debug!(error = %e, "etcd watch could not start; retrying");
                        self.store.check_members(&e);
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                    }
                    Err(_) => {
                        debug!("etcd watch not created in time; retrying");
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                    }
                }
                continue;
            };
            match stream.next().await {
                Some(Ok(response)) => {
                    if !self.absorb(&response) {
                        self.stream = None;
                    }
                }
                Some(Err(e)) => {
                    debug!(error = %e, "etcd watch lost; resuming");
                    self.store.check_members(&e);
                    self.stream = None;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                None => {
                    self.stream = None;
                    tokio::time::sleep(backoff).await;
                }
            }
        }
    }

    /// Asks etcd for a watch from the revision after the last one delivered, and waits
    /// until etcd has created it: from then on etcd follows it and sends its changes,
    /// whether or not the stream is polled.
    async fn start(&mut self) -> Result<Started, etcd_client::Error> {
        let options = WatchOptions::new()
            .with_range(self.end.clone())
            .with_start_revision(self.store.to_etcd(self.delivered).saturating_add(1))
            .with_prev_key();
        let mut stream = self
            .store
            .client
            .watch_client()
            .watch(self.start.clone(), Some(options))
            .await?;
        loop {
            let Some(response) = stream.message().await? else {
                return Err(etcd_client::Error::WatchError(
                    "etcd closed the watch before creating it".into(),
                ));
            };
            if !self.absorb(&response) {
                return Ok(Started::Ended(response.cancel_reason().to_owned()));
            }
            if response.created() {
                self.stream = Some(stream);
                return Ok(Started::Following);
            }
        }
    }

    /// Takes in one response of etcd's watch: queues its changes; false if etcd ended the
    /// watch (with `failure` set if for a compaction).
    fn absorb(&mut self, response: &etcd_client::WatchResponse) -> bool {
        if response.compact_revision() > 0 {
            self.failure = Some(Error::Compacted {
                requested: self.delivered,
                compacted: self.store.to_store(response.compact_revision()),
            });
            return false;
        }
        if response.canceled() {
            return false;
        }
        for event in response.events() {
            if let Some(event) = self.event(event)
                && event.revision() > self.delivered
            {
                self.buf.push_back(event);
            }
        }
        true
    }

    fn event(&self, event: &etcd_client::Event) -> Option<WatchEvent> {
        let store = &self.store;
        let kv = event.kv()?;
        let prev = event.prev_kv().map(|kv| store.kv(kv));
        Some(match event.event_type() {
            EventType::Put => {
                let kv = store.kv(kv);
                let created = kv.create_revision == kv.mod_revision;
                WatchEvent {
                    kind: EventKind::Put,
                    kv,
                    prev_kv: if created { None } else { prev },
                }
            }
            EventType::Delete => {
                let prev = prev?;
                WatchEvent {
                    kind: EventKind::Delete,
                    kv: KeyValue {
                        key: prev.key.clone(),
                        value: Bytes::new(),
                        create_revision: prev.create_revision,
                        mod_revision: store.to_store(kv.mod_revision()),
                    },
                    prev_kv: Some(prev),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_endpoints_and_prefix_from_the_url() {
        let c = Config::from_url("etcd://h1:2379,h2:2380/hubs/one/").unwrap();
        assert_eq!(c.endpoints, ["h1:2379", "h2:2380"]);
        assert_eq!(c.prefix, "/hubs/one");
        let c = Config::from_url("etcd://127.0.0.1:2379").unwrap();
        assert_eq!(c.prefix, DEFAULT_PREFIX);
        for bad in [
            "etcd://h1",
            "etcd://h1:port",
            "etcd://:2379",
            "http://h:2379",
        ] {
            let e = Config::from_url(bad).unwrap_err().to_string();
            assert!(!e.contains('\n'), "{bad}: {e}");
            assert!(
                matches!(
                    Config::from_url(bad),
                    Err(Error::Open {
                        reason: OpenFailure::Invalid(_),
                        ..
                    })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn markers_name_their_schema() {
        assert_eq!(marker_version(marker_value(1).as_bytes()), Some(1));
        assert_eq!(marker_version(b"flotilla-store schema=7"), Some(7));
        assert_eq!(marker_version(b"{\"kind\":\"Pod\"}"), None);
    }
}

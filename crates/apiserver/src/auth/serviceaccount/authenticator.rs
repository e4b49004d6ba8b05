//! The ServiceAccount token authenticator: verified tokens cached briefly, what they
//! refer to checked on every request.
//!
//! ```text
//!  Bearer T ─► T in the cache? (bounded; an entry lives ≤ TTL and never past the
//!     token's exp; found by a hash of T's last bytes, T compared in full)
//!     ──no──► Issuer::is_ours(T)? (else Missing: another authenticator's token)
//!     ─► Issuer::verify (signature, iss, exp/nbf, aud) ─► cache
//!  ─► the token's references, each: store.mod_revision(key) (the store's key index, no
//!     value read; answered at once where that index is in memory) ─► None: revoked;
//!     R = the revision it last passed at (and no deletion was under way) ─► passes;
//!     another R ─► its facts at R (uid, deletion, the token a legacy Secret holds),
//!     memoised by (key, R): read once per write of the object
//!  ─► User, or Invalid(Revoked)
//! ```
//!
//! Checking by the store's own index rather than a watch-fed one means a token stops
//! working on the first request after its ServiceAccount's delete returns: a watch
//! would deliver the delete a moment later, and a TTL much later.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flotilla_store::{Revision, Store};
use serde_json::Value;

use super::{
    ALL_SERVICE_ACCOUNTS, CLUSTER_EXTRA, CREDENTIAL_ID_EXTRA, Claims, Issuer, LEEWAY_SECONDS,
    LEGACY_ISSUER, NODE_NAME_EXTRA, NODE_UID_EXTRA, POD_NAME_EXTRA, POD_UID_EXTRA, user_name,
};
use crate::api::{ROOT_CLUSTER, Verdict};
use crate::auth::{AUTHENTICATED, Authenticator, Credentials, Presented, Refusal, UserInfo};
use crate::registry::keys;

/// How long a verified token is kept without verifying its signature again.
pub const CACHE_TTL: Duration = Duration::from_secs(60);

/// The most verified tokens kept.
pub const CACHE_ENTRIES: usize = 10_000;

/// How many of a token's last bytes the cache hashes: a JWT ends in its signature, which
/// no two tokens share. The whole token is compared on a hit.
const HASHED_TAIL: usize = 32;

/// The most objects' facts kept (one per ServiceAccount, Secret or Pod tokens name).
const FACTS_ENTRIES: usize = 100_000;

/// The Secret label that revokes the legacy token in it (kube's legacy token cleaner).
const INVALID_SINCE_LABEL: &str = "kubernetes.io/legacy-token-invalid-since";

/// An object a token stays valid only while it exists.
#[derive(Debug)]
struct Reference {
    /// Its store key.
    key: Vec<u8>,
    /// `ServiceAccount shop/ci`, for the log.
    what: String,
    /// The uid the token names (empty: any).
    uid: String,
    /// For a legacy token's Secret: the digest of the token it must hold.
    token: Option<[u8; 32]>,
    /// The object's revision last found as the token names it, with no deletion under way
    /// (0: none yet): a request that finds the same revision needs no more than that.
    passed: AtomicU64,
}

/// A token whose signature and claims were verified.
#[derive(Debug)]
pub(super) struct Verified {
    user: Arc<UserInfo>,
    exp: Option<i64>,
    references: Vec<Reference>,
    /// Verified again after this.
    pub(super) until: Instant,
}

/// What the authenticator reads of an object the store holds at one revision.
#[derive(Clone, Debug, Default)]
struct Facts {
    /// Shared: the facts are cloned out of the memo on every request.
    uid: Arc<str>,
    /// `metadata.deletionTimestamp` (Unix seconds).
    deleted_at: Option<i64>,
    /// A Secret's `data.token`, hashed.
    token: Option<[u8; 32]>,
    /// A Secret labelled as no longer valid for its legacy token.
    invalidated: bool,
}

impl Facts {
    fn of(json: &[u8]) -> Facts {
        let Ok(object) = serde_json::from_slice::<Value>(json) else {
            return Facts::default();
        };
        let meta = &object["metadata"];
        let token = object["data"]["token"].as_str().and_then(|b64| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .ok()
                .map(|token| digest(&token))
        });
        Facts {
            uid: Arc::from(meta["uid"].as_str().unwrap_or("")),
            deleted_at: meta["deletionTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .map(|t| t.as_second()),
            token,
            invalidated: !meta["labels"][INVALID_SINCE_LABEL].is_null(),
        }
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
    out
}

fn unix_now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Authenticates ServiceAccount tokens of one [`Issuer`] against the objects in `store`.
pub struct Tokens {
    issuer: Arc<Issuer>,
    store: Arc<dyn Store>,
    /// Verified tokens, each kept whole (at most [`CACHE_ENTRIES`], most of a kilobyte
    /// each): a hit hashes a few bytes and compares the rest, where a digest of each
    /// request's token would read all of it through SHA-256.
    verified: RwLock<HashMap<Box<str>, Arc<Verified>, Tail>>,
    facts: Mutex<HashMap<Vec<u8>, (Revision, Facts)>>,
}

/// Hashes a token's last [`HASHED_TAIL`] bytes with a per-process random key (SipHash,
/// as `HashMap`'s default): which bucket a token falls in cannot be foretold, and only
/// verified tokens are kept, so no one can fill one bucket.
#[derive(Default)]
struct Tail(RandomState);

impl BuildHasher for Tail {
    type Hasher = TailHasher;

    fn build_hasher(&self) -> TailHasher {
        TailHasher(self.0.build_hasher())
    }
}

struct TailHasher(std::hash::DefaultHasher);

impl Hasher for TailHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0
            .write(&bytes[bytes.len().saturating_sub(HASHED_TAIL)..]);
    }

    fn finish(&self) -> u64 {
        self.0.finish()
    }
}

impl Tokens {
    /// Tokens of `issuer`, checked against `store`.
    pub fn new(issuer: Arc<Issuer>, store: Arc<dyn Store>) -> Self {
        Tokens {
            issuer,
            store,
            verified: RwLock::default(),
            facts: Mutex::default(),
        }
    }

    /// The verified token `key`, if cached and not due for verifying again.
    fn cached(&self, key: &str, at: Instant) -> Option<Arc<Verified>> {
        // Read-locked: requests of many clients find their tokens side by side.
        match self
            .verified
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
        {
            Some(found) if found.until > at => return Some(found.clone()),
            Some(_) => {}
            None => return None,
        }
        let mut cache = self
            .verified
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if cache.get(key).is_some_and(|found| found.until <= at) {
            cache.remove(key);
        }
        None
    }

    /// How many verified tokens are cached.
    #[cfg(test)]
    pub(super) fn cached_count(&self) -> usize {
        self.verified
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub(super) fn remember(&self, key: &str, verified: Arc<Verified>, at: Instant) {
        let mut cache = self
            .verified
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= CACHE_ENTRIES {
            cache.retain(|_, v| v.until > at);
            if cache.len() >= CACHE_ENTRIES {
                // Still full of live entries: start over rather than scan for the oldest.
                cache.clear();
            }
        }
        cache.insert(key.into(), verified);
    }

    /// Verifies `token` at `now` into the user it names and what it depends on.
    pub(super) fn verify(&self, token: &str, now: i64, at: Instant) -> Result<Verified, Refusal> {
        let claims = self.issuer.verify(token, now)?;
        let (user, references) = if claims.iss == LEGACY_ISSUER {
            legacy_user(&claims, token)?
        } else {
            bound_user(&claims)?
        };
        // Never kept past its expiry.
        let ttl = match claims.exp {
            Some(exp) => {
                let left = (exp + LEEWAY_SECONDS - now).max(0) as u64;
                CACHE_TTL.min(Duration::from_secs(left))
            }
            None => CACHE_TTL,
        };
        Ok(Verified {
            user: Arc::new(user),
            exp: claims.exp,
            references,
            until: at + ttl,
        })
    }

    /// Whether every object `verified` depends on is known at once to be as it was when it
    /// last passed: at that revision, as the store's index in memory says
    /// ([`Store::mod_revision_now`]). When not (changed, gone, or a store that must be
    /// read), [`Tokens::check`] decides.
    fn passes_now(&self, verified: &Verified) -> bool {
        verified.references.iter().all(|reference| {
            matches!(
                self.store.mod_revision_now(&reference.key),
                Some(Ok(Some(revision))) if reference.passed.load(Ordering::Relaxed) == revision.get()
            )
        })
    }

    /// Whether every object `verified` depends on still exists as the token names it.
    pub(super) async fn check(&self, verified: &Verified, now: i64) -> Result<(), Refusal> {
        for reference in &verified.references {
            let revision = self
                .store
                .mod_revision(&reference.key)
                .await
                .map_err(|e| Refusal::Revoked(format!("{} cannot be read: {e}", reference.what)))?
                .ok_or_else(|| Refusal::Revoked(format!("{} does not exist", reference.what)))?;
            // Unchanged since it last passed, and not being deleted then: it still passes.
            if reference.passed.load(Ordering::Relaxed) == revision.get() {
                continue;
            }
            let facts = self.facts(&reference.key, revision).await?;
            if !reference.uid.is_empty() && *facts.uid != *reference.uid {
                return Err(Refusal::Revoked(format!(
                    "{} was re-created (uid {}, the token names {})",
                    reference.what, facts.uid, reference.uid
                )));
            }
            // Deleted more than the leeway ago (kube lets a Pod's token outlive the
            // start of its graceful deletion by that long).
            if facts.deleted_at.is_some_and(|at| at < now - LEEWAY_SECONDS) {
                return Err(Refusal::Revoked(format!(
                    "{} is being deleted",
                    reference.what
                )));
            }
            if let Some(token) = &reference.token {
                if facts.token.as_ref() != Some(token) {
                    return Err(Refusal::Revoked(format!(
                        "{} no longer holds the token",
                        reference.what
                    )));
                }
                if facts.invalidated {
                    return Err(Refusal::Revoked(format!(
                        "{} is labelled {INVALID_SINCE_LABEL}",
                        reference.what
                    )));
                }
            }
            // A deletion under way is judged again on each request: the leeway runs out.
            if facts.deleted_at.is_none() {
                reference.passed.store(revision.get(), Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// The facts of the object under `key` at `revision`: memoised, else read.
    async fn facts(&self, key: &[u8], revision: Revision) -> Result<Facts, Refusal> {
        if let Some((at, facts)) = self
            .facts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            && *at == revision
        {
            return Ok(facts.clone());
        }
        let read = self
            .store
            .get(key, None)
            .await
            .map_err(|e| Refusal::Revoked(format!("cannot be read: {e}")))?;
        let (value, revision): (Bytes, Revision) = match read {
            Some(kv) => (kv.value, kv.mod_revision),
            None => return Err(Refusal::Revoked("deleted".into())),
        };
        let facts = Facts::of(&value);
        let mut memo = self.facts.lock().unwrap_or_else(PoisonError::into_inner);
        if memo.len() >= FACTS_ENTRIES {
            memo.clear();
        }
        memo.insert(key.to_vec(), (revision, facts.clone()));
        Ok(facts)
    }
}

impl Authenticator for Tokens {
    fn authenticate<'a>(&'a self, presented: &'a Presented<'a>) -> Verdict<'a, Credentials> {
        let Some(token) = presented.bearer else {
            return Verdict::Now(Credentials::Missing);
        };
        let at = Instant::now();
        let now = unix_now();
        let verified = match self.cached(token, at) {
            Some(verified) => verified,
            None => {
                if !self.issuer.is_ours(token) {
                    return Verdict::Now(Credentials::Missing);
                }
                match self.verify(token, now, at) {
                    Ok(verified) => {
                        let verified = Arc::new(verified);
                        self.remember(token, verified.clone(), at);
                        verified
                    }
                    Err(refusal) => return Verdict::Now(Credentials::Invalid(refusal)),
                }
            }
        };
        if verified.exp.is_some_and(|exp| now > exp + LEEWAY_SECONDS) {
            return Verdict::Now(Credentials::Invalid(Refusal::Expired));
        }
        // The usual request: its token's objects unchanged since they last passed.
        if self.passes_now(&verified) {
            return Verdict::Now(Credentials::User(verified.user.clone()));
        }
        Verdict::Later(Box::pin(async move {
            match self.check(&verified, now).await {
                Ok(()) => Credentials::User(verified.user.clone()),
                Err(refusal) => Credentials::Invalid(refusal),
            }
        }))
    }
}

/// The logical cluster a token was issued in (the root for a token that names none).
fn cluster_of(claims: &Claims) -> &str {
    claims
        .flotilla
        .as_ref()
        .map_or(ROOT_CLUSTER, |f| f.cluster.as_str())
}

fn reference(
    kind: &str,
    plural: &str,
    cluster: &str,
    namespace: Option<&str>,
    name: &str,
    uid: &str,
) -> Reference {
    Reference {
        key: keys::key_of("", plural, cluster, namespace, name),
        what: match namespace {
            Some(namespace) => format!("{kind} {namespace}/{name}"),
            None => format!("{kind} {name}"),
        },
        uid: uid.to_owned(),
        token: None,
        passed: AtomicU64::new(0),
    }
}

fn service_account_user(cluster: &str, namespace: &str, name: &str, uid: &str) -> UserInfo {
    let mut extra = BTreeMap::new();
    extra.insert(CLUSTER_EXTRA.to_owned(), vec![cluster.to_owned()]);
    UserInfo {
        name: user_name(namespace, name),
        uid: uid.to_owned(),
        groups: vec![
            ALL_SERVICE_ACCOUNTS.to_owned(),
            format!("{ALL_SERVICE_ACCOUNTS}:{namespace}"),
            AUTHENTICATED.to_owned(),
        ],
        extra,
    }
}

/// The user of a bound token and what it depends on.
fn bound_user(claims: &Claims) -> Result<(UserInfo, Vec<Reference>), Refusal> {
    let malformed = |why: &str| Refusal::Malformed(why.to_owned());
    let k = claims
        .kubernetes
        .as_ref()
        .ok_or_else(|| malformed("no kubernetes.io claim"))?;
    let sa = &k.serviceaccount;
    if k.namespace.is_empty() || sa.name.is_empty() || sa.uid.is_empty() {
        return Err(malformed("kubernetes.io names no ServiceAccount"));
    }
    if claims.sub != user_name(&k.namespace, &sa.name) {
        return Err(malformed("sub is not the ServiceAccount's user"));
    }
    let cluster = cluster_of(claims);
    let ns = Some(k.namespace.as_str());
    let mut user = service_account_user(cluster, &k.namespace, &sa.name, &sa.uid);
    let mut references = vec![reference(
        "ServiceAccount",
        "serviceaccounts",
        cluster,
        ns,
        &sa.name,
        &sa.uid,
    )];
    if let Some(jti) = &claims.jti {
        user.extra
            .insert(CREDENTIAL_ID_EXTRA.to_owned(), vec![format!("JTI={jti}")]);
    }
    if let Some(secret) = &k.secret {
        references.push(reference(
            "Secret",
            "secrets",
            cluster,
            ns,
            &secret.name,
            &secret.uid,
        ));
    }
    if let Some(pod) = &k.pod {
        references.push(reference("Pod", "pods", cluster, ns, &pod.name, &pod.uid));
        user.extra
            .insert(POD_NAME_EXTRA.to_owned(), vec![pod.name.clone()]);
        user.extra
            .insert(POD_UID_EXTRA.to_owned(), vec![pod.uid.clone()]);
    }
    if let Some(node) = &k.node {
        user.extra
            .insert(NODE_NAME_EXTRA.to_owned(), vec![node.name.clone()]);
        if !node.uid.is_empty() {
            user.extra
                .insert(NODE_UID_EXTRA.to_owned(), vec![node.uid.clone()]);
        }
        // A token bound to the Node itself lives as long as the Node; one bound to a
        // Pod on it, as long as the Pod.
        if k.pod.is_none() {
            references.push(reference(
                "Node", "nodes", cluster, None, &node.name, &node.uid,
            ));
        }
    }
    Ok((user, references))
}

/// The user of a legacy token and what it depends on: its Secret, which must still hold
/// it, and its ServiceAccount.
fn legacy_user(claims: &Claims, token: &str) -> Result<(UserInfo, Vec<Reference>), Refusal> {
    let field = |value: &Option<String>, name: &str| match value.as_deref() {
        Some(value) if !value.is_empty() => Ok(value.to_owned()),
        _ => Err(Refusal::Malformed(format!("a legacy token without {name}"))),
    };
    let namespace = field(&claims.legacy_namespace, "its namespace")?;
    let secret = field(&claims.legacy_secret_name, "its Secret")?;
    let name = field(&claims.legacy_service_account_name, "its ServiceAccount")?;
    let uid = field(
        &claims.legacy_service_account_uid,
        "its ServiceAccount's uid",
    )?;
    let cluster = cluster_of(claims);
    let ns = Some(namespace.as_str());
    let mut holder = reference("Secret", "secrets", cluster, ns, &secret, "");
    holder.token = Some(digest(token.as_bytes()));
    let references = vec![
        reference(
            "ServiceAccount",
            "serviceaccounts",
            cluster,
            ns,
            &name,
            &uid,
        ),
        holder,
    ];
    Ok((
        service_account_user(cluster, &namespace, &name, &uid),
        references,
    ))
}

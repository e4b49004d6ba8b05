//! Tokens as issued and verified; the authenticator against a real store: revocation by
//! uid, the cache, legacy tokens.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, header};
use bytes::Bytes;
use flotilla_store::Store;
use serde_json::json;

use super::*;
use crate::auth::{Authenticator, Credentials, Presented};
use crate::registry::keys;

const ISSUER: &str = "https://hub.example:6443";

fn key_pem() -> String {
    rcgen::KeyPair::generate().unwrap().serialize_pem()
}

fn issuer() -> Issuer {
    Issuer::new(ISSUER, &key_pem()).unwrap()
}

fn grant() -> Grant {
    Grant {
        cluster: "root".into(),
        namespace: "shop".into(),
        service_account: ObjectRef {
            name: "ci".into(),
            uid: "uid-ci".into(),
        },
        audiences: vec![ISSUER.into()],
        expiration_seconds: 3600,
        ..Grant::default()
    }
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

#[test]
fn a_bound_token_carries_kubernetes_claims_and_verifies() {
    let issuer = issuer();
    let t = now();
    let (token, claims) = issuer.issue(&grant(), t).unwrap();
    assert_eq!(claims.sub, "system:serviceaccount:shop:ci");
    assert_eq!(
        (claims.iat, claims.nbf, claims.exp),
        (Some(t), Some(t), Some(t + 3600))
    );
    assert!(claims.jti.as_deref().is_some_and(|j| j.len() == 36));
    // The payload as other systems read it.
    let payload: serde_json::Value =
        jsonwebtoken::dangerous::insecure_decode_claims(&token).unwrap();
    assert_eq!(payload["iss"], ISSUER);
    assert_eq!(payload["aud"], json!([ISSUER]));
    assert_eq!(
        payload["kubernetes.io"],
        json!({"namespace": "shop", "serviceaccount": {"name": "ci", "uid": "uid-ci"}})
    );
    assert_eq!(payload["flotilla.io"], json!({"cluster": "root"}));
    assert_eq!(issuer.verify(&token, t).unwrap(), claims);
    assert!(issuer.is_ours(&token));
}

#[test]
fn expiry_not_before_audience_issuer_and_signature_are_checked() {
    let issuer = issuer();
    let t = now();
    let (token, _) = issuer.issue(&grant(), t).unwrap();
    // Within the leeway past exp: still valid; past it: expired.
    assert!(issuer.verify(&token, t + 3600 + LEEWAY_SECONDS).is_ok());
    assert_eq!(
        issuer.verify(&token, t + 3600 + LEEWAY_SECONDS + 1),
        Err(Refusal::Expired)
    );
    assert_eq!(
        issuer.verify(&token, t - LEEWAY_SECONDS - 1),
        Err(Refusal::NotYetValid)
    );
    let elsewhere = Grant {
        audiences: vec!["vault".into()],
        ..grant()
    };
    let (token, _) = issuer.issue(&elsewhere, t).unwrap();
    assert_eq!(issuer.verify(&token, t), Err(Refusal::Audience));
    // Another hub's token (another key, same issuer name) does not verify.
    let other = Issuer::new(ISSUER, &key_pem()).unwrap();
    let (token, _) = other.issue(&grant(), t).unwrap();
    assert!(issuer.is_ours(&token));
    assert_eq!(issuer.verify(&token, t), Err(Refusal::Signature));
    // Another issuer's token is not ours to judge.
    let stranger = Issuer::new("https://other.example", &key_pem()).unwrap();
    let (token, _) = stranger.issue(&grant(), t).unwrap();
    assert!(!issuer.is_ours(&token));
    assert!(!issuer.is_ours("not-a-jwt"));
    assert!(matches!(
        issuer.verify("a.b.c", t),
        Err(Refusal::Malformed(_))
    ));
}

#[test]
fn discovery_names_the_issuer_and_its_keys() {
    let issuer = Issuer::new("https://hub.example:6443/some/path", &key_pem()).unwrap();
    let doc = issuer.discovery();
    assert_eq!(doc["issuer"], "https://hub.example:6443/some/path");
    assert_eq!(doc["jwks_uri"], "https://hub.example:6443/openid/v1/jwks");
    assert_eq!(
        doc["id_token_signing_alg_values_supported"],
        json!(["ES256"])
    );
    let jwks = issuer.jwks();
    assert_eq!(jwks["keys"][0]["kty"], "EC");
    assert_eq!(jwks["keys"][0]["use"], "sig");
}

/// A store holding a ServiceAccount (and a Secret and a Pod) of `shop`, and the
/// authenticator over it.
struct World {
    store: Arc<dyn Store>,
    issuer: Arc<Issuer>,
    tokens: Tokens,
}

impl World {
    async fn new() -> World {
        let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
        let issuer = Arc::new(issuer());
        let tokens = Tokens::new(issuer.clone(), store.clone());
        let world = World {
            store,
            issuer,
            tokens,
        };
        world
            .put("serviceaccounts", "ci", "uid-ci", json!({}))
            .await;
        world
    }

    fn key(plural: &str, name: &str) -> Vec<u8> {
        keys::key_of("", plural, "root", Some("shop"), name)
    }

    async fn put(&self, plural: &str, name: &str, uid: &str, extra: serde_json::Value) {
        let mut object = json!({"metadata": {"name": name, "namespace": "shop", "uid": uid}});
        if let Some(map) = extra.as_object() {
            for (k, v) in map {
                object[k] = v.clone();
            }
        }
        let key = Self::key(plural, name);
        let value = Bytes::from(object.to_string());
        match self.store.get(&key, None).await.unwrap() {
            Some(kv) => {
                self.store
                    .update(&key, value, kv.mod_revision)
                    .await
                    .unwrap();
            }
            None => {
                self.store.create(&key, value).await.unwrap();
            }
        }
    }

    async fn delete(&self, plural: &str, name: &str) {
        self.store
            .delete(&Self::key(plural, name), None)
            .await
            .unwrap();
    }

    async fn ask(&self, token: &str) -> Credentials {
        let headers = bearing(token);
        let presented = Presented::headers(&headers);
        self.tokens.authenticate(&presented).await
    }
}

/// Request headers presenting `token`.
fn bearing(token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    headers
}

fn user(credentials: Credentials) -> Arc<crate::auth::UserInfo> {
    match credentials {
        Credentials::User(user) => user,
        other => panic!("not authenticated: {other:?}"),
    }
}

#[tokio::test]
async fn a_token_names_its_service_account_until_it_is_deleted_or_recreated() {
    let world = World::new().await;
    let (token, claims) = world.issuer.issue(&grant(), now()).unwrap();
    let found = user(world.ask(&token).await);
    assert_eq!(found.name, "system:serviceaccount:shop:ci");
    assert_eq!(found.uid, "uid-ci");
    assert_eq!(
        found.groups,
        [
            "system:serviceaccounts",
            "system:serviceaccounts:shop",
            "system:authenticated"
        ]
    );
    assert_eq!(found.extra[CLUSTER_EXTRA], ["root"]);
    assert_eq!(
        found.extra[CREDENTIAL_ID_EXTRA],
        [format!("JTI={}", claims.jti.unwrap())]
    );
    // Cached now; a change of the account that keeps its uid keeps the token valid.
    world
        .put("serviceaccounts", "ci", "uid-ci", json!({"secrets": []}))
        .await;
    user(world.ask(&token).await);
    // Deleted: refused on the very next request, though the token is cached.
    world.delete("serviceaccounts", "ci").await;
    assert!(matches!(
        world.ask(&token).await,
        Credentials::Invalid(Refusal::Revoked(why)) if why.contains("does not exist")
    ));
    // Re-created under the same name: another uid, the token stays refused.
    world
        .put("serviceaccounts", "ci", "uid-ci-2", json!({}))
        .await;
    assert!(matches!(
        world.ask(&token).await,
        Credentials::Invalid(Refusal::Revoked(why)) if why.contains("re-created")
    ));
}

#[tokio::test]
async fn a_token_whose_account_is_unchanged_is_answered_at_once_and_a_deleted_ones_is_not() {
    let world = World::new().await;
    let (token, _) = world.issuer.issue(&grant(), now()).unwrap();
    let headers = bearing(&token);
    let presented = Presented::headers(&headers);
    let at_once = |verdict: crate::api::Verdict<'_, Credentials>| match verdict {
        crate::api::Verdict::Now(credentials) => Some(credentials),
        crate::api::Verdict::Later(_) => None,
    };
    // First seen: its account is read.
    assert!(at_once(world.tokens.authenticate(&presented)).is_none());
    user(world.ask(&token).await);
    // Unchanged since: the store's index answers without a read or a wait.
    let found = at_once(world.tokens.authenticate(&presented)).expect("answered at once");
    assert_eq!(user(found).name, "system:serviceaccount:shop:ci");
    // Changed: read again. Deleted: refused, not answered from what passed before.
    world
        .put("serviceaccounts", "ci", "uid-ci", json!({"secrets": []}))
        .await;
    assert!(at_once(world.tokens.authenticate(&presented)).is_none());
    user(world.ask(&token).await);
    world.delete("serviceaccounts", "ci").await;
    assert!(at_once(world.tokens.authenticate(&presented)).is_none());
    assert!(matches!(
        world.ask(&token).await,
        Credentials::Invalid(Refusal::Revoked(_))
    ));
}

#[tokio::test]
async fn a_token_ending_as_a_cached_one_does_is_not_taken_for_it() {
    let world = World::new().await;
    let (token, _) = world.issuer.issue(&grant(), now()).unwrap();
    user(world.ask(&token).await);
    assert_eq!(world.tokens.cached_count(), 1);
    // The cached token's signature under another payload (another account's name): the
    // cache finds its bucket by the token's last bytes, and must still compare the rest.
    let (header, rest) = token.split_once('.').unwrap();
    let (payload, signature) = rest.split_once('.').unwrap();
    use base64::Engine as _;
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut claims: serde_json::Value =
        serde_json::from_slice(&engine.decode(payload).unwrap()).unwrap();
    claims["sub"] = json!("system:serviceaccount:shop:admin");
    claims["kubernetes.io"]["serviceaccount"]["name"] = json!("admin");
    let forged = format!("{header}.{}.{signature}", engine.encode(claims.to_string()));
    assert_eq!(forged[forged.len() - 32..], token[token.len() - 32..]);
    assert_eq!(
        world.ask(&forged).await,
        Credentials::Invalid(Refusal::Signature)
    );
    // The real one is still found.
    assert_eq!(
        user(world.ask(&token).await).name,
        "system:serviceaccount:shop:ci"
    );
}

#[tokio::test]
async fn an_account_being_deleted_is_judged_again_on_each_request_until_the_leeway_runs_out() {
    let world = World::new().await;
    let (token, _) = world.issuer.issue(&grant(), now()).unwrap();
    let at = std::time::Instant::now();
    let verified = world.tokens.verify(&token, now(), at).unwrap();
    // Passed once: the same revision passes again without its facts being read.
    world.tokens.check(&verified, now()).await.unwrap();
    world.tokens.check(&verified, now()).await.unwrap();
    // Its deletion starts: within the leeway the token still works…
    let since = jiff::Timestamp::from_second(now()).unwrap().to_string();
    world
        .put(
            "serviceaccounts",
            "ci",
            "uid-ci",
            json!({"metadata": {"name": "ci", "namespace": "shop", "uid": "uid-ci",
                "deletionTimestamp": since}}),
        )
        .await;
    world.tokens.check(&verified, now()).await.unwrap();
    // …and once it ran out the same revision is refused: passing it was not remembered.
    let later = now() + LEEWAY_SECONDS + 1;
    assert!(matches!(
        world.tokens.check(&verified, later).await,
        Err(Refusal::Revoked(why)) if why.contains("being deleted")
    ));
}

#[tokio::test]
async fn a_bound_token_dies_with_its_secret_or_pod_and_names_the_pod() {
    let world = World::new().await;
    world.put("secrets", "s", "uid-s", json!({})).await;
    world
        .put(
            "pods",
            "p",
            "uid-p",
            json!({"spec": {"serviceAccountName": "ci"}}),
        )
        .await;
    let secret_bound = Grant {
        secret: Some(ObjectRef {
            name: "s".into(),
            uid: "uid-s".into(),
        }),
        ..grant()
    };
    let (by_secret, _) = world.issuer.issue(&secret_bound, now()).unwrap();
    let pod_bound = Grant {
        pod: Some(ObjectRef {
            name: "p".into(),
            uid: "uid-p".into(),
        }),
        node: Some(ObjectRef {
            name: "n1".into(),
            uid: String::new(),
        }),
        ..grant()
    };
    let (by_pod, _) = world.issuer.issue(&pod_bound, now()).unwrap();
    user(world.ask(&by_secret).await);
    let found = user(world.ask(&by_pod).await);
    assert_eq!(found.extra[POD_NAME_EXTRA], ["p"]);
    assert_eq!(found.extra[POD_UID_EXTRA], ["uid-p"]);
    assert_eq!(found.extra[NODE_NAME_EXTRA], ["n1"]);
    world.delete("secrets", "s").await;
    world.put("pods", "p", "uid-p2", json!({})).await;
    assert!(matches!(
        world.ask(&by_secret).await,
        Credentials::Invalid(Refusal::Revoked(_))
    ));
    assert!(matches!(
        world.ask(&by_pod).await,
        Credentials::Invalid(Refusal::Revoked(_))
    ));
}

#[tokio::test]
async fn a_legacy_token_is_valid_while_its_secret_holds_it() {
    let world = World::new().await;
    let account = ObjectRef {
        name: "ci".into(),
        uid: "uid-ci".into(),
    };
    let token = world
        .issuer
        .issue_legacy("root", "shop", &account, "ci-token")
        .unwrap();
    let claims = world.issuer.verify(&token, now()).unwrap();
    assert_eq!((claims.iss.as_str(), claims.exp), (LEGACY_ISSUER, None));
    // Not yet in its Secret: refused.
    assert!(matches!(
        world.ask(&token).await,
        Credentials::Invalid(Refusal::Revoked(_))
    ));
    use base64::Engine as _;
    let data = json!({"data": {"token": base64::engine::general_purpose::STANDARD.encode(&token)}});
    world.put("secrets", "ci-token", "uid-t", data).await;
    assert_eq!(
        user(world.ask(&token).await).name,
        "system:serviceaccount:shop:ci"
    );
    // The Secret holds another token now: this one is refused.
    world
        .put(
            "secrets",
            "ci-token",
            "uid-t",
            json!({"data": {"token": "b3RoZXI="}}),
        )
        .await;
    assert!(matches!(
        world.ask(&token).await,
        Credentials::Invalid(Refusal::Revoked(_))
    ));
}

#[tokio::test]
async fn tokens_of_other_issuers_are_left_to_other_authenticators() {
    let world = World::new().await;
    let stranger = Issuer::new("https://accounts.example", &key_pem()).unwrap();
    let (token, _) = stranger.issue(&grant(), now()).unwrap();
    assert_eq!(world.ask(&token).await, Credentials::Missing);
    assert_eq!(world.ask("opaque-token").await, Credentials::Missing);
    let expired = world.issuer.issue(&grant(), now() - 7200).unwrap().0;
    assert_eq!(
        world.ask(&expired).await,
        Credentials::Invalid(Refusal::Expired)
    );
}

/// Verifications per second through the cache, printed: `cargo test --release -p
/// flotilla-apiserver per_verification -- --ignored --nocapture`.
#[tokio::test]
#[ignore]
async fn per_verification_time_over_100000_verifications() {
    let world = World::new().await;
    let (token, _) = world.issuer.issue(&grant(), now()).unwrap();
    let uncached = std::time::Instant::now();
    for _ in 0..1_000 {
        world.issuer.verify(&token, now()).unwrap();
    }
    let signature = uncached.elapsed() / 1_000;
    user(world.ask(&token).await);
    let started = std::time::Instant::now();
    for _ in 0..100_000 {
        user(world.ask(&token).await);
    }
    let each = started.elapsed() / 100_000;
    println!(
        "ServiceAccount token: {:.2} µs per verification through the cache (100,000), \
         {:.2} µs verifying the signature and claims alone",
        each.as_secs_f64() * 1e6,
        signature.as_secs_f64() * 1e6
    );
}

#[tokio::test]
async fn the_cache_is_bounded_and_never_keeps_a_token_past_its_expiry() {
    let world = World::new().await;
    let at = std::time::Instant::now();
    // A token with five minutes left is kept at most the cache's TTL; one with 30 s left
    // (and the leeway), no longer than that.
    let long = Grant {
        expiration_seconds: 300,
        ..grant()
    };
    let (token, _) = world.issuer.issue(&long, now()).unwrap();
    let verified = world.tokens.verify(&token, now(), at).unwrap();
    assert_eq!(verified.until - at, authenticator::CACHE_TTL);
    let short = world.issuer.issue(&grant(), now() - 3600 + 30).unwrap().0;
    let verified = world.tokens.verify(&short, now(), at).unwrap();
    assert!(verified.until - at <= std::time::Duration::from_secs(30 + LEEWAY_SECONDS as u64));
    // Full: entries are dropped, never more than the bound kept.
    for i in 0..authenticator::CACHE_ENTRIES + 10 {
        world.tokens.remember(
            &format!("token-{i}"),
            Arc::new(world.tokens.verify(&token, now(), at).unwrap()),
            at,
        );
    }
    assert!(world.tokens.cached_count() <= authenticator::CACHE_ENTRIES);
}

#[test]
fn service_account_users_read_back_as_their_namespace_and_name() {
    assert_eq!(user_name("shop", "ci"), "system:serviceaccount:shop:ci");
    assert_eq!(split("system:serviceaccount:shop:ci"), Some(("shop", "ci")));
    for not_one in [
        "alice",
        "system:serviceaccount:shop",
        "system:serviceaccount:shop:ci:x",
        "system:serviceaccount::ci",
        "system:serviceaccount:Shop:ci",
    ] {
        assert_eq!(split(not_one), None, "{not_one}");
    }
    assert_eq!(
        groups("shop"),
        ["system:serviceaccounts", "system:serviceaccounts:shop"]
    );
}

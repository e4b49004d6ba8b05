//! Claims mapping and prefixes as kube's flags define them; tokens verified with keys
//! already known (the fetching is tested end to end against a test issuer).

use axum::http::{HeaderMap, HeaderValue, header};
use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;

use super::*;

const ISSUER: &str = "https://issuer.example";

fn config() -> OidcConfig {
    OidcConfig {
        groups_claim: Some("groups".into()),
        ..OidcConfig::new(ISSUER, "flotilla")
    }
}

#[test]
fn the_username_prefix_defaults_to_the_issuer_except_for_email() {
    let mut c = config();
    assert_eq!(c.resolved_username_prefix(), "https://issuer.example#");
    c.username_claim = "email".into();
    assert_eq!(c.resolved_username_prefix(), "");
    c.username_prefix = Some("oidc:".into());
    assert_eq!(c.resolved_username_prefix(), "oidc:");
    c.username_prefix = Some("-".into());
    assert_eq!(c.resolved_username_prefix(), "");
}

#[test]
fn claims_map_to_a_prefixed_user_and_groups() {
    let c = OidcConfig {
        groups_prefix: "oidc:".into(),
        ..config()
    };
    let user = map_claims(
        &c,
        "oidc:",
        &json!({"sub": "jane", "groups": ["dev", "ops"]}),
    )
    .unwrap();
    assert_eq!(user.name, "oidc:jane");
    assert_eq!(
        user.groups,
        ["oidc:dev", "oidc:ops", "system:authenticated"]
    );
    // One group as a string; no groups claim at all.
    let user = map_claims(&c, "", &json!({"sub": "jane", "groups": "dev"})).unwrap();
    assert_eq!(user.groups, ["oidc:dev", "system:authenticated"]);
    let user = map_claims(&c, "", &json!({"sub": "jane"})).unwrap();
    assert_eq!(user.groups, ["system:authenticated"]);
    // No username; groups of the wrong type; an unverified email.
    assert!(map_claims(&c, "", &json!({"email": "j@x"})).is_err());
    assert!(map_claims(&c, "", &json!({"sub": "j", "groups": [1]})).is_err());
    let by_email = OidcConfig {
        username_claim: "email".into(),
        ..config()
    };
    assert!(
        map_claims(
            &by_email,
            "",
            &json!({"email": "j@x", "email_verified": false})
        )
        .is_err()
    );
    assert_eq!(
        map_claims(
            &by_email,
            "",
            &json!({"email": "j@x", "email_verified": true})
        )
        .unwrap()
        .name,
        "j@x"
    );
}

/// An authenticator that knows the test RSA key as `k1`.
fn oidc() -> Oidc {
    let oidc = Oidc::new(OidcConfig {
        ca_pem: Some(
            rcgen::CertificateParams::new(vec!["x".into()])
                .unwrap()
                .self_signed(&rcgen::KeyPair::generate().unwrap())
                .unwrap()
                .pem(),
        ),
        ..config()
    })
    .unwrap();
    let (_, n, e) = crate::auth::jwt::tests::test_rsa();
    oidc.keys.write().unwrap().by_kid.insert(
        "k1".into(),
        DecodingKey::from_rsa_components(&n, &e).unwrap(),
    );
    oidc
}

fn token(claims: Value, kid: &str) -> String {
    let (der, _, _) = crate::auth::jwt::tests::test_rsa();
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, &claims, &EncodingKey::from_rsa_der(&der)).unwrap()
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

fn ask(oidc: &Oidc, token: &str) -> Credentials {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    let presented = Presented::headers(&headers);
    match oidc.authenticate(&presented) {
        Verdict::Now(credentials) => credentials,
        Verdict::Later(_) => panic!("the key is known: no fetch"),
    }
}

#[test]
fn a_token_of_the_issuer_is_its_user_and_a_bad_one_is_refused_with_why() {
    let oidc = oidc();
    let good = json!({"iss": ISSUER, "aud": "flotilla", "sub": "jane", "groups": ["dev"],
        "exp": now() + 600});
    let Credentials::User(user) = ask(&oidc, &token(good.clone(), "k1")) else {
        panic!("not authenticated");
    };
    assert_eq!(user.name, "https://issuer.example#jane");
    assert_eq!(user.groups, ["dev", "system:authenticated"]);
    let with = |change: Value| {
        let mut claims = good.clone();
        for (k, v) in change.as_object().unwrap() {
            claims[k] = v.clone();
        }
        claims
    };
    assert_eq!(
        ask(&oidc, &token(with(json!({"aud": "someone-else"})), "k1")),
        Credentials::Invalid(Refusal::Audience)
    );
    assert_eq!(
        ask(&oidc, &token(with(json!({"exp": now() - 1})), "k1")),
        Credentials::Invalid(Refusal::Expired)
    );
    // A forged signature: the payload of one token under the signature of another.
    let a = token(good.clone(), "k1");
    let b = token(with(json!({"sub": "admin"})), "k1");
    let forged = format!(
        "{}.{}",
        b.rsplit_once('.').unwrap().0,
        a.rsplit_once('.').unwrap().1
    );
    assert_eq!(
        ask(&oidc, &forged),
        Credentials::Invalid(Refusal::Signature)
    );
    // Another issuer's token is not this authenticator's.
    assert_eq!(
        ask(
            &oidc,
            &token(with(json!({"iss": "https://elsewhere"})), "k1")
        ),
        Credentials::Missing
    );
    // An algorithm not accepted.
    let hs = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &good,
        &EncodingKey::from_secret(b"k"),
    )
    .unwrap();
    assert!(matches!(
        ask(&oidc, &hs),
        Credentials::Invalid(Refusal::Malformed(_))
    ));
}

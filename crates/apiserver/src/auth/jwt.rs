//! JSON Web Tokens over *ring*: the crypto provider `jsonwebtoken` signs and verifies
//! with, and the hub's token signing key.
//!
//! ```text
//!  jsonwebtoken::encode / decode ─► CryptoProvider (install(): this module's, ring)
//!     ES256 ES384 (PKCS#8 keys; public keys as uncompressed points)
//!     RS256-512 PS256-512 (PKCS#1 or PKCS#8 keys; public keys as (n, e) or PKCS#1)
//!     EdDSA (Ed25519), HS256-512
//!  SigningKey (the hub's sa.key, ES256) ─► sign(claims) with kid; jwk() for /openid/v1/jwks
//! ```
//!
//! `jsonwebtoken` offers aws-lc (a C build) or RustCrypto as its backends; the workspace
//! already has *ring* under rustls, so this module is a third provider of the crate's own
//! kind ([`jsonwebtoken::crypto::CryptoProvider`]), installed once per process by
//! [`install`] before any token is made or read.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{Error as JwtError, ErrorKind};
use jsonwebtoken::jwk::{EllipticCurve, ThumbprintHash};
use jsonwebtoken::signature;
use jsonwebtoken::{Algorithm, DecodingKey, DecodingKeyKind, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{self as sig, KeyPair as _};
use serde::Serialize;
use serde_json::{Value, json};

/// The provider, as `jsonwebtoken` wants it: a static.
static RING: CryptoProvider = CryptoProvider {
    signer_factory: new_signer,
    verifier_factory: new_verifier,
    key_utils: KeyUtils {
        rsa_pub_components_from_private_key: |_| {
            Err(ErrorKind::InvalidRsaKey("not read from private keys here".into()).into())
        },
        rsa_pub_components_from_public_key: |_| {
            Err(ErrorKind::InvalidRsaKey("not read from DER keys here".into()).into())
        },
        ec_pub_components_from_private_key: ec_components,
        ed_pub_components_from_private_key: |_, _| Err(ErrorKind::InvalidEddsaKey.into()),
        compute_digest,
    },
};

/// Makes this module's provider the one `jsonwebtoken` uses in this process (once; later
/// calls do nothing). Everything here calls it first; a test that makes tokens with
/// `jsonwebtoken` itself calls it too.
pub fn install() {
    // Fails only when a provider is installed already: this one, by an earlier call.
    let _ = RING.install_default();
}

fn signing_error(e: impl fmt::Display) -> signature::Error {
    signature::Error::from_source(e.to_string())
}

/// A signer of one algorithm with a key parsed once.
enum Signer {
    Ecdsa(Algorithm, sig::EcdsaKeyPair),
    Rsa(Algorithm, &'static dyn sig::RsaEncoding, sig::RsaKeyPair),
    Ed(sig::Ed25519KeyPair),
    Hmac(Algorithm, ring::hmac::Key),
}

impl signature::Signer<Vec<u8>> for Signer {
    fn try_sign(&self, message: &[u8]) -> Result<Vec<u8>, signature::Error> {
        let rng = SystemRandom::new();
        match self {
            Signer::Ecdsa(_, key) => key
                .sign(&rng, message)
                .map(|s| s.as_ref().to_vec())
                .map_err(signing_error),
            Signer::Rsa(_, encoding, key) => {
                let mut out = vec![0; key.public().modulus_len()];
                key.sign(*encoding, &rng, message, &mut out)
                    .map_err(signing_error)?;
                Ok(out)
            }
            Signer::Ed(key) => Ok(key.sign(message).as_ref().to_vec()),
            Signer::Hmac(_, key) => Ok(ring::hmac::sign(key, message).as_ref().to_vec()),
        }
    }
}

impl JwtSigner for Signer {
    fn algorithm(&self) -> Algorithm {
        match self {
            Signer::Ecdsa(alg, _) | Signer::Rsa(alg, ..) | Signer::Hmac(alg, _) => *alg,
            Signer::Ed(_) => Algorithm::EdDSA,
        }
    }
}

fn hmac_algorithm(alg: Algorithm) -> ring::hmac::Algorithm {
    match alg {
        Algorithm::HS384 => ring::hmac::HMAC_SHA384,
        Algorithm::HS512 => ring::hmac::HMAC_SHA512,
        _ => ring::hmac::HMAC_SHA256,
    }
}

fn new_signer(
    alg: &Algorithm,
    key: &EncodingKey,
) -> jsonwebtoken::errors::Result<Box<dyn JwtSigner>> {
    let alg = *alg;
    let bytes = key.as_bytes();
    let rng = SystemRandom::new();
    let signer = match alg {
        Algorithm::ES256 | Algorithm::ES384 => {
            let which = match alg {
                Algorithm::ES256 => &sig::ECDSA_P256_SHA256_FIXED_SIGNING,
                _ => &sig::ECDSA_P384_SHA384_FIXED_SIGNING,
            };
            let pair = sig::EcdsaKeyPair::from_pkcs8(which, bytes, &rng)
                .map_err(|_| JwtError::from(ErrorKind::InvalidEcdsaKey))?;
            Signer::Ecdsa(alg, pair)
        }
        Algorithm::RS256
        | Algorithm::RS384
        | Algorithm::RS512
        | Algorithm::PS256
        | Algorithm::PS384
        | Algorithm::PS512 => {
            let pair = sig::RsaKeyPair::from_pkcs8(bytes)
                .or_else(|_| sig::RsaKeyPair::from_der(bytes))
                .map_err(|e| JwtError::from(ErrorKind::InvalidRsaKey(e.to_string())))?;
            let encoding: &'static dyn sig::RsaEncoding = match alg {
                Algorithm::RS256 => &sig::RSA_PKCS1_SHA256,
                Algorithm::RS384 => &sig::RSA_PKCS1_SHA384,
                Algorithm::RS512 => &sig::RSA_PKCS1_SHA512,
                Algorithm::PS256 => &sig::RSA_PSS_SHA256,
                Algorithm::PS384 => &sig::RSA_PSS_SHA384,
                _ => &sig::RSA_PSS_SHA512,
            };
            Signer::Rsa(alg, encoding, pair)
        }
        Algorithm::EdDSA => Signer::Ed(
            sig::Ed25519KeyPair::from_pkcs8_maybe_unchecked(bytes)
                .map_err(|_| JwtError::from(ErrorKind::InvalidEddsaKey))?,
        ),
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => {
            Signer::Hmac(alg, ring::hmac::Key::new(hmac_algorithm(alg), bytes))
        }
        _ => return Err(ErrorKind::UnsupportedAlgorithm.into()),
    };
    Ok(Box::new(signer))
}

/// A verifier of one algorithm with its public key.
struct Verifier {
    alg: Algorithm,
    key: DecodingKey,
}

impl signature::Verifier<Vec<u8>> for Verifier {
    fn verify(&self, message: &[u8], signature: &Vec<u8>) -> Result<(), signature::Error> {
        let unparsed = |which: &'static dyn sig::VerificationAlgorithm, key: &[u8]| {
            sig::UnparsedPublicKey::new(which, key)
                .verify(message, signature)
                .map_err(signing_error)
        };
        let rsa = |params: &'static sig::RsaParameters| match self.key.kind() {
            DecodingKeyKind::RsaModulusExponent { n, e } => sig::RsaPublicKeyComponents { n, e }
                .verify(params, message, signature)
                .map_err(signing_error),
            DecodingKeyKind::SecretOrDer(der) => unparsed(params, der),
        };
        let raw = || self.key.try_get_as_bytes().map_err(signing_error);
        match self.alg {
            Algorithm::ES256 => unparsed(&sig::ECDSA_P256_SHA256_FIXED, raw()?),
            Algorithm::ES384 => unparsed(&sig::ECDSA_P384_SHA384_FIXED, raw()?),
            Algorithm::RS256 => rsa(&sig::RSA_PKCS1_2048_8192_SHA256),
            Algorithm::RS384 => rsa(&sig::RSA_PKCS1_2048_8192_SHA384),
            Algorithm::RS512 => rsa(&sig::RSA_PKCS1_2048_8192_SHA512),
            Algorithm::PS256 => rsa(&sig::RSA_PSS_2048_8192_SHA256),
            Algorithm::PS384 => rsa(&sig::RSA_PSS_2048_8192_SHA384),
            Algorithm::PS512 => rsa(&sig::RSA_PSS_2048_8192_SHA512),
            Algorithm::EdDSA => unparsed(&sig::ED25519, raw()?),
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => {
                let key = ring::hmac::Key::new(hmac_algorithm(self.alg), raw()?);
                ring::hmac::verify(&key, message, signature).map_err(signing_error)
            }
            _ => Err(signing_error("unsupported algorithm")),
        }
    }
}

impl JwtVerifier for Verifier {
    fn algorithm(&self) -> Algorithm {
        self.alg
    }
}

fn new_verifier(
    alg: &Algorithm,
    key: &DecodingKey,
) -> jsonwebtoken::errors::Result<Box<dyn JwtVerifier>> {
    if alg.family() != key.family() {
        return Err(ErrorKind::InvalidKeyFormat.into());
    }
    Ok(Box::new(Verifier {
        alg: *alg,
        key: key.clone(),
    }))
}

fn ec_components(
    pkcs8: &[u8],
    alg: Algorithm,
) -> jsonwebtoken::errors::Result<(EllipticCurve, Vec<u8>, Vec<u8>)> {
    let (which, curve, half) = match alg {
        Algorithm::ES256 => (
            &sig::ECDSA_P256_SHA256_FIXED_SIGNING,
            EllipticCurve::P256,
            32,
        ),
        Algorithm::ES384 => (
            &sig::ECDSA_P384_SHA384_FIXED_SIGNING,
            EllipticCurve::P384,
            48,
        ),
        _ => return Err(ErrorKind::InvalidEcdsaKey.into()),
    };
    let pair = sig::EcdsaKeyPair::from_pkcs8(which, pkcs8, &SystemRandom::new())
        .map_err(|_| JwtError::from(ErrorKind::InvalidEcdsaKey))?;
    let point = pair.public_key().as_ref();
    if point.len() != 1 + 2 * half {
        return Err(ErrorKind::InvalidEcdsaKey.into());
    }
    Ok((curve, point[1..=half].to_vec(), point[1 + half..].to_vec()))
}

fn compute_digest(data: &[u8], hash: ThumbprintHash) -> jsonwebtoken::errors::Result<Vec<u8>> {
    let which = match hash {
        ThumbprintHash::SHA256 => &ring::digest::SHA256,
        ThumbprintHash::SHA384 => &ring::digest::SHA384,
        ThumbprintHash::SHA512 => &ring::digest::SHA512,
        _ => return Err(ErrorKind::UnsupportedAlgorithm.into()),
    };
    Ok(ring::digest::digest(which, data).as_ref().to_vec())
}

/// Why a signing key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// No PKCS#8 private key in the PEM.
    #[error("no PKCS#8 private key found")]
    NotPkcs8,
    /// The key is not ECDSA P-256.
    #[error("not an ECDSA P-256 key")]
    NotP256,
}

/// The DER `SubjectPublicKeyInfo` prefix of an uncompressed P-256 point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// The hub's ServiceAccount token key: ES256, named (`kid`) as kube-apiserver names its
/// keys, by the base64url SHA-256 of the public key's DER.
#[derive(Clone)]
pub struct SigningKey {
    encoding: EncodingKey,
    decoding: DecodingKey,
    kid: String,
    /// The public point's coordinates, base64url.
    x: String,
    y: String,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// The key in `pem` (PKCS#8, ECDSA P-256).
    pub fn from_pem(pem: &str) -> Result<Self, KeyError> {
        install();
        let der = match rustls_pemfile::private_key(&mut pem.as_bytes()) {
            Ok(Some(rustls::pki_types::PrivateKeyDer::Pkcs8(der))) => der,
            _ => return Err(KeyError::NotPkcs8),
        };
        let pair = sig::EcdsaKeyPair::from_pkcs8(
            &sig::ECDSA_P256_SHA256_FIXED_SIGNING,
            der.secret_pkcs8_der(),
            &SystemRandom::new(),
        )
        .map_err(|_| KeyError::NotP256)?;
        let point = pair.public_key().as_ref();
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(point);
        let kid = URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, &spki));
        Ok(SigningKey {
            encoding: EncodingKey::from_ec_der(der.secret_pkcs8_der()),
            decoding: DecodingKey::from_ec_der(point),
            kid,
            x: URL_SAFE_NO_PAD.encode(&point[1..33]),
            y: URL_SAFE_NO_PAD.encode(&point[33..]),
        })
    }

    /// The key's id, in the header of every token it signs.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key, to verify tokens with.
    pub fn decoding_key(&self) -> &DecodingKey {
        &self.decoding
    }

    /// `claims` signed: a compact JWS with `alg: ES256` and this key's `kid`.
    pub fn sign(&self, claims: &impl Serialize) -> Result<String, JwtError> {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding)
    }

    /// The public key as a JWK (`use: sig`, `alg: ES256`), as `/openid/v1/jwks` lists it.
    pub fn jwk(&self) -> Value {
        json!({
            "use": "sig",
            "kty": "EC",
            "kid": self.kid,
            "crv": "P-256",
            "alg": "ES256",
            "x": self.x,
            "y": self.y,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use jsonwebtoken::Validation;

    fn key() -> SigningKey {
        let pem = rcgen::KeyPair::generate().unwrap().serialize_pem();
        SigningKey::from_pem(&pem).unwrap()
    }

    #[test]
    fn a_token_signed_by_the_key_verifies_with_it_and_with_its_jwk_alone() {
        let key = key();
        let token = key
            .sign(&json!({"sub": "me", "exp": 4_000_000_000u64}))
            .unwrap();
        let header = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!(header.alg, Algorithm::ES256);
        assert_eq!(header.kid.as_deref(), Some(key.kid()));
        let validation = Validation::new(Algorithm::ES256);
        let claims: Value = jsonwebtoken::decode(&token, key.decoding_key(), &validation)
            .unwrap()
            .claims;
        assert_eq!(claims["sub"], "me");
        // The JWK alone is enough: what other systems do with /openid/v1/jwks.
        let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(key.jwk()).unwrap();
        let from_jwk = DecodingKey::from_jwk(&jwk).unwrap();
        jsonwebtoken::decode::<Value>(&token, &from_jwk, &validation).unwrap();
        // Another key's signature does not verify.
        let other = self::key();
        let e =
            jsonwebtoken::decode::<Value>(&token, other.decoding_key(), &validation).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::InvalidSignature), "{e:?}");
        // Nor does a changed payload.
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = URL_SAFE_NO_PAD.encode(br#"{"sub":"admin","exp":4000000000}"#);
        parts[1] = &forged;
        let e = jsonwebtoken::decode::<Value>(&parts.join("."), key.decoding_key(), &validation)
            .unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::InvalidSignature), "{e:?}");
    }

    #[test]
    fn the_kid_is_the_hash_of_the_public_key_der() {
        let pem = rcgen::KeyPair::generate().unwrap();
        let key = SigningKey::from_pem(&pem.serialize_pem()).unwrap();
        // rcgen's own SubjectPublicKeyInfo of the same key.
        let spki = rcgen::PublicKeyData::subject_public_key_info(&pem);
        let expected = URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, &spki));
        assert_eq!(key.kid(), expected);
        // And the key is refused when it is not P-256 PKCS#8.
        let ed = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        assert!(SigningKey::from_pem(&ed.serialize_pem()).is_err());
        assert!(SigningKey::from_pem("nothing").is_err());
    }

    #[test]
    fn hmac_and_rsa_components_verify_through_the_provider() {
        install();
        let secret = EncodingKey::from_secret(b"s3cret");
        let token = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &json!({"exp": 4_000_000_000u64}),
            &secret,
        )
        .unwrap();
        let validation = Validation::new(Algorithm::HS256);
        jsonwebtoken::decode::<Value>(&token, &DecodingKey::from_secret(b"s3cret"), &validation)
            .unwrap();
        assert!(
            jsonwebtoken::decode::<Value>(&token, &DecodingKey::from_secret(b"other"), &validation)
                .is_err()
        );
    }

    /// The test RSA key (PKCS#8 DER) and its public (n, e), base64url as a JWK has them.
    pub(crate) fn test_rsa() -> (Vec<u8>, String, String) {
        let pem = include_str!("testdata/oidc-rsa.pem");
        let der = match rustls_pemfile::private_key(&mut pem.as_bytes()) {
            Ok(Some(rustls::pki_types::PrivateKeyDer::Pkcs8(der))) => {
                der.secret_pkcs8_der().to_vec()
            }
            other => panic!("{other:?}"),
        };
        let pair = sig::RsaKeyPair::from_pkcs8(&der).unwrap();
        let public = sig::RsaPublicKeyComponents::<Vec<u8>>::from(pair.public());
        let n = URL_SAFE_NO_PAD.encode(&public.n);
        let e = URL_SAFE_NO_PAD.encode(&public.e);
        (der, n, e)
    }

    #[test]
    fn rs256_tokens_verify_with_the_keys_modulus_and_exponent() {
        install();
        let (der, n, e) = test_rsa();
        let token = jsonwebtoken::encode(
            &Header::new(Algorithm::RS256),
            &json!({"exp": 4_000_000_000u64}),
            &EncodingKey::from_rsa_der(&der),
        )
        .unwrap();
        let key = DecodingKey::from_rsa_components(&n, &e).unwrap();
        jsonwebtoken::decode::<Value>(&token, &key, &Validation::new(Algorithm::RS256)).unwrap();
        let wrong = DecodingKey::from_rsa_components(&e, &e).unwrap();
        assert!(
            jsonwebtoken::decode::<Value>(&token, &wrong, &Validation::new(Algorithm::RS256))
                .is_err()
        );
        // The algorithm is the one asked for: an RS256 token is not read as PS256.
        assert!(
            jsonwebtoken::decode::<Value>(&token, &key, &Validation::new(Algorithm::PS256))
                .is_err()
        );
    }
}

//! The part of a hub's identity that every replica of one hub must share, as one value
//! that can be kept outside the data directory (in a shared store).
//!
//! ```text
//!  SharedIdentity { CA cert + key, admin token, ServiceAccount signing key }
//!     ::generate()     fresh, in memory (nothing written)
//!     ::read(DIR)      what DIR holds (missing parts created), None if DIR holds none
//!     ::to_json/from_json   the value kept in the store (checked on the way in)
//!     .install(DIR)    writes the missing files; a file that differs is refused
//!  then load_or_create_with(DIR, …) as for a hub of its own: the serving certificate
//!  stays per replica (its own addresses), issued by the shared CA
//! ```
//!
//! The serving certificate is not shared: each replica has its own addresses and issues
//! its own certificate from the shared CA.

use std::path::{Path, PathBuf};

use rcgen::KeyPair;
use serde_json::{Value, json};

use crate::{
    ADMIN_TOKEN_FILE, CA_CERT_FILE, CA_KEY_FILE, Error, Problem, SERVICE_ACCOUNT_KEY_FILE, files,
};

/// The CA, the admin token and the ServiceAccount signing key of a hub: what every
/// replica must hold alike so that any replica verifies any credential.
///
/// `Debug` output omits the keys and the token.
#[derive(Clone, PartialEq, Eq)]
pub struct SharedIdentity {
    /// PEM of the CA certificate.
    pub ca_cert_pem: String,
    /// PEM (PKCS#8) of the CA's private key.
    pub ca_key_pem: String,
    /// The admin bearer token.
    pub admin_token: String,
    /// PEM (PKCS#8, ECDSA P-256) of the key that signs ServiceAccount tokens.
    pub service_account_key_pem: String,
}

impl std::fmt::Debug for SharedIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedIdentity")
            .field("ca_cert_pem", &self.ca_cert_pem)
            .finish_non_exhaustive()
    }
}

/// The files of a [`SharedIdentity`] in a data directory, in the order they are checked.
const FILES: [&str; 4] = [
    CA_CERT_FILE,
    CA_KEY_FILE,
    ADMIN_TOKEN_FILE,
    SERVICE_ACCOUNT_KEY_FILE,
];

/// Why a data directory's identity cannot be used with a shared one.
#[derive(Debug, thiserror::Error)]
#[error(
    "{} differs from the hub identity in {source_name}: this data directory belongs to \
     another hub; move its {} files away to take the shared identity",
    path.display(),
    FILES.join(", ")
)]
pub struct Mismatch {
    /// The file that differs.
    pub path: PathBuf,
    /// Where the shared identity is kept (e.g. the store's URL and key).
    pub source_name: String,
}

impl SharedIdentity {
    /// A new identity: a CA, an admin token and a signing key, in memory only.
    pub fn generate() -> Result<SharedIdentity, Error> {
        let generate = |what: &str| {
            KeyPair::generate().map_err(|source| Error::Generate {
                what: what.to_owned(),
                source,
            })
        };
        let ca_key = generate("a CA key")?;
        let ca_cert = crate::new_ca_cert(&ca_key).map_err(|source| Error::Generate {
            what: "a CA certificate".to_owned(),
            source,
        })?;
        Ok(SharedIdentity {
            ca_cert_pem: crate::pem_encode_cert(&ca_cert),
            ca_key_pem: ca_key.serialize_pem(),
            admin_token: crate::random_token(Path::new(ADMIN_TOKEN_FILE))?,
            service_account_key_pem: generate("a ServiceAccount signing key")?.serialize_pem(),
        })
    }

    /// The identity `dir` holds, the parts it lacks created there; `None` (and nothing
    /// created) if it holds none of them.
    pub fn read(dir: &Path) -> Result<Option<SharedIdentity>, Error> {
        if !FILES.iter().any(|file| dir.join(file).exists()) {
            return Ok(None);
        }
        let ca = crate::load_or_create_ca(dir)?;
        Ok(Some(SharedIdentity {
            ca_cert_pem: ca.cert_pem,
            ca_key_pem: ca.key_pem,
            admin_token: crate::load_or_create_token(dir)?,
            service_account_key_pem: crate::load_or_create_service_account_key(dir)?,
        }))
    }

    /// As kept in a shared store: a JSON object (the keys in it: keep it out of reach).
    pub fn to_json(&self) -> String {
        json!({
            "kind": "FlotillaHubIdentity",
            "version": 1,
            "caCert": self.ca_cert_pem,
            "caKey": self.ca_key_pem,
            "adminToken": self.admin_token,
            "serviceAccountKey": self.service_account_key_pem,
        })
        .to_string()
    }

    /// Reads [`SharedIdentity::to_json`]'s output, checking that every part is usable
    /// (the CA's certificate and key belong together, the keys parse).
    pub fn from_json(bytes: &[u8]) -> Result<SharedIdentity, Error> {
        let invalid = |problem: &str| Error::InvalidIdentity {
            field: "shared",
            problem: problem.to_owned(),
            source: None,
        };
        let value: Value = serde_json::from_slice(bytes).map_err(|_| invalid("not JSON"))?;
        if value["kind"] != "FlotillaHubIdentity" || value["version"] != 1 {
            return Err(invalid(
                "not a hub identity of version 1 (written by a newer Flotilla?)",
            ));
        }
        let field = |name: &str| {
            value[name]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| invalid(&format!("{name} is missing")))
        };
        let shared = SharedIdentity {
            ca_cert_pem: field("caCert")?,
            ca_key_pem: field("caKey")?,
            admin_token: field("adminToken")?,
            service_account_key_pem: field("serviceAccountKey")?,
        };
        let in_field = |field: &'static str| move |p: Problem| p.in_field(field);
        let ca_key = crate::key_pair(shared.ca_key_pem.as_bytes()).map_err(in_field("caKey"))?;
        let ca_cert =
            crate::single_cert(shared.ca_cert_pem.as_bytes()).map_err(in_field("caCert"))?;
        crate::check_ca(Path::new("caCert"), Path::new("caKey"), &ca_cert, &ca_key)?;
        crate::key_pair(shared.service_account_key_pem.as_bytes())
            .map_err(in_field("serviceAccountKey"))?;
        if !shared.admin_token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid("adminToken holds spaces or control characters"));
        }
        Ok(shared)
    }

    /// Writes this identity's files into `dir` where they are missing (keys and token
    /// 0600); a file that exists must hold the same (a certificate, a key or the token as
    /// these do), else [`Mismatch`] naming it and `source_name`. Nothing is replaced.
    pub fn install(&self, dir: &Path, source_name: &str) -> Result<(), InstallError> {
        files::create_private_dir(dir)?;
        let token = format!("{}\n", self.admin_token);
        let parts = [
            (CA_CERT_FILE, &self.ca_cert_pem, files::PUBLIC_MODE),
            (CA_KEY_FILE, &self.ca_key_pem, files::SECRET_MODE),
            (ADMIN_TOKEN_FILE, &token, files::SECRET_MODE),
            (
                SERVICE_ACCOUNT_KEY_FILE,
                &self.service_account_key_pem,
                files::SECRET_MODE,
            ),
        ];
        for (file, contents, mode) in parts {
            let path = dir.join(file);
            let existing = match files::read_optional(&path)? {
                Some(bytes) => bytes,
                None if files::create_no_clobber(&path, contents.as_bytes(), mode)? => continue,
                // Created meanwhile by another process: compare with it.
                None => files::read(&path)?,
            };
            if !same(file, &existing, contents.as_bytes()) {
                return Err(InstallError::Mismatch(Mismatch {
                    path,
                    source_name: source_name.to_owned(),
                }));
            }
        }
        Ok(())
    }
}

/// Why [`SharedIdentity::install`] failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A file could not be read or written.
    #[error(transparent)]
    Io(#[from] Error),
    /// A file holds another identity's part.
    #[error(transparent)]
    Mismatch(#[from] Mismatch),
}

/// Whether two contents of `file` hold the same thing (formatting aside).
fn same(file: &str, a: &[u8], b: &[u8]) -> bool {
    match file {
        CA_CERT_FILE => match (crate::single_cert(a), crate::single_cert(b)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        },
        ADMIN_TOKEN_FILE => {
            let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_owned();
            text(a) == text(b)
        }
        _ => match (crate::key_pair(a), crate::key_pair(b)) {
            (Ok(a), Ok(b)) => a.serialize_der() == b.serialize_der(),
            _ => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_installed_identity_is_what_the_data_directory_serves() {
        let shared = SharedIdentity::generate().unwrap();
        let kept = SharedIdentity::from_json(shared.to_json().as_bytes()).unwrap();
        assert_eq!(kept, shared);
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for dir in [a.path(), b.path()] {
            assert!(SharedIdentity::read(dir).unwrap().is_none());
            kept.install(dir, "test").unwrap();
            // Installing again is a no-op.
            kept.install(dir, "test").unwrap();
        }
        let one = crate::load_or_create(a.path(), &["a.example".to_owned()]).unwrap();
        let two = crate::load_or_create(b.path(), &["b.example".to_owned()]).unwrap();
        assert_eq!(one.ca_cert_pem, two.ca_cert_pem);
        assert_eq!(one.admin_token, shared.admin_token);
        assert_eq!(one.admin_token, two.admin_token);
        assert_eq!(one.service_account_key_pem, two.service_account_key_pem);
        assert_ne!(one.server_cert_pem, two.server_cert_pem);
        // A client trusting replica one's CA accepts replica two's serving certificate.
        crate::client::ClientCa::new(&one.ca_cert_pem).unwrap();
        assert_eq!(SharedIdentity::read(a.path()).unwrap().unwrap(), shared);
    }

    #[test]
    fn a_data_directory_of_another_hub_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        crate::load_or_create(dir.path(), &[]).unwrap();
        let other = SharedIdentity::generate().unwrap();
        let error = other.install(dir.path(), "the store").unwrap_err();
        let text = error.to_string();
        assert!(matches!(error, InstallError::Mismatch(_)), "{text}");
        assert!(
            text.contains("ca.crt") && text.contains("the store"),
            "{text}"
        );
    }

    #[test]
    fn a_damaged_or_foreign_value_is_refused() {
        assert!(SharedIdentity::from_json(b"{}").is_err());
        assert!(SharedIdentity::from_json(b"not json").is_err());
        let mut shared = SharedIdentity::generate().unwrap();
        shared.ca_key_pem = SharedIdentity::generate().unwrap().ca_key_pem;
        let error = SharedIdentity::from_json(shared.to_json().as_bytes()).unwrap_err();
        assert!(error.to_string().contains("does not match"), "{error}");
    }
}

//! Kubeconfig files pointing kubectl (or any client-go program) at Flotilla.

use std::fmt;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;

use crate::Error;
use crate::files;

/// A kubeconfig with one cluster, one user and one context, all called
/// [`name`](Self::name), and that context selected.
///
/// It is rendered as JSON, which kubectl and client-go accept as a kubeconfig
/// (YAML is a superset of JSON), so no YAML emitter is involved.
#[derive(Clone, Copy)]
pub struct Kubeconfig<'a> {
    /// Name of the cluster, the user and the context.
    pub name: &'a str,
    /// The API server URL, e.g. `https://127.0.0.1:6443` or
    /// `https://127.0.0.1:6443/clusters/east`.
    pub server: &'a str,
    /// PEM of the CA that signed the server's certificate; embedded as
    /// `certificate-authority-data`. Empty: none, the client trusts its system's CAs.
    pub ca_pem: &'a str,
    /// The bearer token the user presents.
    pub token: &'a str,
}

impl fmt::Debug for Kubeconfig<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kubeconfig")
            .field("name", &self.name)
            .field("server", &self.server)
            .field("token", &"[elided]")
            .finish_non_exhaustive()
    }
}

impl Kubeconfig<'_> {
    /// The kubeconfig as a JSON document (ending in a newline).
    pub fn render(&self) -> String {
        let mut doc = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [{
                "name": self.name,
                "cluster": {
                    "server": self.server,
                    "certificate-authority-data": STANDARD.encode(self.ca_pem),
                },
            }],
            "users": [{
                "name": self.name,
                "user": { "token": self.token },
            }],
            "contexts": [{
                "name": self.name,
                "context": { "cluster": self.name, "user": self.name },
            }],
            "current-context": self.name,
        });
        if self.ca_pem.is_empty()
            && let Some(cluster) = doc["clusters"][0]["cluster"].as_object_mut()
        {
            cluster.remove("certificate-authority-data");
        }
        // Serializing a `Value` with string keys cannot fail.
        let mut out = serde_json::to_string_pretty(&doc).unwrap_or_default();
        out.push('\n');
        out
    }

    /// Writes [`render`](Self::render)'s output to `path` atomically (a
    /// temporary file in the same directory, then a rename) with mode 0600,
    /// creating the parent directory (mode 0700) if needed. An existing file
    /// is replaced.
    pub fn write(&self, path: &Path) -> Result<(), Error> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            files::create_private_dir(parent)?;
        }
        files::replace(path, self.render().as_bytes(), files::SECRET_MODE)
    }
}

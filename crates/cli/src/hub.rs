//! `flotilla hub`: the hub's API server on its store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use axum::http::{HeaderMap, Method};
use bytes::Bytes;
use clap::Parser;
use flotilla_apiserver::Api;
use flotilla_apiserver::resources::Registry;
use flotilla_apiserver::server::{self, Auth};
use flotilla_store::Store;
use flotilla_store_sqlite::SqliteStore;
use tracing::{debug, info};

/// Where the hub keeps its objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreUrl {
    /// `sqlite://PATH`: the embedded store in one file.
    Sqlite(PathBuf),
}

impl std::str::FromStr for StoreUrl {
    type Err = String;

    fn from_str(url: &str) -> Result<Self, String> {
        match url.split_once("://") {
            Some(("sqlite", path)) if !path.is_empty() => Ok(StoreUrl::Sqlite(PathBuf::from(path))),
            Some(("sqlite", _)) => {
                Err("sqlite:// needs a file path, e.g. sqlite://flotilla-data/hub.db".into())
            }
            Some((scheme @ ("postgres" | "postgresql" | "etcd"), _)) => Err(format!(
                "the {scheme} store is not available in this version; use sqlite://PATH"
            )),
            _ => Err(format!("unknown store URL {url:?}; expected sqlite://PATH")),
        }
    }
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Plain,
    /// One JSON object per line.
    Json,
}

/// `flotilla hub [--data-dir DIR] [--listen ADDR] [--store URL]`
#[derive(Debug, Parser)]
pub struct HubArgs {
    /// Where the hub keeps its certificates, token, kubeconfig and (by default) its store.
    #[arg(long, value_name = "DIR", default_value = "flotilla-data")]
    pub data_dir: PathBuf,
    /// The address to serve HTTPS on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// The store: sqlite://PATH (default: sqlite://DIR/hub.db).
    #[arg(long, value_name = "URL")]
    pub store: Option<StoreUrl>,
    /// The log format.
    #[arg(long, value_enum, default_value = "plain")]
    pub log_format: LogFormat,
    /// How often the store is compacted to the revision of one interval earlier
    /// (`300ms`, `30s`, `5m`, `1h`; `0` never compacts).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub compaction_interval: Duration,
}

/// A duration written as a number and a unit (`ms`, `s`, `m`, `h`), or `0`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| {
        format!("invalid duration {text:?}: expected a number and a unit, e.g. 30s or 5m")
    })?;
    let millis = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => {
            return Err(format!(
                "invalid duration {text:?}: the unit must be ms, s, m or h"
            ));
        }
    };
    number
        .checked_mul(millis)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("invalid duration {text:?}: too long"))
}

/// Sets up `tracing` output (RUST_LOG filters; info by default).
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a terminal: a log file or a journal gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

impl HubArgs {
    /// Serves until SIGTERM or SIGINT.
    pub fn run(self) -> anyhow::Result<()> {
        init_logging(self.log_format);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        runtime.block_on(self.serve())
    }

    async fn serve(self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.data_dir).with_context(|| {
            format!(
                "cannot create the data directory {}",
                self.data_dir.display()
            )
        })?;
        let host = if self.listen.ip().is_unspecified() {
            "127.0.0.1".to_owned()
        } else {
            self.listen.ip().to_string()
        };
        let identity = flotilla_pki::load_or_create(&self.data_dir, std::slice::from_ref(&host))
            .context("cannot set up the hub's certificates")?;
        let StoreUrl::Sqlite(path) = self
            .store
            .clone()
            .unwrap_or_else(|| StoreUrl::Sqlite(self.data_dir.join("hub.db")));
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).await?);
        let server_url = match self.listen.ip() {
            std::net::IpAddr::V6(_) => format!("https://[{host}]:{}", self.listen.port()),
            std::net::IpAddr::V4(_) => format!("https://{host}:{}", self.listen.port()),
        };
        let api = Api::new(
            store.clone(),
            Arc::new(Registry::builtin()),
            format!("{host}:{}", self.listen.port()),
        );
        api.bootstrap()
            .await
            .map_err(|e| anyhow::anyhow!("cannot set up the initial namespaces: {e}"))?;
        install_fleet_api(&api).await?;
        let listener = tokio::net::TcpListener::bind(self.listen)
            .await
            .with_context(|| format!("cannot listen on {}", self.listen))?;
        let kubeconfig = self.data_dir.join("admin.kubeconfig");
        flotilla_pki::Kubeconfig {
            name: "flotilla",
            server: &server_url,
            ca_pem: &identity.ca_cert_pem,
            token: &identity.admin_token,
        }
        .write(&kubeconfig)?;
        let tls = Arc::new(identity.server_config()?);
        let identity = Arc::new(identity);
        let auth = Auth {
            check: Arc::new(move |token| identity.is_admin_token(token)),
        };
        if !self.compaction_interval.is_zero() {
            tokio::spawn(flotilla_apiserver::compaction::run(
                store.clone(),
                self.compaction_interval,
            ));
        }
        let ready = Arc::new(AtomicBool::new(false));
        let app = server::router(api, auth, ready.clone());
        ready.store(true, Ordering::Release);
        info!(url = %server_url, kubeconfig = %kubeconfig.display(), store = %path.display(), "hub serving");
        server::serve_tls(listener, tls, app, shutdown_signal()).await;
        info!("hub stopped");
        Ok(())
    }
}

/// Installs the fleet API's CustomResourceDefinitions (`flotilla_api::crds`) through the
/// API, as any client would: created when missing, replaced when their spec differs (a new
/// binary), left alone otherwise. Each must come out established; any failure is one line.
async fn install_fleet_api(api: &Api) -> anyhow::Result<()> {
    const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let mut changed = 0;
    for crd in flotilla_api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let fail = |why: &str| anyhow::anyhow!("cannot install the fleet API: CRD {name}: {why}");
        let mut desired = serde_json::to_value(&crd)?;
        // The server defaults listKind; set it here so an unchanged spec compares equal.
        let names = &mut desired["spec"]["names"];
        if names["listKind"].is_null() {
            names["listKind"] = format!("{}List", names["kind"].as_str().unwrap_or("")).into();
        }
        let path = format!("{CRDS}/{name}");
        let (code, current) = call(api, Method::GET, &path, None).await;
        let message = |reply: &serde_json::Value| {
            reply["message"]
                .as_str()
                .unwrap_or("no reason given")
                .to_owned()
        };
        let (code, reply, action) = match code {
            404 => {
                let (code, reply) = call(api, Method::POST, CRDS, Some(&desired)).await;
                (code, reply, "installed")
            }
            200 if !current["metadata"]["deletionTimestamp"].is_null() => {
                return Err(fail(
                    "it is being deleted; start the hub again once it is gone",
                ));
            }
            200 if current["spec"] == desired["spec"] => (code, current, "unchanged"),
            200 => {
                desired["metadata"]["resourceVersion"] =
                    current["metadata"]["resourceVersion"].clone();
                let (code, reply) = call(api, Method::PUT, &path, Some(&desired)).await;
                (code, reply, "updated")
            }
            _ => return Err(fail(&format!("cannot read it: {}", message(&current)))),
        };
        if !(200..300).contains(&code) {
            return Err(fail(&format!("not {action}: {}", message(&reply))));
        }
        let conditions = reply["status"]["conditions"].as_array();
        let established = conditions
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        if !established {
            let why = conditions
                .into_iter()
                .flatten()
                .find(|c| c["status"] == "False")
                .and_then(|c| c["message"].as_str())
                .unwrap_or("not established");
            return Err(fail(&format!("not served: {why}")));
        }
        if action == "unchanged" {
            debug!(crd = %name, "CRD unchanged");
        } else {
            info!(crd = %name, "CRD {action}");
            changed += 1;
        }
    }
    info!(changed, "fleet API ready");
    Ok(())
}

/// One request to the in-process API: the status code and the JSON reply.
async fn call(
    api: &Api,
    method: Method,
    path: &str,
    body: Option<&serde_json::Value>,
) -> (u16, serde_json::Value) {
    let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
    // The hub's own writes are owned by field manager `flotilla`.
    let query = Some("fieldManager=flotilla");
    let response = api
        .serve(method, path, query, &HeaderMap::new(), body)
        .await;
    let code = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    (code, serde_json::from_slice(&bytes).unwrap_or_default())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => info!("SIGTERM"),
        _ = int.recv() => info!("SIGINT"),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Args, Command};

    fn parse(args: &[&str]) -> Result<HubArgs, clap::Error> {
        let mut argv = vec!["flotilla", "hub"];
        argv.extend_from_slice(args);
        Args::try_parse_from(argv).map(|a| match a.command {
            Command::Hub(h) => h,
            other => panic!("parsed as {other:?}"),
        })
    }

    #[test]
    fn defaults() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.data_dir, PathBuf::from("flotilla-data"));
        assert_eq!(args.listen, "127.0.0.1:6443".parse().unwrap());
        assert_eq!(args.store, None);
        assert_eq!(args.log_format, LogFormat::Plain);
        assert_eq!(args.compaction_interval, Duration::from_secs(300));
    }

    #[test]
    fn compaction_intervals() {
        let interval = |text: &str| {
            parse(&[&format!("--compaction-interval={text}")]).map(|a| a.compaction_interval)
        };
        assert_eq!(interval("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(interval("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(interval("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(interval("0").unwrap(), Duration::ZERO);
        for bad in ["5", "m", "1.5s", "-1s", "10d", "99999999999999999999h"] {
            let e = interval(bad).unwrap_err().to_string();
            assert!(
                e.contains("invalid duration") || e.contains("invalid value"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn store_urls() {
        let args = parse(&["--store", "sqlite:///var/lib/hub.db"]).unwrap();
        assert_eq!(args.store, Some(StoreUrl::Sqlite("/var/lib/hub.db".into())));
        let e = parse(&["--store", "postgres://db/hub"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("postgres store is not available"), "{e}");
        let e = parse(&["--store", "mysql://x"]).unwrap_err().to_string();
        assert!(e.contains("unknown store URL"), "{e}");
        assert!(parse(&["--store", "sqlite://"]).is_err());
    }

    #[test]
    fn a_bad_listen_address_is_refused() {
        let e = parse(&["--listen", "localhost"]).unwrap_err().to_string();
        assert!(e.contains("invalid value 'localhost'"), "{e}");
        assert!(parse(&["--listen", "0.0.0.0:7443", "--log-format", "json"]).is_ok());
        assert!(parse(&["--log-format", "xml"]).is_err());
    }
}

//! `flotilla hub`: the hub's API server on its store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::http::{HeaderMap, Method};
use bytes::Bytes;
use clap::Parser;
use flotilla_apiserver::Api;
use tracing::{debug, info};

use crate::serve::{self, ApiServer, LogFormat, parse_duration};

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
    /// The hub's name, written on the objects it places on members.
    #[arg(long, value_name = "NAME", default_value = "flotilla-hub")]
    pub name: String,
    /// How often each member cluster is probed (less often past 2,000 clusters at 10 s:
    /// the hub makes at most 200 probes a second); one that does not answer within it is
    /// not Ready.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = positive_duration)]
    pub health_period: Duration,
    /// How often every Work is applied again even when nothing changed.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = positive_duration)]
    pub resync_period: Duration,
}

/// A duration that is not zero.
fn positive_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        Duration::ZERO => Err(format!("invalid duration {text:?}: it must be above zero")),
        d => Ok(d),
    }
}

impl HubArgs {
    /// Serves until SIGTERM or SIGINT.
    pub fn run(self) -> anyhow::Result<()> {
        serve::init_logging(self.log_format);
        // A connection per member cluster (its drift watch) besides the clients' own.
        let files = crate::limits::raise_open_files(crate::limits::SERVING);
        info!(before = files.before, now = files.now, "open-file limit");
        serve::block_on(self.serve())
    }

    async fn serve(self) -> anyhow::Result<()> {
        let StoreUrl::Sqlite(path) = self
            .store
            .clone()
            .unwrap_or_else(|| StoreUrl::Sqlite(self.data_dir.join("hub.db")));
        let mut server = ApiServer::open("hub", &self.data_dir, self.listen, &path).await?;
        install_fleet_api(&server.api).await?;
        let metrics = flotilla_fleet::runtime::Metrics::default();
        metrics.register(
            Arc::get_mut(&mut server.metrics)
                .context("the hub's metrics are shared before serving")?
                .registry_mut(),
        );
        // The fleet controllers use the API in-process, through the same routing,
        // admission and watch paths as any client, and count in its request metrics.
        let client = kube::Client::new(
            flotilla_apiserver::server::local_service(server.api.clone(), server.metrics.clone()),
            "default",
        );
        tokio::spawn(flotilla_fleet::runtime::run(
            client,
            flotilla_fleet::runtime::Config {
                hub: self.name.clone(),
                health_period: self.health_period,
                resync_period: self.resync_period,
                ..flotilla_fleet::runtime::Config::default()
            },
            metrics,
        ));
        server.compact_every(self.compaction_interval);
        server.serve().await
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

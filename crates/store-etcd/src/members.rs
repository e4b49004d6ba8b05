//! Which of the cluster's endpoints the client's balancer may pick.
//!
//! The etcd client balances requests over every endpoint (tonic's power-of-two-choices
//! balancer). An endpoint whose member died still looks ready to it: each request sent
//! there fails at once on the refused connection, and a balancer that favours the least
//! loaded endpoint keeps picking it, so a store with one member of three down failed most
//! of its requests for as long as the member stayed down.
//!
//! [`Members`] takes such an endpoint out of the balancer and puts it back once it accepts
//! connections again:
//!
//! ```text
//!  a request fails as unreachable ─► check(): connect to every endpoint (1 s each)
//!        refused or silent, in the balancer ─► removed (never the last one in)
//!        answering, out of the balancer     ─► added back
//!  any endpoint out ─► a task checks again every second until all are back in
//! ```
//!
//! A request refused on connecting never reached etcd, so the store sends it again after a
//! check (see [`refused`]); other failures are only reported.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use etcd_client::Client;
use tracing::{debug, info, warn};

/// How long a probe's connection may take before the endpoint counts as down.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How often endpoints out of the balancer are tried again.
const RECHECK: Duration = Duration::from_secs(1);
/// Checks this close together are one (many requests fail at once).
const COALESCE: Duration = Duration::from_millis(100);

/// The endpoints and which of them the balancer holds.
#[derive(Clone)]
pub(crate) struct Members {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    /// `(url as given to the client, host:port to probe)`.
    endpoints: Vec<(String, String)>,
    state: tokio::sync::Mutex<State>,
    /// Whether the task re-checking endpoints out of the balancer runs.
    rechecking: AtomicBool,
}

struct State {
    /// Per endpoint: in the balancer.
    serving: Vec<bool>,
    /// When the last check ended.
    checked: Option<Instant>,
}

impl Members {
    /// `endpoints` as given to `client` (`scheme://host:port`).
    pub(crate) fn new(client: Client, endpoints: &[String]) -> Members {
        let endpoints: Vec<(String, String)> = endpoints
            .iter()
            .map(|url| {
                let address = url.split_once("://").map_or(url.as_str(), |(_, a)| a);
                (url.clone(), address.to_owned())
            })
            .collect();
        let serving = vec![true; endpoints.len()];
        Members {
            inner: Arc::new(Inner {
                client,
                endpoints,
                state: tokio::sync::Mutex::new(State {
                    serving,
                    checked: None,
                }),
                rechecking: AtomicBool::new(false),
            }),
        }
    }

    /// How many endpoints there are.
    pub(crate) fn len(&self) -> usize {
        self.inner.endpoints.len()
    }

    /// Per endpoint: whether the balancer holds it.
    #[cfg(test)]
    async fn serving(&self) -> Vec<bool> {
        self.inner.state.lock().await.serving.clone()
    }

    /// Probes every endpoint and updates the balancer; returns once done. A check that
    /// ended a moment ago stands for this one.
    pub(crate) async fn check(&self) {
        if self.inner.endpoints.len() < 2 {
            return;
        }
        let mut state = self.inner.state.lock().await;
        if state.checked.is_some_and(|at| at.elapsed() < COALESCE) {
            return;
        }
        let probes = self
            .inner
            .endpoints
            .iter()
            .map(|(_, address)| answers(address));
        let up = futures_util::future::join_all(probes).await;
        // Endpoints that answer are the ones to hold; if none does, all stay (the requests
        // fail either way, and whichever comes back first is then picked).
        let want: Vec<bool> = if up.iter().any(|u| *u) {
            up
        } else {
            vec![true; up.len()]
        };
        for (i, (url, _)) in self.inner.endpoints.iter().enumerate() {
            if state.serving[i] == want[i] {
                continue;
            }
            let client = &self.inner.client;
            let changed = if want[i] {
                client.add_endpoint(url).await
            } else {
                client.remove_endpoint(url).await
            };
            match changed {
                Ok(()) => {
                    state.serving[i] = want[i];
                    if want[i] {
                        info!(endpoint = %url, "etcd endpoint answers again: back in the balancer");
                    } else {
                        warn!(endpoint = %url, "etcd endpoint does not answer: out of the balancer until it does");
                    }
                }
                Err(e) => debug!(endpoint = %url, error = %e, "cannot change the balancer"),
            }
        }
        state.checked = Some(Instant::now());
        let out = state.serving.iter().any(|s| !*s);
        drop(state);
        if out {
            self.recheck();
        }
    }

    /// Starts the task that checks again every second while an endpoint is out (and the
    /// store is still open).
    fn recheck(&self) {
        if self.inner.rechecking.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RECHECK).await;
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let members = Members { inner };
                members.check().await;
                let state = members.inner.state.lock().await;
                if state.serving.iter().all(|s| *s) {
                    // Cleared under the state's lock: a check that removes an endpoint
                    // after this sees the task gone and starts another.
                    members.inner.rechecking.store(false, Ordering::Release);
                    return;
                }
            }
        });
    }
}

/// Whether `address` accepts a TCP connection within [`PROBE_TIMEOUT`].
async fn answers(address: &str) -> bool {
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(address)).await,
        Ok(Ok(_))
    )
}

/// Whether `e` is a refused connection: the request was never sent, so it can be again.
pub(crate) fn refused(e: &etcd_client::Error) -> bool {
    // etcd-client's error names no source: its causes are walked from the variant's own.
    let mut cause: Option<&(dyn std::error::Error + 'static)> = match e {
        etcd_client::Error::GRpcStatus(status) => Some(status),
        etcd_client::Error::TransportError(transport) => Some(transport),
        etcd_client::Error::IoError(io) => Some(io),
        _ => None,
    };
    while let Some(next) = cause {
        if let Some(io) = next.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        cause = next.source();
    }
    false
}

/// Whether `e` says an endpoint could not be reached (the request may or may not have
/// reached etcd): worth a check of the endpoints.
pub(crate) fn unreachable(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(status) => {
            status.code() as i32 == crate::tonic_code::UNAVAILABLE
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port nothing listens on (bound, then let go).
    fn closed_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[tokio::test]
    async fn an_endpoint_that_refuses_leaves_the_balancer_and_comes_back_when_it_answers() {
        let up = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let down = closed_port();
        let endpoints = [
            format!("http://{}", up.local_addr().unwrap()),
            format!("http://127.0.0.1:{down}"),
        ];
        // The balanced client connects lazily: no etcd is needed to change its endpoints.
        let client = Client::connect(&endpoints, None).await.unwrap();
        let members = Members::new(client, &endpoints);
        assert_eq!(members.serving().await, [true, true]);
        members.check().await;
        assert_eq!(members.serving().await, [true, false]);
        // Back: the task re-checking every second puts it in again.
        let back = tokio::net::TcpListener::bind(("127.0.0.1", down))
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while members.serving().await != [true, true] {
            assert!(Instant::now() < deadline, "not put back");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(back);
        drop(up);
    }

    #[tokio::test]
    async fn when_no_endpoint_answers_all_stay() {
        let endpoints = [
            format!("http://127.0.0.1:{}", closed_port()),
            format!("http://127.0.0.1:{}", closed_port()),
        ];
        let client = Client::connect(&endpoints, None).await.unwrap();
        let members = Members::new(client, &endpoints);
        members.check().await;
        assert_eq!(members.serving().await, [true, true]);
    }
}

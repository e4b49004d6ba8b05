//! The audit log: one `audit.k8s.io/v1` `Event` per recorded stage of a request, as a
//! JSON line (kube-apiserver's `--audit-log-path`), under a [`Policy`].
//!
//! ```text
//!  request path ── record ──► bounded queue (try_send: never waits; full = dropped,
//!                             counted, and said in the log)
//!                                 │
//!                                 ▼  thread "audit-log": render, write, flush when idle;
//!                                    past max_size: FILE.(n) → FILE.(n+1), FILE → FILE.1,
//!                                    a new FILE (mode 0600), at most max_backups kept
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

use serde::Serialize;
use serde_json::{Value, json};

use super::policy::Policy;
use super::{Audit, AuditEvent, Level, Recording, RequestInfo, Stage};
use crate::auth::UserInfo;

/// Where and how the log is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// The file (`-`: standard output, never rotated).
    pub path: PathBuf,
    /// The size in bytes past which the file is rotated; 0: never.
    pub max_size: u64,
    /// How many rotated files are kept (`FILE.1` the newest); 0: all of them.
    pub max_backups: usize,
    /// How many events may wait for the writer; more are dropped (and counted).
    pub queue: usize,
}

impl LogConfig {
    /// A log at `path`: rotated past 100 MiB, 10 rotated files kept, 10,000 events queued
    /// at most.
    pub fn new(path: impl Into<PathBuf>) -> LogConfig {
        LogConfig {
            path: path.into(),
            max_size: 100 << 20,
            max_backups: 10,
            queue: 10_000,
        }
    }
}

/// The log could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open the audit log {path}: {error}")]
pub struct LogError {
    path: String,
    error: std::io::Error,
}

/// Writes the events `policy` selects to a file, from a thread of its own.
pub struct AuditLog {
    policy: Policy,
    queue: SyncSender<AuditEvent>,
    dropped: Arc<AtomicU64>,
}

impl AuditLog {
    /// Opens (or creates, mode 0600) the file now, so that a path that cannot be written
    /// is an error at start, and starts the writer.
    pub fn open(policy: Policy, config: LogConfig) -> Result<AuditLog, LogError> {
        let error = |error| LogError {
            path: config.path.display().to_string(),
            error,
        };
        let sink = Sink::open(&config).map_err(error)?;
        let (queue, events) = std::sync::mpsc::sync_channel(config.queue.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        let counted = dropped.clone();
        let _detached = std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_events(&events, sink, &counted))
            .map_err(error)?;
        Ok(AuditLog {
            policy,
            queue,
            dropped,
        })
    }

    /// How many events were dropped so far (the queue was full, or a write failed).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Audit for AuditLog {
    fn policy(&self, user: &UserInfo, info: &RequestInfo) -> Recording {
        self.policy.decide(user, info)
    }

    fn record(&self, event: AuditEvent) {
        match self.queue.try_send(event) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The writer: renders and writes every event, flushing whenever the queue is empty;
/// says in the log when events were dropped, and when writing fails (once, until it
/// works again).
fn write_events(events: &Receiver<AuditEvent>, mut sink: Sink, dropped: &AtomicU64) {
    let mut reported = 0;
    let mut failing = false;
    let mut line = Vec::new();
    while let Ok(first) = events.recv() {
        let mut next = Some(first);
        while let Some(event) = next {
            line.clear();
            render(&event, &mut line);
            match sink.write(&line) {
                Ok(()) => failing = false,
                Err(e) => {
                    dropped.fetch_add(1, Ordering::Relaxed);
                    if !failing {
                        tracing::warn!(error = %e, "cannot write the audit log");
                    }
                    failing = true;
                }
            }
            next = events.try_recv().ok();
        }
        if let Err(e) = sink.flush()
            && !failing
        {
            tracing::warn!(error = %e, "cannot write the audit log");
        }
        let now = dropped.load(Ordering::Relaxed);
        if now > reported {
            tracing::warn!(
                dropped = now - reported,
                total = now,
                "audit events dropped: the audit log's queue was full or its file could not be written"
            );
            reported = now;
        }
    }
    let _ = sink.flush();
}

/// The file written, its size, and its rotation.
struct Sink {
    /// `None`: standard output.
    path: Option<PathBuf>,
    out: Box<dyn Write + Send>,
    size: u64,
    max_size: u64,
    max_backups: usize,
}

/// Opens `path` to append, created with mode 0600 (an existing file is set to it).
fn open_file(path: &Path) -> std::io::Result<(std::fs::File, u64)> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    let size = file.metadata()?.len();
    Ok((file, size))
}

/// `FILE.n`.
fn backup(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

impl Sink {
    fn open(config: &LogConfig) -> std::io::Result<Sink> {
        if config.path.as_os_str() == "-" {
            return Ok(Sink {
                path: None,
                out: Box::new(std::io::stdout()),
                size: 0,
                max_size: 0,
                max_backups: 0,
            });
        }
        let (file, size) = open_file(&config.path)?;
        Ok(Sink {
            path: Some(config.path.clone()),
            out: Box::new(std::io::BufWriter::with_capacity(64 << 10, file)),
            size,
            max_size: config.max_size,
            max_backups: config.max_backups,
        })
    }

    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        let len = line.len() as u64;
        if self.max_size > 0 && self.size > 0 && self.size + len > self.max_size {
            self.rotate()?;
        }
        self.out.write_all(line)?;
        self.size += len;
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    /// `FILE.n` → `FILE.n+1` (the oldest beyond `max_backups` removed), `FILE` →
    /// `FILE.1`, and a new `FILE`. A failure leaves the current file being written.
    fn rotate(&mut self) -> std::io::Result<()> {
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        self.out.flush()?;
        let mut free = 1;
        while backup(&path, free).exists() {
            free += 1;
        }
        let top = match self.max_backups {
            0 => free,
            max => {
                for n in max..free {
                    std::fs::remove_file(backup(&path, n))?;
                }
                free.min(max)
            }
        };
        for n in (1..top).rev() {
            std::fs::rename(backup(&path, n), backup(&path, n + 1))?;
        }
        std::fs::rename(&path, backup(&path, 1))?;
        let (file, size) = open_file(&path)?;
        self.out = Box::new(std::io::BufWriter::with_capacity(64 << 10, file));
        self.size = size;
        Ok(())
    }
}

/// A user as an Event names it (`authentication.k8s.io/v1` UserInfo).
#[derive(Serialize)]
struct User<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    username: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    uid: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    groups: &'a [String],
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    extra: &'a std::collections::BTreeMap<String, Vec<String>>,
}

impl<'a> From<&'a UserInfo> for User<'a> {
    fn from(user: &'a UserInfo) -> Self {
        User {
            username: &user.name,
            uid: &user.uid,
            groups: &user.groups,
            extra: &user.extra,
        }
    }
}

/// What a resource request is about.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRef<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    resource: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    namespace: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    uid: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    api_group: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    api_version: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    resource_version: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    subresource: &'a str,
}

/// An `audit.k8s.io/v1` Event, its fields in Kubernetes' order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Event<'a> {
    kind: &'static str,
    api_version: &'static str,
    level: &'static str,
    #[serde(rename = "auditID")]
    audit_id: &'a str,
    stage: &'static str,
    #[serde(rename = "requestURI")]
    request_uri: &'a str,
    verb: &'a str,
    user: User<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    impersonated_user: Option<User<'a>>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    source_ips: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user_agent: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    object_ref: Option<ObjectRef<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_status: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_object: Option<Value>,
    request_received_timestamp: String,
    stage_timestamp: String,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    annotations: std::collections::BTreeMap<&'a str, &'a str>,
}

/// A time as Kubernetes writes a `MicroTime`: RFC 3339 in UTC with microseconds.
pub fn micro_time(time: jiff::Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// A body as JSON, read by its media type: protobuf and YAML as the API reads them,
/// anything else as JSON; `None` if it cannot be read.
fn decode(body: &[u8], media_type: &str) -> Option<Value> {
    match media_type {
        "application/vnd.kubernetes.protobuf" => crate::http::protobuf::decode(body).ok(),
        yaml if yaml.ends_with("yaml") => {
            serde_saphyr::from_str(std::str::from_utf8(body).ok()?).ok()
        }
        _ => serde_json::from_slice(body).ok(),
    }
}

/// `from_path`, or when it is empty the object's `metadata.<field>`.
fn or_metadata<'a>(from_path: &'a str, object: Option<&'a Value>, field: &str) -> &'a str {
    match (from_path, object) {
        ("", Some(object)) => object["metadata"][field].as_str().unwrap_or(""),
        _ => from_path,
    }
}

/// `event` as one JSON line, ending in `\n`, into `out`.
pub fn render(event: &AuditEvent, out: &mut Vec<u8>) {
    let request = &*event.request;
    let level = request.recording.level;
    let info = &request.info;
    // Kubernetes reads the object of a create or an update once its handler has it:
    // after RequestReceived. It names the object when the path does not.
    let object = match (&request.body, event.stage) {
        (_, Stage::RequestReceived) => None,
        (Some((body, media_type)), _) => decode(body, media_type),
        (None, _) => None,
    };
    let written = object
        .as_ref()
        .filter(|_| matches!(info.verb, "create" | "update"));
    let object_ref = info.resource_request.then(|| ObjectRef {
        resource: &info.resource,
        namespace: or_metadata(&info.namespace, written, "namespace"),
        name: or_metadata(&info.name, written, "name"),
        uid: or_metadata("", written, "uid"),
        api_group: &info.group,
        api_version: &info.version,
        resource_version: or_metadata("", written, "resourceVersion"),
        subresource: &info.subresource,
    });
    let response_status = event.code.map(|code| {
        let mut status = json!({"metadata": {}, "code": code});
        let answer = event
            .response
            .as_ref()
            .filter(|_| code >= 400)
            .and_then(|body| serde_json::from_slice::<Value>(body).ok())
            .filter(|answer| answer["kind"] == "Status");
        if let Some(answer) = answer {
            for field in ["status", "message", "reason", "details"] {
                if !answer[field].is_null() {
                    status[field] = answer[field].clone();
                }
            }
        }
        status
    });
    let response_object = match (level, event.stage, &event.response) {
        (Level::RequestResponse, Stage::ResponseComplete, Some(body)) => {
            serde_json::from_slice(body).ok()
        }
        _ => None,
    };
    let request_object = match level {
        Level::Request | Level::RequestResponse => object.clone(),
        _ => None,
    };
    let rendered = Event {
        kind: "Event",
        api_version: "audit.k8s.io/v1",
        level: level.as_str(),
        audit_id: &request.id,
        stage: event.stage.as_str(),
        request_uri: &request.uri,
        verb: info.verb,
        user: User::from(&*request.user),
        impersonated_user: event.impersonated.as_deref().map(User::from),
        source_ips: request.source_ips.iter().map(ToString::to_string).collect(),
        user_agent: request.user_agent.as_deref(),
        object_ref,
        response_status,
        request_object,
        response_object,
        request_received_timestamp: micro_time(request.received),
        stage_timestamp: micro_time(event.at),
        annotations: event
            .annotations
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
    };
    // Serializing these types cannot fail (string keys, no maps of other keys).
    let _ = serde_json::to_writer(&mut *out, &rendered);
    out.push(b'\n');
}

#[cfg(test)]
mod tests;

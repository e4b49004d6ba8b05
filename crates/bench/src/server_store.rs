//! The store scenario on a database server: the PostgreSQL or etcd store against its raw
//! engine on the same server, side by side, by concurrent writers; and watch delivery
//! under 64 writers.
//!
//! ```text
//!  postgres://…  store: N writers → one writer task → flotilla_write(batch)
//!                raw:   one connection, INSERT … SELECT unnest(keys, values) of N rows a
//!                       statement (one transaction, one commit: the store's batching),
//!                       the server's synchronous_commit for both
//!  etcd://…      store: N writers → a txn each (compare, put)
//!                raw:   N tasks → a plain put each, one client
//!                floor: N tasks → a txn each, create-if-absent (compare create_revision
//!                       = 0, put): the least any compare-and-swap store on etcd costs
//! ```
//!
//! Rounds alternate raw (and the floor) and store; each ratio is the median of the rounds'
//! ratios. Each run writes under keys of its own, so a server that holds an earlier run's
//! keys serves another run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_store::{Bytes, Store};
use futures_util::StreamExt;
use serde_json::json;

use crate::{Error, Latency};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The store URL (`postgres://…` or `etcd://…`).
    pub url: String,
    /// Fewer writes and rounds, for a smoke run.
    pub quick: bool,
    /// The size of every value written, in bytes.
    pub value_size: usize,
}

/// The engine under the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// PostgreSQL.
    Postgres,
    /// etcd.
    Etcd,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Postgres => "postgres",
            Engine::Etcd => "etcd",
        }
    }
}

/// The results.
#[derive(Clone, Debug)]
pub struct Report {
    /// The engine.
    pub engine: Engine,
    /// By writers: raw writes/s, store writes/s, median ratio.
    pub by_writers: Vec<(usize, f64, f64, f64)>,
    /// etcd only, by writers: the floor's writes/s (create-if-absent txns), and the median
    /// ratio of the store to it.
    pub floor: Vec<(usize, f64, f64)>,
    /// Watch delivery under 64 writers, from the write's acknowledgement.
    pub watch_after_ack: Latency,
    /// Watch delivery under 64 writers, from the write's submission.
    pub watch_end_to_end: Latency,
}

impl Report {
    /// The engine's name.
    pub fn engine_name(&self) -> &'static str {
        self.engine.name()
    }

    /// The median ratio at 64 writers.
    pub fn ratio_64(&self) -> Option<f64> {
        self.by_writers
            .iter()
            .find(|(w, ..)| *w == 64)
            .map(|(.., r)| *r)
    }

    /// As JSON.
    pub fn json(&self) -> serde_json::Value {
        json!({
            "scenario": "store",
            "engine": self.engine.name(),
            "by_writers": self.by_writers.iter().map(|(w, raw, store, ratio)| json!({
                "writers": w, "raw_per_second": raw, "store_per_second": store, "ratio": ratio,
            })).collect::<Vec<_>>(),
            "ratio_64_writers_to_raw": self.ratio_64(),
            "floor_by_writers": self.floor.iter().map(|(w, floor, ratio)| json!({
                "writers": w, "floor_per_second": floor, "store_to_floor": ratio,
            })).collect::<Vec<_>>(),
            "watch_delivery_after_ack": self.watch_after_ack.json(),
            "watch_delivery_end_to_end": self.watch_end_to_end.json(),
        })
    }

    /// A one-screen summary.
    pub fn table(&self) -> String {
        let raw = match self.engine {
            Engine::Postgres => "raw INSERTs, as many rows a statement as writers",
            Engine::Etcd => "raw puts, as many concurrent as writers",
        };
        let mut out = format!("store on {}, against {raw}\n", self.engine.name());
        for (writers, raw, store, ratio) in &self.by_writers {
            out += &format!(
                "  {writers:>2} writers   raw {raw:>9.0}/s   store {store:>9.0}/s   ratio {ratio:.2}\n"
            );
        }
        for (writers, floor, ratio) in &self.floor {
            out += &format!(
                "  {writers:>2} writers   floor (create-if-absent txns) {floor:>9.0}/s   store / floor {ratio:.2}\n"
            );
        }
        let l = |l: &Latency| {
            format!(
                "p50 {:.2} ms  p99 {:.2} ms  max {:.1} ms",
                l.p50_ms, l.p99_ms, l.max_ms
            )
        };
        out += &format!(
            "  watch, after ack (64 writers)  {}\n",
            l(&self.watch_after_ack)
        );
        out += &format!(
            "  watch, end to end              {}\n",
            l(&self.watch_end_to_end)
        );
        out
    }
}

/// How many alternating rounds of raw and store each comparison takes.
const ROUNDS: usize = 3;

/// Runs the scenario, printing progress to stderr.
pub async fn run(options: &Options) -> Result<Report, Error> {
    let engine = if options.url.starts_with("etcd://") {
        Engine::Etcd
    } else {
        Engine::Postgres
    };
    let value = Bytes::from(vec![0x5au8; options.value_size]);
    let rounds = if options.quick { 1 } else { ROUNDS };
    let store: Arc<dyn Store> = match engine {
        Engine::Postgres => {
            Arc::new(flotilla_store_postgres::PostgresStore::open(&options.url).await?)
        }
        Engine::Etcd => Arc::new(flotilla_store_etcd::EtcdStore::open(&options.url).await?),
    };
    let run = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
    );
    let raw = Raw::connect(engine, &options.url, &run).await?;
    let mut by_writers = Vec::new();
    let mut floor = Vec::new();
    for writers in [1, 16, 64] {
        let total = if options.quick {
            writers.max(8) * 20
        } else if writers == 1 {
            1000
        } else {
            writers * 200
        };
        eprintln!(
            "store ({}): {writers} writers, {rounds} rounds…",
            engine.name()
        );
        let (mut raws, mut stores, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        let (mut floors, mut to_floor) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let r = raw.load(writers, total, &value, round, Write::Put).await?;
            let f = match engine {
                Engine::Etcd => Some(
                    raw.load(writers, total, &value, round, Write::CreateIfAbsent)
                        .await?,
                ),
                Engine::Postgres => None,
            };
            let s = write_load(
                &store,
                writers,
                total,
                &value,
                &format!("/bench-{run}/{writers}/{round}"),
                None,
            )
            .await?;
            raws.push(r);
            stores.push(s);
            ratios.push(s / r);
            if let Some(f) = f {
                floors.push(f);
                to_floor.push(s / f);
            }
        }
        by_writers.push((writers, median(raws), median(stores), median(ratios)));
        if !floors.is_empty() {
            floor.push((writers, median(floors), median(to_floor)));
        }
    }
    eprintln!(
        "store ({}): watch delivery under 64 writers…",
        engine.name()
    );
    let total = if options.quick { 640 } else { 64 * 200 };
    let (watch_after_ack, watch_end_to_end) =
        watch_delivery(&store, total, &value, &format!("/watch-{run}")).await?;
    raw.clean().await?;
    Ok(Report {
        engine,
        by_writers,
        floor,
        watch_after_ack,
        watch_end_to_end,
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The raw engine.
enum Raw {
    Postgres(tokio_postgres::Client),
    Etcd(Box<etcd_client::Client>, String),
}

fn backend(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Store(flotilla_store::Error::backend(
        format!("raw baseline: {what}"),
        e,
    ))
}

/// A plain etcd client of the endpoints of `config` (no TLS, as the bench's servers).
pub(crate) async fn etcd_client(
    config: &flotilla_store_etcd::Config,
) -> Result<etcd_client::Client, Error> {
    let endpoints: Vec<String> = config
        .endpoints
        .iter()
        .map(|e| format!("http://{e}"))
        .collect();
    etcd_client::Client::connect(endpoints, None)
        .await
        .map_err(|e| backend("connect to etcd", e))
}

impl Raw {
    async fn connect(engine: Engine, url: &str, run: &str) -> Result<Raw, Error> {
        match engine {
            Engine::Postgres => {
                let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                    .await
                    .map_err(|e| backend("connect", e))?;
                tokio::spawn(connection);
                client
                    .batch_execute(
                        "DROP TABLE IF EXISTS flotilla_bench_raw;
                         CREATE TABLE flotilla_bench_raw (id bigserial PRIMARY KEY,
                             key bytea NOT NULL, value bytea NOT NULL);
                         CREATE INDEX ON flotilla_bench_raw (key);",
                    )
                    .await
                    .map_err(|e| backend("create the table", e))?;
                Ok(Raw::Postgres(client))
            }
            Engine::Etcd => {
                let config = flotilla_store_etcd::Config::from_url(url)?;
                let client = etcd_client(&config).await?;
                Ok(Raw::Etcd(
                    Box::new(client),
                    format!("{}-raw-{run}/", config.prefix),
                ))
            }
        }
    }

    /// `total` writes, `writers` at a time (rows a statement, or concurrent puts or
    /// create-if-absent txns); writes/s.
    async fn load(
        &self,
        writers: usize,
        total: usize,
        value: &Bytes,
        round: usize,
        write: Write,
    ) -> Result<f64, Error> {
        let start = Instant::now();
        match self {
            Raw::Postgres(client) => {
                let statement = client
                    .prepare(
                        "INSERT INTO flotilla_bench_raw (key, value)
                         SELECT * FROM unnest($1::bytea[], $2::bytea[])",
                    )
                    .await
                    .map_err(|e| backend("prepare", e))?;
                let mut written = 0;
                while written < total {
                    let n = writers.min(total - written);
                    let keys: Vec<Vec<u8>> = (written..written + n)
                        .map(|i| format!("/raw/{writers}/{round}/{i:08}").into_bytes())
                        .collect();
                    let values: Vec<&[u8]> = vec![&value[..]; n];
                    client
                        .execute(&statement, &[&keys, &values])
                        .await
                        .map_err(|e| backend("insert", e))?;
                    written += n;
                }
            }
            Raw::Etcd(client, prefix) => {
                let mut tasks = Vec::new();
                for w in 0..writers {
                    let mut kv = client.kv_client();
                    let (prefix, value) = (prefix.clone(), value.to_vec());
                    let count = total / writers + usize::from(w < total % writers);
                    tasks.push(tokio::spawn(async move {
                        for i in 0..count {
                            match write {
                                Write::Put => {
                                    kv.put(
                                        format!("{prefix}{writers}/{round}/{w}/{i:08}"),
                                        value.clone(),
                                        None,
                                    )
                                    .await
                                    .map_err(|e| backend("put", e))?;
                                }
                                Write::CreateIfAbsent => {
                                    let key = format!("{prefix}txn/{writers}/{round}/{w}/{i:08}");
                                    let txn = etcd_client::Txn::new()
                                        .when([etcd_client::Compare::create_revision(
                                            key.clone(),
                                            etcd_client::CompareOp::Equal,
                                            0,
                                        )])
                                        .and_then([etcd_client::TxnOp::put(
                                            key,
                                            value.clone(),
                                            None,
                                        )]);
                                    let response =
                                        kv.txn(txn).await.map_err(|e| backend("txn", e))?;
                                    if !response.succeeded() {
                                        return Err(Error::Check(
                                            "a create-if-absent txn of a new key failed".into(),
                                        ));
                                    }
                                }
                            }
                        }
                        Ok::<_, Error>(())
                    }));
                }
                for task in tasks {
                    task.await??;
                }
            }
        }
        Ok(total as f64 / start.elapsed().as_secs_f64())
    }

    async fn clean(&self) -> Result<(), Error> {
        match self {
            Raw::Postgres(client) => client
                .batch_execute("DROP TABLE IF EXISTS flotilla_bench_raw")
                .await
                .map_err(|e| backend("drop the table", e)),
            Raw::Etcd(client, prefix) => client
                .kv_client()
                .delete(
                    prefix.clone(),
                    Some(etcd_client::DeleteOptions::new().with_prefix()),
                )
                .await
                .map(|_| ())
                .map_err(|e| backend("delete", e)),
        }
    }
}

/// How the raw side writes.
#[derive(Clone, Copy)]
enum Write {
    /// A plain write (etcd put; PostgreSQL's only way).
    Put,
    /// etcd: a txn that puts the key only if it does not exist.
    CreateIfAbsent,
}

/// When each write was submitted and acknowledged, by revision.
type Timeline = Vec<(u64, Instant, Instant)>;

/// `total` creates from `writers` concurrent tasks under `prefix`; writes/s.
async fn write_load(
    store: &Arc<dyn Store>,
    writers: usize,
    total: usize,
    value: &Bytes,
    prefix: &str,
    timeline: Option<&mut Timeline>,
) -> Result<f64, Error> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (store, value, prefix) = (store.clone(), value.clone(), prefix.to_owned());
        let count = total / writers + usize::from(w < total % writers);
        tasks.push(tokio::spawn(async move {
            let mut times = Vec::with_capacity(count);
            for i in 0..count {
                let submitted = Instant::now();
                let revision = store
                    .create(format!("{prefix}/{w:03}/{i:08}").as_bytes(), value.clone())
                    .await?;
                times.push((revision.get(), submitted, Instant::now()));
            }
            Ok::<_, Error>(times)
        }));
    }
    let mut all = Vec::with_capacity(total);
    for task in tasks {
        all.extend(task.await??);
    }
    let per_second = total as f64 / start.elapsed().as_secs_f64();
    if let Some(timeline) = timeline {
        *timeline = all;
    }
    Ok(per_second)
}

/// Watch delivery while 64 writers write `total` keys: after acknowledgement, and end to end.
async fn watch_delivery(
    store: &Arc<dyn Store>,
    total: usize,
    value: &Bytes,
    prefix: &str,
) -> Result<(Latency, Latency), Error> {
    let since = store.current_revision().await?;
    let mut watch = store.watch(format!("{prefix}/").as_bytes(), since).await?;
    let watcher = tokio::spawn(async move {
        let mut arrivals = Vec::with_capacity(total);
        while arrivals.len() < total {
            match watch.next().await {
                Some(Ok(event)) => arrivals.push((event.revision().get(), Instant::now())),
                Some(Err(e)) => return Err(Error::Store(e)),
                None => return Err(Error::Check("the watch ended early".into())),
            }
        }
        Ok(arrivals)
    });
    let mut timeline = Timeline::new();
    write_load(store, 64, total, value, prefix, Some(&mut timeline)).await?;
    let arrivals = tokio::time::timeout(Duration::from_secs(120), watcher)
        .await
        .map_err(|_| Error::Check("the watcher did not see every write within 120 s".into()))???;
    timeline.sort_unstable_by_key(|(revision, _, _)| *revision);
    if arrivals.len() != timeline.len() {
        return Err(Error::Check("the watcher saw every write once".into()));
    }
    let (mut after_ack, mut end_to_end) = (Vec::new(), Vec::new());
    for ((revision, submitted, acked), (seen, arrived)) in timeline.iter().zip(&arrivals) {
        if revision != seen {
            return Err(Error::Check(
                "the watcher saw the writes in revision order".into(),
            ));
        }
        after_ack.push(arrived.saturating_duration_since(*acked));
        end_to_end.push(arrived.saturating_duration_since(*submitted));
    }
    Ok((Latency::of(after_ack), Latency::of(end_to_end)))
}

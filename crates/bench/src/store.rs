//! The store scenario: durable writes, lists and watch delivery of [`SqliteStore`] against
//! a raw rusqlite loop with the same durability and batching, in one run.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_store::{Bytes, ListOptions, Store};
use flotilla_store_sqlite::SqliteStore;
use futures_util::StreamExt;
use serde_json::json;

use crate::{Error, Latency};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where the database files go (a temporary directory inside it); it should be on the
    /// file system under test.
    pub dir: PathBuf,
    /// Fewer iterations, for a smoke run.
    pub quick: bool,
    /// The size of every value written, in bytes.
    pub value_size: usize,
}

impl Options {
    /// Full runs with 1 KiB values under `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Options {
            dir: dir.into(),
            quick: false,
            value_size: 1024,
        }
    }

    fn scale(&self, full: usize) -> usize {
        if self.quick {
            (full / 10).max(64)
        } else {
            full
        }
    }
}

/// A throughput measurement.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Throughput {
    /// Rows or writes per second.
    pub per_second: f64,
    /// Mean rows or writes per transaction.
    pub batch: f64,
}

/// The results of the store scenario.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Raw SQLite, one row per transaction: per-commit latency (medians of the rounds'
    /// percentiles, as for every figure measured in rounds).
    pub raw_single: Latency,
    /// Raw SQLite throughput by rows per transaction.
    pub raw: Vec<(usize, Throughput)>,
    /// The store, one writer: per-write latency.
    pub single_writer: Latency,
    /// The store's throughput by concurrent writers.
    pub writers: Vec<(usize, Throughput)>,
    /// By concurrent writers: the median over the rounds of the store's throughput divided
    /// by the raw loop's at as many rows per transaction, measured back to back.
    pub ratios: Vec<(usize, f64)>,
    /// Listing 10,000 keys in one page, median of several runs.
    pub list_one_page_ms: f64,
    /// Listing 10,000 keys in pages of 500 at one revision, median of several runs.
    pub list_paged_ms: f64,
    /// Watch delivery under the 64-writer load: from the write's acknowledgement to its
    /// arrival at the watcher (0 when the watcher had it first).
    pub watch_after_ack: Latency,
    /// Watch delivery under the 64-writer load: from the write's submission to its arrival.
    pub watch_end_to_end: Latency,
}

impl Report {
    /// The store's 64-writer throughput as a share of the raw 64-rows-per-transaction limit.
    pub fn ratio_64(&self) -> Option<f64> {
        self.ratios.iter().find(|(w, _)| *w == 64).map(|(_, r)| *r)
    }

    /// As JSON.
    pub fn json(&self) -> serde_json::Value {
        let rates = |v: &[(usize, Throughput)], k: &str| {
            v.iter()
                .map(|(n, t)| json!({k: n, "per_second": t.per_second, "mean_batch": t.batch}))
                .collect::<Vec<_>>()
        };
        json!({
            "scenario": "store",
            "raw_sqlite": {
                "single_row_commit": self.raw_single.json(),
                "by_rows_per_transaction": rates(&self.raw, "rows_per_transaction"),
            },
            "store": {
                "single_writer": self.single_writer.json(),
                "by_writers": rates(&self.writers, "writers"),
                "ratio_to_raw_by_writers": self.ratios.iter()
                    .map(|(w, r)| json!({"writers": w, "ratio": r})).collect::<Vec<_>>(),
                "list_10000_one_page_ms": self.list_one_page_ms,
                "list_10000_pages_of_500_ms": self.list_paged_ms,
                "watch_delivery_after_ack": self.watch_after_ack.json(),
                "watch_delivery_end_to_end": self.watch_end_to_end.json(),
            },
            "ratio_64_writers_to_raw_64_rows": self.ratio_64(),
        })
    }

    /// A one-screen summary.
    pub fn table(&self) -> String {
        let mut out =
            String::from("store: SQLite WAL, synchronous=FULL, one fsync per transaction\n");
        let l = |l: &Latency| {
            format!(
                "p50 {:.3} ms  p99 {:.3} ms  max {:.2} ms",
                l.p50_ms, l.p99_ms, l.max_ms
            )
        };
        out += &format!("  raw sqlite, 1 row/commit       {}\n", l(&self.raw_single));
        for (rows, t) in &self.raw {
            out += &format!(
                "  raw sqlite, {rows:>3} rows/commit    {:>9.0} rows/s\n",
                t.per_second
            );
        }
        out += &format!(
            "  store, 1 writer, latency       {}\n",
            l(&self.single_writer)
        );
        for ((writers, t), (_, ratio)) in self.writers.iter().zip(&self.ratios) {
            out += &format!(
                "  store, {writers:>2} writers              {:>9.0} writes/s  (mean batch {:.1}; {ratio:.2} of raw)\n",
                t.per_second, t.batch
            );
        }
        out += &format!(
            "  list 10,000 keys               {:.1} ms one page, {:.1} ms in pages of 500\n",
            self.list_one_page_ms, self.list_paged_ms
        );
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

/// Runs the store scenario, printing progress to stderr.
pub async fn run(options: &Options) -> Result<Report, Error> {
    std::fs::create_dir_all(&options.dir)?;
    let scratch = tempfile::tempdir_in(&options.dir)?;
    let value = Bytes::from(vec![0x5au8; options.value_size]);
    let mut report = Report::default();
    let mut case = 0;
    let mut fresh = |name: &str| {
        case += 1;
        scratch.path().join(format!("{case}-{name}.db"))
    };

    // The disk's speed drifts from one second to the next, so every comparison alternates
    // the raw loop and the store, several rounds each, and takes the medians.
    let rounds = if options.quick { 1 } else { ROUNDS };
    eprintln!("store: one writer against one row per commit, {rounds} rounds…");
    let (mut raw_single, mut single) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (latency, _) = raw(&fresh("raw"), 1, options.scale(2000), &value).await?;
        raw_single.push(latency);
        let store = SqliteStore::open(fresh("single")).await?;
        let mut samples = Vec::new();
        for i in 0..options.scale(2000) {
            let start = Instant::now();
            store
                .create(format!("/single/{i:08}").as_bytes(), value.clone())
                .await?;
            samples.push(start.elapsed());
        }
        single.push(Latency::of(samples));
    }
    report.raw_single = median_latency(raw_single);
    report.single_writer = median_latency(single);

    for writers in [1, 16, 64] {
        eprintln!("store: {writers} writers against {writers} rows per commit, {rounds} rounds…");
        let total = options.scale(if writers == 1 { 2000 } else { 32_000 });
        let (mut raws, mut stores) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            raws.push(raw(&fresh("raw"), writers, total, &value).await?.1);
            let store = SqliteStore::open(fresh("writers")).await?;
            stores.push(write_load(&store, writers, total, &value, None).await?);
        }
        let mut ratios: Vec<f64> = raws
            .iter()
            .zip(&stores)
            .map(|(raw, store)| store.per_second / raw.per_second)
            .collect();
        ratios.sort_by(f64::total_cmp);
        report.ratios.push((writers, ratios[ratios.len() / 2]));
        report.raw.push((writers, median_throughput(raws)));
        report.writers.push((writers, median_throughput(stores)));
    }

    eprintln!("store: list 10,000 keys…");
    let store = SqliteStore::open(fresh("list")).await?;
    write_load(&store, 64, 10_000, &value, None).await?;
    let (mut one_page, mut paged) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let start = Instant::now();
        let page = store.list(b"/load/", ListOptions::default()).await?;
        one_page.push(start.elapsed());
        check(page.kvs.len() == 10_000, "a list of 10,000 keys")?;
        let start = Instant::now();
        let mut options = ListOptions {
            limit: 500,
            ..Default::default()
        };
        let mut seen = 0;
        loop {
            let page = store.list(b"/load/", options.clone()).await?;
            seen += page.kvs.len();
            let Some(next) = page.next else { break };
            options = ListOptions {
                revision: Some(page.revision),
                limit: 500,
                after: Some(next),
            };
        }
        paged.push(start.elapsed());
        check(seen == 10_000, "a paged list of 10,000 keys")?;
    }
    report.list_one_page_ms = Latency::of(one_page).p50_ms;
    report.list_paged_ms = Latency::of(paged).p50_ms;
    drop(store);

    eprintln!("store: watch delivery under 64 writers…");
    let store = SqliteStore::open(fresh("watch")).await?;
    let (after_ack, end_to_end) = watch_delivery(&store, options.scale(32_000), &value).await?;
    report.watch_after_ack = after_ack;
    report.watch_end_to_end = end_to_end;
    Ok(report)
}

/// How many alternating rounds of raw loop and store each comparison takes.
const ROUNDS: usize = 5;

fn median_latency(mut runs: Vec<Latency>) -> Latency {
    runs.sort_by(|a, b| a.p50_ms.total_cmp(&b.p50_ms));
    let p50 = runs[runs.len() / 2];
    runs.sort_by(|a, b| a.p99_ms.total_cmp(&b.p99_ms));
    let p99 = runs[runs.len() / 2];
    Latency {
        p50_ms: p50.p50_ms,
        p99_ms: p99.p99_ms,
        max_ms: runs.iter().map(|l| l.max_ms).fold(0.0, f64::max),
        samples: runs.iter().map(|l| l.samples).sum(),
    }
}

fn median_throughput(mut runs: Vec<Throughput>) -> Throughput {
    runs.sort_by(|a, b| a.per_second.total_cmp(&b.per_second));
    runs[runs.len() / 2]
}

fn check(ok: bool, what: &str) -> Result<(), Error> {
    if ok {
        Ok(())
    } else {
        Err(Error::Check(what.to_owned()))
    }
}

/// The limit: `total` rows of `value` inserted `rows` per transaction into a plain table,
/// with the store's durability settings. Returns per-transaction latency and row rate.
async fn raw(
    path: &Path,
    rows: usize,
    total: usize,
    value: &Bytes,
) -> Result<(Latency, Throughput), Error> {
    let path = path.to_path_buf();
    let value = value.clone();
    tokio::task::spawn_blocking(move || -> Result<_, Error> {
        let mut conn = rusqlite::Connection::open(&path)?;
        conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))?;
        conn.execute_batch(
            "PRAGMA synchronous = FULL;
             CREATE TABLE raw (id INTEGER PRIMARY KEY, key BLOB NOT NULL, value BLOB NOT NULL);",
        )?;
        let mut samples = Vec::with_capacity(total / rows + 1);
        let start = Instant::now();
        let mut written = 0;
        while written < total {
            let t = Instant::now();
            let tx = conn.transaction()?;
            {
                let mut insert =
                    tx.prepare_cached("INSERT INTO raw (key, value) VALUES (?1, ?2)")?;
                for _ in 0..rows.min(total - written) {
                    let key = format!("/raw/{written:08}");
                    insert.execute(rusqlite::params![key.as_bytes(), value.as_ref()])?;
                    written += 1;
                }
            }
            tx.commit()?;
            samples.push(t.elapsed());
        }
        let transactions = samples.len();
        Ok((
            Latency::of(samples),
            Throughput {
                per_second: total as f64 / start.elapsed().as_secs_f64(),
                batch: total as f64 / transactions as f64,
            },
        ))
    })
    .await?
}

/// When each write was submitted and acknowledged, by revision.
type Timeline = Vec<(u64, Instant, Instant)>;

/// `total` creates of `value` from `writers` concurrent tasks; returns the write rate and
/// the mean group-commit batch.
async fn write_load(
    store: &SqliteStore,
    writers: usize,
    total: usize,
    value: &Bytes,
    timeline: Option<&mut Timeline>,
) -> Result<Throughput, Error> {
    let before = store.stats();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        let value = value.clone();
        let count = total / writers + usize::from(w < total % writers);
        tasks.push(tokio::spawn(async move {
            let mut times = Vec::with_capacity(count);
            for i in 0..count {
                let submitted = Instant::now();
                let revision = store
                    .create(format!("/load/{w:03}/{i:08}").as_bytes(), value.clone())
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
    let elapsed = start.elapsed();
    let after = store.stats();
    if let Some(timeline) = timeline {
        *timeline = all;
    }
    let transactions = (after.transactions - before.transactions).max(1);
    Ok(Throughput {
        per_second: total as f64 / elapsed.as_secs_f64(),
        batch: (after.writes - before.writes) as f64 / transactions as f64,
    })
}

/// Watch delivery while 64 writers write `total` keys: after acknowledgement, and end to end.
async fn watch_delivery(
    store: &SqliteStore,
    total: usize,
    value: &Bytes,
) -> Result<(Latency, Latency), Error> {
    let since = store.current_revision().await?;
    let mut watch = store.watch(b"/load/", since).await?;
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
    let store = Arc::new(store.clone());
    let mut timeline = Timeline::new();
    write_load(&store, 64, total, value, Some(&mut timeline)).await?;
    let arrivals = tokio::time::timeout(Duration::from_secs(60), watcher)
        .await
        .map_err(|_| Error::Check("the watcher did not see every write within 60 s".into()))???;
    timeline.sort_unstable_by_key(|(revision, _, _)| *revision);
    check(
        arrivals.len() == timeline.len(),
        "the watcher saw every write once",
    )?;
    let (mut after_ack, mut end_to_end) = (Vec::new(), Vec::new());
    for ((revision, submitted, acked), (seen, arrived)) in timeline.iter().zip(&arrivals) {
        check(
            revision == seen,
            "the watcher saw the writes in revision order",
        )?;
        after_ack.push(arrived.saturating_duration_since(*acked));
        end_to_end.push(arrived.saturating_duration_since(*submitted));
    }
    Ok((Latency::of(after_ack), Latency::of(end_to_end)))
}

//! `flotilla bench --scenario propagation --quick --clusters 3 --store postgres://… |
//! etcd://…` against a PostgreSQL and an etcd the tests start: each fleet size is measured
//! with the hub on SQLite and again with the hub on the server, in a database or prefix of
//! the run's own that is gone afterwards; the summary compares the two hubs' median p99. No
//! timing is asserted.
//!
//! ```text
//!  bench ─► hub (SQLite) + sim (3 members): rounds ─► hub (--store server/room) + sim: rounds
//!           the room (database flotilla_propagation_* | prefix /bench/propagation-*) dropped
//! ```

#[path = "../../store-etcd/tests/support/etcd.rs"]
mod etcd;
#[path = "../../store-postgres/tests/support/postgres.rs"]
mod postgres;

use std::io::{Read, Write};
use std::process::Command;

use serde_json::{Value, json};

/// Runs the propagation scenario at 3 members with the hub also on `url`; its report.
fn bench(url: &str, engine: &str) -> Value {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args([
            "bench",
            "--quick",
            "--scenario",
            "propagation",
            "--clusters",
            "3",
            "--store",
            url,
            "--out",
        ])
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.lines().any(|l| l.starts_with("propagation")
            && l.contains(&format!("N=3: p99 hub on {engine} / on sqlite"))
            && l.ends_with("≤ 1.5× at N=1000")),
        "{stdout}"
    );
    let text = std::fs::read_to_string(out.path().join("propagation.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn positive(v: &Value) -> f64 {
    let x = v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    assert!(x.is_finite() && x > 0.0, "{v}");
    x
}

/// Both hubs measured the same fleet, every member seen in every round, and the ratio is
/// the two p99s'.
fn check(report: &Value, engine: &str) {
    assert_eq!(report["options"]["server_store"], engine, "{report}");
    let [sqlite] = report["points"].as_array().unwrap().as_slice() else {
        panic!("one SQLite point: {report}")
    };
    let [server] = report["on_server"].as_array().unwrap().as_slice() else {
        panic!("one point on the server: {report}")
    };
    for (point, store) in [(sqlite, "sqlite"), (server, engine)] {
        assert_eq!(point["store"], store, "{point}");
        assert_eq!(point["clusters"], 3, "{point}");
        let rounds = point["rounds"].as_array().unwrap();
        assert_eq!(rounds.len(), 2, "{point}");
        for round in rounds {
            assert_eq!(round["hub"]["samples"], 3, "{round}");
            assert_eq!(round["baseline"]["samples"], 3, "{round}");
        }
        positive(&point["hub"]["p99_ms"]);
    }
    let [pair] = report["p99_on_server_over_sqlite"]
        .as_array()
        .unwrap()
        .as_slice()
    else {
        panic!("one comparison: {report}")
    };
    assert_eq!(pair["store"], engine, "{pair}");
    // Two rounds each: the median of their p99s is the middle of the two.
    let median = |point: &Value| {
        let p99: Vec<f64> = point["rounds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| positive(&r["hub"]["p99_ms"]))
            .collect();
        (p99[0] + p99[1]) / 2.0
    };
    // The report's numbers are rounded (to the nanosecond): the median of the rounded
    // p99s may differ from the rounded median in its last digit.
    let near = |reported: &Value, computed: f64| {
        let reported = positive(reported);
        assert!(
            (reported - computed).abs() < 1e-5,
            "{reported} {computed}: {pair}"
        );
    };
    near(&pair["median_hub_p99_ms"], median(server));
    near(&pair["sqlite_median_hub_p99_ms"], median(sqlite));
    let ratio = positive(&pair["ratio"]);
    let expected = median(server) / median(sqlite);
    assert!((ratio - expected).abs() < 1e-9, "{ratio} {expected}");
}

#[test]
fn the_propagation_benchmark_compares_a_postgresql_hub_with_the_sqlite_hub() {
    let pg = postgres::PgServer::start();
    let report = bench(&pg.url(), "postgres");
    check(&report, "postgres");
    // The run's own database is gone.
    let databases = Command::new(postgres::bindir().join("psql"))
        .arg(pg.url())
        .args(["-At", "-c", "SELECT datname FROM pg_database"])
        .output()
        .unwrap();
    let names = String::from_utf8_lossy(&databases.stdout);
    assert!(databases.status.success(), "{names}");
    assert!(names.lines().any(|n| n == "postgres"), "{names}");
    assert!(!names.contains("flotilla_propagation"), "{names}");
}

/// A call to etcd's JSON gateway (`/v3/kv/…`) on `endpoint` (host:port); its answer.
fn etcd_call(endpoint: &str, path: &str, body: &Value) -> Value {
    let body = body.to_string();
    let mut stream = std::net::TcpStream::connect(endpoint).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.0\r\nHost: {endpoint}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, json) = answer.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{answer}"
    );
    serde_json::from_str(json).unwrap()
}

/// How many keys etcd holds under `prefix`.
fn keys_under(endpoint: &str, prefix: &str) -> u64 {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().unwrap() += 1;
    let answer = etcd_call(
        endpoint,
        "/v3/kv/range",
        &json!({"key": b64(prefix.as_bytes()), "range_end": b64(&end), "count_only": true}),
    );
    // The gateway leaves out a zero count.
    answer["count"].as_str().map_or(0, |n| n.parse().unwrap())
}

#[test]
fn the_propagation_benchmark_compares_an_etcd_hub_with_the_sqlite_hub() {
    let server = etcd::EtcdServer::start();
    let report = bench(&server.url("/bench"), "etcd");
    check(&report, "etcd");
    // The run's prefix holds nothing; the count does see a key that is there.
    let endpoint = server.endpoint();
    assert_eq!(keys_under(&endpoint, "/bench/propagation-"), 0);
    use base64::Engine as _;
    let key = base64::engine::general_purpose::STANDARD.encode("/bench/propagation-control");
    etcd_call(&endpoint, "/v3/kv/put", &json!({"key": key, "value": key}));
    assert_eq!(keys_under(&endpoint, "/bench/propagation-"), 1);
}

//! The store and api reports as charts and summary rows (their scenarios live in
//! [`store`](crate::store) and [`api`](crate::api)).

use crate::plot::Chart;
use crate::{Latency, Row, api, ratio, store};

/// The store scenario's chart: throughput by concurrency, the store against raw SQLite.
pub fn store_charts(report: &store::Report) -> Vec<(&'static str, Chart)> {
    let points = |v: &[(usize, store::Throughput)]| -> Vec<(f64, f64)> {
        v.iter().map(|(n, t)| (*n as f64, t.per_second)).collect()
    };
    let chart = Chart::new(
        "Durable writes: store vs raw SQLite",
        "concurrent writers (store) = rows per transaction (raw)",
        "writes per second",
    )
    .log_x()
    .log_y()
    .line("store, writes/s", points(&report.writers))
    .line("raw SQLite, rows/s", points(&report.raw));
    vec![("throughput", chart)]
}

/// The store scenario's summary rows.
pub fn store_summary(report: &store::Report) -> Vec<Row> {
    let mut rows = vec![Row::new(
        "store",
        "1 writer: store p50 / raw commit p50",
        format!(
            "{:.2} / {:.2} ms",
            report.single_writer.p50_ms, report.raw_single.p50_ms
        ),
        "",
    )];
    let ratios: Vec<String> = report
        .ratios
        .iter()
        .map(|(w, r)| format!("{w}: {r:.2}"))
        .collect();
    rows.push(Row::new(
        "store",
        "throughput / raw, by writers",
        ratios.join(", "),
        "share of raw SQLite",
    ));
    rows.push(Row::new(
        "store",
        "watch, write → watcher p99 (64 writers)",
        format!("{:.1} ms", report.watch_end_to_end.p99_ms),
        "",
    ));
    rows
}

/// The api scenario's charts: latency by clients, one per operation.
pub fn api_charts(report: &api::Report) -> Vec<(&'static str, Chart)> {
    let mut charts = Vec::new();
    for op in ["create", "get", "update"] {
        let of = |f: fn(&api::Comparison) -> f64| -> Vec<(f64, f64)> {
            report
                .ops
                .iter()
                .filter(|c| c.op == op)
                .map(|c| (c.clients as f64, f(c)))
                .collect()
        };
        let mut chart = Chart::new(
            &format!("{op}: hub API over HTTPS vs the bare store"),
            "concurrent clients",
            "milliseconds",
        )
        .log_x()
        .log_y()
        .line("API p99", of(|c| c.api.p99_ms))
        .line("API p50", of(|c| c.api.p50_ms))
        .line("store p99", of(|c| c.store.p99_ms))
        .line("store p50", of(|c| c.store.p50_ms));
        let floor: Vec<(f64, f64)> = report
            .ops
            .iter()
            .filter(|c| c.op == op)
            .filter_map(|c| Some((c.clients as f64, c.floor.as_ref()?.0.p50_ms)))
            .collect();
        if !floor.is_empty() {
            chart = chart.line("HTTPS floor p50", floor);
        }
        charts.push((op, chart));
    }
    charts
}

/// The api scenario's summary rows.
pub fn api_summary(report: &api::Report) -> Vec<Row> {
    let mut rows = Vec::new();
    for op in ["create", "get", "update"] {
        let ops: Vec<&api::Comparison> = report.ops.iter().filter(|c| c.op == op).collect();
        let clients: Vec<String> = ops.iter().map(|c| c.clients.to_string()).collect();
        let ratios = |f: fn(&api::Comparison) -> f64| -> String {
            ops.iter()
                .map(|c| format!("{:.2}", f(c)))
                .collect::<Vec<_>>()
                .join("/")
        };
        rows.push(Row::new(
            "api",
            format!("{op}: API/store, {} clients", clients.join("/")),
            format!(
                "p50 {}×, p99 {}×",
                ratios(|c| ratio(c.api.p50_ms, c.store.p50_ms)),
                ratios(|c| ratio(c.api.p99_ms, c.store.p99_ms))
            ),
            if op == "update" { "" } else { "≤ 2×" },
        ));
        let floors: Vec<(&api::Comparison, &Latency)> = ops
            .iter()
            .filter_map(|c| Some((*c, &c.floor.as_ref()?.0)))
            .collect();
        if !floors.is_empty() {
            let ratios = |f: &dyn Fn(&api::Comparison, &Latency) -> f64| -> String {
                floors
                    .iter()
                    .map(|(c, floor)| format!("{:.2}", f(c, floor)))
                    .collect::<Vec<_>>()
                    .join("/")
            };
            rows.push(Row::new(
                "api",
                format!("{op}: HTTPS floor/store, API/floor (p50)"),
                format!(
                    "{}×, {}×",
                    ratios(&|c, floor| ratio(floor.p50_ms, c.store.p50_ms)),
                    ratios(&|c, floor| ratio(c.api.p50_ms, floor.p50_ms))
                ),
                "",
            ));
        }
    }
    rows.push(Row::new(
        "api",
        format!("LIST of {}: API/store", report.list_items),
        format!(
            "{:.2}× ({:.1} / {:.1} ms)",
            ratio(report.list_api.p50_ms, report.list_store.p50_ms),
            report.list_api.p50_ms,
            report.list_store.p50_ms
        ),
        "",
    ));
    rows.push(Row::new(
        "api",
        format!("{} watchers: write → receipt p99", report.watchers),
        format!(
            "{:.1} ms (store {:.1} ms)",
            report.watch_api.p99_ms, report.watch_store.p99_ms
        ),
        "",
    ));
    if let Some(rss) = report.idle_rss_mib {
        rows.push(Row::new("api", "idle hub RSS", format!("{rss:.1} MiB"), ""));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Latency;

    #[test]
    fn api_charts_have_a_line_per_series_and_rows_per_op() {
        let latency = |ms: f64| Latency {
            p50_ms: ms,
            p99_ms: ms * 2.0,
            max_ms: ms * 3.0,
            samples: 10,
        };
        let report = api::Report {
            ops: [1, 16]
                .iter()
                .flat_map(|&clients| {
                    ["create", "get", "update"].map(|op| api::Comparison {
                        op,
                        clients,
                        api: latency(2.0),
                        api_rate: 100.0,
                        store: latency(1.0),
                        store_rate: 200.0,
                        floor: (op == "create").then(|| (latency(1.5), 150.0)),
                    })
                })
                .collect(),
            ..api::Report::default()
        };
        let charts = api_charts(&report);
        assert_eq!(charts.len(), 3);
        for (op, chart) in &charts {
            // The create chart has the floor's p50 too.
            let lines = if *op == "create" { 5 } else { 4 };
            let svg = chart.svg();
            assert_eq!(svg.matches("<polyline").count(), lines, "{op}");
            assert_eq!(svg.matches("<circle").count(), 2 * lines, "{op}");
        }
        let rows = api_summary(&report);
        assert_eq!(rows[0].value, "p50 2.00/2.00×, p99 2.00/2.00×");
        assert_eq!(rows[1].what, "create: HTTPS floor/store, API/floor (p50)");
        assert_eq!(rows[1].value, "1.50/1.50×, 1.33/1.33×");
        assert_eq!(rows[2].what, "get: API/store, 1/16 clients");
    }

    #[test]
    fn the_store_chart_compares_the_store_with_raw_sqlite() {
        let t = |per_second| store::Throughput {
            per_second,
            batch: 1.0,
        };
        let report = store::Report {
            raw: vec![(1, t(100.0)), (64, t(6000.0))],
            writers: vec![(1, t(90.0)), (64, t(5000.0))],
            ratios: vec![(1, 0.9), (64, 0.83)],
            ..store::Report::default()
        };
        let (_, chart) = &store_charts(&report)[0];
        assert_eq!(chart.svg().matches("<polyline").count(), 2);
        assert_eq!(store_summary(&report)[1].value, "1: 0.90, 64: 0.83");
    }
}

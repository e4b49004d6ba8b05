//! A small line-chart writer: SVG by hand, no dependency.
//!
//! ```text
//!            title
//!   y label ┌──────────────────────┐  ── series 1
//!     ticks │  polyline per series │  ── series 2
//!           └──────────────────────┘
//!             ticks (linear or log10)
//!                   x label
//! ```
//!
//! Points that cannot be drawn (not finite, or not positive on a log axis) are left out;
//! every series still gets its polyline (perhaps empty) and its legend entry.

use std::fmt::Write as _;

/// How an axis maps values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// Evenly spaced values; the y axis starts at zero when every value is positive.
    Linear,
    /// Evenly spaced powers of ten.
    Log10,
}

/// One named line.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Its legend entry.
    pub name: String,
    /// Its points, (x, y), drawn in this order.
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (a fit, a limit).
    pub dashed: bool,
}

/// A line chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// Above the plot.
    pub title: String,
    /// Under the x axis.
    pub x_label: String,
    /// Beside the y axis.
    pub y_label: String,
    /// The x axis's scale.
    pub x_scale: Scale,
    /// The y axis's scale.
    pub y_scale: Scale,
    /// The lines.
    pub series: Vec<Series>,
}

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 76.0;
const RIGHT: f64 = 220.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 60.0;
/// Series with more points than this are drawn without markers.
const MAX_MARKERS: usize = 40;
const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

impl Chart {
    /// An empty chart with linear axes.
    pub fn new(title: &str, x_label: &str, y_label: &str) -> Self {
        Chart {
            title: title.to_owned(),
            x_label: x_label.to_owned(),
            y_label: y_label.to_owned(),
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: Vec::new(),
        }
    }

    /// With a log10 x axis.
    pub fn log_x(mut self) -> Self {
        self.x_scale = Scale::Log10;
        self
    }

    /// With a log10 y axis.
    pub fn log_y(mut self) -> Self {
        self.y_scale = Scale::Log10;
        self
    }

    /// With one more solid line.
    pub fn line(mut self, name: &str, points: Vec<(f64, f64)>) -> Self {
        self.series.push(Series {
            name: name.to_owned(),
            points,
            dashed: false,
        });
        self
    }

    /// With one more dashed line.
    pub fn dashed(mut self, name: &str, points: Vec<(f64, f64)>) -> Self {
        self.series.push(Series {
            name: name.to_owned(),
            points,
            dashed: true,
        });
        self
    }

    /// The points of `series` that can be drawn on these axes.
    fn drawable<'a>(&self, series: &'a Series) -> impl Iterator<Item = (f64, f64)> + 'a {
        let (xs, ys) = (self.x_scale, self.y_scale);
        series
            .points
            .iter()
            .copied()
            .filter(move |&(x, y)| fits(xs, x) && fits(ys, y))
    }

    /// The chart as an SVG document.
    pub fn svg(&self) -> String {
        let points: Vec<(f64, f64)> = self.series.iter().flat_map(|s| self.drawable(s)).collect();
        let x_axis = Axis::new(self.x_scale, points.iter().map(|p| p.0), false);
        let y_axis = Axis::new(self.y_scale, points.iter().map(|p| p.1), true);
        let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
        let px = |x: f64| LEFT + x_axis.fraction(x) * plot_w;
        let py = |y: f64| TOP + (1.0 - y_axis.fraction(y)) * plot_h;

        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        svg.push('\n');
        let _ = writeln!(
            svg,
            r#"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="24" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
            LEFT + plot_w / 2.0,
            escape(&self.title)
        );
        // Grid lines and tick labels.
        for &t in &x_axis.ticks {
            let x = px(t);
            let _ = writeln!(
                svg,
                r##"<line x1="{x:.1}" y1="{TOP:.1}" x2="{x:.1}" y2="{:.1}" stroke="#e0e0e0"/>"##,
                TOP + plot_h
            );
            let _ = writeln!(
                svg,
                r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                TOP + plot_h + 18.0,
                escape(&label(t))
            );
        }
        for &t in &y_axis.ticks {
            let y = py(t);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e0e0e0"/>"##,
                LEFT + plot_w
            );
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                LEFT - 6.0,
                y + 4.0,
                escape(&label(t))
            );
        }
        let _ = writeln!(
            svg,
            r#"<rect x="{LEFT:.1}" y="{TOP:.1}" width="{plot_w:.1}" height="{plot_h:.1}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + plot_w / 2.0,
            HEIGHT - 16.0,
            escape(&self.x_label)
        );
        let (lx, ly) = (18.0, TOP + plot_h / 2.0);
        let _ = writeln!(
            svg,
            r#"<text x="{lx:.1}" y="{ly:.1}" text-anchor="middle" transform="rotate(-90 {lx:.1} {ly:.1})">{}</text>"#,
            escape(&self.y_label)
        );
        if points.is_empty() {
            let _ = writeln!(
                svg,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#888">no data</text>"##,
                LEFT + plot_w / 2.0,
                TOP + plot_h / 2.0
            );
        }
        // One polyline (and a marker per point) per series, and its legend entry.
        for (i, series) in self.series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let dash = if series.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let drawn: Vec<(f64, f64)> =
                self.drawable(series).map(|(x, y)| (px(x), py(y))).collect();
            let coordinates: Vec<String> = drawn
                .iter()
                .map(|(x, y)| format!("{x:.1},{y:.1}"))
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{}"/>"#,
                coordinates.join(" ")
            );
            // Markers on a solid line of few points (a dense time series is the line).
            if !series.dashed && drawn.len() <= MAX_MARKERS {
                for (x, y) in &drawn {
                    let _ = writeln!(
                        svg,
                        r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{colour}"/>"#
                    );
                }
            }
            let (lx, ly) = (LEFT + plot_w + 16.0, TOP + 10.0 + 20.0 * i as f64);
            let _ = writeln!(
                svg,
                r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="2"{dash}/>"#,
                lx + 24.0
            );
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
                lx + 30.0,
                ly + 4.0,
                escape(&series.name)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}

fn fits(scale: Scale, v: f64) -> bool {
    v.is_finite() && (scale == Scale::Linear || v > 0.0)
}

/// An axis: its scale, its bounds and its ticks.
#[derive(Debug, PartialEq)]
struct Axis {
    scale: Scale,
    low: f64,
    high: f64,
    ticks: Vec<f64>,
}

impl Axis {
    /// An axis holding every value of `values` (all drawable on `scale`); a linear one
    /// from zero when `from_zero` and no value is negative.
    fn new(scale: Scale, values: impl Iterator<Item = f64>, from_zero: bool) -> Self {
        let (mut low, mut high) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
        if !low.is_finite() {
            (low, high) = match scale {
                Scale::Linear => (0.0, 1.0),
                Scale::Log10 => (1.0, 10.0),
            };
        }
        match scale {
            Scale::Linear => {
                if from_zero && low >= 0.0 {
                    low = 0.0;
                }
                if high - low <= f64::EPSILON * high.abs().max(1.0) {
                    let pad = if high == 0.0 { 1.0 } else { high.abs() * 0.1 };
                    let value = high;
                    (low, high) = (low - pad, high + pad);
                    if from_zero && value >= 0.0 {
                        low = low.max(0.0);
                    }
                }
                let step = nice_step((high - low) / 5.0);
                let first = (low / step).floor();
                let last = (high / step).ceil();
                let ticks = (first as i64..=last as i64)
                    .map(|i| round_to(i as f64 * step, step))
                    .collect();
                Axis {
                    scale,
                    low: first * step,
                    high: last * step,
                    ticks,
                }
            }
            Scale::Log10 => {
                let mut first = low.log10().floor();
                let mut last = high.log10().ceil();
                if last <= first {
                    last = first + 1.0;
                }
                if last - first > 12.0 {
                    first = last - 12.0;
                }
                let decades = (last - first) as i64;
                let mut ticks = Vec::new();
                for d in 0..=decades {
                    let power = 10f64.powf(first + d as f64);
                    ticks.push(power);
                    // Few decades: 2× and 5× too, so the axis has enough labels.
                    if decades <= 2 && d < decades {
                        ticks.push(power * 2.0);
                        ticks.push(power * 5.0);
                    }
                }
                Axis {
                    scale,
                    low: 10f64.powf(first),
                    high: 10f64.powf(last),
                    ticks,
                }
            }
        }
    }

    /// Where `v` lies between the bounds, 0 to 1.
    fn fraction(&self, v: f64) -> f64 {
        let f = match self.scale {
            Scale::Linear => (v - self.low) / (self.high - self.low),
            Scale::Log10 => (v.log10() - self.low.log10()) / (self.high.log10() - self.low.log10()),
        };
        if f.is_finite() {
            f.clamp(0.0, 1.0)
        } else {
            0.0
        }
    }
}

/// The round step (1, 2 or 5 times a power of ten) nearest above `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    let m = raw / power;
    let nice = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * power
}

/// `v` rounded to the decimals `step` has (no 0.30000000000000004).
fn round_to(v: f64, step: f64) -> f64 {
    let decimals = (-step.log10().floor()).clamp(0.0, 12.0) as i32;
    let scale = 10f64.powi(decimals);
    (v * scale).round() / scale
}

/// A short, round label: `0`, `0.25`, `12.5`, `2500`, `10k`, `1.5M`.
pub fn label(v: f64) -> String {
    fn trimmed(s: String) -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s
        }
    }
    let a = v.abs();
    if v == 0.0 || !v.is_finite() {
        return if v.is_finite() {
            "0".into()
        } else {
            v.to_string()
        };
    }
    if a >= 1e6 {
        format!("{}M", trimmed(format!("{:.2}", v / 1e6)))
    } else if a >= 1e4 {
        format!("{}k", trimmed(format!("{:.1}", v / 1e3)))
    } else {
        let decimals = (2 - a.log10().floor() as i32).clamp(0, 9) as usize;
        trimmed(format!("{v:.decimals$}"))
    }
}

/// `text` safe inside SVG text and attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The least-squares line through `points`: (slope, intercept); `None` with fewer than two
/// distinct x values.
pub fn fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    Some((slope, mean_y - slope * mean_x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.3), 2.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(230.0), 500.0);
        assert!((nice_step(0.013) - 0.02).abs() < 1e-12);
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(nice_step(f64::NAN), 1.0);
    }

    #[test]
    fn linear_axes_have_round_ticks_covering_the_values() {
        let axis = Axis::new(Scale::Linear, [3.0, 97.0].into_iter(), true);
        assert_eq!(axis.ticks, [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        assert_eq!((axis.low, axis.high), (0.0, 100.0));
        let axis = Axis::new(Scale::Linear, [0.1, 0.3].into_iter(), false);
        assert_eq!(axis.ticks, [0.1, 0.15, 0.2, 0.25, 0.3]);
        // Negative values: no forced zero, bounds still round.
        let axis = Axis::new(Scale::Linear, [-7.0, 12.0].into_iter(), true);
        assert_eq!((axis.low, axis.high), (-10.0, 15.0));
        // One value, or none: a range around it.
        let axis = Axis::new(Scale::Linear, [5.0].into_iter(), false);
        assert!(axis.low < 5.0 && axis.high > 5.0, "{axis:?}");
        let axis = Axis::new(Scale::Linear, std::iter::empty(), true);
        assert_eq!((axis.low, axis.high), (0.0, 1.0));
    }

    #[test]
    fn log_axes_tick_at_powers_of_ten() {
        let axis = Axis::new(Scale::Log10, [5.0, 1000.0].into_iter(), false);
        assert_eq!((axis.low, axis.high), (1.0, 1000.0));
        assert_eq!(axis.ticks, [1.0, 10.0, 100.0, 1000.0]);
        let axis = Axis::new(Scale::Log10, [1.0, 64.0].into_iter(), false);
        assert_eq!(axis.ticks, [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
        let axis = Axis::new(Scale::Log10, [10.0].into_iter(), false);
        assert_eq!((axis.low, axis.high), (10.0, 100.0));
        assert!((axis.fraction(10f64.sqrt() * 10.0) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn labels_are_short_and_round() {
        let cases = [
            (0.0, "0"),
            (0.25, "0.25"),
            (0.1 + 0.2, "0.3"),
            (0.005, "0.005"),
            (1.0, "1"),
            (12.5, "12.5"),
            (2500.0, "2500"),
            (10_000.0, "10k"),
            (15_000.0, "15k"),
            (1_500_000.0, "1.5M"),
            (-40.0, "-40"),
        ];
        for (v, text) in cases {
            assert_eq!(label(v), text, "{v}");
        }
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            escape(r#"a<b & "c" > 'd'"#),
            "a&lt;b &amp; &quot;c&quot; &gt; &#39;d&#39;"
        );
    }

    #[test]
    fn a_chart_has_a_polyline_and_a_legend_entry_per_series() {
        let chart = Chart::new("p99 <vs> N", "clusters", "ms")
            .log_x()
            .line("hub", vec![(10.0, 120.0), (100.0, 300.0), (1000.0, 900.0)])
            .line("baseline & co", vec![(10.0, 80.0), (100.0, 200.0)])
            .dashed("limit", vec![(10.0, 2000.0), (1000.0, 2000.0)])
            .line("nothing drawable", vec![(0.0, 1.0), (f64::NAN, 2.0)]);
        let svg = chart.svg();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert_eq!(svg.matches("<circle").count(), 5);
        assert!(svg.contains("p99 &lt;vs&gt; N"));
        assert!(svg.contains("baseline &amp; co"));
        assert!(svg.contains(">1000<") && svg.contains(">10<"));
        assert!(svg.contains("stroke-dasharray"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        // Every coordinate lies inside the picture.
        for points in svg.split("points=\"").skip(1) {
            let points = &points[..points.find('"').unwrap()];
            for pair in points.split_whitespace() {
                let (x, y) = pair.split_once(',').unwrap();
                let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                assert!(
                    (0.0..=WIDTH).contains(&x) && (0.0..=HEIGHT).contains(&y),
                    "{pair}"
                );
            }
        }
    }

    #[test]
    fn an_empty_chart_says_so() {
        let svg = Chart::new("t", "x", "y").line("a", Vec::new()).svg();
        assert!(svg.contains("no data"));
        assert_eq!(svg.matches("<polyline").count(), 1);
        // A dense series is a line without markers.
        let dense = (0..100).map(|i| (f64::from(i), 1.0)).collect();
        let svg = Chart::new("t", "x", "y").line("a", dense).svg();
        assert_eq!(svg.matches("<circle").count(), 0);
    }

    #[test]
    fn least_squares_fits_a_line() {
        let (slope, intercept) = fit(&[(1.0, 3.0), (2.0, 5.0), (3.0, 7.0)]).unwrap();
        assert!((slope - 2.0).abs() < 1e-12 && (intercept - 1.0).abs() < 1e-12);
        assert_eq!(fit(&[(1.0, 3.0)]), None);
        assert_eq!(fit(&[(2.0, 3.0), (2.0, 4.0)]), None);
    }
}

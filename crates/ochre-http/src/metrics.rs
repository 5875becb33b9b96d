//! The server's and its runtime's figures in the Prometheus text exposition format (version
//! 0.0.4), served at `<status_path>/metrics` to loopback clients.
//!
//! Every family has a `# HELP` and a `# TYPE` line, a name with the `ochre_` prefix, and
//! counters end in `_total`. Families: requests and body bytes per worker, responses per status
//! code, the response latency histogram (cumulative `le` buckets in seconds, `_sum`, `_count`),
//! the runtime's per-worker counters (every field of [`ochre::WorkerStats`]; the gauges among
//! them without `_total`), and the top colors by run time ([`ochre::ColorStats`]), labelled by
//! color. Label values are escaped as the format requires (`\\`, `\"`, `\n`).

use std::fmt::Write;

use hdrhistogram::Histogram;

use crate::stats::Counters;

/// The `Content-Type` of the page.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upper bounds of the latency buckets, in microseconds (100 µs to 10 s, 1-2.5-5 steps).
const LATENCY_BUCKETS_US: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// Colors named in the page.
pub const TOP_COLORS: usize = 10;

/// [`ochre::WorkerStats`] fields that are gauges (a level, not a count since start).
const GAUGES: [&str; 4] = ["ema_live_bytes", "ema_blocks", "ema_crumbs", "cpu_share"];

/// One page of text, family by family.
struct Page(String);

impl Page {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", escape(v));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }
}

/// A label value as the text format writes it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Seconds, from nanoseconds, as a float literal.
fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The page: the server's `counters` and `latency_us` (microseconds), and the runtime seen
/// through `runtime` (none outside a handler: the runtime's families are then left out).
pub fn render(
    counters: &Counters,
    latency_us: &Histogram<u64>,
    runtime: Option<&ochre::Handle>,
) -> String {
    let mut p = Page(String::with_capacity(16 * 1024));
    let snap = counters.snapshot();
    p.family("ochre_http_requests_total", "counter", "Requests answered, per worker.");
    for (w, (requests, _)) in snap.workers.iter().enumerate() {
        p.sample("ochre_http_requests_total", &[("worker", &w.to_string())], requests);
    }
    p.family("ochre_http_body_bytes_total", "counter", "Response body bytes sent, per worker.");
    for (w, (_, bytes)) in snap.workers.iter().enumerate() {
        p.sample("ochre_http_body_bytes_total", &[("worker", &w.to_string())], bytes);
    }
    p.family("ochre_http_responses_total", "counter", "Responses, per status code.");
    for (code, n) in &snap.by_code {
        p.sample("ochre_http_responses_total", &[("code", code)], n);
    }
    latency(&mut p, latency_us);
    if let Some(h) = runtime {
        p.family(
            "ochre_stalls_total",
            "counter",
            "Handlers found running longer than the stall threshold.",
        );
        p.sample("ochre_stalls_total", &[], h.stall_count());
        workers(&mut p, &h.stats());
        colors(&mut p, &h.color_stats());
    }
    p.0
}

fn latency(p: &mut Page, h: &Histogram<u64>) {
    let name = "ochre_http_response_latency_seconds";
    p.family(name, "histogram", "Time from request head parsed to last byte written.");
    let mut cumulative = [0u64; LATENCY_BUCKETS_US.len()];
    let mut sum_us = 0u128;
    for v in h.iter_recorded() {
        let (value, n) = (h.median_equivalent(v.value_iterated_to()), v.count_at_value());
        sum_us += u128::from(value) * u128::from(n);
        for (c, &le) in cumulative.iter_mut().zip(&LATENCY_BUCKETS_US) {
            if value <= le {
                *c += n;
            }
        }
    }
    let bucket = format!("{name}_bucket");
    for (c, le) in cumulative.iter().zip(LATENCY_BUCKETS_US) {
        p.sample(&bucket, &[("le", &(le as f64 / 1e6).to_string())], c);
    }
    p.sample(&bucket, &[("le", "+Inf")], h.len());
    p.sample(&format!("{name}_sum"), &[], sum_us as f64 / 1e6);
    p.sample(&format!("{name}_count"), &[], h.len());
}

fn workers(p: &mut Page, stats: &[ochre::WorkerStats]) {
    let rows: Vec<serde_json::Map<String, serde_json::Value>> = stats
        .iter()
        .filter_map(|s| match serde_json::to_value(s) {
            Ok(serde_json::Value::Object(m)) => Some(m),
            _ => None,
        })
        .collect();
    let Some(first) = rows.first() else { return };
    for field in first.keys() {
        let gauge = GAUGES.contains(&field.as_str());
        let name = if gauge {
            format!("ochre_worker_{field}")
        } else {
            format!("ochre_worker_{field}_total")
        };
        let help = format!("The runtime's per-worker `{field}` (ochre::WorkerStats).");
        p.family(&name, if gauge { "gauge" } else { "counter" }, &help);
        for (w, row) in rows.iter().enumerate() {
            let v = row.get(field).and_then(|v| v.as_u64()).unwrap_or(0);
            p.sample(&name, &[("worker", &w.to_string())], v);
        }
    }
}

/// A per-color family: name, type, help, and the value of one color.
type ColorFamily = (&'static str, &'static str, &'static str, fn(&ochre::ColorSummary) -> String);

fn colors(p: &mut Page, stats: &ochre::ColorStats) {
    p.family(
        "ochre_color_stats_sample_period",
        "gauge",
        "One turn and one post in this many are measured per color (0: off).",
    );
    p.sample("ochre_color_stats_sample_period", &[], stats.period);
    let top = stats.top(TOP_COLORS);
    let families: [ColorFamily; 8] = [
        ("ochre_color_events_total", "counter", "Events run by the top colors (estimated).", |s| {
            s.events.to_string()
        }),
        (
            "ochre_color_run_seconds_total",
            "counter",
            "Run time of the top colors (estimated).",
            |s| secs(s.run_ns).to_string(),
        ),
        ("ochre_color_run_p99_seconds", "gauge", "99th percentile run time of an event.", |s| {
            secs(s.run_p99_ns).to_string()
        }),
        ("ochre_color_wait_p99_seconds", "gauge", "99th percentile wait, post to start.", |s| {
            secs(s.wait_p99_ns).to_string()
        }),
        ("ochre_color_moves_in_total", "counter", "Moves of the color to a worker.", |s| {
            s.moves_in.to_string()
        }),
        ("ochre_color_moves_out_total", "counter", "Moves of the color off its home.", |s| {
            s.moves_out.to_string()
        }),
        ("ochre_color_steals_in_total", "counter", "Times the color was stolen.", |s| {
            s.steals_in.to_string()
        }),
        ("ochre_color_steals_out_total", "counter", "Times the color was lent.", |s| {
            s.steals_out.to_string()
        }),
    ];
    for (name, kind, help, value) in families {
        p.family(name, kind, help);
        for s in &top {
            p.sample(name, &[("color", &s.color.0.to_string())], value(s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn latency_buckets_are_cumulative() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
        h.record(50).unwrap(); // 50 µs
        h.record(2_000).unwrap(); // 2 ms
        h.record(20_000_000).unwrap(); // 20 s: only in +Inf
        let mut p = Page(String::new());
        latency(&mut p, &h);
        let text = p.0;
        assert!(text.contains("_bucket{le=\"0.0001\"} 1\n"), "{text}");
        assert!(text.contains("_bucket{le=\"0.0025\"} 2\n"), "{text}");
        assert!(text.contains("_bucket{le=\"10\"} 2\n"), "{text}");
        assert!(text.contains("_bucket{le=\"+Inf\"} 3\n"), "{text}");
        assert!(text.contains("ochre_http_response_latency_seconds_count 3\n"), "{text}");
    }
}

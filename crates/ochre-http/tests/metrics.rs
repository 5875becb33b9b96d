//! `GET <status_path>/metrics`: the Prometheus text format, read by a strict parser of the
//! format (below: comment lines, metric names, label syntax and escapes, values), checked for
//! the families it promises and for values that move with traffic.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use ochre::io::Listener;
use ochre::{Color, Config, Runtime};
use ochre_http::{Server, ServerConfig};

/// One sample: metric name, labels (sorted), value.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed page: the declared type of each family and every sample.
#[derive(Debug, Default)]
struct Page {
    types: HashMap<String, String>,
    samples: Vec<Sample>,
}

impl Page {
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v))
            })
            .map(|s| s.value)
    }

    fn sum(&self, name: &str) -> f64 {
        self.samples.iter().filter(|s| s.name == name).map(|s| s.value).sum()
    }
}

fn is_name(s: &str, colon: bool) -> bool {
    let mut chars = s.chars();
    let ok_first = |c: char| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':');
    chars.next().is_some_and(ok_first)
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
}

/// The family a sample belongs to (histogram series carry suffixes).
fn family<'a>(name: &'a str, types: &HashMap<String, String>) -> &'a str {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if types.get(base).is_some_and(|t| t == "histogram" || t == "summary") {
                return base;
            }
        }
    }
    name
}

/// Parses the text format (version 0.0.4) strictly: any line that is not a `# HELP`, a
/// `# TYPE`, another comment, or a well-formed sample of a family typed before it is an error.
fn parse(text: &str) -> Result<Page, String> {
    let mut page = Page::default();
    let mut seen_samples: HashMap<String, ()> = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let err = |what: &str| format!("line {}: {what}: {line:?}", n + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            let mut words = rest.trim_start().splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("TYPE"), Some(name), Some(kind)) => {
                    if !is_name(name, true) {
                        return Err(err("bad metric name"));
                    }
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                        return Err(err("unknown type"));
                    }
                    if seen_samples.contains_key(name) {
                        return Err(err("TYPE after the family's samples"));
                    }
                    if page.types.insert(name.to_string(), kind.to_string()).is_some() {
                        return Err(err("family typed twice"));
                    }
                }
                (Some("HELP"), Some(name), _) if !is_name(name, true) => {
                    return Err(err("bad metric name"))
                }
                _ => {}
            }
            continue;
        }
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => return Err(err("no value")),
        };
        if !is_name(name, true) {
            return Err(err("bad metric name"));
        }
        let mut labels = BTreeMap::new();
        let rest = if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices().peekable();
            let end;
            loop {
                match chars.peek() {
                    Some((i, '}')) => {
                        end = *i;
                        break;
                    }
                    None => return Err(err("unclosed labels")),
                    _ => {}
                }
                let mut key = String::new();
                for (_, c) in chars.by_ref() {
                    if c == '=' {
                        break;
                    }
                    key.push(c);
                }
                if !is_name(&key, false) {
                    return Err(err("bad label name"));
                }
                if chars.next().map(|(_, c)| c) != Some('"') {
                    return Err(err("label value not quoted"));
                }
                let mut value = String::new();
                loop {
                    match chars.next().map(|(_, c)| c) {
                        Some('\\') => match chars.next().map(|(_, c)| c) {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            _ => return Err(err("bad escape")),
                        },
                        Some('"') => break,
                        Some('\n') | None => return Err(err("unterminated label value")),
                        Some(c) => value.push(c),
                    }
                }
                if labels.insert(key, value).is_some() {
                    return Err(err("label repeated"));
                }
                match chars.peek() {
                    Some((_, ',')) => {
                        chars.next();
                    }
                    Some((_, '}')) => {}
                    _ => return Err(err("expected , or }")),
                }
            }
            &body[end + 1..]
        } else {
            rest
        };
        let value_text = rest.strip_prefix(' ').ok_or_else(|| err("no space before value"))?;
        let mut parts = value_text.split(' ');
        let value = match parts.next() {
            Some("+Inf") => f64::INFINITY,
            Some("-Inf") => f64::NEG_INFINITY,
            Some("NaN") => f64::NAN,
            Some(v) => v.parse::<f64>().map_err(|_| err("bad value"))?,
            None => return Err(err("no value")),
        };
        if let Some(ts) = parts.next() {
            ts.parse::<i64>().map_err(|_| err("bad timestamp"))?;
        }
        if parts.next().is_some() {
            return Err(err("trailing text"));
        }
        let fam = family(name, &page.types).to_string();
        if !page.types.contains_key(&fam) {
            return Err(err("sample of a family with no TYPE line"));
        }
        seen_samples.insert(fam, ());
        let sample = Sample { name: name.to_string(), labels, value };
        if page.samples.iter().any(|s| s.name == sample.name && s.labels == sample.labels) {
            return Err(err("duplicate series"));
        }
        page.samples.push(sample);
    }
    Ok(page)
}

#[test]
fn the_parser_refuses_what_the_format_does_not_allow() {
    assert!(parse("# TYPE a counter\na 1\n").is_ok());
    assert!(parse("a 1\n").is_err(), "untyped family");
    assert!(parse("# TYPE a counter\na{b=\"x} 1\n").is_err());
    assert!(parse("# TYPE a counter\na{b=\"x\"} one\n").is_err());
    assert!(parse("# TYPE a counter\na{1b=\"x\"} 1\n").is_err());
    assert!(parse("# TYPE a counter\na 1\na 2\n").is_err(), "duplicate");
    assert!(parse("# TYPE a counter\n# TYPE a gauge\n").is_err());
    let p = parse("# TYPE h histogram\nh_bucket{le=\"+Inf\",q=\"a\\\"b\"} 3\nh_count 3\n").unwrap();
    assert_eq!(p.get("h_bucket", &[("le", "+Inf"), ("q", "a\"b")]), Some(3.0));
}

struct Live {
    rt: Arc<Runtime>,
    addr: SocketAddr,
    root: std::path::PathBuf,
    run: Option<std::thread::JoinHandle<ochre::RunReport>>,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.rt.handle().shutdown();
        if let Some(r) = self.run.take() {
            let _ = r.join();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn start(tag: &str) -> Live {
    let root = std::env::temp_dir().join(format!("sws-metrics-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("hello.txt"), "hello, world\n").unwrap();
    // Every event measured: the test checks exact per-color figures.
    let config = Config::default().color_stats(1);
    let rt = Arc::new(Runtime::builder().workers(2).pin(false).config(config).build().unwrap());
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = ServerConfig {
        root: root.clone(),
        status_path: Some("/.ochre/status".into()),
        ..ServerConfig::default()
    };
    Server::new(cfg, Color(1)).unwrap().serve_with(&rt.handle(), listener).unwrap();
    let r = rt.clone();
    let run = std::thread::spawn(move || r.run(Color(2), || {}).unwrap());
    Live { rt, addr, root, run: Some(run) }
}

/// One request on its own connection: status code, headers, body.
fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let code = head[9..12].parse().unwrap();
    (code, head.to_ascii_lowercase(), body.to_string())
}

fn scrape(addr: SocketAddr) -> Page {
    let (code, head, body) = get(addr, "/.ochre/status/metrics");
    assert_eq!(code, 200, "{head}");
    assert!(head.contains("content-type: text/plain; version=0.0.4"), "{head}");
    let page = parse(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    for (name, kind) in &page.types {
        assert!(name.starts_with("ochre_"), "{name}");
        assert_eq!(kind == "counter", name.ends_with("_total"), "{name} is a {kind}");
    }
    page
}

#[test]
fn metrics_parse_and_move_with_traffic() {
    let live = start("traffic");
    let before = scrape(live.addr);
    for family in [
        "ochre_http_requests_total",
        "ochre_http_responses_total",
        "ochre_http_response_latency_seconds",
        "ochre_worker_events_run_total",
        "ochre_worker_ema_live_bytes",
        "ochre_color_events_total",
        "ochre_color_run_seconds_total",
    ] {
        assert!(before.types.contains_key(family), "{family} missing: {:?}", before.types);
    }
    assert_eq!(before.types["ochre_http_response_latency_seconds"], "histogram");
    assert_eq!(before.get("ochre_color_stats_sample_period", &[]), Some(1.0));
    // One sample per worker of the serving runtime.
    let workers = |p: &Page, name: &str| p.samples.iter().filter(|s| s.name == name).count();
    assert_eq!(workers(&before, "ochre_http_requests_total"), 2);
    assert_eq!(workers(&before, "ochre_worker_events_run_total"), 2);

    for _ in 0..5 {
        assert_eq!(get(live.addr, "/hello.txt").0, 200);
    }
    assert_eq!(get(live.addr, "/missing").0, 404);
    let after = scrape(live.addr);

    // Six requests, and the first scrape (counted once its response was written).
    let requests = after.sum("ochre_http_requests_total") - before.sum("ochre_http_requests_total");
    assert_eq!(requests, 7.0);
    let code = |p: &Page, c: &str| p.get("ochre_http_responses_total", &[("code", c)]).unwrap();
    assert_eq!(code(&after, "200") - code(&before, "200"), 6.0);
    assert_eq!(code(&after, "404") - code(&before, "404"), 1.0);
    let count = |p: &Page| p.get("ochre_http_response_latency_seconds_count", &[]).unwrap();
    assert_eq!(count(&after) - count(&before), 7.0);
    // Buckets: cumulative, ending at the count.
    let mut buckets: Vec<(f64, f64)> = after
        .samples
        .iter()
        .filter(|s| s.name == "ochre_http_response_latency_seconds_bucket")
        .map(|s| {
            let le = &s.labels["le"];
            (if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() }, s.value)
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
    assert_eq!(buckets.last().unwrap(), &(f64::INFINITY, count(&after)));
    let events = |p: &Page| p.sum("ochre_worker_events_run_total");
    assert!(events(&after) > events(&before), "the runtime ran the requests' events");
    // Top colors: named, with events, and their run time grew.
    assert!(after.samples.iter().any(|s| s.name == "ochre_color_events_total" && s.value >= 1.0));
    assert!(
        after.sum("ochre_color_run_seconds_total") > 0.0,
        "{:?}",
        after.samples.iter().filter(|s| s.name.starts_with("ochre_color")).collect::<Vec<_>>()
    );
    // The JSON status page names the top colors too.
    let (_, _, json) = get(live.addr, "/.ochre/status");
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(j["top_colors"].as_array().is_some_and(|a| !a.is_empty()), "{json}");
}

#[test]
fn only_metrics_under_the_status_path_is_special() {
    let live = start("paths");
    // A path under the status path other than /metrics is an ordinary (missing) file.
    assert_eq!(get(live.addr, "/.ochre/status/other").0, 404);
    assert_eq!(get(live.addr, "/.ochre/status/metrics/x").0, 404);
}

//! Per-worker, per-status counters, response latency histograms, and the access log.
//!
//! Each worker counts into its own padded block (one per worker, up to [`BLOCKS`]; read by the
//! status endpoint), so counting a response costs no contended cache line. A response's latency
//! runs from the moment its request head was parsed to the moment its last byte was handed to
//! the kernel; it goes into the worker's HDR histogram (1 µs to 1 h, 3 digits) behind a lock
//! that only the status reader ever contends. The access log is one
//! `write(2)` per response to a file opened with `O_APPEND`, so lines from different workers
//! never interleave.

use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;

/// Status codes counted one by one; the last slot counts the others.
pub const CODES: [u16; 16] =
    [200, 206, 301, 304, 400, 403, 404, 405, 408, 413, 414, 416, 431, 500, 503, 505];

/// Counter blocks: one per worker up to this many.
pub const BLOCKS: usize = 64;

/// One worker's counters.
pub struct WorkerCounters {
    requests: AtomicU64,
    body_bytes: AtomicU64,
    by_code: [AtomicU64; CODES.len() + 1],
    latency_us: Mutex<Histogram<u64>>,
}

impl Default for WorkerCounters {
    fn default() -> Self {
        WorkerCounters {
            requests: AtomicU64::new(0),
            body_bytes: AtomicU64::new(0),
            by_code: Default::default(),
            latency_us: Mutex::new(new_histogram()),
        }
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

/// Percentiles reported.
pub const PERCENTILES: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 100.0];

fn code_slot(code: u16) -> usize {
    CODES.iter().position(|&c| c == code).unwrap_or(CODES.len())
}

/// All workers' counters.
pub struct Counters {
    workers: Box<[CachePadded<WorkerCounters>]>,
    /// Blocks reported per worker: the serving runtime's workers once known (a server is built
    /// before it knows the runtime that will run it), all blocks until then.
    shown: AtomicUsize,
}

impl Counters {
    /// Counters for `workers` workers.
    pub fn new(workers: usize) -> Counters {
        let workers = workers.max(1);
        Counters {
            workers: (0..workers).map(|_| CachePadded::default()).collect(),
            shown: AtomicUsize::new(workers),
        }
    }

    /// Reports per worker only the first `n` blocks (at least one, at most all): the workers of
    /// the runtime that serves. Workers beyond the blocks share them, so totals never change.
    pub fn show_workers(&self, n: usize) {
        self.shown.store(n.clamp(1, self.workers.len()), Ordering::Relaxed);
    }

    /// Counts a response on the current worker.
    pub fn count(&self, code: u16, body: u64) {
        let w = ochre::current_worker().unwrap_or(0) % self.workers.len();
        let c = &self.workers[w];
        // Uncontended: each worker has its block (workers beyond the blocks share them, hence
        // read-modify-writes rather than plain stores).
        c.requests.fetch_add(1, Ordering::Relaxed);
        c.body_bytes.fetch_add(body, Ordering::Relaxed);
        c.by_code[code_slot(code)].fetch_add(1, Ordering::Relaxed);
    }

    /// Records the latency of a response fully written by the current worker.
    pub fn record_latency(&self, latency: Duration) {
        let w = ochre::current_worker().unwrap_or(0) % self.workers.len();
        if let Ok(mut h) = self.workers[w].latency_us.lock() {
            h.saturating_record((latency.as_micros() as u64).max(1));
        }
    }

    /// Every worker's latencies merged.
    pub fn latency(&self) -> Histogram<u64> {
        let mut all = new_histogram();
        for w in self.workers.iter() {
            if let Ok(h) = w.latency_us.lock() {
                let _ = all.add(&*h);
            }
        }
        all
    }

    /// The latency summary as JSON: count, mean and [`PERCENTILES`] in microseconds.
    pub fn latency_json(&self) -> serde_json::Value {
        let h = self.latency();
        let mut m = serde_json::Map::new();
        m.insert("count".into(), h.len().into());
        m.insert("mean".into(), if h.is_empty() { 0.0 } else { h.mean() }.into());
        for p in PERCENTILES {
            let v = if h.is_empty() { 0 } else { h.value_at_percentile(p) };
            m.insert(format!("p{p}"), v.into());
        }
        serde_json::Value::Object(m)
    }

    /// Requests and body bytes of each reported worker, and responses per status code
    /// (`"other"` for the codes not in [`CODES`]), for the metrics page.
    pub fn snapshot(&self) -> Snapshot {
        let shown = self.shown.load(Ordering::Relaxed);
        let mut codes = [0u64; CODES.len() + 1];
        let mut workers = Vec::new();
        for (i, w) in self.workers.iter().enumerate() {
            for (t, c) in codes.iter_mut().zip(w.by_code.iter()) {
                *t += c.load(Ordering::Relaxed);
            }
            let pair = (w.requests.load(Ordering::Relaxed), w.body_bytes.load(Ordering::Relaxed));
            // Blocks past the reported workers (shared by workers beyond the blocks) count in
            // the last reported one, so that totals never change.
            if i < shown {
                workers.push(pair);
            } else if let Some(last) = workers.last_mut() {
                last.0 += pair.0;
                last.1 += pair.1;
            }
        }
        let by_code = codes
            .iter()
            .enumerate()
            .map(|(i, &n)| (CODES.get(i).map_or("other".to_string(), |c| c.to_string()), n))
            .collect();
        Snapshot { workers, by_code }
    }

    /// The counters as JSON: totals, per status, latency, per worker.
    pub fn to_json(&self) -> serde_json::Value {
        let mut per_worker = Vec::new();
        let mut total_codes = [0u64; CODES.len() + 1];
        let (mut requests, mut bytes) = (0, 0);
        let shown = self.shown.load(Ordering::Relaxed);
        for (i, w) in self.workers.iter().enumerate() {
            let r = w.requests.load(Ordering::Relaxed);
            let b = w.body_bytes.load(Ordering::Relaxed);
            requests += r;
            bytes += b;
            for (t, c) in total_codes.iter_mut().zip(w.by_code.iter()) {
                *t += c.load(Ordering::Relaxed);
            }
            if i < shown {
                per_worker.push(serde_json::json!({ "requests": r, "body_bytes": b }));
            }
        }
        let mut status = serde_json::Map::new();
        for (i, n) in total_codes.iter().enumerate().filter(|(_, &n)| n > 0) {
            let key = CODES.get(i).map_or("other".to_string(), |c| c.to_string());
            status.insert(key, (*n).into());
        }
        serde_json::json!({
            "pid": std::process::id(),
            "requests": requests,
            "body_bytes": bytes,
            "status": status,
            "latency_us": self.latency_json(),
            "workers": per_worker,
        })
    }
}

/// The counters at one moment (see [`Counters::snapshot`]).
pub struct Snapshot {
    /// Per reported worker: requests answered and body bytes sent.
    pub workers: Vec<(u64, u64)>,
    /// Responses per status code, every code of [`CODES`] then `"other"`.
    pub by_code: Vec<(String, u64)>,
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// A time in the common log format: `22/Nov/2026:00:56:53 +0000`.
pub fn clf_time(t: SystemTime) -> String {
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let secs = t.duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{d:02}/{}/{y}:{:02}:{:02}:{:02} +0000",
        MONTHS[m as usize - 1],
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Appends one common-log-format line.
pub fn log_access(log: &File, peer: SocketAddr, line: &str, code: u16, body: u64) {
    let entry =
        format!("{} - - [{}] \"{}\" {code} {body}\n", peer.ip(), clf_time(SystemTime::now()), line);
    let _ = (&*log).write_all(entry.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn common_log_format_dates() {
        assert_eq!(clf_time(UNIX_EPOCH), "01/Jan/1970:00:00:00 +0000");
        let t = UNIX_EPOCH + Duration::from_secs(1_795_309_013); // 2026-11-22 00:56:53
        assert_eq!(clf_time(t), "22/Nov/2026:00:56:53 +0000");
        let leap = UNIX_EPOCH + Duration::from_secs(951_825_600); // 2000-02-29 12:00:00
        assert_eq!(clf_time(leap), "29/Feb/2000:12:00:00 +0000");
    }

    #[test]
    fn counters_add_up_per_status() {
        let c = Counters::new(2);
        c.count(200, 10);
        c.count(404, 5);
        c.count(599, 0);
        let j = c.to_json();
        assert_eq!(j["requests"], 3);
        assert_eq!(j["body_bytes"], 15);
        assert_eq!(j["status"]["200"], 1);
        assert_eq!(j["status"]["other"], 1);
        assert_eq!(j["latency_us"]["count"], 0);
    }

    #[test]
    fn only_the_serving_runtimes_workers_are_reported() {
        let c = Counters::new(BLOCKS);
        for _ in 0..3 {
            c.count(200, 1); // outside a runtime: block 0
        }
        assert_eq!(c.to_json()["workers"].as_array().unwrap().len(), BLOCKS);
        c.show_workers(2);
        let j = c.to_json();
        let workers = j["workers"].as_array().unwrap();
        assert_eq!(workers.len(), 2);
        assert_eq!(workers[0]["requests"], 3);
        assert_eq!(workers[1]["requests"], 0);
        assert_eq!(j["requests"], 3);
        c.show_workers(0);
        assert_eq!(c.to_json()["workers"].as_array().unwrap().len(), 1);
        c.show_workers(1_000);
        assert_eq!(c.to_json()["workers"].as_array().unwrap().len(), BLOCKS);
    }

    #[test]
    fn latencies_merge_over_workers_into_percentiles() {
        let c = Counters::new(2);
        for us in 1..=100 {
            c.record_latency(Duration::from_micros(us * 10));
        }
        let j = c.latency_json();
        assert_eq!(j["count"], 100);
        let p50 = j["p50"].as_u64().unwrap();
        assert!((495..=505).contains(&p50), "{j}");
        assert!(j["p100"].as_u64().unwrap() >= 1000, "{j}");
    }
}

//! What a load run measured: throughput, the latency distribution, errors by kind.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Error kinds counted separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[repr(usize)]
pub enum ErrorKind {
    /// The connection could not be made.
    Connect,
    /// No complete response within the request timeout.
    Timeout,
    /// The server closed or reset the connection mid-response.
    Reset,
    /// A response the client could not parse.
    Malformed,
    /// A status outside 2xx and 3xx.
    Status,
}

/// Number of error kinds.
pub const ERROR_KINDS: usize = 5;

/// Counts and latencies of one client, merged into a report at the end.
pub struct Tally {
    /// Latency of each successful response, in microseconds.
    pub latency_us: Histogram<u64>,
    /// Successful responses in the measured phase.
    pub ok: u64,
    /// Errors in the measured phase, by kind.
    pub errors: [u64; ERROR_KINDS],
    /// Response bytes (heads and bodies) in the measured phase.
    pub bytes: u64,
    /// Open loop: requests sent more than 1 ms after their intended time (the connection was
    /// still waiting for an earlier response).
    pub late: u64,
    /// Semi-open loop: sessions started in the measured phase.
    pub sessions: u64,
}

impl Tally {
    /// An empty tally (latencies from 1 µs to 1 h, 3 significant digits).
    pub fn new() -> Tally {
        Tally {
            latency_us: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds"),
            ok: 0,
            errors: [0; ERROR_KINDS],
            bytes: 0,
            late: 0,
            sessions: 0,
        }
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: &Tally) {
        let _ = self.latency_us.add(&other.latency_us);
        self.ok += other.ok;
        self.bytes += other.bytes;
        self.late += other.late;
        self.sessions += other.sessions;
        for (a, b) in self.errors.iter_mut().zip(other.errors) {
            *a += b;
        }
    }
}

impl Default for Tally {
    fn default() -> Self {
        Tally::new()
    }
}

/// The result of a load run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadReport {
    /// The load model, as given.
    pub model: String,
    /// Length of the measured phase.
    pub measured: Duration,
    /// Successful responses in the measured phase.
    pub ok: u64,
    /// Successful responses per second.
    pub throughput: f64,
    /// Response bytes per second.
    pub bytes_per_sec: f64,
    /// Errors by kind: connect, timeout, reset, malformed, status.
    pub errors: [u64; ERROR_KINDS],
    /// Latency percentiles in microseconds: (percentile, value).
    pub latency_us: Vec<(f64, u64)>,
    /// Mean and largest latency in microseconds.
    pub latency_mean_us: f64,
    /// Largest latency.
    pub latency_max_us: u64,
    /// Open loop: sends later than intended (see [`Tally::late`]).
    pub late_sends: u64,
    /// Semi-open loop: sessions started in the measured phase.
    pub sessions: u64,
}

impl LoadReport {
    /// The report of a merged tally over `measured`.
    pub fn from_tally(model: String, t: &Tally, measured: Duration) -> LoadReport {
        let secs = measured.as_secs_f64().max(1e-9);
        let latency_us = [50.0, 90.0, 99.0, 99.9, 99.99]
            .iter()
            .map(|&p| {
                (p, if t.latency_us.is_empty() { 0 } else { t.latency_us.value_at_percentile(p) })
            })
            .collect();
        LoadReport {
            model,
            measured,
            ok: t.ok,
            throughput: t.ok as f64 / secs,
            bytes_per_sec: t.bytes as f64 / secs,
            errors: t.errors,
            latency_us,
            latency_mean_us: t.latency_us.mean(),
            latency_max_us: t.latency_us.max(),
            late_sends: t.late,
            sessions: t.sessions,
        }
    }

    /// The latency at percentile `p` (one of those reported).
    pub fn percentile(&self, p: f64) -> Option<u64> {
        self.latency_us.iter().find(|(q, _)| (*q - p).abs() < 1e-9).map(|(_, v)| *v)
    }

    /// A human-readable summary.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{}: {} responses in {:.1} s = {:.0} req/s, {:.1} MB/s\nlatency:",
            self.model,
            self.ok,
            self.measured.as_secs_f64(),
            self.throughput,
            self.bytes_per_sec / 1e6
        );
        for (p, v) in &self.latency_us {
            s += &format!(" p{p}={v}us");
        }
        s += &format!(" mean={:.0}us max={}us\n", self.latency_mean_us, self.latency_max_us);
        let names = ["connect", "timeout", "reset", "malformed", "status"];
        let errs: Vec<String> = names
            .iter()
            .zip(self.errors)
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        s += &format!(
            "errors: {}\n",
            if errs.is_empty() { "none".to_string() } else { errs.join(" ") }
        );
        if self.sessions > 0 {
            s += &format!(
                "sessions: {} ({:.2} responses per session)\n",
                self.sessions,
                self.ok as f64 / self.sessions as f64
            );
        }
        if self.late_sends > 0 {
            s += &format!("late sends (open loop): {}\n", self.late_sends);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_merge_into_percentiles() {
        let mut a = Tally::new();
        for v in 1..=100 {
            a.latency_us.record(v * 10).unwrap();
        }
        a.ok = 100;
        a.errors[ErrorKind::Timeout as usize] = 2;
        let mut b = Tally::new();
        b.latency_us.record(5000).unwrap();
        b.ok = 1;
        a.merge(&b);
        let r = LoadReport::from_tally("closed".into(), &a, Duration::from_secs(2));
        assert_eq!(r.ok, 101);
        assert_eq!(r.throughput, 50.5);
        assert_eq!(r.errors[ErrorKind::Timeout as usize], 2);
        let p50 = r.percentile(50.0).unwrap();
        assert!((500..=520).contains(&p50), "{p50}");
        assert!(r.latency_max_us >= 5000);
        assert!(r.table().contains("timeout=2"));
    }
}

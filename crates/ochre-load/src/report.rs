//! What a load run measured: throughput, the latency distribution, responses by status code,
//! errors by kind, a time series.
//!
//! Each client records into its own [`Tally`]; at the end the tallies are merged and turned into
//! a [`LoadReport`]. A report keeps its latency histogram (as `(value, count)` pairs), so reports
//! of several injectors (master and workers) merge exactly, not by averaging percentiles.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::Error;

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
    /// The connection ended before the response was complete.
    ShortBody,
    /// With verification: the body differed from the file.
    Mismatch,
}

/// Number of error kinds.
pub const ERROR_KINDS: usize = 7;

impl ErrorKind {
    /// Every kind, in the order of [`LoadReport::errors`].
    pub const ALL: [ErrorKind; ERROR_KINDS] = [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Reset,
        ErrorKind::Malformed,
        ErrorKind::Status,
        ErrorKind::ShortBody,
        ErrorKind::Mismatch,
    ];

    /// Its name in tables and CSV.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Reset => "reset",
            ErrorKind::Malformed => "malformed",
            ErrorKind::Status => "status",
            ErrorKind::ShortBody => "short-body",
            ErrorKind::Mismatch => "mismatch",
        }
    }
}

/// Length of one interval of the time series.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// One interval of the time series (measured phase, [`INTERVAL`] long).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Successful responses that completed in it.
    pub ok: u64,
    /// Errors counted in it.
    pub errors: u64,
    /// Sum of their latencies in microseconds (mean = sum / ok).
    pub latency_sum_us: u64,
}

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
    /// Requests sent in the measured phase.
    pub sent: u64,
    /// Open loop: sends whose timer fired more than 1 ms late while the connection was free
    /// (the injector itself could not keep the pace).
    pub injector_late: u64,
    /// Per-interval counts of the measured phase.
    pub series: Vec<Interval>,
    /// Responses of the measured phase by status code, as (code, count) in first-seen order:
    /// a server answers with few distinct codes, so a short list beats a map on the hot path.
    pub status: Vec<(u16, u64)>,
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
            sent: 0,
            injector_late: 0,
            series: Vec::new(),
            status: Vec::new(),
        }
    }

    fn interval(&mut self, since_start: Duration) -> &mut Interval {
        let i = (since_start.as_nanos() / INTERVAL.as_nanos()) as usize;
        if self.series.len() <= i {
            self.series.resize(i + 1, Interval::default());
        }
        &mut self.series[i]
    }

    /// A successful response `since_start` into the measured phase.
    pub fn record_ok(&mut self, since_start: Duration, latency: Duration, bytes: u64) {
        let us = (latency.as_micros() as u64).max(1);
        self.ok += 1;
        self.bytes += bytes;
        self.latency_us.saturating_record(us);
        let i = self.interval(since_start);
        i.ok += 1;
        i.latency_sum_us += us;
    }

    /// A response with status `code` in the measured phase (whether it counts as a success or
    /// an error is recorded apart).
    pub fn record_status(&mut self, code: u16) {
        self.add_status(code, 1);
    }

    fn add_status(&mut self, code: u16, n: u64) {
        match self.status.iter_mut().find(|(c, _)| *c == code) {
            Some((_, count)) => *count += n,
            None => self.status.push((code, n)),
        }
    }

    /// An error `since_start` into the measured phase.
    pub fn record_error(&mut self, since_start: Duration, kind: ErrorKind) {
        self.errors[kind as usize] += 1;
        self.interval(since_start).errors += 1;
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: &Tally) {
        let _ = self.latency_us.add(&other.latency_us);
        self.ok += other.ok;
        self.bytes += other.bytes;
        self.late += other.late;
        self.sessions += other.sessions;
        self.sent += other.sent;
        self.injector_late += other.injector_late;
        for (a, b) in self.errors.iter_mut().zip(other.errors) {
            *a += b;
        }
        for &(code, n) in &other.status {
            self.add_status(code, n);
        }
        if self.series.len() < other.series.len() {
            self.series.resize(other.series.len(), Interval::default());
        }
        for (a, b) in self.series.iter_mut().zip(&other.series) {
            a.ok += b.ok;
            a.errors += b.errors;
            a.latency_sum_us += b.latency_sum_us;
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
    /// Response bytes (heads and bodies).
    #[serde(default)]
    pub bytes: u64,
    /// Response bytes per second.
    pub bytes_per_sec: f64,
    /// Errors by kind, in the order of [`ErrorKind::ALL`].
    pub errors: [u64; ERROR_KINDS],
    /// Responses by status code (successes and `status` errors alike).
    #[serde(default)]
    pub status: BTreeMap<u16, u64>,
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
    /// Requests sent in the measured phase.
    #[serde(default)]
    pub sent: u64,
    /// Open loop: sends the injector itself made late (see [`Tally::injector_late`]).
    #[serde(default)]
    pub injector_late: u64,
    /// Share of its CPUs the injector used (0..1), when it was measured (`ochre load` does: its
    /// process is the injector).
    #[serde(default)]
    pub injector_cpu: Option<f64>,
    /// Injectors merged into this report (1, or the master and its workers).
    #[serde(default = "one")]
    pub injectors: usize,
    /// The measured phase interval by interval ([`INTERVAL`] each).
    #[serde(default)]
    pub series: Vec<Interval>,
    /// The whole latency histogram, as (microseconds, count) of each recorded bucket: what
    /// reports merge by.
    #[serde(default)]
    pub histogram: Vec<(u64, u64)>,
    /// What went wrong around the measurement (a worker lost, ...).
    #[serde(default)]
    pub notes: Vec<String>,
}

fn one() -> usize {
    1
}

/// Percentiles a report lists.
pub const PERCENTILES: [f64; 8] = [50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0];

impl LoadReport {
    /// The report of a merged tally over `measured`.
    pub fn from_tally(model: String, t: &Tally, measured: Duration) -> LoadReport {
        let secs = measured.as_secs_f64().max(1e-9);
        let latency_us = PERCENTILES
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
            bytes: t.bytes,
            bytes_per_sec: t.bytes as f64 / secs,
            errors: t.errors,
            status: t.status.iter().copied().collect(),
            latency_us,
            latency_mean_us: t.latency_us.mean(),
            latency_max_us: t.latency_us.max(),
            late_sends: t.late,
            sessions: t.sessions,
            sent: t.sent,
            injector_late: t.injector_late,
            injector_cpu: None,
            injectors: 1,
            series: t.series.clone(),
            histogram: t
                .latency_us
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
            notes: Vec::new(),
        }
    }

    /// The tally this report was made of (its histogram and counts).
    pub fn to_tally(&self) -> Tally {
        let mut t = Tally::new();
        for &(v, n) in &self.histogram {
            let _ = t.latency_us.record_n(v.max(1), n);
        }
        t.ok = self.ok;
        t.bytes = self.bytes;
        t.errors = self.errors;
        t.status = self.status.iter().map(|(&c, &n)| (c, n)).collect();
        t.late = self.late_sends;
        t.sessions = self.sessions;
        t.sent = self.sent;
        t.injector_late = self.injector_late;
        t.series = self.series.clone();
        t
    }

    /// Merges the reports of injectors that ran the same phases at the same time (a master
    /// and its workers): counts add, histograms add, percentiles are those of the sum.
    pub fn merge(model: String, parts: &[LoadReport]) -> Result<LoadReport, Error> {
        let first = parts.first().ok_or_else(|| Error::Merge("no report to merge".into()))?;
        let mut total = Tally::new();
        let mut cpu: Vec<f64> = Vec::new();
        for p in parts {
            if p.histogram.is_empty() && p.ok > 0 {
                return Err(Error::Merge("a report without its histogram cannot be merged".into()));
            }
            total.merge(&p.to_tally());
            cpu.extend(p.injector_cpu);
        }
        // Injectors that end on a request count may stop at different times: the whole took
        // the longest.
        let measured = parts.iter().map(|p| p.measured).max().unwrap_or(first.measured);
        let mut r = LoadReport::from_tally(model, &total, measured);
        r.injectors = parts.iter().map(|p| p.injectors).sum();
        r.injector_cpu = cpu.into_iter().reduce(f64::max);
        r.notes = parts.iter().flat_map(|p| p.notes.iter().cloned()).collect();
        Ok(r)
    }

    /// What makes this measurement doubtful: the injector near its CPU limit, or sending late.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = self.notes.clone();
        if let Some(cpu) = self.injector_cpu.filter(|&c| c >= 0.9) {
            w.push(format!(
                "the injector used {:.0}% of its CPUs: it may be the bottleneck (give it more \
                 workers or CPUs, or spread it with --remote)",
                cpu * 100.0
            ));
        }
        if self.sent > 0 && self.injector_late as f64 > 0.01 * self.sent as f64 {
            w.push(format!(
                "{:.1}% of the sends left more than 1 ms after their time with the connection \
                 free: the injector cannot hold this rate",
                100.0 * self.injector_late as f64 / self.sent as f64
            ));
        }
        w
    }

    /// The time series as CSV: one line per interval.
    pub fn csv(&self) -> String {
        let mut s = String::from("second,responses,errors,mean_latency_us\n");
        for (i, iv) in self.series.iter().enumerate() {
            let mean = if iv.ok == 0 { 0.0 } else { iv.latency_sum_us as f64 / iv.ok as f64 };
            let t = i as f64 * INTERVAL.as_secs_f64();
            let _ = writeln!(s, "{t},{},{},{mean:.1}", iv.ok, iv.errors);
        }
        s
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
            s += &format!(" p{p}={}", latency(*v as f64));
        }
        s += &format!(
            " mean={} max={}\n",
            latency(self.latency_mean_us),
            latency(self.latency_max_us as f64)
        );
        if !self.status.is_empty() {
            let codes: Vec<String> = self.status.iter().map(|(c, n)| format!("{c}={n}")).collect();
            s += &format!("status: {}\n", codes.join(" "));
        }
        let errs: Vec<String> = ErrorKind::ALL
            .iter()
            .map(|k| k.name())
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
        if self.injectors > 1 {
            s += &format!("merged from {} injectors\n", self.injectors);
        }
        if let Some(cpu) = self.injector_cpu {
            s += &format!("injector CPU: {:.0}%\n", cpu * 100.0);
        }
        for w in self.warnings() {
            s += &format!("warning: {w}\n");
        }
        s
    }
}

/// A latency given in microseconds, in the unit that suits it: `850us`, `12.3ms`, `1.50s`.
pub fn latency(us: f64) -> String {
    if us < 1e3 {
        format!("{us:.0}us")
    } else if us < 1e4 {
        format!("{:.2}ms", us / 1e3)
    } else if us < 1e6 {
        format!("{:.1}ms", us / 1e3)
    } else {
        format!("{:.2}s", us / 1e6)
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

    fn tally(offset_us: u64) -> Tally {
        let mut t = Tally::new();
        for v in 1..=1000u64 {
            let at = Duration::from_millis((v - 1) * 2);
            t.record_ok(at, Duration::from_micros(offset_us + v), 100);
        }
        t
    }

    #[test]
    fn reports_merge_by_their_histograms_not_their_percentiles() {
        let (a, mut b) = (tally(0), tally(5000));
        b.record_error(Duration::from_millis(1500), ErrorKind::Reset);
        let secs = Duration::from_secs(2);
        let parts = [
            LoadReport::from_tally("a".into(), &a, secs),
            LoadReport::from_tally("b".into(), &b, secs),
        ];
        // Through JSON, as workers send them.
        let parts: Vec<LoadReport> = parts
            .iter()
            .map(|p| serde_json::from_str(&serde_json::to_string(p).unwrap()).unwrap())
            .collect();
        let merged = LoadReport::merge("m".into(), &parts).unwrap();
        let mut whole = Tally::new();
        whole.merge(&a);
        whole.merge(&b);
        let direct = LoadReport::from_tally("m".into(), &whole, secs);
        assert_eq!(merged.latency_us, direct.latency_us);
        assert_eq!((merged.ok, merged.bytes, merged.errors), (2000, 200_000, direct.errors));
        assert_eq!(merged.series, direct.series);
        assert_eq!(merged.series.len(), 2);
        assert_eq!(merged.series[1].errors, 1);
        assert_eq!(merged.injectors, 2);
        // The median of the whole lies between the two parts, unlike either part's median.
        let p50 = merged.percentile(50.0).unwrap();
        assert!((995..=1010).contains(&p50), "{p50}");
        let csv = merged.csv();
        assert_eq!(csv.lines().count(), 3, "{csv}");
        assert!(csv.lines().nth(2).unwrap().starts_with("1,1000,1,"), "{csv}");
    }

    #[test]
    fn responses_by_status_code_merge_and_show() {
        let mut a = tally(0);
        for code in [200, 200, 404, 200] {
            a.record_status(code);
        }
        let mut b = Tally::new();
        b.record_status(503);
        b.record_status(404);
        a.merge(&b);
        assert_eq!(a.status, vec![(200, 3), (404, 2), (503, 1)]);
        let r = LoadReport::from_tally("x".into(), &a, Duration::from_secs(1));
        assert!(r.table().contains("status: 200=3 404=2 503=1\n"), "{}", r.table());
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains(r#""status":{"200":3,"404":2,"503":1}"#), "{json}");
        // Through JSON and back into a tally, as a worker's report is merged.
        let back: LoadReport = serde_json::from_str(&json).unwrap();
        assert_eq!(LoadReport::merge("m".into(), &[back.clone(), back]).unwrap().status[&404], 4);
        // A report of an older version, without the field, still reads.
        let old = json.replace(r#""status":{"200":3,"404":2,"503":1},"#, "");
        assert!(serde_json::from_str::<LoadReport>(&old).unwrap().status.is_empty());
    }

    #[test]
    fn latencies_are_shown_in_a_unit_that_suits_them() {
        assert_eq!(latency(0.0), "0us");
        assert_eq!(latency(850.4), "850us");
        assert_eq!(latency(999.0), "999us");
        assert_eq!(latency(1234.0), "1.23ms");
        assert_eq!(latency(12_345.0), "12.3ms");
        assert_eq!(latency(999_000.0), "999.0ms");
        assert_eq!(latency(1_500_000.0), "1.50s");
        let r = LoadReport::from_tally("x".into(), &tally(20_000), Duration::from_secs(1));
        let table = r.table();
        assert!(table.contains(" p50=20.5ms ") && table.contains(" max=21.0ms\n"), "{table}");
    }

    #[test]
    fn warnings_say_when_the_injector_is_the_limit() {
        let mut r = LoadReport::from_tally("x".into(), &tally(0), Duration::from_secs(1));
        assert!(r.warnings().is_empty());
        r.injector_cpu = Some(0.97);
        r.sent = 1000;
        r.injector_late = 50;
        let w = r.warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(r.table().contains("warning: the injector used 97%"), "{}", r.table());
    }
}

//! The eight applications of Phoenix (thesis §5.4.2), each a [`MapReduce`](crate::MapReduce)
//! with a sequential reference in plain Rust, a seeded generator of its input in Phoenix's
//! format, and a summary of its result.
//!
//! | application | input (Phoenix's format) | key -> value | container |
//! | --- | --- | --- | --- |
//! | `word-count` | text | word -> occurrences | hash |
//! | `reverse-index` | a tree of HTML files | link -> files linking to it | hash |
//! | `histogram` | 24-bit BMP | channel and intensity -> pixels | dense (768) |
//! | `linear-regression` | pairs of signed bytes (x, y) | sum name -> sum | fixed (5) |
//! | `kmeans` | points (binary, header + i32) | cluster -> sum of its points | dense |
//! | `pca` | matrix (binary, header + i32) | row -> mean; row i -> covariances with rows i.. | dense; dense |
//! | `string-match` | keys file (one word a line) | searched word -> lines matching | fixed (4) |
//! | `matrix-multiply` | `matrix_file_A.txt`, `matrix_file_B.txt` (raw i32) | a block's first row -> its rows of A x B | dense |
//!
//! Results are integers wherever Phoenix computes integers (all but linear regression's line,
//! derived from exact integer sums), so the MapReduce result must equal the reference exactly;
//! linear regression's floats are compared within a relative 1e-9.
//!
//! [`run`] and [`generate`] dispatch by name for the command line (through [`with_app`]); bad input gives an
//! [`AppError`], never a panic.

use std::path::Path;
use std::sync::Arc;

use ochre::Runtime;
use serde::Serialize;

use crate::Phases;

pub mod histogram;
pub mod kmeans;
pub mod linear_regression;
pub mod matrix_multiply;
pub mod pca;
pub mod reverse_index;
pub mod streaming;
pub mod string_match;
pub mod word_count;

/// The applications, by their command-line names.
pub const NAMES: &[&str] = &[
    "word-count",
    "reverse-index",
    "histogram",
    "linear-regression",
    "kmeans",
    "pca",
    "string-match",
    "matrix-multiply",
];

/// Input sizes, scaled to a 2-core machine: small for tests (well under a second), medium for
/// benchmarks (a fraction of a second to a few seconds), large still in memory and under a
/// minute per system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// For tests and `--quick`.
    Small,
    /// For benchmarks.
    Medium,
    /// For long runs.
    Large,
}

impl Size {
    /// `small`, `medium` or `large`.
    pub fn parse(s: &str) -> Option<Size> {
        match s {
            "small" => Some(Size::Small),
            "medium" => Some(Size::Medium),
            "large" => Some(Size::Large),
            _ => None,
        }
    }

    /// One of three values, by size.
    fn pick<T>(self, small: T, medium: T, large: T) -> T {
        match self {
            Size::Small => small,
            Size::Medium => medium,
            Size::Large => large,
        }
    }
}

/// Why an application could not run.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The input is missing, unreadable or not in the application's format.
    #[error("{0}")]
    Input(String),
    /// No application has this name.
    #[error("unknown application `{0}` (one of: {names})", names = NAMES.join(", "))]
    Unknown(String),
    /// The job failed.
    #[error(transparent)]
    Job(#[from] crate::Error),
}

/// Reads a whole file, with the path in the error.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, AppError> {
    std::fs::read(path).map_err(|e| AppError::Input(format!("reading {}: {e}", path.display())))
}

/// Writes a whole file, with the path in the error.
pub(crate) fn write(path: &Path, bytes: &[u8]) -> Result<(), AppError> {
    std::fs::write(path, bytes)
        .map_err(|e| AppError::Input(format!("writing {}: {e}", path.display())))
}

/// One of the applications: how to load, run, check and show it.
pub trait Application: Send + Sync + Sized + 'static {
    /// Its command-line name.
    const NAME: &'static str;
    /// What it computes.
    type Result: std::fmt::Debug + Send;
    /// Reads its input from `path` (a file, or a directory for some).
    fn load(path: &Path) -> Result<Self, AppError>;
    /// Writes a seeded input of `size` at `out`.
    fn generate(size: Size, seed: u64, out: &Path) -> Result<(), AppError>;
    /// Runs it as MapReduce jobs on `rt` (several for K-means and PCA: phases are summed).
    fn run(app: &Arc<Self>, rt: &Runtime) -> Result<(Self::Result, Phases), crate::Error>;
    /// The sequential reference.
    fn sequential(&self) -> Self::Result;
    /// Whether two results agree (exactly, or within the tolerance the module states).
    fn agree(a: &Self::Result, b: &Self::Result) -> bool;
    /// A few lines for a person.
    fn summary(result: &Self::Result) -> Vec<String>;
    /// The result, or a digest of it, as JSON.
    fn json(result: &Self::Result) -> serde_json::Value;
}

/// What `ochre mr APP` prints.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The application.
    pub app: &'static str,
    /// A few lines describing the result.
    pub summary: Vec<String>,
    /// The result (or its digest) as JSON.
    pub result: serde_json::Value,
    /// The phase breakdown.
    pub phases: Phases,
    /// With `verify`: whether the result equals the sequential reference's.
    pub verified: Option<bool>,
    /// With `verify`: the sequential reference's time, seconds.
    pub sequential_seconds: Option<f64>,
}

fn drive<A: Application>(input: &Path, rt: &Runtime, verify: bool) -> Result<Report, AppError> {
    let app = Arc::new(A::load(input)?);
    let (result, phases) = A::run(&app, rt)?;
    let (verified, sequential_seconds) = if verify {
        let t = std::time::Instant::now();
        let reference = app.sequential();
        (Some(A::agree(&result, &reference)), Some(t.elapsed().as_secs_f64()))
    } else {
        (None, None)
    };
    Ok(Report {
        app: A::NAME,
        summary: A::summary(&result),
        result: A::json(&result),
        phases,
        verified,
        sequential_seconds,
    })
}

/// Something done with an application chosen by name: [`with_app`] calls it with the
/// application's type, so that the name-to-type table exists once (the command line, the
/// benchmarks' examples).
pub trait AppFn {
    /// What the call gives.
    type Out;
    /// Does it with application `A`.
    fn call<A: Application>(self) -> Self::Out;
}

/// Calls `f` with the application named `name` (one of [`NAMES`]); `None` for another name.
pub fn with_app<F: AppFn>(name: &str, f: F) -> Option<F::Out> {
    Some(match name {
        "word-count" => f.call::<word_count::WordCount>(),
        "reverse-index" => f.call::<reverse_index::ReverseIndex>(),
        "histogram" => f.call::<histogram::Histogram>(),
        "linear-regression" => f.call::<linear_regression::LinearRegression>(),
        "kmeans" => f.call::<kmeans::Kmeans>(),
        "pca" => f.call::<pca::Pca>(),
        "string-match" => f.call::<string_match::StringMatch>(),
        "matrix-multiply" => f.call::<matrix_multiply::MatrixMultiply>(),
        _ => return None,
    })
}

/// Runs application `name` on `input` with `rt`; with `verify`, also its sequential reference,
/// and says whether they agree.
pub fn run(name: &str, input: &Path, rt: &Runtime, verify: bool) -> Result<Report, AppError> {
    struct Drive<'a>(&'a Path, &'a Runtime, bool);
    impl AppFn for Drive<'_> {
        type Out = Result<Report, AppError>;
        fn call<A: Application>(self) -> Self::Out {
            drive::<A>(self.0, self.1, self.2)
        }
    }
    with_app(name, Drive(input, rt, verify)).unwrap_or_else(|| Err(AppError::Unknown(name.into())))
}

/// Writes a seeded input of `size` for application `name` at `out`.
pub fn generate(name: &str, size: Size, seed: u64, out: &Path) -> Result<(), AppError> {
    struct Generate<'a>(Size, u64, &'a Path);
    impl AppFn for Generate<'_> {
        type Out = Result<(), AppError>;
        fn call<A: Application>(self) -> Self::Out {
            A::generate(self.0, self.1, self.2)
        }
    }
    with_app(name, Generate(size, seed, out)).unwrap_or_else(|| Err(AppError::Unknown(name.into())))
}

/// A small seeded generator (SplitMix64): inputs are the same for a seed on every machine.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x6a09_e667_f3bc_c909)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Roughly Zipf-distributed in `0..n`: rank `r` about as likely as `1/r` (log-uniform).
    pub fn zipf(&mut self, n: u64) -> u64 {
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        (((n as f64 + 1.0).ln() * u).exp() as u64).saturating_sub(1).min(n - 1)
    }
}

/// A random lower-case word of 2 to 9 letters.
pub(crate) fn random_word(rng: &mut Rng) -> Vec<u8> {
    let len = 2 + rng.below(8) as usize;
    (0..len).map(|_| b'a' + rng.below(26) as u8).collect()
}

/// Little-endian readers for the binary formats, with a clear error past the end.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    what: &'a str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], what: &'a str) -> Self {
        Reader { bytes, what }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], AppError> {
        if self.bytes.len() < n {
            return Err(AppError::Input(format!("{}: the file is truncated", self.what)));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, AppError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn i32s(&mut self, n: usize) -> Result<Vec<i32>, AppError> {
        let len = n
            .checked_mul(4)
            .ok_or_else(|| AppError::Input(format!("{}: sizes too large", self.what)))?;
        Ok(self
            .take(len)?
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    pub(crate) fn rest(&self) -> usize {
        self.bytes.len()
    }
}

/// `values` as little-endian i32 bytes.
pub(crate) fn i32_bytes(values: impl IntoIterator<Item = i32>) -> Vec<u8> {
    values.into_iter().flat_map(i32::to_le_bytes).collect()
}

/// Byte ranges of about `chunk` bytes over `data` that end after a byte `is_end` accepts
/// (a space, a newline), so that no record is cut in two.
pub(crate) fn ranges_ending_at(
    data: &[u8],
    chunk: usize,
    is_end: impl Fn(u8) -> bool,
) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::with_capacity(data.len() / chunk.max(1) + 1);
    let mut start = 0;
    while start < data.len() {
        let mut end = (start + chunk.max(1)).min(data.len());
        while end < data.len() && !is_end(data[end - 1]) {
            end += 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

#[cfg(test)]
pub(crate) mod testing {
    //! Helpers of the applications' tests: a small runtime, and the check that MapReduce
    //! agrees with the reference on a generated input.
    use super::*;

    /// A 2-worker runtime that does not pin (tests share the machine) and stops at a panic.
    pub fn runtime() -> Runtime {
        Runtime::builder().workers(2).pin(false).abort_on_panic(true).build().unwrap()
    }

    /// Generates a small input with `seed` into a temporary path, loads it, runs it as
    /// MapReduce and sequentially, and asserts they agree. Returns the result.
    pub fn check<A: Application>(seed: u64) -> A::Result {
        let dir = std::env::temp_dir().join(format!(
            "ochre-mr-test-{}-{}-{seed}",
            A::NAME,
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let input = dir.join("input");
        A::generate(Size::Small, seed, &input).unwrap();
        let app = Arc::new(A::load(&input).unwrap());
        let rt = runtime();
        let (got, phases) = A::run(&app, &rt).unwrap();
        let want = app.sequential();
        assert!(A::agree(&got, &want), "{}: MapReduce {got:?}\nreference {want:?}", A::NAME);
        assert!(phases.map_tasks > 0, "{}: {}", A::NAME, phases.line());
        let _ = std::fs::remove_dir_all(&dir);
        got
    }
}

//! PCA: the mean of each row of an integer matrix and the covariance of every pair of rows, the
//! first step of a principal component analysis, in two MapReduce jobs chained in one run of
//! the runtime ([`crate::run_flow`]) (Phoenix's `pca`).
//!
//! Phoenix generates the matrix in memory; here the generator writes it: `PCAM`, then
//! little-endian u32 `rows` and `cols`, then the values as i32, row after row. Job 1 maps blocks
//! of rows to `(row, mean)` (integer division, as Phoenix) into a dense container. Job 2 maps
//! runs of rows to `(i, [cov(i, i), cov(i, i + 1), ..])`, row `i`'s cells of the upper
//! triangle, into a dense container indexed by row, with
//! `cov = sum over columns of (a[i][c] - mean i) (a[j][c] - mean j) / (cols - 1)`; reduce is
//! the identity in both. (Phoenix 2.0's covariance loops over `num_rows` where it means
//! `num_cols`, which its own comment flags; this one uses the columns.) All integer, in i64:
//! the result equals the reference's exactly.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use ochre::Runtime;
use serde::Serialize;

use super::{i32_bytes, read, write, AppError, Application, Reader, Rng, Size};
use crate::{run_flow, Container, Emitter, Flow, Job, MapReduce, Phases};

/// A matrix.
pub struct Pca {
    rows: usize,
    cols: usize,
    m: Arc<Vec<i32>>,
}

/// Row means and the upper triangle of the covariance matrix, pair `(0,0), (0,1), ...`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stats {
    /// Rows of the matrix.
    pub rows: usize,
    /// The mean of each row.
    pub means: Vec<i64>,
    /// `cov(i, j)` for `i <= j`, row-major over the upper triangle.
    pub cov: Vec<i64>,
}

/// Job 1: the mean of each row.
struct RowMeans {
    rows: usize,
    cols: usize,
    m: Arc<Vec<i32>>,
}

/// The mean of a row, truncated.
pub fn row_mean(row: &[i32]) -> i64 {
    row.iter().map(|&v| i64::from(v)).sum::<i64>() / row.len() as i64
}

impl MapReduce for RowMeans {
    type Split = Range<usize>;
    type Key = u32;
    type Value = i64;

    fn split(&self, chunk_bytes: usize) -> Vec<Range<usize>> {
        crate::byte_ranges(self.rows, (chunk_bytes / (4 * self.cols)).max(1))
    }

    fn input_bytes(&self) -> usize {
        self.m.len() * 4
    }

    fn map(&self, rows: &Range<usize>, out: &mut Emitter<'_, Self>) {
        for i in rows.clone() {
            out.emit(i as u32, row_mean(&self.m[i * self.cols..(i + 1) * self.cols]));
        }
    }

    fn combine(&self, _acc: &mut i64, _value: i64) {}

    fn key_index(&self, key: &u32) -> Option<usize> {
        Some(*key as usize)
    }
}

/// Job 2: the covariances of each row with the rows after it. A split is a run of rows.
///
/// A row's covariances are one value (`row i -> [cov(i, i), cov(i, i + 1), ...]`), not one
/// pair each, as Matrix Multiply emits a map task's block of rows. Phoenix emits a pair per cell: then each
/// lane's dense store, partition, reduce and merge handled the 131 328 cells of a 512-row
/// matrix one pair at a time, 3-4 ms of a 35 ms job at 2 workers (CPU 1.14-1.24 times the
/// reference's, 0.88 of rayon's rate, whose `flat_map_iter` collects rows); with a row a key,
/// 512 keys, CPU 1.06-1.09 times the reference's and 0.95 of rayon's rate.
struct Covariance {
    rows: usize,
    cols: usize,
    m: Arc<Vec<i32>>,
    means: Vec<i64>,
}

/// The covariance of two rows with the given means, truncated.
pub fn covariance(a: &[i32], ma: i64, b: &[i32], mb: i64) -> i64 {
    let sum: i64 = a.iter().zip(b).map(|(&x, &y)| (i64::from(x) - ma) * (i64::from(y) - mb)).sum();
    sum / (a.len() as i64 - 1).max(1)
}

/// Runs of rows of about `per` cells of the upper triangle each (row `i` holds `rows - i`): a
/// row is never cut, so the first rows of a large matrix are a task each.
fn row_runs(rows: usize, per: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut cells) = (0, 0);
    for i in 0..rows {
        cells += rows - i;
        if cells >= per.max(1) {
            out.push(start..i + 1);
            (start, cells) = (i + 1, 0);
        }
    }
    if start < rows {
        out.push(start..rows);
    }
    out
}

impl MapReduce for Covariance {
    type Split = Range<usize>;
    type Key = u32;
    type Value = Vec<i64>;

    fn split(&self, chunk_bytes: usize) -> Vec<Range<usize>> {
        row_runs(self.rows, chunk_bytes / (4 * self.cols))
    }

    fn input_bytes(&self) -> usize {
        // Every cell reads two rows: weigh the input by the cells, so tasks are many.
        self.rows * (self.rows + 1) / 2 * self.cols * 4
    }

    fn map(&self, rows: &Range<usize>, out: &mut Emitter<'_, Self>) {
        let row = |i: usize| &self.m[i * self.cols..(i + 1) * self.cols];
        for i in rows.clone() {
            let (a, ma) = (row(i), self.means[i]);
            let cells = (i..self.rows).map(|j| covariance(a, ma, row(j), self.means[j]));
            out.emit(i as u32, cells.collect());
        }
    }

    // Each row is emitted once, by the one task that holds it: there is never a second value.
    fn combine(&self, _acc: &mut Vec<i64>, _value: Vec<i64>) {}

    fn key_index(&self, &i: &u32) -> Option<usize> {
        Some(i as usize)
    }
}

impl Pca {
    /// A `rows x cols` matrix, row after row.
    pub fn new(rows: usize, cols: usize, m: Vec<i32>) -> Result<Self, AppError> {
        if rows == 0 || cols < 2 || m.len() != rows * cols {
            return Err(AppError::Input(format!(
                "a {rows} x {cols} matrix needs at least one row, two columns and {} values",
                rows * cols
            )));
        }
        Ok(Pca { rows, cols, m: Arc::new(m) })
    }

    /// Rows of the matrix.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[i32] {
        &self.m[i * self.cols..(i + 1) * self.cols]
    }
}

impl Application for Pca {
    const NAME: &'static str = "pca";
    type Result = Stats;

    fn load(path: &Path) -> Result<Self, AppError> {
        let bytes = read(path)?;
        let what = path.display().to_string();
        let mut r = Reader::new(&bytes, &what);
        if r.take(4)? != b"PCAM" {
            return Err(AppError::Input(format!("{what}: not a matrix file (no PCAM header)")));
        }
        let (rows, cols) = (r.u32()? as usize, r.u32()? as usize);
        let m = r.i32s(rows.saturating_mul(cols))?;
        if r.rest() != 0 {
            return Err(AppError::Input(format!("{what}: {} bytes after the matrix", r.rest())));
        }
        Pca::new(rows, cols, m).map_err(|e| AppError::Input(format!("{what}: {e}")))
    }

    fn generate(size: Size, seed: u64, out: &Path) -> Result<(), AppError> {
        let (rows, cols) = size.pick((64, 128), (512, 1024), (1024, 4096));
        let mut rng = Rng::new(seed);
        let mut bytes = b"PCAM".to_vec();
        bytes.extend_from_slice(&(rows as u32).to_le_bytes());
        bytes.extend_from_slice(&(cols as u32).to_le_bytes());
        // Phoenix's values: rand() % grid_size, grid 100 by default.
        bytes.extend(i32_bytes((0..rows * cols).map(|_| rng.below(100) as i32)));
        write(out, &bytes)
    }

    fn run(app: &Arc<Self>, rt: &Runtime) -> Result<(Stats, Phases), crate::Error> {
        let (rows, cols) = (app.rows, app.cols);
        let m = app.m.clone();
        let means_job = RowMeans { rows, cols, m: m.clone() };
        // Both jobs in one run: the event that merges the means starts the covariance job.
        let flow = Job::new(means_job).container(Container::Dense(rows)).then(move |out| {
            let means: Vec<i64> = out.pairs.into_iter().map(|(_, m)| m).collect();
            let cov_job = Covariance { rows, cols, m, means: means.clone() };
            Flow::Next(Job::new(cov_job).container(Container::Dense(rows)).then(move |out| {
                // The rows in order, each its cells from the diagonal on: the triangle.
                let cov = out.pairs.into_iter().flat_map(|(_, c)| c).collect();
                Flow::Done(Stats { rows, means, cov })
            }))
        });
        run_flow(rt, flow)
    }

    fn sequential(&self) -> Stats {
        let means: Vec<i64> = (0..self.rows).map(|i| row_mean(self.row(i))).collect();
        let mut cov = Vec::with_capacity(self.rows * (self.rows + 1) / 2);
        for i in 0..self.rows {
            for j in i..self.rows {
                cov.push(covariance(self.row(i), means[i], self.row(j), means[j]));
            }
        }
        Stats { rows: self.rows, means, cov }
    }

    fn agree(a: &Stats, b: &Stats) -> bool {
        a == b
    }

    fn summary(s: &Stats) -> Vec<String> {
        let diag: Vec<i64> = {
            let mut d = Vec::new();
            let mut k = 0;
            for i in 0..s.rows {
                d.push(s.cov[k]);
                k += s.rows - i;
            }
            d
        };
        vec![
            format!("{} rows; first means {:?}", s.rows, &s.means[..s.means.len().min(5)]),
            format!("  variances of the first rows {:?}", &diag[..diag.len().min(5)]),
            format!("  sum of the covariances {}", s.cov.iter().sum::<i64>()),
        ]
    }

    fn json(s: &Stats) -> serde_json::Value {
        serde_json::json!({
            "rows": s.rows,
            "means_sum": s.means.iter().sum::<i64>(),
            "cov_sum": s.cov.iter().sum::<i64>(),
            "first_means": &s.means[..s.means.len().min(10)],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing;

    #[test]
    fn mapreduce_matches_the_reference() {
        let s = testing::check::<Pca>(19);
        assert_eq!(s.cov.len(), 64 * 65 / 2);
    }

    #[test]
    fn splits_cover_every_row_once() {
        let c = Covariance { rows: 7, cols: 2, m: Arc::new(vec![0; 14]), means: vec![0; 7] };
        // 5 cells a task: rows 0 (7 cells), 1 (6), 2 (5), then 3 and 4 (4 + 3), 5 and 6 (2 + 1).
        let splits = c.split(5 * 4 * 2);
        assert_eq!(splits, vec![0..1, 1..2, 2..3, 3..5, 5..7]);
        assert_eq!(row_runs(7, 100), vec![0..7]);
        assert_eq!(row_runs(3, 0), vec![0..1, 1..2, 2..3]);
    }

    #[test]
    fn covariance_of_a_row_with_itself_is_its_variance() {
        let p = Pca::new(2, 4, vec![1, 2, 3, 4, 4, 3, 2, 1]).unwrap();
        let s = p.sequential();
        assert_eq!(s.means, vec![2, 2]); // 10 / 4, truncated
                                         // Row 0 about its (truncated) mean 2: 1 + 0 + 1 + 4 = 6, over 3.
        assert_eq!(s.cov, vec![2, -1, 2]);
    }
}

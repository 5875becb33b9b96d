//! Matrix Multiply: the product of two square integer matrices (Phoenix's `matrix_multiply`).
//!
//! The input is Phoenix's pair of files in one directory, `matrix_file_A.txt` and
//! `matrix_file_B.txt`, each the matrix's `n x n` values as native (little-endian) 32-bit
//! integers, row after row; `n` is found from the file size. A map task computes a block of
//! rows of the product and emits it as one pair, `(first row, the block's values)`, into a
//! dense container indexed by row; reduce is the identity, and the output's blocks, in row
//! order, are the product. Rows are computed in i-k-j order (a row of A times the rows of B,
//! added into the output row), which reads B row by row: the reference does the same, and
//! arithmetic wraps like C's `int`.
//!
//! One pair a block, not one a row: on the small input (64 x 64, 16 tasks of 4 rows at two
//! workers) a pair a row cost 64 allocations, 64 pairs through the container and the
//! partitions, and 64 frees by the caller of memory the workers allocated; a job took 42 us
//! against rayon's 30 (`par_chunks_mut` straight into the product).

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use ochre::Runtime;

use super::{i32_bytes, read, write, AppError, Application, Reader, Rng, Size};
use crate::{Container, Emitter, Job, MapReduce, Phases};

/// Two `n x n` matrices to multiply.
pub struct MatrixMultiply {
    n: usize,
    a: Vec<i32>,
    b: Vec<i32>,
}

/// The product, row after row.
pub type Product = Vec<i32>;

impl MatrixMultiply {
    /// Multiplies `a` by `b`, both `n x n` row after row.
    pub fn new(n: usize, a: Vec<i32>, b: Vec<i32>) -> Result<Self, AppError> {
        if a.len() != n * n || b.len() != n * n {
            return Err(AppError::Input(format!("matrices must hold {n} x {n} values")));
        }
        Ok(MatrixMultiply { n, a, b })
    }

    /// The side of the matrices.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Row `i` of the product into `out` (`n` values).
    pub fn row(&self, i: usize, out: &mut [i32]) {
        let n = self.n;
        out.fill(0);
        for (k, &aik) in self.a[i * n..(i + 1) * n].iter().enumerate() {
            let b_row = &self.b[k * n..(k + 1) * n];
            for (o, &bkj) in out.iter_mut().zip(b_row) {
                *o = o.wrapping_add(aik.wrapping_mul(bkj));
            }
        }
    }
}

impl MapReduce for MatrixMultiply {
    type Split = Range<usize>;
    type Key = u32;
    type Value = Vec<i32>;

    fn split(&self, chunk_bytes: usize) -> Vec<Range<usize>> {
        // A row of the product reads all of B: a task is a few rows, at least one.
        let rows = (chunk_bytes / (4 * self.n.max(1)) / 16).max(1);
        crate::byte_ranges(self.n, rows)
    }

    fn input_bytes(&self) -> usize {
        // The work is n³: weigh it like input so that the default chunk makes many tasks.
        self.n * self.n * 4 * 16
    }

    fn map(&self, rows: &Range<usize>, out: &mut Emitter<'_, Self>) {
        let n = self.n;
        let mut block = vec![0; rows.len() * n];
        for (i, row) in rows.clone().zip(block.chunks_exact_mut(n.max(1))) {
            self.row(i, row);
        }
        out.emit(rows.start as u32, block);
    }

    /// A block is emitted once; should it come twice, the values are equal: keep one.
    fn combine(&self, _acc: &mut Vec<i32>, _value: Vec<i32>) {}

    fn key_index(&self, key: &u32) -> Option<usize> {
        Some(*key as usize)
    }
}

fn load_matrix(path: &Path) -> Result<(usize, Vec<i32>), AppError> {
    let bytes = read(path)?;
    let values = bytes.len() / 4;
    let n = (values as f64).sqrt().round() as usize;
    if n == 0 || n * n * 4 != bytes.len() {
        return Err(AppError::Input(format!(
            "{}: {} bytes is not a square matrix of 32-bit integers",
            path.display(),
            bytes.len()
        )));
    }
    let what = path.display().to_string();
    Ok((n, Reader::new(&bytes, &what).i32s(n * n)?))
}

impl Application for MatrixMultiply {
    const NAME: &'static str = "matrix-multiply";
    type Result = Product;

    fn load(dir: &Path) -> Result<Self, AppError> {
        let (n, a) = load_matrix(&dir.join("matrix_file_A.txt"))?;
        let (m, b) = load_matrix(&dir.join("matrix_file_B.txt"))?;
        if n != m {
            return Err(AppError::Input(format!(
                "{}: matrix A is {n} x {n} but B is {m} x {m}",
                dir.display()
            )));
        }
        MatrixMultiply::new(n, a, b)
    }

    fn generate(size: Size, seed: u64, out: &Path) -> Result<(), AppError> {
        let n = size.pick(64, 512, 1536);
        let mut rng = Rng::new(seed);
        std::fs::create_dir_all(out)
            .map_err(|e| AppError::Input(format!("creating {}: {e}", out.display())))?;
        for name in ["matrix_file_A.txt", "matrix_file_B.txt"] {
            // Phoenix's values: rand() % 11.
            let m = i32_bytes((0..n * n).map(|_| rng.below(11) as i32));
            write(&out.join(name), &m)?;
        }
        Ok(())
    }

    fn run(app: &Arc<Self>, rt: &Runtime) -> Result<(Product, Phases), crate::Error> {
        let out = Job::shared(app.clone()).container(Container::Dense(app.n)).run_on(rt)?;
        // The blocks in row order (the output is sorted by key: each block's first row).
        let mut product = Vec::with_capacity(app.n * app.n);
        for (_, block) in out.pairs {
            product.extend_from_slice(&block);
        }
        Ok((product, out.phases))
    }

    fn sequential(&self) -> Product {
        let mut p = vec![0; self.n * self.n];
        for (i, row) in p.chunks_exact_mut(self.n).enumerate() {
            self.row(i, row);
        }
        p
    }

    fn agree(a: &Product, b: &Product) -> bool {
        a == b
    }

    fn summary(p: &Product) -> Vec<String> {
        let n = (p.len() as f64).sqrt().round() as usize;
        let trace: i64 = (0..n).map(|i| i64::from(p[i * n + i])).sum();
        let sum: i64 = p.iter().map(|&v| i64::from(v)).sum();
        vec![format!("{n} x {n} product: trace {trace}, sum of all values {sum}")]
    }

    fn json(p: &Product) -> serde_json::Value {
        let n = (p.len() as f64).sqrt().round() as usize;
        serde_json::json!({
            "n": n,
            "trace": (0..n).map(|i| i64::from(p[i * n + i])).sum::<i64>(),
            "sum": p.iter().map(|&v| i64::from(v)).sum::<i64>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing;

    #[test]
    fn mapreduce_matches_the_reference() {
        let p = testing::check::<MatrixMultiply>(13);
        assert_eq!(p.len(), 64 * 64);
    }

    #[test]
    fn rows_are_the_product() {
        let m = MatrixMultiply::new(2, vec![1, 2, 3, 4], vec![5, 6, 7, 8]).unwrap();
        assert_eq!(m.sequential(), vec![19, 22, 43, 50]);
        assert!(MatrixMultiply::new(3, vec![1; 9], vec![1; 8]).is_err());
    }
}

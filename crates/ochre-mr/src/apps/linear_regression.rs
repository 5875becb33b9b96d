//! Linear Regression: the least-squares line through points (Phoenix's `linear_regression`).
//!
//! The input is Phoenix's: consecutive pairs of signed bytes `(x, y)` (a trailing odd byte is
//! ignored). Map sums `x, y, x², y², xy` over its points in registers and emits the five sums
//! (keys 0 to 4, fixed slots); combine and reduce add. The line is derived from the exact
//! integer sums, so MapReduce and the reference agree exactly on the sums, and the derived
//! floats are compared within a relative 1e-9 (they are computed by the same code and equal in
//! practice).

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use ochre::Runtime;
use serde::Serialize;

use super::{read, write, AppError, Application, Rng, Size};
use crate::{Container, Emitter, Job, MapReduce, Phases};

/// Points as pairs of signed bytes.
pub struct LinearRegression {
    points: Vec<u8>,
}

/// The sums and the line `y = a + b x`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Line {
    /// Points.
    pub n: i64,
    /// Sum of x.
    pub sx: i64,
    /// Sum of y.
    pub sy: i64,
    /// Sum of x².
    pub sxx: i64,
    /// Sum of y².
    pub syy: i64,
    /// Sum of xy.
    pub sxy: i64,
    /// Intercept.
    pub a: f64,
    /// Slope.
    pub b: f64,
    /// Coefficient of determination.
    pub r2: f64,
}

impl Line {
    /// The line from the sums (Phoenix's formulas).
    pub fn from_sums(n: i64, [sx, sy, sxx, syy, sxy]: [i64; 5]) -> Line {
        let (nf, sxf, syf) = (n as f64, sx as f64, sy as f64);
        let b = (nf * sxy as f64 - sxf * syf) / (nf * sxx as f64 - sxf * sxf);
        let a = (syf - b * sxf) / nf;
        let r2 = {
            let num = nf * sxy as f64 - sxf * syf;
            let den = (nf * sxx as f64 - sxf * sxf) * (nf * syy as f64 - syf * syf);
            num * num / den
        };
        Line { n, sx, sy, sxx, syy, sxy, a, b, r2 }
    }
}

/// The five sums `x, y, x², y², xy` of the points in `data` (whole pairs).
///
/// Summed in i32 over blocks of 2^15 points (`|x|, |y| <= 128`, so a block's sums stay below
/// 2^29), which the compiler vectorizes, and in i64 across blocks.
pub fn sums(data: &[u8]) -> [i64; 5] {
    let mut total = [0i64; 5];
    for block in data.chunks(1 << 16) {
        let (mut sx, mut sy, mut sxx, mut syy, mut sxy) = (0i32, 0i32, 0i32, 0i32, 0i32);
        for p in block.chunks_exact(2) {
            let (x, y) = (i32::from(p[0] as i8), i32::from(p[1] as i8));
            sx += x;
            sy += y;
            sxx += x * x;
            syy += y * y;
            sxy += x * y;
        }
        for (t, s) in total.iter_mut().zip([sx, sy, sxx, syy, sxy]) {
            *t += i64::from(s);
        }
    }
    total
}

impl LinearRegression {
    /// The points, whole pairs only.
    pub fn points(&self) -> &[u8] {
        &self.points[..self.points.len() / 2 * 2]
    }
}

impl MapReduce for LinearRegression {
    type Split = Range<usize>;
    type Key = u8;
    type Value = i64;

    fn split(&self, chunk_bytes: usize) -> Vec<Range<usize>> {
        crate::byte_ranges(self.points.len() / 2 * 2, (chunk_bytes / 2).max(1) * 2)
    }

    fn input_bytes(&self) -> usize {
        self.points.len()
    }

    fn map(&self, split: &Range<usize>, out: &mut Emitter<'_, Self>) {
        for (k, s) in sums(&self.points[split.clone()]).into_iter().enumerate() {
            out.emit(k as u8, s);
        }
    }

    fn combine(&self, acc: &mut i64, value: i64) {
        *acc += value;
    }
}

impl Application for LinearRegression {
    const NAME: &'static str = "linear-regression";
    type Result = Line;

    fn load(path: &Path) -> Result<Self, AppError> {
        let points = read(path)?;
        if points.len() < 2 {
            return Err(AppError::Input(format!("{}: no point in the file", path.display())));
        }
        Ok(LinearRegression { points })
    }

    fn generate(size: Size, seed: u64, out: &Path) -> Result<(), AppError> {
        let bytes = size.pick(1 << 20, 64 << 20, 256 << 20);
        let mut rng = Rng::new(seed);
        // Points around y = 0.7 x - 9, with noise, within a signed byte.
        let data: Vec<u8> = (0..bytes / 2)
            .flat_map(|_| {
                let x = rng.below(200) as i64 - 100;
                let y = (x * 7 / 10 - 9 + rng.below(41) as i64 - 20).clamp(-128, 127);
                [x as i8 as u8, y as i8 as u8]
            })
            .collect();
        write(out, &data)
    }

    fn run(app: &Arc<Self>, rt: &Runtime) -> Result<(Line, Phases), crate::Error> {
        let out = Job::shared(app.clone()).container(Container::Fixed).run_on(rt)?;
        let mut s = [0i64; 5];
        for (k, v) in out.pairs {
            s[k as usize] = v;
        }
        Ok((Line::from_sums((app.points.len() / 2) as i64, s), out.phases))
    }

    fn sequential(&self) -> Line {
        let data = &self.points[..self.points.len() / 2 * 2];
        Line::from_sums((data.len() / 2) as i64, sums(data))
    }

    fn agree(a: &Line, b: &Line) -> bool {
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0);
        (a.n, a.sx, a.sy, a.sxx, a.syy, a.sxy) == (b.n, b.sx, b.sy, b.sxx, b.syy, b.sxy)
            && close(a.a, b.a)
            && close(a.b, b.b)
            && close(a.r2, b.r2)
    }

    fn summary(l: &Line) -> Vec<String> {
        vec![
            format!("{} points: y = {:.6} + {:.6} x, r² = {:.6}", l.n, l.a, l.b, l.r2),
            format!("  sums: x {} y {} xx {} yy {} xy {}", l.sx, l.sy, l.sxx, l.syy, l.sxy),
        ]
    }

    fn json(l: &Line) -> serde_json::Value {
        serde_json::to_value(l).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing;

    #[test]
    fn mapreduce_matches_the_reference() {
        let line = testing::check::<LinearRegression>(9);
        assert!((line.b - 0.7).abs() < 0.05, "slope near the generator's 0.7: {line:?}");
    }

    #[test]
    fn sums_read_signed_bytes() {
        assert_eq!(sums(&[0xff, 2, 3, 0x80, 9]), [2, -126, 10, 16388, -386]);
    }
}

//! K-means: groups integer points into clusters by Lloyd's iterations, one MapReduce job per
//! iteration, all in one run of the runtime ([`crate::run_flow`]: the event that merges an
//! iteration's sums starts the next) (Phoenix's `kmeans`).
//!
//! Phoenix generates its points in memory from `rand()`; here the generator writes them to a
//! file: `KMNS`, then little-endian u32 `dim` (1 to 8), `clusters`, `points`, then the points'
//! coordinates and the initial means as i32. Map assigns each point to its nearest mean
//! (squared distance, the lowest index on a tie) and emits `(cluster, point)`; combine adds
//! points into a coordinate sum and a count (a fixed-size value: no allocation per point), in
//! a dense container; the new mean is the sum divided by the count, truncated like C's
//! integer division, and a cluster with no point keeps its mean. Iterations stop when no mean
//! moves (the assignment is then stable too), or after [`MAX_ITERATIONS`]. All integer: the
//! result equals the reference's exactly.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use ochre::Runtime;
use serde::Serialize;

use super::{i32_bytes, read, write, AppError, Application, Reader, Rng, Size};
use crate::{run_flow, Container, Emitter, Flow, Job, MapReduce, Phases, Stage};

/// Most coordinates a point may have (the value carried per point is fixed-size).
pub const MAX_DIM: usize = 8;
/// Iterations at most, should the means cycle.
pub const MAX_ITERATIONS: usize = 500;

/// Points and the initial means.
pub struct Kmeans {
    dim: usize,
    points: Arc<Vec<i32>>,
    means: Vec<i32>,
}

/// The final means (cluster after cluster) and the iterations run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Clusters {
    /// Coordinates per point.
    pub dim: usize,
    /// `clusters x dim` coordinates.
    pub means: Vec<i32>,
    /// Iterations run (the last one moved nothing).
    pub iterations: usize,
}

/// The sum of the points given to a cluster, and how many.
#[derive(Clone, Copy, Debug)]
pub struct PointSum {
    sum: [i64; MAX_DIM],
    count: u64,
}

/// One iteration: assign every point to its nearest mean.
struct Assign {
    dim: usize,
    points: Arc<Vec<i32>>,
    means: Vec<i32>,
}

/// The index of the mean nearest to `p` (the first of equals).
#[inline]
fn nearest(p: &[i32], means: &[i32], dim: usize) -> usize {
    let mut best = (i64::MAX, 0);
    for (j, m) in means.chunks_exact(dim).enumerate() {
        let d: i64 = p.iter().zip(m).map(|(&a, &b)| (i64::from(a) - i64::from(b)).pow(2)).sum();
        if d < best.0 {
            best = (d, j);
        }
    }
    best.1
}

impl MapReduce for Assign {
    type Split = Range<usize>;
    type Key = u32;
    type Value = PointSum;

    fn split(&self, chunk_bytes: usize) -> Vec<Range<usize>> {
        crate::byte_ranges(self.points.len() / self.dim, (chunk_bytes / (4 * self.dim)).max(1))
    }

    fn input_bytes(&self) -> usize {
        self.points.len() * 4
    }

    fn map(&self, range: &Range<usize>, out: &mut Emitter<'_, Self>) {
        let pts = &self.points[range.start * self.dim..range.end * self.dim];
        for p in pts.chunks_exact(self.dim) {
            let mut one = PointSum::ZERO;
            one.add_point(p);
            out.emit(nearest(p, &self.means, self.dim) as u32, one);
        }
    }

    fn combine(&self, acc: &mut PointSum, v: PointSum) {
        acc.add(&v);
    }

    fn key_index(&self, key: &u32) -> Option<usize> {
        Some(*key as usize)
    }
}

/// The means after one iteration: each cluster's sum over its count, or its old mean.
fn new_means(
    old: &[i32],
    dim: usize,
    sums: impl IntoIterator<Item = (usize, PointSum)>,
) -> Vec<i32> {
    let mut means = old.to_vec();
    for (k, s) in sums {
        if s.count > 0 {
            for d in 0..dim {
                means[k * dim + d] = (s.sum[d] / s.count as i64) as i32;
            }
        }
    }
    means
}

/// Iteration `n` of Lloyd's loop from `means`, as a stage of a flow: its job's output gives
/// the next means, and the stage after it is the next iteration, until no mean moves (the
/// same stopping rule as [`Kmeans::lloyd`]). Every iteration runs in the same run of the
/// runtime: the event that merges one iteration's sums starts the next.
fn iteration(app: Arc<Kmeans>, means: Vec<i32>, n: usize) -> Stage<Clusters> {
    let dim = app.dim;
    let job = Assign { dim, points: app.points.clone(), means: means.clone() };
    let k = means.len() / dim;
    Job::new(job).container(Container::Dense(k)).sorted(false).then(move |out| {
        let next = new_means(&means, dim, out.pairs.into_iter().map(|(k, s)| (k as usize, s)));
        if next == means || n >= MAX_ITERATIONS {
            let means = if next == means { means } else { next };
            Flow::Done(Clusters { dim, means, iterations: n })
        } else {
            Flow::Next(iteration(app, next, n + 1))
        }
    })
}

/// The sums of the points of `points` nearest to each of `means`.
pub fn sums_of(points: &[i32], means: &[i32], dim: usize) -> Vec<PointSum> {
    let mut sums = vec![PointSum::ZERO; means.len() / dim];
    for p in points.chunks_exact(dim) {
        sums[nearest(p, means, dim)].add_point(p);
    }
    sums
}

impl PointSum {
    /// No point.
    pub const ZERO: PointSum = PointSum { sum: [0; MAX_DIM], count: 0 };

    /// Adds one point.
    #[inline]
    pub fn add_point(&mut self, p: &[i32]) {
        for (a, &c) in self.sum.iter_mut().zip(p) {
            *a += i64::from(c);
        }
        self.count += 1;
    }

    /// Adds the points of `other`.
    #[inline]
    pub fn add(&mut self, other: &PointSum) {
        for (a, b) in self.sum.iter_mut().zip(other.sum) {
            *a += b;
        }
        self.count += other.count;
    }
}

impl Kmeans {
    /// Coordinates per point.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The points' coordinates, point after point.
    pub fn points(&self) -> &[i32] {
        &self.points
    }

    /// Lloyd's iterations from the initial means: `assign(means)` gives the sum of the points
    /// nearest to each mean (as `(cluster, sum)`; clusters with no point may be left out);
    /// the loop stops when no mean moves or after [`MAX_ITERATIONS`].
    pub fn lloyd<E>(
        &self,
        mut assign: impl FnMut(&[i32]) -> Result<Vec<(usize, PointSum)>, E>,
    ) -> Result<Clusters, E> {
        let dim = self.dim;
        let mut means = self.means.clone();
        for iteration in 1..=MAX_ITERATIONS {
            let next = new_means(&means, dim, assign(&means)?);
            if next == means {
                return Ok(Clusters { dim, means, iterations: iteration });
            }
            means = next;
        }
        Ok(Clusters { dim, means, iterations: MAX_ITERATIONS })
    }

    /// The same job as [`Application::run`], but each iteration in a run of its own (a runtime
    /// start and stop per iteration, the calling thread computing the next means): what a
    /// flow saves, for measurements.
    pub fn run_per_iteration(
        app: &Arc<Self>,
        rt: &Runtime,
    ) -> Result<(Clusters, Phases), crate::Error> {
        let mut phases = Phases::default();
        let clusters = app.lloyd::<crate::Error>(|means| {
            let job = Assign { dim: app.dim, points: app.points.clone(), means: means.to_vec() };
            let k = means.len() / app.dim;
            let out = Job::new(job).container(Container::Dense(k)).sorted(false).run_on(rt)?;
            phases.add(&out.phases);
            Ok(out.pairs.into_iter().map(|(k, s)| (k as usize, s)).collect())
        })?;
        Ok((clusters, phases))
    }

    /// Points (`dim` coordinates each) and initial means.
    pub fn new(dim: usize, points: Vec<i32>, means: Vec<i32>) -> Result<Self, AppError> {
        if dim == 0 || dim > MAX_DIM {
            return Err(AppError::Input(format!("dimension {dim} is not in 1..={MAX_DIM}")));
        }
        if means.is_empty() || !points.len().is_multiple_of(dim) || !means.len().is_multiple_of(dim)
        {
            return Err(AppError::Input("points and means must be whole vectors".into()));
        }
        Ok(Kmeans { dim, points: Arc::new(points), means })
    }
}

impl Application for Kmeans {
    const NAME: &'static str = "kmeans";
    type Result = Clusters;

    fn load(path: &Path) -> Result<Self, AppError> {
        let bytes = read(path)?;
        let what = path.display().to_string();
        let mut r = Reader::new(&bytes, &what);
        if r.take(4)? != b"KMNS" {
            return Err(AppError::Input(format!("{what}: not a points file (no KMNS header)")));
        }
        let (dim, clusters, points) = (r.u32()? as usize, r.u32()? as usize, r.u32()? as usize);
        if dim == 0 || dim > MAX_DIM {
            return Err(AppError::Input(format!(
                "{what}: dimension {dim} is not in 1..={MAX_DIM}"
            )));
        }
        let pts = r.i32s(points.saturating_mul(dim))?;
        let means = r.i32s(clusters.saturating_mul(dim))?;
        if r.rest() != 0 {
            return Err(AppError::Input(format!("{what}: {} bytes after the means", r.rest())));
        }
        Kmeans::new(dim, pts, means).map_err(|e| AppError::Input(format!("{what}: {e}")))
    }

    fn generate(size: Size, seed: u64, out: &Path) -> Result<(), AppError> {
        let (points, clusters, dim, grid) =
            size.pick((5_000, 8, 3, 1000), (100_000, 32, 3, 1000), (400_000, 100, 3, 1000));
        let mut rng = Rng::new(seed);
        let mut bytes = b"KMNS".to_vec();
        for v in [dim, clusters, points] {
            bytes.extend_from_slice(&(v as u32).to_le_bytes());
        }
        bytes.extend(i32_bytes((0..(points + clusters) * dim).map(|_| rng.below(grid) as i32)));
        write(out, &bytes)
    }

    fn run(app: &Arc<Self>, rt: &Runtime) -> Result<(Clusters, Phases), crate::Error> {
        run_flow(rt, iteration(app.clone(), app.means.clone(), 1))
    }

    fn sequential(&self) -> Clusters {
        let result = self.lloyd::<std::convert::Infallible>(|means| {
            Ok(sums_of(&self.points, means, self.dim).into_iter().enumerate().collect())
        });
        match result {
            Ok(c) => c,
            Err(never) => match never {},
        }
    }

    fn agree(a: &Clusters, b: &Clusters) -> bool {
        a == b
    }

    fn summary(c: &Clusters) -> Vec<String> {
        let mut lines = vec![format!(
            "{} clusters of dimension {} after {} iterations; first means:",
            c.means.len() / c.dim,
            c.dim,
            c.iterations
        )];
        for m in c.means.chunks_exact(c.dim).take(5) {
            lines.push(format!("  {m:?}"));
        }
        lines
    }

    fn json(c: &Clusters) -> serde_json::Value {
        serde_json::to_value(c).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing;

    #[test]
    fn mapreduce_matches_the_reference() {
        let c = testing::check::<Kmeans>(17);
        assert!(c.iterations > 1 && c.iterations < MAX_ITERATIONS, "{c:?}");
    }

    #[test]
    fn a_run_per_iteration_gives_the_flow_s_result() {
        let points: Vec<i32> = (0..3000).map(|i| i * 7919 % 1000).collect();
        let app =
            Arc::new(Kmeans::new(3, points, vec![1, 2, 3, 500, 500, 500, 900, 1, 9]).unwrap());
        let rt = testing::runtime();
        let (flow, phases) = Kmeans::run(&app, &rt).unwrap();
        let (separate, _) = Kmeans::run_per_iteration(&app, &rt).unwrap();
        assert_eq!(flow, separate);
        assert_eq!(flow, app.sequential());
        assert_eq!(phases.jobs, flow.iterations);
    }

    #[test]
    fn no_lane_is_stolen_with_plain_stealing_and_batching() {
        // The ablation's "+batching" step: plain stealing, batched posts. K-means' sums are
        // reduced in the last lane's event, so lanes are the only colors a thief could take;
        // pinned, none may be lent (unpinned, a worker that launched an iteration lent it its
        // fresh lane, and one worker then mapped the whole iteration).
        let points: Vec<i32> = (0..60_000).map(|i| i * 7919 % 1000).collect();
        let means = vec![1, 2, 3, 500, 500, 500, 900, 1, 9, 250, 750, 250];
        let app = Arc::new(Kmeans::new(3, points, means).unwrap());
        let config = ochre::Config::baseline()
            .wakeup(ochre::Wakeup::Futex)
            .spin(ochre::Spin::Reasoned { threshold: None })
            .batching(true);
        let rt = Runtime::builder().workers(2).pin(false).config(config).build().unwrap();
        assert_eq!(rt.config().steal, ochre::Steal::Plain, "the case needs plain stealing");
        let want = app.sequential();
        // Unpinned, 3 flows here lent a lane in 2 test runs of 3; 5 flows make it likelier.
        for _ in 0..5 {
            let (got, _) = Kmeans::run(&app, &rt).unwrap();
            assert_eq!(got, want);
        }
        let lent: u64 = rt.stats().iter().map(|s| s.steals_out).sum();
        assert_eq!(lent, 0, "a lane was lent to a thief");
    }

    #[test]
    fn two_obvious_clusters_are_found() {
        let points = vec![0, 0, 1, 1, 0, 1, 100, 100, 101, 100, 100, 99];
        let app = Kmeans::new(2, points, vec![0, 0, 1, 1]).unwrap();
        let c = app.sequential();
        assert_eq!(c.means, vec![0, 0, 100, 99]);
        assert!(Kmeans::new(9, vec![], vec![1; 9]).is_err());
    }
}

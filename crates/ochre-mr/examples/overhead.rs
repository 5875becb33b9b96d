//! Fixed cost of a job: a bare `Runtime::run` and a job on a 1 KiB input, per configuration.
use std::ops::Range;
use std::time::Instant;

use ochre::{Color, Config, Runtime};
use ochre_mr::{Emitter, Job, MapReduce};

struct Tiny(Vec<u8>);
impl MapReduce for Tiny {
    type Split = Range<usize>;
    type Key = u8;
    type Value = u64;
    fn split(&self, chunk: usize) -> Vec<Range<usize>> {
        ochre_mr::byte_ranges(self.0.len(), chunk)
    }
    fn map(&self, r: &Range<usize>, out: &mut Emitter<'_, Self>) {
        for &b in &self.0[r.clone()] {
            out.emit(b, 1);
        }
    }
    fn combine(&self, a: &mut u64, v: u64) {
        *a += v;
    }
}

fn main() {
    let app = std::sync::Arc::new(Tiny(vec![7; 1024]));
    for (name, config) in [("default", Config::default()), ("baseline", Config::baseline())] {
        let rt = Runtime::builder().workers(2).config(config).build().unwrap();
        let n = 300;
        let t = Instant::now();
        for _ in 0..n {
            rt.run(Color(1), || {}).unwrap();
        }
        let bare = t.elapsed() / n;
        let t = Instant::now();
        for _ in 0..n {
            rt.run(Color(1), || ochre::post(Color(2), || {})).unwrap();
        }
        let hop = t.elapsed() / n;
        let t = Instant::now();
        let mut phases = None;
        for _ in 0..n {
            phases = Some(Job::shared(app.clone()).chunk_bytes(128).run_on(&rt).unwrap().phases);
        }
        let job = t.elapsed() / n;
        println!(
            "{name}: bare run {bare:?}, run with one post {hop:?}, job {job:?} ({})",
            phases.unwrap().line()
        );
    }
}

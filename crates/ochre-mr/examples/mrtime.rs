//! Times one application: MapReduce on ochre (pinned or not) against the sequential reference,
//! interleaved. `cargo run --release -p ochre-mr --example mrtime -- APP INPUT WORKERS [REPS]`.
use std::sync::Arc;
use std::time::Instant;

use ochre_mr::apps::{self, AppFn, Application};

fn time<A: Application>(input: &str, workers: usize, reps: usize) {
    let app = Arc::new(A::load(input.as_ref()).unwrap());
    for pin in [true, false] {
        let rt = ochre::Runtime::builder().workers(workers).pin(pin).build().unwrap();
        let mut mr = Vec::new();
        let mut seq = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            let (_, p) = A::run(&app, &rt).unwrap();
            mr.push(t.elapsed().as_secs_f64() * 1e3);
            if std::env::var_os("PHASES").is_some() {
                eprintln!("{}", p.line());
            }
            let t = Instant::now();
            std::hint::black_box(app.sequential());
            seq.push(t.elapsed().as_secs_f64() * 1e3);
        }
        mr.sort_by(f64::total_cmp);
        seq.sort_by(f64::total_cmp);
        println!(
            "{} pin={pin} w={workers}: mr {:.1} ms, seq {:.1} ms (medians)",
            A::NAME,
            mr[reps / 2],
            seq[reps / 2]
        );
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (name, input, w) = (&a[1], &a[2], a[3].parse().unwrap());
    let reps = a.get(4).map_or(5, |r| r.parse().unwrap());
    struct Time<'a>(&'a str, usize, usize);
    impl AppFn for Time<'_> {
        type Out = ();
        fn call<A: Application>(self) {
            time::<A>(self.0, self.1, self.2)
        }
    }
    apps::with_app(name, Time(input, w, reps)).unwrap_or_else(|| panic!("unknown app"));
}

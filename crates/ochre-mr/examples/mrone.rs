//! Runs one application once, for profilers (callgrind counts instructions, robust to a noisy
//! machine): `mrone APP INPUT MODE [WORKERS]`, MODE `load` (only load the input: subtract it),
//! `seq` (the sequential reference), `seqthread` (the same on a new thread: its own malloc arena)
//! or `mr` (one MapReduce job on WORKERS workers, default 2; `NOPIN=1`: workers not pinned;
//! `EMA=0`: the default configuration with EMA off).
use std::sync::Arc;

use ochre_mr::apps::{self, AppFn, Application};

fn one<A: Application>(input: &str, mode: &str, workers: usize) {
    let app = Arc::new(A::load(input.as_ref()).expect("input"));
    match mode {
        "load" => {}
        "seq" => {
            let t = std::time::Instant::now();
            std::hint::black_box(app.sequential());
            eprintln!("(total {:.1} ms)", t.elapsed().as_secs_f64() * 1e3);
        }
        "seqthread" => {
            let app = app.clone();
            let t = std::time::Instant::now();
            let _ = std::thread::spawn(move || {
                std::hint::black_box(app.sequential());
            })
            .join();
            eprintln!("(total {:.1} ms)", t.elapsed().as_secs_f64() * 1e3);
        }
        _ => {
            let pin = std::env::var_os("NOPIN").is_none();
            let config = match std::env::var("EMA").as_deref() {
                Ok("0") => ochre::Config::default().ema(false),
                _ => ochre::Config::default(),
            };
            let rt = ochre::Runtime::builder()
                .workers(workers)
                .pin(pin)
                .config(config)
                .build()
                .expect("runtime");
            let (_, p) = A::run(&app, &rt).expect("job");
            eprintln!("{}", p.line());
        }
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let workers = a.get(4).and_then(|w| w.parse().ok()).unwrap_or(2);
    let (app, input, mode) = (a[1].as_str(), a[2].as_str(), a[3].as_str());
    struct One<'a>(&'a str, &'a str, usize);
    impl AppFn for One<'_> {
        type Out = ();
        fn call<A: Application>(self) {
            one::<A>(self.0, self.1, self.2)
        }
    }
    apps::with_app(app, One(input, mode, workers)).unwrap_or_else(|| panic!("{app}: unknown"));
}

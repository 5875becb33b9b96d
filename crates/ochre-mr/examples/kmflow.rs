//! Scratch: K-means on the default config against follow off, alternating.
use std::sync::Arc;
use std::time::Instant;

use ochre::Config;
use ochre_mr::apps::{kmeans::Kmeans, Application};

fn main() {
    let input = std::env::args().nth(1).unwrap();
    let app = Arc::new(Kmeans::load(input.as_ref()).unwrap());
    let configs = [
        ("default", Config::default()),
        ("nofollow", Config::default().follow(false)),
        ("baseline", Config::baseline()),
    ];
    let rts: Vec<_> = configs
        .iter()
        .map(|(_, c)| ochre::Runtime::builder().workers(2).config(c.clone()).build().unwrap())
        .collect();
    let mut times = vec![Vec::new(); rts.len()];
    for _ in 0..5 {
        for (i, rt) in rts.iter().enumerate() {
            let t = Instant::now();
            let (_, p) = Kmeans::run(&app, rt).unwrap();
            times[i].push(t.elapsed().as_secs_f64() * 1e3);
            if std::env::var_os("PHASES").is_some() {
                eprintln!("{} {}", configs[i].0, p.line());
            }
        }
    }
    for (i, t) in times.iter_mut().enumerate() {
        t.sort_by(f64::total_cmp);
        println!("{}: median {:.1} ms  {:?}", configs[i].0, t[2], t);
    }
}

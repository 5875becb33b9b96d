//! Diagnostic: one event posts N empty events round robin to K plain colors (fork-join
//! throughput's shape, without the actor layer), and prints the rate and what each worker did.
//!
//! `fanout_probe [K] [N] [RUNS] [PLACE] [CAPTURE]`: PLACE is `plain` (colors `Color(1 + i)`, the
//! default placement), `local` (every color homed on the driver's worker), `remote` (every color
//! homed on the other one) or `split` (half and half); CAPTURE is `none` (the closure captures
//! nothing), `arc` (it captures a clone of an `Arc` per recipient, as an actor layer does) or
//! `cell` (as `arc`, and the handler updates a `ColorCell` of the recipient's color), `data`
//! (24 bytes of plain data: an allocation, no reference count) or `static` (a leaked cell and 16
//! bytes of data: `cell` without the reference count) or `work` (`cell` with 1 us of work).
//! `BUSY=1`: a thread spins on worker 1's CPU throughout.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use ochre::{Color, ColorCell, Runtime};

/// What each posted closure captures (the probe's CAPTURE argument).
#[derive(Clone, Copy)]
enum Capture {
    None,
    Arc,
    Cell,
    Data,
    Static,
    Work,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let k: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(60);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2_000_000);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(7);
    let place = args.next().unwrap_or_else(|| "plain".into());
    let capture = args.next().unwrap_or_else(|| "none".into());
    // `INLINE=0`: closures stored by the poster (the transport before inline posts).
    let inline = std::env::var("INLINE").map_or(true, |v| v != "0");
    let config = ochre::Config::default().inline_posts(inline);
    let rt = Runtime::builder().workers(2).config(config).build().expect("runtime");
    let driver = Color(1_000_000);
    let dhome = rt.home_of(driver);
    // Colors for the recipients: plain, or found by home.
    let mut colors = Vec::new();
    let mut next = 1u64;
    while colors.len() < k {
        let c = Color(next);
        next += 1;
        let want = match place.as_str() {
            "local" => Some(dhome),
            "remote" => Some(1 - dhome),
            "split" => Some(if colors.len() % 2 == 0 { dhome } else { 1 - dhome }),
            _ => None,
        };
        if want.is_none_or(|w| rt.home_of(c) == w) {
            colors.push(c);
        }
    }
    let cells: Vec<Arc<CachePadded<ColorCell<u64>>>> =
        colors.iter().map(|&c| Arc::new(CachePadded::new(ColorCell::new(c, 0)))).collect();
    let statics: &'static [&'static ColorCell<u64>] = Vec::leak(
        colors
            .iter()
            .map(|&c| &**Box::leak(Box::new(CachePadded::new(ColorCell::new(c, 0)))))
            .collect(),
    );
    let name = capture.clone();
    // Matched once here, not per posted event.
    let capture = match capture.as_str() {
        "arc" => Capture::Arc,
        "cell" => Capture::Cell,
        "data" => Capture::Data,
        "static" => Capture::Static,
        "work" => Capture::Work,
        _ => Capture::None,
    };
    // `BUSY=1`: a thread spins on worker 1's CPU for the whole probe (a shared machine).
    let busy = std::env::var("BUSY").is_ok_and(|v| v == "1").then_some(1);
    let mut rates = Vec::new();
    ochre_bench::actors::with_busy_cpu(busy, || {
        for run in 0..runs {
            let colors = colors.clone();
            let cells = cells.clone();
            let report = rt
                .run(driver, move || {
                    for i in 0..n {
                        let j = i % colors.len();
                        match capture {
                            Capture::Arc => {
                                let a = cells[j].clone();
                                ochre::post(colors[j], move || drop(a));
                            }
                            Capture::Cell => {
                                let a = cells[j].clone();
                                ochre::post(colors[j], move || {
                                    let _ = a.with(|v| *v += 1);
                                });
                            }
                            Capture::Data => {
                                let payload = (i as u64, j as u64, 7u64);
                                ochre::post(colors[j], move || {
                                    std::hint::black_box(payload);
                                });
                            }
                            Capture::Static => {
                                let a: &'static ColorCell<u64> = statics[j];
                                let payload = (i as u64, j as u64);
                                ochre::post(colors[j], move || {
                                    let _ = a.with(|v| *v += payload.0 & 1);
                                });
                            }
                            Capture::Work => {
                                let a = cells[j].clone();
                                ochre::post(colors[j], move || {
                                    ochre_bench::harness::work(1_000);
                                    let _ = a.with(|v| *v += 1);
                                });
                            }
                            Capture::None => ochre::post(colors[j], || {}),
                        }
                    }
                })
                .expect("run");
            let secs = report.elapsed.as_secs_f64().max(1e-9);
            let rate = n as f64 / secs / 1e6;
            rates.push(rate);
            if run + 1 == runs {
                for (w, s) in report.workers.iter().enumerate() {
                    println!("{}", ochre_bench::harness::worker_line(w, s));
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    rates.sort_by(f64::total_cmp);
    println!(
        "{place} {name} k={k}: median {:.2}M events/s (min {:.2}, max {:.2})",
        rates[rates.len() / 2],
        rates[0],
        rates[rates.len() - 1]
    );
}

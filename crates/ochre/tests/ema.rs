//! EMA under the runtime: `ColorBox` placement, remote frees through stealing and moves, and
//! memory that outlives its runtime. Many more workers than cores, stealing on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ochre::{Color, ColorBox, Config, RunEnd, Runtime, WorkerStats};

/// Counts the drops of the values it is part of.
struct Tracked {
    words: [u64; 8],
    drops: Arc<AtomicU64>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::Relaxed);
    }
}

struct Totals {
    /// Colors homed on worker 0: the other workers get work only by stealing it.
    colors: Vec<Color>,
    created: AtomicU64,
    placed: AtomicU64,
    checked: AtomicU64,
    drops: Arc<AtomicU64>,
}

/// One hop: check the box, then pass it on to another color (or drop it) and start a new one.
fn hop(t: Arc<Totals>, b: ColorBox<Tracked>, seed: u64, left: u32) {
    assert!(b.words.iter().all(|&w| w == b.words[0]), "a box's contents were overwritten");
    t.checked.fetch_add(1, Ordering::Relaxed);
    if left == 0 {
        return; // dropped here: often not on the worker that allocated it
    }
    let next = t.colors[(seed % t.colors.len() as u64) as usize];
    let fresh =
        ColorBox::new(next, Tracked { words: [seed.wrapping_mul(31); 8], drops: t.drops.clone() });
    t.created.fetch_add(1, Ordering::Relaxed);
    if ColorBox::is_placed(&fresh) {
        t.placed.fetch_add(1, Ordering::Relaxed);
    }
    let (t1, t2) = (t.clone(), t);
    let s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) >> 1;
    ochre::post(next, move || hop(t1, fresh, s, left - 1));
    // The old box travels on to an unrelated color: its free becomes remote there.
    let other = t2.colors[((s ^ 0x55) % t2.colors.len() as u64) as usize];
    ochre::post(other, move || hop(t2, b, s ^ 0x55, 0));
}

#[test]
fn boxes_cross_sixteen_stealing_workers_and_all_memory_comes_back() {
    // Every worker a home and a thief, and every worker ends every run awake (on a machine of
    // fewer CPUs, workers sleep through ends, and a sleeper's gauges count what others freed
    // for it as live until its next end: `Config::sleep_through_ends`).
    let config = Config::default()
        .stealing_heuristics()
        .steal_min_work(None)
        .home_on_every_worker(true)
        .sleep_through_ends(false);
    let rt = Runtime::builder().workers(16).pin(false).config(config).build().unwrap();
    // Each run checks every box and byte; whether a color moves depends on timing (a loaded
    // machine may run a whole run without a steal), so runs repeat until colors did move.
    let moved = (0..10).any(|_| one_run_of_crossing_boxes(&rt) > 0);
    assert!(moved, "colors moved between workers in at least one of 10 runs");
}

/// One run of the crossing-boxes workload, all its checks; returns the colors stolen.
fn one_run_of_crossing_boxes(rt: &Runtime) -> u64 {
    let colors: Vec<Color> = (1..).map(Color).filter(|&c| rt.home_of(c) == 0).take(97).collect();
    let t = Arc::new(Totals {
        colors,
        created: AtomicU64::new(0),
        placed: AtomicU64::new(0),
        checked: AtomicU64::new(0),
        drops: Arc::new(AtomicU64::new(0)),
    });
    let t0 = t.clone();
    let report = rt
        .run(Color(0), move || {
            for i in 0..64u64 {
                let t = t0.clone();
                let c = t.colors[i as usize];
                let b = ColorBox::new(c, Tracked { words: [i; 8], drops: t.drops.clone() });
                t.created.fetch_add(1, Ordering::Relaxed);
                ochre::post(c, move || hop(t, b, i * 7919 + 1, 200));
            }
        })
        .unwrap();
    assert_eq!(report.end, RunEnd::Quiescent);
    assert!(report.panics.is_empty(), "{:?}", report.panics);
    let created = t.created.load(Ordering::Relaxed);
    assert_eq!(created, 64 * 201);
    // A box is checked by the event it was made for, then (unless it ends a chain) again by the
    // unrelated color it is moved to.
    assert_eq!(t.checked.load(Ordering::Relaxed), 2 * created - 64, "every box arrived");
    assert_eq!(t.drops.load(Ordering::Relaxed), created, "every box was dropped exactly once");
    assert!(t.placed.load(Ordering::Relaxed) > created / 2, "boxes made in handlers are placed");
    let total = report.workers.iter().fold(WorkerStats::default(), |a, w| a.add(w));
    // Every color is homed on worker 0: frees are remote only where colors moved.
    assert!(total.steals_in == 0 || total.ema_remote_frees > 0, "{total:?}");
    assert_eq!(total.ema_live_bytes, 0, "every byte went back to the heap that gave it");
    assert_eq!(total.ema_crumbs, 0);
    total.steals_in
}

#[test]
fn a_box_outside_a_worker_is_a_plain_box_and_boxes_may_outlive_their_runtime() {
    let drops = Arc::new(AtomicU64::new(0));
    let outside = ColorBox::new(Color(3), Tracked { words: [3; 8], drops: drops.clone() });
    assert!(!ColorBox::is_placed(&outside));
    assert_eq!(ColorBox::into_inner(outside).words, [3; 8]);
    assert_eq!(drops.load(Ordering::Relaxed), 1);

    let kept = Arc::new(Mutex::new(Vec::new()));
    {
        let rt = Runtime::builder().workers(3).pin(false).build().unwrap();
        let (k, d) = (kept.clone(), drops.clone());
        rt.run(Color(0), move || {
            for c in 1..=30u64 {
                let (k, d) = (k.clone(), d.clone());
                ochre::post(Color(c), move || {
                    let b = ColorBox::new(Color(c + 100), Tracked { words: [c; 8], drops: d });
                    assert!(ColorBox::is_placed(&b));
                    k.lock().unwrap().push(b);
                });
            }
        })
        .unwrap();
        // The runtime, its workers and their heaps go here; the boxes stay valid.
    }
    let boxes = std::mem::take(&mut *kept.lock().unwrap());
    assert_eq!(boxes.len(), 30);
    let mut seen: Vec<u64> = boxes.iter().map(|b| b.words[0]).collect();
    seen.sort_unstable();
    assert_eq!(seen, (1..=30).collect::<Vec<_>>());
    drop(boxes);
    assert_eq!(drops.load(Ordering::Relaxed), 31);
}

#[test]
fn the_cap_makes_try_new_refuse_and_new_fall_back() {
    let config = Config::default().ema_cap(Some(2 * ochre::alloc::BLOCK));
    let rt = Runtime::builder().workers(1).pin(false).config(config).build().unwrap();
    let out = Arc::new(Mutex::new((0usize, 0usize, 0usize, 0usize)));
    let o = out.clone();
    let report = rt
        .run(Color(0), move || {
            let mut kept = Vec::new();
            let mut refused = None;
            for i in 0..200usize {
                match ColorBox::try_new(Color(1), [i as u8; 1000]) {
                    Ok(b) => kept.push(b),
                    Err(v) => {
                        refused = Some((i, v[0] as usize));
                        break;
                    }
                }
            }
            let (at, value) = refused.expect("the cap refused an allocation");
            let fallback = ColorBox::new(Color(1), [9u8; 1000]);
            let mut o = o.lock().unwrap();
            *o = (kept.len(), at, value, usize::from(!ColorBox::is_placed(&fallback)));
        })
        .unwrap();
    let (kept, at, value, fell_back) = *out.lock().unwrap();
    let per_block = (ochre::alloc::BLOCK - ochre::alloc::HEADER) / 1024;
    assert_eq!(kept, 2 * per_block, "exactly the capped blocks were filled");
    assert_eq!((at, value), (kept, kept), "the refused value came back intact");
    assert_eq!(fell_back, 1, "new() falls back to the global allocator at the cap");
    assert!(report.workers[0].ema_refused >= 2);
}

/// An allocator that counts, over the system one.
struct Counting {
    allocs: AtomicU64,
    frees: AtomicU64,
}

// SAFETY: forwards to the system allocator unchanged.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        self.allocs.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        self.frees.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { std::alloc::System.dealloc(p, l) }
    }
}

static COUNTING: Counting = Counting { allocs: AtomicU64::new(0), frees: AtomicU64::new(0) };

#[test]
fn an_event_allocator_holds_what_ema_does_not_and_gets_all_of_it_back() {
    let build = || {
        Runtime::builder()
            .workers(3)
            .pin(false)
            .config(Config::default().ema(false))
            .event_allocator(&COUNTING)
            .build()
            .unwrap()
    };
    let rt = build();
    let sum = Arc::new(AtomicU64::new(0));
    let s = sum.clone();
    rt.run(Color(0), move || {
        for c in 1..=50u64 {
            let s = s.clone();
            ochre::post(Color(c), move || {
                let s2 = s.clone();
                ochre::post(Color(c + 100), move || {
                    s2.fetch_add(c, Ordering::Relaxed);
                });
            });
        }
    })
    .unwrap();
    assert_eq!(sum.load(Ordering::Relaxed), (1..=50).sum::<u64>());
    // 100 events posted by handlers; the first one came from outside (global allocator).
    assert_eq!(COUNTING.allocs.load(Ordering::Relaxed), 100);
    assert_eq!(COUNTING.frees.load(Ordering::Relaxed), 100, "every event's memory came back");
    // Events left unrun at a shutdown and dropped with the runtime are freed there too.
    let s = sum.clone();
    rt.run(Color(0), move || {
        for _ in 0..20 {
            let s = s.clone();
            ochre::post(Color(7), move || {
                s.fetch_add(1, Ordering::Relaxed);
            });
        }
        ochre::shutdown();
    })
    .unwrap();
    drop(rt);
    // Those bound for another worker may still travel inline (`Config::inline_posts`): stored
    // by the receiver only, so some of the 20 may have taken no storage at all.
    let allocs = COUNTING.allocs.load(Ordering::Relaxed);
    assert!((100..=120).contains(&allocs), "{allocs} allocations");
    assert_eq!(COUNTING.frees.load(Ordering::Relaxed), allocs, "run or not, every event was freed");
    assert_eq!(Arc::strong_count(&sum), 1, "and every unrun event's captures were dropped");
    // The data events carry comes from the same allocator when EMA is off: a ColorBox and a
    // ColorBytes per event, made on one worker and dropped on another.
    let carried = Arc::new(AtomicU64::new(0));
    let s = carried.clone();
    let rt = build();
    rt.run(Color(0), move || {
        for c in 1..=30u64 {
            let s = s.clone();
            ochre::post(Color(c), move || {
                let boxed = ColorBox::new(Color(c + 100), [c; 4]);
                let bytes = ochre::ColorBytes::from_slice(Color(c + 100), b"carried");
                assert!(!ColorBox::is_placed(&boxed) && !bytes.is_placed());
                let nothing = ColorBox::new(Color(c + 100), ());
                ochre::post(Color(c + 100), move || {
                    assert_eq!(&*bytes, b"carried");
                    let () = ColorBox::into_inner(nothing);
                    s.fetch_add(boxed[3], Ordering::Relaxed);
                });
            });
        }
    })
    .unwrap();
    assert_eq!(carried.load(Ordering::Relaxed), (1..=30).sum::<u64>());
    // 60 events, 30 boxes and 30 buffers; the zero-sized boxes take no storage.
    assert_eq!(COUNTING.allocs.load(Ordering::Relaxed), allocs + 120);
    assert_eq!(COUNTING.frees.load(Ordering::Relaxed), allocs + 120, "and all of it came back");
}

#[test]
fn byte_buffers_are_placed_for_their_color_and_freed_from_any_worker() {
    // Buffers made by handlers for colors homed on the other worker, filled, read and dropped
    // there: placed by EMA (up to 1 KiB), and every byte of EMA memory comes back. Every worker
    // ends the run: one asleep through its end (on a CPU a busy test machine shares) would take
    // back what others freed for it at its next end, after the report is read.
    let config = Config::default().sleep_through_ends(false);
    let rt = Runtime::builder().workers(2).pin(false).config(config).build().unwrap();
    let ok = Arc::new(AtomicU64::new(0));
    let o = ok.clone();
    let report = rt
        .run(Color(0), move || {
            for c in 1..=200u64 {
                let o = o.clone();
                ochre::post(Color(c), move || {
                    let len = (c as usize * 37) % 2000;
                    let mut b = ochre::ColorBytes::zeroed(Color(c + 1000), len);
                    assert_eq!(b.is_placed(), (1..=1024).contains(&len), "len {len}");
                    for (i, x) in b.iter_mut().enumerate() {
                        *x = (i % 251) as u8;
                    }
                    let copy = ochre::ColorBytes::from_slice(Color(c + 2000), &b);
                    ochre::post(Color(c + 1000), move || {
                        assert!(copy.iter().enumerate().all(|(i, &x)| x == (i % 251) as u8));
                        assert_eq!(copy.len(), b.len());
                        o.fetch_add(1, Ordering::Relaxed);
                    });
                });
            }
        })
        .unwrap();
    assert_eq!(ok.load(Ordering::Relaxed), 200);
    let t = report.total();
    assert_eq!(t.ema_live_bytes, 0, "{t:?}");
    assert_eq!(t.ema_crumbs, 0, "{t:?}");
}

//! Actors ([`ochre::Addr`]): messages reach their actor's state exactly once, in each poster's
//! order, never two at a time, while colors move between workers (follow's moves and stealing,
//! at many more workers than cores); a stopped actor drops its state and its later messages; an
//! address works only in its own runtime; a panicking message is reported and the actor goes on;
//! reads of an actor of a reader color never run beside its messages.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use ochre::{Addr, Color, Config, Error, Runtime, Steal};

/// An actor's state: per poster, the last sequence number seen; a flag that catches two
/// messages running at once; the count of messages.
struct Counter {
    last: Vec<u64>,
    inside: Arc<AtomicBool>,
    seen: u64,
}

/// `actors` actors, `posters` colors each sending `per` numbered messages to every actor in
/// rounds (the actors' colors move under the traffic); returns each actor's count and whether
/// anything broke.
fn stress(workers: usize, config: Config, actors: usize, posters: u64, per: u64) {
    // Every worker a home and a thief, on any machine: the moves between many workers are what
    // this stresses (`Config::home_on_every_worker`).
    let config = config.home_on_every_worker(true);
    let rt = Runtime::builder().workers(workers).pin(false).config(config).build().unwrap();
    let broken = Arc::new(AtomicUsize::new(0));
    let delivered = Arc::new(AtomicU64::new(0));
    let addrs: Arc<Vec<Addr<Counter>>> = Arc::new(
        (0..actors)
            .map(|i| {
                let state = Counter {
                    last: vec![0; posters as usize],
                    inside: Arc::new(AtomicBool::new(false)),
                    seen: 0,
                };
                rt.actor(Color(1 + i as u64), state)
            })
            .collect(),
    );
    let (a, b, d) = (addrs.clone(), broken.clone(), delivered.clone());
    let report = rt
        .run(Color(0), move || {
            for p in 0..posters {
                let (a, b, d) = (a.clone(), b.clone(), d.clone());
                ochre::post(Color(10_000 + p), move || send_rounds(a, b, d, p, 1, per));
            }
        })
        .unwrap();
    assert!(report.panics.is_empty(), "{:?}", report.panics);
    assert_eq!(broken.load(Ordering::SeqCst), 0, "a message ran out of order or beside another");
    assert_eq!(delivered.load(Ordering::SeqCst), actors as u64 * posters * per);
    // Each actor saw every poster's last message: exactly once each, counted.
    let (tx, rx) = std::sync::mpsc::channel();
    for (i, addr) in addrs.iter().enumerate() {
        let tx = tx.clone();
        rt.handle().send(*addr, move |c| tx.send((i, c.seen, c.last.clone())).unwrap()).unwrap();
    }
    drop(tx);
    rt.run(Color(0), || {}).unwrap();
    let mut answers: Vec<_> = rx.iter().collect();
    answers.sort_by_key(|a| a.0);
    assert_eq!(answers.len(), actors);
    for (i, seen, last) in answers {
        assert_eq!(seen, posters * per, "actor {i}");
        assert!(last.iter().all(|&l| l == per), "actor {i}: {last:?}");
    }
}

/// Poster `p` sends message `n` to every actor, then posts itself the next round: rounds
/// interleave with the other posters'.
fn send_rounds(
    addrs: Arc<Vec<Addr<Counter>>>,
    broken: Arc<AtomicUsize>,
    delivered: Arc<AtomicU64>,
    p: u64,
    n: u64,
    per: u64,
) {
    for addr in addrs.iter() {
        let (b, d) = (broken.clone(), delivered.clone());
        addr.send(move |c| {
            if c.inside.swap(true, Ordering::SeqCst) {
                b.fetch_add(1, Ordering::SeqCst);
            }
            if c.last[p as usize] + 1 != n {
                b.fetch_add(1, Ordering::SeqCst);
            }
            c.last[p as usize] = n;
            c.seen += 1;
            d.fetch_add(1, Ordering::Relaxed);
            std::hint::spin_loop();
            c.inside.store(false, Ordering::SeqCst);
        });
    }
    if n < per {
        ochre::post(Color(10_000 + p), move || {
            send_rounds(addrs, broken, delivered, p, n + 1, per)
        });
    }
}

#[test]
fn messages_run_once_in_order_and_alone_while_colors_move_at_sixteen_workers() {
    stress(16, Config::default(), 24, 6, 300);
}

#[test]
fn messages_run_once_in_order_and_alone_with_stealing_on_every_idle_worker() {
    stress(12, Config::default().steal(Steal::Plain), 24, 6, 300);
}

#[test]
fn messages_run_once_in_order_and_alone_on_the_libasync_smp_baseline() {
    stress(8, Config::baseline(), 16, 4, 200);
}

/// Counts its drops.
struct Tracked(Arc<AtomicUsize>, u64);
impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_stopped_actor_drops_its_state_then_its_messages_and_its_slot_serves_a_new_actor() {
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let first = rt.actor(Color(3), Tracked(drops.clone(), 1));
    let (d, r) = (drops.clone(), ran.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    rt.run(Color(3), move || {
        let r1 = r.clone();
        first.send(move |t| {
            assert_eq!(t.1, 1);
            r1.fetch_add(1, Ordering::SeqCst);
        });
        first.stop();
        let r2 = r.clone();
        // Same poster, same color: after the stop, so dropped unrun.
        first.send(move |_| {
            r2.fetch_add(100, Ordering::SeqCst);
        });
        let d = d.clone();
        let r3 = r.clone();
        ochre::post(Color(3), move || {
            assert_eq!(d.load(Ordering::SeqCst), 1, "the stop dropped the state");
            // A new actor of the same type takes the stopped one's slot; the old address
            // must not reach it.
            let second = ochre::actor(Color(4), Tracked(d.clone(), 2));
            let r4 = r3.clone();
            first.send(move |_| {
                r3.fetch_add(1000, Ordering::SeqCst);
            });
            second.send(move |t| {
                assert_eq!(t.1, 2);
                r4.fetch_add(10, Ordering::SeqCst);
            });
            tx.send(second).unwrap();
        });
    })
    .unwrap()
    .check()
    .unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 11, "1 before the stop, 10 for the new actor");
    let second = rx.recv().unwrap();
    assert_ne!(second, first);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    drop(rt);
    assert_eq!(drops.load(Ordering::SeqCst), 2, "dropping the runtime drops the live state");
}

#[test]
fn an_address_is_refused_by_another_runtime() {
    let one = Runtime::builder().workers(1).pin(false).build().unwrap();
    let two = Runtime::builder().workers(1).pin(false).build().unwrap();
    let addr = one.actor(Color(1), 0u64);
    assert!(matches!(two.handle().send(addr, |n| *n += 1), Err(Error::NotInRuntime)));
    assert!(matches!(two.handle().stop_actor(addr), Err(Error::NotInRuntime)));
    // Outside any handler, and in a handler of the other runtime.
    assert!(matches!(addr.try_send(|n| *n += 1), Err(Error::NotInRuntime)));
    let (tx, rx) = std::sync::mpsc::channel();
    two.run(Color(1), move || tx.send(addr.try_send(|n| *n += 1).is_err()).unwrap()).unwrap();
    assert!(rx.recv().unwrap(), "a handler of another runtime sent to the actor");
    // Its own runtime takes it.
    let (tx, rx) = std::sync::mpsc::channel();
    one.handle().send(addr, |n| *n += 1).unwrap();
    one.handle().send(addr, move |n| tx.send(*n).unwrap()).unwrap();
    one.run(Color(1), || {}).unwrap();
    assert_eq!(rx.recv().unwrap(), 1);
    drop(one);
    assert!(matches!(two.handle().send(addr, |n| *n += 1), Err(Error::NotInRuntime)));
}

#[test]
fn a_handle_of_a_dropped_runtime_refuses_messages() {
    let rt = Runtime::builder().workers(1).pin(false).build().unwrap();
    let addr = rt.actor(Color(1), String::from("state"));
    let handle = rt.handle();
    drop(rt);
    assert!(handle.send(addr, |s| s.push('!')).is_err());
}

#[test]
fn a_panicking_message_is_reported_with_the_actors_color_and_the_actor_goes_on() {
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let counter = rt.actor(Color(42), 0u64);
    let (tx, rx) = std::sync::mpsc::channel();
    let report = rt
        .run(Color(1), move || {
            counter.send(|n| *n += 1);
            counter.send(|_| panic!("a bad message"));
            counter.send(|n| *n += 10);
            counter.send(move |n| tx.send(*n).unwrap());
        })
        .unwrap();
    assert_eq!(report.panics.len(), 1, "{:?}", report.panics);
    assert_eq!(report.panics[0].color, Color(42));
    assert!(report.panics[0].message.contains("a bad message"));
    assert_eq!(rx.recv().unwrap(), 11, "the messages before and after the panic ran");
}

/// State of an actor read beside its messages: a flag its messages raise while they run.
struct Shared {
    writing: AtomicBool,
    writes: AtomicU64,
}

#[test]
fn reads_of_an_actor_never_run_beside_its_messages_and_all_run_once() {
    const ACTORS: u64 = 8;
    const POSTERS: u64 = 12;
    const PER: u64 = 400;
    let rt = Runtime::builder().workers(16).pin(false).build().unwrap();
    let addrs: Arc<Vec<Addr<Shared>>> = Arc::new(
        (0..ACTORS)
            .map(|i| {
                let state = Shared { writing: AtomicBool::new(false), writes: AtomicU64::new(0) };
                rt.actor(Color::with_readers(1 + i), state)
            })
            .collect(),
    );
    let (reads, broken) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicUsize::new(0)));
    let (a, r, b) = (addrs.clone(), reads.clone(), broken.clone());
    let report = rt
        .run(Color(0), move || {
            for p in 0..POSTERS {
                let (a, r, b) = (a.clone(), r.clone(), b.clone());
                ochre::post(Color(1000 + p), move || {
                    for n in 0..PER {
                        let addr = a[((p * 7 + n) % ACTORS) as usize];
                        let (r, b) = (r.clone(), b.clone());
                        if n % 10 == 0 {
                            addr.send(move |s| {
                                if s.writing.swap(true, Ordering::SeqCst) {
                                    b.fetch_add(1, Ordering::SeqCst);
                                }
                                s.writes.fetch_add(1, Ordering::SeqCst);
                                std::hint::spin_loop();
                                s.writing.store(false, Ordering::SeqCst);
                            });
                        } else {
                            addr.read(move |s| {
                                if s.writing.load(Ordering::SeqCst) {
                                    b.fetch_add(1, Ordering::SeqCst);
                                }
                                r.fetch_add(1, Ordering::SeqCst);
                            });
                        }
                    }
                });
            }
        })
        .unwrap();
    assert!(report.panics.is_empty(), "{:?}", report.panics);
    assert_eq!(broken.load(Ordering::SeqCst), 0, "a read ran beside a message");
    assert_eq!(reads.load(Ordering::SeqCst), POSTERS * PER * 9 / 10);
    let (tx, rx) = std::sync::mpsc::channel();
    for a in addrs.iter() {
        let tx = tx.clone();
        rt.handle().send(*a, move |s| tx.send(s.writes.load(Ordering::SeqCst)).unwrap()).unwrap();
    }
    drop(tx);
    rt.run(Color(0), || {}).unwrap();
    assert_eq!(rx.iter().sum::<u64>(), POSTERS * PER / 10);
}

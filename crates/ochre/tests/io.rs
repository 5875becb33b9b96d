//! Readiness and timers as colored events.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ochre::io::{self, Interest};
use ochre::{Color, RunEnd, Runtime};

fn rt(workers: usize) -> Runtime {
    Runtime::builder().workers(workers).pin(false).build().unwrap()
}

fn nonblocking_pipe() -> (OwnedFd, OwnedFd) {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::NONBLOCK | rustix::pipe::PipeFlags::CLOEXEC)
        .unwrap()
}

/// Reads what is available; returns (bytes, end of file).
fn drain(fd: &OwnedFd) -> (usize, bool) {
    let mut buf = [0u8; 4096];
    let mut n = 0;
    loop {
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => return (n, true),
            Ok(k) => n += k,
            Err(rustix::io::Errno::AGAIN) => return (n, false),
            Err(e) => panic!("read: {e}"),
        }
    }
}

#[test]
fn a_watched_pipe_delivers_every_byte_as_events_of_its_color() {
    let rt = rt(3);
    let (r, w) = nonblocking_pipe();
    let got = Arc::new(AtomicU64::new(0));
    let colors = Arc::new(Mutex::new(Vec::new()));
    let (g, cs) = (got.clone(), colors.clone());
    let writer = std::thread::spawn(move || {
        for _ in 0..200 {
            let mut off = 0;
            let chunk = [7u8; 1000];
            while off < chunk.len() {
                match rustix::io::write(&w, &chunk[off..]) {
                    Ok(k) => off += k,
                    Err(rustix::io::Errno::AGAIN) => std::thread::yield_now(),
                    Err(e) => panic!("write: {e}"),
                }
            }
        }
        // Dropping `w` is the end of file.
    });
    let report = rt
        .run(Color(1), move || {
            let color = Color(77);
            io::watch(&r.try_clone().unwrap(), Interest::READ, color, move |ev| {
                cs.lock().unwrap().push(ochre::current_color());
                let (n, eof) = drain(&r);
                g.fetch_add(n as u64, Ordering::Relaxed);
                if eof {
                    ev.cancel();
                }
            })
            .unwrap();
        })
        .unwrap();
    writer.join().unwrap();
    assert_eq!(report.end, RunEnd::Quiescent, "the run ends once the watch is cancelled");
    assert_eq!(got.load(Ordering::Relaxed), 200_000);
    let colors = colors.lock().unwrap();
    assert!(colors.iter().all(|c| *c == Some(Color(77))));
    let t = report.total();
    assert_eq!(t.watches, 1);
    assert!(t.io_events >= 1 && t.polls >= 1);
}

#[test]
fn a_cancelled_watch_never_fires_even_when_its_fd_number_is_reused() {
    let rt = rt(2);
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let handle = rt.handle();
    rt.run(Color(1), move || {
        let (r1, w1) = nonblocking_pipe();
        let old_fd = std::os::fd::AsRawFd::as_raw_fd(&r1);
        let l1 = l.clone();
        let watch =
            io::watch(&r1, Interest::READ, Color(5), move |_| l1.lock().unwrap().push("old"))
                .unwrap();
        watch.cancel();
        drop((r1, w1));
        // The next pipe very likely gets the same descriptor number.
        let (r2, w2) = nonblocking_pipe();
        let reused = std::os::fd::AsRawFd::as_raw_fd(&r2) == old_fd;
        let l2 = l.clone();
        let h = handle.clone();
        io::watch(&r2.try_clone().unwrap(), Interest::READ, Color(5), move |ev| {
            drain(&r2);
            l2.lock().unwrap().push(if reused { "new (reused fd)" } else { "new" });
            ev.cancel();
            h.shutdown();
        })
        .unwrap();
        rustix::io::write(&w2, b"ping").unwrap();
        std::mem::forget(w2); // keep the write end open until the process ends
    })
    .unwrap();
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(log[0].starts_with("new"), "{log:?}");
}

#[test]
fn watching_a_bad_descriptor_is_an_error() {
    let rt = rt(1);
    let file = std::fs::File::open("Cargo.toml").unwrap();
    let out = Arc::new(Mutex::new(None));
    let o = out.clone();
    rt.run(Color(1), move || {
        // Regular files cannot be watched with epoll (EPERM).
        let r = io::watch(&file, Interest::READ, Color(1), |_| {});
        *o.lock().unwrap() = Some(r.is_err());
    })
    .unwrap();
    assert_eq!(*out.lock().unwrap(), Some(true));
    assert!(matches!(
        io::watch(&std::io::stdin(), Interest::READ, Color(1), |_| {}),
        Err(ochre::Error::NotInRuntime)
    ));
}

#[test]
fn timers_fire_in_deadline_order_and_cancelled_ones_never() {
    let rt = rt(2);
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let start = Instant::now();
    let report = rt
        .run(Color(1), move || {
            for (ms, tag) in [(30u64, 3u32), (10, 1), (20, 2), (25, 99)] {
                let l = l.clone();
                let t = io::post_after(Duration::from_millis(ms), Color(9), move || {
                    l.lock().unwrap().push((tag, start.elapsed()));
                })
                .unwrap();
                if tag == 99 {
                    t.cancel();
                }
            }
        })
        .unwrap();
    assert_eq!(report.end, RunEnd::Quiescent, "pending timers kept the run alive until they fired");
    let log = log.lock().unwrap();
    let tags: Vec<u32> = log.iter().map(|(t, _)| *t).collect();
    assert_eq!(tags, vec![1, 2, 3]);
    for &(tag, at) in log.iter() {
        assert!(
            at >= Duration::from_millis(u64::from(tag) * 10),
            "timer {tag} fired early: {at:?}"
        );
    }
    let t = report.total();
    assert_eq!((t.timers_fired, t.timers_cancelled), (3, 1));
}

#[test]
fn timers_from_outside_threads_and_cancelled_from_another_worker() {
    let rt = rt(2);
    let hits = Arc::new(AtomicU64::new(0));
    let h = hits.clone();
    let handle = rt.handle();
    let fired = handle.post_after(Duration::from_millis(5), Color(3), move || {
        h.fetch_add(1, Ordering::Relaxed);
    });
    let doomed_hits = hits.clone();
    let doomed = handle
        .post_after(Duration::from_millis(40), Color(4), move || {
            doomed_hits.fetch_add(100, Ordering::Relaxed);
        })
        .unwrap();
    assert!(fired.is_ok());
    // A handler on whatever worker cancels the second one before it is due.
    rt.run(Color(1), move || {
        for c in 10..20u64 {
            let d = doomed.clone();
            ochre::post(Color(c), move || d.cancel());
        }
    })
    .unwrap();
    assert_eq!(hits.load(Ordering::Relaxed), 1);
}

/// The current disposition of a signal.
fn disposition(sig: i32) -> libc::sighandler_t {
    // SAFETY: querying (null new action) with a zeroed out-parameter.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old);
        old.sa_sigaction
    }
}

#[test]
fn a_signal_arrives_as_an_event_of_its_color_and_the_disposition_comes_back() {
    let sig = io::signal::SIGUSR2;
    let before = disposition(sig);
    let rt = rt(2);
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let report = rt
        .run(Color(1), move || {
            let watch: Arc<Mutex<Option<io::SignalWatch>>> = Arc::new(Mutex::new(None));
            let w2 = watch.clone();
            let sw = io::watch_signal(sig, Color(42), move |s| {
                g.lock().unwrap().push((s, ochre::current_color()));
                // End the registration from the handler: disposition restored, run quiescent.
                if let Some(sw) = w2.lock().unwrap().take() {
                    sw.cancel();
                }
            })
            .unwrap();
            assert!(
                io::watch_signal(sig, Color(1), |_| {}).is_err(),
                "one registration per signal"
            );
            *watch.lock().unwrap() = Some(sw);
            // SAFETY: sends a signal to this process, whose handler is installed above.
            unsafe { libc::kill(libc::getpid(), sig) };
        })
        .unwrap();
    assert_eq!(report.end, RunEnd::Quiescent);
    assert_eq!(*got.lock().unwrap(), vec![(sig, Some(Color(42)))]);
    assert_eq!(report.total().signals, 1);
    assert_eq!(disposition(sig), before, "the previous disposition is restored");
}

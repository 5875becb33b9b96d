//! The load models against a test server whose response delay is set: closed-loop throughput
//! follows clients / (service time + think time); the open loop shows the queueing a stalled
//! server causes (no coordinated omission); a dead server ends the run with errors, not a hang.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ochre::io::{self, Interest, Listener, Progress};
use ochre::{Color, Runtime};
use ochre_load::report::ERROR_KINDS;
use ochre_load::{
    closed_loop, open_loop, rate_search, semi_open_loop, ClosedLoop, ErrorKind, OpenLoop, Phases,
    SemiOpenLoop, Target,
};

/// A server that answers every request after `delay`, on its own runtime; returns its address.
fn delaying_server(delay: Duration) -> (SocketAddr, Arc<Runtime>) {
    stalling_server(delay, Duration::ZERO, Duration::ZERO)
}

/// Like `delaying_server`, but from `stall_at` after it starts and for `stall_for`, it answers
/// nothing; what arrived meanwhile is answered when the stall ends.
fn stalling_server(
    delay: Duration,
    stall_at: Duration,
    stall_for: Duration,
) -> (SocketAddr, Arc<Runtime>) {
    test_server(delay, stall_at, stall_for, |_| {
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
    })
}

/// The test server, answering each request with `answer(path)` (a response that closes the
/// connection after it when its head says so, or when the request asked).
fn test_server(
    delay: Duration,
    stall_at: Duration,
    stall_for: Duration,
    answer: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static,
) -> (SocketAddr, Arc<Runtime>) {
    let answer = Arc::new(answer);
    let t0 = Instant::now();
    let (stall_from, stall_until) = (t0 + stall_at, t0 + stall_at + stall_for);
    let rt = Arc::new(Runtime::builder().workers(1).pin(false).build().unwrap());
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(10));
    rt.handle()
        .serve(listener, Color(1), move |stream, _| {
            let color = Color(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            let answer = answer.clone();
            let stream = Arc::new(stream);
            let s = stream.clone();
            let mut buf = Vec::new();
            let _ = io::watch(&*stream, Interest::READ, color, move |ev| loop {
                match io::net::read_into(&*s, &mut buf, 4096) {
                    Ok(Progress::Done(_)) => {
                        // One response per complete request head.
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                            let path = head.split(' ').nth(1).unwrap_or("").to_string();
                            let response = answer(&path);
                            let close = head.contains("Connection: close")
                                || String::from_utf8_lossy(&response).contains("Connection: close");
                            buf.drain(..end + 4);
                            let s2 = s.clone();
                            let now = Instant::now();
                            let wait = if now >= stall_from && now < stall_until {
                                stall_until - now + delay
                            } else {
                                delay
                            };
                            let _ = io::post_after(wait, color, move || {
                                let _ = io::net::write(&*s2, &response);
                                if close {
                                    let _ = s2.shutdown(std::net::Shutdown::Write);
                                }
                            });
                        }
                    }
                    Ok(Progress::WouldBlock) => return,
                    _ => {
                        ev.cancel();
                        return;
                    }
                }
            });
        })
        .unwrap();
    let r = rt.clone();
    std::thread::spawn(move || {
        let _ = r.run(Color(2), || {});
    });
    (addr, rt)
}

fn target(addr: SocketAddr) -> Target {
    Target {
        addr,
        host: "test".into(),
        paths: vec!["/a".into(), "/b".into()],
        mix: None,
        bodies: None,
    }
}

#[test]
fn closed_loop_throughput_follows_clients_over_service_time() {
    let (addr, server) = delaying_server(Duration::from_millis(10));
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let model = ClosedLoop { clients: 4, requests_per_connection: 5, think: Duration::ZERO };
    let phases = Phases::new(
        Duration::from_millis(100),
        Duration::from_millis(1000),
        Duration::from_secs(2),
    );
    let t0 = Instant::now();
    let report = closed_loop(&rt, &target(addr), &model, &phases).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5), "the run ends by itself");
    // 4 clients / 10 ms = 400 req/s (timers have 1 ms resolution: each response takes 10-12 ms).
    assert!((300.0..=420.0).contains(&report.throughput), "{}", report.table());
    let p50 = report.percentile(50.0).unwrap();
    assert!((9_000..=15_000).contains(&p50), "p50 {p50} us: {}", report.table());
    assert_eq!(report.errors, [0; ERROR_KINDS], "{}", report.table());
    server.handle().shutdown();
}

#[test]
fn think_time_lowers_the_rate_as_the_closed_loop_law_says() {
    let (addr, server) = delaying_server(Duration::from_millis(5));
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let model =
        ClosedLoop { clients: 4, requests_per_connection: 150, think: Duration::from_millis(15) };
    let phases =
        Phases::new(Duration::from_millis(100), Duration::from_secs(1), Duration::from_secs(2));
    let report = closed_loop(&rt, &target(addr), &model, &phases).unwrap();
    // 4 / (5 ms + 15 ms) = 200 req/s.
    assert!((140.0..=215.0).contains(&report.throughput), "{}", report.table());
    server.handle().shutdown();
}

#[test]
fn a_dead_server_ends_the_run_with_connect_errors() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // closed again
    let rt = Runtime::builder().workers(1).pin(false).build().unwrap();
    let model = ClosedLoop { clients: 2, requests_per_connection: 10, think: Duration::ZERO };
    let phases =
        Phases::new(Duration::ZERO, Duration::from_millis(300), Duration::from_millis(200));
    let t0 = Instant::now();
    let report = closed_loop(&rt, &target(addr), &model, &phases).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(report.ok, 0);
    assert!(report.errors[ErrorKind::Connect as usize] > 0, "{}", report.table());
}

#[test]
fn the_open_loop_shows_the_queueing_a_stalled_server_causes() {
    // The server stalls for 300 ms in the middle of a 1 s measurement.
    let phases = Phases::new(Duration::ZERO, Duration::from_secs(1), Duration::from_secs(3));
    let (addr, server) = stalling_server(
        Duration::from_millis(2),
        Duration::from_millis(300),
        Duration::from_millis(300),
    );
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let open = open_loop(
        &rt,
        &target(addr),
        &OpenLoop { rate: 200.0, connections: 2, poisson: false },
        &phases,
    )
    .unwrap();
    server.handle().shutdown();
    // A quarter or more of the requests were due during the stall: they waited for it.
    assert!(
        open.percentile(90.0).unwrap() >= 100_000,
        "open loop p90 hides the stall: {}",
        open.table()
    );
    assert!(open.latency_max_us >= 250_000, "{}", open.table());
    assert!(open.late_sends > 0, "sends were late behind the stalled responses: {}", open.table());
    assert!((150.0..=230.0).contains(&open.throughput), "{}", open.table());

    // The closed loop against the same stall: only the requests in flight see it.
    let (addr, server) = stalling_server(
        Duration::from_millis(2),
        Duration::from_millis(300),
        Duration::from_millis(300),
    );
    let closed = closed_loop(
        &rt,
        &target(addr),
        &ClosedLoop { clients: 2, requests_per_connection: 1000, think: Duration::ZERO },
        &phases,
    )
    .unwrap();
    server.handle().shutdown();
    assert!(closed.percentile(90.0).unwrap() < 20_000, "closed loop p90: {}", closed.table());
    assert!(
        closed.latency_max_us >= 250_000,
        "its in-flight requests did wait: {}",
        closed.table()
    );
}

#[test]
fn poisson_arrivals_keep_the_mean_rate() {
    let (addr, server) = delaying_server(Duration::from_millis(1));
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let phases = Phases::new(Duration::ZERO, Duration::from_secs(1), Duration::from_secs(2));
    let r = open_loop(
        &rt,
        &target(addr),
        &OpenLoop { rate: 300.0, connections: 8, poisson: true },
        &phases,
    )
    .unwrap();
    server.handle().shutdown();
    assert!((220.0..=380.0).contains(&r.throughput), "{}", r.table());
    assert_eq!(r.errors, [0; ERROR_KINDS]);
}

#[test]
fn semi_open_sessions_last_one_over_the_leave_probability() {
    let (addr, server) = delaying_server(Duration::from_millis(1));
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let model = SemiOpenLoop {
        arrival_rate: 300.0,
        leave: 0.25,
        think: Duration::from_millis(2),
        poisson: true,
        inactive_think: Duration::ZERO,
        requests_per_burst: 0.0,
    };
    let phases = Phases::new(Duration::ZERO, Duration::from_millis(1500), Duration::from_secs(2));
    let r = semi_open_loop(&rt, &target(addr), &model, &phases).unwrap();
    server.handle().shutdown();
    assert!((250..=650).contains(&r.sessions), "sessions arrive at ~300/s: {}", r.table());
    let per_session = r.ok as f64 / r.sessions as f64;
    // Geometric with p = 0.25: mean 4 (sessions cut by the end of the phase pull it down a bit).
    assert!((3.0..=4.8).contains(&per_session), "{per_session} per session: {}", r.table());
    assert_eq!(r.errors, [0; ERROR_KINDS], "{}", r.table());
}

#[test]
fn semi_open_sessions_pause_longer_between_bursts() {
    // Sessions of 4 requests on average (leave 0.25) in bursts of 2: half the pauses are the
    // inactive 400 ms instead of the active 2 ms. In a 1.2 s phase most sessions are still
    // waiting at its end, so far fewer requests are made than without the inactive pauses.
    let (addr, server) = delaying_server(Duration::from_millis(1));
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let phases = Phases::new(Duration::ZERO, Duration::from_millis(1200), Duration::from_secs(2));
    let run = |inactive_ms: u64, burst: f64| {
        let model = SemiOpenLoop {
            arrival_rate: 200.0,
            leave: 0.25,
            think: Duration::from_millis(2),
            poisson: true,
            inactive_think: Duration::from_millis(inactive_ms),
            requests_per_burst: burst,
        };
        semi_open_loop(&rt, &target(addr), &model, &phases).unwrap()
    };
    let flat = run(0, 0.0);
    let bursty = run(400, 2.0);
    server.handle().shutdown();
    let per = |r: &ochre_load::LoadReport| r.ok as f64 / r.sessions.max(1) as f64;
    assert!(per(&flat) > 2.5, "{}", flat.table());
    assert!(per(&bursty) < 0.75 * per(&flat), "{} vs {}", bursty.table(), flat.table());
    assert!(bursty.model.contains("400ms inactive"), "{}", bursty.model);
    assert_eq!(bursty.errors, [0; ERROR_KINDS], "{}", bursty.table());
}

#[test]
fn a_semi_open_run_with_long_think_times_offers_requests_and_ends_on_time() {
    // The thesis's think times are seconds long: a session thinking when the run ends must not
    // keep it going (the runtime runs until no timer is left). Before the fix, runs with the
    // 3 s inactive pause ended 15-19 s after their 1.5 s phase; here the inactive pause is
    // 20 s, so a run that waits for its think timers ends far past the 8 s allowed.
    let (addr, server) = delaying_server(Duration::from_millis(1));
    let rt = Arc::new(Runtime::builder().workers(1).pin(false).build().unwrap());
    let run = |model: SemiOpenLoop, phases: Phases| {
        let (done, report) = std::sync::mpsc::channel();
        let (rt, t) = (rt.clone(), target(addr));
        // On a thread of its own: a run that does not end fails the test at the bound instead
        // of holding it for the length of its timers.
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let _ = done.send((semi_open_loop(&rt, &t, &model, &phases), t0.elapsed()));
        });
        let (r, took) = report.recv_timeout(Duration::from_secs(8)).expect("the run ended");
        (r.unwrap(), took)
    };
    let phases =
        Phases::new(Duration::from_millis(200), Duration::from_millis(600), Duration::from_secs(2));
    let model = SemiOpenLoop {
        arrival_rate: 200.0,
        leave: 0.2,
        think: SemiOpenLoop::PARIAG_THINK,
        poisson: true,
        inactive_think: Duration::from_secs(20),
        requests_per_burst: 2.0,
    };
    for _ in 0..2 {
        // Twice on one runtime: the second run is as good as the first.
        let (r, took) = run(model.clone(), phases.clone());
        // ~120 sessions start in the measured phase, each with a first request at once.
        assert!(r.sessions >= 40 && r.sent >= r.sessions, "requests offered: {}", r.table());
        assert!(r.ok >= r.sessions, "{}", r.table());
        assert_eq!(r.errors, [0; ERROR_KINDS], "{}", r.table());
        assert!(took < Duration::from_secs(4), "the run ended {took:?} after it began");
    }
    // Arrivals too: with one session every 30 s, the second would come long after the end.
    let sparse = SemiOpenLoop { arrival_rate: 1.0 / 30.0, poisson: false, leave: 1.0, ..model };
    let (r, took) = run(
        sparse,
        Phases::new(Duration::ZERO, Duration::from_millis(300), Duration::from_secs(2)),
    );
    assert_eq!((r.sessions, r.ok), (1, 1), "{}", r.table());
    assert!(took < Duration::from_secs(4), "the run ended {took:?} after it began");
    server.handle().shutdown();
}

#[test]
fn rate_search_finds_the_knee_of_a_server_that_serves_one_request_at_a_time() {
    // One connection, 5 ms per request: about 200 req/s at most; above that the queue grows
    // and p99 explodes.
    let (addr, server) = delaying_server(Duration::from_millis(5));
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let phases = Phases::new(Duration::ZERO, Duration::from_millis(400), Duration::from_secs(2));
    let s =
        rate_search(&rt, &target(addr), 1, Duration::from_millis(40), (20.0, 800.0), 6, &phases)
            .unwrap();
    server.handle().shutdown();
    assert!(
        (60.0..=200.0).contains(&s.best_rate),
        "best {} after {:?}",
        s.best_rate,
        s.probes.iter().map(|(r, rep)| (*r, rep.percentile(99.0))).collect::<Vec<_>>()
    );
    assert_eq!(s.probes.len(), 6);
}

#[test]
fn a_hung_server_gives_timeouts_and_the_run_still_ends() {
    // Answers nothing for 10 s: every request times out (one lazy timer per client).
    let (addr, server) =
        stalling_server(Duration::from_millis(1), Duration::ZERO, Duration::from_secs(10));
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let model = ClosedLoop { clients: 3, requests_per_connection: 10, think: Duration::ZERO };
    let phases =
        Phases::new(Duration::ZERO, Duration::from_millis(700), Duration::from_millis(150));
    let t0 = Instant::now();
    let r = closed_loop(&rt, &target(addr), &model, &phases).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(3), "bounded: {:?}", t0.elapsed());
    server.handle().shutdown();
    assert_eq!(r.ok, 0);
    // 3 clients, a timeout every 150 ms each over 700 ms: 4 each, give or take one.
    let timeouts = r.errors[ErrorKind::Timeout as usize];
    assert!((9..=15).contains(&timeouts), "{}", r.table());
    assert!(r.sent >= timeouts, "{}", r.table());
}

/// A body of `n` bytes that differs per path.
fn body_of(path: &str, n: usize) -> Vec<u8> {
    path.bytes().cycle().take(n).collect()
}

/// `body` in chunks of 1000 bytes.
fn chunked(body: &[u8]) -> Vec<u8> {
    let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for c in body.chunks(1000) {
        out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        out.extend_from_slice(c);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

#[test]
fn chunked_bodies_are_read_and_verified_against_the_files() {
    let root = std::env::temp_dir().join(format!("ochre-load-verify-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    for p in ["a", "b", "c"] {
        std::fs::write(root.join(p), body_of(&format!("/{p}"), 5000)).unwrap();
    }
    // /a chunked and right, /b with Content-Length and right, /c chunked with one byte wrong.
    let (addr, server) = test_server(Duration::ZERO, Duration::ZERO, Duration::ZERO, |path| {
        let mut body = body_of(path, 5000);
        match path {
            "/b" => {
                let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len())
                    .into_bytes();
                r.extend_from_slice(&body);
                r
            }
            "/c" => {
                body[4321] ^= 1;
                chunked(&body)
            }
            _ => chunked(&body),
        }
    });
    let mut t = target(addr);
    t.paths = vec!["/a".into(), "/b".into(), "/c".into()];
    let missing = t.clone().verify_against(&root.join("missing"));
    assert!(matches!(missing, Err(ochre_load::Error::Verify { .. })), "missing files: {missing:?}");
    t.verify_against(&root).unwrap();
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let model = ClosedLoop { clients: 3, requests_per_connection: 7, think: Duration::ZERO };
    let phases = Phases::new(Duration::ZERO, Duration::from_millis(500), Duration::from_secs(2));
    let r = closed_loop(&rt, &t, &model, &phases).unwrap();
    server.handle().shutdown();
    std::fs::remove_dir_all(&root).unwrap();
    let mismatches = r.errors[ErrorKind::Mismatch as usize];
    // Paths go in turn: a third of the answers are /c's, and only those are wrong.
    assert!(r.ok > 100, "{}", r.table());
    let share = mismatches as f64 / (r.ok + mismatches) as f64;
    assert!((0.25..=0.42).contains(&share), "{share}: {}", r.table());
    let other: u64 = r.errors.iter().sum::<u64>() - mismatches;
    assert_eq!(other, 0, "{}", r.table());
}

#[test]
fn short_bodies_and_close_delimited_bodies() {
    // /a: close-delimited (HTTP/1.0 style), complete; /b: promises 10 bytes, sends 5, closes.
    let (addr, server) =
        test_server(Duration::ZERO, Duration::ZERO, Duration::ZERO, |path| match path {
            "/a" => b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nwhole".to_vec(),
            _ => {
                b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nhalf.".to_vec()
            }
        });
    let rt = Runtime::builder().workers(1).pin(false).build().unwrap();
    let model = ClosedLoop { clients: 2, requests_per_connection: 100, think: Duration::ZERO };
    let phases = Phases::new(Duration::ZERO, Duration::from_millis(400), Duration::from_secs(1));
    let r = closed_loop(&rt, &target(addr), &model, &phases).unwrap();
    server.handle().shutdown();
    let short = r.errors[ErrorKind::ShortBody as usize];
    assert!(r.ok > 20 && short > 20, "{}", r.table());
    let share = short as f64 / (r.ok + short) as f64;
    assert!((0.3..=0.7).contains(&share), "{share}: {}", r.table());
}

#[test]
fn progress_is_reported_every_second() {
    let (addr, server) = delaying_server(Duration::from_millis(2));
    let rt = Runtime::builder().workers(1).pin(false).build().unwrap();
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut phases = Phases::new(
        Duration::from_millis(200),
        Duration::from_millis(1900),
        Duration::from_secs(1),
    );
    let l = lines.clone();
    phases.progress = Some(ochre_load::Progress(Arc::new(move |p| l.lock().unwrap().push(*p))));
    let model = ClosedLoop { clients: 2, requests_per_connection: 100, think: Duration::ZERO };
    let r = closed_loop(&rt, &target(addr), &model, &phases).unwrap();
    server.handle().shutdown();
    let lines = lines.lock().unwrap();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(!lines[0].warming_up && lines[0].ok > 0, "{lines:?}");
    assert!(lines[1].ok > lines[0].ok && lines[1].ok <= r.ok, "{lines:?}");
    // The second line sees the first full interval of the measured phase.
    assert!(lines[1].last_interval_ok > 0, "{lines:?}");
    assert_eq!(r.series.iter().map(|i| i.ok).sum::<u64>(), r.ok);
}

#[test]
fn a_master_and_two_workers_merge_into_one_report() {
    use ochre_load::remote::{run_distributed, serve_worker, Job};
    let (addr, server) = delaying_server(Duration::from_millis(10));
    let mut workers = Vec::new();
    let mut remotes = Vec::new();
    for _ in 0..2 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        remotes.push(l.local_addr().unwrap());
        workers.push(std::thread::spawn(move || {
            serve_worker(l, Some(1), || Runtime::builder().workers(1).pin(false).build())
        }));
    }
    let t = target(addr);
    let job = Job {
        addr,
        host: t.host.clone(),
        paths: t.paths.clone(),
        weights: None,
        verify: None,
        model: ochre_load::Model::Closed(ClosedLoop {
            clients: 6,
            requests_per_connection: 50,
            think: Duration::ZERO,
        }),
        warmup: Duration::from_millis(100),
        measure: Duration::from_secs(1),
        timeout: Duration::from_secs(2),
        cooldown: Duration::from_millis(100),
        requests: None,
    };
    let rt = Runtime::builder().workers(1).pin(false).build().unwrap();
    let r = run_distributed(&job, &remotes, &rt, &job.phases()).unwrap();
    for w in workers {
        w.join().unwrap().unwrap();
    }
    server.handle().shutdown();
    assert_eq!(r.injectors, 3, "{}", r.table());
    assert!(r.notes.is_empty(), "{:?}", r.notes);
    // 6 clients (2 per injector) at 10 ms: 600 req/s in all.
    assert!((450.0..=640.0).contains(&r.throughput), "{}", r.table());
    let counted: u64 = r.histogram.iter().map(|&(_, n)| n).sum();
    assert_eq!(counted, r.ok, "the merged histogram holds every response");
    assert_eq!(r.series.iter().map(|i| i.ok).sum::<u64>(), r.ok);
    let p50 = r.percentile(50.0).unwrap();
    assert!((9_000..=15_000).contains(&p50), "{}", r.table());

    // A worker that is not there: the run fails before anything starts, naming it.
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let e = run_distributed(&job, &[gone], &rt, &job.phases()).unwrap_err();
    assert!(matches!(e, ochre_load::Error::Worker { addr, .. } if addr == gone), "{e:?}");
    assert!(e.to_string().starts_with(&format!("worker {gone}: ")), "{e}");
}

#[test]
fn a_request_count_ends_the_measurement_and_the_cooldown_keeps_the_load_on() {
    let (addr, server) = delaying_server(Duration::from_millis(2));
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let model = ClosedLoop { clients: 4, requests_per_connection: 1000, think: Duration::ZERO };
    let mut phases = Phases::new(Duration::ZERO, Duration::from_secs(20), Duration::from_secs(1));
    phases.requests = Some(300);
    let t0 = Instant::now();
    let r = closed_loop(&rt, &target(addr), &model, &phases).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5), "the count ended the run: {:?}", t0.elapsed());
    assert_eq!(r.ok, 300, "{}", r.table());
    assert!(r.measured < Duration::from_secs(2), "{:?}", r.measured);
    // 4 clients at ~2 ms: ~2000 req/s over the time the 300 took.
    assert!((800.0..=2400.0).contains(&r.throughput), "{}", r.table());

    // A cool-down: clients still send after the measured phase, unrecorded.
    let mut phases =
        Phases::new(Duration::ZERO, Duration::from_millis(300), Duration::from_secs(1));
    phases.cooldown = Duration::from_millis(400);
    let t0 = Instant::now();
    let r = closed_loop(&rt, &target(addr), &model, &phases).unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(700), "{:?}", t0.elapsed());
    assert!(r.measured == Duration::from_millis(300) && r.ok > 100, "{}", r.table());
    assert!(r.ok < 1500, "nothing of the cool-down is recorded: {}", r.table());
    server.handle().shutdown();
}

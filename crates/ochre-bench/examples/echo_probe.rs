//! Diagnostic: a TCP echo server as a user writes one on ochre (an accept handler, a plain
//! color per connection, read and write back on readiness) against the idiomatic tokio server
//! (an accept loop spawning a task per connection: `read`, `write_all`), in one process,
//! alternated, on loopback.
//!
//! `echo_probe [CONNS] [BYTES] [SECS] [REPS]` (defaults 64 connections, 64-byte messages, 1 s,
//! 7 repetitions). A client thread (a tokio current-thread runtime) keeps one message in flight
//! per connection, closed loop, and counts round trips. `WORKERS=N` (default 2) server workers;
//! `SPLIT=1`: server on CPU 0 with one worker, client on CPU 1 (the injector on its own CPU);
//! `BUSY=1`: a thread spins on CPU 1 throughout (a machine shared with a busy process).
//!
//! Found (session 34, 2 CPUs, quiet, medians of 5 one-second runs, ochre over tokio): 1
//! connection 3.1x (42.6K round trips/s against 13.7K: an idle ochre worker spins for the next
//! readiness where tokio's parks, and the client's thread shares the CPUs), 64 connections
//! 1.12x, 256 1.27x, 64 connections of 4 KiB messages 1.16x; with the client on CPU 1 and one
//! server worker on CPU 0, 64 connections 0.99x (both ~270K/s: the client's one thread is the
//! limit) and 1 connection 3.19x; beside a thread spinning on CPU 1, 64 connections 1.32x.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ochre::io::{self, Event, Interest, Listener, Progress};
use ochre::{Color, Runtime};
use ochre_bench::harness::median;
use ochre_bench::peers::pin_as;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One connection of the ochre server: what it read and has not written back yet.
#[derive(Default)]
struct Conn {
    out: Vec<u8>,
    sent: usize,
}

impl Conn {
    fn on_event(&mut self, s: &mut TcpStream, ev: &mut Event) {
        let mut buf = [0u8; 16 * 1024];
        loop {
            while self.sent < self.out.len() {
                match io::net::write(s, &self.out[self.sent..]) {
                    Ok(Progress::Done(n)) => self.sent += n,
                    Ok(_) => return,
                    Err(_) => return ev.cancel(),
                }
            }
            self.out.clear();
            self.sent = 0;
            match s.read(&mut buf) {
                Ok(0) => return ev.cancel(),
                Ok(n) => self.out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(_) => return ev.cancel(),
            }
        }
    }
}

fn ochre_server(workers: usize) -> (SocketAddr, ochre::Handle, std::thread::JoinHandle<()>) {
    let rt = Runtime::builder().workers(workers).build().expect("ochre");
    let listener = Listener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let handle = rt.handle();
    let thread = std::thread::spawn(move || {
        let next = AtomicU64::new(1);
        rt.run(Color(0), move || {
            listener
                .serve(Color(0), move |stream: TcpStream, _| {
                    let color = Color(next.fetch_add(1, Ordering::Relaxed));
                    let mut conn = Conn::default();
                    let watch =
                        io::watch_with(stream, Interest::READ_WRITE, color, move |s, ev| {
                            conn.on_event(s, ev)
                        });
                    if let Err(e) = watch {
                        eprintln!("echo_probe: cannot watch a connection: {e}");
                    }
                })
                .expect("serve");
        })
        .expect("run");
    });
    (addr, handle, thread)
}

fn tokio_server(rt: &tokio::runtime::Runtime) -> SocketAddr {
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    rt.spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

/// Round trips per second over `conns` connections to `addr` for `secs`.
fn client(addr: SocketAddr, conns: usize, bytes: usize, secs: f64, pin: bool) -> f64 {
    std::thread::spawn(move || {
        if pin {
            pin_as(1);
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(async move {
            let done = Arc::new(AtomicU64::new(0));
            let start = Instant::now();
            let end = start + Duration::from_secs_f64(secs);
            let mut tasks = Vec::new();
            for _ in 0..conns {
                let done = done.clone();
                let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
                s.set_nodelay(true).expect("nodelay");
                tasks.push(tokio::spawn(async move {
                    let msg = vec![7u8; bytes];
                    let mut back = vec![0u8; bytes];
                    while Instant::now() < end {
                        s.write_all(&msg).await.expect("write");
                        s.read_exact(&mut back).await.expect("read");
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
            for t in tasks {
                t.await.expect("client task");
            }
            done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
        })
    })
    .join()
    .expect("client thread")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut arg = |d: f64| args.next().and_then(|a| a.parse().ok()).unwrap_or(d);
    let (conns, bytes, secs, reps) = (arg(64.0) as usize, arg(64.0) as usize, arg(1.0), arg(7.0));
    let split = std::env::var("SPLIT").is_ok_and(|v| v == "1");
    let workers: usize = if split {
        1
    } else {
        std::env::var("WORKERS").ok().and_then(|w| w.parse().ok()).unwrap_or(2)
    };
    let (ochre_addr, handle, thread) = ochre_server(workers);
    let tokio_rt = ochre_bench::peers::tokio_multi_thread_with_drivers(workers).expect("tokio");
    let tokio_addr = tokio_server(&tokio_rt);
    let mut rates: [Vec<f64>; 2] = Default::default();
    let busy = std::env::var("BUSY").is_ok_and(|v| v == "1").then_some(1);
    ochre_bench::actors::with_busy_cpu(busy, || {
        for rep in 0..reps as usize {
            let order = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
            for s in order {
                let addr = if s == 0 { ochre_addr } else { tokio_addr };
                rates[s].push(client(addr, conns, bytes, secs, split));
            }
        }
    });
    let (o, t) = (median(&rates[0]), median(&rates[1]));
    let quotients: Vec<f64> = rates[0].iter().zip(&rates[1]).map(|(a, b)| a / b).collect();
    println!(
        "echo ({conns} connections, {bytes} B, {workers} workers{}{}): ochre {:.0}/s, tokio {:.0}/s; \
         ochre/tokio {:.3} (paired {:.3}-{:.3})",
        if split { ", client on its own CPU" } else { "" },
        if busy.is_some() { ", CPU 1 busy" } else { "" },
        o,
        t,
        o / t,
        quotients.iter().cloned().fold(f64::MAX, f64::min),
        quotients.iter().cloned().fold(0.0, f64::max),
    );
    handle.shutdown();
    let _ = thread.join();
}

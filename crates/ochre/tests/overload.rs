//! A listener with an `Overload` at the descriptor limit: with nothing to shed, a new client is
//! refused at once through the reserve descriptor; when the server can shed, the descriptor it
//! frees is used to accept the new client. Its own test binary: it lowers this process's
//! descriptor limit and fills the descriptor table itself.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ochre::io::net::Overload;
use ochre::io::Listener;
use ochre::{Color, Runtime};
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Connections that fill the server's descriptors.
const HOLDERS: usize = 8;

/// The server keeps every connection it accepts, oldest first.
type Held = Arc<Mutex<Vec<TcpStream>>>;

struct Shedding {
    held: Held,
    /// Whether `shed` may close the oldest held connection.
    may_shed: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
}

impl Overload for Shedding {
    fn shed(&mut self) -> usize {
        if !self.may_shed.load(Ordering::Relaxed) {
            return 0;
        }
        let mut held = self.held.lock().unwrap();
        if held.is_empty() {
            return 0;
        }
        drop(held.remove(0));
        1
    }

    fn refuse(&mut self, mut stream: TcpStream, _: SocketAddr) {
        let _ = stream.write_all(b"busy\n");
        self.refused.fetch_add(1, Ordering::Relaxed);
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(64)
}

fn socket() -> OwnedFd {
    rustix::net::socket(rustix::net::AddressFamily::INET, rustix::net::SocketType::STREAM, None)
        .unwrap()
}

fn connect(fd: OwnedFd, addr: SocketAddr) -> TcpStream {
    rustix::net::connect(&fd, &addr).unwrap();
    let s = TcpStream::from(fd);
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn at_the_limit_a_listener_refuses_from_its_reserve_or_accepts_into_what_was_shed() {
    let rt = Arc::new(Runtime::builder().workers(2).pin(false).build().unwrap());
    let held: Held = Arc::default();
    let may_shed = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicUsize::new(0));
    let overload =
        Shedding { held: held.clone(), may_shed: may_shed.clone(), refused: refused.clone() };
    let listener = Listener::bind("127.0.0.1:0").unwrap().shed_with(overload);
    let addr = listener.local_addr().unwrap();
    let h = held.clone();
    rt.handle().serve(listener, Color(1), move |s, _| h.lock().unwrap().push(s)).unwrap();
    let r = rt.clone();
    let run = std::thread::spawn(move || r.run(Color(2), || {}).unwrap());

    // The runtime running and every descriptor it makes made: one connection in and out, then
    // the descriptor count holds still.
    drop(TcpStream::connect(addr).unwrap());
    wait_for("a first connection", || held.lock().unwrap().len() == 1);
    held.lock().unwrap().clear();
    let mut last = (0, 0);
    wait_for("the descriptor count to settle", || {
        std::thread::sleep(Duration::from_millis(20));
        let n = open_fds();
        last = if n == last.0 { (n, last.1 + 1) } else { (n, 0) };
        last.1 >= 3
    });
    let holder_fds: Vec<OwnedFd> = (0..HOLDERS).map(|_| socket()).collect();
    let (refused_fd, shed_fd) = (socket(), socket());
    let old = getrlimit(Resource::Nofile);
    let limit = (open_fds() + HOLDERS + 32) as u64;
    setrlimit(Resource::Nofile, Rlimit { current: Some(limit), maximum: old.maximum }).unwrap();
    let mut fillers: Vec<File> = std::iter::from_fn(|| File::open("/dev/null").ok()).collect();
    fillers.truncate(fillers.len() - HOLDERS);
    let mut holders: Vec<TcpStream> = holder_fds.into_iter().map(|fd| connect(fd, addr)).collect();
    wait_for("the holders to be accepted", || held.lock().unwrap().len() == HOLDERS);

    // Nothing to shed: refused at once, from the reserve.
    let start = Instant::now();
    let mut first = connect(refused_fd, addr);
    let mut answer = String::new();
    first.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, "busy\n");
    assert!(start.elapsed() < Duration::from_secs(1), "refused after {:?}", start.elapsed());
    assert_eq!(refused.load(Ordering::Relaxed), 1);

    // Something to shed: the oldest holder is closed and the new client accepted in its place.
    // (After a moment: the refusing listener drains its queue to the end, and a client arriving
    // before it is done is refused too.)
    std::thread::sleep(Duration::from_millis(50));
    may_shed.store(true, Ordering::Relaxed);
    let mut second = connect(shed_fd, addr);
    let mut byte = [0u8; 1];
    assert_eq!(holders[0].read(&mut byte).unwrap(), 0, "the oldest connection was shed");
    wait_for("the new client to be accepted", || held.lock().unwrap().len() == HOLDERS);
    second.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    assert!(second.read(&mut byte).is_err(), "accepted and held, not refused");
    assert_eq!(refused.load(Ordering::Relaxed), 1);

    drop(fillers);
    setrlimit(Resource::Nofile, old).unwrap();
    holders.clear();
    rt.handle().shutdown();
    let report = run.join().unwrap();
    assert!(report.total().accept_errors >= 2, "{:?}", report.total());
}

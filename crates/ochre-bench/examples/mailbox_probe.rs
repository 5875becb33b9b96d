//! Diagnostic (issue 17): what a *mailbox core* would give the actor programs, measured against
//! tokio-mt and today's ochre in one process, the systems alternated.
//!
//! Today a post is an event: routed on the poster, batched to the color's home, routed again
//! there, queued per color, and run in a turn with its bookkeeping. On `fork-join empty` that is
//! 3.4 times tokio's instructions per message (callgrind, `bench actors`, one repetition each:
//! 1,173M against 341M), and the receiving worker alone spends about 400 instructions a
//! message taking it from its inbox (`fanout_probe 60 720000 1 remote data`).
//!
//! The mailbox core here is the other design: each color is a task with a lock-free mailbox of
//! closures and a state word. A post pushes onto the mailbox and, if the color was idle,
//! schedules the color on the *posting* worker (a LIFO slot, then a local deque that idle
//! workers steal from, crossbeam-deque). A scheduled color runs on one worker at a time (the
//! state word), drains up to a budget of messages, and goes idle or back to the queue. Colors
//! keep exclusion (one runner), order per poster (a FIFO mailbox) and exactly once; there is no
//! home, no lending protocol, no batching, no statistics, no I/O: a probe of the core's cost,
//! not a runtime. Two mailboxes: `proto-node` (Vyukov's intrusive MPSC queue, a node per
//! message) and `proto-seg` (crossbeam's segment queue, 31 slots a block, closures of up to 32
//! bytes in the slot).
//!
//! Found (2 workers, quiet, 3 processes, medians of 5, ratio to tokio-mt; the probe's programs
//! are `bench actors`' at the quick size, every system with mimalloc and a leaked actor system):
//!
//! | program | proto-node | proto-seg | ochre |
//! |---|---|---|---|
//! | pingpong | 4.9-6.0 | 4.5-6.0 | 2.9-4.1 |
//! | counting | 1.30-1.52 | 1.35-1.43 | 1.03-1.38 |
//! | ring, 1 token | 3.1-7.1 | 1.6-4.2 | 1.3-4.6 |
//! | ring, 64 tokens | 0.75-1.09 | 0.45-0.66 | 0.45-0.66 |
//! | big | 1.25-1.39 | 1.26-1.40 | 0.72-1.94 |
//! | fork-join empty | 0.38-0.42 | 0.77-1.11 | 0.32-0.38 |
//! | fork-join 1 us | 0.91 | 0.93-0.94 | 0.80-0.84 |
//! | chameneos | 1.08-1.22 | 1.46-1.52 | 1.00-1.63 |
//! | bank | 0.43-0.48 | 0.44-0.53 | 0.65-0.74 |
//!
//! So no single mailbox wins everywhere: a node per message runs chains fastest (a fresh node
//! is in the poster's cache), blocks run floods (one allocation per 31 messages, lines shared by
//! neighbouring messages); both lose the fan-in of `bank` (every account acknowledges to the
//! teller: both workers push on one mailbox's lines), where ochre's batches win. With the
//! system allocator instead of mimalloc, `proto-node`'s fork-join ran 3.3M msg/s: glibc's frees
//! from the other thread were half of its samples (a mailbox core would take nodes from EMA).
//!
//! `mailbox_probe [REPS]`; `OCHRE_ACTORS=name` keeps the programs whose name contains it;
//! `SYSTEMS=proto-node,proto-seg,ochre,tokio-mt` (the default; the last is the reference);
//! `COUNT=1` prints how many times the prototype scheduled a color and stole.

use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread::Thread;
use std::time::{Duration, Instant};

// The same allocator for every system of the probe: a mailbox core would take its nodes from
// EMA, not glibc, whose frees from another thread were half of the prototype's samples.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use crossbeam_deque::{Steal, Stealer, Worker as Deque};
use ochre::{Color, ColorCell, Runtime};
use ochre_bench::actors::{self, Cx, Program, Visit};
use ochre_bench::harness::median;

// ---------------------------------------------------------------------------------------------
// The mailbox: a segment queue (crossbeam's `SegQueue`: blocks of 31 slots, so one allocation
// per 31 messages and lines shared by neighbouring messages) of closures stored inline in the
// slot when they fit 32 bytes, boxed otherwise.

/// Closure bytes kept in the slot.
const INLINE: usize = 32;

struct Message {
    /// Runs (`true`) or drops (`false`) the closure stored in `data`.
    call: unsafe fn(*mut MaybeUninit<[usize; INLINE / 8]>, bool),
    data: MaybeUninit<[usize; INLINE / 8]>,
}

// SAFETY: a `Message` holds a `Send` closure (or a box of one).
unsafe impl Send for Message {}

impl Message {
    fn new<F: FnOnce() + Send + 'static>(f: F) -> Message {
        let mut data = MaybeUninit::<[usize; INLINE / 8]>::uninit();
        if size_of::<F>() <= INLINE && align_of::<F>() <= 8 {
            // SAFETY: `data` has room and alignment for `F`; read back once by `call_inline`.
            unsafe { data.as_mut_ptr().cast::<F>().write(f) };
            Message { call: call_inline::<F>, data }
        } else {
            let b = Box::into_raw(Box::new(f));
            // SAFETY: a pointer fits the slot.
            unsafe { data.as_mut_ptr().cast::<*mut F>().write(b) };
            Message { call: call_boxed::<F>, data }
        }
    }

    fn run(mut self) {
        // SAFETY: the closure stored by `new`, taken once (`Message` has no drop of its own).
        unsafe { (self.call)(&mut self.data, true) }
    }
}

unsafe fn call_inline<F: FnOnce()>(d: *mut MaybeUninit<[usize; INLINE / 8]>, run: bool) {
    // SAFETY: `new` stored an `F` there; taken once.
    let f = unsafe { d.cast::<F>().read() };
    if run {
        f()
    }
}

unsafe fn call_boxed<F: FnOnce()>(d: *mut MaybeUninit<[usize; INLINE / 8]>, run: bool) {
    // SAFETY: `new` stored a `Box<F>`'s pointer there; taken once.
    let f = unsafe { Box::from_raw(d.cast::<*mut F>().read()) };
    if run {
        f()
    }
}

/// A color's mailbox: many posters, one runner at a time.
trait Mailbox: Send + Sync + 'static {
    fn new() -> Self;
    fn push(&self, m: Message);
    /// Only by the color's runner.
    fn pop(&self) -> Option<Message>;
    /// Only by the color's runner.
    fn is_empty(&self) -> bool;
}

impl Mailbox for crossbeam_queue::SegQueue<Message> {
    fn new() -> Self {
        crossbeam_queue::SegQueue::new()
    }
    fn push(&self, m: Message) {
        crossbeam_queue::SegQueue::push(self, m)
    }
    fn pop(&self) -> Option<Message> {
        crossbeam_queue::SegQueue::pop(self)
    }
    fn is_empty(&self) -> bool {
        crossbeam_queue::SegQueue::is_empty(self)
    }
}

/// Vyukov's intrusive MPSC queue: one node (allocation) per message, a swap per push.
struct NodeQueue {
    /// Producers swap themselves in here.
    tail: AtomicPtr<Node>,
    /// The consumer's position (only the color's runner touches it).
    head: Cell<*mut Node>,
    stub: *mut Node,
}

struct Node {
    next: AtomicPtr<Node>,
    message: MaybeUninit<Message>,
}

// SAFETY: producers touch only `tail` and the nodes they own; `head` is the one runner's.
unsafe impl Send for NodeQueue {}
unsafe impl Sync for NodeQueue {}

impl NodeQueue {
    fn link(&self, n: *mut Node) {
        // SAFETY: `n` is a fresh node, or the stub that the consumer passed: no one else reads
        // it until the swap publishes it (the stub's old link must go).
        unsafe { (*n).next.store(ptr::null_mut(), Ordering::Relaxed) };
        let prev = self.tail.swap(n, Ordering::SeqCst);
        // SAFETY: `prev` stays alive until the consumer passed it, which needs this link.
        unsafe { (*prev).next.store(n, Ordering::Release) };
    }

    /// Takes the message of a node the consumer passed and frees the node (never the stub).
    fn take(&self, n: *mut Node) -> Message {
        // SAFETY: `n` is a message node the consumer passed: no producer touches it any more.
        let b = unsafe { Box::from_raw(n) };
        // SAFETY: written by `push`, read once.
        unsafe { b.message.assume_init_read() }
    }
}

impl Mailbox for NodeQueue {
    fn new() -> Self {
        let stub = Box::into_raw(Box::new(Node {
            next: AtomicPtr::new(ptr::null_mut()),
            message: MaybeUninit::uninit(),
        }));
        NodeQueue { tail: AtomicPtr::new(stub), head: Cell::new(stub), stub }
    }

    fn push(&self, m: Message) {
        let n = Box::into_raw(Box::new(Node {
            next: AtomicPtr::new(ptr::null_mut()),
            message: MaybeUninit::new(m),
        }));
        self.link(n);
    }

    fn pop(&self) -> Option<Message> {
        // SAFETY: nodes between `head` and `tail` are alive (freed only once passed); only the
        // runner calls this, so `head` and the nodes it passed are its own.
        unsafe {
            let mut head = self.head.get();
            let mut next = (*head).next.load(Ordering::Acquire);
            if head == self.stub {
                if next.is_null() {
                    if self.tail.load(Ordering::Acquire) == self.stub {
                        return None;
                    }
                    next = spin_next(head);
                }
                self.head.set(next);
                head = next;
                next = (*next).next.load(Ordering::Acquire);
            }
            if next.is_null() {
                if self.tail.load(Ordering::Acquire) == head {
                    self.link(self.stub);
                }
                next = spin_next(head);
            }
            self.head.set(next);
            Some(self.take(head))
        }
    }

    fn is_empty(&self) -> bool {
        self.head.get() == self.stub && self.tail.load(Ordering::SeqCst) == self.stub
    }
}

/// Waits out a producer between its swap and its link (a few instructions).
unsafe fn spin_next(n: *mut Node) -> *mut Node {
    loop {
        // SAFETY: the caller's node is alive (see `pop`).
        let next = unsafe { (*n).next.load(Ordering::Acquire) };
        if !next.is_null() {
            return next;
        }
        std::hint::spin_loop();
    }
}

// ---------------------------------------------------------------------------------------------
// Colors and workers.

const IDLE: u8 = 0;
const SCHEDULED: u8 = 1;
/// Messages a color runs before it goes to the back of the queue.
const BUDGET: usize = 64;

#[repr(align(128))]
struct ColorTask<M> {
    state: AtomicU8,
    mailbox: M,
}

struct Shared<M> {
    colors: Vec<ColorTask<M>>,
    stealers: Vec<Stealer<u32>>,
    injector: crossbeam_deque::Injector<u32>,
    sleepers: Mutex<Vec<Thread>>,
    sleeping: AtomicUsize,
    stop: AtomicBool,
}

struct Local {
    id: usize,
    lifo: Cell<Option<u32>>,
    deque: Deque<u32>,
}

thread_local! {
    static LOCAL: Cell<*const Local> = const { Cell::new(ptr::null()) };
}

fn post<F: FnOnce() + Send + 'static, M: Mailbox>(shared: &'static Shared<M>, color: u32, f: F) {
    let c = &shared.colors[color as usize];
    c.mailbox.push(Message::new(f));
    // The push before the look at the state, as the runner's going idle before its look at
    // the mailbox: one of the two sees the other.
    std::sync::atomic::fence(Ordering::SeqCst);
    if c.state.load(Ordering::SeqCst) == IDLE
        && c.state.compare_exchange(IDLE, SCHEDULED, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    {
        schedule(shared, color);
    }
}

static COUNT: AtomicBool = AtomicBool::new(false);
static SCHEDULES: AtomicU64 = AtomicU64::new(0);
static STEALS: AtomicU64 = AtomicU64::new(0);

fn schedule<M>(shared: &'static Shared<M>, color: u32) {
    if COUNT.load(Ordering::Relaxed) {
        SCHEDULES.fetch_add(1, Ordering::Relaxed);
    }
    let l = LOCAL.with(|l| l.get());
    if l.is_null() {
        shared.injector.push(color);
        wake_one(shared);
        return;
    }
    // SAFETY: set by the worker thread for its whole life.
    let l = unsafe { &*l };
    if let Some(prev) = l.lifo.replace(Some(color)) {
        l.deque.push(prev);
        if shared.sleeping.load(Ordering::SeqCst) > 0 {
            wake_one(shared);
        }
    }
}

fn wake_one<M>(shared: &Shared<M>) {
    if let Some(t) = shared.sleepers.lock().unwrap().pop() {
        shared.sleeping.fetch_sub(1, Ordering::SeqCst);
        t.unpark();
    }
}

fn run_color<M: Mailbox>(shared: &'static Shared<M>, l: &Local, color: u32) {
    let c = &shared.colors[color as usize];
    for _ in 0..BUDGET {
        match c.mailbox.pop() {
            Some(m) => m.run(),
            None => break,
        }
    }
    if !c.mailbox.is_empty() {
        l.deque.push(color);
        return;
    }
    c.state.store(IDLE, Ordering::SeqCst);
    std::sync::atomic::fence(Ordering::SeqCst);
    if !c.mailbox.is_empty()
        && c.state.compare_exchange(IDLE, SCHEDULED, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    {
        l.deque.push(color);
    }
}

fn find<M>(shared: &'static Shared<M>, l: &Local) -> Option<u32> {
    if let Some(c) = l.lifo.take() {
        return Some(c);
    }
    if let Some(c) = l.deque.pop() {
        return Some(c);
    }
    loop {
        match shared.injector.steal_batch_and_pop(&l.deque) {
            Steal::Success(c) => return Some(c),
            Steal::Retry => continue,
            Steal::Empty => break,
        }
    }
    let n = shared.stealers.len();
    for k in 1..n {
        let s = &shared.stealers[(l.id + k) % n];
        loop {
            match s.steal_batch_and_pop(&l.deque) {
                Steal::Success(c) => {
                    STEALS.fetch_add(1, Ordering::Relaxed);
                    return Some(c);
                }
                Steal::Retry => continue,
                Steal::Empty => break,
            }
        }
    }
    None
}

fn worker<M: Mailbox>(shared: &'static Shared<M>, id: usize, deque: Deque<u32>, cpu: usize) {
    let _ = ochre::topology::pin_current_thread(cpu);
    let l = Local { id, lifo: Cell::new(None), deque };
    LOCAL.with(|p| p.set(&l));
    'outer: while !shared.stop.load(Ordering::Relaxed) {
        if let Some(c) = find(shared, &l) {
            run_color(shared, &l, c);
            continue;
        }
        // Spin a little, then sleep.
        let t = Instant::now();
        while t.elapsed() < Duration::from_micros(30) {
            if let Some(c) = find(shared, &l) {
                run_color(shared, &l, c);
                continue 'outer;
            }
            std::hint::spin_loop();
        }
        {
            let mut s = shared.sleepers.lock().unwrap();
            s.push(std::thread::current());
            shared.sleeping.fetch_add(1, Ordering::SeqCst);
        }
        // Re-check after announcing the sleep: a post that scheduled before it saw no sleeper.
        if let Some(c) = find(shared, &l) {
            take_back_sleep(shared);
            run_color(shared, &l, c);
            continue;
        }
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        std::thread::park_timeout(Duration::from_millis(10));
        take_back_sleep(shared);
    }
    LOCAL.with(|p| p.set(ptr::null()));
}

fn take_back_sleep<M>(shared: &Shared<M>) {
    let me = std::thread::current().id();
    let mut s = shared.sleepers.lock().unwrap();
    if let Some(i) = s.iter().position(|t| t.id() == me) {
        s.swap_remove(i);
        shared.sleeping.fetch_sub(1, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------------
// The actor layer on each core, with a leaked system (no reference count per message).

struct ProtoSystem<P: Program, M: 'static> {
    shared: &'static Shared<M>,
    states: Vec<UnsafeCell<P::State>>,
    result: AtomicU64,
    done: AtomicBool,
}

// SAFETY: actor `i`'s state is touched only by color `i`'s runner, one at a time.
unsafe impl<P: Program, M: Sync + 'static> Sync for ProtoSystem<P, M> {}

struct ProtoCx<P: Program, M: 'static>(&'static ProtoSystem<P, M>);

impl<P: Program, M: Mailbox> Cx<P::Msg> for ProtoCx<P, M> {
    fn send(&self, to: usize, msg: P::Msg) {
        let sys = self.0;
        post(sys.shared, to as u32, move || {
            // SAFETY: this runs as color `to`, alone.
            let s = unsafe { &mut *sys.states[to].get() };
            P::handle(to, s, msg, &ProtoCx(sys));
        });
    }
    fn done(&self, result: u64) {
        self.0.result.store(result, Ordering::SeqCst);
        self.0.done.store(true, Ordering::SeqCst);
    }
}

fn run_proto<P: Program, M: Mailbox>(prog: &P, workers: usize) -> Result<f64, String> {
    let n = prog.count();
    let deques: Vec<Deque<u32>> = (0..workers).map(|_| Deque::new_fifo()).collect();
    let shared: &'static Shared<M> = Box::leak(Box::new(Shared {
        colors: (0..n)
            .map(|_| ColorTask { state: AtomicU8::new(IDLE), mailbox: Mailbox::new() })
            .collect(),
        stealers: deques.iter().map(|d| d.stealer()).collect(),
        injector: crossbeam_deque::Injector::new(),
        sleepers: Mutex::new(Vec::new()),
        sleeping: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
    }));
    let sys: &'static ProtoSystem<P, M> = Box::leak(Box::new(ProtoSystem::<P, M> {
        shared,
        states: prog.actors().into_iter().map(UnsafeCell::new).collect(),
        result: AtomicU64::new(0),
        done: AtomicBool::new(false),
    }));
    let cpus = ochre::topology::allowed_cpus().map_err(|e| e.to_string())?;
    let t = Instant::now();
    let threads: Vec<_> = deques
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            let cpu = cpus[i % cpus.len()];
            std::thread::spawn(move || worker(shared, i, d, cpu))
        })
        .collect();
    for (to, msg) in prog.start() {
        ProtoCx(sys).send(to, msg);
    }
    while !sys.done.load(Ordering::SeqCst) {
        if t.elapsed() > Duration::from_secs(60) {
            break;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    let elapsed = t.elapsed();
    shared.stop.store(true, Ordering::SeqCst);
    for t in &threads {
        t.thread().unpark();
    }
    for t in threads {
        let _ = t.join();
    }
    let got = sys.result.load(Ordering::SeqCst);
    if !sys.done.load(Ordering::SeqCst) || got != prog.expected() {
        return Err(format!("proto: wrong result {got}, expected {}", prog.expected()));
    }
    if std::env::var_os("COUNT").is_some() {
        eprintln!(
            "proto: {} messages, {} schedules, {} steals",
            prog.messages(),
            SCHEDULES.swap(0, Ordering::Relaxed),
            STEALS.swap(0, Ordering::Relaxed)
        );
    }
    Ok(prog.messages() as f64 / elapsed.as_secs_f64())
}

/// Today's ochre with the same leaked actor layer.
struct OchreSystem<P: Program> {
    states: Vec<ColorCell<P::State>>,
    result: AtomicU64,
}

struct OchreCx<P: Program>(&'static OchreSystem<P>);

impl<P: Program> Cx<P::Msg> for OchreCx<P> {
    fn send(&self, to: usize, msg: P::Msg) {
        let sys = self.0;
        ochre::post(sys.states[to].color(), move || {
            let _ = sys.states[to].with(|s| P::handle(to, s, msg, &OchreCx(sys)));
        });
    }
    fn done(&self, result: u64) {
        self.0.result.store(result, Ordering::SeqCst);
    }
}

fn run_ochre_leaked<P: Program>(rt: &Runtime, prog: &P) -> Result<f64, String> {
    let sys: &'static OchreSystem<P> = Box::leak(Box::new(OchreSystem::<P> {
        states: (prog.actors().into_iter().enumerate())
            .map(|(i, s)| ColorCell::new(actors::plain_color(i), s))
            .collect(),
        result: AtomicU64::new(0),
    }));
    let start = prog.start();
    let report = rt
        .run(Color(1), move || {
            for (to, msg) in start {
                OchreCx(sys).send(to, msg);
            }
        })
        .map_err(|e| e.to_string())?;
    let got = sys.result.load(Ordering::SeqCst);
    if got != prog.expected() {
        return Err(format!("ochre: wrong result {got}, expected {}", prog.expected()));
    }
    Ok(prog.messages() as f64 / report.elapsed.as_secs_f64())
}

// ---------------------------------------------------------------------------------------------

struct Probe {
    reps: usize,
    filter: Option<String>,
    systems: Vec<String>,
    rt: Runtime,
    tokio: tokio::runtime::Runtime,
}

impl Visit for Probe {
    fn visit<P: Program>(&mut self, name: &str, size: u64, make: impl Fn(u64) -> P) {
        if self.filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            return;
        }
        let prog = make(size);
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); self.systems.len()];
        // Warm each system once.
        for rep in 0..=self.reps {
            for k in 0..self.systems.len() {
                // Alternate the order from one repetition to the next.
                let i = if rep % 2 == 0 { k } else { self.systems.len() - 1 - k };
                let r = match self.systems[i].as_str() {
                    "proto-node" => run_proto::<P, NodeQueue>(&prog, 2),
                    "proto-seg" => run_proto::<P, crossbeam_queue::SegQueue<Message>>(&prog, 2),
                    "ochre" => run_ochre_leaked(&self.rt, &prog),
                    _ => actors::run_tokio(&prog, &[self.tokio.handle().clone()], |_| 0),
                };
                match r {
                    Ok(v) if rep > 0 => rates[i].push(v),
                    Ok(_) => {}
                    Err(e) => eprintln!("{name} {}: {e}", self.systems[i]),
                }
            }
        }
        let meds: Vec<f64> = rates.iter().map(|v| median(v)).collect();
        let base = meds[self.systems.len() - 1];
        let mut line = format!("{name:<24}");
        for (s, m) in self.systems.iter().zip(&meds) {
            line += &format!("  {s} {:>6.2}M ({:.2}x)", m / 1e6, m / base);
        }
        println!("{line}");
    }
}

fn main() {
    COUNT.store(std::env::var_os("COUNT").is_some(), Ordering::Relaxed);
    let reps = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let systems: Vec<String> = std::env::var("SYSTEMS")
        .unwrap_or_else(|_| "proto-node,proto-seg,ochre,tokio-mt".into())
        .split(',')
        .map(String::from)
        .collect();
    let rt = Runtime::builder().workers(2).build().expect("runtime");
    let tokio =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().expect("tokio");
    let mut p = Probe { reps, filter: std::env::var("OCHRE_ACTORS").ok(), systems, rt, tokio };
    println!("medians of {reps}, ratio to the last system");
    actors::suite(true, &mut p);
}

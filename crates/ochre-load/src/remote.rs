//! Several injectors as one: a master and workers (`ochre load --worker`), as the thesis's
//! master/slave injector.
//!
//! How a distributed run flows, over one TCP connection per worker, one JSON message per line:
//! the master sends each worker its [`Job`] (the target, its share of the load model, the
//! phases); each worker resolves the target, loads what `--verify` needs, builds its runtime and
//! answers `Ready` (or `Error`); once every worker is ready the master sends `Start` to all and
//! starts its own share, so the phases begin together (to within a round trip; the warm-up
//! absorbs that). Each injector then runs its share; the workers send back their
//! [`LoadReport`], histogram included, and the master merges them
//! ([`LoadReport::merge`]): percentiles of the whole, not averages of percentiles.
//!
//! Everything is bounded: connecting, waiting for `Ready` and waiting for a report all have
//! deadlines derived from the phases, so a dead or hung worker is reported by address and the
//! others' results are kept (the merged report's notes say who is missing). A worker serves
//! jobs one after another, each on a fresh runtime; with `jobs` it stops after that many. What
//! a worker cannot serve (a connection that brings no job, a failed job) goes to the `log`
//! facade as a warning, and the worker goes on.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use ochre::Runtime;
use serde::{Deserialize, Serialize};

use crate::fileset::Mix;
use crate::{Error, LoadReport, Model, Phases, Target};

/// What one injector runs: the target, the model (its share), the phases.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Job {
    /// Server address.
    pub addr: SocketAddr,
    /// `Host` header.
    pub host: String,
    /// Paths requested.
    pub paths: Vec<String>,
    /// Weights of the paths (a file set's mix), or in turn if absent.
    pub weights: Option<Vec<f64>>,
    /// Directory holding the files to verify bodies against, on the injector's host.
    pub verify: Option<PathBuf>,
    /// The load model.
    pub model: Model,
    /// Warm-up, not recorded.
    pub warmup: Duration,
    /// Measured phase.
    pub measure: Duration,
    /// Request timeout.
    pub timeout: Duration,
    /// Unrecorded load after the measured phase.
    #[serde(default)]
    pub cooldown: Duration,
    /// Measured responses after which this injector's measured phase ends.
    #[serde(default)]
    pub requests: Option<u64>,
}

impl Job {
    /// The target this job loads (bodies loaded if it verifies).
    pub fn target(&self) -> Result<Target, Error> {
        if self.paths.is_empty() {
            return Err(Error::Invalid("no path to request".into()));
        }
        if self.weights.as_ref().is_some_and(|w| w.len() != self.paths.len()) {
            return Err(Error::Invalid("the mix has not one weight per path".into()));
        }
        let mut t = Target {
            addr: self.addr,
            host: self.host.clone(),
            paths: self.paths.clone(),
            mix: self.weights.as_deref().map(Mix::new),
            bodies: None,
        };
        if let Some(dir) = &self.verify {
            t.verify_against(dir)?;
        }
        Ok(t)
    }

    /// Its phases (no progress callback).
    pub fn phases(&self) -> Phases {
        Phases {
            cooldown: self.cooldown,
            requests: self.requests,
            ..Phases::new(self.warmup, self.measure, self.timeout)
        }
    }

    /// Runs it here.
    pub fn run(&self, rt: &Runtime, phases: &Phases) -> Result<LoadReport, Error> {
        self.model.run(rt, &self.target()?, phases)
    }

    /// Share `i` of `n` of this job: the model's share and the request limit's.
    pub fn share(&self, i: usize, n: usize) -> Result<Job, Error> {
        let requests =
            self.requests.map(|r| r * (i as u64 + 1) / n as u64 - r * i as u64 / n as u64);
        Ok(Job { model: self.model.share(i, n)?, requests, ..self.clone() })
    }

    /// How long a whole run may take, with slack: past this a worker is given up.
    fn bound(&self) -> Duration {
        self.warmup + self.measure + self.cooldown + self.timeout * 2 + Duration::from_secs(30)
    }
}

#[derive(Debug, Serialize, Deserialize)]
enum Message {
    Job(Box<Job>),
    Ready,
    Start,
    Report(Box<LoadReport>),
    Error(String),
}

/// A failed exchange with the other side, said in a few words.
fn protocol(what: impl std::fmt::Display) -> Error {
    Error::Protocol(what.to_string())
}

fn send(stream: &mut TcpStream, m: &Message) -> Result<(), Error> {
    let mut line = serde_json::to_vec(m).map_err(protocol)?;
    line.push(b'\n');
    stream.write_all(&line).map_err(|e| protocol(format_args!("sending: {e}")))
}

fn receive(reader: &mut BufReader<TcpStream>, within: Duration) -> Result<Message, Error> {
    reader.get_ref().set_read_timeout(Some(within)).map_err(protocol)?;
    let mut line = String::new();
    match reader.read_line(&mut line) {
        Ok(0) => Err(protocol("connection closed")),
        Ok(_) => {
            serde_json::from_str(&line).map_err(|e| protocol(format_args!("bad message: {e}")))
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(protocol(format_args!("no answer within {within:?}")))
        }
        Err(e) => Err(protocol(e)),
    }
}

/// Serves jobs from masters on `listener`, one at a time, each on a runtime from `runtime`;
/// stops after `jobs` jobs if given (a connection that brings no job does not count). A failed
/// job is answered with its error; the worker goes on.
pub fn serve_worker(
    listener: TcpListener,
    jobs: Option<usize>,
    runtime: impl Fn() -> Result<Runtime, ochre::Error>,
) -> Result<(), Error> {
    let mut served = 0;
    while jobs.is_none_or(|n| served < n) {
        let (stream, peer) =
            listener.accept().map_err(|e| protocol(format_args!("accepting: {e}")))?;
        let mut out = stream.try_clone().map_err(protocol)?;
        let mut reader = BufReader::new(stream);
        let job = match receive(&mut reader, Duration::from_secs(30)) {
            Ok(Message::Job(job)) => job,
            Ok(other) => {
                log::warn!("{peer}: expected a job, got {other:?}");
                continue;
            }
            Err(e) => {
                log::warn!("{peer}: {e}");
                continue;
            }
        };
        served += 1;
        if let Err(e) = serve_one(&job, &mut reader, &mut out, &runtime) {
            log::warn!("job from {peer}: {e}");
        }
    }
    Ok(())
}

fn serve_one(
    job: &Job,
    reader: &mut BufReader<TcpStream>,
    out: &mut TcpStream,
    runtime: &impl Fn() -> Result<Runtime, ochre::Error>,
) -> Result<(), Error> {
    let prepared = job.target().and_then(|t| Ok((t, runtime()?)));
    let (target, rt) = match prepared {
        Ok(p) => p,
        Err(e) => {
            let _ = send(out, &Message::Error(e.to_string()));
            return Err(e);
        }
    };
    send(out, &Message::Ready)?;
    match receive(reader, Duration::from_secs(60))? {
        Message::Start => {}
        other => return Err(protocol(format_args!("expected start, got {other:?}"))),
    }
    let answer = match job.model.run(&rt, &target, &job.phases()) {
        Ok(r) => Message::Report(Box::new(r)),
        Err(e) => Message::Error(e.to_string()),
    };
    send(out, &answer)
}

/// Runs `job` spread over this process (share 0, on `rt`) and the workers at `remotes`, and
/// merges the reports. Fails only if nothing could run; workers lost during the run are named
/// in the report's notes.
pub fn run_distributed(
    job: &Job,
    remotes: &[SocketAddr],
    rt: &Runtime,
    phases: &Phases,
) -> Result<LoadReport, Error> {
    let n = remotes.len() + 1;
    let mut links = Vec::with_capacity(remotes.len());
    for (i, &addr) in remotes.iter().enumerate() {
        let worker =
            |reason: &dyn std::fmt::Display| Error::Worker { addr, reason: reason.to_string() };
        let share = job.share(i + 1, n)?;
        let stream =
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| worker(&e))?;
        let _ = stream.set_nodelay(true);
        let mut out = stream.try_clone().map_err(|e| worker(&e))?;
        send(&mut out, &Message::Job(Box::new(share))).map_err(|e| worker(&e))?;
        links.push((addr, out, BufReader::new(stream)));
    }
    for (addr, _, reader) in &mut links {
        let worker = |reason: String| Error::Worker { addr: *addr, reason };
        match receive(reader, Duration::from_secs(60)) {
            Ok(Message::Ready) => {}
            Ok(Message::Error(e)) => return Err(worker(e)),
            Ok(other) => return Err(worker(format!("unexpected {other:?}"))),
            Err(e) => return Err(worker(e.to_string())),
        }
    }
    let mut notes = Vec::new();
    for (addr, out, _) in &mut links {
        if let Err(e) = send(out, &Message::Start) {
            notes.push(format!("worker {addr} did not start: {e}"));
        }
    }
    let own = job.share(0, n)?;
    let mut reports = vec![own.run(rt, &Phases { requests: own.requests, ..phases.clone() })?];
    for (addr, _, reader) in &mut links {
        match receive(reader, job.bound()) {
            Ok(Message::Report(r)) => reports.push(*r),
            Ok(Message::Error(e)) => notes.push(format!("worker {addr} failed: {e}")),
            Ok(other) => notes.push(format!("worker {addr}: unexpected {other:?}")),
            Err(e) => notes.push(format!("worker {addr} lost: {e}")),
        }
    }
    let name = format!("{}, over {n} injectors", job.model.describe());
    let mut merged = LoadReport::merge(name, &reports)?;
    merged.notes.extend(notes);
    Ok(merged)
}

//! N-COPY (thesis §6.3, Table 6.4): N independent copies of a server, each on its own CPUs,
//! placed along the topology tree, with connections spread over them either by the kernel or
//! by a load-aware balancer.
//!
//! Placement ([`copies_along`]): the allowed CPUs in the topology's tree order, cut into N
//! contiguous runs of near-equal length, so that a copy's CPUs are as close as the tree allows
//! (the same L2, then the same L3, then the same NUMA node) and copies share as little as
//! possible. More copies than CPUs share CPUs, round robin.
//!
//! Spreading ([`Balance`]):
//! - [`Balance::Kernel`]: every copy has its own listening socket on the same port
//!   (`SO_REUSEPORT`); the kernel hashes each new connection's addresses to one of them,
//!   whatever the copies' load.
//! - [`Balance::LoadAware`]: one listening socket and a front thread that accepts and hands each
//!   new connection ([`crate::Source::Handoff`]) to the copy with the fewest connections
//!   pending (open, plus handed over and not yet taken): a copy slowed down (its CPU shared with
//!   another process) keeps its connections longer and so gets fewer new ones.
//!
//! Invariants: copies are independent servers (no shared state but the port); stopping the
//! whole stops the front first (no new hand-off), then every copy.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::{unbounded, Sender};
use ochre::topology::Topology;
use ochre_http::ServerConfig;

use crate::{start_from, Arch, Plan, Running, Source};

/// How new connections are spread over the copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Balance {
    /// `SO_REUSEPORT`: the kernel's hash of the connection's addresses.
    Kernel,
    /// A front acceptor: to the copy with the fewest pending connections.
    LoadAware,
}

/// The CPUs of `n` copies: `allowed` in `topology`'s tree order (CPUs it does not know go
/// last), cut into `n` contiguous runs of near-equal length; with more copies than CPUs, copy
/// `i` gets CPU `i mod len`. Empty `allowed` or `n == 0`: no copies.
pub fn copies_along(topology: &Topology, allowed: &[usize], n: usize) -> Vec<Vec<usize>> {
    if allowed.is_empty() || n == 0 {
        return Vec::new();
    }
    let mut order: Vec<usize> =
        topology.cpus().iter().copied().filter(|c| allowed.contains(c)).collect();
    let unknown: Vec<usize> = allowed.iter().copied().filter(|c| !order.contains(c)).collect();
    order.extend(unknown);
    if n >= order.len() {
        return (0..n).map(|i| vec![order[i % order.len()]]).collect();
    }
    let (base, extra) = (order.len() / n, order.len() % n);
    let mut at = 0;
    (0..n)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let run = order[at..at + len].to_vec();
            at += len;
            run
        })
        .collect()
}

/// A loopback listening socket with `SO_REUSEPORT` on `addr` (port 0: an ephemeral one).
pub fn reuseport_listener(addr: SocketAddr) -> io::Result<TcpListener> {
    use rustix::net::{bind, listen, socket, sockopt, AddressFamily, SocketType};
    let family = if addr.is_ipv4() { AddressFamily::INET } else { AddressFamily::INET6 };
    let fd = socket(family, SocketType::STREAM, None)?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    sockopt::set_socket_reuseport(&fd, true)?;
    bind(&fd, &addr)?;
    listen(&fd, 4096)?;
    Ok(TcpListener::from(fd))
}

/// Starts `n` copies of `arch` on `cpus` (placed along `topology`), spread by `balance`, each
/// with stage pools of `pool` threads, listening on one loopback port.
pub fn start_copies(
    arch: Arch,
    config: &ServerConfig,
    topology: &Topology,
    cpus: &[usize],
    n: usize,
    pool: usize,
    balance: Balance,
) -> io::Result<Running> {
    let places = copies_along(topology, cpus, n.max(1));
    let mut copies = Vec::with_capacity(places.len());
    match balance {
        Balance::Kernel => {
            let first = reuseport_listener(SocketAddr::from(([127, 0, 0, 1], 0)))?;
            let addr = first.local_addr()?;
            let mut first = Some(first);
            for place in &places {
                let l = match first.take() {
                    Some(l) => l,
                    None => reuseport_listener(addr)?,
                };
                copies.push(start_from(
                    arch,
                    config.clone(),
                    Source::Listen(l),
                    &Plan::new(place.clone(), pool),
                )?);
            }
            Ok(Running::new(addr, Arc::new(AtomicUsize::new(0)), move || drop(copies)))
        }
        Balance::LoadAware => {
            let front = TcpListener::bind("127.0.0.1:0")?;
            let addr = front.local_addr()?;
            let mut inboxes: Vec<Sender<TcpStream>> = Vec::new();
            for place in &places {
                let (tx, rx) = unbounded();
                inboxes.push(tx);
                copies.push(start_from(
                    arch,
                    config.clone(),
                    Source::Handoff(rx),
                    &Plan::new(place.clone(), pool),
                )?);
            }
            let loads: Vec<Arc<AtomicUsize>> = copies.iter().map(|c| c.open.clone()).collect();
            let stop = Arc::new(AtomicBool::new(false));
            let s = stop.clone();
            let front_thread = std::thread::Builder::new()
                .name("ncopy-front".into())
                .spawn(move || balance_loop(&front, &inboxes, &loads, &s))?;
            Ok(Running::new(addr, Arc::new(AtomicUsize::new(0)), move || {
                stop.store(true, Ordering::SeqCst);
                let _ = front_thread.join(); // Drops the inboxes: the copies' hand-offs end.
                drop(copies);
            }))
        }
    }
}

/// The copy to hand the next connection to: fewest pending (open plus queued), ties broken by
/// the turn `next`, so that equal copies take connections in turn.
pub fn pick(pending: &[usize], next: usize) -> usize {
    let n = pending.len().max(1);
    (0..n)
        .map(|k| (next + k) % n)
        .min_by_key(|&i| pending.get(i).copied().unwrap_or(0))
        .unwrap_or(0)
}

fn balance_loop(
    front: &TcpListener,
    inboxes: &[Sender<TcpStream>],
    loads: &[Arc<AtomicUsize>],
    stop: &AtomicBool,
) {
    let source = Source::Listen(match front.try_clone() {
        Ok(l) => l,
        Err(_) => return,
    });
    let mut turn = 0;
    let mut pending = vec![0; inboxes.len()];
    while let Some(stream) = source.next(stop) {
        for (i, p) in pending.iter_mut().enumerate() {
            *p = loads[i].load(Ordering::Relaxed) + inboxes[i].len();
        }
        let i = pick(&pending, turn);
        turn = turn.wrapping_add(1);
        let _ = inboxes[i].send(stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_share_the_deepest_caches_the_tree_allows() {
        // 2 NUMA nodes x 2 L2 x 2 cores: CPUs 0-1 share an L2, 0-3 a node.
        let t = Topology::synthetic("numa:2 l2:2 core:2").unwrap();
        let all: Vec<usize> = (0..8).collect();
        assert_eq!(copies_along(&t, &all, 2), [vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        assert_eq!(copies_along(&t, &all, 4), [vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]);
        for copy in copies_along(&t, &all, 4) {
            assert!(copy
                .iter()
                .all(|&a| copy.iter().all(|&b| t.distance(a, b) <= t.distance(0, 1))));
        }
        // Uneven: the first copies get one more.
        assert_eq!(copies_along(&t, &[0, 1, 2, 4, 5], 2), [vec![0, 1, 2], vec![4, 5]]);
        // More copies than CPUs: shared, round robin.
        assert_eq!(copies_along(&t, &[3, 6], 3), [vec![3], vec![6], vec![3]]);
        assert!(copies_along(&t, &[], 2).is_empty());
        assert!(copies_along(&t, &all, 0).is_empty());
    }

    #[test]
    fn the_balancer_picks_the_least_pending_copy_and_rotates_ties() {
        assert_eq!(pick(&[3, 1, 2], 0), 1);
        assert_eq!(pick(&[0, 0, 0], 0), 0);
        assert_eq!(pick(&[0, 0, 0], 1), 1);
        assert_eq!(pick(&[0, 0, 0], 5), 2);
        assert_eq!(pick(&[], 3), 0);
    }
}

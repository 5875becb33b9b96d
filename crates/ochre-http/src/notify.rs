//! Change notification for a worker's file cache: one inotify instance per cache, watching the
//! directories of the paths the cache holds (the Apache/NUMA paper's invalidation, §7).
//!
//! Invariants:
//! - A change to a file (contents, attributes, its name created, deleted or moved) under a
//!   watched directory is reported by [`DirWatcher::drain`] as that file's path, and the cache
//!   drops the entries of that path: nothing else is revalidated.
//! - `generation` grows when an event cannot be pinned to a file: a directory created, deleted,
//!   moved or re-permissioned, a watch dropped, an event of a watch no longer mapped. The cache
//!   trusts an entry validated at generation `g`, with every directory of its path watched,
//!   without a `stat` while the generation is still `g`; after a bump, each entry is revalidated
//!   by one `stat` at its next request. A queue overflow (events lost) says so, and the cache
//!   empties.
//! - A directory path is mapped to its watch only while that watch still stands for it: any
//!   event that can change what a directory path names forgets every mapping, so a re-created
//!   directory is watched again when next needed. Adding a watch again for a directory already
//!   watched is harmless (the kernel returns the same one, mapped again).
//!
//! Why "fresh at once" holds: the kernel queues an inotify event before the changing system call
//! returns. A client that changes a file and then sends a request sends bytes the server reads
//! after the event is queued, and the cache drains its events at each lookup, after that read.
//! A watch is added before the `stat` that validates an entry, so a change is either seen by
//! that `stat` or queued as an event.
//!
//! Not seen (no event): writes through a hard link whose directory is not watched, writes
//! through a shared memory mapping, changes by other hosts on a network file system. For such
//! roots, `revalidate = "stat"` checks every request with a `stat`.

use std::ffi::OsStr;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustc_hash::{FxHashMap, FxHashSet};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

/// What a watched directory reports: every change to its entries' contents, attributes and
/// names, and its own deletion or move.
const WATCH: WatchFlags = WatchFlags::MODIFY
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::CREATE)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR);

/// Events not pinned to a file (with those that carry no name): a directory path may now name
/// another directory, or none.
const STRUCTURAL: ReadFlags = ReadFlags::ISDIR
    .union(ReadFlags::DELETE_SELF)
    .union(ReadFlags::MOVE_SELF)
    .union(ReadFlags::IGNORED)
    .union(ReadFlags::UNMOUNT);

/// What a drain found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// The generation after the drain.
    pub generation: u64,
    /// Events were lost (queue overflow): trust no entry.
    pub lost: bool,
}

/// One cache's inotify instance.
pub struct DirWatcher {
    fd: OwnedFd,
    /// Watched directory paths (relative to the root; the root is empty).
    watched: FxHashSet<PathBuf>,
    /// The paths of each watch (several when a directory is reached through a link).
    paths: FxHashMap<i32, Vec<PathBuf>>,
    generation: u64,
    /// Room for many events at once (an event is 16 bytes and a name of up to 256).
    buf: Box<[MaybeUninit<u8>]>,
}

impl DirWatcher {
    /// A watcher with nothing watched yet. Fails when the system refuses an inotify instance
    /// (`fs.inotify.max_user_instances` reached, or no inotify).
    pub fn new() -> std::io::Result<DirWatcher> {
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
        Ok(DirWatcher {
            fd,
            watched: FxHashSet::default(),
            paths: FxHashMap::default(),
            generation: 0,
            buf: vec![MaybeUninit::uninit(); 4096].into_boxed_slice(),
        })
    }

    /// Reads every pending event: pushes the paths of changed files to `changed`, bumps the
    /// generation for changes it cannot pin to a file. One `read` (answered "nothing") when
    /// nothing changed.
    pub fn drain(&mut self, changed: &mut Vec<PathBuf>) -> Drained {
        let mut reader = inotify::Reader::new(&self.fd, &mut self.buf);
        let (mut structural, mut lost) = (false, false);
        loop {
            match reader.next() {
                Ok(event) => {
                    let flags = event.events();
                    if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                        lost = true;
                        continue;
                    }
                    let dirs = self.paths.get(&event.wd());
                    match (event.file_name(), dirs) {
                        (Some(name), Some(dirs)) if !flags.intersects(STRUCTURAL) => {
                            let name = OsStr::from_bytes(name.to_bytes());
                            changed.extend(dirs.iter().map(|d| d.join(name)));
                        }
                        _ => structural = true,
                    }
                }
                Err(Errno::AGAIN) => break,
                Err(Errno::INTR) => continue,
                Err(_) => {
                    lost = true; // Unreadable: trust nothing.
                    break;
                }
            }
        }
        if structural || lost {
            self.watched.clear();
            self.paths.clear();
            self.generation += 1;
        }
        Drained { generation: self.generation, lost }
    }

    /// Watches `root` and every directory from it down to `root/rel_dir`; false if one could not
    /// be watched (gone, not a directory, or `fs.inotify.max_user_watches` reached).
    pub fn watch_dirs(&mut self, root: &Path, rel_dir: &Path) -> bool {
        let mut rel = PathBuf::new();
        if !self.watch(root, &rel) {
            return false;
        }
        for part in rel_dir.components() {
            rel.push(part);
            if !self.watch(root, &rel) {
                return false;
            }
        }
        true
    }

    fn watch(&mut self, root: &Path, rel: &Path) -> bool {
        if self.watched.contains(rel) {
            return true;
        }
        match inotify::add_watch(&self.fd, root.join(rel), WATCH) {
            Ok(wd) => {
                self.watched.insert(rel.to_path_buf());
                self.paths.entry(wd).or_default().push(rel.to_path_buf());
                true
            }
            Err(_) => false,
        }
    }

    /// Directory paths watched now.
    #[cfg(test)]
    pub fn watched(&self) -> usize {
        self.watched.len()
    }
}

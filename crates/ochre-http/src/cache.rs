//! GetFromCache: file metadata and small file contents, one cache per worker.
//!
//! Each worker keeps its own cache (a thread-local, keyed by server), so looking a file up takes
//! no lock and no cache line bounces between cores. How an entry is known to be current depends
//! on [`Revalidate`]: with inotify (the default), the cache's own inotify instance watches the
//! directories of the paths it holds, and a lookup reads the pending events (one `read`, which
//! answers "nothing" while nothing changed) instead of a `stat` of the path; any event makes
//! every entry revalidate once by `stat` (see `notify` for the invariants and why this is fresh
//! at once). With `stat`, or where inotify is unavailable, every lookup `stat`s the path; a cache
//! whose inotify instance could not be made (out of descriptors when the worker's cache was
//! created, say) tries again every few seconds and takes it as soon as it can. Either
//! way, an entry whose device, inode, size, modification or change time differs is rebuilt, so a
//! changed, replaced, deleted or re-permissioned file is served fresh at once.
//!
//! Rebuilding resolves the path (`canonicalize`: symbolic links followed) and refuses a file
//! whose real path is outside the canonical root, then reads files up to `small_file_bytes` into
//! memory; larger ones keep an open descriptor and are sent with `sendfile`. Cached contents and
//! descriptors are bounded per worker ([`MAX_OPEN_FILES`]); when either is full, the cache is
//! emptied (simple, and rare for a working set that fits). Directories and missing files are not
//! cached (each such lookup is a `stat`).

use std::cell::RefCell;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustc_hash::FxHashMap;

use crate::config::Revalidate;
use crate::notify::{DirWatcher, Drained};

/// Where a file's body comes from.
#[derive(Debug)]
pub enum Body {
    /// Kept in memory.
    Memory(Arc<[u8]>),
    /// Sent from disk with `sendfile`, from this descriptor: opened once when the entry is built
    /// and shared by every response of the worker (`sendfile` with an explicit offset never
    /// moves the file position), so a large file costs no `open`/`close` per request.
    Disk(Arc<fs::File>),
}

/// What a response needs to know about a file.
#[derive(Debug)]
pub struct FileInfo {
    /// Size in bytes.
    pub size: u64,
    /// Modification time.
    pub mtime: SystemTime,
    /// Strong entity tag (quoted).
    pub etag: String,
    /// `Last-Modified` value.
    pub last_modified: String,
    /// `Content-Type` value.
    pub content_type: String,
    /// The bytes.
    pub body: Body,
}

/// The result of a lookup.
#[derive(Debug)]
pub enum Lookup {
    /// A regular file under the root.
    File(Arc<FileInfo>),
    /// A directory.
    Directory,
    /// Nothing there.
    NotFound,
    /// Not to be served: outside the root, unreadable, not a regular file.
    Forbidden,
    /// The file system failed (500).
    Error(io::Error),
}

/// What identifies a version of a file: device, inode, size, modification time, and change time
/// (which also moves when permissions or owner change).
type Ident = (u64, u64, u64, (i64, i64), (i64, i64));

fn ident(md: &fs::Metadata) -> Ident {
    (md.dev(), md.ino(), md.size(), (md.mtime(), md.mtime_nsec()), (md.ctime(), md.ctime_nsec()))
}

struct Entry {
    ident: Ident,
    /// The watcher's generation when this entry was last found current with every directory of
    /// its path (and of its real path) watched; `None`: `stat` at every lookup.
    valid_at: Option<u64>,
    /// The real path (under the root), where it is not the requested one (symbolic links): its
    /// directories are watched as well, and a change to it drops this entry.
    real: Option<PathBuf>,
    info: Arc<FileInfo>,
}

impl Entry {
    fn cost(&self) -> usize {
        match &self.info.body {
            Body::Memory(b) => b.len() + 256,
            Body::Disk(_) => 256,
        }
    }

    fn open_files(&self) -> usize {
        usize::from(matches!(self.info.body, Body::Disk(_)))
    }
}

/// Delays between attempts to make the inotify instance after a failure: doubling from the first
/// to the last. Short enough to regain inotify soon after a descriptor shortage; an attempt is
/// one system call, so a system without inotify pays little.
const WATCHER_RETRY: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(64));

/// Descriptors of large files a worker's cache keeps open at most.
pub const MAX_OPEN_FILES: usize = 256;

/// One worker's cache for one server.
pub struct FileCache {
    root: PathBuf,
    entries: FxHashMap<PathBuf, Entry>,
    bytes: usize,
    capacity: usize,
    small: u64,
    /// Entries holding an open descriptor.
    open_files: usize,
    /// `None` with `Revalidate::Stat`, or when inotify was refused.
    watcher: Option<DirWatcher>,
    /// Refused inotify: when to try again, and the delay after that.
    watcher_retry: Option<(Instant, Duration)>,
    /// Files a drain reported changed (kept for its allocation).
    changed: Vec<PathBuf>,
    /// Entries with a `real` path.
    aliased: usize,
    /// `stat`s of files done by lookups.
    stats: u64,
}

fn content_type(path: &Path) -> String {
    let mime = mime_guess::from_path(path).first_or_octet_stream();
    if mime.type_() == mime_guess::mime::TEXT
        || mime == mime_guess::mime::APPLICATION_JAVASCRIPT
        || mime == mime_guess::mime::APPLICATION_JSON
    {
        format!("{}; charset=utf-8", mime.essence_str())
    } else {
        mime.essence_str().to_string()
    }
}

impl FileCache {
    /// A cache for `root` (canonical).
    pub fn new(root: PathBuf, capacity: usize, small: u64, revalidate: Revalidate) -> FileCache {
        let (watcher, watcher_retry) = match revalidate {
            Revalidate::Stat => (None, None),
            Revalidate::Inotify => match make_watcher() {
                Some(w) => (Some(w), None),
                None => (None, Some((Instant::now() + WATCHER_RETRY.0, WATCHER_RETRY.0))),
            },
        };
        FileCache {
            root,
            entries: FxHashMap::default(),
            bytes: 0,
            capacity,
            small,
            open_files: 0,
            watcher,
            watcher_retry,
            changed: Vec::new(),
            aliased: 0,
            stats: 0,
        }
    }

    /// Looks `rel` up under the root.
    pub fn lookup(&mut self, rel: &Path) -> Lookup {
        if self.watcher_retry.is_some() {
            self.retry_watcher();
        }
        let generation = self.watcher.as_mut().map(|w| w.drain(&mut self.changed));
        if let Some(Drained { lost: true, .. }) = generation {
            self.clear();
        }
        if !self.changed.is_empty() {
            self.forget_changed();
        }
        let generation = generation.map(|d| d.generation);
        if let Some(e) = self.entries.get(rel) {
            if generation.is_some() && e.valid_at == generation {
                return Lookup::File(e.info.clone());
            }
        }
        // Watches before the stat: a change after the watch is an event, one before is seen.
        let watched = self.watch_dirs_of(rel);
        let full = self.root.join(rel);
        self.stats += 1;
        let md = match fs::metadata(&full) {
            Ok(md) => md,
            Err(e) => return from_error(e),
        };
        if md.is_dir() {
            return Lookup::Directory;
        }
        if !md.is_file() {
            return Lookup::Forbidden;
        }
        let id = ident(&md);
        if let Some(e) = self.entries.get_mut(rel) {
            if e.ident == id {
                let (real, info) = (e.real.clone(), e.info.clone());
                let watched = watched && real.as_deref().is_none_or(|r| self.watch_dirs_of(r));
                if let Some(e) = self.entries.get_mut(rel) {
                    e.valid_at = if watched { generation } else { None };
                }
                return Lookup::File(info);
            }
        }
        match self.build(rel, &full, &md, if watched { generation } else { None }) {
            Ok(Some((entry, id_after))) => {
                let info = entry.info.clone();
                if id_after == id {
                    self.insert(rel.to_path_buf(), entry);
                }
                Lookup::File(info)
            }
            Ok(None) => Lookup::Forbidden,
            Err(e) => from_error(e),
        }
    }

    /// Tries to make the inotify instance again, if it is time. Entries validated without it
    /// are not valid at any generation: each is revalidated once by `stat`, then trusted.
    #[cold]
    fn retry_watcher(&mut self) {
        let Some((at, delay)) = self.watcher_retry else { return };
        let now = Instant::now();
        if now < at {
            return;
        }
        match make_watcher() {
            Some(w) => {
                self.watcher = Some(w);
                self.watcher_retry = None;
            }
            None => {
                let next = (delay * 2).min(WATCHER_RETRY.1);
                self.watcher_retry = Some((now + next, next));
            }
        }
    }

    /// Watches the directories from the root down to `rel`'s; false if one could not be
    /// watched, or without a watcher.
    fn watch_dirs_of(&mut self, rel: &Path) -> bool {
        match &mut self.watcher {
            Some(w) => w.watch_dirs(&self.root, rel.parent().unwrap_or(Path::new(""))),
            None => false,
        }
    }

    /// The entry for `rel` (identity from `md`, valid at `valid_at` if its real path's
    /// directories are watched too), and the identity of the file as opened: the caller keeps
    /// the entry only if both agree. The real path's directories are watched before the file is
    /// opened: a change after is an event, one before shows in its identity.
    fn build(
        &mut self,
        rel: &Path,
        full: &Path,
        md: &fs::Metadata,
        valid_at: Option<u64>,
    ) -> io::Result<Option<(Entry, Ident)>> {
        let canonical = fs::canonicalize(full)?;
        let Ok(real) = canonical.strip_prefix(&self.root) else {
            return Ok(None); // A link out of the root.
        };
        let real = (real != rel).then(|| real.to_path_buf());
        let valid_at = valid_at.filter(|_| real.as_deref().is_none_or(|r| self.watch_dirs_of(r)));
        let mtime = md.modified().unwrap_or(UNIX_EPOCH);
        let mut file = fs::File::open(&canonical)?;
        let (body, id_after) = if md.size() <= self.small {
            let mut bytes = Vec::with_capacity(md.size() as usize);
            file.read_to_end(&mut bytes)?;
            let after = ident(&file.metadata()?);
            (Body::Memory(bytes.into()), after)
        } else {
            let after = ident(&file.metadata()?);
            (Body::Disk(Arc::new(file)), after)
        };
        let nanos = mtime.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_nanos();
        let info = FileInfo {
            size: if let Body::Memory(b) = &body { b.len() as u64 } else { md.size() },
            mtime,
            etag: format!("\"{:x}-{:x}-{:x}\"", md.ino(), md.size(), nanos),
            last_modified: httpdate::fmt_http_date(mtime),
            content_type: content_type(&canonical),
            body,
        };
        let entry = Entry { ident: ident(md), valid_at, real, info: Arc::new(info) };
        Ok(Some((entry, id_after)))
    }

    fn insert(&mut self, rel: PathBuf, entry: Entry) {
        self.remove(&rel);
        if self.bytes + entry.cost() > self.capacity
            || self.open_files + entry.open_files() > MAX_OPEN_FILES
        {
            self.clear();
        }
        self.bytes += entry.cost();
        self.open_files += entry.open_files();
        self.aliased += usize::from(entry.real.is_some());
        self.entries.insert(rel, entry);
    }

    fn remove(&mut self, rel: &Path) {
        if let Some(old) = self.entries.remove(rel) {
            self.bytes -= old.cost();
            self.open_files -= old.open_files();
            self.aliased -= usize::from(old.real.is_some());
        }
    }

    fn clear(&mut self) {
        // Descriptors still used by responses in flight close with their last reference.
        self.entries.clear();
        self.bytes = 0;
        self.open_files = 0;
        self.aliased = 0;
    }

    /// Drops the entries of the files a drain reported changed, by requested or real path.
    fn forget_changed(&mut self) {
        let mut changed = std::mem::take(&mut self.changed);
        for path in &changed {
            self.remove(path);
        }
        if self.aliased > 0 {
            let stale: Vec<PathBuf> = self
                .entries
                .iter()
                .filter(|(_, e)| e.real.as_ref().is_some_and(|r| changed.contains(r)))
                .map(|(rel, _)| rel.clone())
                .collect();
            for rel in stale {
                self.remove(&rel);
            }
        }
        changed.clear();
        self.changed = changed;
    }

    /// Descriptors this cache holds open.
    #[cfg(test)]
    fn open_files(&self) -> usize {
        self.open_files
    }
}

/// A new inotify instance, or `None` (said once per process: files are then revalidated by
/// `stat` until an instance can be made).
fn make_watcher() -> Option<DirWatcher> {
    DirWatcher::new()
        .map_err(|e| {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                log::warn!("no inotify ({e}): files are revalidated by stat until it can be made")
            });
        })
        .ok()
}

fn from_error(e: io::Error) -> Lookup {
    match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => Lookup::NotFound,
        io::ErrorKind::PermissionDenied => Lookup::Forbidden,
        _ if e.raw_os_error() == Some(20) => Lookup::NotFound, // ENOTDIR on older kinds
        _ => Lookup::Error(e),
    }
}

thread_local! {
    static CACHES: RefCell<FxHashMap<u64, FileCache>> = RefCell::new(FxHashMap::default());
}

/// Runs `f` with this worker's cache for server `id`, creating it with `make` the first time.
pub fn with_worker_cache<R>(
    id: u64,
    make: impl FnOnce() -> FileCache,
    f: impl FnOnce(&mut FileCache) -> R,
) -> R {
    CACHES.with(|c| {
        let mut caches = c.borrow_mut();
        f(caches.entry(id).or_insert_with(make))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ochre-cache-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        fs::canonicalize(d).unwrap()
    }

    fn body(l: &Lookup) -> Vec<u8> {
        match l {
            Lookup::File(i) => match &i.body {
                Body::Memory(b) => b.to_vec(),
                Body::Disk(f) => {
                    use std::os::unix::fs::FileExt;
                    let mut v = vec![0; i.size as usize];
                    f.read_exact_at(&mut v, 0).unwrap();
                    v
                }
            },
            other => panic!("not a file: {other:?}"),
        }
    }

    #[test]
    fn changed_and_deleted_files_are_seen_at_once() {
        let root = tmpdir("fresh");
        fs::write(root.join("a.txt"), b"one").unwrap();
        let mut c = FileCache::new(root.clone(), 1 << 20, 1024, Revalidate::Inotify);
        assert_eq!(body(&c.lookup(Path::new("a.txt"))), b"one");
        let etag1 = match c.lookup(Path::new("a.txt")) {
            Lookup::File(i) => i.etag.clone(),
            _ => unreachable!(),
        };
        // Same size, new content: the modification time (nanoseconds) or inode changes.
        std::thread::sleep(Duration::from_millis(5));
        fs::write(root.join("a.txt.new"), b"two").unwrap();
        fs::rename(root.join("a.txt.new"), root.join("a.txt")).unwrap();
        let l = c.lookup(Path::new("a.txt"));
        assert_eq!(body(&l), b"two");
        if let Lookup::File(i) = l {
            assert_ne!(i.etag, etag1);
            assert_eq!(i.content_type, "text/plain; charset=utf-8");
        }
        fs::remove_file(root.join("a.txt")).unwrap();
        assert!(matches!(c.lookup(Path::new("a.txt")), Lookup::NotFound));
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn links_out_of_the_root_are_forbidden_and_large_files_stay_on_disk() {
        let root = tmpdir("links");
        let outside = tmpdir("outside");
        fs::write(outside.join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), root.join("link")).unwrap();
        fs::write(root.join("big.bin"), vec![9u8; 5000]).unwrap();
        fs::create_dir(root.join("d")).unwrap();
        let mut c = FileCache::new(root.clone(), 1 << 20, 1024, Revalidate::Inotify);
        assert!(matches!(c.lookup(Path::new("link")), Lookup::Forbidden));
        assert!(matches!(c.lookup(Path::new("d")), Lookup::Directory));
        assert!(matches!(c.lookup(Path::new("nope/x")), Lookup::NotFound));
        match c.lookup(Path::new("big.bin")) {
            Lookup::File(i) => {
                assert!(matches!(i.body, Body::Disk(_)));
                assert_eq!(i.size, 5000);
                assert_eq!(i.content_type, "application/octet-stream");
            }
            other => panic!("{other:?}"),
        }
        fs::remove_dir_all(root).unwrap();
        fs::remove_dir_all(outside).unwrap();
    }

    #[test]
    fn large_files_keep_a_bounded_number_of_descriptors() {
        let root = tmpdir("fds");
        for k in 0..MAX_OPEN_FILES + 10 {
            fs::write(root.join(format!("f{k}")), format!("file {k}")).unwrap();
        }
        // small = 0: every file is "large", kept as an open descriptor.
        let mut c = FileCache::new(root.clone(), 1 << 30, 0, Revalidate::Inotify);
        for k in 0..MAX_OPEN_FILES + 10 {
            let l = c.lookup(Path::new(&format!("f{k}")));
            assert_eq!(body(&l), format!("file {k}").into_bytes());
            assert!(c.open_files() <= MAX_OPEN_FILES, "{} open", c.open_files());
        }
        assert!(c.open_files() < MAX_OPEN_FILES, "the cache was emptied at the bound");
        // A large file changed in place is served fresh, from a new descriptor.
        fs::write(root.join("f3"), "changed, and longer").unwrap();
        assert_eq!(body(&c.lookup(Path::new("f3"))), b"changed, and longer");
        fs::remove_dir_all(root).unwrap();
    }

    /// A worker whose cache is made while the process is out of descriptors gets no inotify
    /// instance; it must take one once descriptors are back, not revalidate by `stat` for the
    /// life of the process. Runs in a child process (this test binary again, this test only),
    /// which lowers its own descriptor limit.
    #[test]
    fn a_cache_made_out_of_descriptors_takes_inotify_when_they_come_back() {
        const CHILD: &str = "OCHRE_CACHE_TEST_OUT_OF_DESCRIPTORS";
        const NAME: &str =
            "cache::tests::a_cache_made_out_of_descriptors_takes_inotify_when_they_come_back";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", NAME, "--test-threads=1"])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let said = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success() && stdout.contains("1 passed"), "{said}");
            return;
        }
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let root = tmpdir("exhausted");
        fs::write(root.join("a.txt"), "a1").unwrap();
        let a = Path::new("a.txt");
        let open = fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        let old = getrlimit(Resource::Nofile);
        setrlimit(Resource::Nofile, Rlimit { current: Some(open + 16), maximum: old.maximum })
            .unwrap();
        let mut fillers: Vec<fs::File> =
            std::iter::from_fn(|| fs::File::open("/dev/null").ok()).collect();
        let mut c = FileCache::new(root.clone(), 1 << 20, 1024, Revalidate::Inotify);
        assert!(c.watcher.is_none(), "no descriptor for inotify");
        fillers.pop(); // One descriptor back: files can be read, revalidated by stat.
        assert_eq!(text(&c.lookup(a)), "a1");
        assert_eq!(text(&c.lookup(a)), "a1");
        assert_eq!(c.stats, 2, "without inotify, a stat per lookup");
        drop(fillers);
        setrlimit(Resource::Nofile, old).unwrap();
        std::thread::sleep(WATCHER_RETRY.0 + Duration::from_millis(50));
        assert_eq!(text(&c.lookup(a)), "a1");
        assert!(c.watcher.is_some(), "inotify was taken once descriptors came back");
        let stats = c.stats;
        assert_eq!(text(&c.lookup(a)), "a1");
        assert_eq!(c.stats, stats, "with inotify again, a hit costs no stat");
        fs::write(root.join("a.txt"), "a2").unwrap();
        assert_eq!(text(&c.lookup(a)), "a2", "and a change is seen at once");
        fs::remove_dir_all(root).unwrap();
    }

    fn text(l: &Lookup) -> String {
        String::from_utf8(body(l)).unwrap()
    }

    #[test]
    fn with_inotify_a_hit_costs_no_stat_and_a_change_drops_only_its_entry() {
        use std::os::unix::fs::PermissionsExt;
        let root = tmpdir("notify");
        fs::create_dir_all(root.join("d/e")).unwrap();
        fs::write(root.join("a.txt"), "a1").unwrap();
        fs::write(root.join("d/e/b.txt"), "b1").unwrap();
        let (a, b) = (Path::new("a.txt"), Path::new("d/e/b.txt"));
        let mut c = FileCache::new(root.clone(), 1 << 20, 1024, Revalidate::Inotify);
        assert!(c.watcher.is_some(), "inotify is available here");
        for _ in 0..3 {
            assert_eq!(text(&c.lookup(a)), "a1");
            assert_eq!(text(&c.lookup(b)), "b1");
        }
        assert_eq!(c.stats, 2, "one stat per file, at its first lookup");
        assert_eq!(c.watcher.as_ref().unwrap().watched(), 3, "the root, d and d/e");
        // Changed in place, same size: the event, not the identity, says so.
        fs::write(root.join("a.txt"), "a2").unwrap();
        assert_eq!(text(&c.lookup(a)), "a2");
        assert_eq!(c.stats, 3);
        assert_eq!(text(&c.lookup(b)), "b1");
        assert_eq!(c.stats, 3, "the other entry stays trusted");
        // Permissions are attributes: the entry is rebuilt.
        fs::set_permissions(root.join("d/e/b.txt"), fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(text(&c.lookup(b)), "b1");
        assert_eq!(c.stats, 4);
        fs::remove_file(root.join("a.txt")).unwrap();
        assert!(matches!(c.lookup(a), Lookup::NotFound));
        // A directory moved away and another made in its place.
        fs::rename(root.join("d"), root.join("old")).unwrap();
        fs::create_dir_all(root.join("d/e")).unwrap();
        fs::write(root.join("d/e/b.txt"), "b2").unwrap();
        assert_eq!(text(&c.lookup(b)), "b2");
        let stats = c.stats;
        assert_eq!(text(&c.lookup(b)), "b2");
        assert_eq!(c.stats, stats, "the new directories are watched: hits cost no stat again");
        fs::write(root.join("d/e/b.txt"), "b3").unwrap();
        assert_eq!(text(&c.lookup(b)), "b3");
        fs::write(root.join("old/e/b.txt"), "zz").unwrap();
        assert_eq!(text(&c.lookup(b)), "b3", "the moved-away file is not this path's");
        // A link: its target's changes drop it too, and so does its own change.
        std::os::unix::fs::symlink("d/e/b.txt", root.join("link")).unwrap();
        let link = Path::new("link");
        assert_eq!(text(&c.lookup(link)), "b3");
        fs::write(root.join("d/e/b.txt"), "b4").unwrap();
        assert_eq!(text(&c.lookup(link)), "b4");
        fs::write(root.join("a.txt"), "a3").unwrap();
        fs::remove_file(root.join("link")).unwrap();
        std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();
        assert_eq!(text(&c.lookup(link)), "a3");
        fs::remove_dir_all(root).unwrap();
    }

    /// Every kind of change, each followed at once by a lookup that must see it, with both ways
    /// of revalidating.
    #[test]
    fn rapid_changes_are_all_seen_at_once() {
        for mode in [Revalidate::Inotify, Revalidate::Stat] {
            let root = tmpdir(&format!("rapid-{mode:?}"));
            fs::create_dir_all(root.join("d")).unwrap();
            let rel = Path::new("d/f.txt");
            let mut c = FileCache::new(root.clone(), 1 << 20, 1024, mode);
            let mut rng = 0x2545_f491_4f6c_dd1du64;
            for round in 0..600u32 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let now = format!("{round:06}"); // Same size every time.
                let path = root.join(rel);
                match rng % 4 {
                    0 => fs::write(&path, &now).unwrap(),
                    1 => {
                        fs::write(root.join("d/tmp"), &now).unwrap();
                        fs::rename(root.join("d/tmp"), &path).unwrap();
                    }
                    2 => {
                        let _ = fs::remove_file(&path);
                        assert!(matches!(c.lookup(rel), Lookup::NotFound), "round {round}");
                        fs::write(&path, &now).unwrap();
                    }
                    _ => {
                        fs::remove_dir_all(root.join("d")).unwrap();
                        fs::create_dir(root.join("d")).unwrap();
                        fs::write(&path, &now).unwrap();
                    }
                }
                assert_eq!(text(&c.lookup(rel)), now, "{mode:?}, round {round}");
                assert_eq!(text(&c.lookup(rel)), now, "{mode:?}, round {round}, a hit");
            }
            fs::remove_dir_all(root).unwrap();
        }
    }

    #[test]
    fn lost_events_empty_the_cache() {
        let root = tmpdir("overflow");
        fs::write(root.join("a"), "1").unwrap();
        fs::write(root.join("b"), "1").unwrap();
        fs::write(root.join("c"), "1").unwrap();
        fs::write(root.join("d"), "1").unwrap();
        let mut c = FileCache::new(root.clone(), 1 << 20, 1024, Revalidate::Inotify);
        assert_eq!(text(&c.lookup(Path::new("a"))), "1");
        assert_eq!(text(&c.lookup(Path::new("d"))), "1");
        let limit: usize = fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(16384);
        // Writes to two files in turn: an event each (the kernel merges only an event equal to
        // the last one queued), enough to overflow the queue.
        let open = |name| fs::OpenOptions::new().append(true).open(root.join(name)).unwrap();
        let mut files = [open("b"), open("c")];
        for k in 0..=limit {
            std::io::Write::write_all(&mut files[k % 2], b"x").unwrap();
        }
        let before = c.stats;
        assert_eq!(text(&c.lookup(Path::new("a"))), "1");
        assert_eq!(c.stats, before + 1);
        assert_eq!(c.entries.len(), 1, "d, unchanged, was dropped with every other entry");
        fs::remove_dir_all(root).unwrap();
    }
}

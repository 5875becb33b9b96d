//! GetFromCache: file metadata and small file contents, one cache per worker.
//!
//! Each worker keeps its own cache (a thread-local, keyed by server), so looking a file up takes
//! no lock and no cache line bounces between cores. An entry is revalidated on every request by
//! one `stat` of the path: if device, inode, size or modification time changed, the entry is
//! rebuilt, so a changed, replaced or deleted file is served fresh at once. (The Apache/NUMA
//! paper's inotify invalidation, which saves that `stat`, is the next step.)
//!
//! Rebuilding resolves the path (`canonicalize`: symbolic links followed) and refuses a file
//! whose real path is outside the canonical root, then reads files up to `small_file_bytes` into
//! memory; larger ones keep an open descriptor and are sent with `sendfile`. Cached contents and
//! descriptors are bounded per worker ([`MAX_OPEN_FILES`]); when either is full, the cache is
//! emptied (simple, and rare for a working set that fits). A replaced or changed file gets a new
//! entry (and descriptor) at its next request, by the same `stat`.

use std::cell::RefCell;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustc_hash::FxHashMap;

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

type Ident = (u64, u64, u64, i64, i64);

fn ident(md: &fs::Metadata) -> Ident {
    (md.dev(), md.ino(), md.size(), md.mtime(), md.mtime_nsec())
}

struct Entry {
    ident: Ident,
    info: Arc<FileInfo>,
}

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
    pub fn new(root: PathBuf, capacity: usize, small: u64) -> FileCache {
        FileCache { root, entries: FxHashMap::default(), bytes: 0, capacity, small, open_files: 0 }
    }

    /// Looks `rel` up under the root.
    pub fn lookup(&mut self, rel: &Path) -> Lookup {
        let full = self.root.join(rel);
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
        if let Some(e) = self.entries.get(rel) {
            if e.ident == id {
                return Lookup::File(e.info.clone());
            }
        }
        match self.build(&full, &md) {
            Ok(Some((info, id_after))) => {
                let info = Arc::new(info);
                if id_after == id {
                    self.insert(rel.to_path_buf(), id, info.clone());
                }
                Lookup::File(info)
            }
            Ok(None) => Lookup::Forbidden,
            Err(e) => from_error(e),
        }
    }

    fn build(&self, full: &Path, md: &fs::Metadata) -> io::Result<Option<(FileInfo, Ident)>> {
        let canonical = fs::canonicalize(full)?;
        if !canonical.starts_with(&self.root) {
            return Ok(None); // A link out of the root.
        }
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
        Ok(Some((info, id_after)))
    }

    fn insert(&mut self, rel: PathBuf, id: Ident, info: Arc<FileInfo>) {
        let cost = |i: &FileInfo| match &i.body {
            Body::Memory(b) => b.len() + 256,
            Body::Disk(_) => 256,
        };
        let is_disk = |i: &FileInfo| usize::from(matches!(i.body, Body::Disk(_)));
        if let Some(old) = self.entries.remove(&rel) {
            self.bytes = self.bytes.saturating_sub(cost(&old.info));
            self.open_files = self.open_files.saturating_sub(is_disk(&old.info));
        }
        if self.bytes + cost(&info) > self.capacity
            || self.open_files + is_disk(&info) > MAX_OPEN_FILES
        {
            // Descriptors still used by responses in flight close with their last reference.
            self.entries.clear();
            self.bytes = 0;
            self.open_files = 0;
        }
        self.bytes += cost(&info);
        self.open_files += is_disk(&info);
        self.entries.insert(rel, Entry { ident: id, info });
    }

    /// Descriptors this cache holds open.
    #[cfg(test)]
    fn open_files(&self) -> usize {
        self.open_files
    }
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
        let mut c = FileCache::new(root.clone(), 1 << 20, 1024);
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
        let mut c = FileCache::new(root.clone(), 1 << 20, 1024);
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
        let mut c = FileCache::new(root.clone(), 1 << 30, 0);
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
}

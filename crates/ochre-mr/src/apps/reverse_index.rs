//! Reverse Index: for each link found in a tree of HTML files, the files that contain it
//! (Phoenix's `reverseindex`).
//!
//! The input is a directory; every file under it (recursively, in name order) is read. Links
//! are found by Phoenix's scanner: `<`, spaces, `a`, spaces, `href`, spaces or `=`, `"`, then
//! the link up to the next `"`. Map emits `(link, file)` per link, the link borrowed from the
//! file (a link seen before in the lane allocates nothing) and the file as a one-element list
//! that grows only when a second file joins it; reduce sorts the list (lanes claim files in any
//! order). A file linking twice to a link is listed twice, as in Phoenix.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ochre::Runtime;

use super::{random_word, write, AppError, Application, Rng, Size};
use crate::{Emitter, Job, MapReduce, Phases};

/// The files of a tree.
pub struct ReverseIndex {
    names: Vec<String>,
    files: Vec<Vec<u8>>,
}

/// The files (indices into the names) that contain a link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Files {
    /// One file: what every emitted pair carries, without allocating.
    One(u32),
    /// Several.
    Many(Vec<u32>),
}

impl Files {
    /// The files, as a slice.
    pub fn as_slice(&self) -> &[u32] {
        match self {
            Files::One(f) => std::slice::from_ref(f),
            Files::Many(v) => v,
        }
    }

    fn push_all(&mut self, other: Files) {
        let mut v = match std::mem::replace(self, Files::Many(Vec::new())) {
            Files::One(f) => vec![f],
            Files::Many(v) => v,
        };
        v.extend_from_slice(other.as_slice());
        *self = Files::Many(v);
    }
}

/// Each link and the sorted files containing it, sorted by link.
pub type Index = Vec<(Vec<u8>, Vec<u32>)>;

/// Calls `f` with every link of an HTML document (Phoenix's scanner, module doc).
pub fn for_each_link(html: &[u8], mut f: impl FnMut(&[u8])) {
    #[derive(Clone, Copy)]
    enum State {
        Start,
        InTag,
        InATag,
        FoundHref,
    }
    let mut state = State::Start;
    let mut j = 0;
    while j < html.len() {
        let c = html[j];
        state = match state {
            State::Start if c == b'<' => State::InTag,
            State::Start => State::Start,
            State::InTag if c == b'a' => State::InATag,
            State::InTag if c == b' ' => State::InTag,
            State::InTag => State::Start,
            State::InATag if c == b'h' && html[j..].starts_with(b"href") => {
                j += 3;
                State::FoundHref
            }
            State::InATag if c == b' ' => State::InATag,
            State::InATag => State::Start,
            State::FoundHref if c == b' ' || c == b'=' => State::FoundHref,
            State::FoundHref if c == b'"' => {
                let start = j + 1;
                if let Some(len) = html[start..].iter().position(|&b| b == b'"') {
                    f(&html[start..start + len]);
                    j = start + len;
                }
                State::Start
            }
            State::FoundHref => State::Start,
        };
        j += 1;
    }
}

impl MapReduce for ReverseIndex {
    type Split = Range<usize>;
    type Key = Vec<u8>;
    type Value = Files;

    fn split(&self, chunk_bytes: usize) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        let (mut start, mut bytes) = (0, 0);
        for (i, f) in self.files.iter().enumerate() {
            bytes += f.len();
            if bytes >= chunk_bytes {
                out.push(start..i + 1);
                (start, bytes) = (i + 1, 0);
            }
        }
        if start < self.files.len() {
            out.push(start..self.files.len());
        }
        out
    }

    fn input_bytes(&self) -> usize {
        self.files.iter().map(Vec::len).sum()
    }

    fn map(&self, files: &Range<usize>, out: &mut Emitter<'_, Self>) {
        for i in files.clone() {
            for_each_link(&self.files[i], |link| out.emit_ref(link, Files::One(i as u32)));
        }
    }

    fn combine(&self, acc: &mut Files, value: Files) {
        acc.push_all(value);
    }

    fn reduce(&self, _link: &Vec<u8>, files: Files) -> Files {
        match files {
            Files::Many(mut v) => {
                v.sort_unstable();
                Files::Many(v)
            }
            one => one,
        }
    }
}

impl ReverseIndex {
    /// The files' names, relative to the tree's root, indexed like [`Index`]'s lists.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The files' contents.
    pub fn files(&self) -> &[Vec<u8>] {
        &self.files
    }

    /// Files and their names.
    pub fn new(names: Vec<String>, files: Vec<Vec<u8>>) -> Self {
        ReverseIndex { names, files }
    }
}

/// Every file under `dir`, recursively, in name order: (path relative to `root`, contents).
fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) -> Result<(), AppError> {
    let err = |e: std::io::Error| AppError::Input(format!("reading {}: {e}", dir.display()));
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(err)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(err)?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(root, &path, out)?;
        } else {
            let bytes = super::read(&path)?;
            let name = path.strip_prefix(root).unwrap_or(&path).display().to_string();
            out.push((name, bytes));
        }
    }
    Ok(())
}

/// Loads every file under `dir`.
pub fn load_tree(dir: &Path) -> Result<ReverseIndex, AppError> {
    if !dir.is_dir() {
        return Err(AppError::Input(format!("{}: not a directory of HTML files", dir.display())));
    }
    let mut all = Vec::new();
    walk(dir, dir, &mut all)?;
    let (names, files) = all.into_iter().unzip();
    Ok(ReverseIndex { names, files })
}

/// An HTML page of about `bytes` bytes: paragraphs of words and links drawn with Zipf-like
/// popularity from `links` sites' pages.
fn page(rng: &mut Rng, bytes: usize, links: u64) -> Vec<u8> {
    let mut p = b"<html>\n<head><title>page</title></head>\n<body>\n<p>".to_vec();
    while p.len() < bytes {
        match rng.below(12) {
            0 => {
                let l = rng.zipf(links);
                let spaced = if rng.below(4) == 0 { "a  href = " } else { "a href=" };
                p.extend_from_slice(
                    format!("<{spaced}\"http://site{}.example/page{}.html\">", l % 97, l)
                        .as_bytes(),
                );
                p.extend_from_slice(&random_word(rng));
                p.extend_from_slice(b"</a> ");
            }
            1 => p.extend_from_slice(b"</p>\n<p>"),
            2 => p.extend_from_slice(b"<b>bold</b> <abbr>abbr</abbr> "),
            _ => {
                p.extend_from_slice(&random_word(rng));
                p.push(b' ');
            }
        }
    }
    p.extend_from_slice(b"</p>\n</body>\n</html>\n");
    p
}

impl Application for ReverseIndex {
    const NAME: &'static str = "reverse-index";
    type Result = Index;

    fn load(path: &Path) -> Result<Self, AppError> {
        load_tree(path)
    }

    fn generate(size: Size, seed: u64, out: &Path) -> Result<(), AppError> {
        let (dirs, per_dir) = size.pick((10, 10), (40, 100), (100, 200));
        let mut rng = Rng::new(seed);
        for d in 0..dirs {
            let dir = out.join(format!("d{d:03}"));
            std::fs::create_dir_all(&dir)
                .map_err(|e| AppError::Input(format!("creating {}: {e}", dir.display())))?;
            for f in 0..per_dir {
                let bytes = 2000 + rng.below(6000) as usize;
                write(&dir.join(format!("f{f:04}.html")), &page(&mut rng, bytes, 20_000))?;
            }
        }
        Ok(())
    }

    fn run(app: &Arc<Self>, rt: &Runtime) -> Result<(Index, Phases), crate::Error> {
        let out = Job::shared(app.clone()).run_on(rt)?;
        let index = out.pairs.into_iter().map(|(l, f)| (l, f.as_slice().to_vec())).collect();
        Ok((index, out.phases))
    }

    fn sequential(&self) -> Index {
        let mut map: rustc_hash::FxHashMap<Vec<u8>, Vec<u32>> = Default::default();
        for (i, f) in self.files.iter().enumerate() {
            for_each_link(f, |link| match map.get_mut(link) {
                Some(v) => v.push(i as u32),
                None => {
                    map.insert(link.to_vec(), vec![i as u32]);
                }
            });
        }
        let mut index: Index = map.into_iter().collect();
        index.sort_unstable();
        index
    }

    fn agree(a: &Index, b: &Index) -> bool {
        a == b
    }

    fn summary(index: &Index) -> Vec<String> {
        let refs: usize = index.iter().map(|(_, f)| f.len()).sum();
        let mut lines = vec![format!("{} links, {refs} references; most linked:", index.len())];
        let mut by_count: Vec<_> = index.iter().map(|(l, f)| (f.len(), l)).collect();
        by_count.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        for (n, l) in by_count.into_iter().take(5) {
            lines.push(format!("  {}: {n} files", String::from_utf8_lossy(l)));
        }
        lines
    }

    fn json(index: &Index) -> serde_json::Value {
        serde_json::json!({
            "links": index.len(),
            "references": index.iter().map(|(_, f)| f.len()).sum::<usize>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing;

    #[test]
    fn links_follow_phoenix_scanner() {
        let html = br#"<a href="x"> <a  href = "y z">< a href="w"> <abbr href="no"> <b href="no">
            <a hrefx="v"> <a href="unclosed"#;
        let mut got = Vec::new();
        for_each_link(html, |l| got.push(String::from_utf8_lossy(l).into_owned()));
        assert_eq!(got, vec!["x", "y z", "w"]); // `hrefx` is not `href`
    }

    #[test]
    fn mapreduce_matches_the_reference() {
        let index = testing::check::<ReverseIndex>(23);
        assert!(index.iter().any(|(_, f)| f.len() > 5), "popular links are in many files");
    }

    #[test]
    fn a_file_is_not_a_tree() {
        let e = load_tree(Path::new("/nonexistent/ochre")).err().map(|e| e.to_string());
        assert!(e.unwrap_or_default().contains("not a directory"));
    }
}

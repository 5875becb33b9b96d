//! Word Count: occurrences of each word of a text (Phoenix's `word_count`).
//!
//! A word is, as in Phoenix, a letter followed by letters and apostrophes, upper-cased; any
//! other byte ends it. Map emits `(word, 1)` per word, borrowed from a per-task buffer, so a
//! word already in the lane's table allocates nothing; combine and reduce add. Splits end at a
//! space or line end, so no word is cut.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use ochre::Runtime;
use rustc_hash::FxHashMap;

use super::{random_word, ranges_ending_at, read, write, AppError, Application, Rng, Size};
use crate::{Emitter, Job, MapReduce, Phases};

/// A text to count the words of.
pub struct WordCount {
    text: Vec<u8>,
}

/// Each word (upper case) and its count, sorted by word.
pub type Counts = Vec<(Vec<u8>, u64)>;

impl WordCount {
    /// Counts the words of `text`.
    pub fn new(text: Vec<u8>) -> Self {
        WordCount { text }
    }

    /// The text.
    pub fn text(&self) -> &[u8] {
        &self.text
    }
}

/// Calls `f` with each word of `text`, upper-cased in `buf`.
#[inline]
pub fn for_each_word(text: &[u8], buf: &mut Vec<u8>, mut f: impl FnMut(&[u8])) {
    buf.clear();
    for &b in text {
        let up = b.to_ascii_uppercase();
        if up.is_ascii_uppercase() || (up == b'\'' && !buf.is_empty()) {
            buf.push(up);
        } else if !buf.is_empty() {
            f(buf);
            buf.clear();
        }
    }
    if !buf.is_empty() {
        f(buf);
        buf.clear();
    }
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

impl MapReduce for WordCount {
    type Split = Range<usize>;
    type Key = Vec<u8>;
    type Value = u64;

    fn split(&self, chunk_bytes: usize) -> Vec<Range<usize>> {
        ranges_ending_at(&self.text, chunk_bytes, is_space)
    }

    fn input_bytes(&self) -> usize {
        self.text.len()
    }

    fn map(&self, split: &Range<usize>, out: &mut Emitter<'_, Self>) {
        let mut buf = Vec::with_capacity(64);
        for_each_word(&self.text[split.clone()], &mut buf, |w| out.emit_ref(w, 1));
    }

    fn combine(&self, acc: &mut u64, value: u64) {
        *acc += value;
    }
}

/// The sequential reference: one hash table, then sorted.
pub fn sequential(text: &[u8]) -> Counts {
    let mut counts: FxHashMap<Vec<u8>, u64> = FxHashMap::default();
    let mut buf = Vec::new();
    for_each_word(text, &mut buf, |w| match counts.get_mut(w) {
        Some(c) => *c += 1,
        None => {
            counts.insert(w.to_vec(), 1);
        }
    });
    let mut v: Counts = counts.into_iter().collect();
    v.sort_unstable();
    v
}

/// The `n` most frequent words, most frequent first, ties by word (Phoenix's final sort).
pub fn top(counts: &Counts, n: usize) -> Vec<(&[u8], u64)> {
    let mut v: Vec<(&[u8], u64)> = counts.iter().map(|(w, c)| (w.as_slice(), *c)).collect();
    v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v.truncate(n);
    v
}

/// A text of about `bytes` bytes: words of a 20000-word vocabulary drawn with Zipf-like
/// frequencies, mixed case, punctuation and line breaks.
pub fn generate_text(bytes: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let vocabulary: Vec<Vec<u8>> = (0..20_000)
        .map(|i| {
            let mut w = random_word(&mut rng);
            if i % 50 == 7 {
                w.extend_from_slice(b"'s");
            }
            w
        })
        .collect();
    let mut text = Vec::with_capacity(bytes + 16);
    let mut col = 0;
    while text.len() < bytes {
        let w = &vocabulary[rng.zipf(vocabulary.len() as u64) as usize];
        let capital = rng.below(10) == 0;
        for (i, &b) in w.iter().enumerate() {
            text.push(if capital && i == 0 { b.to_ascii_uppercase() } else { b });
        }
        col += w.len() + 1;
        match rng.below(20) {
            0 => text.extend_from_slice(b", "),
            1 => text.extend_from_slice(b". "),
            _ if col > 70 => {
                text.push(b'\n');
                col = 0;
            }
            _ => text.push(b' '),
        }
    }
    text
}

impl Application for WordCount {
    const NAME: &'static str = "word-count";
    type Result = Counts;

    fn load(path: &Path) -> Result<Self, AppError> {
        Ok(WordCount::new(read(path)?))
    }

    fn generate(size: Size, seed: u64, out: &Path) -> Result<(), AppError> {
        write(out, &generate_text(size.pick(1 << 20, 16 << 20, 128 << 20), seed))
    }

    fn run(app: &Arc<Self>, rt: &Runtime) -> Result<(Counts, Phases), crate::Error> {
        let out = Job::shared(app.clone()).run_on(rt)?;
        Ok((out.pairs, out.phases))
    }

    fn sequential(&self) -> Counts {
        sequential(&self.text)
    }

    fn agree(a: &Counts, b: &Counts) -> bool {
        a == b
    }

    fn summary(result: &Counts) -> Vec<String> {
        let total: u64 = result.iter().map(|p| p.1).sum();
        let mut lines = vec![format!("{} words, {} distinct; most frequent:", total, result.len())];
        for (w, c) in top(result, 10) {
            lines.push(format!("  {}: {c}", String::from_utf8_lossy(w)));
        }
        lines
    }

    fn json(result: &Counts) -> serde_json::Value {
        let top: Vec<_> = top(result, 10)
            .into_iter()
            .map(|(w, c)| serde_json::json!([String::from_utf8_lossy(w), c]))
            .collect();
        serde_json::json!({
            "words": result.iter().map(|p| p.1).sum::<u64>(),
            "distinct": result.len(),
            "top": top,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing;

    #[test]
    fn words_follow_phoenix_rules() {
        let mut got = Vec::new();
        for_each_word(b"it's a 'quoted' Rose-rose9x", &mut Vec::new(), |w| got.push(w.to_vec()));
        let want: Vec<&[u8]> = vec![b"IT'S", b"A", b"QUOTED'", b"ROSE", b"ROSE", b"X"];
        assert_eq!(got, want);
    }

    #[test]
    fn mapreduce_matches_the_reference() {
        for seed in [1, 2] {
            let counts = testing::check::<WordCount>(seed);
            assert!(counts.len() > 1000, "a small input still has many distinct words");
        }
    }

    #[test]
    fn splits_never_cut_a_word() {
        let text = generate_text(100_000, 3);
        let app = WordCount::new(text.clone());
        let splits = app.split(1000);
        assert_eq!(splits.first().map(|r| r.start), Some(0));
        assert_eq!(splits.last().map(|r| r.end), Some(text.len()));
        for w in splits.windows(2) {
            assert_eq!(w[0].end, w[1].start);
            assert!(is_space(text[w[0].end - 1]));
        }
    }
}

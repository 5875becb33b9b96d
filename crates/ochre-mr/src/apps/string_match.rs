//! String Match: which lines of a keys file are one of four searched words, compared in
//! "encrypted" form (Phoenix's `string_match`).
//!
//! As in Phoenix, each line (a word) is encrypted by adding 5 to every byte and compared with
//! the encryption of the four words `Helloworld`, `howareyou`, `ferrari` and `whotheman`;
//! Phoenix 2.0's map then drops the result, the thesis's emits `<key, flag>`: here map emits
//! `(word index, 1)` per matching line, into four fixed slots, and the result is the number
//! of matching lines per word. Splits end at a line end.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use ochre::Runtime;

use super::{random_word, ranges_ending_at, read, write, AppError, Application, Rng, Size};
use crate::{Container, Emitter, Job, MapReduce, Phases};

/// The searched words (Phoenix's).
pub const WORDS: [&str; 4] = ["Helloworld", "howareyou", "ferrari", "whotheman"];
/// Phoenix's cipher: every byte plus this.
const OFFSET: u8 = 5;
/// Phoenix reads at most this many bytes of a line.
const MAX_LINE: usize = 1023;

/// A keys file.
pub struct StringMatch {
    keys: Vec<u8>,
    encrypted: [Vec<u8>; 4],
}

/// Matching lines per searched word.
pub type Matches = [u64; 4];

impl StringMatch {
    /// Searches the lines of `keys`.
    pub fn new(keys: Vec<u8>) -> Self {
        StringMatch {
            keys,
            encrypted: WORDS.map(|w| encrypt(w.as_bytes(), &mut Vec::new()).to_vec()),
        }
    }

    /// The keys file.
    pub fn keys(&self) -> &[u8] {
        &self.keys
    }

    /// Calls `f` with the index of the searched word each line of `text` is.
    pub fn each_match(&self, text: &[u8], mut f: impl FnMut(usize)) {
        let mut buf = Vec::with_capacity(MAX_LINE);
        for line in text.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let line = &line[..line.len().min(MAX_LINE)];
            let enc = encrypt(line, &mut buf);
            if let Some(i) = self.encrypted.iter().position(|e| e.as_slice() == enc) {
                f(i);
            }
        }
    }
}

/// Phoenix's cipher of `word`, in `buf`.
fn encrypt<'b>(word: &[u8], buf: &'b mut Vec<u8>) -> &'b [u8] {
    buf.clear();
    buf.extend(word.iter().map(|b| b.wrapping_add(OFFSET)));
    buf
}

fn is_line_end(b: u8) -> bool {
    b == b'\n'
}

impl MapReduce for StringMatch {
    type Split = Range<usize>;
    type Key = u8;
    type Value = u64;

    fn split(&self, chunk_bytes: usize) -> Vec<Range<usize>> {
        ranges_ending_at(&self.keys, chunk_bytes, is_line_end)
    }

    fn input_bytes(&self) -> usize {
        self.keys.len()
    }

    fn map(&self, split: &Range<usize>, out: &mut Emitter<'_, Self>) {
        let text = &self.keys[split.clone()];
        // A split ends after a newline: the empty piece after it is not a line.
        let text = text.strip_suffix(b"\n").unwrap_or(text);
        self.each_match(text, |i| out.emit(i as u8, 1));
    }

    fn combine(&self, acc: &mut u64, value: u64) {
        *acc += value;
    }
}

/// A keys file of about `bytes` bytes: random words, one a line, with each searched word
/// salted in about once every 1000 lines.
pub fn generate_keys(bytes: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(bytes + 16);
    while out.len() < bytes {
        if rng.below(250) == 0 {
            out.extend_from_slice(WORDS[rng.below(4) as usize].as_bytes());
        } else {
            out.extend_from_slice(&random_word(&mut rng));
        }
        out.push(b'\n');
    }
    out
}

impl Application for StringMatch {
    const NAME: &'static str = "string-match";
    type Result = Matches;

    fn load(path: &Path) -> Result<Self, AppError> {
        Ok(StringMatch::new(read(path)?))
    }

    fn generate(size: Size, seed: u64, out: &Path) -> Result<(), AppError> {
        write(out, &generate_keys(size.pick(1 << 20, 64 << 20, 256 << 20), seed))
    }

    fn run(app: &Arc<Self>, rt: &Runtime) -> Result<(Matches, Phases), crate::Error> {
        let out = Job::shared(app.clone()).container(Container::Fixed).run_on(rt)?;
        let mut m = [0; 4];
        for (k, v) in out.pairs {
            m[k as usize] = v;
        }
        Ok((m, out.phases))
    }

    fn sequential(&self) -> Matches {
        let mut m = [0; 4];
        let text = self.keys.strip_suffix(b"\n").unwrap_or(&self.keys);
        self.each_match(text, |i| m[i] += 1);
        m
    }

    fn agree(a: &Matches, b: &Matches) -> bool {
        a == b
    }

    fn summary(m: &Matches) -> Vec<String> {
        WORDS.iter().zip(m).map(|(w, n)| format!("{w}: {n} lines")).collect()
    }

    fn json(m: &Matches) -> serde_json::Value {
        WORDS.iter().zip(m).map(|(w, n)| (w.to_string(), serde_json::json!(n))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing;

    #[test]
    fn mapreduce_matches_the_reference() {
        let m = testing::check::<StringMatch>(11);
        assert!(m.iter().all(|&n| n > 0), "every word is salted in: {m:?}");
    }

    #[test]
    fn lines_match_whole_and_with_crlf() {
        let app = StringMatch::new(Vec::new());
        let mut got = Vec::new();
        app.each_match(b"ferrari\nferraris\r\nwhotheman\r\nHelloworld\n\nhelloworld", |i| {
            got.push(i)
        });
        assert_eq!(got, vec![2, 3, 0]);
    }
}

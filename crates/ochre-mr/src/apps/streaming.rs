//! Hadoop Streaming fronts: an application's map and reduce as filters that speak Hadoop
//! Streaming's line protocol (`key TAB value`, one pair a line), so that Hadoop Streaming or
//! Spark's `pipe()` can spread a job over machines while each map task uses every core of its
//! machine through ochre.
//!
//! - **map** reads the task's input on standard input, runs the application's MapReduce job on
//!   it (so the pairs are already combined: one line per key of this input, like a Hadoop
//!   combiner), and writes `key TAB value` lines.
//! - **reduce** reads `key TAB value` lines grouped by key (Hadoop's shuffle sorts them; so
//!   does `LC_ALL=C sort`), and writes one line per key with the values combined.
//!
//! | application | map input | key | value |
//! | --- | --- | --- | --- |
//! | `word-count` | text | the word | occurrences |
//! | `histogram` | a whole 24-bit BMP | `B`, `G` or `R` and the intensity on 3 digits | pixels |
//! | `reverse-index` | paths of HTML files, one a line | the link | the paths, TAB-separated |
//! | `string-match` | keys, one a line | the searched word | matching lines |
//!
//! Keys and paths are written with `\`, TAB, LF and CR escaped as `\\`, `\t`, `\n`, `\r`, so
//! that a link containing them cannot break the protocol. Reduce keeps keys as they are.

use std::io::{BufRead, Read, Write};
use std::sync::Arc;

use ochre::Runtime;

use super::histogram::Histogram;
use super::reverse_index::ReverseIndex;
use super::string_match::{StringMatch, WORDS};
use super::word_count::WordCount;
use super::{AppError, Application};

/// The applications with a streaming front.
pub const STREAMING: &[&str] = &["word-count", "histogram", "reverse-index", "string-match"];

fn io_error(what: &str) -> impl Fn(std::io::Error) -> AppError + '_ {
    move |e| AppError::Input(format!("{what}: {e}"))
}

/// `s` with `\`, TAB, LF and CR escaped (module doc).
pub fn escape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for &b in s {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
    out
}

/// Runs application `name`'s map on `input`, writing its combined pairs to `out`.
pub fn map(
    name: &str,
    input: &mut dyn Read,
    out: &mut dyn Write,
    rt: &Runtime,
) -> Result<(), AppError> {
    let mut bytes = Vec::new();
    input.read_to_end(&mut bytes).map_err(io_error("reading standard input"))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 16, out);
    let write = |w: &mut std::io::BufWriter<&mut dyn Write>, parts: &[&[u8]]| {
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                w.write_all(b"\t")?;
            }
            w.write_all(p)?;
        }
        w.write_all(b"\n")
    };
    let wrote = |r: std::io::Result<()>| r.map_err(io_error("writing standard output"));
    match name {
        "word-count" => {
            let (counts, _) = WordCount::run(&Arc::new(WordCount::new(bytes)), rt)?;
            for (word, n) in counts {
                wrote(write(&mut w, &[&word, n.to_string().as_bytes()]))?;
            }
        }
        "histogram" => {
            let app = Arc::new(Histogram::parse(bytes)?);
            let (counts, _) = Histogram::run(&app, rt)?;
            for (k, &n) in counts.iter().enumerate().filter(|(_, &n)| n > 0) {
                let key = format!("{}{:03}", ["B", "G", "R"][k / 256], k % 256);
                wrote(write(&mut w, &[key.as_bytes(), n.to_string().as_bytes()]))?;
            }
        }
        "reverse-index" => {
            let text = String::from_utf8(bytes)
                .map_err(|_| AppError::Input("the list of files is not UTF-8".into()))?;
            let names: Vec<String> =
                text.lines().filter(|l| !l.is_empty()).map(str::to_string).collect();
            let files = names
                .iter()
                .map(|n| super::read(std::path::Path::new(n)))
                .collect::<Result<Vec<_>, _>>()?;
            let app = Arc::new(ReverseIndex::new(names, files));
            let (index, _) = ReverseIndex::run(&app, rt)?;
            for (link, files) in index {
                let link = escape(&link);
                let paths: Vec<Vec<u8>> =
                    files.iter().map(|&f| escape(app.names()[f as usize].as_bytes())).collect();
                let mut parts: Vec<&[u8]> = vec![&link];
                parts.extend(paths.iter().map(Vec::as_slice));
                wrote(write(&mut w, &parts))?;
            }
        }
        "string-match" => {
            let (m, _) = StringMatch::run(&Arc::new(StringMatch::new(bytes)), rt)?;
            for (word, n) in WORDS.iter().zip(m).filter(|(_, n)| *n > 0) {
                wrote(write(&mut w, &[word.as_bytes(), n.to_string().as_bytes()]))?;
            }
        }
        _ => return Err(unsupported(name)),
    }
    wrote(w.flush())
}

fn unsupported(name: &str) -> AppError {
    AppError::Input(format!(
        "`{name}` has no streaming front (those that do: {})",
        STREAMING.join(", ")
    ))
}

/// Runs application `name`'s reduce over `key TAB value` lines grouped by key, writing one
/// line per key to `out`.
pub fn reduce(name: &str, input: &mut dyn BufRead, out: &mut dyn Write) -> Result<(), AppError> {
    let lists = match name {
        "word-count" | "histogram" | "string-match" => false,
        "reverse-index" => true,
        _ => return Err(unsupported(name)),
    };
    let mut w = std::io::BufWriter::with_capacity(1 << 16, out);
    let mut current: Option<(Vec<u8>, Group)> = None;
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        let n = input.read_until(b'\n', &mut line).map_err(io_error("reading standard input"))?;
        if n == 0 {
            break;
        }
        number += 1;
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.is_empty() {
            continue;
        }
        let Some(tab) = text.iter().position(|&b| b == b'\t') else {
            return Err(AppError::Input(format!("line {number}: no TAB between key and value")));
        };
        let (key, value) = (&text[..tab], &text[tab + 1..]);
        if current.as_ref().is_some_and(|(k, _)| k.as_slice() != key) {
            if let Some((k, g)) = current.take() {
                g.write(&k, &mut w).map_err(io_error("writing standard output"))?;
            }
        }
        let (_, group) = current.get_or_insert_with(|| {
            (key.to_vec(), if lists { Group::List(Vec::new()) } else { Group::Sum(0) })
        });
        group.add(value).map_err(|e| AppError::Input(format!("line {number}: {e}")))?;
    }
    if let Some((k, g)) = current {
        g.write(&k, &mut w).map_err(io_error("writing standard output"))?;
    }
    w.flush().map_err(io_error("writing standard output"))
}

/// The values of one key, combined.
enum Group {
    /// Counts: added.
    Sum(u64),
    /// Lists of paths (TAB-separated): joined and sorted.
    List(Vec<Vec<u8>>),
}

impl Group {
    fn add(&mut self, value: &[u8]) -> Result<(), String> {
        match self {
            Group::Sum(s) => {
                let n: u64 = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .ok_or_else(|| {
                        format!("value `{}` is not a count", String::from_utf8_lossy(value))
                    })?;
                *s = s.checked_add(n).ok_or("the sum overflows")?;
            }
            Group::List(l) => l.extend(value.split(|&b| b == b'\t').map(<[u8]>::to_vec)),
        }
        Ok(())
    }

    fn write(self, key: &[u8], w: &mut impl Write) -> std::io::Result<()> {
        w.write_all(key)?;
        match self {
            Group::Sum(s) => write!(w, "\t{s}")?,
            Group::List(mut l) => {
                l.sort_unstable();
                for p in l {
                    w.write_all(b"\t")?;
                    w.write_all(&p)?;
                }
            }
        }
        w.write_all(b"\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduce_combines_groups_and_refuses_bad_lines() {
        let mut out = Vec::new();
        reduce("word-count", &mut &b"A\t1\nA\t2\nB\t5\r\n\nC\t1\n"[..], &mut out).unwrap();
        assert_eq!(out, b"A\t3\nB\t5\nC\t1\n");
        let mut out = Vec::new();
        reduce("reverse-index", &mut &b"l\tz\tb\nl\ta\nm\tq\n"[..], &mut out).unwrap();
        assert_eq!(out, b"l\ta\tb\tz\nm\tq\n");
        let e = reduce("word-count", &mut &b"A\t1\nA\tx\n"[..], &mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = reduce("word-count", &mut &b"no tab\n"[..], &mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("TAB"), "{e}");
        assert!(reduce("kmeans", &mut &b""[..], &mut Vec::new()).is_err());
    }

    #[test]
    fn escaping_keeps_the_protocol_whole() {
        assert_eq!(escape(b"a\tb\nc\\d\r"), b"a\\tb\\nc\\\\d\\r");
    }

    #[test]
    fn map_writes_combined_pairs() {
        let rt = crate::apps::testing::runtime();
        let mut out = Vec::new();
        map("word-count", &mut &b"b a b\nA"[..], &mut out, &rt).unwrap();
        assert_eq!(out, b"A\t2\nB\t2\n");
        let mut out = Vec::new();
        map("string-match", &mut &b"ferrari\nx\nferrari\n"[..], &mut out, &rt).unwrap();
        assert_eq!(out, b"ferrari\t2\n");
        assert!(map("histogram", &mut &b"not a bmp"[..], &mut Vec::new(), &rt).is_err());
    }
}

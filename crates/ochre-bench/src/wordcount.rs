//! A user's word count, as a newcomer to each library writes it: the text split in chunks of
//! lines, each chunk counted into a `HashMap<String, u64>`, the maps merged into one.
//!
//! - ochre: a plain color per chunk (`Color(1)`, `Color(2)`, ...), posted by one handler; each
//!   chunk posts its map to a collector color (`Color::DEFAULT`) that merges it into the total
//!   (a `Mutex`, read after the run).
//! - tokio-mt: a task per chunk, spawned from `block_on`, whose handles are awaited in order and
//!   merged there.
//! - rayon: `par_chunks(..).map(count).reduce(..)`: its reduce merges in parallel, pairwise.
//!
//! The merges are the job's serial part (a chunk's map of a few thousand words takes about
//! two thirds of the time the chunk took to count), so where and when the collector runs
//! decides the time: ochre's collector joins its worker's line behind that worker's chunks,
//! unless backlog turns are on (`queue`'s "Turns: the line, and backlogs"). Each system's result is checked against the
//! others'.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ochre::{Color, Runtime};
use rayon::prelude::*;

/// A text of `lines` lines of ten words each, drawn from `words` distinct words (`w0`, `w1`,
/// ...) by a seeded generator: the same text every time.
pub fn text(lines: usize, words: u64) -> Vec<String> {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut word = || {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        format!("w{}", seed.wrapping_mul(0x2545_f491_4f6c_dd1d) % words)
    };
    (0..lines).map(|_| (0..10).map(|_| word()).collect::<Vec<_>>().join(" ")).collect()
}

/// The words of `lines` and how often each occurs.
pub fn count(lines: &[String]) -> HashMap<String, u64> {
    let mut m = HashMap::new();
    for line in lines {
        for w in line.split_ascii_whitespace() {
            *m.entry(w.to_string()).or_insert(0) += 1;
        }
    }
    m
}

/// Adds the counts of `from` to `into`.
pub fn merge(into: &mut HashMap<String, u64>, from: HashMap<String, u64>) {
    for (k, v) in from {
        *into.entry(k).or_insert(0) += v;
    }
}

/// The word count on ochre (module doc), chunks of `chunk` lines.
pub fn on_ochre(
    rt: &Runtime,
    text: &Arc<Vec<String>>,
    chunk: usize,
) -> Result<HashMap<String, u64>, String> {
    let total = Arc::new(Mutex::new(HashMap::new()));
    let (lines, into) = (text.clone(), total.clone());
    let report = rt
        .run(Color::DEFAULT, move || {
            for i in 0..lines.len().div_ceil(chunk) {
                let (lines, into) = (lines.clone(), into.clone());
                ochre::post(Color(1 + i as u64), move || {
                    let m = count(&lines[i * chunk..((i + 1) * chunk).min(lines.len())]);
                    ochre::post(Color::DEFAULT, move || {
                        merge(&mut into.lock().expect("no merge panicked"), m);
                    });
                });
            }
        })
        .map_err(|e| e.to_string())?;
    report.check().map_err(|e| e.to_string())?;
    let counts = std::mem::take(&mut *total.lock().map_err(|e| e.to_string())?);
    Ok(counts)
}

/// The word count on tokio (module doc), chunks of `chunk` lines.
pub fn on_tokio(
    rt: &tokio::runtime::Runtime,
    text: &Arc<Vec<String>>,
    chunk: usize,
) -> Result<HashMap<String, u64>, String> {
    rt.block_on(async {
        let handles: Vec<_> = (0..text.len().div_ceil(chunk))
            .map(|i| {
                let lines = text.clone();
                tokio::spawn(
                    async move { count(&lines[i * chunk..((i + 1) * chunk).min(lines.len())]) },
                )
            })
            .collect();
        let mut total = HashMap::new();
        for h in handles {
            merge(&mut total, h.await.map_err(|e| e.to_string())?);
        }
        Ok(total)
    })
}

/// The word count on rayon (module doc), chunks of `chunk` lines.
pub fn on_rayon(pool: &rayon::ThreadPool, text: &[String], chunk: usize) -> HashMap<String, u64> {
    pool.install(|| {
        text.par_chunks(chunk).map(count).reduce(HashMap::new, |mut a, b| {
            merge(&mut a, b);
            a
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_system_counts_every_word_of_the_text() {
        let text = Arc::new(text(2_000, 300));
        let want = count(&text);
        assert_eq!(want.values().sum::<u64>(), 20_000);
        assert!(want.len() > 250, "{} distinct words", want.len());
        let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
        assert_eq!(on_ochre(&rt, &text, 64).unwrap(), want);
        let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
        assert_eq!(on_tokio(&tokio, &text, 64).unwrap(), want);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        assert_eq!(on_rayon(&pool, &text, 64), want);
        // A chunk longer than the text, and the last chunk short.
        assert_eq!(on_ochre(&rt, &text, 5_000).unwrap(), want);
        assert_eq!(on_ochre(&rt, &text, 1_999).unwrap(), want);
    }
}

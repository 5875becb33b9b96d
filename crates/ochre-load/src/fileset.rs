//! A SPECweb99-like static file set and its request mix (`ochre fileset`).
//!
//! The set is made of directories of 36 files: 4 classes of 9 files, class `c` holding files of
//! 1..9 x 102.4 x 10^c bytes (100 B to 900 KB), about 5 MB per directory as in SPECweb99. The
//! number of directories follows the total size asked for. Requests pick a directory by Zipf
//! popularity (directory `d` weighs 1/(d+1)^s), a class by SPECweb99's mix (35%, 50%, 14%, 1%),
//! and a file of the class by Zipf popularity too. A `size_scale` below 1 shrinks every file (for
//! tests; the mix is unchanged). Generation is seeded: the same seed gives the same files and
//! the same request sequence.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::Error;

/// SPECweb99's class mix.
pub const CLASS_WEIGHTS: [f64; 4] = [0.35, 0.50, 0.14, 0.01];
/// Files per class in a directory.
pub const FILES_PER_CLASS: usize = 9;

/// A generated (or described) file set: its files and the request mix over them.
#[derive(Clone, Debug)]
pub struct FileSet {
    /// Paths relative to the set's root, `/dir00003/class2_7`.
    pub paths: Vec<String>,
    /// Size of each file in bytes.
    pub sizes: Vec<u64>,
    /// Request probability of each file (sums to 1).
    pub weights: Vec<f64>,
}

fn file_size(class: usize, k: usize, scale: f64) -> u64 {
    (((k + 1) as f64) * 102.4 * 10f64.powi(class as i32) * scale).round().max(1.0) as u64
}

impl FileSet {
    /// Describes a set of `dirs` directories with Zipf exponent `zipf` (1.0 is SPECweb's).
    pub fn describe(dirs: usize, zipf: f64, size_scale: f64) -> FileSet {
        let dir_w: Vec<f64> = (0..dirs).map(|d| 1.0 / ((d + 1) as f64).powf(zipf)).collect();
        let dir_total: f64 = dir_w.iter().sum();
        let file_w: Vec<f64> =
            (0..FILES_PER_CLASS).map(|k| 1.0 / ((k + 1) as f64).powf(zipf)).collect();
        let file_total: f64 = file_w.iter().sum();
        let mut set = FileSet { paths: Vec::new(), sizes: Vec::new(), weights: Vec::new() };
        for (d, dw) in dir_w.iter().enumerate() {
            for (c, cw) in CLASS_WEIGHTS.iter().enumerate() {
                for (k, fw) in file_w.iter().enumerate() {
                    set.paths.push(format!("/dir{d:05}/class{c}_{k}"));
                    set.sizes.push(file_size(c, k, size_scale));
                    set.weights.push(dw / dir_total * cw * fw / file_total);
                }
            }
        }
        set
    }

    /// A set of `files` files of `size` bytes each, requested uniformly (`/f00000`, ...): the
    /// fixed set for runtime stress (1 KiB files in the thesis).
    pub fn uniform(files: usize, size: u64) -> FileSet {
        let files = files.max(1);
        FileSet {
            paths: (0..files).map(|i| format!("/f{i:05}")).collect(),
            sizes: vec![size; files],
            weights: vec![1.0 / files as f64; files],
        }
    }

    /// Directories for about `total_bytes` of files at full size.
    pub fn dirs_for(total_bytes: u64) -> usize {
        let per_dir: u64 =
            (0..4).flat_map(|c| (0..FILES_PER_CLASS).map(move |k| file_size(c, k, 1.0))).sum();
        (total_bytes / per_dir).max(1) as usize
    }

    /// Writes the files under `root` (contents derived from `seed`) and `mix.txt`, one
    /// `path weight` line per file.
    pub fn write(&self, root: &Path, seed: u64) -> io::Result<()> {
        let mut rng = seed | 1;
        for (p, &size) in self.paths.iter().zip(&self.sizes) {
            let path: PathBuf = root.join(p.trim_start_matches('/'));
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut bytes = Vec::with_capacity(size as usize);
            while (bytes.len() as u64) < size {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                bytes.extend_from_slice(&rng.to_le_bytes());
            }
            bytes.truncate(size as usize);
            std::fs::write(path, bytes)?;
        }
        let mut mix = io::BufWriter::new(std::fs::File::create(root.join("mix.txt"))?);
        for (p, w) in self.paths.iter().zip(&self.weights) {
            writeln!(mix, "{p} {w:e}")?;
        }
        mix.flush()
    }

    /// Reads a `mix.txt` (sizes unknown: 0).
    pub fn read_mix(path: &Path) -> Result<FileSet, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| Error::File { path: path.into(), source })?;
        let bad =
            |line: Option<usize>, reason: String| Error::Mix { path: path.into(), line, reason };
        let mut set = FileSet { paths: Vec::new(), sizes: Vec::new(), weights: Vec::new() };
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let mut it = line.split_whitespace();
            let (Some(p), Some(w), None) = (it.next(), it.next(), it.next()) else {
                return Err(bad(Some(n + 1), "expected `path weight`".into()));
            };
            let w: f64 = w
                .parse()
                .ok()
                .filter(|w: &f64| w.is_finite() && *w >= 0.0)
                .ok_or_else(|| bad(Some(n + 1), format!("bad weight `{w}`")))?;
            set.paths.push(p.to_string());
            set.sizes.push(0);
            set.weights.push(w);
        }
        if set.paths.is_empty() || set.weights.iter().sum::<f64>() <= 0.0 {
            return Err(bad(None, "no request with a positive weight".into()));
        }
        Ok(set)
    }
}

/// Draws paths by weight (cumulative distribution, binary search).
#[derive(Clone, Debug)]
pub struct Mix {
    cumulative: Vec<f64>,
}

impl Mix {
    /// The mix of `weights` (need not sum to 1; at least one positive).
    pub fn new(weights: &[f64]) -> Mix {
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let cumulative = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        Mix { cumulative }
    }

    /// The index drawn by `u` in [0, 1).
    pub fn pick(&self, u: f64) -> usize {
        self.cumulative.partition_point(|&c| c <= u).min(self.cumulative.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uniform(rng: &mut u64) -> f64 {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        ((*rng >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    #[test]
    fn popularity_follows_zipf_and_classes_follow_specweb() {
        let set = FileSet::describe(8, 1.0, 1.0);
        assert_eq!(set.paths.len(), 8 * 36);
        let mix = Mix::new(&set.weights);
        let mut rng = 12345u64;
        let n = 400_000;
        let mut per_dir = [0usize; 8];
        let mut per_class = [0usize; 4];
        for _ in 0..n {
            let i = mix.pick(uniform(&mut rng));
            per_dir[i / 36] += 1;
            per_class[(i % 36) / 9] += 1;
        }
        for d in 1..8 {
            let ratio = per_dir[d] as f64 / per_dir[0] as f64;
            let expect = 1.0 / (d + 1) as f64;
            assert!((ratio - expect).abs() < 0.05 * expect + 0.01, "dir {d}: {ratio} vs {expect}");
        }
        for (c, w) in CLASS_WEIGHTS.iter().enumerate() {
            let share = per_class[c] as f64 / n as f64;
            assert!((share - w).abs() < 0.01, "class {c}: {share} vs {w}");
        }
    }

    #[test]
    fn files_are_written_with_their_sizes_and_the_mix_reads_back() {
        let root = std::env::temp_dir().join(format!("ochre-fileset-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let set = FileSet::describe(2, 1.0, 0.01);
        set.write(&root, 7).unwrap();
        for (p, s) in set.paths.iter().zip(&set.sizes) {
            let md = std::fs::metadata(root.join(p.trim_start_matches('/'))).unwrap();
            assert_eq!(md.len(), *s);
        }
        let back = FileSet::read_mix(&root.join("mix.txt")).unwrap();
        assert_eq!(back.paths, set.paths);
        assert!((back.weights.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        assert!(FileSet::dirs_for(100 << 20) >= 20);
        std::fs::write(root.join("bad.txt"), "/a 1\n\n/x one\n").unwrap();
        let e = FileSet::read_mix(&root.join("bad.txt")).unwrap_err();
        assert!(matches!(e, Error::Mix { line: Some(3), .. }), "{e:?}");
        assert!(e.to_string().ends_with("bad.txt:3: bad weight `one`"), "{e}");
        std::fs::write(root.join("zero.txt"), "/a 0\n").unwrap();
        let e = FileSet::read_mix(&root.join("zero.txt")).unwrap_err();
        assert!(e.to_string().ends_with("zero.txt: no request with a positive weight"), "{e}");
        let e = FileSet::read_mix(&root.join("none.txt")).unwrap_err();
        assert!(matches!(&e, Error::File { path, .. } if path.ends_with("none.txt")), "{e:?}");
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_uniform_set_has_equal_files_and_weights() {
        let set = FileSet::uniform(10, 1024);
        assert_eq!(set.paths.len(), 10);
        assert!(set.sizes.iter().all(|&s| s == 1024));
        let mix = Mix::new(&set.weights);
        assert_eq!(mix.pick(0.05), 0);
        assert_eq!(mix.pick(0.95), 9);
    }

    #[test]
    fn mix_picks_by_weight() {
        let m = Mix::new(&[1.0, 0.0, 3.0]);
        assert_eq!(m.pick(0.0), 0);
        assert_eq!(m.pick(0.24), 0);
        assert_eq!(m.pick(0.26), 2);
        assert_eq!(m.pick(0.999_999), 2);
    }
}

//! Histogram: how many pixels have each intensity, per channel, in a 24-bit BMP (Phoenix's
//! `histogram`).
//!
//! As in Phoenix, the pixel data is every whole 3-byte triple (blue, green, red) from the
//! header's data offset to the end of the file (the generator writes rows whose length is a
//! multiple of 4, so there is no row padding to count). Map counts its pixels in three local
//! arrays, then emits one pair per non-zero bucket (Phoenix's map does the same); the key is
//! `channel * 256 + intensity` (channel 0 blue, 1 green, 2 red) in a dense container of 768.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use ochre::Runtime;

use super::{read, write, AppError, Application, Rng, Size};
use crate::{Container, Emitter, Job, MapReduce, Phases};

/// Buckets: 256 per channel.
pub const BUCKETS: usize = 768;

/// A bitmap's pixel data.
pub struct Histogram {
    bmp: Vec<u8>,
    data: Range<usize>,
}

/// Pixels per bucket, index `channel * 256 + intensity`.
pub type Counts = Vec<u64>;

impl Histogram {
    /// Checks a 24-bit BMP and finds its pixel data.
    pub fn parse(bmp: Vec<u8>) -> Result<Self, AppError> {
        if bmp.len() < 54 || &bmp[..2] != b"BM" {
            return Err(AppError::Input("not a BMP file (no BM header)".into()));
        }
        let bits = u16::from_le_bytes([bmp[28], bmp[29]]);
        if bits != 24 {
            return Err(AppError::Input(format!(
                "only 24-bit bitmaps are supported; this one has {bits} bits per pixel"
            )));
        }
        let offset = u32::from_le_bytes([bmp[10], bmp[11], bmp[12], bmp[13]]) as usize;
        if offset > bmp.len() {
            return Err(AppError::Input("BMP data offset past the end of the file".into()));
        }
        let pixels = (bmp.len() - offset) / 3;
        Ok(Histogram { data: offset..offset + pixels * 3, bmp })
    }

    /// The pixel data: whole (blue, green, red) triples.
    pub fn pixels(&self) -> &[u8] {
        &self.bmp[self.data.clone()]
    }
}

/// Adds the pixels of `data` (whole triples) to `counts`.
pub fn count(data: &[u8], counts: &mut [u64; BUCKETS]) {
    // Three separate tables would let the compiler prove no aliasing; one indexed by offset
    // is as fast and keeps the key layout in one place.
    for px in data.chunks_exact(3) {
        counts[px[0] as usize] += 1;
        counts[256 + px[1] as usize] += 1;
        counts[512 + px[2] as usize] += 1;
    }
}

impl MapReduce for Histogram {
    type Split = Range<usize>;
    type Key = u16;
    type Value = u64;

    fn split(&self, chunk_bytes: usize) -> Vec<Range<usize>> {
        let chunk = (chunk_bytes / 3).max(1) * 3;
        crate::byte_ranges(self.data.len(), chunk)
    }

    fn input_bytes(&self) -> usize {
        self.data.len()
    }

    fn map(&self, split: &Range<usize>, out: &mut Emitter<'_, Self>) {
        let mut counts = [0u64; BUCKETS];
        count(&self.pixels()[split.clone()], &mut counts);
        for (k, &c) in counts.iter().enumerate() {
            if c > 0 {
                out.emit(k as u16, c);
            }
        }
    }

    fn combine(&self, acc: &mut u64, value: u64) {
        *acc += value;
    }

    fn key_index(&self, key: &u16) -> Option<usize> {
        Some(*key as usize)
    }
}

/// A 24-bit BMP of `width` x `height` pixels (`width` a multiple of 4): smooth gradients with
/// noise, so that the histogram has structure.
pub fn generate_bmp(width: u32, height: u32, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let row = width as usize * 3;
    let data = row * height as usize;
    let mut bmp = Vec::with_capacity(54 + data);
    bmp.extend_from_slice(b"BM");
    bmp.extend_from_slice(&((54 + data) as u32).to_le_bytes());
    bmp.extend_from_slice(&0u32.to_le_bytes());
    bmp.extend_from_slice(&54u32.to_le_bytes()); // data offset
    bmp.extend_from_slice(&40u32.to_le_bytes()); // info header size
    bmp.extend_from_slice(&width.to_le_bytes());
    bmp.extend_from_slice(&height.to_le_bytes());
    bmp.extend_from_slice(&1u16.to_le_bytes()); // planes
    bmp.extend_from_slice(&24u16.to_le_bytes()); // bits per pixel
    bmp.extend_from_slice(&[0; 24]); // no compression, sizes, resolution, palette
    for y in 0..height {
        for x in 0..width {
            let noise = rng.next_u64();
            let b = (x * 255 / width.max(1)) as u8 ^ (noise as u8 & 0x0f);
            let g = (y * 255 / height.max(1)) as u8 ^ ((noise >> 8) as u8 & 0x1f);
            let r = ((x + y) & 0xff) as u8 ^ ((noise >> 16) as u8 & 0x07);
            bmp.extend_from_slice(&[b, g, r]);
        }
    }
    bmp
}

impl Application for Histogram {
    const NAME: &'static str = "histogram";
    type Result = Counts;

    fn load(path: &Path) -> Result<Self, AppError> {
        Histogram::parse(read(path)?)
            .map_err(|e| AppError::Input(format!("{}: {e}", path.display())))
    }

    fn generate(size: Size, seed: u64, out: &Path) -> Result<(), AppError> {
        let (w, h) = size.pick((512, 512), (4096, 4096), (8192, 8192));
        write(out, &generate_bmp(w, h, seed))
    }

    fn run(app: &Arc<Self>, rt: &Runtime) -> Result<(Counts, Phases), crate::Error> {
        let out = Job::shared(app.clone()).container(Container::Dense(BUCKETS)).run_on(rt)?;
        let mut counts = vec![0; BUCKETS];
        for (k, c) in out.pairs {
            counts[k as usize] = c;
        }
        Ok((counts, out.phases))
    }

    fn sequential(&self) -> Counts {
        let mut counts = [0u64; BUCKETS];
        count(self.pixels(), &mut counts);
        counts.to_vec()
    }

    fn agree(a: &Counts, b: &Counts) -> bool {
        a == b
    }

    fn summary(result: &Counts) -> Vec<String> {
        let pixels: u64 = result[..256].iter().sum();
        let mut lines = vec![format!("{pixels} pixels; most frequent intensity per channel:")];
        for (c, name) in ["blue", "green", "red"].iter().enumerate() {
            let ch = &result[c * 256..(c + 1) * 256];
            let (i, n) = ch
                .iter()
                .enumerate()
                .max_by_key(|&(i, n)| (*n, std::cmp::Reverse(i)))
                .unwrap_or((0, &0));
            lines.push(format!("  {name}: {i} ({n} pixels)"));
        }
        lines
    }

    fn json(result: &Counts) -> serde_json::Value {
        serde_json::json!({
            "blue": &result[..256],
            "green": &result[256..512],
            "red": &result[512..],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing;

    #[test]
    fn mapreduce_matches_the_reference() {
        let counts = testing::check::<Histogram>(5);
        assert_eq!(counts[..256].iter().sum::<u64>(), 512 * 512);
    }

    #[test]
    fn bad_bitmaps_are_refused_with_a_reason() {
        assert!(Histogram::parse(b"GIF89a".to_vec()).is_err());
        let mut bmp = generate_bmp(4, 4, 1);
        bmp[28] = 8;
        let e = Histogram::parse(bmp).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("24-bit"), "{e}");
        let mut bmp = generate_bmp(4, 4, 1);
        bmp[13] = 0x7f;
        assert!(Histogram::parse(bmp).is_err());
    }
}

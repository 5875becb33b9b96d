//! `--trace FILE`: run with the runtime's trace recorder on and write what it recorded as
//! Chrome trace JSON when the run ends (open the file in ui.perfetto.dev or chrome://tracing).
//!
//! The recorder keeps the newest [`RING`] records per worker (handler runs, idle spells,
//! sleeps, moves, steals, batch flushes); older ones are dropped and counted in the file's
//! `otherData.dropped`.

use std::io::Write;
use std::path::Path;

/// Records kept per worker: 40 bytes each, so at most 20 MiB a worker (a few seconds of a
/// busy server; the end of the run, which is what one looks at after stopping it).
pub(crate) const RING: usize = 1 << 19;

/// `config` with the recorder on if a trace file is asked for.
pub(crate) fn config(config: ochre::Config, file: Option<&Path>) -> ochre::Config {
    if file.is_some() {
        config.trace_events(RING)
    } else {
        config
    }
}

/// Writes what `rt` recorded to `path` as Chrome trace JSON; says so on stderr.
pub(crate) fn write(rt: &ochre::Runtime, path: &Path) -> Result<(), String> {
    let trace = rt.trace();
    let dropped: u64 = trace.workers.iter().map(|w| w.dropped).sum();
    let err = |e: &dyn std::fmt::Display| format!("writing the trace {}: {e}", path.display());
    let file = std::fs::File::create(path).map_err(|e| err(&e))?;
    let mut out = std::io::BufWriter::new(file);
    serde_json::to_writer(&mut out, &trace.chrome()).map_err(|e| err(&e))?;
    out.flush().map_err(|e| err(&e))?;
    eprintln!(
        "ochre: trace of {} records ({dropped} older ones dropped) written to {}",
        trace.len(),
        path.display()
    );
    Ok(())
}

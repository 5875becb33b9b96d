//! `--trace FILE` (on `serve`, `mr`, `bench`): create FILE first, run with the runtime's trace
//! recorder on, and write what it recorded as Chrome trace JSON when the run ends (open the
//! file in ui.perfetto.dev or chrome://tracing).
//!
//! The recorder keeps the newest [`RING`] records per worker (handler runs, idle spells,
//! sleeps, moves, steals, batch flushes); older ones are dropped and counted in the file's
//! `otherData.dropped`.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Records kept per worker: 48 bytes each, so at most 24 MiB a worker (a few seconds of a
/// busy server; the end of the run, which is what one looks at after stopping it).
pub(crate) const RING: usize = 1 << 19;

/// The file `--trace` writes, created before anything runs: a path that cannot be written is
/// refused at once, not after a server ran for hours or a benchmark for minutes.
pub(crate) struct TraceFile {
    path: PathBuf,
    file: std::fs::File,
}

/// Creates the trace file at `path`, if one is asked for.
pub(crate) fn create(path: Option<&Path>) -> Result<Option<TraceFile>, String> {
    let Some(path) = path else { return Ok(None) };
    let file = std::fs::File::create(path)
        .map_err(|e| format!("creating the trace file {}: {e}", path.display()))?;
    Ok(Some(TraceFile { path: path.to_path_buf(), file }))
}

/// `config` with the recorder on if a trace file is asked for.
pub(crate) fn config(config: ochre::Config, file: Option<&TraceFile>) -> ochre::Config {
    if file.is_some() {
        config.trace_events(RING)
    } else {
        config
    }
}

impl TraceFile {
    /// Writes what `rt` recorded as Chrome trace JSON; says so on stderr.
    pub(crate) fn write(self, rt: &ochre::Runtime) -> Result<(), String> {
        let trace = rt.trace();
        let dropped: u64 = trace.workers.iter().map(|w| w.dropped).sum();
        let (records, path) = (trace.len(), self.path.clone());
        self.write_json(&trace.chrome())?;
        eprintln!(
            "ochre: trace of {records} records ({dropped} older ones dropped) written to {}",
            path.display()
        );
        Ok(())
    }

    /// Writes the traces of the runtimes dropped since [`every_runtime`] as one Chrome trace (a
    /// process each); says so on stderr. No process in it when no runtime was dropped (a
    /// benchmark of peers only).
    #[cfg(feature = "bench")]
    pub(crate) fn write_every_runtime(self) -> Result<(), String> {
        let collected = ochre::trace::take_collected();
        let path = self.path.clone();
        self.write_json(&ochre::trace::chrome_of_runtimes(&collected))?;
        let records: usize = collected.runtimes.iter().map(|r| r.trace.len()).sum();
        eprintln!(
            "ochre: traces of the last {} runtimes ({records} records; {} older runtimes not \
             kept) written to {} (the figures above include the recorder's cost)",
            collected.runtimes.len(),
            collected.let_go,
            path.display()
        );
        Ok(())
    }

    fn write_json(self, value: &impl serde::Serialize) -> Result<(), String> {
        let err =
            |e: &dyn std::fmt::Display| format!("writing the trace {}: {e}", self.path.display());
        let mut out = std::io::BufWriter::new(&self.file);
        serde_json::to_writer(&mut out, value).map_err(|e| err(&e))?;
        out.flush().map_err(|e| err(&e))
    }
}

/// Records per worker of each runtime a benchmark builds (`--trace` on `bench`): 3 MiB a
/// worker, the end of a sample's runs.
#[cfg(feature = "bench")]
pub(crate) const EVERY_RUNTIME_RING: usize = 1 << 16;

/// Runtimes whose traces `bench --trace` keeps, the newest (a benchmark builds one a sample):
/// with [`EVERY_RUNTIME_RING`], 24 MiB a worker at most, besides the live runtime's ring.
#[cfg(feature = "bench")]
pub(crate) const EVERY_RUNTIME_KEPT: usize = 8;

/// Traces every runtime built from now on (`ochre::trace::trace_every_runtime`), for
/// [`TraceFile::write_every_runtime`].
#[cfg(feature = "bench")]
pub(crate) fn every_runtime() {
    ochre::trace::trace_every_runtime(EVERY_RUNTIME_RING, EVERY_RUNTIME_KEPT);
}

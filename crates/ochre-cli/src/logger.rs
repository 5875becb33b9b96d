//! Where the libraries' messages go (the `log` facade): standard error, one line each,
//! `ochre: <module>: <message>`, at the level `OCHRE_LOG` names (`error`, `warn`, `info`,
//! `debug`, `trace` or `off`; `info` when unset or unknown).

use log::{LevelFilter, Log, Metadata, Record};

struct Stderr;

impl Log for Stderr {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record) {
        if self.enabled(record.metadata()) {
            eprintln!("ochre: {}: {}", record.target(), record.args());
        }
    }

    fn flush(&self) {}
}

/// The level `OCHRE_LOG` asks for.
fn level(setting: Option<&str>) -> LevelFilter {
    setting.and_then(|s| s.trim().parse().ok()).unwrap_or(LevelFilter::Info)
}

/// Sends the libraries' messages to standard error (once; later calls do nothing).
pub(crate) fn init() {
    if log::set_logger(&Stderr).is_ok() {
        log::set_max_level(level(std::env::var("OCHRE_LOG").ok().as_deref()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_level_comes_from_the_setting() {
        assert_eq!(level(None), LevelFilter::Info);
        assert_eq!(level(Some("debug")), LevelFilter::Debug);
        assert_eq!(level(Some("OFF")), LevelFilter::Off);
        assert_eq!(level(Some("loud")), LevelFilter::Info);
    }
}

//! The server's settings, with their defaults and why.

use std::path::PathBuf;
use std::time::Duration;

use documented::DocumentedFields;
use serde::{Deserialize, Serialize};

/// Settings of a server. Every limit exists so that a client cannot hold a worker or exhaust
/// memory or connections.
///
/// The doc comment of each field is also its description in the sample configuration file
/// ([`ServerConfig::sample_toml`]), so it is written for someone editing that file.
#[derive(Clone, Debug, Serialize, Deserialize, DocumentedFields)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// The directory served. Nothing outside it is ever served.
    pub root: PathBuf,
    /// File served for a directory (`/dir/` -> `/dir/index.html`); directories are never listed.
    pub index: String,
    /// Most bytes of a request head (request line and headers), as common servers allow; 431
    /// beyond.
    pub max_header_bytes: usize,
    /// Most header fields in a request (at most 128); 431 beyond.
    pub max_headers: usize,
    /// Longest request target (URI); 414 beyond.
    pub max_target_len: usize,
    /// Largest request body accepted (and discarded: the server has no use for bodies); 413
    /// beyond.
    pub max_body_bytes: u64,
    /// Time a client has to send a whole request head, from its first byte (slow clients, and
    /// slow-loris attacks, get 408 and are closed).
    #[serde(with = "secs")]
    pub read_timeout: Duration,
    /// Time an idle keep-alive connection is kept.
    #[serde(with = "secs")]
    pub keepalive_timeout: Duration,
    /// Time a response may take to drain to a client that does not read.
    #[serde(with = "secs")]
    pub write_timeout: Duration,
    /// Requests served on one connection before it is closed.
    pub max_requests_per_connection: u32,
    /// Concurrent connections; beyond, new ones get 503 and are closed.
    pub max_connections: usize,
    /// Connections the kernel queues for the server before it accepts them (the listen
    /// backlog), for `ochre serve`. Unset: the system's maximum (net.core.somaxconn); a short
    /// queue drops the connects of a burst, each then waiting a second to retry.
    pub backlog: Option<u32>,
    /// Files up to this size are kept in memory; larger ones are sent with `sendfile`.
    pub small_file_bytes: u64,
    /// Memory for cached file contents, per worker.
    pub cache_bytes_per_worker: usize,
    /// How cached files are known to be unchanged: `"inotify"` (the default: the kernel reports
    /// changes, a request costs no `stat`) or `"stat"` (one `stat` per request; for roots whose
    /// changes raise no inotify event, such as network file systems). Either way a changed file
    /// is served fresh at once.
    pub revalidate: Revalidate,
    /// Append one line per response, in the common log format, to this file.
    pub access_log: Option<PathBuf>,
    /// Serve the server's counters as JSON at this path, to loopback clients only
    /// (e.g. `/.ochre/status`).
    pub status_path: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            root: PathBuf::from("."),
            index: "index.html".into(),
            max_header_bytes: 16 * 1024,
            max_headers: 100,
            max_target_len: 8 * 1024,
            max_body_bytes: 1024 * 1024,
            read_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(60),
            max_requests_per_connection: 10_000,
            max_connections: 10_000,
            backlog: None,
            small_file_bytes: 256 * 1024,
            cache_bytes_per_worker: 64 * 1024 * 1024,
            revalidate: Revalidate::Inotify,
            access_log: None,
            status_path: None,
        }
    }
}

/// How the file cache learns that a file changed (see [`ServerConfig::revalidate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Revalidate {
    /// Watch the directories with inotify; falls back to `Stat` where inotify is unavailable.
    Inotify,
    /// `stat` the file at every request.
    Stat,
}

/// Why a configuration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// What reading it said.
        source: std::io::Error,
    },
    /// The file is not a valid configuration (TOML syntax, a wrong type, an unknown setting).
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: std::path::PathBuf,
        /// Where and why.
        source: toml::de::Error,
    },
}

impl ServerConfig {
    /// Reads a configuration file (TOML, the fields of this struct; absent ones keep their
    /// defaults, unknown ones are an error). Durations are in seconds.
    pub fn from_toml_file(path: &std::path::Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        toml::from_str(&text)
            .map_err(|source| ConfigError::Parse { path: path.to_path_buf(), source })
    }

    /// Every setting with its default value and meaning, as a TOML file to start from
    /// (`ochre serve --print-config`). Settings without a default are commented out.
    pub fn sample_toml() -> String {
        let defaults = toml::Table::try_from(ServerConfig::default()).unwrap_or_default();
        let examples = [
            ("access_log", "\"access.log\""),
            ("status_path", "\"/.ochre/status\""),
            ("backlog", "4096"),
        ];
        let mut out = String::from(
            "# SWS settings (ochre serve --config FILE). Absent settings keep the defaults shown;\n\
             # unknown ones are an error. Durations are in seconds.\n",
        );
        for (name, doc) in Self::FIELD_NAMES.iter().zip(Self::FIELD_DOCS) {
            out.push('\n');
            for line in doc.lines() {
                out.push_str(&format!("# {}\n", line.trim()));
            }
            match defaults.get(*name) {
                Some(value) => out.push_str(&format!("{name} = {value}\n")),
                None => {
                    let example = examples.iter().find(|(n, _)| n == name).map_or("\"\"", |e| e.1);
                    out.push_str(&format!("# {name} = {example}\n"));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_file_documents_every_setting_and_reads_back_as_the_defaults() {
        let sample = ServerConfig::sample_toml();
        let read: ServerConfig = toml::from_str(&sample).unwrap();
        let table = |c: &ServerConfig| toml::Table::try_from(c).unwrap();
        assert_eq!(table(&read), table(&ServerConfig::default()));
        // Every field (the optional ones set, so that they serialize) has its line.
        let all = ServerConfig {
            access_log: Some("a".into()),
            status_path: Some("/s".into()),
            backlog: Some(64),
            ..ServerConfig::default()
        };
        for key in table(&all).keys() {
            let doc = ServerConfig::get_field_docs(key).unwrap_or_default();
            assert!(!doc.is_empty(), "{key} is not documented");
            let first = format!("# {}\n", doc.lines().next().unwrap_or_default().trim());
            assert!(sample.contains(&first), "{key}'s description is not in the sample");
            assert!(sample.contains(&format!("{key} = ")), "{key} is not in the sample");
        }
        assert_eq!(
            ServerConfig::FIELD_NAMES.len(),
            table(&all).len(),
            "a documented setting that does not exist"
        );
    }

    #[test]
    fn a_toml_file_sets_fields_and_refuses_unknown_ones() {
        let dir = std::env::temp_dir().join(format!("sws-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.toml");
        std::fs::write(
            &good,
            "root = \"/srv\"\nread_timeout = 2.5\nmax_connections = 7\nrevalidate = \"stat\"\n\
             backlog = 300\n",
        )
        .unwrap();
        let c = ServerConfig::from_toml_file(&good).unwrap();
        assert_eq!(c.root, PathBuf::from("/srv"));
        assert_eq!(c.read_timeout, Duration::from_millis(2500));
        assert_eq!(c.max_connections, 7);
        assert_eq!(c.backlog, Some(300));
        assert_eq!(c.revalidate, Revalidate::Stat);
        assert_eq!(c.index, "index.html", "absent fields keep their defaults");
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "rot = \"/srv\"\n").unwrap();
        let e = ServerConfig::from_toml_file(&bad).unwrap_err();
        assert!(matches!(e, ConfigError::Parse { .. }), "{e:?}");
        assert!(e.to_string().contains("rot") && e.to_string().contains("bad.toml"), "{e}");
        let missing = ServerConfig::from_toml_file(&dir.join("missing.toml")).unwrap_err();
        assert!(matches!(missing, ConfigError::Read { .. }), "{missing:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom)
    }
}

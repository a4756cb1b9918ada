//! The binary's logger: the libraries log through the `log` crate and this writes each record
//! to stderr as its message alone, one line per record, so start-up notes and the server's
//! one line per request read exactly as they are written.
//!
//! `OXLLM_LOG` sets the most verbose level shown (`error`, `warn`, `info` (default), `debug`,
//! `trace` or `off`); an unknown value keeps the default.

use std::io::Write as _;

use log::{LevelFilter, Log, Metadata, Record};

struct StderrLogger;

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if self.enabled(record.metadata()) {
            // One locked write per record, so lines of concurrent requests never interleave.
            let _ = writeln!(std::io::stderr().lock(), "{}", record.args());
        }
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// The level `OXLLM_LOG` asks for (`info` when unset or unknown).
fn level_from(value: Option<&str>) -> LevelFilter {
    value
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(LevelFilter::Info)
}

/// Installs the logger once, at the start of `main`.
pub fn init() {
    static LOGGER: StderrLogger = StderrLogger;
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level_from(std::env::var("OXLLM_LOG").ok().as_deref()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_level_comes_from_oxllm_log_and_defaults_to_info() {
        assert_eq!(level_from(None), LevelFilter::Info);
        assert_eq!(level_from(Some("warn")), LevelFilter::Warn);
        assert_eq!(level_from(Some("OFF")), LevelFilter::Off);
        assert_eq!(level_from(Some("loud")), LevelFilter::Info);
    }
}

//! Which log lines are written: the filter an operator gives
//! (`--log-level`, `DIONFS_LOG`, `[server] log_level`), in the level words
//! people use, checked before the server starts.
//!
//! `tracing`'s own filter syntax takes any word it does not know as the
//! name of a module to log everything of, so `warning` or `verbose` would
//! silence every line without a word of complaint. Here a word is a level
//! or it is refused:
//!
//! | words | level |
//! |---|---|
//! | `off`, `quiet`, `none` | nothing |
//! | `error`, `err`, `crit`, `critical` | errors |
//! | `warn`, `warning` | warnings and errors |
//! | `info`, `notice` | the default: start, reloads, what an operator acts on |
//! | `debug`, `verbose` | and each connection, each refused call |
//! | `trace` | everything |
//!
//! A filter is one level, optionally followed by `MODULE=LEVEL` directives
//! for dionfs's own modules (`info,dionfs_transport=debug`), comma
//! separated; without a level, the other modules log at `info`.

use std::fmt;
use std::str::FromStr;

/// A checked log filter, held in `tracing`'s filter syntax with only its
/// canonical level names (`warn,dionfs_transport=debug`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFilter {
    directives: String,
}

/// The level of a filter that names none.
const DEFAULT_LEVEL: &str = "info";

/// The level words, for error messages.
pub const LEVEL_WORDS: &str = "off, error, warn, info, debug or trace";

impl LogFilter {
    /// Checks `text` (see the module documentation): every word a level or
    /// a `MODULE=LEVEL` of dionfs's modules.
    pub fn parse(text: &str) -> Result<LogFilter, String> {
        let mut default = None;
        let mut modules = Vec::new();
        for piece in text.split(',').map(str::trim) {
            if piece.is_empty() {
                continue;
            }
            match piece.split_once('=') {
                Some((module, word)) => {
                    let module = module.trim();
                    if !is_module(module) {
                        return Err(format!(
                            "`{piece}`: `{module}` is not one of dionfs's modules \
                             (dionfs_server, dionfs_transport, dionfs_server::nlm, ...)"
                        ));
                    }
                    let level = level_of(word.trim()).ok_or_else(|| {
                        format!(
                            "`{piece}`: `{}` is not a log level; use {LEVEL_WORDS}",
                            word.trim()
                        )
                    })?;
                    modules.push(format!("{module}={level}"));
                }
                None => {
                    let level = level_of(piece).ok_or_else(|| {
                        format!(
                            "`{piece}` is not a log level; use {LEVEL_WORDS} \
                             (or MODULE=LEVEL, such as dionfs_transport=debug)"
                        )
                    })?;
                    if default.replace(level).is_some() {
                        return Err(format!("`{text}`: give one level, then MODULE=LEVEL"));
                    }
                }
            }
        }
        if default.is_none() && modules.is_empty() {
            return Err(format!("no log level given; use {LEVEL_WORDS}"));
        }
        let mut directives = vec![default.unwrap_or(DEFAULT_LEVEL).to_string()];
        directives.extend(modules);
        Ok(LogFilter {
            directives: directives.join(","),
        })
    }

    /// The filter in `tracing`'s `EnvFilter` syntax.
    pub fn directives(&self) -> &str {
        &self.directives
    }
}

impl Default for LogFilter {
    /// `info`.
    fn default() -> Self {
        LogFilter {
            directives: DEFAULT_LEVEL.to_string(),
        }
    }
}

impl FromStr for LogFilter {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        LogFilter::parse(s)
    }
}

impl fmt::Display for LogFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.directives)
    }
}

/// The canonical level a word names, in any case.
fn level_of(word: &str) -> Option<&'static str> {
    Some(match word.to_ascii_lowercase().as_str() {
        "off" | "quiet" | "none" => "off",
        "error" | "err" | "crit" | "critical" => "error",
        "warn" | "warning" => "warn",
        "info" | "notice" => "info",
        "debug" | "verbose" => "debug",
        "trace" => "trace",
        _ => return None,
    })
}

/// Whether `name` is a module path of dionfs's own crates (`dionfs`,
/// `dionfs_transport`, `dionfs_server::nlm`): the only ones that log.
fn is_module(name: &str) -> bool {
    let mut segments = name.split("::");
    let first = segments.next().unwrap_or_default();
    let identifier = |s: &str| {
        !s.is_empty()
            && !s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    (first == "dionfs" || first.starts_with("dionfs_"))
        && identifier(first)
        && segments.all(identifier)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> String {
        LogFilter::parse(text).unwrap().directives().to_string()
    }

    #[test]
    fn level_words_people_use_map_to_levels() {
        for (word, level) in [
            ("off", "off"),
            ("quiet", "off"),
            ("none", "off"),
            ("error", "error"),
            ("err", "error"),
            ("crit", "error"),
            ("warn", "warn"),
            ("warning", "warn"),
            ("WARNING", "warn"),
            ("info", "info"),
            ("notice", "info"),
            ("debug", "debug"),
            ("verbose", "debug"),
            ("Trace", "trace"),
            (" debug ", "debug"),
        ] {
            assert_eq!(parsed(word), level, "{word}");
        }
    }

    #[test]
    fn module_directives_keep_working_with_the_default_level_beside_them() {
        assert_eq!(
            parsed("dionfs_transport=debug"),
            "info,dionfs_transport=debug"
        );
        assert_eq!(
            parsed("warning,dionfs_server::nlm=verbose"),
            "warn,dionfs_server::nlm=debug"
        );
        assert_eq!(
            parsed("info, dionfs=trace, dionfs_core=error"),
            "info,dionfs=trace,dionfs_core=error"
        );
    }

    #[test]
    fn unknown_words_are_refused_with_the_words_to_use() {
        for bad in [
            "warnings",
            "loud",
            "5",
            "dionfs_server",
            "dionfs_transport=loud",
            "tokio=debug",
            "dionfs_server:nlm=debug",
            "dionfs_server::=debug",
            "dionfs[conn]=debug",
            "info,debug",
            "",
            " , ",
        ] {
            let e = LogFilter::parse(bad).unwrap_err();
            assert!(
                e.contains("log level") || e.contains("module") || e.contains("one level"),
                "{bad}: {e}"
            );
        }
        let e = LogFilter::parse("verbosity").unwrap_err();
        assert!(e.contains("`verbosity` is not a log level"), "{e}");
        assert!(e.contains(LEVEL_WORDS), "{e}");
    }

    #[test]
    fn the_default_is_info() {
        assert_eq!(LogFilter::default().directives(), "info");
        assert_eq!("debug".parse::<LogFilter>().unwrap().to_string(), "debug");
    }
}

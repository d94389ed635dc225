//! Which log lines are written (`--log-level`, else `DIONFS_LOG`, else
//! the config's `log_level`, else `info`: see `dionfs_logs::LogFilter`)
//! and where they go and how they look: colour only on a terminal;
//! into the journal (stderr is the stream systemd gave the unit) without a
//! timestamp, which the journal records itself, and with each line's
//! syslog priority as the `<N>` prefix journald reads, so that
//! `journalctl -p warning -u dionfs` shows the warnings and errors.

use std::fmt;
use std::io::IsTerminal;
use std::os::unix::fs::MetadataExt;

use dionfs_logs::LogFilter;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// The variable that gives the log filter when `--log-level` does not.
const LOG_VARIABLE: &str = "DIONFS_LOG";

/// The filter the command line or the environment gives: `--log-level`,
/// else `DIONFS_LOG` (unset or empty: none). A word that is no level is
/// an error, for the caller to refuse to start with.
pub fn chosen_filter(flag: Option<LogFilter>) -> Result<Option<LogFilter>, String> {
    if flag.is_some() {
        return Ok(flag);
    }
    match std::env::var(LOG_VARIABLE) {
        Ok(text) if text.trim().is_empty() => Ok(None),
        Ok(text) => LogFilter::parse(&text)
            .map(Some)
            .map_err(|e| format!("{LOG_VARIABLE}={text}: {e}")),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!(
            "{LOG_VARIABLE} is not UTF-8; use {}",
            dionfs_logs::LEVEL_WORDS
        )),
    }
}

/// The process's logging, once set up: its filter can still change (to a
/// config file's `log_level`, read after logging started).
pub struct Logs {
    filter: reload::Handle<EnvFilter, Registry>,
}

impl Logs {
    /// Writes only the lines `filter` lets through from now on.
    pub fn set_filter(&self, filter: &LogFilter) {
        // Fails only if the subscriber is gone, and it lives as long as
        // the process.
        let _ = self.filter.reload(env_filter(filter));
    }
}

fn env_filter(filter: &LogFilter) -> EnvFilter {
    // LogFilter holds only directives EnvFilter parses.
    EnvFilter::new(filter.directives())
}

/// Sets up the process's logging with `filter` (default `info`).
pub fn init(filter: Option<&LogFilter>) -> Logs {
    let (filter, handle) = reload::Layer::new(env_filter(filter.unwrap_or(&LogFilter::default())));
    let logs = tracing_subscriber::registry().with(filter);
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    if stderr_is_journal() {
        let format = tracing_subscriber::fmt::format()
            .without_time()
            .with_ansi(false);
        logs.with(lines.with_ansi(false).event_format(Priority(format)))
            .init();
    } else {
        let terminal = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        logs.with(lines.with_ansi(terminal)).init();
    }
    Logs { filter: handle }
}

/// Writes `message` to stderr as the reason the command failed: an error
/// line in the journal (priority 3) when stderr is the journal's stream.
pub fn fatal(message: fmt::Arguments) {
    if stderr_is_journal() {
        eprintln!("<3>{message}");
    } else {
        eprintln!("{message}");
    }
}

/// Whether stderr is the journal's stream: systemd names it in
/// `JOURNAL_STREAM` (`device:inode`); a process whose stderr was redirected
/// elsewhere keeps the variable but not the stream.
fn stderr_is_journal() -> bool {
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = stream.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let Ok(stderr) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    dev.parse() == Ok(stderr.dev()) && ino.parse() == Ok(stderr.ino())
}

/// A format that puts the event's syslog priority before each line.
struct Priority<F>(F);

impl<S, N, F> FormatEvent<S, N> for Priority<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let priority = match *event.metadata().level() {
            Level::ERROR => 3,
            Level::WARN => 4,
            Level::INFO => 6,
            Level::DEBUG | Level::TRACE => 7,
        };
        write!(writer, "<{priority}>")?;
        self.0.format_event(ctx, writer, event)
    }
}

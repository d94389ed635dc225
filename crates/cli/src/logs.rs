//! Where the log lines go and how they look: colour only on a terminal;
//! into the journal (stderr is the stream systemd gave the unit) without a
//! timestamp, which the journal records itself, and with each line's
//! syslog priority as the `<N>` prefix journald reads, so that
//! `journalctl -p warning -u dionfs` shows the warnings and errors.

use std::fmt;
use std::io::IsTerminal;
use std::os::unix::fs::MetadataExt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// Sets up the process's logging (`DIONFS_LOG` filters, default `info`).
pub fn init() {
    let filter = EnvFilter::try_from_env("DIONFS_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if stderr_is_journal() {
        let format = tracing_subscriber::fmt::format()
            .without_time()
            .with_ansi(false);
        logs.with_ansi(false).event_format(Priority(format)).init();
    } else {
        let terminal = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        logs.with_ansi(terminal).init();
    }
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

//! READ, WRITE and COMMIT failures in the log (of any protocol's calls), a few per procedure and
//! errno at a time (`dionfs_logs`). A full filesystem refuses every
//! WRITE: an IOR-hard run against one logged ten thousand identical errors
//! in five seconds (scratch `enospc.sh`); a failing disk would do the same
//! with EIO. `dionfs_io_errors_total` counts every failure.

use std::collections::HashMap;

use dionfs_dataplane::DataError;
use dionfs_fs::OpenFile;
use parking_lot::Mutex;
use rustix::io::Errno;
use tracing::{error, warn};

use dionfs_logs::{LogBudget, More};

/// The procedures whose failures are logged here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoProc {
    Read,
    Write,
    Commit,
}

impl IoProc {
    fn name(self) -> &'static str {
        match self {
            IoProc::Read => "READ",
            IoProc::Write => "WRITE",
            IoProc::Commit => "COMMIT",
        }
    }
}

/// The log lines left for each procedure and errno. At most three
/// procedures times the errnos there are: bounded.
#[derive(Debug, Default)]
pub struct IoErrorLogs {
    budgets: Mutex<HashMap<(IoProc, i32), LogBudget>>,
}

impl IoErrorLogs {
    /// Logs `e`, the failure of `proc` on `file` (`range`: the bytes a
    /// READ asked for, `(offset, count)`), unless this procedure has
    /// failed with this errno too often in the last minute. A full
    /// filesystem or an exceeded
    /// quota is the clients' to see (they get NFS3ERR_NOSPC or
    /// NFS3ERR_DQUOT) and a warning, so is a write past the largest file
    /// (NFS3ERR_FBIG); anything else is an error.
    pub fn log(&self, proc: IoProc, file: &OpenFile, range: Option<(u64, u32)>, e: &DataError) {
        let errno = e.errno();
        let mut budgets = self.budgets.lock();
        let budget = budgets.entry((proc, errno)).or_default();
        budget.log("dionfs_io_errors_total", |held_back, more| {
            Self::write(proc, file, range, e, errno, held_back, more);
        });
    }

    /// The line of [`IoErrorLogs::log`].
    fn write(
        proc: IoProc,
        file: &OpenFile,
        range: Option<(u64, u32)>,
        e: &DataError,
        errno: i32,
        held_back: u64,
        more: More,
    ) {
        // Only for a line that is written: a failing disk fails every call.
        let what = range.map_or(String::new(), |(offset, count)| {
            format!(" of {count} bytes at {offset}")
        });
        let file = file.data().label();
        let proc = proc.name();
        let no_space = [Errno::NOSPC, Errno::DQUOT]
            .map(Errno::raw_os_error)
            .contains(&errno);
        if no_space && matches!(e, DataError::ChecksumStore(_)) {
            warn!(%file, error = %e, earlier_not_logged = held_back,
                "{proc}{what} failed: the state directory's filesystem is full, the data was \
                 written but not its checksums; clients get NFS3ERR_NOSPC until space is \
                 freed{more}");
        } else if no_space {
            warn!(%file, error = %e, earlier_not_logged = held_back,
                "{proc}{what} failed: the export's filesystem is full or the caller's quota \
                 is spent; clients get NFS3ERR_NOSPC or NFS3ERR_DQUOT until space is freed{more}");
        } else if errno == Errno::FBIG.raw_os_error() {
            // The client's to see, not a fault of the server or its disk.
            let limit = dionfs_sys::io::file_size_limit()
                .map_or("none".to_owned(), |bytes| format!("{bytes} bytes"));
            warn!(%file, error = %e, earlier_not_logged = held_back,
                "{proc}{what} failed: past the largest file this server may write (its file-size \
                 limit, RLIMIT_FSIZE: {limit}; or the filesystem's); clients get NFS3ERR_FBIG{more}");
        } else {
            error!(%file, error = %e, earlier_not_logged = held_back, "{proc}{what} failed{more}");
        }
    }
}

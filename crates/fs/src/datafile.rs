//! Stand-in for `dionfs_dataplane::DataFile` until the data plane lands
//! (same constructor signature); replaced by a re-export then.

use std::io;
use std::os::fd::OwnedFd;

/// An open regular file for the data plane.
#[derive(Debug)]
pub struct DataFile {
    #[allow(dead_code)]
    buffered: OwnedFd,
    #[allow(dead_code)]
    direct: Option<OwnedFd>,
}

impl DataFile {
    /// Wraps the buffered descriptor and, where available, an `O_DIRECT` one.
    pub fn new(buffered: OwnedFd, direct: Option<OwnedFd>) -> io::Result<DataFile> {
        Ok(DataFile { buffered, direct })
    }
}

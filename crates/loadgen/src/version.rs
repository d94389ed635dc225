//! What each NFS version does for the engine in main.rs.

use std::time::Duration;

use crate::wire::Wire;

/// How long a set-up call may take.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// One NFS version's calls on a connection set up: READ and WRITE from
/// templates on the slot of their request, their replies decoded in
/// place, COMMIT and tear-down as plain calls.
pub trait Proto {
    /// Queues a READ of the template's size at `off` on `slot`.
    fn queue_read(&mut self, w: &mut Wire, slot: usize, xid: u32, off: u64);
    /// Sends a WRITE of `data` at `off` on `slot` (with whatever is
    /// queued).
    fn send_write(
        &mut self,
        w: &mut Wire,
        slot: usize,
        xid: u32,
        off: u64,
        data: &[u8],
    ) -> std::io::Result<()>;
    /// A READ's data, from its reply's results.
    fn read_done<'a>(&mut self, slot: usize, res: &'a [u8]) -> Result<&'a [u8], String>;
    /// The bytes a WRITE wrote, from its reply's results.
    fn write_done(&mut self, slot: usize, res: &[u8]) -> Result<u64, String>;
    /// COMMIT of the whole file (nothing else in flight).
    fn commit(&mut self, w: &mut Wire) -> Result<(), String>;
    /// Gives back what the server keeps for this connection.
    fn close(&mut self, w: &mut Wire);
    /// The largest READ and WRITE the server takes.
    fn maxes(&self) -> (u64, u64);
}

//! The buffer of one WRITE: a pool buffer with the payload placed where
//! the write path wants it, received straight from the socket.

use dionfs_integrity::{Arriving, ARRIVAL_PIECE};

use crate::pool::PooledBuf;

/// A pool buffer prepared for one WRITE: the payload goes at the position
/// the file's direct-I/O alignment wants (`offset mod A`), so a misaligned
/// payload needs no copy before the direct write. Get it from
/// [`crate::DataPlane::prepare_write`], fill [`WriteBuffer::payload_mut`] from the
/// socket, pass it to [`crate::DataPlane::write`].
#[derive(Debug)]
pub struct WriteBuffer {
    pub(crate) buf: PooledBuf,
    pub(crate) offset: u64,
    /// Where the payload starts in `buf`.
    pub(crate) at: usize,
    pub(crate) len: usize,
    /// With integrity ([`dionfs_integrity::Order::Arrival`]) and a payload of whole blocks:
    /// its checksums, computed as it arrives ([`WriteBuffer::arrived`]).
    pub(crate) arriving: Option<Arriving>,
}

impl WriteBuffer {
    /// The slice to receive the payload into (exactly `len` bytes).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.at..self.at + self.len]
    }

    /// How many payload bytes to receive before each call of
    /// [`WriteBuffer::arrived`]: [`ARRIVAL_PIECE`] when the payload's
    /// checksums are computed as it arrives, else all of it.
    pub fn receive_piece(&self) -> usize {
        match self.arriving {
            Some(_) => ARRIVAL_PIECE,
            None => self.len.max(1),
        }
    }

    /// Tells the buffer that the first `received` payload bytes have
    /// arrived and will not change any more: with integrity, the
    /// checksums of the blocks they complete are computed now, while those
    /// bytes are still in the CPU's cache. A receiver that never calls it
    /// (or stops early) only leaves the checksums to the write.
    pub fn arrived(&mut self, received: usize) {
        if let Some(arriving) = &mut self.arriving {
            let received = received.min(self.len);
            arriving.arrived(&self.buf[self.at..self.at + received]);
        }
    }

    /// The payload's checksums if all of them were computed as it arrived.
    pub(crate) fn arrived_crcs(&self) -> Option<&[u32]> {
        self.arriving.as_ref()?.crcs(self.len)
    }

    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buf[self.at..self.at + self.len]
    }

    /// The file offset the payload is for.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Payload length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Moves the payload to buffer position `at` (only needed if the buffer
    /// was prepared for a file with another alignment).
    pub(crate) fn move_payload_to(&mut self, at: usize) {
        if at != self.at {
            self.buf.copy_within(self.at..self.at + self.len, at);
            self.at = at;
        }
    }
}

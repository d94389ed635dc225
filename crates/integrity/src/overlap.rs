//! Checksumming a write's blocks while the write itself is in flight.
//!
//! Seed 003 (btrfs `async_csum`): with checksumming and the device of
//! comparable speed, computing the checksums *in parallel with* submitting
//! the write, instead of before it, takes the bandwidth from
//! `1/(1/mem + 1/crc + 1/dev)` to `1/(1/mem + max(1/crc, 1/dev))`. That is
//! only safe on a buffer nobody can change while the write reads it: here
//! the server's own pool buffer, into which the WRITE payload was received
//! and which no client can reach any more.
//!
//! How: the calling thread (a blocking-pool thread holding the write's
//! range lock) issues the data write; the checksums are computed by a
//! parked helper thread at the same time ([`dionfs_sys::beside::Helpers`]:
//! the call returns when both are done). If every helper is busy, the
//! calling thread computes them itself after the I/O, so nothing ever
//! waits for a helper. (Not a rayon pool: its idle workers spin on
//! `sched_yield` after every job, which cost more CPU than the checksums
//! themselves: `integritybench` with one writer measured 0.27 CPU s/GiB
//! overlapped on rayon against 0.17 checksumming first.) The io_uring
//! write path needs no helper at all: the kernel writes while the calling
//! task checksums (`dataplane/src/write.rs`). Writes below [`OVERLAP_MIN`] bytes
//! are checksummed on the calling thread after the write: handing them to
//! another thread costs more than their checksum.
//!
//! [`Order::Arrival`] (the default) goes one step earlier for a payload of
//! whole blocks: its checksums are computed while the payload is still
//! arriving from the client, a piece of [`ARRIVAL_PIECE`] bytes at a time
//! on the connection's task right after that piece was copied from the
//! socket ([`Arriving`]), so the write finds them done. What this saves is
//! memory traffic, not instructions: the CRC of a block still in the CPU's
//! cache runs at about 0.012-0.015 s per GiB on this project's Intel host,
//! while a 1 MiB payload received whole has partly left the cache by the
//! time it is checksummed (`crcspeed`'s `copied` lines: 0.018-0.021 s per
//! GiB against 0.015 in pieces; in the server, twelve 4 GiB writes each
//! way, 0.019 s per GiB less user time, docs/bench/archive/integrity-cost.md).
//! The blocks are the server's own buffer as soon as they are copied, so
//! a client cannot change them afterwards either. Payloads that do not
//! start and end on block boundaries (their edge blocks need bytes from
//! the file first) are checksummed as in [`Order::Overlapped`].
//!
//! [`Order::Sequential`] computes the checksums first and writes after, the
//! order the seed improves on; it exists to measure the difference
//! (`DIONFS_INTEGRITY_ORDER=sequential`, or `overlapped` for computing
//! during the write only, and the `overlap` example).

use dionfs_sys::beside::Helpers;

use crate::block_crcs;

/// Writes at least this long have their checksums computed on a worker
/// while the calling thread writes.
pub const OVERLAP_MIN: usize = 64 << 10;

/// Payload bytes received (and checksummed) at a time with
/// [`Order::Arrival`]: small enough that a piece is still in the CPU's
/// cache when its checksums are computed, large enough that the extra
/// `recv` calls cost less than the cache misses they avoid (three more per
/// MiB).
pub const ARRIVAL_PIECE: usize = 256 << 10;

/// When a write's checksums are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// As a payload of whole blocks arrives ([`Arriving`]), the rest as
    /// [`Order::Overlapped`] (the default).
    Arrival,
    /// On a worker while the data write is in flight.
    Overlapped,
    /// Before the data write, on the calling thread.
    Sequential,
}

impl std::fmt::Display for Order {
    /// In `DIONFS_INTEGRITY_ORDER`'s words.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Order::Arrival => "arrival",
            Order::Overlapped => "overlapped",
            Order::Sequential => "sequential",
        })
    }
}

/// Computes write checksums alongside the data write (see the module
/// documentation). One per [`crate::Store`].
pub struct Checksummer {
    helpers: Helpers,
    order: Order,
}

impl std::fmt::Debug for Checksummer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checksummer")
            .field("order", &self.order)
            .finish()
    }
}

impl Checksummer {
    /// A checksummer with `threads` helpers (at least one) computing in
    /// `order`.
    pub fn new(threads: usize, order: Order) -> Checksummer {
        let helpers = Helpers::new(threads.max(1), "dionfs-crc");
        Checksummer { helpers, order }
    }

    /// The order from `DIONFS_INTEGRITY_ORDER` (`sequential`,
    /// `overlapped` or, by default, `arrival`).
    pub fn order_from_env() -> Order {
        match std::env::var("DIONFS_INTEGRITY_ORDER").as_deref() {
            Ok("sequential") => Order::Sequential,
            Ok("overlapped") => Order::Overlapped,
            _ => Order::Arrival,
        }
    }

    /// The order this checksummer computes in.
    pub fn order(&self) -> Order {
        self.order
    }

    /// Runs `io` (the data write of `blocks`) and computes the checksums of
    /// the consecutive blocks `blocks` (the last may be short: the end of
    /// the file); returns both. `blocks` must not change until this
    /// returns, which the shared borrow guarantees.
    pub fn write_with_crcs<T>(&self, blocks: &[u8], io: impl FnOnce() -> T) -> (T, Vec<u32>) {
        let mut crcs = Vec::with_capacity(blocks.len().div_ceil(crate::BLOCK as usize));
        match self.order {
            Order::Sequential => {
                block_crcs(blocks, &mut crcs);
                (io(), crcs)
            }
            Order::Overlapped | Order::Arrival if blocks.len() >= OVERLAP_MIN => {
                let out = &mut crcs;
                let result = self.helpers.join(|| block_crcs(blocks, out), io);
                (result, crcs)
            }
            _ => {
                let result = io();
                block_crcs(blocks, &mut crcs);
                (result, crcs)
            }
        }
    }
}

/// The checksums of a WRITE payload of whole blocks, computed as its
/// bytes arrive ([`Order::Arrival`]).
#[derive(Debug)]
pub struct Arriving {
    crcs: Vec<u32>,
    /// Payload bytes checksummed (whole blocks).
    summed: usize,
}

impl Arriving {
    /// For a payload of `len` bytes covering whole blocks of the file
    /// (starting and ending on block boundaries).
    pub fn new(len: usize) -> Arriving {
        Arriving {
            crcs: Vec::with_capacity(len.div_ceil(crate::BLOCK as usize)),
            summed: 0,
        }
    }

    /// `received` is the payload received so far, which must not change
    /// from now on: checksums the whole blocks it completed since the last
    /// call.
    pub fn arrived(&mut self, received: &[u8]) {
        let block = crate::BLOCK as usize;
        let end = received.len() / block * block;
        if end > self.summed {
            block_crcs(&received[self.summed..end], &mut self.crcs);
            self.summed = end;
        }
    }

    /// The checksums of all `len` payload bytes, if they have all arrived.
    pub fn crcs(&self, len: usize) -> Option<&[u32]> {
        (self.summed == len).then_some(&self.crcs[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_orders_give_the_same_checksums() {
        let data: Vec<u8> = (0..(1 << 20) + 100).map(|i| (i * 7 % 251) as u8).collect();
        let mut want = Vec::new();
        block_crcs(&data, &mut want);
        for order in [Order::Arrival, Order::Overlapped, Order::Sequential] {
            let c = Checksummer::new(2, order);
            let (r, crcs) = c.write_with_crcs(&data, || 42);
            assert_eq!(r, 42);
            assert_eq!(crcs, want, "{order:?}");
            let (_, small) = c.write_with_crcs(&data[..5000], || ());
            assert_eq!(
                small,
                want[..2]
                    .iter()
                    .copied()
                    .take(1)
                    .chain([crate::block_crc(&data[4096..5000])])
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn arriving_sums_the_blocks_of_the_pieces_received() {
        let data: Vec<u8> = (0..300 << 10).map(|i| (i * 13 % 253) as u8).collect();
        let mut want = Vec::new();
        block_crcs(&data, &mut want);
        // Pieces that end inside blocks, and calls with nothing new.
        let mut a = Arriving::new(data.len());
        for end in [0, 5000, 5000, 4096 * 3, 70_001, (299 << 10) + 7] {
            a.arrived(&data[..end]);
            assert_eq!(a.crcs(data.len()), None);
        }
        a.arrived(&data);
        assert_eq!(a.crcs(data.len()), Some(&want[..]));
        assert_eq!(a.crcs(data.len() + 4096), None);
    }
}

//! The CPU a block checksum costs on data in cache and on data that is not
//! (a benchmark tool, not a test): `dionfs_integrity::crc32c` over every
//! 4 KiB block of 1 GiB, in 1 MiB chunks as a READ sees them. `cold`
//! touches 64 MiB of other memory before each chunk, so the chunk comes
//! from DRAM, as the blocks of a direct READ do (DMA fills no cache);
//! `cached` checksums each chunk once before the timed pass. Each is timed
//! as the server computes it, one call per 4 KiB block, and with one call
//! per 1 MiB chunk (what the per-call overhead costs).
//!
//! Usage: `cargo run --release -p dionfs-integrity --example crcspeed [reps]`

use std::time::Instant;

const TOTAL: usize = 1 << 30;
const CHUNK: usize = 1 << 20;
const EVICT: usize = 64 << 20;

fn main() {
    let reps: usize = std::env::args()
        .nth(1)
        .map_or(3, |s| s.parse().expect("reps"));
    let mut data = vec![0u8; TOTAL];
    for (i, b) in data.iter_mut().enumerate() {
        *b = (i.wrapping_mul(7) ^ (i >> 12)) as u8;
    }
    let mut other = vec![0u8; EVICT];
    let mut sink = 0u32;
    for rep in 0..reps {
        for per_block in [true, false] {
            for cold in [true, false] {
                let mut secs = 0.0;
                for chunk in data.chunks(CHUNK) {
                    if cold {
                        for x in other.iter_mut().step_by(64) {
                            *x = x.wrapping_add(1);
                        }
                    } else {
                        sink ^= checksum(chunk, per_block);
                    }
                    let t = Instant::now();
                    sink ^= checksum(chunk, per_block);
                    secs += t.elapsed().as_secs_f64();
                }
                println!(
                    "rep {rep} {} {}: {:.3} s per GiB ({:.1} GB/s)",
                    if per_block {
                        "per 4 KiB block"
                    } else {
                        "per 1 MiB call "
                    },
                    if cold { "cold  " } else { "cached" },
                    secs,
                    TOTAL as f64 / secs / 1e9
                );
            }
        }
    }
    let mut pool = vec![0u8; 32 * CHUNK];
    for rep in 0..reps {
        for piece in [CHUNK, dionfs_integrity::ARRIVAL_PIECE] {
            let mut secs = 0.0;
            for (i, chunk) in data.chunks(CHUNK).enumerate() {
                let payload = pool.chunks_mut(CHUNK).nth(i % 32).expect("32 buffers");
                for (dst, src) in payload.chunks_mut(piece).zip(chunk.chunks(piece)) {
                    for (d, s) in dst.chunks_mut(64 << 10).zip(src.chunks(64 << 10)) {
                        d.copy_from_slice(s);
                    }
                    let t = Instant::now();
                    sink ^= checksum(dst, true);
                    secs += t.elapsed().as_secs_f64();
                }
            }
            println!(
                "rep {rep} copied, checksummed per {:>4} KiB: {:.3} s per GiB ({:.1} GB/s)",
                piece >> 10,
                secs,
                TOTAL as f64 / secs / 1e9
            );
        }
    }
    // Keeps the checksums from being optimised away.
    std::hint::black_box(sink);
}

fn checksum(chunk: &[u8], per_block: bool) -> u32 {
    if !per_block {
        return dionfs_integrity::crc32c(chunk);
    }
    chunk
        .chunks(dionfs_integrity::BLOCK as usize)
        .fold(0, |acc, block| acc ^ dionfs_integrity::crc32c(block))
}

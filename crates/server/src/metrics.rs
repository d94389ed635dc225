//! Counters for operators and the benchmark, in the Prometheus text format
//! (version 0.0.4), served over plain HTTP on `--metrics ADDR:PORT` and read
//! back by `dionfs stats`.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dionfs_dataplane::{CounterSnapshot, OpsBytes, PerMode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::callstats::CallStats;
use crate::nlm::LockService;
use dionfs_core::server::Server;

/// Reads one counter out of a snapshot.
type Field = fn(&CounterSnapshot) -> u64;

/// Renders every export's data-plane counters, the connection layer's,
/// the call statistics and the lock service's.
pub fn render(server: &Server, locks: Option<&LockService>, calls: &CallStats) -> String {
    let mut out = String::new();
    let mut metric =
        |name: &str, help: &str, kind: &str, rows: &mut dyn Iterator<Item = (String, u64)>| {
            let _ = writeln!(
                out,
                "# HELP dionfs_{name} {help}\n# TYPE dionfs_{name} {kind}"
            );
            for (labels, value) in rows {
                if labels.is_empty() {
                    let _ = writeln!(out, "dionfs_{name} {value}");
                } else {
                    let _ = writeln!(out, "dionfs_{name}{{{labels}}} {value}");
                }
            }
        };
    let exports = server.exports();
    let snaps: Vec<_> = exports
        .iter()
        .map(|x| (x.config.path.display().to_string(), x.data.snapshot()))
        .collect();
    let per_mode =
        |dir: &'static str, pick: fn(&CounterSnapshot) -> PerMode, field: fn(OpsBytes) -> u64| {
            snaps
                .iter()
                .flat_map(move |(path, s)| {
                    let p = pick(s);
                    [
                        ("buffered", p.buffered),
                        ("dontcache", p.dontcache),
                        ("direct", p.direct),
                    ]
                    .into_iter()
                    .map(move |(mode, ob)| {
                        (
                            format!("export=\"{path}\",direction=\"{dir}\",mode=\"{mode}\""),
                            field(ob),
                        )
                    })
                })
                .collect::<Vec<_>>()
        };
    let mut ops = per_mode("read", |s| s.read, |o| o.ops);
    ops.extend(per_mode("write", |s| s.write, |o| o.ops));
    metric(
        "data_ops_total",
        "READ and WRITE operations by mode and direction.",
        "counter",
        &mut ops.into_iter(),
    );
    let mut bytes = per_mode("read", |s| s.read, |o| o.bytes);
    bytes.extend(per_mode("write", |s| s.write, |o| o.bytes));
    metric(
        "data_bytes_total",
        "Bytes read and written by mode and direction.",
        "counter",
        &mut bytes.into_iter(),
    );
    let simple: [(&str, &str, Field); 26] = [
        (
            "expanded_reads_total",
            "Direct READs widened to the read alignment.",
            |s| s.expanded_reads,
        ),
        (
            "dontcache_fallbacks_total",
            "Times RWF_DONTCACHE was refused and buffered I/O used instead.",
            |s| s.dontcache_fallbacks,
        ),
        (
            "no_direct_fallbacks_total",
            "I/O served buffered because the file cannot do direct I/O.",
            |s| s.no_direct_fallbacks,
        ),
        (
            "direct_einval_total",
            "Direct I/O refused with EINVAL although aligned (a bug).",
            |s| s.direct_einval,
        ),
        (
            "short_writes_total",
            "Writes the kernel took only part of (the filesystem filled up, or the file reached the file-size limit, part-way); the rest was tried again.",
            |s| s.short_writes,
        ),
        ("io_errors_total", "Data-plane I/O errors.", |s| s.errors),
        (
            "buffered_edges_total",
            "Partial edge blocks of misaligned direct WRITEs written through the page cache.",
            |s| s.buffered_edges,
        ),
        (
            "buffered_misaligned_total",
            "Small misaligned direct WRITEs written whole through the page cache (dropped at COMMIT).",
            |s| s.buffered_misaligned,
        ),
        (
            "edge_page_reads_total",
            "Uncached partial pages with data read in before such a page-cache WRITE (both at once).",
            |s| s.edge_page_reads,
        ),
        (
            "write_behind_bytes_total",
            "Bytes of file ranges whose dirty pages from such page-cache WRITEs had writeback started before COMMIT (write-behind).",
            |s| s.write_behind_bytes,
        ),
        (
            "fua_writes_total",
            "Stable direct WRITEs made durable by RWF_DSYNC/RWF_SYNC on the write itself.",
            |s| s.fua_writes,
        ),
        (
            "range_lock_waits_total",
            "I/O that waited for a range lock.",
            |s| s.range_lock_waits,
        ),
        (
            "pool_waits_total",
            "Requests that waited for a pool buffer (read or write pool).",
            |s| s.pool_waits,
        ),
        (
            "ring_reads_total",
            "Direct READs read through io_uring, without a blocking thread.",
            |s| s.ring_reads,
        ),
        (
            "clustered_reads_total",
            "Small direct-mode READs served through the page cache because the file's small READs cluster (drop-behind).",
            |s| s.clustered_reads,
        ),
        (
            "ring_writes_total",
            "Aligned direct WRITEs written through io_uring, without a blocking thread.",
            |s| s.ring_writes,
        ),
        (
            "task_writes_total",
            "Small UNSTABLE overwrites of cached pages written by the connection's task, without a blocking thread.",
            |s| s.task_writes,
        ),
        (
            "task_write_handoffs_total",
            "Small WRITEs tried on the connection's task that went to a blocking thread (pages not cached, file extended, other I/O).",
            |s| s.task_write_handoffs,
        ),
        (
            "integrity_errors_total",
            "Blocks read that did not match their CRC32C (the READ failed with NFS3ERR_IO).",
            |s| s.integrity_errors,
        ),
        (
            "integrity_rebuilds_total",
            "Files whose checksums were rebuilt because they changed behind the server's back.",
            |s| s.integrity_rebuilds,
        ),
        (
            "readahead_hits_total",
            "Direct READs served from data prefetched by readahead.",
            |s| s.readahead_hits,
        ),
        (
            "readahead_misses_total",
            "Direct READs of a sequential stream that readahead had not prefetched.",
            |s| s.readahead_misses,
        ),
        (
            "readahead_waits_total",
            "Readahead hits that waited for their prefetch to finish.",
            |s| s.readahead_waits,
        ),
        (
            "large_read_waits_total",
            "Large direct reads that waited for room at the device while small ones were there.",
            |s| s.large_read_waits,
        ),
        (
            "readahead_bytes_total",
            "Bytes read from the device by readahead.",
            |s| s.readahead_bytes,
        ),
        (
            "readahead_discards_total",
            "Prefetched ranges dropped unused (overwritten, truncated, expired, stream stopped, short read).",
            |s| s.readahead_discards,
        ),
    ];
    for (name, help, get) in simple {
        let mut rows = snaps
            .iter()
            .map(|(path, s)| (format!("export=\"{path}\""), get(s)));
        metric(name, help, "counter", &mut rows);
    }
    let syncs: Vec<_> = exports
        .iter()
        .map(|x| {
            let path = x.config.path.display().to_string();
            (path, x.metadata_sync.counters())
        })
        .collect();
    let mut fsyncs = syncs.iter().flat_map(|(path, c)| {
        [
            ("directory", c.dir_fsyncs),
            ("file", c.file_fsyncs),
            ("filesystem", c.filesystem_syncs),
        ]
        .map(|(object, n)| (format!("export=\"{path}\",object=\"{object}\""), n))
    });
    metric(
        "metadata_syncs_total",
        "fsyncs (directory, file) and syncfs (filesystem) made to keep metadata changes durable.",
        "counter",
        &mut fsyncs,
    );
    metric(
        "metrics_connections_refused_total",
        "Connections to this endpoint closed at once because MAX_SCRAPES scrapes were in progress.",
        "counter",
        &mut std::iter::once((String::new(), SCRAPES_REFUSED.load(Ordering::Relaxed))),
    );
    let mut faults = std::iter::once((String::new(), server.server_faults()));
    metric(
        "server_faults_total",
        "Calls answered SERVERFAULT because of the server itself (each also logged).",
        "counter",
        &mut faults,
    );
    let fixed = server.io_ring.as_ref().map_or(0, |r| r.fixed_ops());
    metric(
        "ring_fixed_ops_total",
        "io_uring reads and writes made on registered (pre-pinned) pool buffers.",
        "counter",
        &mut std::iter::once((String::new(), fixed)),
    );
    let mut oversized = std::iter::once((String::new(), server.oversized_args()));
    metric(
        "oversized_args_total",
        "NFS and MOUNT calls answered GARBAGE_ARGS because their arguments were longer than the procedure's can be (refused before they were read).",
        "counter",
        &mut oversized,
    );
    let net = server.net.snapshot();
    metric(
        "connections_open",
        "Client connections open now (NFS, MOUNT and portmap).",
        "gauge",
        &mut std::iter::once((String::new(), net.open)),
    );
    metric(
        "connections_refused_total",
        "Connections closed at once because max_connections were open and none was quiet.",
        "counter",
        &mut std::iter::once((String::new(), net.refused)),
    );
    metric(
        "connections_evicted_total",
        "Connections closed, quiet longest, to make room for a new one at max_connections.",
        "counter",
        &mut std::iter::once((String::new(), net.evicted)),
    );
    let mut dropped = [
        ("stalled_record", net.stalled),
        ("unread_replies", net.unread_replies),
        ("idle", net.idle),
        ("record_too_large", net.too_large),
    ]
    .into_iter()
    .map(|(reason, n)| (format!("reason=\"{reason}\""), n));
    metric(
        "connections_dropped_total",
        "Connections the server closed: a call that stopped arriving for stall_timeout, replies unread for reply_timeout, no calls for idle_timeout, a record longer than the largest call.",
        "counter",
        &mut dropped,
    );
    metric(
        "calls_delayed_by_share_total",
        "READs and WRITEs that waited because their connection held its share of buffers (connection_buffers).",
        "counter",
        &mut std::iter::once((String::new(), net.share_delays)),
    );
    let (staged_payloads, staged_bytes) = server.staging.staged();
    metric(
        "payloads_staged_total",
        "WRITE payloads whose start was read into staging memory because the client's receive window closed before the whole payload arrived (a fresh connection's window is about 64 KiB).",
        "counter",
        &mut std::iter::once((String::new(), staged_payloads)),
    );
    metric(
        "payload_bytes_staged_total",
        "Bytes of WRITE payloads read into staging memory (see payloads_staged_total).",
        "counter",
        &mut std::iter::once((String::new(), staged_bytes)),
    );
    metric(
        "replies_batched_total",
        "Replies written together with other replies of their connection in one writev (replies that finished while another was being written).",
        "counter",
        &mut std::iter::once((String::new(), net.batched_replies)),
    );
    metric(
        "idle_spins_total",
        "Times a connection sending one call at a time, its call answered and no call in flight on the server, looked for its next call before sleeping (idle_spin_us).",
        "counter",
        &mut std::iter::once((String::new(), net.idle_spins)),
    );
    metric(
        "idle_spin_catches_total",
        "Calls found by those looks (idle_spins_total): each a sleep and a wake-up of the server's thread saved.",
        "counter",
        &mut std::iter::once((String::new(), net.spin_catches)),
    );
    metric(
        "udp_replies_dropped_total",
        "UDP replies larger than their call (portmap and rpcbind DUMP) not sent because more than 16 a second were asked for: over UDP a forged source address would turn them on a victim.",
        "counter",
        &mut std::iter::once((String::new(), net.udp_replies_dropped)),
    );
    if let Some(locks) = locks {
        let c = &locks.counters;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let mut outcomes = [
            ("granted", load(&c.granted)),
            ("denied", load(&c.denied)),
            ("blocked", load(&c.blocked)),
        ]
        .into_iter()
        .map(|(o, n)| (format!("outcome=\"{o}\""), n));
        metric(
            "nlm_locks_total",
            "NLM LOCK calls by outcome (granted: at once or later to a blocked one; denied: conflicts, grace period, errors).",
            "counter",
            &mut outcomes,
        );
        metric(
            "nlm_locks_held",
            "Byte-range locks held for NLM clients now.",
            "gauge",
            &mut std::iter::once((String::new(), locks.lock_count() as u64)),
        );
        metric(
            "nlm_waiters",
            "Blocked NLM LOCKs waiting now.",
            "gauge",
            &mut std::iter::once((String::new(), locks.waiter_count() as u64)),
        );
        metric(
            "nlm_callbacks_failed_total",
            "GRANTED and _RES calls to clients that failed after retries.",
            "counter",
            &mut std::iter::once((String::new(), load(&c.callbacks_failed))),
        );
        metric(
            "nlm_callbacks_dropped_total",
            "GRANTED and _RES calls to clients dropped: as many calls to that client were waiting as may.",
            "counter",
            &mut std::iter::once((String::new(), load(&c.callbacks_dropped))),
        );
        metric(
            "nlm_hosts_dropped_total",
            "Times a client's locks were all dropped (SM_NOTIFY of a reboot, FREE_ALL).",
            "counter",
            &mut std::iter::once((String::new(), load(&c.hosts_dropped))),
        );
    }
    calls.render(&mut out);
    out
}

/// Scrapes served at once; a connection past them is closed at once.
pub const MAX_SCRAPES: usize = 16;

/// Connections closed at once for want of a slot (the process has one
/// metrics endpoint).
static SCRAPES_REFUSED: AtomicU64 = AtomicU64::new(0);

/// How long one scrape may take, from accept to the last byte written: a
/// client that sends no request or reads no response holds its slot no
/// longer.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `/metrics` until the process ends: at most [`MAX_SCRAPES`] at
/// once, each for at most [`SCRAPE_TIMEOUT`], so that connections that
/// send nothing or read nothing cannot pile up tasks and responses (each
/// holds a rendering of every counter) without bound.
pub async fn serve(
    listener: TcpListener,
    server: Arc<Server>,
    locks: Option<Arc<LockService>>,
    calls: Arc<CallStats>,
) {
    info!(addr = ?listener.local_addr().ok(), "metrics endpoint listening");
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_SCRAPES));
    let refused = dionfs_logs::LogBudget::default();
    loop {
        let (mut stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            SCRAPES_REFUSED.fetch_add(1, Ordering::Relaxed);
            refused.log(
                "dionfs_metrics_connections_refused_total",
                |held_back, more| {
                    warn!(%peer, held_back, max = MAX_SCRAPES,
                    "metrics connection closed: {MAX_SCRAPES} scrapes in progress already{more}");
                },
            );
            drop(stream);
            continue;
        };
        let (server, locks, calls) = (server.clone(), locks.clone(), calls.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let scrape = async {
                // The request itself does not matter: every path gets the
                // metrics.
                let mut request = [0u8; 1024];
                let _ =
                    tokio::time::timeout(Duration::from_secs(5), stream.read(&mut request)).await;
                let body = render(&server, locks.as_deref(), &calls);
                let response = format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            };
            let _ = tokio::time::timeout(SCRAPE_TIMEOUT, scrape).await;
        });
    }
}

pub use dionfs_core::export::STATS_ADDRESS;

/// Reads the metrics of a running server (`dionfs stats`).
pub fn fetch(addr: &str) -> io::Result<String> {
    let addr: SocketAddr = addr
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "expected ADDR:PORT"))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    match response.split_once("\r\n\r\n") {
        Some((_, body)) => Ok(body.to_string()),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not an HTTP response",
        )),
    }
}

//! Counters for operators and the benchmark, served over plain HTTP on
//! `--metrics ADDR:PORT` in the OpenMetrics text format (what Prometheus
//! scrapes; `# EOF` last, counters' samples named `*_total`) and read back
//! by `dionfs stats`.
//!
//! The counters are the server's own relaxed atomics, read at each scrape
//! by the collectors here; `prometheus-client` only
//! writes them out (names, types, units, values), so that recording on a
//! call's path stays a few atomic adds.

use std::fmt::{self, Write as _};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dionfs_dataplane::{CounterSnapshot, OpsBytes, PerMode};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelValue, EncodeMetric, LabelValueEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::callstats::{CallStats, BOUNDS_US};
use crate::nlm::LockService;
use dionfs_core::server::Server;

/// What `/metrics` answers with: the OpenMetrics 1.0 text that
/// `prometheus-client` writes. (Read as the older Prometheus text format,
/// its counters would lose their type: their `# TYPE` names the family,
/// without `_total`.)
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The registry of every metric the server exports, named `dionfs_*`:
/// the exports' data-plane counters, the connection layer's, the lock
/// service's (when NLM runs) and the call statistics.
pub fn registry(
    server: Arc<Server>,
    locks: Option<Arc<LockService>>,
    calls: Arc<CallStats>,
) -> Registry {
    let mut registry = Registry::with_prefix("dionfs");
    registry.register_collector(Box::new(ServerMetrics { server, locks }));
    registry.register_collector(Box::new(CallHistogram(calls)));
    registry
}

/// Adds NFSv4's state to `registry`: its clients, sessions, open and lock
/// stateids and slot cache, read at each scrape.
pub fn register_nfs4(registry: &mut Registry, state: Arc<crate::nfs4::state::State>) {
    registry.register_collector(Box::new(Nfs4Metrics(state)));
}

/// NFSv4's state as gauges (`dionfs_nfs4_*`).
struct Nfs4Metrics(Arc<crate::nfs4::state::State>);

impl fmt::Debug for Nfs4Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nfs4Metrics").finish_non_exhaustive()
    }
}

impl Collector for Nfs4Metrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let c = self.0.counts();
        let n = |x: usize| x as u64;
        let gauges = [
            (
                "nfs4_clients",
                "Confirmed NFSv4 client records now, courtesy ones included.",
                n(c.clients),
            ),
            (
                "nfs4_clients_unconfirmed",
                "NFSv4 client records not confirmed by a CREATE_SESSION yet.",
                n(c.unconfirmed),
            ),
            (
                "nfs4_clients_courtesy",
                "NFSv4 clients whose lease ran out holding state, kept until a conflict.",
                n(c.courtesy),
            ),
            ("nfs4_sessions", "NFSv4.1 sessions now.", n(c.sessions)),
            (
                "nfs4_open_stateids",
                "Open stateids of NFSv4 clients now (one per open owner and file).",
                n(c.opens),
            ),
            (
                "nfs4_lock_stateids",
                "Lock stateids of NFSv4 clients now (one per lock owner and file).",
                n(c.locks),
            ),
            (
                "nfs4_delegations",
                "Delegations NFSv4 clients hold now (read and write).",
                n(c.delegations),
            ),
            (
                "nfs4_slot_cache_reserved_bytes",
                "Bytes of the NFSv4 reply-cache budget the sessions' slots reserve.",
                n(c.slot_cache_reserved),
            ),
            (
                "nfs4_slot_cache_bytes",
                "Bytes of replies the sessions' slots cache now.",
                n(c.slot_cache_used),
            ),
        ];
        for (name, help, value) in gauges {
            gauge(&mut encoder, name, help, value)?;
        }
        counter(
            &mut encoder,
            "nfs4_refused",
            "NFSv4 requests refused at a bound of the state (clients, sessions, owners...), answered NFS4ERR_DELAY.",
            c.refused,
        )
    }
}

/// The exposition of `registry`: its metrics as they are now, then `# EOF`.
/// Fails only if a value cannot be written (a gauge past `i64::MAX`).
pub fn render(registry: &Registry) -> Result<String, fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

/// A label value written with `\`, `"` and newline escaped, as the text
/// format requires: `prometheus-client` 0.24 writes label values as they
/// come, and an export's path (the `export` label) is the administrator's
/// text, any byte but `/` and NUL.
struct Escaped<'a>(&'a str);

impl EncodeLabelValue for Escaped<'_> {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..at])?;
            encoder.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        encoder.write_str(rest)
    }
}

/// Writes a counter without labels: `dionfs_{name}_total`.
fn counter(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> fmt::Result {
    ConstCounter::new(value).encode(encoder.encode_descriptor(
        name,
        help,
        None,
        MetricType::Counter,
    )?)
}

/// Writes a counter with a sample per label set: `dionfs_{name}_total{...}`.
fn counters<'a, const N: usize>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = ([(&'static str, Escaped<'a>); N], u64)>,
) -> fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in samples {
        ConstCounter::new(value).encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Writes a gauge without labels: `dionfs_{name}`.
fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> fmt::Result {
    ConstGauge::new(value).encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// Reads one counter out of a snapshot.
type Field = fn(&CounterSnapshot) -> u64;

/// Reads one direction's counters (READs or WRITEs) out of a snapshot.
type Direction = fn(&CounterSnapshot) -> PerMode;

/// The exports' data-plane counters, the connection layer's and the lock
/// service's, read from the server at each scrape.
struct ServerMetrics {
    server: Arc<Server>,
    locks: Option<Arc<LockService>>,
}

impl fmt::Debug for ServerMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerMetrics").finish_non_exhaustive()
    }
}

impl Collector for ServerMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        self.encode_exports(&mut encoder)?;
        self.encode_server(&mut encoder)?;
        if let Some(locks) = &self.locks {
            encode_locks(locks, &mut encoder)?;
        }
        Ok(())
    }
}

impl ServerMetrics {
    /// Every export's data-plane and metadata-sync counters, labelled
    /// with its path.
    fn encode_exports(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let exports = self.server.exports();
        let snaps: Vec<_> = exports
            .iter()
            .map(|x| (x.config.path.display().to_string(), x.data.snapshot()))
            .collect();
        let per_mode = |field: fn(OpsBytes) -> u64| {
            let snaps = &snaps; // each closure below copies the reference
            let directions: [(&'static str, Direction); 2] =
                [("read", |s| s.read), ("write", |s| s.write)];
            directions.into_iter().flat_map(move |(dir, pick)| {
                snaps.iter().flat_map(move |(path, s)| {
                    let p = pick(s);
                    [
                        ("buffered", p.buffered),
                        ("dontcache", p.dontcache),
                        ("direct", p.direct),
                    ]
                    .map(|(mode, ob)| {
                        let labels = [
                            ("export", Escaped(path)),
                            ("direction", Escaped(dir)),
                            ("mode", Escaped(mode)),
                        ];
                        (labels, field(ob))
                    })
                })
            })
        };
        counters(
            encoder,
            "data_ops",
            "READ and WRITE operations by mode and direction.",
            per_mode(|o| o.ops),
        )?;
        counters(
            encoder,
            "data_bytes",
            "Bytes read and written by mode and direction.",
            per_mode(|o| o.bytes),
        )?;
        let simple: [(&str, &str, Field); 25] = [
            (
                "expanded_reads",
                "Direct READs widened to the read alignment.",
                |s| s.expanded_reads,
            ),
            (
                "dontcache_fallbacks",
                "Times RWF_DONTCACHE was refused and buffered I/O used instead.",
                |s| s.dontcache_fallbacks,
            ),
            (
                "no_direct_fallbacks",
                "I/O served buffered because the file cannot do direct I/O.",
                |s| s.no_direct_fallbacks,
            ),
            (
                "direct_einval",
                "Direct I/O refused with EINVAL although aligned (a bug).",
                |s| s.direct_einval,
            ),
            (
                "short_writes",
                "Writes the kernel took only part of (the filesystem filled up, or the file reached the file-size limit, part-way); the rest was tried again.",
                |s| s.short_writes,
            ),
            ("io_errors", "Data-plane I/O errors.", |s| s.errors),
            (
                "buffered_edges",
                "Partial edge blocks of misaligned direct WRITEs written through the page cache.",
                |s| s.buffered_edges,
            ),
            (
                "buffered_misaligned",
                "Small misaligned direct WRITEs written whole through the page cache (dropped at COMMIT).",
                |s| s.buffered_misaligned,
            ),
            (
                "edge_page_reads",
                "Uncached partial pages with data read in before such a page-cache WRITE (both at once).",
                |s| s.edge_page_reads,
            ),
            (
                "fua_writes",
                "Stable direct WRITEs made durable by RWF_DSYNC/RWF_SYNC on the write itself.",
                |s| s.fua_writes,
            ),
            (
                "range_lock_waits",
                "I/O that waited for a range lock.",
                |s| s.range_lock_waits,
            ),
            (
                "pool_waits",
                "Requests that waited for a pool buffer (read or write pool).",
                |s| s.pool_waits,
            ),
            (
                "ring_reads",
                "Direct READs read through io_uring, without a blocking thread.",
                |s| s.ring_reads,
            ),
            (
                "clustered_reads",
                "Small direct-mode READs served through the page cache because the file's small READs cluster (drop-behind).",
                |s| s.clustered_reads,
            ),
            (
                "ring_writes",
                "Aligned direct WRITEs written through io_uring, without a blocking thread.",
                |s| s.ring_writes,
            ),
            (
                "task_writes",
                "Small UNSTABLE overwrites of cached pages written by the connection's task, without a blocking thread.",
                |s| s.task_writes,
            ),
            (
                "task_write_handoffs",
                "Small WRITEs tried on the connection's task that went to a blocking thread (pages not cached, file extended, other I/O).",
                |s| s.task_write_handoffs,
            ),
            (
                "integrity_errors",
                "Blocks read that did not match their CRC32C (the READ failed with NFS3ERR_IO).",
                |s| s.integrity_errors,
            ),
            (
                "integrity_rebuilds",
                "Files whose checksums were rebuilt because they changed behind the server's back.",
                |s| s.integrity_rebuilds,
            ),
            (
                "readahead_hits",
                "Direct READs served from data prefetched by readahead.",
                |s| s.readahead_hits,
            ),
            (
                "readahead_misses",
                "Direct READs of a sequential stream that readahead had not prefetched.",
                |s| s.readahead_misses,
            ),
            (
                "readahead_waits",
                "Readahead hits that waited for their prefetch to finish.",
                |s| s.readahead_waits,
            ),
            (
                "large_read_waits",
                "Large direct reads that waited for room at the device while small ones were there.",
                |s| s.large_read_waits,
            ),
            (
                "readahead_bytes",
                "Bytes read from the device by readahead.",
                |s| s.readahead_bytes,
            ),
            (
                "readahead_discards",
                "Prefetched ranges dropped unused (overwritten, truncated, expired, stream stopped, short read).",
                |s| s.readahead_discards,
            ),
        ];
        for (name, help, get) in simple {
            let rows = snaps
                .iter()
                .map(|(path, s)| ([("export", Escaped(path))], get(s)));
            counters(encoder, name, help, rows)?;
        }
        let syncs: Vec<_> = exports
            .iter()
            .map(|x| {
                let path = x.config.path.display().to_string();
                (path, x.metadata_sync.counters())
            })
            .collect();
        let fsyncs = syncs.iter().flat_map(|(path, c)| {
            [
                ("directory", c.dir_fsyncs),
                ("file", c.file_fsyncs),
                ("filesystem", c.filesystem_syncs),
            ]
            .map(|(object, n)| {
                let labels = [("export", Escaped(path)), ("object", Escaped(object))];
                (labels, n)
            })
        });
        counters(
            encoder,
            "metadata_syncs",
            "fsyncs (directory, file) and syncfs (filesystem) made to keep metadata changes durable.",
            fsyncs,
        )
    }

    /// The server's own counters and the connection layer's.
    fn encode_server(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let server = &self.server;
        counter(
            encoder,
            "metrics_connections_refused",
            "Connections to this endpoint closed at once because MAX_SCRAPES scrapes were in progress.",
            SCRAPES_REFUSED.load(Ordering::Relaxed),
        )?;
        counter(
            encoder,
            "server_faults",
            "Calls answered SERVERFAULT because of the server itself (each also logged).",
            server.server_faults(),
        )?;
        counter(
            encoder,
            "ring_fixed_ops",
            "io_uring reads and writes made on registered (pre-pinned) pool buffers.",
            server.io_ring.as_ref().map_or(0, |r| r.fixed_ops()),
        )?;
        counter(
            encoder,
            "oversized_args",
            "NFS and MOUNT calls answered GARBAGE_ARGS because their arguments were longer than the procedure's can be (refused before they were read).",
            server.oversized_args(),
        )?;
        let net = server.net.snapshot();
        gauge(
            encoder,
            "connections_open",
            "Client connections open now (NFS, MOUNT and portmap).",
            net.open,
        )?;
        counter(
            encoder,
            "connections_refused",
            "Connections closed at once because max_connections were open and none was quiet.",
            net.refused,
        )?;
        counter(
            encoder,
            "connections_evicted",
            "Connections closed, quiet longest, to make room for a new one at max_connections.",
            net.evicted,
        )?;
        let dropped = [
            ("stalled_record", net.stalled),
            ("unread_replies", net.unread_replies),
            ("idle", net.idle),
            ("record_too_large", net.too_large),
        ]
        .map(|(reason, n)| ([("reason", Escaped(reason))], n));
        counters(
            encoder,
            "connections_dropped",
            "Connections the server closed: a call that stopped arriving for stall_timeout, replies unread for reply_timeout, no calls for idle_timeout, a record longer than the largest call.",
            dropped,
        )?;
        counter(
            encoder,
            "calls_delayed_by_share",
            "READs and WRITEs that waited because their connection held its share of buffers (connection_buffers).",
            net.share_delays,
        )?;
        let (staged_payloads, staged_bytes) = server.staging.staged();
        counter(
            encoder,
            "payloads_staged",
            "WRITE payloads whose start was read into staging memory because the client's receive window closed before the whole payload arrived (a fresh connection's window is about 64 KiB).",
            staged_payloads,
        )?;
        counter(
            encoder,
            "payload_bytes_staged",
            "Bytes of WRITE payloads read into staging memory (see payloads_staged_total).",
            staged_bytes,
        )?;
        counter(
            encoder,
            "replies_batched",
            "Replies written together with other replies of their connection in one writev (replies that finished while another was being written).",
            net.batched_replies,
        )?;
        counter(
            encoder,
            "idle_spins",
            "Times a connection sending one call at a time, its call answered and no call in flight on the server, looked for its next call before sleeping (idle_spin_us).",
            net.idle_spins,
        )?;
        counter(
            encoder,
            "idle_spin_catches",
            "Calls found by those looks (idle_spins_total): each a sleep and a wake-up of the server's thread saved.",
            net.spin_catches,
        )?;
        counter(
            encoder,
            "idle_spin_looks",
            "Looks at the socket (one non-blocking recv each, the look that finds the call reading it) made by those spins (idle_spins_total); looks_total / catches_total is what a caught call cost in system calls.",
            net.spin_looks,
        )?;
        counter(
            encoder,
            "udp_replies_dropped",
            "UDP replies larger than their call (portmap and rpcbind DUMP) not sent because more than 16 a second were asked for: over UDP a forged source address would turn them on a victim.",
            net.udp_replies_dropped,
        )?;
        counter(
            encoder,
            "tls_connections",
            "Connections switched to RPC-with-TLS (RFC 9289) after an AUTH_TLS probe, without a client certificate.",
            net.tls_connections,
        )?;
        counter(
            encoder,
            "mtls_connections",
            "Connections switched to RPC-with-TLS with a client certificate verified against [tls] client_ca.",
            net.mtls_connections,
        )?;
        counter(
            encoder,
            "tls_handshake_failures",
            "TLS handshakes that failed (bad ClientHello, a certificate that does not verify, no common ALPN) or took longer than the handshake timeout; each closed its connection, and the log says why.",
            net.tls_handshake_failures,
        )
    }
}

/// The NLM lock service's counters and gauges.
fn encode_locks(locks: &LockService, encoder: &mut DescriptorEncoder) -> fmt::Result {
    let c = &locks.counters;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let outcomes = [
        ("granted", load(&c.granted)),
        ("denied", load(&c.denied)),
        ("blocked", load(&c.blocked)),
    ]
    .map(|(outcome, n)| ([("outcome", Escaped(outcome))], n));
    counters(
        encoder,
        "nlm_locks",
        "NLM LOCK calls by outcome (granted: at once or later to a blocked one; denied: conflicts, grace period, errors).",
        outcomes,
    )?;
    gauge(
        encoder,
        "nlm_locks_held",
        "Byte-range locks held for NLM clients now.",
        locks.lock_count() as u64,
    )?;
    gauge(
        encoder,
        "nlm_waiters",
        "Blocked NLM LOCKs waiting now.",
        locks.waiter_count() as u64,
    )?;
    counter(
        encoder,
        "nlm_callbacks_failed",
        "GRANTED and _RES calls to clients that failed after retries.",
        load(&c.callbacks_failed),
    )?;
    counter(
        encoder,
        "nlm_callbacks_dropped",
        "GRANTED and _RES calls to clients dropped: as many calls to that client were waiting as may.",
        load(&c.callbacks_dropped),
    )?;
    counter(
        encoder,
        "nlm_hosts_dropped",
        "Times a client's locks were all dropped (SM_NOTIFY of a reboot, FREE_ALL).",
        load(&c.hosts_dropped),
    )
}

/// The histogram `dionfs_call_seconds` of [`CallStats`]: a sample set per
/// procedure that has had calls, labelled with its program and name.
pub(crate) struct CallHistogram(pub Arc<CallStats>);

impl fmt::Debug for CallHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallHistogram").finish_non_exhaustive()
    }
}

impl Collector for CallHistogram {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let mut metric = encoder.encode_descriptor(
            "call",
            "Time from the start of a call's execution to its reply, per program and procedure.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for h in self.0.histograms() {
            // (upper bound in seconds, calls in the bucket); `f64::MAX`
            // is the bound prometheus-client writes as `+Inf`.
            let bounds = BOUNDS_US.iter().map(|&us| us as f64 / 1e6);
            let buckets: Vec<(f64, u64)> = bounds.chain([f64::MAX]).zip(h.buckets).collect();
            let labels = [
                ("program", Escaped(h.program)),
                ("procedure", Escaped(h.procedure)),
            ];
            metric
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(h.sum, h.count, &buckets, None)?;
        }
        Ok(())
    }
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

/// What the metrics listener serves: the counters, and what the
/// operator tools ask of the running server (see [`crate::operator`]).
pub struct Endpoints {
    pub registry: Registry,
    pub server: Arc<Server>,
    /// The NLM lock service, when it runs: its hosts holding locks.
    pub locks: Option<Arc<LockService>>,
    /// NFSv4's state, when some minor version is served: its clients.
    pub nfs4: Option<Arc<crate::nfs4::state::State>>,
}

impl Endpoints {
    /// The response to a request whose first line is `request_line`:
    /// `GET /exports`, `GET /clients`, `GET /clients.json`, any other path
    /// the metrics (as before, when every path got them).
    fn respond(&self, request_line: &str) -> String {
        let path = request_line.split(' ').nth(1).unwrap_or("/metrics");
        let text = |body: String| {
            format!(
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        match path {
            "/exports" => {
                let exports = self.server.exports();
                let configs: Vec<_> = exports.iter().map(|x| &x.config).collect();
                text(crate::operator::exports_toml(&configs))
            }
            "/clients" => text(crate::operator::clients_text(&self.clients())),
            "/clients.json" => text(crate::operator::clients_json(&self.clients())),
            _ => match render(&self.registry) {
                Ok(body) => format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                ),
                Err(_) => {
                    warn!("metrics could not be encoded (a value out of range)");
                    "HTTP/1.0 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n".to_string()
                }
            },
        }
    }

    /// The NLM hosts holding locks, then the NFSv4 clients.
    fn clients(&self) -> Vec<crate::operator::ClientLine> {
        use crate::operator::{printable, ClientLine};
        let mut lines = Vec::new();
        if let Some(locks) = &self.locks {
            let mut hosts = locks.hosts();
            hosts.sort();
            hosts.dedup();
            lines.extend(hosts.into_iter().map(|h| ClientLine::Nlm {
                name: printable(&h.name),
                address: h.ip,
            }));
        }
        if let Some(state) = &self.nfs4 {
            lines.extend(state.clients().into_iter().map(|c| {
                ClientLine::V4 {
                    clientid: c.clientid,
                    address: c.address,
                    owner: printable(&c.owner),
                    confirmed: c.confirmed,
                    sessions: c.sessions,
                    implementation: c
                        .implementation
                        .map(|i| format!("{} {}", printable(&i.domain.0), printable(&i.name.0))),
                    minor: c.minor,
                    lease_left: c.lease_left.map(|d| d.as_secs()),
                    life: c.life.as_str(),
                    opens: c.opens,
                    locks: c.locks,
                }
            }));
        }
        lines
    }
}

/// Serves `/metrics` (and the [`Endpoints`] beside it) until the process
/// ends: at most [`MAX_SCRAPES`] at once, each for at most
/// [`SCRAPE_TIMEOUT`], so that connections that send nothing or read
/// nothing cannot pile up tasks and responses (each holds a rendering of
/// every counter) without bound.
pub async fn serve(listener: TcpListener, endpoints: Endpoints) {
    let endpoints = Arc::new(endpoints);
    match listener.local_addr() {
        Ok(addr) => info!(%addr, "metrics endpoint listening"),
        Err(_) => info!("metrics endpoint listening"),
    }
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
        let endpoints = endpoints.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let scrape = async {
                // Only the request line's path matters (a request that
                // does not come in time gets the metrics).
                let mut request = [0u8; 1024];
                let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut request))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or(0);
                let head = String::from_utf8_lossy(&request[..n]);
                let response = endpoints.respond(head.lines().next().unwrap_or(""));
                let _ = stream.write_all(response.as_bytes()).await;
            };
            let _ = tokio::time::timeout(SCRAPE_TIMEOUT, scrape).await;
        });
    }
}

pub use dionfs_core::export::STATS_ADDRESS;

/// Reads the metrics of a running server (`dionfs stats`).
pub fn fetch(addr: &str) -> io::Result<String> {
    fetch_path(addr, "/metrics")
}

/// Reads `path` (`/metrics`, `/exports`, `/clients`...) from the metrics
/// listener of a running server at `addr`.
pub fn fetch_path(addr: &str, path: &str) -> io::Result<String> {
    let addr: SocketAddr = addr
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "expected ADDR:PORT"))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    let Some((head, body)) = response.split_once("\r\n\r\n") else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not an HTTP response",
        ));
    };
    // `HTTP/1.0 200 OK`; the server answers 500 when it cannot encode.
    let status = head.lines().next().unwrap_or("");
    if status.split(' ').nth(1) != Some("200") {
        return Err(io::Error::other(format!("the server answered {status:?}")));
    }
    Ok(body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves one connection `response`, then `fetch`es from it.
    fn fetch_answered(response: &'static str) -> io::Result<String> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let _ = s.read(&mut [0u8; 1024]);
            s.write_all(response.as_bytes()).unwrap();
        });
        let fetched = fetch(&addr);
        server.join().unwrap();
        fetched
    }

    #[test]
    fn fetch_returns_the_body_of_a_200_only() {
        let ok = fetch_answered("HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\n# EOF\n");
        assert_eq!(ok.unwrap(), "# EOF\n");
        let failed =
            fetch_answered("HTTP/1.0 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n");
        let e = failed.unwrap_err().to_string();
        assert!(e.contains("500 Internal Server Error"), "{e}");
        assert!(fetch_answered("nonsense").is_err());
    }

    /// The request line's path picks the page: `/exports` and `/clients`
    /// for the operator tools, anything else the metrics.
    #[test]
    fn the_request_path_picks_the_page() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let server = crate::testing::server(&root, &root);
        let calls = Arc::new(CallStats::new(crate::dispatch::counted_programs()));
        let endpoints = Endpoints {
            registry: registry(server.clone(), None, calls),
            server,
            locks: None,
            nfs4: None,
        };
        let exports = endpoints.respond("GET /exports HTTP/1.0");
        assert!(exports.starts_with("HTTP/1.0 200 OK\r\n"), "{exports}");
        assert!(
            exports.contains(&format!(
                "\r\n\r\n[[export]]\npath = \"{}\"\n",
                root.display()
            )),
            "{exports}"
        );
        assert!(exports.contains("\nread_mode = \"direct\"\n"), "{exports}");
        let clients = endpoints.respond("GET /clients HTTP/1.0");
        assert!(clients.ends_with("Content-Length: 0\r\n\r\n"), "{clients}");
        assert_eq!(
            endpoints
                .respond("GET /clients.json HTTP/1.0")
                .split("\r\n\r\n")
                .nth(1),
            Some("[]\n")
        );
        for line in ["GET /metrics HTTP/1.0", "GET / HTTP/1.0", ""] {
            assert!(endpoints.respond(line).ends_with("# EOF\n"), "{line}");
        }
    }

    /// An export's path is the administrator's text: a `"`, a `\` or a
    /// newline in it comes out escaped, each sample on one line.
    #[test]
    fn label_values_are_escaped() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let path = root.join("a \"quoted\" \\ name\nsecond line");
        std::fs::create_dir(&path).unwrap();
        let server = crate::testing::server(&root, &path);
        let calls = Arc::new(CallStats::new(crate::dispatch::counted_programs()));
        calls.record(
            dionfs_proto::nfs3::NFS_PROGRAM,
            3,
            0,
            Duration::from_micros(5),
        );
        let text = render(&registry(server, None, calls)).unwrap();

        let label = format!(
            "export=\"{}/a \\\"quoted\\\" \\\\ name\\nsecond line\"",
            root.display()
        );
        assert!(
            text.contains(&format!("\ndionfs_expanded_reads_total{{{label}}} 0\n")),
            "{text}"
        );
        assert!(text.contains(&format!(
            "\ndionfs_data_ops_total{{{label},direction=\"read\",mode=\"direct\"}} 0\n"
        )));
        assert!(text.contains(&format!(
            "\ndionfs_metadata_syncs_total{{{label},object=\"file\"}} 0\n"
        )));
        for line in text.lines() {
            assert!(
                line.starts_with("# ") || line.starts_with("dionfs_"),
                "a line that is neither a comment nor a sample: {line:?}"
            );
        }
        // The rest as before: types, unlabelled samples, the histogram.
        assert!(
            text.contains("\n# TYPE dionfs_connections_open gauge\ndionfs_connections_open 0\n")
        );
        assert!(text.contains("\n# TYPE dionfs_server_faults counter\n"));
        assert!(text.contains("\ndionfs_connections_dropped_total{reason=\"idle\"} 0\n"));
        assert!(
            text.contains("\ndionfs_call_seconds_count{program=\"nfs3\",procedure=\"NULL\"} 1\n")
        );
        assert!(text.ends_with("\n# EOF\n"), "OpenMetrics ends so");
    }
}

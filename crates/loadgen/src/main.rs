//! dionfs-loadgen: the benchmark's load generator for NFSv3 and NFSv4.1,
//! one engine for both, so that a comparison of the two versions measures
//! the server and not two clients (bench/README.md).
//!
//! The command line and the JSON result are bench/loadgen's (C over
//! libnfs, NFSv3 only) for the data jobs (`--op read|write`), plus
//! `--vers 3|4.1`. One thread per connection, each with its own TCP
//! connection and up to `--qd` requests in flight: READ calls are
//! templates with their xid, slot and offset patched, queued and written
//! together; a WRITE is its template and the payload from the
//! connection's one buffer in one `writev`; replies are read into one
//! receive buffer per connection and READ data is verified where it
//! lies. Nothing is allocated per call.
//!
//! Every byte written is the pattern of its file offset and a seed (the
//! same function as bench/loadgen, so either verifies what the other
//! wrote); `--verify` checks every byte read. SIGUSR1 stops sending
//! calls: those in flight complete and the result covers what was done.
//!
//! Exit status: 0 clean, 1 fatal (set-up or connection failure; the JSON
//! may still say "fatal"), 2 usage, 3 the run completed but saw I/O
//! errors or wrong bytes.

mod pattern;
mod v3;
mod v4;
mod version;
mod wire;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use dionfs_proto::nfs3::{NFS_PROGRAM, NFS_V3};
use dionfs_proto::nfs4::NFS_V4;
use dionfs_rpc::{AuthSys, Credential};
use rustls::pki_types::ServerName;

use crate::version::{Proto, SETUP_TIMEOUT};
use crate::wire::{reply_results, Wire};

/// First bad offsets reported per connection.
const MAX_BAD_REPORT: usize = 8;
/// The xid's low bits are the slot: so many slots at most.
const MAX_QD: usize = 1000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pat {
    Seq,
    Rand,
    Strided,
    Fixed,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Vers {
    V3,
    V41,
}

#[derive(Clone, Debug)]
struct Cfg {
    host: String,
    export: String,
    nfs_port: u16,
    mount_port: u16,
    uid: u32,
    gid: u32,
    vers: Vers,
    file: String,
    write: bool,
    pat: Pat,
    bs: u64,
    file_size: u64,
    records: u64,
    offset: u64,
    qd: usize,
    conns: usize,
    shift: u64,
    runtime: f64,
    ops: u64,
    seed: u64,
    verify: bool,
    create: bool,
    commit: bool,
    timeout: f64,
    label: String,
    /// `--tls-ca`: NFS connections ask for RPC-with-TLS and check the
    /// server's certificate against this CA file (PEM).
    tls_ca: Option<String>,
}

const USAGE: &str =
    "usage: dionfs-loadgen --url nfs://HOST/EXPORT?nfsport=P&mountport=M[&uid=U&gid=G]
   [--vers 3|4.1] --file /NAME --op read|write --pattern seq|rand|strided|fixed --bs SIZE
   [--file-size SIZE] [--records R] [--offset OFF] [--qd N] [--conns N]
   [--shift K] [--runtime SEC] [--ops N] [--seed S] [--verify] [--create]
   [--commit] [--timeout SEC] [--label TEXT] [--tls-ca CA.pem]
   --tls-ca: every NFS connection asks for RPC-with-TLS (RFC 9289) and checks
   the server's certificate (for the URL's host) against CA.pem; MOUNT stays plain
   SIGUSR1: send no more calls, finish those in flight, report
   (the metadata ops of bench/loadgen are not here: NFSv3 only, use it)";

fn usage(why: &str) -> ! {
    if !why.is_empty() {
        eprintln!("dionfs-loadgen: {why}");
    }
    eprintln!("{USAGE}");
    std::process::exit(2)
}

fn parse_size(s: &str) -> u64 {
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&s[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    match num.parse::<f64>() {
        Ok(v) if v >= 0.0 => (v * mult as f64) as u64,
        _ => usage(&format!("bad size {s}")),
    }
}

fn parse_num<T: std::str::FromStr>(s: &str) -> T {
    s.parse()
        .unwrap_or_else(|_| usage(&format!("bad number {s}")))
}

fn parse_args() -> Cfg {
    let mut cfg = Cfg {
        host: String::new(),
        export: String::new(),
        nfs_port: 2049,
        mount_port: 0,
        uid: 0,
        gid: 0,
        vers: Vers::V3,
        file: String::new(),
        write: false,
        pat: Pat::Seq,
        bs: 1 << 20,
        file_size: 0,
        records: 0,
        offset: 0,
        qd: 1,
        conns: 1,
        shift: 0,
        runtime: 0.0,
        ops: 0,
        seed: 1,
        verify: false,
        create: false,
        commit: false,
        timeout: 600.0,
        label: String::new(),
        tls_ca: None,
    };
    let mut url = None;
    let mut op = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{a} needs a value")))
        };
        match a.as_str() {
            "--url" => url = Some(val()),
            "--vers" => {
                cfg.vers = match val().as_str() {
                    "3" => Vers::V3,
                    "4.1" => Vers::V41,
                    v => usage(&format!("--vers {v}: 3 or 4.1")),
                }
            }
            "--file" => cfg.file = val(),
            "--op" => op = Some(val()),
            "--pattern" => {
                cfg.pat = match val().as_str() {
                    "seq" => Pat::Seq,
                    "rand" => Pat::Rand,
                    "strided" => Pat::Strided,
                    "fixed" => Pat::Fixed,
                    v => usage(&format!("--pattern {v}")),
                }
            }
            "--bs" => cfg.bs = parse_size(&val()),
            "--file-size" => cfg.file_size = parse_size(&val()),
            "--records" => cfg.records = parse_num(&val()),
            "--offset" => cfg.offset = parse_size(&val()),
            "--qd" => cfg.qd = parse_num(&val()),
            "--conns" => cfg.conns = parse_num(&val()),
            "--shift" => cfg.shift = parse_num(&val()),
            "--runtime" => cfg.runtime = parse_num(&val()),
            "--ops" => cfg.ops = parse_num(&val()),
            "--seed" => cfg.seed = parse_num(&val()),
            "--verify" => cfg.verify = true,
            "--create" => cfg.create = true,
            "--commit" => cfg.commit = true,
            "--timeout" => cfg.timeout = parse_num(&val()),
            "--label" => cfg.label = val(),
            "--tls-ca" => cfg.tls_ca = Some(val()),
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0)
            }
            _ => usage(&format!("unknown argument {a}")),
        }
    }
    cfg.write = match op.as_deref() {
        Some("read") => false,
        Some("write") => true,
        Some(o @ ("create" | "rename" | "remove")) => {
            usage(&format!("--op {o} is bench/loadgen's"))
        }
        _ => usage("--op read|write"),
    };
    let url = url.unwrap_or_else(|| usage("--url is needed"));
    parse_url(&mut cfg, &url);
    if cfg.file.is_empty()
        || cfg.bs == 0
        || cfg.bs > 64 << 20
        || cfg.qd < 1
        || cfg.qd > MAX_QD
        || cfg.conns < 1
        || cfg.conns > 256
    {
        usage("");
    }
    if cfg.pat == Pat::Strided {
        if cfg.records == 0 {
            usage("--pattern strided needs --records");
        }
        cfg.file_size = cfg.records * cfg.bs * cfg.conns as u64;
    }
    if matches!(cfg.pat, Pat::Seq | Pat::Rand) && cfg.file_size < cfg.bs {
        usage("--file-size below --bs");
    }
    if cfg.pat == Pat::Rand && cfg.runtime <= 0.0 && cfg.ops == 0 {
        usage("--pattern rand needs --runtime or --ops");
    }
    if cfg.pat == Pat::Fixed {
        if cfg.ops == 0 && cfg.runtime <= 0.0 {
            usage("--pattern fixed needs --ops or --runtime");
        }
        if cfg.verify && (cfg.qd != 1 || cfg.conns != 1) {
            usage("--pattern fixed --verify needs --qd 1 --conns 1");
        }
    }
    if cfg.vers == Vers::V3 && cfg.mount_port == 0 {
        usage("NFSv3 needs mountport= in the URL (no portmapper look-up)");
    }
    cfg
}

/// The TLS client side of `--tls-ca CA`: TLS 1.3, ALPN `sunrpc` (RFC 9289
/// section 5.2), the server's certificate checked against the CA
/// certificates of the PEM file `ca` for `host` (an address or a name).
fn tls_client(
    ca: &str,
    host: &str,
) -> Result<(Arc<rustls::ClientConfig>, ServerName<'static>), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{e:?}"))? {
        roots
            .add(cert.map_err(|e| format!("{e:?}"))?)
            .map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"sunrpc".to_vec()];
    let name = ServerName::try_from(host.to_string()).map_err(|e| format!("{host}: {e}"))?;
    Ok((Arc::new(config), name))
}

/// `nfs://HOST/EXPORT?nfsport=P&mountport=M&uid=U&gid=G` (libnfs's form;
/// other keys are ignored).
fn parse_url(cfg: &mut Cfg, url: &str) {
    let rest = url
        .strip_prefix("nfs://")
        .unwrap_or_else(|| usage(&format!("bad url {url}")));
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (host, export) = path
        .split_once('/')
        .unwrap_or_else(|| usage(&format!("bad url {url}")));
    cfg.host = host.to_string();
    cfg.export = format!("/{export}");
    for kv in query.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "nfsport" => cfg.nfs_port = parse_num(v),
            "mountport" => cfg.mount_port = parse_num(v),
            "uid" => cfg.uid = parse_num(v),
            "gid" => cfg.gid = parse_num(v),
            _ => {}
        }
    }
}

/// What every connection shares.
struct Shared {
    cfg: Cfg,
    /// With `--tls-ca`: the TLS client configuration and the name the
    /// server's certificate must have.
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    barrier: Barrier,
    abort: AtomicBool,
    stop: Arc<AtomicBool>,
    origin: Instant,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

/// One connection's results.
struct Stats {
    ops: u64,
    bytes: u64,
    errors: u64,
    short_io: u64,
    mism_bytes: u64,
    mism_ops: u64,
    verified: u64,
    lat_sum: u64,
    lat_max: u64,
    hist: Vec<u64>,
    bad_off: Vec<u64>,
    last_seed: u64,
    fatal: bool,
    err: String,
    end_ns: u64,
    readmax: u64,
    writemax: u64,
}

impl Stats {
    fn new() -> Stats {
        Stats {
            ops: 0,
            bytes: 0,
            errors: 0,
            short_io: 0,
            mism_bytes: 0,
            mism_ops: 0,
            verified: 0,
            lat_sum: 0,
            lat_max: 0,
            hist: vec![0; pattern::BUCKETS],
            bad_off: Vec::with_capacity(MAX_BAD_REPORT),
            last_seed: 0,
            fatal: false,
            err: String::new(),
            end_ns: 0,
            readmax: 0,
            writemax: 0,
        }
    }

    /// Keeps the first error only.
    fn error(&mut self, msg: impl FnOnce() -> String) {
        if self.err.is_empty() {
            self.err = msg();
        }
    }

    fn note_bad(&mut self, off: u64) {
        if self.bad_off.len() < MAX_BAD_REPORT {
            self.bad_off.push(off);
        }
    }

    fn latency(&mut self, ns: u64) {
        self.ops += 1;
        self.lat_sum += ns;
        self.lat_max = self.lat_max.max(ns);
        self.hist[pattern::bucket(ns)] += 1;
    }

    /// Counts the bytes of a READ at `off` against the pattern of `seed`.
    fn check_read(&mut self, cfg: &Cfg, data: &[u8], off: u64, seed: u64) {
        let n = data.len() as u64;
        if n != cfg.bs {
            self.short_io += 1;
            self.error(|| format!("short READ at {off}: {n} of {}", cfg.bs));
        }
        self.bytes += n;
        if cfg.verify {
            let (mut bad, mut first) = pattern::check(data, off, seed);
            self.verified += n;
            if n < cfg.bs {
                // missing bytes are wrong bytes
                bad += cfg.bs - n;
                first.get_or_insert(off + n);
            }
            if bad > 0 {
                self.mism_bytes += bad;
                self.mism_ops += 1;
                self.note_bad(first.unwrap_or(off));
            }
        }
    }
}

#[derive(Clone, Copy, Default)]
struct Slot {
    busy: bool,
    off: u64,
    seed: u64,
    t0: u64,
}

/// The engine of one connection.
struct Conn<'s, P: Proto> {
    id: usize,
    sh: &'s Shared,
    w: Wire,
    p: P,
    slots: Vec<Slot>,
    inflight: usize,
    next_i: u64,
    calls: u32,
    rng: u64,
    deadline: u64,
    stop_issuing: bool,
    wbuf: Vec<u8>,
    st: Stats,
}

impl<P: Proto> Conn<'_, P> {
    fn xorshift(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// The next op of this connection: its offset and seed.
    fn next_op(&mut self) -> Option<(u64, u64)> {
        let cfg = &self.sh.cfg;
        let i = self.next_i;
        let n = cfg.conns as u64;
        let id = self.id as u64;
        if cfg.ops > 0 && i >= cfg.ops {
            return None;
        }
        let mut seed = cfg.seed;
        let off = match cfg.pat {
            Pat::Seq => {
                let mut per = cfg.file_size / n / cfg.bs * cfg.bs;
                let start = per * id;
                if self.id == cfg.conns - 1 {
                    per = cfg.file_size - start; // the last one takes the tail
                }
                if i * cfg.bs >= per {
                    return None;
                }
                start + i * cfg.bs
            }
            Pat::Rand => {
                let nblk = cfg.file_size / cfg.bs;
                (self.xorshift() % nblk) * cfg.bs
            }
            Pat::Strided => {
                let owner = (id + cfg.shift) % n;
                if i >= cfg.records {
                    return None;
                }
                (i * n + owner) * cfg.bs
            }
            Pat::Fixed => {
                seed = cfg.seed + i + 1_000_003 * id;
                cfg.offset
            }
        };
        self.next_i += 1;
        Some((off, seed))
    }

    fn xid(&mut self, slot: usize) -> u32 {
        self.calls = self.calls.wrapping_add(1);
        (self.calls << 10) | slot as u32
    }

    /// Sends the next op on `slot`, if there is one.
    fn issue(&mut self, slot: usize) -> bool {
        if self.stop_issuing {
            return false;
        }
        let now = self.sh.now_ns();
        let cfg = &self.sh.cfg;
        if self.sh.stop.load(Ordering::Relaxed) || (cfg.runtime > 0.0 && now >= self.deadline) {
            self.stop_issuing = true;
            return false;
        }
        let Some((off, seed)) = self.next_op() else {
            self.stop_issuing = true;
            return false;
        };
        let xid = self.xid(slot);
        if self.sh.cfg.write {
            // always the pattern: what is written can be verified later
            pattern::fill(&mut self.wbuf, off, seed);
            let t0 = self.sh.now_ns();
            self.slots[slot] = Slot {
                busy: true,
                off,
                seed,
                t0,
            };
            if let Err(e) = self.p.send_write(&mut self.w, slot, xid, off, &self.wbuf) {
                self.fail(format!("sending WRITE: {e}"));
                return false;
            }
        } else {
            self.slots[slot] = Slot {
                busy: true,
                off,
                seed,
                t0: now,
            };
            self.p.queue_read(&mut self.w, slot, xid, off);
        }
        self.inflight += 1;
        true
    }

    fn fail(&mut self, msg: String) {
        self.st.fatal = true;
        self.stop_issuing = true;
        self.st.error(|| msg);
    }

    /// Handles the replies received so far; sends the next op on each
    /// slot freed. `Err` on a reply that cannot be understood.
    fn replies(&mut self) -> Result<(), String> {
        loop {
            let Some(rec) = self.w.record().map_err(|e| e.to_string())? else {
                return Ok(());
            };
            let (xid, res) = reply_results(rec)?;
            let slot = (xid & 0x3ff) as usize;
            let free = match self.slots.get(slot) {
                Some(s) if s.busy => {
                    let s = *s;
                    let cfg = &self.sh.cfg;
                    if cfg.write {
                        match self.p.write_done(slot, res) {
                            Ok(n) => {
                                if n != cfg.bs {
                                    self.st.short_io += 1;
                                    self.st.error(|| {
                                        format!("short WRITE at {}: {n} of {}", s.off, cfg.bs)
                                    });
                                }
                                self.st.bytes += n;
                                self.st.last_seed = s.seed;
                            }
                            Err(e) => {
                                self.st.errors += 1;
                                self.st.error(|| format!("WRITE at {}: {e}", s.off));
                            }
                        }
                    } else {
                        match self.p.read_done(slot, res) {
                            Ok(data) => self.st.check_read(cfg, data, s.off, s.seed),
                            Err(e) => {
                                self.st.errors += 1;
                                self.st.error(|| format!("READ at {}: {e}", s.off));
                            }
                        }
                    }
                    self.st.latency(self.sh.now_ns() - s.t0);
                    self.slots[slot].busy = false;
                    self.inflight -= 1;
                    Some(slot)
                }
                _ => None, // not ours (a late set-up reply)
            };
            self.w.consume();
            if let Some(slot) = free {
                self.issue(slot);
            }
        }
    }

    /// The timed part: ops until there are none, the runtime is over or
    /// a stop is asked; then COMMIT for writes.
    fn run(&mut self) {
        let cfg = &self.sh.cfg;
        let start = self.sh.now_ns();
        self.deadline = start + (cfg.runtime * 1e9) as u64;
        let hard = start + (cfg.timeout * 1e9) as u64;
        for slot in 0..cfg.qd {
            if !self.issue(slot) {
                break;
            }
        }
        while self.inflight > 0 && !self.st.fatal {
            if let Err(e) = self.w.flush() {
                self.fail(format!("sending: {e}"));
                break;
            }
            if let Err(e) = self.w.fill() {
                self.fail(format!("connection failed: {e}"));
                break;
            }
            if let Err(e) = self.replies() {
                self.fail(e);
                break;
            }
            if self.sh.abort.load(Ordering::Relaxed) || self.sh.now_ns() > hard {
                let (t, n) = (cfg.timeout, self.inflight);
                self.fail(format!(
                    "timeout after {t:.0} s with {n} requests in flight"
                ));
                self.sh.abort.store(true, Ordering::Relaxed);
                break;
            }
        }
        if !self.st.fatal && cfg.write && cfg.commit {
            if let Err(e) = self.p.commit(&mut self.w) {
                self.st.errors += 1;
                self.st.error(|| format!("COMMIT failed: {e}"));
            }
        }
        self.st.end_ns = self.sh.now_ns();
    }

    /// Fixed-offset writes: reads the range back and checks it holds the
    /// last write (not timed).
    fn fixed_verify(&mut self) {
        let cfg = &self.sh.cfg;
        let xid = self.xid(0);
        self.p.queue_read(&mut self.w, 0, xid, cfg.offset);
        let deadline = Instant::now() + SETUP_TIMEOUT;
        let got = (|| -> Result<Vec<u8>, String> {
            self.w.flush().map_err(|e| e.to_string())?;
            loop {
                if let Some(rec) = self.w.record().map_err(|e| e.to_string())? {
                    let (rxid, res) = reply_results(rec)?;
                    let data = (rxid == xid).then(|| self.p.read_done(0, res).map(<[u8]>::to_vec));
                    self.w.consume();
                    if let Some(data) = data {
                        return data;
                    }
                    continue;
                }
                if Instant::now() > deadline {
                    return Err("no reply".into());
                }
                self.w.fill().map_err(|e| e.to_string())?;
            }
        })();
        match got {
            Ok(data) => {
                let n = data.len() as u64;
                let (mut bad, first) = pattern::check(&data, cfg.offset, self.st.last_seed);
                bad += cfg.bs.saturating_sub(n);
                self.st.verified += n;
                if bad > 0 {
                    self.st.mism_bytes += bad;
                    self.st.mism_ops += 1;
                    self.st.note_bad(first.unwrap_or(cfg.offset + n));
                }
            }
            Err(e) => {
                self.st.errors += 1;
                self.st.error(|| format!("read-back failed: {e}"));
            }
        }
    }
}

/// Connects and opens the file: the first connection (which creates it)
/// before the others. Waits at the three barriers whatever happens.
fn connection(id: usize, sh: &Shared) -> Stats {
    let cfg = &sh.cfg;
    let mut st = Stats::new();
    let cred = Credential::Sys(AuthSys {
        stamp: std::process::id(),
        machine_name: b"dionfs-loadgen".to_vec(),
        uid: cfg.uid,
        gid: cfg.gid,
        gids: Vec::new(),
    });
    let addr = format!("{}:{}", cfg.host, cfg.nfs_port);
    let bs = cfg.bs as u32;
    // replies (and, over v4.1, calls) of one op and its headers
    let max_record = (cfg.bs.max(1 << 20) + 16 * 1024) as usize;
    let owner = format!(
        "dionfs-loadgen-{}-{id}-{}",
        std::process::id(),
        sh.origin.elapsed().as_nanos()
    );
    let create = cfg.create && id == 0;
    let setup = || -> Result<Opened, String> {
        let mut w =
            Wire::connect(&addr, max_record).map_err(|e| format!("connect to {addr}: {e}"))?;
        if let Some((config, name)) = &sh.tls {
            let vers = match cfg.vers {
                Vers::V3 => NFS_V3,
                Vers::V41 => NFS_V4,
            };
            w.start_tls(
                NFS_PROGRAM,
                vers,
                config.clone(),
                name.clone(),
                SETUP_TIMEOUT,
            )
            .map_err(|e| format!("RPC-with-TLS to {addr}: {e}"))?;
        }
        Ok(match cfg.vers {
            Vers::V3 => {
                let maddr = format!("{}:{}", cfg.host, cfg.mount_port);
                let root = v3::mount(&maddr, &cfg.export, &cred)?;
                let p = v3::V3::open(&mut w, cred.clone(), root, &cfg.file, create, bs)?;
                Opened::V3(w, p)
            }
            Vers::V41 => {
                let p = v4::V4::open(
                    &mut w,
                    cred.clone(),
                    &owner,
                    cfg.qd as u32,
                    max_record as u32,
                    &cfg.export,
                    &cfg.file,
                    create,
                    cfg.write,
                    bs,
                )?;
                Opened::V4(w, p)
            }
        })
    };
    let mut opened = None;
    if id == 0 {
        match setup() {
            Ok(x) => opened = Some(x),
            Err(e) => st.error(|| e),
        }
    }
    sh.barrier.wait(); // connection 0 made the file
    if id != 0 {
        match setup() {
            Ok(x) => opened = Some(x),
            Err(e) => st.error(|| e),
        }
    }
    st.fatal = opened.is_none();
    sh.barrier.wait(); // everybody open; main checks
    sh.barrier.wait(); // go
    match opened {
        _ if sh.abort.load(Ordering::Relaxed) => st,
        None => st,
        Some(Opened::V3(w, p)) => drive(id, sh, w, p, st),
        Some(Opened::V4(w, p)) => drive(id, sh, w, p, st),
    }
}

/// A connection set up, of either version.
enum Opened {
    V3(Wire, v3::V3),
    V4(Wire, v4::V4),
}

/// Runs the job on a connection set up.
fn drive<P: Proto>(id: usize, sh: &Shared, w: Wire, p: P, mut st: Stats) -> Stats {
    let cfg = &sh.cfg;
    (st.readmax, st.writemax) = p.maxes();
    let mut c = Conn {
        id,
        sh,
        w,
        p,
        slots: vec![Slot::default(); cfg.qd],
        inflight: 0,
        next_i: 0,
        calls: 0,
        rng: 0x2545_F491_4F6C_DD1D ^ (cfg.seed.wrapping_mul(7919) + id as u64 * 104_729 + 1),
        deadline: 0,
        stop_issuing: false,
        wbuf: if cfg.write {
            vec![0; cfg.bs as usize]
        } else {
            Vec::new()
        },
        st,
    };
    c.run();
    if id == 0 && cfg.pat == Pat::Fixed && cfg.write && cfg.verify && !c.st.fatal && c.st.ops > 0 {
        c.fixed_verify();
    }
    c.p.close(&mut c.w);
    c.st
}

/// User and system CPU seconds of this process so far.
fn cpu_s() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // fields 14 and 15 of the line, in USER_HZ (100 on Linux)
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 100.0;
    (tick(11), tick(12))
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn main() {
    let cfg = parse_args();
    let stop = Arc::new(AtomicBool::new(false));
    if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGUSR1, stop.clone()) {
        eprintln!("dionfs-loadgen: SIGUSR1 handler: {e}");
        std::process::exit(1);
    }
    let tls = cfg.tls_ca.as_deref().map(|ca| {
        tls_client(ca, &cfg.host).unwrap_or_else(|e| {
            eprintln!("dionfs-loadgen: --tls-ca {ca}: {e}");
            std::process::exit(2)
        })
    });
    let sh = Shared {
        tls,
        barrier: Barrier::new(cfg.conns + 1),
        abort: AtomicBool::new(false),
        stop,
        origin: Instant::now(),
        cfg,
    };
    let sh = &sh;
    let cfg = &sh.cfg;
    let (stats, t0, cpu0, cpu1) = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..cfg.conns)
            .map(|id| scope.spawn(move || connection(id, sh)))
            .collect();
        sh.barrier.wait(); // connection 0 made the file
        sh.barrier.wait(); // all open
                           // a failed connection says so in its Stats; the others need not run
        let cpu0 = cpu_s();
        let t0 = sh.now_ns();
        sh.barrier.wait(); // go
        let stats: Vec<Stats> = threads
            .into_iter()
            .map(|t| t.join().expect("connection thread"))
            .collect();
        (stats, t0, cpu0, cpu_s())
    });
    let fatal = stats.iter().any(|s| s.fatal);
    let t1 = stats.iter().map(|s| s.end_ns).max().unwrap_or(t0).max(t0);

    let mut hist = vec![0u64; pattern::BUCKETS];
    let (mut ops, mut bytes, mut errors, mut shorts, mut mb, mut mo, mut ver, mut lsum, mut lmax) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut err = "";
    for s in &stats {
        ops += s.ops;
        bytes += s.bytes;
        errors += s.errors;
        shorts += s.short_io;
        mb += s.mism_bytes;
        mo += s.mism_ops;
        ver += s.verified;
        lsum += s.lat_sum;
        lmax = lmax.max(s.lat_max);
        for (h, v) in hist.iter_mut().zip(&s.hist) {
            *h += v;
        }
        if err.is_empty() && !s.err.is_empty() {
            err = &s.err;
        }
    }
    let mut pv = [0f64; 3];
    for (p, pct) in pv.iter_mut().zip([50.0, 99.0, 99.9]) {
        let want = ((ops as f64 * pct / 100.0 + 0.999_999) as u64).max(1);
        let mut acc = 0;
        for (i, h) in hist.iter().enumerate() {
            acc += h;
            if acc >= want {
                *p = pattern::bucket_value(i);
                break;
            }
        }
    }
    let el = (t1 - t0) as f64 / 1e9;
    let rate = |v: f64| if el > 0.0 { v / el } else { 0.0 };
    let mut o = String::new();
    let pat = match cfg.pat {
        Pat::Seq => "seq",
        Pat::Rand => "rand",
        Pat::Strided => "strided",
        Pat::Fixed => "fixed",
    };
    let vers = if cfg.vers == Vers::V3 { "3" } else { "4.1" };
    let _ = write!(
        o,
        "{{\"label\":\"{}\",\"client\":\"dionfs-loadgen\",\"nfs_version\":\"{vers}\",\"op\":\"{}\",\"pattern\":\"{pat}\",\"bs\":{},\"qd\":{},\"conns\":{},\"file_size\":{},\"seed\":{},",
        json_str(&cfg.label),
        if cfg.write { "write" } else { "read" },
        cfg.bs, cfg.qd, cfg.conns, cfg.file_size, cfg.seed
    );
    let _ = write!(
        o,
        "\"elapsed_s\":{el:.6},\"ops\":{ops},\"bytes\":{bytes},\"mib_s\":{:.3},\"iops\":{:.1},",
        rate(bytes as f64 / 1_048_576.0),
        rate(ops as f64)
    );
    let mean = if ops > 0 {
        lsum as f64 / ops as f64 / 1e3
    } else {
        0.0
    };
    let _ = write!(
        o,
        "\"lat_us\":{{\"mean\":{mean:.3},\"p50\":{:.3},\"p99\":{:.3},\"p999\":{:.3},\"max\":{:.3}}},",
        pv[0] / 1e3, pv[1] / 1e3, pv[2] / 1e3, lmax as f64 / 1e3
    );
    let bad: Vec<String> = stats
        .iter()
        .flat_map(|s| s.bad_off.iter().map(u64::to_string))
        .collect();
    let _ = write!(
        o,
        "\"errors\":{errors},\"short_io\":{shorts},\"verify\":{},\"verified_bytes\":{ver},\"mismatch_bytes\":{mb},\"mismatch_ops\":{mo},\"first_bad_offsets\":[{}],",
        cfg.verify,
        bad.join(",")
    );
    let _ = write!(
        o,
        "\"readmax\":{},\"writemax\":{},",
        stats[0].readmax, stats[0].writemax
    );
    let _ = write!(
        o,
        "\"client_cpu_s\":{{\"user\":{:.3},\"sys\":{:.3}}},\"fatal\":{fatal},\"error\":\"{}\"}}",
        cpu1.0 - cpu0.0,
        cpu1.1 - cpu0.1,
        json_str(err)
    );
    println!("{o}");
    std::process::exit(if fatal {
        1
    } else if errors > 0 || shorts > 0 || mb > 0 {
        3
    } else {
        0
    });
}

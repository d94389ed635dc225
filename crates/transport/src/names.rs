//! The host names of a client address, for exports whose client lists name
//! hosts or wildcards (the server's `export::clients`): the reverse lookup of the
//! address, kept only if that name resolves back to the address (so a
//! client cannot claim a name by controlling its own reverse zone), as
//! rpc.mountd checks. Blocking (the system resolver): looked up once per
//! connection, before its first call, and cached per address for a minute.
//! [`client_names_shared`] runs one lookup per address at a time and at
//! most [`LOOKUPS_AT_ONCE`] in all: a resolver waits seconds for a name
//! server that does not answer (one an attacker runs for its own reverse
//! zone, say), and a lookup per connection, each on a blocking thread, let
//! connections from such an address take every thread NFS calls run on.

use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tracing::{debug, info};

const TTL: Duration = Duration::from_secs(60);
/// Addresses kept at most; the oldest go first past it.
const CACHE_MAX: usize = 4096;

/// Confirmed names per address, with when they were looked up.
type Cache = Mutex<HashMap<IpAddr, (Vec<String>, Instant)>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// Reverse lookups running at once, over all addresses.
const LOOKUPS_AT_ONCE: usize = 8;

/// The confirmed host names of `ip` (empty if it has none), for a
/// connection about to serve: from the cache if it can; else after the lookup of `ip` already running, if there is one;
/// else on a blocking thread, at most [`LOOKUPS_AT_ONCE`] at once, the
/// other connections waiting without holding a thread.
pub async fn client_names_shared(ip: IpAddr) -> Vec<String> {
    type Running = Mutex<HashMap<IpAddr, std::sync::Arc<tokio::sync::Mutex<()>>>>;
    static RUNNING: OnceLock<Running> = OnceLock::new();
    static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(LOOKUPS_AT_ONCE);
    if let Some(names) = cached(ip) {
        return names;
    }
    let running = RUNNING.get_or_init(Mutex::default);
    let this = {
        let Ok(mut map) = running.lock() else {
            return Vec::new();
        };
        map.entry(ip).or_default().clone()
    };
    let names = {
        let _one = this.lock().await;
        match cached(ip) {
            Some(names) => names,
            None => {
                let _slot = SLOTS.acquire().await;
                tokio::task::spawn_blocking(move || look_up_and_remember(ip))
                    .await
                    .unwrap_or_default()
            }
        }
    };
    // The last connection that waited for this address forgets it.
    if let Ok(mut map) = running.lock() {
        if std::sync::Arc::strong_count(&this) == 2 {
            map.remove(&ip);
        }
    }
    names
}

/// `ip` as the cache keys it: an IPv4-mapped IPv6 address as IPv4.
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The names of `ip` looked up less than [`TTL`] ago.
fn cached(ip: IpAddr) -> Option<Vec<String>> {
    let cache = cache().lock().ok()?;
    let (names, at) = cache.get(&key(ip))?;
    (at.elapsed() < TTL).then(|| names.clone())
}

/// The confirmed host names of `ip` (empty if it has none), looked up and
/// cached (blocking).
fn look_up_and_remember(ip: IpAddr) -> Vec<String> {
    let ip = key(ip);
    let names = lookup(ip);
    if let Ok(mut cache) = cache().lock() {
        if cache.len() >= CACHE_MAX {
            let oldest = cache.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| *k);
            if let Some(k) = oldest {
                cache.remove(&k);
            }
        }
        cache.insert(ip, (names.clone(), Instant::now()));
    }
    names
}

fn lookup(ip: IpAddr) -> Vec<String> {
    let name = match dionfs_sys::net::reverse_lookup(ip) {
        Ok(Some(name)) => name,
        Ok(None) => return Vec::new(),
        Err(e) => {
            debug!(%ip, error = %e, "reverse lookup failed");
            return Vec::new();
        }
    };
    let confirmed = (name.as_str(), 0)
        .to_socket_addrs()
        .map(|addrs| addrs.map(|a| a.ip()).any(|a| a == ip))
        .unwrap_or(false);
    if confirmed {
        vec![name.to_ascii_lowercase()]
    } else {
        info!(%ip, %name, "client's host name does not resolve back to its address; \
            matched by address only");
        Vec::new()
    }
}

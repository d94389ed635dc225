//! The host names of a client address, for exports whose client lists name
//! hosts or wildcards (`export::clients`): the reverse lookup of the
//! address, kept only if that name resolves back to the address (so a
//! client cannot claim a name by controlling its own reverse zone), as
//! rpc.mountd checks. Blocking (the system resolver): looked up once per
//! connection, before its first call, and cached per address for a minute.

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

/// The confirmed host names of `ip` (empty if it has none).
pub fn client_names(ip: IpAddr) -> Vec<String> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    if let Ok(cache) = cache().lock() {
        if let Some((names, at)) = cache.get(&ip) {
            if at.elapsed() < TTL {
                return names.clone();
            }
        }
    }
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

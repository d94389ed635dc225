//! The systemd service protocol, for `Type=notify` units
//! (`dist/dionfs.service`): `READY=1` once every listener is bound and the
//! exports are open, `STOPPING=1` when a stop begins, sent as datagrams to
//! `$NOTIFY_SOCKET` (sd_notify(3); a path, or `@name` in the abstract
//! namespace). Without `NOTIFY_SOCKET` (not started by systemd) nothing
//! happens. A failure to notify is logged, never fatal.

use std::os::unix::net::UnixDatagram;

use tracing::warn;

/// Sends `state` (newline-separated `KEY=value` assignments) to systemd.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send(&path, state) {
        warn!(socket = %path.to_string_lossy(), error = %e,
            state = %state.replace('\n', " "), "cannot notify systemd");
    }
}

fn send(path: &std::ffi::OsStr, state: &str) -> std::io::Result<usize> {
    use std::os::unix::ffi::OsStrExt;
    let socket = UnixDatagram::unbound()?;
    let bytes = path.as_bytes();
    match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            socket.send_to_addr(state.as_bytes(), &addr)
        }
        None => socket.send_to(state.as_bytes(), path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_reach_a_path_and_an_abstract_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        send(path.as_os_str(), "READY=1\nSTATUS=serving").unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=serving");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("dionfs-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_listener = UnixDatagram::bind_addr(&addr).unwrap();
        send(std::ffi::OsStr::new(&format!("@{name}")), "STOPPING=1").unwrap();
        let n = abstract_listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }
}

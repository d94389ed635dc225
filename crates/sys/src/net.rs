//! Socket options the connection layer needs that `rustix` and `socket2`
//! do not wrap: the receive low-water mark (`SO_RCVLOWAT`), plus the bytes
//! queued for reading (`FIONREAD`, wrapped by `rustix`) next to it.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

/// Bytes the kernel holds for reading on `socket` (`FIONREAD`).
pub fn bytes_queued<Fd: AsFd>(socket: Fd) -> io::Result<usize> {
    let n = rustix::io::ioctl_fionread(socket)?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// Sets `SO_RCVLOWAT`: poll/epoll report the socket readable only once
/// `bytes` are queued (or the peer closed, or, for TCP, the receive window
/// is about to close). Linux TCP caps the mark at half the largest receive
/// buffer and, unless `SO_RCVBUF` was set, grows the buffer to fit it;
/// [`rcvlowat`] reads back what was kept. Values above `i32::MAX` are
/// clamped.
pub fn set_rcvlowat<Fd: AsFd>(socket: Fd, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: `socket` is a live descriptor for the duration of the call
    // (borrowed); the option value points at a c_int on our stack and its
    // exact size is passed, which is what SO_RCVLOWAT reads.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The socket's `SO_RCVLOWAT`, as the kernel kept it.
pub fn rcvlowat<Fd: AsFd>(socket: Fd) -> io::Result<usize> {
    let mut value: libc::c_int = 0;
    get_option(
        socket.as_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVLOWAT,
        &mut value,
    )?;
    Ok(usize::try_from(value).unwrap_or(0))
}

/// Bytes written to `socket` that the peer has not acknowledged yet
/// (`SIOCOUTQ`): for TCP, what still occupies the send buffer.
pub fn bytes_unacked<Fd: AsFd>(socket: Fd) -> io::Result<usize> {
    let mut value: libc::c_int = 0;
    // SAFETY: `socket` is borrowed, so live; SIOCOUTQ (TIOCOUTQ) writes one
    // c_int through the pointer, which points at `value` on our stack.
    let rc = unsafe { libc::ioctl(socket.as_fd().as_raw_fd(), libc::TIOCOUTQ, &raw mut value) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(value).unwrap_or(0))
}

/// Sets the send buffer to `bytes` (`SO_SNDBUF`, which also stops the
/// kernel's autotuning of it), past `net.core.wmem_max` where the process
/// may (`SO_SNDBUFFORCE`, CAP_NET_ADMIN). Returns the usable size the
/// kernel kept: half of what `SO_SNDBUF` reads back, the other half being
/// its allowance for bookkeeping (socket(7)).
pub fn set_send_buffer<Fd: AsFd>(socket: Fd, bytes: usize) -> io::Result<usize> {
    let fd = socket.as_fd().as_raw_fd();
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let set = |opt| {
        // SAFETY: `fd` is borrowed from `socket`, live for the call; the
        // option value is a c_int on our stack with its exact size.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&raw const value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        }
    };
    if set(libc::SO_SNDBUFFORCE) != 0 && set(libc::SO_SNDBUF) != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut kept: libc::c_int = 0;
    get_option(socket.as_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, &mut kept)?;
    Ok(usize::try_from(kept).unwrap_or(0) / 2)
}

/// The memory the kernel has charged to `socket`'s receive queue (each
/// queued segment's truesize, `SK_MEMINFO_RMEM_ALLOC`) and the most it
/// may charge (`SK_MEMINFO_RCVBUF`), from `SO_MEMINFO`. The receive window
/// closes as the first nears the second, whatever the payload bytes
/// queued (FIONREAD) are.
pub fn receive_memory<Fd: AsFd>(socket: Fd) -> io::Result<(usize, usize)> {
    // SK_MEMINFO_VARS is 9 in every kernel since 4.x; room for more.
    let mut info = [0u32; 16];
    get_option(
        socket.as_fd(),
        libc::SOL_SOCKET,
        libc::SO_MEMINFO,
        &mut info,
    )?;
    Ok((info[0] as usize, info[1] as usize))
}

/// The receive window `socket` last advertised to its peer and the
/// largest segment it has seen from it, from `TCP_INFO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveWindow {
    /// `tcpi_rcv_wnd`: the window in the last ACK sent, relative to the
    /// bytes received up to it. `None` on kernels before 6.2, which do not
    /// report it.
    pub advertised: Option<u32>,
    /// `tcpi_rcv_mss`: the kernel's estimate of the peer's segment size.
    /// It advertises no window smaller than this (but zero): less free
    /// space than one segment closes the window.
    pub mss: u32,
}

/// See [`ReceiveWindow`].
pub fn receive_window<Fd: AsFd>(socket: Fd) -> io::Result<ReceiveWindow> {
    // SAFETY: all-zero is a valid `tcp_info` (plain integers).
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let len = get_option(socket.as_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, &mut info)?;
    let reported = |end: usize| len >= end;
    let wnd_end = std::mem::offset_of!(libc::tcp_info, tcpi_rcv_wnd) + 4;
    Ok(ReceiveWindow {
        advertised: reported(wnd_end).then_some(info.tcpi_rcv_wnd),
        mss: info.tcpi_rcv_mss,
    })
}

/// Option values the kernel may fill with any bytes: plain integers only,
/// so that every bit pattern is a valid value.
trait PlainData {}
impl PlainData for libc::c_int {}
impl PlainData for [u32; 16] {}
impl PlainData for libc::tcp_info {}

/// `getsockopt` of `level`/`name` into `value`; returns how many bytes the
/// kernel filled (it copies at most the size of `value`, fewer when its
/// own structure is shorter).
fn get_option<T: PlainData>(
    socket: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &mut T,
) -> io::Result<usize> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `socket` is borrowed, so live for the call; `value` is an
    // exclusive borrow of `len` bytes, which the kernel writes at most
    // (it copies min(len, its own size) and stores the count in `len`),
    // and any bytes it writes are a valid `T` (`PlainData`).
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (value as *mut T).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(len).unwrap_or(0))
}

/// The host name `ip` resolves to (the system resolver: /etc/hosts, DNS,
/// as nsswitch.conf says), `None` when it has none. Blocking.
pub fn reverse_lookup(ip: std::net::IpAddr) -> io::Result<Option<String>> {
    let addr = std::net::SocketAddr::new(ip, 0);
    let (storage, len) = socket_addr_bytes(&addr);
    let mut host = [0 as libc::c_char; 1025];
    // SAFETY: `storage` holds a valid sockaddr of `len` bytes; `host` is
    // a writable buffer whose length is passed; no service buffer is
    // asked for (null, length 0). getnameinfo writes a NUL-terminated
    // string of at most that length into `host`.
    let rc = unsafe {
        libc::getnameinfo(
            (&raw const storage).cast(),
            len,
            host.as_mut_ptr(),
            host.len() as libc::socklen_t,
            std::ptr::null_mut(),
            0,
            libc::NI_NAMEREQD,
        )
    };
    match rc {
        0 => {
            // SAFETY: getnameinfo succeeded, so `host` is NUL-terminated
            // within its length.
            let name = unsafe { std::ffi::CStr::from_ptr(host.as_ptr()) };
            Ok(Some(name.to_string_lossy().into_owned()))
        }
        libc::EAI_NONAME | libc::EAI_AGAIN | libc::EAI_FAIL => Ok(None),
        libc::EAI_SYSTEM => Err(io::Error::last_os_error()),
        other => Err(io::Error::other(format!("getnameinfo failed ({other})"))),
    }
}

/// A socket address as `sockaddr_storage` bytes for libc calls.
fn socket_addr_bytes(addr: &std::net::SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all zeros is valid.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        std::net::SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large and aligned enough for any
            // sockaddr; we write one sockaddr_in at its start.
            unsafe { std::ptr::write((&raw mut storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        std::net::SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for a sockaddr_in6.
            unsafe { std::ptr::write((&raw mut storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn send_buffer_and_unacked_bytes() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let usable = set_send_buffer(&server, 1 << 20).unwrap();
        assert!(usable > 0);
        assert_eq!(bytes_unacked(&server).unwrap(), 0);
        // The client never reads: what we write stays in flight or queued
        // (loopback acknowledges what the client's receive buffer took, so
        // only compare against what we wrote).
        server.set_nonblocking(true).unwrap();
        let mut written = 0;
        while let Ok(n) = server.write(&[1u8; 65536]) {
            written += n;
        }
        assert!(written > 0);
        assert!(bytes_unacked(&server).unwrap() <= written);
        drop(client);
    }

    #[test]
    fn queued_bytes_and_low_water_mark() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        assert_eq!(bytes_queued(&server).unwrap(), 0);
        client.write_all(&[7u8; 1000]).unwrap();
        // Loopback delivers at once, but give the stack a moment.
        dionfs_testfs::wait_until(
            || bytes_queued(&server).unwrap() == 1000,
            std::time::Duration::from_secs(10),
            "the 1000 bytes queued",
        );
        assert_eq!(bytes_queued(&server).unwrap(), 1000);
        assert_eq!(rcvlowat(&server).unwrap(), 1);
        set_rcvlowat(&server, 65536).unwrap();
        assert_eq!(rcvlowat(&server).unwrap(), 65536);
        set_rcvlowat(&server, 1).unwrap();
        assert_eq!(rcvlowat(&server).unwrap(), 1);
    }

    #[test]
    fn loopback_has_a_name() {
        // /etc/hosts names 127.0.0.1 on every Debian system ("localhost").
        let name = reverse_lookup("127.0.0.1".parse().unwrap()).unwrap();
        assert!(name.is_some_and(|n| !n.is_empty()));
        // TEST-NET-1 (RFC 5737) has no name anywhere.
        let none = reverse_lookup("192.0.2.55".parse().unwrap());
        assert!(matches!(none, Ok(None) | Err(_)), "{none:?}");
    }
}

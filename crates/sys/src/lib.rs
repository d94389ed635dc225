//! The only place in dionfs with `unsafe` code: aligned buffers and the
//! Linux system calls that neither `libc`'s safe surface nor `rustix` wraps
//! (file handles, per-thread credentials, `RWF_*` flags that are too new,
//! `SO_RCVLOWAT`, io_uring reads, byte-range OFD locks, `FICLONERANGE`,
//! fanotify on single files),
//! the name service's reentrant user and group lookups (`nss`), and
//! handing a job that borrows the caller's data to a parked helper thread.
//! Also running a future on the calling thread, parked while it waits
//! (`park`). Every `unsafe` block carries a `SAFETY:` comment. Also the one way
//! dionfs creates files of its own (`private`: owner-only, whatever the
//! umask), which every crate above needs.

pub mod beside;
pub mod buf;
pub mod clone;
pub mod cred;
pub mod fanotify;
pub mod handle;
pub mod io;
pub mod lock;
pub mod net;
pub mod nss;
pub mod park;
pub mod private;
pub mod uring;

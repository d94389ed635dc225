//! Filehandles (RFC 8881 §4, design section 6): what [`Fh4`] a COMPOUND
//! holds as its current and saved filehandle, the ops that set and read
//! them (PUTFH, PUTROOTFH, PUTPUBFH, GETFH, SAVEFH, RESTOREFH), and how
//! the other ops find the file behind the current one, with the export's
//! options (client list, `secure`, squash) applied as NFSv3 applies them.
//!
//! An export file keeps its NFSv3 handle, so both versions name a file
//! with the same bytes. A pseudo directory's handle is its [`PathId`]
//! under the server's handle key (`handle::encode_pseudo`). PUTFH checks
//! a handle and opens nothing: the file is opened by the first op that
//! needs it, and kept for the ops after it.

use std::sync::Arc;

use dionfs_core::export::{squash, ClientOptions};
use dionfs_core::exports::Export;
use dionfs_fs::handle::{self, PathId};
use dionfs_fs::{FileKind, FsError, Node, OpenFile, Time};
use dionfs_proto::nfs4::{ArgOp, GetfhResOk4, NfsFh4, Nfsstat4};
use dionfs_xdr::Encode;

use super::compound::OpCtx;
use super::namespace::{Client, Found, Namespace};
use super::reply::CompoundReply;
use super::status::from_fs;
use crate::admit::{admit, Refusal};

/// A filehandle of a COMPOUND.
#[derive(Clone)]
pub enum Fh4 {
    /// A directory of the pseudo-filesystem.
    Pseudo(PathId),
    /// A file of export `export`, named by its handle `fh`; `node` once
    /// an op has opened it; `file`, its data-plane file, when PUTFH found
    /// it in the open-file cache for a READ after it (looked up there
    /// instead of the MAC check alone, so that the READ need not check
    /// the handle again).
    File {
        export: u16,
        fh: Vec<u8>,
        node: Option<Arc<Node>>,
        file: Option<Arc<OpenFile>>,
    },
}

impl std::fmt::Debug for Fh4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fh4::Pseudo(id) => write!(f, "Pseudo({:016x})", id.fileid()),
            Fh4::File { export, .. } => write!(f, "File(export {export})"),
        }
    }
}

impl Fh4 {
    /// A file of `export` already opened.
    pub fn file(export: &Export, node: Node) -> Fh4 {
        Fh4::File {
            export: export.config.id,
            fh: node.fh().to_vec(),
            node: Some(Arc::new(node)),
            file: None,
        }
    }

    /// What a name in the pseudo-filesystem leads to, as a filehandle
    /// (not opened); `None` for [`Found::NotFound`].
    pub fn found(found: Found, exports: &dionfs_core::exports::Exports) -> Option<Fh4> {
        match found {
            Found::Pseudo(id) => Some(Fh4::Pseudo(id)),
            Found::ExportRoot(id) => {
                let export = exports.by_id(id)?;
                Some(Fh4::File {
                    export: id,
                    fh: export.fs.root_handle().to_vec(),
                    node: None,
                    file: None,
                })
            }
            Found::NotFound => None,
        }
    }

    /// The handle a client holds for it.
    pub fn handle(&self, key: &handle::MacKey) -> Result<NfsFh4, Nfsstat4> {
        let bytes = match self {
            Fh4::Pseudo(id) => handle::encode_pseudo(key, *id),
            Fh4::File { fh, .. } => fh.clone(),
        };
        NfsFh4::new(bytes).ok_or(Nfsstat4::Serverfault)
    }
}

/// The current filehandle, opened: what the ops work on.
pub enum Current<'a> {
    /// A pseudo directory in the COMPOUND's tree, visible to the client.
    Pseudo(PathId),
    /// A file of an export the client may use.
    File(File<'a>),
}

/// A file of an export, opened.
#[derive(Clone)]
pub struct File<'a> {
    pub export: &'a Export,
    pub node: Arc<Node>,
}

impl File<'_> {
    /// Whether it is its export's root.
    pub fn is_root(&self) -> bool {
        self.node.fh() == self.export.fs.root_handle()
    }
}

/// The status an op that needs a directory gets for a file of `kind`
/// (knfsd's `nfsd_mode_check`: a symbolic link is `SYMLINK`).
pub fn require_dir(kind: FileKind) -> Result<(), Nfsstat4> {
    match kind {
        FileKind::Directory => Ok(()),
        FileKind::Symlink => Err(Nfsstat4::Symlink),
        _ => Err(Nfsstat4::Notdir),
    }
}

/// Now, as the pseudo directories' stamp when a tree is built (and a
/// write-delegated file's times once its holder has changed it).
pub(super) fn now() -> Time {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Time {
        seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        nanos: since.subsec_nanos(),
    }
}

impl<'a> OpCtx<'a> {
    /// The pseudo-filesystem of the COMPOUND's export list (built once
    /// per list: blocking then, when exports nest).
    pub fn namespace(&self) -> Arc<Namespace> {
        self.nfs4.namespace.get(self.exports, now())
    }

    /// Who the client is, as export client lists see it.
    pub fn client(&self) -> Client<'a> {
        Client::of(self.conn)
    }

    /// The handle key of every handle the server issues.
    pub fn handle_key(&self) -> &'a handle::MacKey {
        self.server.reload_state().handle_key()
    }

    /// Export `id` of the COMPOUND's list, if the client may use it:
    /// `STALE` for an export a reload removed, `ACCESS` for a client
    /// outside its list, `PERM` for `secure` from an unreserved port.
    /// The ops after a PUTFH find its export admitted: the export list
    /// and the client do not change within a COMPOUND.
    pub fn export(&self, id: u16) -> Result<&'a Export, Nfsstat4> {
        let exports: &'a dionfs_core::exports::Exports = self.exports;
        let export = exports.by_id(id).ok_or(Nfsstat4::Stale)?;
        if self.admitted.is_none_or(|(admitted, _)| admitted != id) {
            self.admit(export)?;
        }
        Ok(export)
    }

    /// [`Self::export`], remembered for the ops after this one.
    fn admit_to(&mut self, id: u16) -> Result<&'a Export, Nfsstat4> {
        let exports: &'a dionfs_core::exports::Exports = self.exports;
        let export = exports.by_id(id).ok_or(Nfsstat4::Stale)?;
        let options = self.admit(export)?;
        self.admitted = Some((id, options));
        Ok(export)
    }

    fn admit(&self, export: &Export) -> Result<ClientOptions, Nfsstat4> {
        match admit(self.server, self.conn, export) {
            Ok(options) => Ok(*options),
            Err(Refusal::NotAdmitted) => Err(Nfsstat4::Access),
            Err(Refusal::InsecurePort) => Err(Nfsstat4::Perm),
            // SECINFO says what the export takes, whatever the connection.
            Err(Refusal::TransportSecurity) if self.secinfo => Ok(*export.options_for(self.conn)),
            Err(Refusal::TransportSecurity) => Err(Nfsstat4::Wrongsec),
        }
    }

    /// The current filehandle, opened (and kept opened for the ops
    /// after): `NOFILEHANDLE` without one.
    pub fn current(&mut self) -> Result<Current<'a>, Nfsstat4> {
        let opened = self.open(self.current.clone())?;
        if let (Current::File(file), Some(Fh4::File { node, .. })) = (&opened, &mut self.current) {
            if node.is_none() {
                *node = Some(Arc::clone(&file.node));
            }
        }
        Ok(opened)
    }

    /// The saved filehandle, opened: `NOFILEHANDLE` without one.
    pub fn saved(&mut self) -> Result<Current<'a>, Nfsstat4> {
        let opened = self.open(self.saved.clone())?;
        if let (Current::File(file), Some(Fh4::File { node, .. })) = (&opened, &mut self.saved) {
            if node.is_none() {
                *node = Some(Arc::clone(&file.node));
            }
        }
        Ok(opened)
    }

    /// The current filehandle, which must be an export's file (a pseudo
    /// directory gets `pseudo`).
    pub fn current_file(&mut self, pseudo: Nfsstat4) -> Result<File<'a>, Nfsstat4> {
        match self.current()? {
            Current::File(file) => Ok(file),
            Current::Pseudo(_) => Err(pseudo),
        }
    }

    fn open(&self, fh: Option<Fh4>) -> Result<Current<'a>, Nfsstat4> {
        match fh.ok_or(Nfsstat4::Nofilehandle)? {
            Fh4::Pseudo(id) => Ok(Current::Pseudo(id)),
            Fh4::File {
                export, fh, node, ..
            } => {
                let export = self.export(export)?;
                let node = match node {
                    Some(node) => node,
                    None => Arc::new(export.fs.resolve(&fh).map_err(from_fs)?),
                };
                Ok(Current::File(File { export, node }))
            }
        }
    }

    /// The options `export` gives this call's client (its client entry).
    pub fn options(&self, export: &Export) -> ClientOptions {
        match self.admitted {
            Some((id, options)) if id == export.config.id => options,
            _ => *export.options_for(self.conn),
        }
    }

    /// The identity this call's file-system work runs as on `export`.
    pub fn creds(&self, export: &Export) -> dionfs_sys::cred::Creds {
        squash(&self.options(export), &self.call.cred)
    }

    /// Runs `f` as the client, squashed as its entry of `export` says, as
    /// NFSv3 does.
    pub fn as_user<T>(
        &self,
        export: &Export,
        f: impl FnOnce() -> Result<T, FsError>,
    ) -> Result<T, Nfsstat4> {
        let creds = self.creds(export);
        crate::io::run_as(self.server, &creds, f)
            .and_then(|result| result)
            .map_err(from_fs)
    }

    /// `ROFS` for a change to an export read-only for this client.
    pub fn writable(&self, export: &Export) -> Result<(), Nfsstat4> {
        if self.options(export).read_only() {
            Err(Nfsstat4::Rofs)
        } else {
            Ok(())
        }
    }
}

/// Checks a handle a client gives: ours (its MAC), of an export this
/// client may use or of a pseudo directory it may see. Opens nothing.
fn check_handle(ctx: &mut OpCtx, fh: NfsFh4) -> Result<Fh4, Nfsstat4> {
    let bytes = fh.as_bytes();
    if handle::is_pseudo(bytes) {
        let id = handle::decode_pseudo(ctx.handle_key(), bytes).map_err(from_fs)?;
        let ns = ctx.namespace();
        // A path a reload removed from the tree.
        let dir = ns.node(id).ok_or(Nfsstat4::Stale)?;
        if !dir.visible_to(ctx.client()) {
            return Err(Nfsstat4::Access);
        }
        return Ok(Fh4::Pseudo(id));
    }
    let id = handle::export_id(bytes).ok_or(Nfsstat4::Badhandle)?;
    // A WRITE's payload placed for this very handle at receive had its
    // MAC checked there, and the client admitted to its export, with
    // these exports: neither done twice.
    let placed = ctx
        .data
        .placed_for(bytes)
        .filter(|&(placed, _)| placed == id);
    let export = match placed {
        Some((_, options)) => {
            let export = ctx.exports.by_id(id).ok_or(Nfsstat4::Stale)?;
            ctx.admitted = Some((id, options));
            export
        }
        None => match ctx.admit_to(id) {
            Ok(export) => export,
            // Whether PUTFH answers it depends on the op after
            // (`wrongsec_after_put`); the ops that use the handle get it.
            Err(Nfsstat4::Wrongsec) => ctx.exports.by_id(id).ok_or(Nfsstat4::Stale)?,
            Err(status) => return Err(status),
        },
    };
    let file = if placed.is_some() {
        None
    } else if ctx.next_reads {
        // Checked by the lookup, which the READ would make anyway.
        export.fs.cached_file(bytes).map_err(from_fs)?
    } else {
        export.fs.verify_handle(bytes).map_err(from_fs)?;
        None
    };
    Ok(Fh4::File {
        export: id,
        fh: fh.into_bytes(),
        node: None,
        file,
    })
}

/// RFC 8881 section 2.6.3.1.1, as knfsd's `need_wrongsec_check` applies
/// it after a put-filehandle op (PUTFH, PUTROOTFH, PUTPUBFH): `fh` is of
/// an export whose `xprtsec` this connection does not meet, and the op
/// after is not one that answers WRONGSEC itself (LOOKUP, LOOKUPP,
/// SECINFO, SECINFO_NO_NAME): the put answers it. So PUTFH then
/// SECINFO_NO_NAME tells a plain client what the export takes, and PUTFH
/// then GETATTR is WRONGSEC at PUTFH. (knfsd since 6.10 refuses the
/// PUTFH itself whatever follows: its `__fh_verify` checks the transport
/// even for PUTFH's `NFSD_MAY_BYPASS_GSS`.) A put of a file whose export
/// refuses this client otherwise (client list, `secure`) was refused as
/// the handle was checked.
fn wrongsec_after_put(ctx: &OpCtx, fh: &Fh4) -> Result<(), Nfsstat4> {
    match fh {
        // Admitted by its check (PUTFH's usual case): nothing to look up.
        Fh4::File { export, .. }
            if !ctx.next_handles_wrongsec
                && ctx.admitted.is_none_or(|(admitted, _)| admitted != *export) =>
        {
            ctx.export(*export).map(drop)
        }
        _ => Ok(()),
    }
}

pub fn putfh(ctx: &mut OpCtx, op: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Putfh(args) = op else {
        return Nfsstat4::Serverfault;
    };
    match check_handle(ctx, args.object) {
        Ok(fh) => {
            let checked = wrongsec_after_put(ctx, &fh);
            ctx.current = Some(fh);
            checked.err().unwrap_or(Nfsstat4::Ok)
        }
        Err(status) => status,
    }
}

/// PUTROOTFH, and PUTPUBFH (the same, as with knfsd): the client's root,
/// an export's root when an export at `/` admits it.
pub fn putrootfh(ctx: &mut OpCtx, _: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    let ns = ctx.namespace();
    match Fh4::found(ns.root(ctx.client()), ctx.exports) {
        Some(fh) => {
            let checked = wrongsec_after_put(ctx, &fh);
            ctx.current = Some(fh);
            checked.err().unwrap_or(Nfsstat4::Ok)
        }
        None => Nfsstat4::Serverfault,
    }
}

pub fn getfh(ctx: &mut OpCtx, _: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let Some(fh) = &ctx.current else {
        return Nfsstat4::Nofilehandle;
    };
    match fh.handle(ctx.handle_key()) {
        Ok(object) => {
            GetfhResOk4 { object }.encode(reply.encoder());
            Nfsstat4::Ok
        }
        Err(status) => status,
    }
}

pub fn savefh(ctx: &mut OpCtx, _: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    match &ctx.current {
        Some(fh) => {
            ctx.saved = Some(fh.clone());
            Nfsstat4::Ok
        }
        None => Nfsstat4::Nofilehandle,
    }
}

/// RESTOREFH: without a saved filehandle, `NOFILEHANDLE` (RFC 8881
/// §18.27.3; 4.0's `RESTOREFH` error is not 4.1's answer, but is minor
/// version 0's, RFC 7530 section 16.28.4).
pub fn restorefh(ctx: &mut OpCtx, _: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    match &ctx.saved {
        Some(fh) => {
            ctx.current = Some(fh.clone());
            Nfsstat4::Ok
        }
        None if ctx.minor == 0 => Nfsstat4::Restorefh,
        None => Nfsstat4::Nofilehandle,
    }
}

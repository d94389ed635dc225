//! The exports served at one moment ([`Exports`]), each with its file
//! system, data plane and metadata commits ([`Export`]), and how one is
//! opened from its config: what every program's calls run against.

use std::sync::Arc;

use dionfs_dataplane::{DataConfig, DataPlane};
use dionfs_fs::{handle, ExportFs, MetadataSync};
use dionfs_transport::ConnInfo;

use crate::export::{Client, ClientOptions, Durability, ExportConfig, ServerSettings};

/// One export as served: its options, its file system, its data plane.
/// A reload that changes only an export's options makes a new `Export`
/// around the same file system and data plane (see [`crate::reload`]).
pub struct Export {
    pub config: ExportConfig,
    pub fs: Arc<ExportFs>,
    pub data: Arc<DataPlane>,
    /// Makes metadata changes durable before replies (`sync`), or not.
    pub metadata_sync: Arc<MetadataSync>,
}

impl Export {
    /// The options this export gives the client of `conn`: those of its
    /// entry that matches the client best
    /// ([`ExportConfig::options_for`]), or, for a client it does not
    /// admit, [`ClientOptions::NOBODY`] (read-only, everyone squashed):
    /// every caller refuses such a client first.
    pub fn options_for(&self, conn: &ConnInfo) -> &ClientOptions {
        self.config
            .options_for(Client::of(conn))
            .unwrap_or(&ClientOptions::NOBODY)
    }
}

/// The exports served at one moment, in the config's order. A reload
/// replaces the whole list at once ([`Server::exports`]); each call takes
/// the list once, when it is received, and uses that one throughout, so a
/// call never sees half of a reload and the export it started on stays
/// alive until it is answered.
#[derive(Default)]
pub struct Exports {
    list: Vec<Arc<Export>>,
    /// Whether a client list names hosts or wildcards.
    need_names: bool,
}

impl Exports {
    /// The list of `exports`, in the config's order.
    pub fn new(exports: Vec<Arc<Export>>) -> Exports {
        Exports {
            need_names: exports.iter().any(|x| x.config.needs_names()),
            list: exports,
        }
    }

    /// The export whose id a file handle carries.
    pub fn by_id(&self, id: u16) -> Option<&Arc<Export>> {
        self.list.iter().find(|x| x.config.id == id)
    }

    /// The export `fh` belongs to if this client may use it (its client
    /// list, `secure`, `xprtsec`), else `None`, silently: for work done
    /// before the handler, which reports refusals (see `nfs::Ctx::export`),
    /// such as placing a WRITE's payload.
    pub fn for_client(&self, conn: &ConnInfo, fh: &[u8]) -> Option<&Arc<Export>> {
        self.admitting(conn, fh).map(|(export, _)| export)
    }

    /// [`Self::for_client`] with the options of the client entry that
    /// admits this client.
    pub fn admitting(&self, conn: &ConnInfo, fh: &[u8]) -> Option<(&Arc<Export>, &ClientOptions)> {
        let (export, options) = self.matching(conn, fh)?;
        options
            .xprtsec
            .admits(conn.security())
            .then_some((export, options))
    }

    /// [`Self::for_client`] without `xprtsec`, for NLM: knfsd's
    /// `__fh_verify` skips the transport check for `NFSD_MAY_NLM`
    /// ("lockd doesn't support xprtsec"), and a Linux client's lockd
    /// never uses TLS, so a client of a TLS export could not lock at all.
    pub fn for_lock_client(&self, conn: &ConnInfo, fh: &[u8]) -> Option<&Arc<Export>> {
        self.matching(conn, fh).map(|(export, _)| export)
    }

    /// The export `fh` belongs to and the options of the client entry
    /// that admits this client from its port (client list, `secure`).
    fn matching(&self, conn: &ConnInfo, fh: &[u8]) -> Option<(&Arc<Export>, &ClientOptions)> {
        let export = self.by_id(handle::export_id(fh)?)?;
        let options = export.config.options_for(Client::of(conn))?;
        options
            .admits_port(conn.peer.port())
            .then_some((export, options))
    }

    /// Whether a client list names hosts or wildcards, so that clients'
    /// host names must be looked up.
    pub fn need_names(&self) -> bool {
        self.need_names
    }
}

impl std::ops::Deref for Exports {
    type Target = [Arc<Export>];

    fn deref(&self) -> &[Arc<Export>] {
        &self.list
    }
}

/// Opens the data plane and the metadata commits of the export `x` of a
/// server with `settings`, on its file system `fs` (at start, and for an
/// export a reload adds).
pub(crate) fn open_export(
    settings: &ServerSettings,
    x: &ExportConfig,
    fs: Arc<ExportFs>,
) -> Result<Export, String> {
    let data = DataPlane::new(data_config(settings, x))
        .map_err(|e| format!("export {}: {e}", x.path.display()))?;
    let metadata_sync = MetadataSync::new(&fs, x.durability == Durability::Sync)
        .map_err(|e| format!("export {}: {e}", x.path.display()))?;
    Ok(Export {
        config: x.clone(),
        fs,
        data: Arc::new(data),
        metadata_sync: Arc::new(metadata_sync),
    })
}

/// The data-plane settings of the export `x` of a server with `settings`.
pub(crate) fn data_config(settings: &ServerSettings, x: &ExportConfig) -> DataConfig {
    DataConfig {
        read_mode: x.read_mode,
        write_mode: x.write_mode,
        max_transfer: x.max_transfer as usize,
        read_buffers: settings.read_buffers(),
        write_buffers: settings.write_buffers(),
        small_buffers: settings.small_buffers,
        large_read_depth: settings.large_read_depth_mib << 20,
    }
}

//! What the server crate's unit tests share.

use std::path::Path;
use std::sync::Arc;

use dionfs_core::export::{Config, ExportConfig, ServerSettings};
use dionfs_core::server::Server;

/// A server on one export at `export` (any client port), its state under
/// `root/state`, without io_uring.
pub fn server(root: &Path, export: &Path) -> Arc<Server> {
    let mut export = ExportConfig::with_defaults(export.to_owned());
    export.entries[0].options.secure = false;
    let config = Config {
        server: ServerSettings {
            state_dir: root.join("state"),
            io_uring: false,
            max_in_flight: 4,
            ..ServerSettings::default()
        },
        exports: vec![export],
    };
    Arc::new(Server::open(&config).unwrap())
}

//! Exports: who may mount what (client lists, source ports), and as whom
//! their calls run.

pub mod clients;
pub mod config;
pub mod exports5;
pub mod port;

pub use clients::{CertificateMatch, Client, ClientMatch, Precedence};
pub use config::{
    Access, ClientEntry, ClientOptions, Config, ConfigError, Durability, ExportConfig, Integrity,
    NfsVersions, ServerSettings, Squash, TlsFiles, Xprtsec,
};

use dionfs_rpc::message::Credential;
use dionfs_sys::cred::Creds;

/// Where `dionfs stats` reads the metrics unless told otherwise, and so
/// the `metrics_listen` of a config made by `dionfs exportfs --convert`.
pub const STATS_ADDRESS: &str = "127.0.0.1:9049";

/// Maps a call's credential to the identity its file-system work runs with,
/// per the squash option of the caller's client entry (exports(5)).
///
/// AUTH_NONE and unsupported flavors are anonymous. Under `root_squash`,
/// uid 0 and gid 0 (also in the supplementary groups) become the anonymous
/// ids, as knfsd does.
pub fn squash(export: &ClientOptions, cred: &Credential) -> Creds {
    let anon = || Creds {
        uid: export.anonuid,
        gid: export.anongid,
        groups: Vec::new(),
    };
    let Credential::Sys(sys) = cred else {
        return anon();
    };
    let creds = match export.squash {
        Squash::AllSquash => anon(),
        Squash::NoRootSquash => Creds {
            uid: sys.uid,
            gid: sys.gid,
            groups: sys.gids.clone(),
        },
        Squash::RootSquash => {
            let map_gid = |g: u32| if g == 0 { export.anongid } else { g };
            Creds {
                uid: if sys.uid == 0 {
                    export.anonuid
                } else {
                    sys.uid
                },
                gid: map_gid(sys.gid),
                groups: sys.gids.iter().map(|&g| map_gid(g)).collect(),
            }
        }
    };
    // 0xFFFFFFFF is no user or group on Linux (`setfsuid(-1)` changes
    // nothing, `setgroups` refuses it): the anonymous ones stand in, as in
    // knfsd's `nfsd_setuser`, and a supplementary group that is no group
    // is left out. Every call with one failed (NFS3ERR_SERVERFAULT),
    // logged each time.
    const INVALID: u32 = u32::MAX;
    Creds {
        uid: if creds.uid == INVALID {
            export.anonuid
        } else {
            creds.uid
        },
        gid: if creds.gid == INVALID {
            export.anongid
        } else {
            creds.gid
        },
        groups: creds.groups.into_iter().filter(|&g| g != INVALID).collect(),
    }
}

//! Whether a client may use an export, as every NFS program checks it
//! once it knows a handle's export: NFSv3 (`nfs/`) and NFSv4 (`nfs4/`)
//! both call [`admit`], so they refuse the same clients with the same log
//! lines, each mapping the refusal to its own status.

use dionfs_core::export::{Client, ClientOptions, Xprtsec};
use dionfs_core::exports::Export;
use dionfs_core::server::Server;
use dionfs_logs::CLIENT_WARN_EVERY;
use dionfs_transport::{ConnInfo, TransportSecurity};
use tracing::warn;

/// Why a client may not use an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The client is not in the export's client list (v3 `ACCES`, v4
    /// `ACCESS`).
    NotAdmitted,
    /// A `secure` export called from an unreserved port (`PERM`, as
    /// knfsd's `nfsd_setuser_and_check_port`).
    InsecurePort,
    /// The connection is not one the export's `xprtsec` allows (plain
    /// where TLS is required, say): knfsd's `check_xprtsec_policy` fails
    /// with `nfserr_wrongsec`, which v4 answers as `WRONGSEC` and v3 as
    /// `ACCES` (`nfsd3_map_status`).
    TransportSecurity,
}

/// Checks that the client of `conn` may use `export`, logging a refusal
/// (once per client and export every [`CLIENT_WARN_EVERY`]); returns the
/// options of the client entry that admits it.
pub fn admit<'e>(
    server: &Server,
    conn: &ConnInfo,
    export: &'e Export,
) -> Result<&'e ClientOptions, Refusal> {
    let client = conn.peer.ip();
    // One log line per client and export every CLIENT_WARN_EVERY, whatever
    // the refusal.
    let should_warn = || {
        server.refused_call_warnings.should_warn(
            client,
            export.config.id,
            std::time::Instant::now(),
        )
    };
    let Some(options) = export.config.options_for(Client::of(conn)) else {
        if should_warn() {
            match conn.certificate() {
                Some(certificate) => warn!(
                    client = %client,
                    %certificate,
                    export = %export.config.path.display(),
                    repeat_after_s = CLIENT_WARN_EVERY.as_secs(),
                    "NFS call refused: neither the client nor its certificate is in the \
                     export's client list"
                ),
                None => warn!(
                    client = %client,
                    export = %export.config.path.display(),
                    repeat_after_s = CLIENT_WARN_EVERY.as_secs(),
                    "NFS call refused: client not in the export's client list"
                ),
            }
        }
        return Err(Refusal::NotAdmitted);
    };
    // The entry just found says; `port_allowed` finds it again only to
    // log a refusal (an `options_for` is a tenth of a v4.1 READ's
    // PUTFH, callgrind).
    if !options.admits_port(conn.peer.port()) && !server.port_allowed(export, conn, "NFS call") {
        return Err(Refusal::InsecurePort);
    }
    // After the port, as knfsd's __fh_verify checks them.
    let security = conn.security();
    if !options.xprtsec.admits(security) {
        if should_warn() {
            warn!(
                client = %client,
                export = %export.config.path.display(),
                connection = security.name(),
                xprtsec = %options.xprtsec,
                repeat_after_s = CLIENT_WARN_EVERY.as_secs(),
                "NFS call refused: the export's xprtsec does not allow this connection: {}",
                xprtsec_advice(security, options.xprtsec)
            );
        }
        return Err(Refusal::TransportSecurity);
    }
    Ok(options)
}

/// Why a connection of `security` is not one an export allowing
/// `allowed` takes, and what the client should do.
fn xprtsec_advice(security: TransportSecurity, allowed: Xprtsec) -> &'static str {
    use TransportSecurity as T;
    match security {
        T::Plain if allowed.contains(Xprtsec::TLS) => {
            "the client did not use TLS; mount with -o xprtsec=tls"
        }
        T::Plain => {
            "the client did not use TLS, and the export needs a client certificate; mount \
             with -o xprtsec=mtls, the client holding a certificate signed by [tls] client_ca"
        }
        T::Tls if allowed.contains(Xprtsec::MTLS) => {
            "the client presented no certificate, and the export needs one signed by [tls] \
             client_ca; give the client one (tlshd's x509.certificate) and mount with -o \
             xprtsec=mtls"
        }
        T::Mtls if allowed.contains(Xprtsec::TLS) => {
            "the client presented a certificate, and the export allows TLS without one only \
             (as knfsd's xprtsec=tls); add \"mtls\" to its xprtsec, or mount with -o \
             xprtsec=tls"
        }
        T::Tls | T::Mtls => "the export allows plain connections only (xprtsec = [\"none\"])",
    }
}

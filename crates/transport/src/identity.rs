//! Who a TLS client is, as far as its certificate says: taken once, when
//! the connection's handshake completes, from the certificate rustls has
//! verified against the server's `client_ca`, and kept in the
//! connection's [`ConnInfo`](crate::ConnInfo), so that export client
//! lists can match it (by a subject alternative name or the certificate's
//! fingerprint) without parsing anything per call.

use std::fmt;

use rustls::pki_types::CertificateDer;

/// What a connection's TLS handshake established about its client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsPeer {
    /// The client presented no certificate (an export's `xprtsec` calls
    /// this connection `tls`).
    Anonymous,
    /// The client presented this certificate, and it verified against
    /// `client_ca` (`mtls`): rustls refuses the handshake of one that
    /// does not.
    Certified(ClientCertificate),
}

/// The identity a verified client certificate carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    /// SHA-256 of the certificate (its DER): what `openssl x509 -noout
    /// -fingerprint -sha256` prints.
    pub sha256: [u8; 32],
    /// Its subject alternative names that are DNS names, in lower case
    /// (DNS names compare without regard to case, RFC 4343).
    pub dns_names: Vec<String>,
    /// Its subject alternative names that are URIs, as written.
    pub uris: Vec<String>,
}

impl ClientCertificate {
    /// The identity of the certificate `der`, which the handshake has
    /// verified (so it parses; if it did not, only the fingerprint is
    /// known, and no name matches).
    pub fn from_der(der: &CertificateDer<'_>) -> Self {
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, der.as_ref());
        let mut sha256 = [0u8; 32];
        sha256.copy_from_slice(digest.as_ref());
        let (dns_names, uris) = match webpki::EndEntityCert::try_from(der) {
            Ok(cert) => (
                cert.valid_dns_names()
                    .map(str::to_ascii_lowercase)
                    .collect(),
                cert.valid_uri_names().map(str::to_string).collect(),
            ),
            Err(_) => (Vec::new(), Vec::new()),
        };
        Self {
            sha256,
            dns_names,
            uris,
        }
    }

    /// The fingerprint as `openssl` prints it: hex pairs, colon-separated,
    /// upper case.
    pub fn fingerprint(&self) -> String {
        let pairs: Vec<String> = self.sha256.iter().map(|b| format!("{b:02X}")).collect();
        pairs.join(":")
    }
}

/// For logs: the names, then the fingerprint.
impl fmt::Display for ClientCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for name in self.dns_names.iter().chain(&self.uris) {
            write!(f, "{name} ")?;
        }
        write!(f, "sha256 {}", self.fingerprint())
    }
}

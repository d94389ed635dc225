//! A failed TLS handshake as the operator is told of it: why, in words
//! that say what to fix (a client certificate expired or signed by
//! another CA, the client refusing the server's certificate, a client that
//! stalled or does not speak TLS), and of which kind, as the two kinds are
//! logged on budgets of their own (`DropLogs`): a flood of stalled
//! handshakes must not hide the one certificate that needs renewing.

use rustls::{AlertDescription, CertificateError, Error as TlsError};

use crate::tls::HandshakeError;

/// Which log budget a failure is written on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A certificate, the client's or the server's, was refused: a
    /// configuration to fix.
    Certificate,
    /// Anything else: a client that stalled, closed, or is not an
    /// RPC-with-TLS client.
    Other,
}

/// Why `e` ended a handshake, and its kind.
pub(super) fn explain(e: &HandshakeError) -> (Kind, String) {
    use Kind::{Certificate, Other};
    match e {
        HandshakeError::Tls(TlsError::InvalidCertificate(c)) => {
            (Certificate, client_certificate(c))
        }
        HandshakeError::Tls(TlsError::AlertReceived(alert)) => received(*alert),
        HandshakeError::Tls(TlsError::NoApplicationProtocol) => (
            Other,
            "the client offered ALPN ids, none of them \"sunrpc\" (RFC 9289 section 5.2): \
             not an RPC-with-TLS client"
                .into(),
        ),
        HandshakeError::Tls(TlsError::PeerIncompatible(why)) => (
            Other,
            format!("the client cannot do what RPC-with-TLS needs (TLS 1.3): {why:?}"),
        ),
        HandshakeError::Tls(
            TlsError::InvalidMessage(_)
            | TlsError::InappropriateMessage { .. }
            | TlsError::InappropriateHandshakeMessage { .. },
        ) => (
            Other,
            "the client sent something other than a TLS handshake after the STARTTLS \
             reply (garbage, or a client that does not speak RPC-with-TLS)"
                .into(),
        ),
        HandshakeError::Tls(other) => (Other, format!("TLS refused the client: {other}")),
        HandshakeError::TimedOut(t) => (
            Other,
            format!(
                "not done in {}s (a stalled or hostile client); raise handshake_timeout if \
                 clients are this slow",
                t.as_secs_f64()
            ),
        ),
        HandshakeError::Eof => (
            Other,
            "the client closed the connection during the handshake (a client that refuses \
             the server's certificate may close without saying why: check that it trusts the \
             CA of [tls] certificate)"
                .into(),
        ),
        HandshakeError::Io(e) => (Other, format!("socket error during the handshake: {e}")),
    }
}

/// Why the client's certificate `c` was refused (it was checked against
/// `client_ca`).
fn client_certificate(c: &CertificateError) -> String {
    use CertificateError as C;
    let why = match c {
        C::Expired | C::ExpiredContext { .. } => {
            "has expired: issue the client a new one (or check the client's and the server's \
             clocks)"
        }
        C::NotValidYet | C::NotValidYetContext { .. } => {
            "is not valid yet: check the client's and the server's clocks"
        }
        C::UnknownIssuer => {
            "was not signed by a CA of [tls] client_ca (unknown CA): sign it with one, or add \
             its CA to client_ca"
        }
        C::BadSignature => "has a bad signature: it was not signed by the CA it names",
        C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
            "is not for client authentication: its extended key usage lacks clientAuth"
        }
        C::Revoked => "has been revoked",
        _ => return format!("the client's certificate was refused: {c:?}"),
    };
    format!("the client's certificate {why}")
}

/// Why the client refused the handshake with `alert`.
fn received(alert: AlertDescription) -> (Kind, String) {
    use AlertDescription as A;
    let why = match alert {
        A::UnknownCA => "does not know the CA that signed [tls] certificate",
        A::CertificateExpired => "found the server's certificate expired",
        A::BadCertificate | A::CertificateUnknown | A::UnsupportedCertificate => {
            "refused the server's certificate: does it name this server (its subject \
             alternative names) and is it signed by a CA the client trusts?"
        }
        A::NoApplicationProtocol => "wants an ALPN other than \"sunrpc\"",
        other => {
            return (
                Kind::Other,
                format!("the client ended the handshake with the alert {other:?}"),
            )
        }
    };
    let kind = if alert == A::NoApplicationProtocol {
        Kind::Other
    } else {
        Kind::Certificate
    };
    (kind, format!("the client {why} ({alert:?})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn says(e: HandshakeError) -> (Kind, String) {
        explain(&e)
    }

    #[test]
    fn certificate_failures_say_what_to_fix() {
        let client = |c| says(HandshakeError::Tls(TlsError::InvalidCertificate(c)));
        let (kind, why) = client(CertificateError::Expired);
        assert_eq!(kind, Kind::Certificate);
        assert!(why.contains("expired") && why.contains("new one"), "{why}");
        let (_, why) = client(CertificateError::UnknownIssuer);
        assert!(
            why.contains("unknown CA") && why.contains("client_ca"),
            "{why}"
        );
        let (_, why) = client(CertificateError::NotValidYet);
        assert!(why.contains("clocks"), "{why}");
        let (kind, why) = says(HandshakeError::Tls(TlsError::AlertReceived(
            AlertDescription::UnknownCA,
        )));
        assert_eq!(kind, Kind::Certificate);
        assert!(why.contains("[tls] certificate"), "{why}");
    }

    #[test]
    fn other_failures_are_of_their_own_kind() {
        for e in [
            HandshakeError::TimedOut(Duration::from_secs(10)),
            HandshakeError::Eof,
            HandshakeError::Tls(TlsError::NoApplicationProtocol),
            HandshakeError::Tls(TlsError::InvalidMessage(
                rustls::InvalidMessage::InvalidContentType,
            )),
        ] {
            let (kind, why) = says(e);
            assert_eq!(kind, Kind::Other, "{why}");
        }
        let (_, why) = says(HandshakeError::TimedOut(Duration::from_secs(10)));
        assert!(
            why.contains("10s") && why.contains("handshake_timeout"),
            "{why}"
        );
    }
}

//! TLS 1.3 records after the handshake (RFC 8446 section 5.2), sealed
//! and opened here with the traffic keys rustls derived, as the kernel
//! does them with kTLS: rustls keeps the secrets (a KeyUpdate's next
//! keys), and the bytes go through AES-GCM once each, out of place, from
//! the buffer they are in to the buffer they go to. So a READ's data is
//! read by the cipher from the buffer it was read into, and a WRITE's
//! payload is written by it into its aligned buffer: no copy beside the
//! socket's.

use std::io;

use aws_lc_rs::aead::{
    Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305, NONCE_LEN,
};
use rustls::ConnectionTrafficSecrets;

/// A record's header: content type, legacy version, length.
pub(super) const HEADER: usize = 5;
/// The AEAD tag of every cipher suite of TLS 1.3.
pub(super) const TAG: usize = 16;
/// Largest plaintext of one record.
pub(super) const MAX_PLAINTEXT: usize = 16 << 10;
/// Largest record on the wire, header included (2^14 + 256 bytes of
/// ciphertext at most).
pub(super) const MAX_WIRE: usize = HEADER + MAX_PLAINTEXT + 256;
/// What a record adds to its content: header, inner content type, tag.
pub(super) const OVERHEAD: usize = HEADER + 1 + TAG;

/// Inner content types (RFC 8446 section 5.1).
pub(super) const ALERT: u8 = 21;
pub(super) const HANDSHAKE: u8 = 22;
pub(super) const APPLICATION_DATA: u8 = 23;

/// The key of one direction and the sequence number of its next record.
pub(super) struct Keys {
    key: LessSafeKey,
    iv: [u8; NONCE_LEN],
    seq: u64,
}

impl Keys {
    /// The keys rustls gives for one direction, `seq` records in.
    pub(super) fn new((seq, secrets): (u64, ConnectionTrafficSecrets)) -> io::Result<Self> {
        let (algorithm, key, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (&CHACHA20_POLY1305, key, iv),
            _ => return Err(invalid("a cipher suite TLS 1.3 does not have")),
        };
        let key = UnboundKey::new(algorithm, key.as_ref())
            .map_err(|_| invalid("a traffic key of the wrong length"))?;
        let iv = iv
            .as_ref()
            .try_into()
            .map_err(|_| invalid("a traffic IV of the wrong length"))?;
        Ok(Self {
            key: LessSafeKey::new(key),
            iv,
            seq,
        })
    }

    /// Records sealed or opened with these keys so far.
    pub(super) fn seq(&self) -> u64 {
        self.seq
    }

    /// The next record's nonce: the IV with the sequence number XORed
    /// into its end (RFC 8446 section 5.3).
    fn next_nonce(&mut self) -> Nonce {
        let mut nonce = self.iv;
        for (n, s) in nonce[NONCE_LEN - 8..]
            .iter_mut()
            .zip(self.seq.to_be_bytes())
        {
            *n ^= s;
        }
        self.seq += 1;
        Nonce::assume_unique_for_key(nonce)
    }
}

/// Where the plaintext of a record to seal is.
pub(super) enum Plaintext<'a> {
    /// In one buffer: sealed from there.
    One(&'a [u8]),
    /// `len` bytes that `fill` copies into the record (pieces of several
    /// buffers); sealed in place.
    Gathered(usize, &'a mut dyn FnMut(&mut [u8])),
}

impl Plaintext<'_> {
    fn len(&self) -> usize {
        match self {
            Plaintext::One(p) => p.len(),
            Plaintext::Gathered(len, _) => *len,
        }
    }
}

/// Seals `plaintext` (at most [`MAX_PLAINTEXT`] bytes) of content type
/// `content` into one record at the start of `out`, which must hold
/// `plaintext.len() + OVERHEAD` bytes; returns the record's length.
pub(super) fn seal(
    keys: &mut Keys,
    content: u8,
    plaintext: Plaintext<'_>,
    out: &mut [u8],
) -> io::Result<usize> {
    let len = plaintext.len();
    let wire = len + 1 + TAG;
    let record = out
        .get_mut(..HEADER + wire)
        .filter(|_| len <= MAX_PLAINTEXT)
        .ok_or_else(|| invalid("a TLS record too long for its buffer"))?;
    let header = header(wire);
    let (head, body) = record.split_at_mut(HEADER);
    head.copy_from_slice(&header);
    let (cipher, type_and_tag) = body.split_at_mut(len);
    let nonce = keys.next_nonce();
    let sealed = match plaintext {
        Plaintext::One(p) => keys.key.seal_out_of_place_scatter(
            nonce,
            Aad::from(header),
            p,
            cipher,
            &[content],
            type_and_tag,
        ),
        Plaintext::Gathered(_, fill) => {
            fill(cipher);
            keys.key.seal_in_place_scatter(
                nonce,
                Aad::from(header),
                cipher,
                &[content],
                type_and_tag,
            )
        }
    };
    sealed.map_err(|_| invalid("sealing a TLS record failed"))?;
    Ok(HEADER + wire)
}

fn header(wire: usize) -> [u8; HEADER] {
    // TLS 1.3 records all say application_data, TLS 1.2 (section 5.2).
    let [hi, lo] = (wire as u16).to_be_bytes();
    [APPLICATION_DATA, 3, 3, hi, lo]
}

/// The length of the record `buf` starts with, header included, if
/// `buf` holds all of it; an error for a header no TLS 1.3 record has.
pub(super) fn whole_record(buf: &[u8]) -> io::Result<Option<usize>> {
    let Some(header) = buf.get(..HEADER) else {
        return Ok(None);
    };
    if header[0] != APPLICATION_DATA {
        return Err(invalid(
            "a TLS record of an outer type other than application_data",
        ));
    }
    let len = HEADER + usize::from(u16::from_be_bytes([header[3], header[4]]));
    if len > MAX_WIRE {
        return Err(invalid("a TLS record longer than 2^14 + 256 bytes"));
    }
    if len < HEADER + 1 + TAG {
        return Err(invalid("a TLS record too short for its tag"));
    }
    Ok((buf.len() >= len).then_some(len))
}

/// The length of the plaintext (content type and padding included) of
/// the whole record `record`.
pub(super) fn inner_len(record: &[u8]) -> usize {
    record.len() - HEADER - TAG
}

/// Opens the whole record `record` into `out` (at least
/// [`inner_len`] bytes): its content type, and how long its content is
/// (at the start of `out`).
pub(super) fn open_into(keys: &mut Keys, record: &[u8], out: &mut [u8]) -> io::Result<(u8, usize)> {
    let (header, body) = record.split_at(HEADER);
    let (cipher, tag) = body.split_at(body.len() - TAG);
    let out = &mut out[..cipher.len()];
    let nonce = keys.next_nonce();
    keys.key
        .open_separate_gather(nonce, Aad::from(header), cipher, tag, out)
        .map_err(|_| bad_record_mac())?;
    inner_type(out)
}

/// Opens the whole record `record` where it is: its content type, and
/// how long its content is (at `record[HEADER..]`).
pub(super) fn open_in_place(keys: &mut Keys, record: &mut [u8]) -> io::Result<(u8, usize)> {
    let (header, body) = record.split_at_mut(HEADER);
    let nonce = keys.next_nonce();
    let plain = keys
        .key
        .open_in_place(nonce, Aad::from(&*header), body)
        .map_err(|_| bad_record_mac())?;
    inner_type(plain)
}

/// TLSInnerPlaintext (RFC 8446 section 5.2): the content, its type, then
/// zeros.
fn inner_type(plain: &[u8]) -> io::Result<(u8, usize)> {
    let at = plain
        .iter()
        .rposition(|&b| b != 0)
        .ok_or_else(|| invalid("a TLS record of padding only"))?;
    Ok((plain[at], at))
}

fn bad_record_mac() -> io::Error {
    invalid("a TLS record that does not decrypt (bad_record_mac)")
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::cipher::{AeadKey, Iv};

    fn keys(seq: u64) -> Keys {
        Keys::new((
            seq,
            ConnectionTrafficSecrets::Aes256Gcm {
                key: AeadKey::from([7u8; 32]),
                iv: Iv::from([9u8; 12]),
            },
        ))
        .unwrap()
    }

    #[test]
    fn sealed_records_open_both_ways_and_in_sequence() {
        let (mut tx, mut rx) = (keys(5), keys(5));
        let data: Vec<u8> = (0..MAX_PLAINTEXT + 100).map(|i| i as u8).collect();
        let mut wire = vec![0; 2 * MAX_WIRE];
        let a = seal(
            &mut tx,
            APPLICATION_DATA,
            Plaintext::One(&data[..MAX_PLAINTEXT]),
            &mut wire,
        )
        .unwrap();
        let (first, rest) = (&data[MAX_PLAINTEXT..][..60], &data[MAX_PLAINTEXT + 60..]);
        let mut fill = |out: &mut [u8]| {
            out[..60].copy_from_slice(first);
            out[60..].copy_from_slice(rest);
        };
        let b = seal(
            &mut tx,
            APPLICATION_DATA,
            Plaintext::Gathered(100, &mut fill),
            &mut wire[a..],
        )
        .unwrap();
        assert_eq!((a, b), (MAX_PLAINTEXT + OVERHEAD, 100 + OVERHEAD));
        assert_eq!(whole_record(&wire[..a + b]).unwrap(), Some(a));
        assert_eq!(whole_record(&wire[..a - 1]).unwrap(), None);

        let mut out = vec![0; MAX_PLAINTEXT + 1];
        assert_eq!(
            open_into(&mut rx, &wire[..a], &mut out).unwrap(),
            (APPLICATION_DATA, MAX_PLAINTEXT)
        );
        assert_eq!(&out[..MAX_PLAINTEXT], &data[..MAX_PLAINTEXT]);
        let second = &mut wire[a..a + b];
        assert_eq!(
            open_in_place(&mut rx, second).unwrap(),
            (APPLICATION_DATA, 100)
        );
        assert_eq!(&second[HEADER..HEADER + 100], &data[MAX_PLAINTEXT..]);
        assert_eq!((tx.seq(), rx.seq()), (7, 7));
    }

    #[test]
    fn a_changed_byte_a_replayed_record_and_bad_headers_are_refused() {
        let (mut tx, mut rx) = (keys(0), keys(0));
        let mut wire = vec![0; MAX_WIRE];
        let n = seal(
            &mut tx,
            APPLICATION_DATA,
            Plaintext::One(b"hello"),
            &mut wire,
        )
        .unwrap();
        let mut out = [0u8; 64];
        let mut changed = wire[..n].to_vec();
        changed[HEADER + 1] ^= 1;
        assert!(open_into(&mut keys(0), &changed, &mut out).is_err());
        assert!(open_into(&mut rx, &wire[..n], &mut out).is_ok());
        // The same record again is opened with the next sequence number.
        assert!(open_into(&mut rx, &wire[..n], &mut out).is_err());

        assert!(whole_record(&[22, 3, 3, 0, 40]).is_err());
        assert!(whole_record(&[23, 3, 3, 0xff, 0xff]).is_err());
        assert!(whole_record(&[23, 3, 3, 0, 3]).is_err());
        assert_eq!(whole_record(&[23, 3]).unwrap(), None);
    }

    #[test]
    fn inner_content_type_is_the_last_byte_before_padding() {
        assert_eq!(inner_type(&[1, 2, ALERT, 0, 0]).unwrap(), (ALERT, 2));
        assert_eq!(inner_type(&[HANDSHAKE]).unwrap(), (HANDSHAKE, 0));
        assert!(inner_type(&[0, 0]).is_err());
        assert!(inner_type(&[]).is_err());
    }
}

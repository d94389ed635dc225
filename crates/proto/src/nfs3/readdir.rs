//! READDIR and READDIRPLUS (RFC 1813 sections 3.3.16 and 3.3.17): arguments,
//! full result codecs for tests and clients, and the incremental encoders
//! the server uses to honour the client's byte limits.
//!
//! # How the limits are counted
//!
//! Sizes are XDR-encoded bytes. An `entry3` costs
//! `4 (value_follows) + 8 (fileid) + 4 + name + pad (filename3) + 8 (cookie)`;
//! an `entryplus3` costs the same plus its `post_op_attr` (4, or 4 + 84) and
//! `post_op_fh3` (4, or 4 + 4 + handle + pad). The end of the list costs
//! `4 (value_follows FALSE) + 4 (eof)`.
//!
//! - READDIR `count` bounds the whole READDIR3resok: `dir_attributes`,
//!   `cookieverf`, every entry, and the end of the list. The status word
//!   before it is not counted (RFC 1813: "the maximum size of the
//!   READDIR3resok structure ... including all XDR overhead").
//! - READDIRPLUS `maxcount` bounds the whole READDIRPLUS3resok the same way.
//! - READDIRPLUS `dircount` bounds the sum over the returned entries of
//!   `8 (fileid) + 4 + name + pad + 8 (cookie)`: the "directory information"
//!   without attributes, handles or list links (RFC 1813 section 3.3.17).
//!   The first entry is admitted whatever `dircount` says (but never past
//!   `maxcount`): `dircount` is a hint about the client's directory cache,
//!   not a buffer size, and a client whose `dircount` is smaller than one
//!   entry would otherwise get NFS3ERR_TOOSMALL forever. Linux knfsd ignores
//!   `dircount` entirely; the Linux client sends `dircount = maxcount / 8`.
//!
//! An encoder never writes an entry that would break a limit, and once one
//! entry is refused every later one is too (entries must stay in cookie
//! order with no gaps). If no entry fits and the directory has more, the
//! server answers NFS3ERR_TOOSMALL instead of finishing the reply. The
//! server should pass `min(client limit, its own maximum)` as the limit.

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result};

use crate::codec::{decode_list, encode_list, opaque_var_len, xdr_struct, MAX_LIST_ITEMS};
use crate::nfs3::types::{
    CookieVerf3, Filename3, NfsFh3, NfsRes, NfsStat3, PostOpAttr, PostOpFh3, NFS3_MAX_NAME_LEN,
};

/// Bytes that end a directory list: `value_follows` FALSE and `eof`.
const LIST_END_LEN: usize = 4 + 4;

xdr_struct! {
    /// READDIR3args (RFC 1813 section 3.3.16): continue after `cookie`
    /// (0 to start), returning a READDIR3resok of at most `count` bytes.
    pub struct ReaddirArgs {
        pub dir: NfsFh3,
        pub cookie: u64,
        pub cookieverf: CookieVerf3,
        pub count: u32,
    }
}

xdr_struct! {
    /// The fields of one `entry3` (RFC 1813 section 3.3.16). Its encoding
    /// lacks the `nextentry` link, which the enclosing list writes.
    pub struct Entry3 {
        pub fileid: u64,
        pub name: Filename3,
        pub cookie: u64,
    }
}

/// READDIR3resok (RFC 1813 section 3.3.16) with `dirlist3` flattened into
/// `entries` and `eof`. The server encodes it with [`ReaddirEncoder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaddirResOk {
    pub dir_attributes: PostOpAttr,
    pub cookieverf: CookieVerf3,
    pub entries: Vec<Entry3>,
    pub eof: bool,
}

impl Encode for ReaddirResOk {
    fn encode(&self, enc: &mut Encoder) {
        self.dir_attributes.encode(enc);
        self.cookieverf.encode(enc);
        encode_list(enc, &self.entries, |e, entry| entry.encode(e));
        enc.bool(self.eof);
    }
}

impl<'a> Decode<'a> for ReaddirResOk {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self> {
        Ok(Self {
            dir_attributes: PostOpAttr::decode(dec)?,
            cookieverf: CookieVerf3::decode(dec)?,
            entries: decode_list(dec, MAX_LIST_ITEMS, Entry3::decode)?,
            eof: dec.bool()?,
        })
    }
}

xdr_struct! {
    /// READDIR3resfail (RFC 1813 section 3.3.16).
    pub struct ReaddirResFail {
        pub dir_attributes: PostOpAttr,
    }
}

/// READDIR3res (RFC 1813 section 3.3.16).
pub type ReaddirRes = NfsRes<ReaddirResOk, ReaddirResFail>;

xdr_struct! {
    /// READDIRPLUS3args (RFC 1813 section 3.3.17): `dircount` bounds the
    /// directory information, `maxcount` the whole READDIRPLUS3resok (see
    /// the module documentation for how each is counted).
    pub struct ReaddirplusArgs {
        pub dir: NfsFh3,
        pub cookie: u64,
        pub cookieverf: CookieVerf3,
        pub dircount: u32,
        pub maxcount: u32,
    }
}

xdr_struct! {
    /// The fields of one `entryplus3` (RFC 1813 section 3.3.17). Its
    /// encoding lacks the `nextentry` link, which the enclosing list writes.
    pub struct EntryPlus3 {
        pub fileid: u64,
        pub name: Filename3,
        pub cookie: u64,
        pub name_attributes: PostOpAttr,
        pub name_handle: PostOpFh3,
    }
}

/// READDIRPLUS3resok (RFC 1813 section 3.3.17) with `dirlistplus3`
/// flattened into `entries` and `eof`. The server encodes it with
/// [`ReaddirplusEncoder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaddirplusResOk {
    pub dir_attributes: PostOpAttr,
    pub cookieverf: CookieVerf3,
    pub entries: Vec<EntryPlus3>,
    pub eof: bool,
}

impl Encode for ReaddirplusResOk {
    fn encode(&self, enc: &mut Encoder) {
        self.dir_attributes.encode(enc);
        self.cookieverf.encode(enc);
        encode_list(enc, &self.entries, |e, entry| entry.encode(e));
        enc.bool(self.eof);
    }
}

impl<'a> Decode<'a> for ReaddirplusResOk {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self> {
        Ok(Self {
            dir_attributes: PostOpAttr::decode(dec)?,
            cookieverf: CookieVerf3::decode(dec)?,
            entries: decode_list(dec, MAX_LIST_ITEMS, EntryPlus3::decode)?,
            eof: dec.bool()?,
        })
    }
}

xdr_struct! {
    /// READDIRPLUS3resfail (RFC 1813 section 3.3.17).
    pub struct ReaddirplusResFail {
        pub dir_attributes: PostOpAttr,
    }
}

/// READDIRPLUS3res (RFC 1813 section 3.3.17).
pub type ReaddirplusRes = NfsRes<ReaddirplusResOk, ReaddirplusResFail>;

/// Bytes of directory information in one entry, as READDIRPLUS `dircount`
/// counts them: fileid, name, cookie.
pub const fn entry_dir_info_len(name_len: usize) -> usize {
    8 + opaque_var_len(name_len) + 8
}

/// Bytes one `entry3` adds to a READDIR3resok, its list link included.
pub const fn entry3_len(name_len: usize) -> usize {
    4 + entry_dir_info_len(name_len)
}

/// Bytes one `entryplus3` adds to a READDIRPLUS3resok, its list link included.
pub fn entryplus3_len(
    name_len: usize,
    name_attributes: &PostOpAttr,
    name_handle: &PostOpFh3,
) -> usize {
    entry3_len(name_len) + name_attributes.encoded_len() + name_handle.encoded_len()
}

/// The bookkeeping both directory encoders share: where READDIR3resok
/// started, how many entries went in, and whether one was refused.
#[derive(Debug)]
struct DirListState {
    enc: Encoder,
    resok_start: usize,
    entries: usize,
    full: bool,
}

impl DirListState {
    fn start(mut enc: Encoder, dir_attributes: &PostOpAttr, cookieverf: CookieVerf3) -> Self {
        NfsStat3::Ok.encode(&mut enc);
        let resok_start = enc.len();
        dir_attributes.encode(&mut enc);
        cookieverf.encode(&mut enc);
        Self {
            enc,
            resok_start,
            entries: 0,
            full: false,
        }
    }

    /// Whether an entry of `entry_len` bytes still leaves room for the end
    /// of the list within `limit` bytes of resok.
    fn fits(&self, entry_len: usize, limit: u32) -> bool {
        let resok_len = self.enc.len() - self.resok_start;
        resok_len + entry_len + LIST_END_LEN <= limit as usize
    }

    fn finish(mut self, eof: bool) -> Encoder {
        self.enc.bool(false);
        self.enc.bool(eof);
        self.enc
    }
}

/// Encodes a successful READDIR3res entry by entry without exceeding the
/// client's `count` (see the module documentation for how it is counted).
///
/// `push` entries in cookie order until it returns false or the directory
/// ends, then `finish(eof)`, with `eof` true only if every remaining entry
/// was pushed. If the first `push` fails, answer NFS3ERR_TOOSMALL instead.
#[derive(Debug)]
pub struct ReaddirEncoder {
    state: DirListState,
    count: u32,
}

impl ReaddirEncoder {
    /// Starts the reply in `enc` (which may already hold the RPC reply
    /// header): status NFS3_OK, `dir_attributes`, `cookieverf`.
    pub fn new(
        enc: Encoder,
        dir_attributes: &PostOpAttr,
        cookieverf: CookieVerf3,
        count: u32,
    ) -> Self {
        Self {
            state: DirListState::start(enc, dir_attributes, cookieverf),
            count,
        }
    }

    /// Appends one entry if it fits, and returns whether it did. After the
    /// first refusal every later call is refused too.
    pub fn push(&mut self, fileid: u64, name: &[u8], cookie: u64) -> bool {
        debug_assert!(
            name.len() <= NFS3_MAX_NAME_LEN as usize,
            "directory entry name too long"
        );
        if self.state.full || !self.state.fits(entry3_len(name.len()), self.count) {
            self.state.full = true;
            return false;
        }
        let enc = &mut self.state.enc;
        enc.bool(true);
        enc.u64(fileid);
        enc.string(name);
        enc.u64(cookie);
        self.state.entries += 1;
        true
    }

    /// Entries pushed so far.
    pub fn len(&self) -> usize {
        self.state.entries
    }

    /// True when no entry has been pushed.
    pub fn is_empty(&self) -> bool {
        self.state.entries == 0
    }

    /// Ends the list and the reply; returns the encoder holding it.
    pub fn finish(self, eof: bool) -> Encoder {
        self.state.finish(eof)
    }
}

/// Encodes a successful READDIRPLUS3res entry by entry without exceeding
/// the client's `maxcount` or `dircount` (see the module documentation for
/// how they are counted). Used like [`ReaddirEncoder`].
#[derive(Debug)]
pub struct ReaddirplusEncoder {
    state: DirListState,
    dircount: u32,
    maxcount: u32,
    dir_info_len: usize,
}

impl ReaddirplusEncoder {
    /// Starts the reply in `enc` (which may already hold the RPC reply
    /// header): status NFS3_OK, `dir_attributes`, `cookieverf`.
    pub fn new(
        enc: Encoder,
        dir_attributes: &PostOpAttr,
        cookieverf: CookieVerf3,
        dircount: u32,
        maxcount: u32,
    ) -> Self {
        Self {
            state: DirListState::start(enc, dir_attributes, cookieverf),
            dircount,
            maxcount,
            dir_info_len: 0,
        }
    }

    /// Appends one entry if it fits both limits, and returns whether it
    /// did. After the first refusal every later call is refused too.
    pub fn push(
        &mut self,
        fileid: u64,
        name: &[u8],
        cookie: u64,
        name_attributes: &PostOpAttr,
        name_handle: &PostOpFh3,
    ) -> bool {
        debug_assert!(
            name.len() <= NFS3_MAX_NAME_LEN as usize,
            "directory entry name too long"
        );
        let entry_len = entryplus3_len(name.len(), name_attributes, name_handle);
        let dir_info_len = self.dir_info_len + entry_dir_info_len(name.len());
        let dircount_ok = self.state.entries == 0 || dir_info_len <= self.dircount as usize;
        if self.state.full || !dircount_ok || !self.state.fits(entry_len, self.maxcount) {
            self.state.full = true;
            return false;
        }
        let enc = &mut self.state.enc;
        enc.bool(true);
        enc.u64(fileid);
        enc.string(name);
        enc.u64(cookie);
        name_attributes.encode(enc);
        name_handle.encode(enc);
        self.state.entries += 1;
        self.dir_info_len = dir_info_len;
        true
    }

    /// Entries pushed so far.
    pub fn len(&self) -> usize {
        self.state.entries
    }

    /// True when no entry has been pushed.
    pub fn is_empty(&self) -> bool {
        self.state.entries == 0
    }

    /// Ends the list and the reply; returns the encoder holding it.
    pub fn finish(self, eof: bool) -> Encoder {
        self.state.finish(eof)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;
    use dionfs_xdr::XdrError;
    use proptest::prelude::*;

    fn entry(fileid: u64, name: &str, cookie: u64) -> Entry3 {
        Entry3 {
            fileid,
            name: Filename3::from(name),
            cookie,
        }
    }

    #[test]
    fn readdir_encoder_bytes_match_the_rfc_layout() {
        let verf = CookieVerf3([1, 1, 1, 1, 2, 2, 2, 2]);
        let mut r = ReaddirEncoder::new(Encoder::new(), &PostOpAttr(None), verf, 4096);
        assert!(r.push(7, b"ab", 1));
        let bytes = r.finish(true).into_vec();
        #[rustfmt::skip]
        let expected = [
            0, 0, 0, 0,                 // NFS3_OK
            0, 0, 0, 0,                 // dir_attributes: none
            1, 1, 1, 1, 2, 2, 2, 2,     // cookieverf
            0, 0, 0, 1,                 // value_follows
            0, 0, 0, 0, 0, 0, 0, 7,     // fileid
            0, 0, 0, 2, b'a', b'b', 0, 0, // name
            0, 0, 0, 0, 0, 0, 0, 1,     // cookie
            0, 0, 0, 0,                 // no more entries
            0, 0, 0, 1,                 // eof
        ];
        assert_eq!(bytes, expected);
        let res = ReaddirRes::from_xdr(&bytes).unwrap();
        assert_eq!(
            res,
            NfsRes::Ok(ReaddirResOk {
                dir_attributes: PostOpAttr(None),
                cookieverf: verf,
                entries: vec![entry(7, "ab", 1)],
                eof: true,
            })
        );
        assert_eq!(res.to_xdr(), bytes);
    }

    #[test]
    fn readdir_count_is_exact_at_the_boundary() {
        // resok = 4 (no attrs) + 8 (verf) + entry + 8 (list end).
        let needed = 4 + 8 + entry3_len(3) + 8;
        assert_eq!(entry3_len(3), 4 + 8 + 8 + 8);
        let mut r = ReaddirEncoder::new(
            Encoder::new(),
            &PostOpAttr(None),
            CookieVerf3::default(),
            needed as u32 - 1,
        );
        assert!(!r.push(1, b"abc", 1));
        assert!(r.is_empty());
        let mut r = ReaddirEncoder::new(
            Encoder::new(),
            &PostOpAttr(None),
            CookieVerf3::default(),
            needed as u32,
        );
        assert!(r.push(1, b"abc", 1));
        assert!(!r.push(2, b"", 2));
        let bytes = r.finish(false).into_vec();
        assert_eq!(bytes.len(), 4 + needed);
    }

    #[test]
    fn a_refused_entry_stops_the_list() {
        let count = (4 + 8 + entry3_len(8) + 8) as u32;
        let mut r = ReaddirEncoder::new(
            Encoder::new(),
            &PostOpAttr(None),
            CookieVerf3::default(),
            count,
        );
        assert!(!r.push(1, &[b'x'; 9], 1));
        // A smaller entry would fit, but must not skip the refused one.
        assert!(!r.push(2, b"y", 2));
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn encoder_continues_an_existing_rpc_header() {
        let mut enc = Encoder::new();
        enc.u32(0xdead_beef);
        let mut r = ReaddirEncoder::new(
            enc,
            &PostOpAttr(Some(sample_fattr3())),
            CookieVerf3::default(),
            200,
        );
        assert!(r.push(1, b"a", 1));
        let bytes = r.finish(true).into_vec();
        assert_eq!(&bytes[..4], &0xdead_beefu32.to_be_bytes());
        assert!(ReaddirRes::from_xdr(&bytes[4..]).is_ok());
    }

    #[test]
    fn readdirplus_first_entry_ignores_a_tiny_dircount_but_not_maxcount() {
        let attrs = PostOpAttr(Some(sample_fattr3()));
        let fh = PostOpFh3(Some(NfsFh3::new(vec![3; 32]).unwrap()));
        let mut r = ReaddirplusEncoder::new(
            Encoder::new(),
            &PostOpAttr(None),
            CookieVerf3::default(),
            0,
            4096,
        );
        assert!(r.push(1, b"a", 1, &attrs, &fh));
        assert!(!r.push(2, b"b", 2, &attrs, &fh));
        assert_eq!(r.len(), 1);

        let maxcount = 4 + 8 + entryplus3_len(1, &attrs, &fh) + 8;
        let mut r = ReaddirplusEncoder::new(
            Encoder::new(),
            &PostOpAttr(None),
            CookieVerf3::default(),
            0,
            maxcount as u32 - 1,
        );
        assert!(!r.push(1, b"a", 1, &attrs, &fh));
    }

    #[test]
    fn readdirplus_dircount_counts_fileid_name_and_cookie() {
        let attrs = PostOpAttr(Some(sample_fattr3()));
        let fh = PostOpFh3(Some(NfsFh3::new(vec![3; 32]).unwrap()));
        assert_eq!(entry_dir_info_len(1), 8 + 8 + 8);
        // Room for exactly two entries' directory information.
        let mut r = ReaddirplusEncoder::new(
            Encoder::new(),
            &PostOpAttr(None),
            CookieVerf3::default(),
            48,
            1 << 20,
        );
        assert!(r.push(1, b"a", 1, &attrs, &fh));
        assert!(r.push(2, b"b", 2, &attrs, &fh));
        assert!(!r.push(3, b"c", 3, &attrs, &fh));
        let bytes = r.finish(false).into_vec();
        let NfsRes::Ok(ok) = ReaddirplusRes::from_xdr(&bytes).unwrap() else {
            panic!("not OK")
        };
        assert_eq!(ok.entries.len(), 2);
        assert_eq!(ok.entries[1].name_handle, fh);
        assert!(!ok.eof);
    }

    #[test]
    fn a_list_longer_than_its_cap_is_rejected() {
        let ok = ReaddirResOk {
            dir_attributes: PostOpAttr(None),
            cookieverf: CookieVerf3::default(),
            entries: (0..4).map(|i| entry(i, "n", i)).collect(),
            eof: true,
        };
        let bytes = ok.to_xdr();
        let mut dec = Decoder::new(&bytes[12..]);
        assert_eq!(
            decode_list(&mut dec, 3, Entry3::decode),
            Err(XdrError::TooLong { len: 4, max: 3 })
        );
        let mut dec = Decoder::new(&bytes[12..]);
        assert_eq!(decode_list(&mut dec, 4, Entry3::decode).unwrap().len(), 4);
    }

    fn names() -> impl Strategy<Value = Vec<Vec<u8>>> {
        proptest::collection::vec(bytes(40), 0..40)
    }

    proptest! {
        #[test]
        fn args_round_trip(dir in nfs_fh3(), cookie in any::<u64>(), v in verf(), a in any::<u32>(), b in any::<u32>()) {
            assert_codec(&ReaddirArgs { dir: dir.clone(), cookie, cookieverf: CookieVerf3(v), count: a });
            assert_codec(&ReaddirplusArgs { dir, cookie, cookieverf: CookieVerf3(v), dircount: a, maxcount: b });
        }

        #[test]
        fn results_round_trip(
            readdir in nfs_res(
                (post_op_attr(), verf(), proptest::collection::vec((any::<u64>(), filename3(), any::<u64>()), 0..5), any::<bool>())
                    .prop_map(|(dir_attributes, v, e, eof)| ReaddirResOk {
                        dir_attributes,
                        cookieverf: CookieVerf3(v),
                        entries: e.into_iter().map(|(fileid, name, cookie)| Entry3 { fileid, name, cookie }).collect(),
                        eof,
                    }),
                post_op_attr().prop_map(|dir_attributes| ReaddirResFail { dir_attributes }),
            ),
            plus in nfs_res(
                (
                    post_op_attr(),
                    verf(),
                    proptest::collection::vec((any::<u64>(), filename3(), any::<u64>(), post_op_attr(), post_op_fh3()), 0..4),
                    any::<bool>(),
                )
                    .prop_map(|(dir_attributes, v, e, eof)| ReaddirplusResOk {
                        dir_attributes,
                        cookieverf: CookieVerf3(v),
                        entries: e
                            .into_iter()
                            .map(|(fileid, name, cookie, name_attributes, name_handle)| EntryPlus3 {
                                fileid,
                                name,
                                cookie,
                                name_attributes,
                                name_handle,
                            })
                            .collect(),
                        eof,
                    }),
                post_op_attr().prop_map(|dir_attributes| ReaddirplusResFail { dir_attributes }),
            ),
        ) {
            assert_codec(&readdir);
            assert_codec(&plus);
        }

        /// The encoder never exceeds `count`, takes every entry that fits,
        /// and produces what the full decoder reads back.
        #[test]
        fn readdir_encoder_honours_count(names in names(), count in 0u32..2000, attrs in post_op_attr()) {
            let mut r = ReaddirEncoder::new(Encoder::new(), &attrs, CookieVerf3::default(), count);
            let mut refused = None;
            for (i, name) in names.iter().enumerate() {
                if !r.push(i as u64, name, i as u64 + 1) {
                    refused = Some(i);
                    break;
                }
            }
            let pushed = r.len();
            let bytes = r.finish(refused.is_none()).into_vec();
            let resok_len = bytes.len() - 4;
            if pushed > 0 {
                prop_assert!(resok_len <= count as usize);
            }
            if let Some(i) = refused {
                prop_assert!(resok_len + entry3_len(names[i].len()) > count as usize);
            }
            let NfsRes::Ok(ok) = ReaddirRes::from_xdr(&bytes).unwrap() else { panic!("not OK") };
            prop_assert_eq!(ok.entries.len(), pushed);
            for (i, e) in ok.entries.iter().enumerate() {
                prop_assert_eq!(&e.name.0, &names[i]);
                prop_assert_eq!(e.cookie, i as u64 + 1);
            }
        }

        /// The encoder never exceeds `maxcount`, nor `dircount` after the
        /// first entry, and takes every entry that fits.
        #[test]
        fn readdirplus_encoder_honours_both_limits(
            entries in proptest::collection::vec((bytes(40), post_op_attr(), post_op_fh3()), 0..20),
            dircount in 0u32..600,
            maxcount in 0u32..4000,
        ) {
            let mut r = ReaddirplusEncoder::new(Encoder::new(), &PostOpAttr(None), CookieVerf3::default(), dircount, maxcount);
            let mut refused = None;
            for (i, (name, attrs, fh)) in entries.iter().enumerate() {
                if !r.push(i as u64, name, i as u64 + 1, attrs, fh) {
                    refused = Some(i);
                    break;
                }
            }
            let pushed = r.len();
            let bytes = r.finish(refused.is_none()).into_vec();
            let resok_len = bytes.len() - 4;
            let dir_info: usize = entries[..pushed].iter().map(|(n, _, _)| entry_dir_info_len(n.len())).sum();
            if pushed > 0 {
                prop_assert!(resok_len <= maxcount as usize);
            }
            if pushed > 1 {
                prop_assert!(dir_info <= dircount as usize);
            }
            if let Some(i) = refused {
                let (name, attrs, fh) = &entries[i];
                let over_max = resok_len + entryplus3_len(name.len(), attrs, fh) > maxcount as usize;
                let over_dir = pushed > 0 && dir_info + entry_dir_info_len(name.len()) > dircount as usize;
                prop_assert!(over_max || over_dir);
            }
            let NfsRes::Ok(ok) = ReaddirplusRes::from_xdr(&bytes).unwrap() else { panic!("not OK") };
            prop_assert_eq!(ok.entries.len(), pushed);
            for (i, e) in ok.entries.iter().enumerate() {
                prop_assert_eq!(&e.name.0, &entries[i].0);
                prop_assert_eq!(&e.name_attributes, &entries[i].1);
                prop_assert_eq!(&e.name_handle, &entries[i].2);
            }
        }

        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = ReaddirArgs::from_xdr(&bytes);
            let _ = ReaddirplusArgs::from_xdr(&bytes);
            let _ = ReaddirRes::from_xdr(&bytes);
            let _ = ReaddirplusRes::from_xdr(&bytes);
        }
    }
}

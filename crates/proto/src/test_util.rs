//! Test helpers: the round-trip-and-truncation check every codec test uses,
//! and proptest strategies for the NFSv3 building blocks.

use dionfs_xdr::{Decode, Encode};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

use crate::nfs3::*;

/// Checks that `value` encodes, decodes back to itself with nothing left
/// over, and that every strict prefix of its encoding is an error (never a
/// panic, never a shorter value).
pub fn assert_codec<T>(value: &T)
where
    T: Encode + for<'a> Decode<'a> + PartialEq + std::fmt::Debug,
{
    let bytes = value.to_xdr();
    assert_eq!(bytes.len() % 4, 0, "XDR encodings are whole words");
    assert_eq!(&T::from_xdr(&bytes).expect("decodes"), value);
    for cut in 0..bytes.len() {
        assert!(
            T::from_xdr(&bytes[..cut]).is_err(),
            "prefix of {cut} of {} bytes decoded",
            bytes.len()
        );
    }
    assert_mutations_never_panic::<T>(&bytes);
}

/// Decodes copies of a valid encoding with one word replaced by values
/// that stress lengths, counts and discriminants. Any result but a panic
/// is fine: this reaches deep into structures random bytes rarely get past.
pub fn assert_mutations_never_panic<T>(bytes: &[u8])
where
    T: for<'a> Decode<'a>,
{
    const NASTY: [u32; 9] = [0, 1, 2, 3, 7, 65, 1025, 0x7fff_ffff, u32::MAX];
    let mut copy = bytes.to_vec();
    for at in (0..bytes.len().saturating_sub(3)).step_by(4) {
        for v in NASTY {
            copy[at..at + 4].copy_from_slice(&v.to_be_bytes());
            let _ = T::from_xdr(&copy);
        }
        copy[at..at + 4].copy_from_slice(&bytes[at..at + 4]);
    }
}

pub fn sample_fattr3() -> Fattr3 {
    Fattr3 {
        ftype: Ftype3::Reg,
        mode: 0o644,
        nlink: 1,
        uid: 1000,
        gid: 100,
        size: 0x0102_0304_0506_0708,
        used: 4096,
        rdev: SpecData3::default(),
        fsid: 9,
        fileid: 0x1122_3344_5566_7788,
        atime: NfsTime3 {
            seconds: 1,
            nseconds: 2,
        },
        mtime: NfsTime3 {
            seconds: 3,
            nseconds: 4,
        },
        ctime: NfsTime3 {
            seconds: 5,
            nseconds: 6,
        },
    }
}

pub fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..=max)
}

pub fn nfs_fh3() -> impl Strategy<Value = NfsFh3> {
    bytes(NFS3_FHSIZE).prop_map(|b| NfsFh3::new(b).unwrap())
}

pub fn filename3() -> impl Strategy<Value = Filename3> {
    bytes(300).prop_map(Filename3)
}

pub fn nfs_path3() -> impl Strategy<Value = NfsPath3> {
    bytes(300).prop_map(NfsPath3)
}

pub fn verf() -> impl Strategy<Value = [u8; 8]> {
    any::<[u8; 8]>()
}

pub fn nfs_time3() -> impl Strategy<Value = NfsTime3> {
    (any::<u32>(), any::<u32>()).prop_map(|(seconds, nseconds)| NfsTime3 { seconds, nseconds })
}

pub fn ftype3() -> impl Strategy<Value = Ftype3> {
    proptest::sample::select(Ftype3::ALL)
}

pub fn fail_status() -> impl Strategy<Value = NfsStat3> {
    proptest::sample::select(&NfsStat3::ALL[1..])
}

pub fn stable_how() -> impl Strategy<Value = StableHow> {
    proptest::sample::select(StableHow::ALL)
}

pub fn fattr3() -> impl Strategy<Value = Fattr3> {
    (
        (
            ftype3(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
        ),
        (
            any::<u64>(),
            any::<u64>(),
            any::<(u32, u32)>(),
            any::<u64>(),
            any::<u64>(),
        ),
        (nfs_time3(), nfs_time3(), nfs_time3()),
    )
        .prop_map(
            |(
                (ftype, mode, nlink, uid, gid),
                (size, used, (specdata1, specdata2), fsid, fileid),
                (atime, mtime, ctime),
            )| Fattr3 {
                ftype,
                mode,
                nlink,
                uid,
                gid,
                size,
                used,
                rdev: SpecData3 {
                    specdata1,
                    specdata2,
                },
                fsid,
                fileid,
                atime,
                mtime,
                ctime,
            },
        )
}

pub fn post_op_attr() -> impl Strategy<Value = PostOpAttr> {
    option::of(fattr3()).prop_map(PostOpAttr)
}

pub fn pre_op_attr() -> impl Strategy<Value = PreOpAttr> {
    option::of((any::<u64>(), nfs_time3(), nfs_time3()))
        .prop_map(|a| PreOpAttr(a.map(|(size, mtime, ctime)| WccAttr { size, mtime, ctime })))
}

pub fn wcc_data() -> impl Strategy<Value = WccData> {
    (pre_op_attr(), post_op_attr()).prop_map(|(before, after)| WccData { before, after })
}

pub fn post_op_fh3() -> impl Strategy<Value = PostOpFh3> {
    option::of(nfs_fh3()).prop_map(PostOpFh3)
}

pub fn set_time() -> impl Strategy<Value = SetTime> {
    prop_oneof![
        Just(SetTime::DontChange),
        Just(SetTime::ServerTime),
        nfs_time3().prop_map(SetTime::ClientTime),
    ]
}

pub fn sattr3() -> impl Strategy<Value = Sattr3> {
    (
        option::of(any::<u32>()),
        option::of(any::<u32>()),
        option::of(any::<u32>()),
        option::of(any::<u64>()),
        set_time(),
        set_time(),
    )
        .prop_map(|(mode, uid, gid, size, atime, mtime)| Sattr3 {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        })
}

pub fn dir_op_args3() -> impl Strategy<Value = DirOpArgs3> {
    (nfs_fh3(), filename3()).prop_map(|(dir, name)| DirOpArgs3 { dir, name })
}

pub fn create_how3() -> impl Strategy<Value = CreateHow3> {
    prop_oneof![
        sattr3().prop_map(CreateHow3::Unchecked),
        sattr3().prop_map(CreateHow3::Guarded),
        verf().prop_map(|v| CreateHow3::Exclusive(CreateVerf3(v))),
    ]
}

pub fn mknod_data3() -> impl Strategy<Value = MknodData3> {
    fn device() -> impl Strategy<Value = DeviceData3> {
        (sattr3(), any::<(u32, u32)>()).prop_map(|(dev_attributes, (a, b))| DeviceData3 {
            dev_attributes,
            spec: SpecData3 {
                specdata1: a,
                specdata2: b,
            },
        })
    }
    prop_oneof![
        device().prop_map(MknodData3::Chr),
        device().prop_map(MknodData3::Blk),
        sattr3().prop_map(MknodData3::Sock),
        sattr3().prop_map(MknodData3::Fifo),
        proptest::sample::select(&[Ftype3::Reg, Ftype3::Dir, Ftype3::Lnk][..])
            .prop_map(MknodData3::Other),
    ]
}

/// A result: OK with `ok`, or a failure status with `fail`.
pub fn nfs_res<T: std::fmt::Debug, F: std::fmt::Debug>(
    ok: impl Strategy<Value = T>,
    fail: impl Strategy<Value = F>,
) -> impl Strategy<Value = NfsRes<T, F>> {
    prop_oneof![
        ok.prop_map(NfsRes::Ok),
        (fail_status(), fail).prop_map(|(status, resfail)| NfsRes::Fail { status, resfail }),
    ]
}

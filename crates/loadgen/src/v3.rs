//! NFSv3: MOUNT for the export's handle, LOOKUP / CREATE of the file,
//! FSINFO for the transfer sizes; READ, WRITE (UNSTABLE) and COMMIT.

use dionfs_proto::mount3::{MountProc3, MountRes3, MOUNT_PROGRAM, MOUNT_V3};
use dionfs_proto::nfs3::{
    CommitArgs, CommitRes, CreateArgs, CreateHow3, CreateRes, DirOpArgs3, Filename3, FsinfoArgs,
    FsinfoRes, LookupArgs, LookupRes, NfsFh3, NfsProc3, NfsRes, NfsStat3, PostOpAttr, PostOpFh3,
    Sattr3, StableHow, WriteRes, NFS_PROGRAM, NFS_V3,
};
use dionfs_rpc::Credential;
use dionfs_xdr::{pad_len, Decode, Decoder, Encode};

use crate::version::{Proto, SETUP_TIMEOUT};
use crate::wire::{call_head, put_u32, put_u64, seal, Wire};

/// The file a connection works on, and its call templates.
pub struct V3 {
    cred: Credential,
    fh: NfsFh3,
    read: Vec<u8>,
    read_off: usize,
    write: Vec<u8>,
    write_off: usize,
    xid: u32,
    pub rtmax: u64,
    pub wtmax: u64,
}

/// One set-up call of `prog`/`vers`, its results' bytes.
fn call(
    w: &mut Wire,
    cred: &Credential,
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &impl Encode,
) -> Result<Vec<u8>, String> {
    let mut enc = call_head(prog, vers, proc_, cred);
    args.encode(&mut enc);
    seal(&mut enc, 0);
    let mut rec = enc.into_vec();
    put_u32(&mut rec, 4, xid);
    w.call(&rec, xid, SETUP_TIMEOUT)
        .map_err(|e| format!("call {prog}/{vers}/{proc_}: {e}"))
}

fn decode<'a, T: Decode<'a>>(bytes: &'a [u8], what: &str) -> Result<T, String> {
    T::from_xdr(bytes).map_err(|e| format!("{what} reply: {e}"))
}

/// The export's root handle from the MOUNT server at `addr`.
pub fn mount(addr: &str, path: &str, cred: &Credential) -> Result<NfsFh3, String> {
    let mut w =
        Wire::connect(addr, 64 * 1024).map_err(|e| format!("connect to MOUNT at {addr}: {e}"))?;
    let dir = dionfs_proto::mount3::DirPath::from(path);
    let res = call(
        &mut w,
        cred,
        0x3ff,
        MOUNT_PROGRAM,
        MOUNT_V3,
        MountProc3::Mnt as u32,
        &dir,
    )?;
    match decode::<MountRes3>(&res, "MNT")? {
        MountRes3::Ok(ok) => Ok(ok.fhandle),
        MountRes3::Fail(status) => Err(format!("MNT {path}: {status:?}")),
    }
}

impl V3 {
    /// Set-up of a connection: `dir` is the export's root; `file` a path
    /// under it, created (or truncated) first when `create`. Templates
    /// for `bs`-byte calls.
    pub fn open(
        w: &mut Wire,
        cred: Credential,
        root: NfsFh3,
        file: &str,
        create: bool,
        bs: u32,
    ) -> Result<V3, String> {
        let mut me = V3 {
            cred,
            fh: root.clone(),
            read: Vec::new(),
            read_off: 0,
            write: Vec::new(),
            write_off: 0,
            xid: 0x3ff,
            rtmax: 0,
            wtmax: 0,
        };
        let info = me.setup_call(
            w,
            NfsProc3::Fsinfo,
            &FsinfoArgs {
                fsroot: root.clone(),
            },
        )?;
        if let FsinfoRes::Ok(ok) = decode::<FsinfoRes>(&info, "FSINFO")? {
            me.rtmax = ok.rtmax.into();
            me.wtmax = ok.wtmax.into();
        }
        let names: Vec<&str> = file.split('/').filter(|c| !c.is_empty()).collect();
        let (last, dirs) = names.split_last().ok_or("empty file name")?;
        let mut dir = root;
        for name in dirs {
            dir = me.lookup(w, dir, name)?;
        }
        me.fh = if create {
            let args = CreateArgs {
                target: DirOpArgs3 {
                    dir,
                    name: Filename3::from(*last),
                },
                how: CreateHow3::Unchecked(Sattr3 {
                    mode: Some(0o644),
                    size: Some(0),
                    ..Sattr3::default()
                }),
            };
            let res = me.setup_call(w, NfsProc3::Create, &args)?;
            match decode::<CreateRes>(&res, "CREATE")? {
                NfsRes::Ok(ok) => match ok.obj {
                    PostOpFh3(Some(fh)) => fh,
                    PostOpFh3(None) => return Err("CREATE returned no handle".into()),
                },
                NfsRes::Fail { status, .. } => return Err(format!("CREATE {file}: {status:?}")),
            }
        } else {
            me.lookup(w, dir, last)?
        };
        me.templates(bs);
        Ok(me)
    }

    fn setup_call(
        &mut self,
        w: &mut Wire,
        proc_: NfsProc3,
        args: &impl Encode,
    ) -> Result<Vec<u8>, String> {
        self.xid = self.xid.wrapping_add(1 << 10);
        call(
            w,
            &self.cred,
            self.xid,
            NFS_PROGRAM,
            NFS_V3,
            proc_ as u32,
            args,
        )
    }

    fn lookup(&mut self, w: &mut Wire, dir: NfsFh3, name: &str) -> Result<NfsFh3, String> {
        let args = LookupArgs {
            what: DirOpArgs3 {
                dir,
                name: Filename3::from(name),
            },
        };
        match decode::<LookupRes>(&self.setup_call(w, NfsProc3::Lookup, &args)?, "LOOKUP")? {
            NfsRes::Ok(ok) => Ok(ok.object),
            NfsRes::Fail { status, .. } => Err(format!("LOOKUP {name}: {status:?}")),
        }
    }

    /// The READ and WRITE calls, with the xid and offset to be set.
    fn templates(&mut self, bs: u32) {
        let mut enc = call_head(NFS_PROGRAM, NFS_V3, NfsProc3::Read as u32, &self.cred);
        self.fh.encode(&mut enc);
        self.read_off = enc.len();
        enc.u64(0);
        enc.u32(bs);
        seal(&mut enc, 0);
        self.read = enc.into_vec();

        let mut enc = call_head(NFS_PROGRAM, NFS_V3, NfsProc3::Write as u32, &self.cred);
        self.fh.encode(&mut enc);
        self.write_off = enc.len();
        enc.u64(0);
        enc.u32(bs);
        StableHow::Unstable.encode(&mut enc);
        enc.u32(bs);
        seal(&mut enc, bs as usize + pad_len(bs as usize));
        self.write = enc.into_vec();
    }
}

impl Proto for V3 {
    fn queue_read(&mut self, w: &mut Wire, _slot: usize, xid: u32, off: u64) {
        put_u32(&mut self.read, 4, xid);
        put_u64(&mut self.read, self.read_off, off);
        w.queue(&self.read);
    }

    fn send_write(
        &mut self,
        w: &mut Wire,
        _slot: usize,
        xid: u32,
        off: u64,
        data: &[u8],
    ) -> std::io::Result<()> {
        put_u32(&mut self.write, 4, xid);
        put_u64(&mut self.write, self.write_off, off);
        w.send_with_payload(&self.write, data, pad_len(data.len()))
    }

    fn read_done<'a>(&mut self, _slot: usize, res: &'a [u8]) -> Result<&'a [u8], String> {
        let mut dec = Decoder::new(res);
        let bad = |e| format!("READ reply: {e}");
        let status = NfsStat3::decode(&mut dec).map_err(bad)?;
        PostOpAttr::decode(&mut dec).map_err(bad)?;
        if status != NfsStat3::Ok {
            return Err(format!("READ: {status:?}"));
        }
        let _count = dec.u32().map_err(bad)?;
        let _eof = dec.bool().map_err(bad)?;
        dec.opaque_var(u32::MAX).map_err(bad)
    }

    fn write_done(&mut self, _slot: usize, res: &[u8]) -> Result<u64, String> {
        match WriteRes::from_xdr(res).map_err(|e| format!("WRITE reply: {e}"))? {
            NfsRes::Ok(ok) => Ok(ok.count.into()),
            NfsRes::Fail { status, .. } => Err(format!("WRITE: {status:?}")),
        }
    }

    fn commit(&mut self, w: &mut Wire) -> Result<(), String> {
        let args = CommitArgs {
            file: self.fh.clone(),
            offset: 0,
            count: 0,
        };
        match decode::<CommitRes>(&self.setup_call(w, NfsProc3::Commit, &args)?, "COMMIT")? {
            NfsRes::Ok(_) => Ok(()),
            NfsRes::Fail { status, .. } => Err(format!("COMMIT: {status:?}")),
        }
    }

    fn close(&mut self, _w: &mut Wire) {}

    fn maxes(&self) -> (u64, u64) {
        (self.rtmax, self.wtmax)
    }
}

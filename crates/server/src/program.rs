//! What a program's procedure table says of each procedure, as knfsd's
//! `struct svc_procedure` does (`pc_name`, `pc_argzero`/`pc_xdrressize`,
//! `pc_cachetype`, `pc_func`): one entry per procedure, indexed by its
//! number, read by everything that treats procedures differently: the
//! argument bound checked before anything is read, the duplicate request
//! cache, the buffers a call holds and the reply room it reserves, the
//! call statistics and `dionfs stats`.

use dionfs_proto::ArgsLimit;

/// Whether a procedure's replies are kept in the duplicate request cache
/// ([`dionfs_core::drc`]), so that a retransmission is answered with the reply
/// already sent instead of running again (knfsd's `RC_NOCACHE`,
/// `RC_REPLSTAT`, `RC_REPLBUFF`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyCache {
    /// Runs again when retransmitted: running twice answers the same.
    No,
    /// Answered from the cache when retransmitted: the call changes state,
    /// and running it twice would answer differently (a REMOVE retried
    /// after it succeeded finds nothing to remove).
    Yes,
}

/// The large memory a call of the procedure needs: a data-plane pool
/// buffer, or room for a large reply in its connection's send buffer.
#[derive(Debug, Clone, Copy)]
pub enum Io {
    /// Small arguments, small reply.
    None,
    /// Reads file data into a pool buffer sized by the count its
    /// arguments give (`count` reads it without decoding them), and
    /// replies with it (READ).
    Read { count: fn(&[u8]) -> Option<u32> },
    /// Receives a payload into a pool buffer ([`ArgsLimit::HeadThenPayload`]:
    /// WRITE).
    Write,
    /// Replies with up to the count its arguments give (READDIR,
    /// READDIRPLUS): no buffer, but room in the send buffer.
    LargeReply { count: fn(&[u8]) -> Option<u32> },
}

/// One procedure of a program.
pub struct Procedure<H: 'static> {
    /// The procedure's name in its RFC (metrics, `dionfs stats`).
    pub name: &'static str,
    /// The longest arguments it can have.
    pub args: ArgsLimit,
    pub cache: ReplyCache,
    pub io: Io,
    /// Runs it.
    pub handler: H,
}

/// The entry of a procedure with small arguments read whole (at most
/// `max_args` bytes), a small reply, and nothing in the reply cache: every
/// procedure but NFSv3's that change state or move data.
pub const fn small<H>(name: &'static str, max_args: usize, handler: H) -> Option<Procedure<H>> {
    Some(Procedure {
        name,
        args: ArgsLimit::Whole(max_args),
        cache: ReplyCache::No,
        io: Io::None,
        handler,
    })
}

/// A program version's procedure table.
pub struct Program<H: 'static> {
    /// Label in metrics (`program="nfs3"`).
    pub label: &'static str,
    /// Title in `dionfs stats`.
    pub title: &'static str,
    pub number: u32,
    pub version: u32,
    /// Indexed by procedure number; `None` for a number the program
    /// leaves unused (NLM's 16 to 19).
    pub procedures: &'static [Option<Procedure<H>>],
}

impl<H> Program<H> {
    /// The procedure numbered `proc_`, if the program has one.
    pub fn procedure(&self, proc_: u32) -> Option<&'static Procedure<H>> {
        self.procedures.get(proc_ as usize)?.as_ref()
    }

    /// What the call statistics need to know of it.
    pub fn summary(&self) -> ProgramSummary {
        ProgramSummary {
            label: self.label,
            title: self.title,
            number: self.number,
            version: self.version,
            names: self
                .procedures
                .iter()
                .map(|p| p.as_ref().map_or("", |p| p.name))
                .collect(),
            first_operation: None,
        }
    }
}

/// A program's names and numbers, without its handlers' type.
#[derive(Debug, Clone)]
pub struct ProgramSummary {
    pub label: &'static str,
    pub title: &'static str,
    pub number: u32,
    pub version: u32,
    /// Procedure names by number ("" for an unused number).
    pub names: Vec<&'static str>,
    /// Where the names stop being RPC procedures and become operations
    /// inside one (NFSv4's COMPOUND): calls are counted by the
    /// procedures, operations apart.
    pub first_operation: Option<u32>,
}

impl ProgramSummary {
    /// This summary with the names from number `first` on counted as
    /// operations ([`ProgramSummary::first_operation`]).
    pub fn with_operations_from(self, first: u32) -> Self {
        Self {
            first_operation: Some(first),
            ..self
        }
    }

    /// Whether `name` is one of the program's operations rather than an
    /// RPC procedure.
    pub fn is_operation(&self, name: &str) -> bool {
        let Some(first) = self.first_operation else {
            return false;
        };
        self.names
            .iter()
            .position(|&n| n == name)
            .is_some_and(|i| i >= first as usize)
    }
}

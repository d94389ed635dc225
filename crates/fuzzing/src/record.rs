//! RPC record marking (RFC 5531 section 11): [`RecordReader`], fed an
//! arbitrary byte stream in arbitrary pieces and driven by an arbitrary
//! sequence of its methods, checked against a plain parse of the same
//! stream; and [`read_record_blocking`], the blocking clients' reader.

use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};

use dionfs_rpc::record::READ_BUF_LEN;
use dionfs_rpc::{read_record_blocking, record_mark, RecordError, RecordReader};
use tokio::io::{AsyncRead, ReadBuf};

/// Polls `future` until it is ready. Every reader here is in memory and
/// ready at once, or pending once before it is, so a future that needs
/// more than this many polls hangs.
const MAX_POLLS: usize = 1 << 20;

/// Runs `future` to completion on the current thread (no runtime: the
/// readers here never need waking).
///
/// Panics if it is still pending after [`MAX_POLLS`] polls: a hang.
pub(crate) fn complete<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..MAX_POLLS {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
    panic!("still pending after {MAX_POLLS} polls: the reader hangs");
}

/// `data` as one record cut into fragments of `fragment_len` bytes (one
/// empty fragment if `data` is empty).
pub(crate) fn record_of_fragments(data: &[u8], fragment_len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 4 * (data.len() / fragment_len + 1));
    let mut chunks = data.chunks(fragment_len).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&record_mark(0, true));
    }
    while let Some(chunk) = chunks.next() {
        let len = u32::try_from(chunk.len()).expect("fuzz inputs are small");
        out.extend_from_slice(&record_mark(len, chunks.peek().is_none()));
        out.extend_from_slice(chunk);
    }
    out
}

/// A stream in memory that hands out at most `chunk` bytes per read, like
/// a socket, and, if `stutter`, answers every other read with `Pending`
/// (the next poll gets the bytes), like a socket whose bytes are late.
struct Stream<'a> {
    data: &'a [u8],
    chunk: usize,
    stutter: bool,
    pending_next: bool,
}

impl AsyncRead for Stream<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.stutter {
            self.pending_next = !self.pending_next;
            if self.pending_next {
                return Poll::Pending;
            }
        }
        let n = self.data.len().min(buf.remaining()).min(self.chunk);
        let (now, later) = self.data.split_at(n);
        buf.put_slice(now);
        self.data = later;
        Poll::Ready(Ok(()))
    }
}

/// One record of the stream as a plain parse sees it.
#[derive(Debug, Default)]
struct Record {
    /// The bytes of its fragments that the stream holds.
    payload: Vec<u8>,
    /// The sum of the lengths of the fragment headers the stream holds.
    declared: u64,
    /// Every fragment, through the last, is in the stream whole.
    complete: bool,
}

/// Splits `stream` into records, the last one possibly incomplete.
fn parse(stream: &[u8]) -> Vec<Record> {
    let mut records = Vec::new();
    let mut pos = 0;
    while pos < stream.len() {
        let mut record = Record::default();
        loop {
            let Some(header) = stream.get(pos..pos + 4) else {
                pos = stream.len();
                break;
            };
            pos += 4;
            let header = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
            let len = (header & 0x7fff_ffff) as usize;
            record.declared += len as u64;
            let available = len.min(stream.len() - pos);
            record
                .payload
                .extend_from_slice(&stream[pos..pos + available]);
            pos += available;
            if available < len {
                break;
            }
            if header & 0x8000_0000 != 0 {
                record.complete = true;
                break;
            }
        }
        records.push(record);
    }
    records
}

/// Record limits the first input byte picks from: around the reader's
/// buffer and the fragment header sizes.
const MAX_RECORDS: [u32; 10] = [0, 1, 4, 7, 16, 100, 4095, 4096, 4100, 65536];

/// Byte counts the operations pick from (the high five bits of a step).
const SIZES: [usize; 32] = [
    0, 1, 2, 3, 4, 5, 7, 8, 12, 16, 31, 32, 33, 64, 100, 255, 256, 511, 512, 513, 1000, 1024, 4095,
    4096, 4097, 5000, 8192, 16384, 65535, 65536, 65537, 100_000,
];

/// What the checker knows of the reader's position.
struct Model<'a> {
    records: &'a [Record],
    max_record: u32,
    /// The record a read reads from, if one is open (`next_record` said
    /// so and it was not skipped).
    open: Option<usize>,
    /// The next record `next_record` opens.
    next: usize,
    /// Bytes of the open record consumed.
    offset: usize,
}

impl Model<'_> {
    fn current(&self) -> &Record {
        &self.records[self.open.expect("a record is open")]
    }

    /// Checks bytes a read returned and moves past them. (A read of no
    /// bytes succeeds even outside a record.)
    fn take(&mut self, got: &[u8]) {
        if got.is_empty() {
            return;
        }
        let record = self.current();
        let end = self.offset + got.len();
        assert!(end <= record.payload.len(), "read past the record's bytes");
        assert_eq!(got, &record.payload[self.offset..end], "wrong bytes");
        self.offset = end;
    }

    /// Checks that the open record has ended here: a read stopped short.
    fn at_end(&self) {
        let record = self.current();
        assert!(record.complete, "a short read of an incomplete record");
        assert_eq!(
            self.offset as u64, record.declared,
            "a short read before the end"
        );
    }

    /// Checks a fatal error: the connection would close here.
    fn fatal(&self, e: &RecordError) {
        let candidates = self.open.into_iter().chain(Some(self.next));
        let mut records = candidates.filter_map(|i| self.records.get(i));
        match e {
            RecordError::TooLarge { size, max } => {
                assert_eq!(*max, self.max_record);
                assert!(*size > u64::from(*max));
                assert!(
                    records.any(|r| r.declared >= *size),
                    "TooLarge({size}) of no record that large"
                );
            }
            RecordError::Truncated => {
                assert!(
                    records.any(|r| !r.complete),
                    "Truncated, but the records are whole"
                );
            }
            other => panic!("unexpected error {other:?}"),
        }
    }
}

/// Runs one step of the script and checks it against the model. The low
/// three bits of `op` pick the method (0 and 7 `next_record`, 1
/// `read_exact`, 2 `read_up_to`, 3 `read_u32`, 4 `read_to_end`, 5
/// `read_to_end_bounded`, 6 `skip_rest`), the high five a size from
/// [`SIZES`]. Returns false once the stream has ended between records;
/// the errors returned are those that close the connection.
fn step<R: AsyncRead + Unpin>(
    reader: &mut RecordReader<R>,
    model: &mut Model<'_>,
    op: u8,
    scratch: &mut Vec<u8>,
) -> Result<bool, RecordError> {
    let size = SIZES[usize::from(op >> 3)];
    if scratch.len() < size.max(4) {
        scratch.resize(size.max(4), 0);
    }
    match op & 7 {
        1 | 3 => {
            let len = if op & 7 == 3 { 4 } else { size };
            let buf = &mut scratch[..len];
            match complete(reader.read_exact(buf)) {
                Ok(()) => model.take(buf),
                Err(RecordError::PastEnd) => {
                    let record = model.current();
                    assert!(record.complete && record.declared <= u64::from(model.max_record));
                    let left = record.declared as usize - model.offset;
                    assert!(left < len, "PastEnd with {left} bytes left for {len}");
                    model.take(&buf[..left]);
                }
                Err(RecordError::NoRecord) => assert!(model.open.is_none(), "NoRecord in a record"),
                Err(e) => return Err(e),
            }
        }
        2 => {
            let buf = &mut scratch[..size];
            match complete(reader.read_up_to(buf)) {
                Ok(n) => {
                    assert!(n <= size);
                    model.take(&buf[..n]);
                    if n < size {
                        model.at_end();
                    }
                }
                Err(RecordError::NoRecord) => assert!(model.open.is_none(), "NoRecord in a record"),
                Err(e) => return Err(e),
            }
        }
        4 | 5 => {
            let mut out = Vec::new();
            let (bound, result) = if op & 7 == 4 {
                (model.max_record, complete(reader.read_to_end(&mut out)))
            } else {
                let bound = u32::try_from(size).expect("sizes fit u32");
                (bound, complete(reader.read_to_end_bounded(&mut out, bound)))
            };
            // Never more than the bound, nor than the record limit, were
            // taken (and so allocated) for the rest of the record.
            assert!(out.len() <= bound as usize && out.len() <= model.max_record as usize);
            match result {
                Ok(()) => {
                    model.take(&out);
                    model.at_end();
                }
                Err(RecordError::RestTooLarge { size, max }) => {
                    assert_eq!(max, bound);
                    assert!(size > u64::from(max));
                    model.take(&out);
                    let record = model.current();
                    let rest = record.declared - (model.offset - out.len()) as u64;
                    assert!(size <= rest, "RestTooLarge({size}) of a rest of {rest}");
                }
                Err(RecordError::NoRecord) => assert!(model.open.is_none(), "NoRecord in a record"),
                Err(e) => return Err(e),
            }
        }
        6 => {
            complete(reader.skip_rest())?;
            if model.open.take().is_some() {
                model.offset = 0;
            }
        }
        _ => {
            // 0 and 7: the next record (skipping the rest of this one).
            if complete(reader.next_record())? {
                assert!(model.next < model.records.len(), "a record after the last");
                model.open = Some(model.next);
                model.next += 1;
                model.offset = 0;
            } else {
                assert_eq!(
                    model.next,
                    model.records.len(),
                    "end of stream before a record"
                );
                assert!(model.records.iter().all(|r| r.complete));
                model.open = None;
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Checks what the reader says of itself against the model.
fn check_state<R: AsyncRead + Unpin>(reader: &RecordReader<R>, model: &Model<'_>) {
    assert!(reader.buffered() <= READ_BUF_LEN);
    assert!(reader.record_len_so_far() <= u64::from(model.max_record));
    assert!(u64::from(reader.fragment_remaining()) <= reader.record_len_so_far());
    if model.open.is_some() {
        if reader.at_record_end() {
            assert_eq!(model.offset as u64, model.current().declared);
        }
        assert_eq!(reader.in_record(), !reader.at_record_end());
    } else {
        assert!(!reader.in_record());
    }
}

/// Target `record`. The input: a byte picking the record limit
/// ([`MAX_RECORDS`]); a byte whose low seven bits are the most bytes a
/// read of the stream returns (0: no limit) and whose top bit makes every
/// other read pending; a byte giving the script's length (1 to 16 steps);
/// the script; the stream.
///
/// The script is run over and over (a bounded number of steps) until the
/// stream ends or an error would close the connection. Every byte a read
/// returns is the stream's; every error is true of the stream (a record
/// too large, a stream truncated, a read past a record's end); nothing
/// more than the limits is taken for the rest of a record; the reader's
/// view of itself matches. Then [`read_record_blocking`] reads the same
/// stream, record by record, and must agree.
pub fn record(data: &[u8]) {
    let [limit, delivery, script_len, rest @ ..] = data else {
        return;
    };
    let max_record = MAX_RECORDS[usize::from(*limit) % MAX_RECORDS.len()];
    let chunk = match delivery & 0x7f {
        0 => usize::MAX,
        n => usize::from(n),
    };
    let script_len = (usize::from(*script_len) % 16 + 1).min(rest.len());
    let (script, stream) = rest.split_at(script_len);
    if script.is_empty() {
        return;
    }
    let records = parse(stream);

    let mut reader = RecordReader::new(
        Stream {
            data: stream,
            chunk,
            stutter: delivery & 0x80 != 0,
            pending_next: false,
        },
        max_record,
    );
    let mut model = Model {
        records: &records,
        max_record,
        open: None,
        next: 0,
        offset: 0,
    };
    let steps = 4 * (stream.len() + script.len()) + 16;
    let mut scratch = Vec::new();
    for &op in script.iter().cycle().take(steps) {
        match step(&mut reader, &mut model, op, &mut scratch) {
            Ok(true) => check_state(&reader, &model),
            Ok(false) => break,
            Err(e) => {
                model.fatal(&e);
                break;
            }
        }
    }

    let mut blocking = stream;
    for record in &records {
        match read_record_blocking(&mut blocking, max_record as usize) {
            Ok(bytes) => {
                assert!(record.complete && record.declared <= u64::from(max_record));
                assert_eq!(bytes, record.payload);
            }
            Err(_) => {
                assert!(!record.complete || record.declared > u64::from(max_record));
                return;
            }
        }
    }
    assert!(read_record_blocking(&mut blocking, max_record as usize).is_err());
}

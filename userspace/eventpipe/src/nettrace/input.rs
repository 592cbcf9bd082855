//! The byte source under the reader, with the absolute offset tracked (V4 blocks are aligned on
//! it) and end-of-stream told apart from I/O errors. Two kinds, behind one interface
//! ([`ByteInput`]) that the reader's framing and decoding are written against once:
//!
//! - [`Stream`]: any `io::Read`, buffered; block bodies are copied into buffers of its own
//!   (event blocks into the payload arena the events point into);
//! - [`Slice`]: bytes already in memory ([`InMemory`]); block bodies and payloads are read
//!   where they are, nothing copied.
//!
//! Both take the same steps on a short input (what is there is consumed, then the end is
//! reported), so a truncated or corrupt input gives the same errors at the same offsets.

use std::io::{self, BufRead, BufReader, Read};

use super::keep::Peak;

/// Result of a read that may hit the end of the stream.
#[doc(hidden)]
pub enum Fill {
    Full,
    /// The stream ended first; what arrived is stored.
    Eof,
}

/// A NetTrace input whose bytes are already in memory (a file read whole, a test's buffer):
/// `NetTraceReader::new(InMemory(bytes))` decodes blocks and events where they are instead of
/// copying them (what any `io::Read`, a `&[u8]` included, is read through). `B` is borrowed
/// (`&[u8]`) or owned (`Vec<u8>`, `Arc<[u8]>`, ...).
#[derive(Debug, Clone, Copy)]
pub struct InMemory<B>(pub B);

/// What a [`NetTraceReader`](super::NetTraceReader) reads from: any `io::Read` (read through a
/// buffer, blocks copied out of it) or [`InMemory`] bytes (read in place). Sealed.
pub trait Source: private::Sealed {
    #[doc(hidden)]
    type Input: ByteInput;
    #[doc(hidden)]
    fn into_input(self) -> Self::Input;
}

mod private {
    pub trait Sealed {}
    impl<R: std::io::Read> Sealed for R {}
    impl<B: AsRef<[u8]>> Sealed for super::InMemory<B> {}
}

impl<R: Read> Source for R {
    type Input = Stream<R>;
    fn into_input(self) -> Stream<R> {
        Stream::new(self)
    }
}

impl<B: AsRef<[u8]>> Source for InMemory<B> {
    type Input = Slice<B>;
    fn into_input(self) -> Slice<B> {
        Slice { data: self.0, pos: 0, base: 0, fresh: true, block_at: 0..0 }
    }
}

/// The operations the reader takes bytes by. Offsets in the payload arena are those an
/// event's `payload_start` holds: the arena is the bytes of the event blocks read since the
/// region was last emptied ([`ByteInput::clear_arena`]), less what
/// [`ByteInput::drop_front`] dropped.
#[doc(hidden)]
pub trait ByteInput {
    /// Event blocks are decoded from the input's own bytes (not from a copy just made).
    const IN_PLACE: bool;

    /// Absolute offset of the next byte.
    fn offset(&self) -> u64;

    /// Fills `buf` completely unless the input ends first (then what was there is consumed).
    fn fill(&mut self, buf: &mut [u8]) -> io::Result<Fill>;

    /// Reads exactly `N` bytes, or `None` at end of input.
    #[inline]
    fn array<const N: usize>(&mut self) -> io::Result<Option<[u8; N]>> {
        let mut a = [0u8; N];
        match self.fill(&mut a)? {
            Fill::Full => Ok(Some(a)),
            Fill::Eof => Ok(None),
        }
    }

    /// Replaces `buf` with the next `len` bytes (a copy whatever the input: for the small
    /// V6 trace block).
    fn read_into(&mut self, buf: &mut Vec<u8>, len: usize) -> io::Result<Fill>;

    /// Skips `len` bytes; false if the input ended first.
    fn skip(&mut self, len: u64) -> io::Result<bool>;

    /// Reads the body of a block that is not an event block (`len` bytes, or what is left),
    /// afterwards [`ByteInput::block`].
    fn read_block(&mut self, len: usize) -> io::Result<Fill>;

    /// The body [`ByteInput::read_block`] read last.
    fn block(&self) -> &[u8];

    /// Reads the body of an event block (`len` bytes, or what is left) into the arena; its
    /// offset there.
    fn read_event_block(&mut self, len: usize) -> io::Result<(Fill, usize)>;

    /// The payload arena.
    fn arena(&self) -> &[u8];

    /// No event refers to the arena's first `n` bytes any more.
    fn drop_front(&mut self, n: usize);

    /// No event refers to the arena any more.
    fn clear_arena(&mut self);

    /// Cuts the buffers back to the most they held lately, at least what they hold (see
    /// [`super::keep`]).
    fn trim(&mut self) {}
}

/// The buffer for headers and small blocks. Event block bodies are read past it straight into
/// the payload arena, so what passes through it is copied twice: a small buffer keeps that to
/// the few KiB after each block header (with 64 KiB, most of a stream went through it).
const BUFFER: usize = 4 * 1024;

/// An `io::Read` source: blocks are copied into the reader's buffers.
#[doc(hidden)]
pub struct Stream<R: Read> {
    inner: BufReader<R>,
    offset: u64,
    /// The body of the last block that is not an event block.
    block: Vec<u8>,
    block_peak: Peak,
    /// Event block bodies, appended whole: the events' payloads are ranges of it.
    payloads: Vec<u8>,
    payloads_peak: Peak,
}

impl<R: Read> Stream<R> {
    fn new(reader: R) -> Self {
        Stream {
            inner: BufReader::with_capacity(BUFFER, reader),
            offset: 0,
            block: Vec::with_capacity(16 * 1024),
            block_peak: Peak::default(),
            payloads: Vec::new(),
            payloads_peak: Peak::default(),
        }
    }

    /// Appends the next `len` bytes to `buf`, growing it only as data arrives (a corrupt huge
    /// length cannot allocate more than the stream holds).
    fn append_into(&mut self, len: usize) -> io::Result<Fill> {
        // What the buffer holds, then the rest straight from the source (one copy, not two).
        let held = self.inner.buffer();
        let first = held.len().min(len);
        self.payloads.extend_from_slice(&held[..first]);
        self.inner.consume(first);
        let rest = (len - first) as u64;
        let n = first + self.inner.get_mut().take(rest).read_to_end(&mut self.payloads)?;
        self.offset += n as u64;
        Ok(if n == len { Fill::Full } else { Fill::Eof })
    }
}

impl<R: Read> ByteInput for Stream<R> {
    const IN_PLACE: bool = false;

    #[inline]
    fn offset(&self) -> u64 {
        self.offset
    }

    fn fill(&mut self, buf: &mut [u8]) -> io::Result<Fill> {
        let mut n = 0;
        while n < buf.len() {
            match self.inner.read(&mut buf[n..]) {
                Ok(0) => {
                    self.offset += n as u64;
                    return Ok(Fill::Eof);
                }
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.offset += n as u64;
        Ok(Fill::Full)
    }

    /// Grows the buffer only as data actually arrives; large reads bypass the internal buffer.
    fn read_into(&mut self, buf: &mut Vec<u8>, len: usize) -> io::Result<Fill> {
        buf.clear();
        let n = (&mut self.inner).take(len as u64).read_to_end(buf)?;
        self.offset += n as u64;
        Ok(if n == len { Fill::Full } else { Fill::Eof })
    }

    fn skip(&mut self, len: u64) -> io::Result<bool> {
        let copied = io::copy(&mut (&mut self.inner).take(len), &mut io::sink())?;
        self.offset += copied;
        Ok(copied == len)
    }

    fn read_block(&mut self, len: usize) -> io::Result<Fill> {
        self.block_peak.see(len);
        let mut block = std::mem::take(&mut self.block);
        let r = self.read_into(&mut block, len);
        self.block = block;
        r
    }

    #[inline]
    fn block(&self) -> &[u8] {
        &self.block
    }

    fn read_event_block(&mut self, len: usize) -> io::Result<(Fill, usize)> {
        let at = self.payloads.len();
        Ok((self.append_into(len)?, at))
    }

    #[inline(always)]
    fn arena(&self) -> &[u8] {
        &self.payloads
    }

    fn drop_front(&mut self, n: usize) {
        self.payloads_peak.see(self.payloads.len());
        self.payloads.drain(..n.min(self.payloads.len()));
    }

    fn clear_arena(&mut self) {
        self.payloads_peak.see(self.payloads.len());
        self.payloads.clear();
    }

    fn trim(&mut self) {
        self.payloads_peak.trim(&mut self.payloads);
        self.block_peak.trim(&mut self.block);
    }
}

/// An [`InMemory`] source: block bodies and payloads are ranges of its bytes.
#[doc(hidden)]
pub struct Slice<B> {
    data: B,
    pos: usize,
    /// Where the payload arena starts in `data`.
    base: usize,
    /// The arena is empty: it starts at the next event block.
    fresh: bool,
    /// The body of the last block that is not an event block.
    block_at: std::ops::Range<usize>,
}

impl<B: AsRef<[u8]>> Slice<B> {
    /// Consumes up to `len` bytes: their range, and whether there were `len`.
    #[inline]
    fn take(&mut self, len: usize) -> (std::ops::Range<usize>, Fill) {
        let data = self.data.as_ref();
        let n = len.min(data.len() - self.pos);
        let r = self.pos..self.pos + n;
        self.pos += n;
        (r, if n == len { Fill::Full } else { Fill::Eof })
    }
}

impl<B: AsRef<[u8]>> ByteInput for Slice<B> {
    const IN_PLACE: bool = true;

    #[inline]
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    #[inline]
    fn fill(&mut self, buf: &mut [u8]) -> io::Result<Fill> {
        let (r, fill) = self.take(buf.len());
        let n = r.len();
        buf[..n].copy_from_slice(&self.data.as_ref()[r]);
        Ok(fill)
    }

    fn read_into(&mut self, buf: &mut Vec<u8>, len: usize) -> io::Result<Fill> {
        let (r, fill) = self.take(len);
        buf.clear();
        buf.extend_from_slice(&self.data.as_ref()[r]);
        Ok(fill)
    }

    fn skip(&mut self, len: u64) -> io::Result<bool> {
        let (_, fill) = self.take(usize::try_from(len).unwrap_or(usize::MAX));
        Ok(matches!(fill, Fill::Full))
    }

    fn read_block(&mut self, len: usize) -> io::Result<Fill> {
        let (r, fill) = self.take(len);
        self.block_at = r;
        Ok(fill)
    }

    #[inline]
    fn block(&self) -> &[u8] {
        &self.data.as_ref()[self.block_at.clone()]
    }

    fn read_event_block(&mut self, len: usize) -> io::Result<(Fill, usize)> {
        if self.fresh {
            self.base = self.pos;
            self.fresh = false;
        }
        let (r, fill) = self.take(len);
        Ok((fill, r.start - self.base))
    }

    #[inline(always)]
    fn arena(&self) -> &[u8] {
        self.data.as_ref().get(self.base..self.pos).unwrap_or_default()
    }

    fn drop_front(&mut self, n: usize) {
        self.base = (self.base + n).min(self.pos);
    }

    fn clear_arena(&mut self) {
        self.fresh = true;
    }
}

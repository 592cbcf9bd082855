//! The byte source under the reader: any `io::Read`, buffered, with the absolute stream offset
//! tracked (V4 blocks are aligned on it) and end-of-stream told apart from I/O errors.

use std::io::{self, BufRead, BufReader, Read};

/// Result of a read that may hit the end of the stream.
pub(crate) enum Fill {
    Full,
    /// The stream ended first; what arrived is stored.
    Eof,
}

/// The buffer for headers and small blocks. Event block bodies are read past it straight into
/// the payload arena, so what passes through it is copied twice: a small buffer keeps that to
/// the few KiB after each block header (with 64 KiB, most of a stream went through it).
const BUFFER: usize = 4 * 1024;

pub(crate) struct Input<R: Read> {
    inner: BufReader<R>,
    offset: u64,
}

impl<R: Read> Input<R> {
    pub(crate) fn new(reader: R) -> Self {
        Input {
            inner: BufReader::with_capacity(BUFFER, reader),
            offset: 0,
        }
    }

    /// Absolute offset of the next byte.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Fills `buf` completely unless the stream ends first.
    pub(crate) fn fill(&mut self, buf: &mut [u8]) -> io::Result<Fill> {
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

    /// Reads exactly `N` bytes, or `None` at end of stream.
    pub(crate) fn array<const N: usize>(&mut self) -> io::Result<Option<[u8; N]>> {
        let mut a = [0u8; N];
        match self.fill(&mut a)? {
            Fill::Full => Ok(Some(a)),
            Fill::Eof => Ok(None),
        }
    }

    /// Replaces `buf` with the next `len` bytes. The buffer grows only as data actually
    /// arrives, so a corrupt huge length cannot allocate more than the stream holds; large
    /// reads bypass the internal buffer.
    pub(crate) fn read_into(&mut self, buf: &mut Vec<u8>, len: usize) -> io::Result<Fill> {
        buf.clear();
        let n = (&mut self.inner).take(len as u64).read_to_end(buf)?;
        self.offset += n as u64;
        Ok(if n == len { Fill::Full } else { Fill::Eof })
    }

    /// Appends the next `len` bytes to `buf` (growing it only as data arrives, like
    /// [`Input::read_into`]).
    pub(crate) fn append_into(&mut self, buf: &mut Vec<u8>, len: usize) -> io::Result<Fill> {
        // What the buffer holds, then the rest straight from the source (one copy, not two).
        let held = self.inner.buffer();
        let first = held.len().min(len);
        buf.extend_from_slice(&held[..first]);
        self.inner.consume(first);
        let rest = (len - first) as u64;
        let n = first + self.inner.get_mut().take(rest).read_to_end(buf)?;
        self.offset += n as u64;
        Ok(if n == len { Fill::Full } else { Fill::Eof })
    }

    /// Skips `len` bytes; false if the stream ended first.
    pub(crate) fn skip(&mut self, len: u64) -> io::Result<bool> {
        let copied = io::copy(&mut (&mut self.inner).take(len), &mut io::sink())?;
        self.offset += copied;
        Ok(copied == len)
    }
}

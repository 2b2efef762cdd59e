//! The framing of the SA contract: one message is a 12-byte header and a list of fields.
//!
//! ```text
//! u32 length    bytes after this field (header rest + fields), big-endian
//! u8  version   PROTOCOL_VERSION
//! u8  kind      what the message is (message::kind)
//! u16 flags     0 (reserved)
//! u32 id        request id, echoed by the reply; 0 in events
//! fields        u16 type, u16 length, value; repeated
//! ```
//!
//! Everything is bounded: a frame longer than [`MAX_FRAME`] or with more than
//! [`MAX_FIELDS`] fields is refused before anything is allocated for it, and a field that
//! runs past the frame's end is an error, never a panic.

use zeroize::Zeroizing;

/// The protocol version this crate speaks. A peer that sends another gets an error reply
/// naming both, and the connection is closed.
pub const PROTOCOL_VERSION: u8 = 1;
/// Bytes of the header, the length field included.
pub const HEADER_LEN: usize = 12;
/// The longest frame, the length field included.
pub const MAX_FRAME: usize = 16 * 1024;
/// The most fields one frame may carry.
pub const MAX_FIELDS: usize = 256;

/// Why bytes are not a frame, or a frame is not a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The length field is below the header or above [`MAX_FRAME`].
    BadLength(usize),
    /// A version this side does not speak.
    Version(u8),
    /// Reserved flag bits set.
    Flags(u16),
    /// A field's length runs past the end of the frame.
    Truncated,
    /// More than [`MAX_FIELDS`] fields.
    TooManyFields,
    /// A kind this side does not know.
    UnknownKind(u8),
    /// A required field is missing.
    Missing(&'static str),
    /// A field's value has the wrong size or an impossible value.
    Invalid(&'static str),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::BadLength(n) => write!(f, "frame length {n} out of range"),
            FrameError::Version(v) => {
                write!(
                    f,
                    "protocol version {v} (this side speaks {PROTOCOL_VERSION})"
                )
            }
            FrameError::Flags(x) => write!(f, "reserved flags 0x{x:04x} set"),
            FrameError::Truncated => write!(f, "a field runs past the end of the frame"),
            FrameError::TooManyFields => write!(f, "more than {MAX_FIELDS} fields"),
            FrameError::UnknownKind(k) => write!(f, "unknown message kind {k}"),
            FrameError::Missing(what) => write!(f, "missing field {what}"),
            FrameError::Invalid(what) => write!(f, "invalid field {what}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// One frame as received: its kind, request id and fields, borrowed from the buffer.
#[derive(Debug, Clone, Copy)]
pub struct RawFrame<'a> {
    /// What the message is.
    pub kind: u8,
    /// The request id (0 in events).
    pub id: u32,
    body: &'a [u8],
}

/// Splits the first frame off a stream buffer: `Ok(None)` while more bytes are needed,
/// else the frame and how many bytes it took. Bad framing is an error, after which the
/// stream cannot be resynchronised and the connection must be closed.
pub fn split(buf: &[u8]) -> Result<Option<(RawFrame<'_>, usize)>, FrameError> {
    let Some(len) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
    if !(HEADER_LEN - 4..=MAX_FRAME - 4).contains(&len) {
        return Err(FrameError::BadLength(len));
    }
    let Some(frame) = buf.get(4..4 + len) else {
        return Ok(None);
    };
    if frame[0] != PROTOCOL_VERSION {
        return Err(FrameError::Version(frame[0]));
    }
    let flags = u16::from_be_bytes([frame[2], frame[3]]);
    if flags != 0 {
        return Err(FrameError::Flags(flags));
    }
    let raw = RawFrame {
        kind: frame[1],
        id: u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]),
        body: &frame[8..],
    };
    raw.check_fields()?;
    Ok(Some((raw, 4 + len)))
}

impl<'a> RawFrame<'a> {
    /// The fields in order: (type, value). Call only on a frame [`split`] returned (whose
    /// fields were checked); a malformed tail ends the iteration.
    pub fn fields(&self) -> Fields<'a> {
        Fields { rest: self.body }
    }

    /// The first field of type `ty`.
    pub fn field(&self, ty: u16) -> Option<&'a [u8]> {
        self.fields().find(|(t, _)| *t == ty).map(|(_, v)| v)
    }

    /// Every field of type `ty`, in order.
    pub fn all(&self, ty: u16) -> impl Iterator<Item = &'a [u8]> {
        self.fields().filter(move |(t, _)| *t == ty).map(|(_, v)| v)
    }

    fn check_fields(&self) -> Result<(), FrameError> {
        let mut rest = self.body;
        let mut n = 0;
        while !rest.is_empty() {
            n += 1;
            if n > MAX_FIELDS {
                return Err(FrameError::TooManyFields);
            }
            let [_, _, a, b, ..] = *rest else {
                return Err(FrameError::Truncated);
            };
            let len = usize::from(u16::from_be_bytes([a, b]));
            rest = rest.get(4 + len..).ok_or(FrameError::Truncated)?;
        }
        Ok(())
    }
}

/// Iterator over a frame's fields.
pub struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Fields<'a> {
    type Item = (u16, &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        let [t0, t1, l0, l1, ..] = *self.rest else {
            return None;
        };
        let len = usize::from(u16::from_be_bytes([l0, l1]));
        let value = self.rest.get(4..4 + len)?;
        self.rest = &self.rest[4 + len..];
        Some((u16::from_be_bytes([t0, t1]), value))
    }
}

/// Builds one frame. The buffer is wiped when dropped: frames carry keys.
pub struct FrameWriter {
    buf: Zeroizing<Vec<u8>>,
    fields: usize,
}

impl FrameWriter {
    /// A frame of `kind` answering (or being) request `id`.
    pub fn new(kind: u8, id: u32) -> Self {
        let mut buf = Zeroizing::new(Vec::with_capacity(256));
        buf.extend_from_slice(&[0, 0, 0, 0, PROTOCOL_VERSION, kind, 0, 0]);
        buf.extend_from_slice(&id.to_be_bytes());
        FrameWriter { buf, fields: 0 }
    }

    /// Appends a field. Values longer than a field can hold are cut at 65,535 bytes (no
    /// value this protocol defines comes near it).
    pub fn field(&mut self, ty: u16, value: &[u8]) -> &mut Self {
        let value = &value[..value.len().min(usize::from(u16::MAX))];
        self.make_room(4 + value.len());
        self.buf.extend_from_slice(&ty.to_be_bytes());
        self.buf
            .extend_from_slice(&(value.len() as u16).to_be_bytes());
        self.buf.extend_from_slice(value);
        self.fields += 1;
        self
    }

    /// Grows the buffer, if it must, by moving the frame into a larger wiping one: a vector
    /// that grew by itself would free its old block, keys and all, unwiped.
    fn make_room(&mut self, extra: usize) {
        let need = self.buf.len() + extra;
        if need > self.buf.capacity() {
            let mut bigger = Zeroizing::new(Vec::with_capacity(need.max(2 * self.buf.capacity())));
            bigger.extend_from_slice(&self.buf);
            self.buf = bigger; // the old buffer is wiped as it goes
        }
    }

    /// Appends a one-byte field.
    pub fn u8(&mut self, ty: u16, v: u8) -> &mut Self {
        self.field(ty, &[v])
    }

    /// Appends a two-byte field.
    pub fn u16(&mut self, ty: u16, v: u16) -> &mut Self {
        self.field(ty, &v.to_be_bytes())
    }

    /// Appends a four-byte field.
    pub fn u32(&mut self, ty: u16, v: u32) -> &mut Self {
        self.field(ty, &v.to_be_bytes())
    }

    /// Appends an eight-byte field.
    pub fn u64(&mut self, ty: u16, v: u64) -> &mut Self {
        self.field(ty, &v.to_be_bytes())
    }

    /// The finished frame, or why the peer would refuse it (too long, too many fields).
    pub fn finish(mut self) -> Result<Zeroizing<Vec<u8>>, FrameError> {
        let len = self.buf.len();
        if len > MAX_FRAME {
            return Err(FrameError::BadLength(len - 4));
        }
        if self.fields > MAX_FIELDS {
            return Err(FrameError::TooManyFields);
        }
        self.buf[..4].copy_from_slice(&((len - 4) as u32).to_be_bytes());
        Ok(std::mem::take(&mut self.buf))
    }
}

/// Reads a big-endian integer field of exactly `N` bytes.
pub fn be<const N: usize>(v: Option<&[u8]>, what: &'static str) -> Result<[u8; N], FrameError> {
    let v = v.ok_or(FrameError::Missing(what))?;
    v.try_into().map_err(|_| FrameError::Invalid(what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_and_splits_from_a_stream() {
        let mut w = FrameWriter::new(3, 77);
        w.u32(1, 0xdead_beef).field(2, b"key").u8(3, 1);
        let bytes = w.finish().unwrap();
        let mut stream = bytes.to_vec();
        stream.extend_from_slice(&bytes[..5]);
        for cut in 0..bytes.len() {
            assert!(split(&stream[..cut]).unwrap().is_none(), "{cut}");
        }
        let (f, used) = split(&stream).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!((f.kind, f.id), (3, 77));
        assert_eq!(f.field(1), Some(&0xdead_beefu32.to_be_bytes()[..]));
        assert_eq!(f.field(2), Some(&b"key"[..]));
        assert_eq!(f.fields().count(), 3);
        assert!(split(&stream[used..]).unwrap().is_none());
    }

    #[test]
    fn bad_frames_are_refused_by_reason() {
        let ok = FrameWriter::new(1, 1).finish().unwrap().to_vec();
        let mut v = ok.clone();
        v[4] = 2;
        assert_eq!(split(&v).unwrap_err(), FrameError::Version(2));
        let mut v = ok.clone();
        v[7] = 1;
        assert_eq!(split(&v).unwrap_err(), FrameError::Flags(1));
        let mut v = ok.clone();
        v[..4].copy_from_slice(&(MAX_FRAME as u32).to_be_bytes());
        assert!(matches!(split(&v), Err(FrameError::BadLength(_))));
        let mut v = ok.clone();
        v[..4].copy_from_slice(&3u32.to_be_bytes());
        assert!(matches!(split(&v), Err(FrameError::BadLength(3))));
        // A field whose length runs past the frame.
        let mut v = ok.clone();
        v.extend_from_slice(&[0, 1, 0, 9, 1, 2]);
        let len = (v.len() - 4) as u32;
        v[..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(split(&v).unwrap_err(), FrameError::Truncated);
        // Too many (empty) fields.
        let mut w = FrameWriter::new(1, 1);
        for _ in 0..=MAX_FIELDS {
            w.field(9, &[]);
        }
        assert_eq!(w.finish().unwrap_err(), FrameError::TooManyFields);
    }
}

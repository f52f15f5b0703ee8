//! The process's own log on stderr, each event cut to [`MAX_EVENT_BYTES`]: an event may
//! quote what a client sent (rmcp logs every error answer whole, with the tool name a
//! client chose inside it), and one 4 MiB name a request wrote 1.25 GB of log in 10 s.

use std::io::{self, Write};

/// Bytes of one log event kept; the rest is counted, not written.
pub const MAX_EVENT_BYTES: usize = 16 * 1024;

/// stderr, cutting each write (the fmt layer writes an event in one) to
/// [`MAX_EVENT_BYTES`].
pub struct CappedStderr;

impl Write for CappedStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        capped(&mut io::stderr().lock(), buf, MAX_EVENT_BYTES)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// Writes `buf` to `out`, or its first `max` bytes (on a character boundary) and how much
/// was cut; answers that all of `buf` was taken.
fn capped(out: &mut impl Write, buf: &[u8], max: usize) -> io::Result<usize> {
    if buf.len() <= max {
        out.write_all(buf)?;
        return Ok(buf.len());
    }
    let mut end = max;
    while end > 0 && (buf[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    out.write_all(&buf[..end])?;
    writeln!(
        out,
        "… [{} more bytes of this log line cut]",
        buf.len() - end
    )?;
    Ok(buf.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_event_is_cut_on_a_character_boundary() {
        let mut out = Vec::new();
        assert_eq!(capped(&mut out, b"short\n", 16).unwrap(), 6);
        assert_eq!(out, b"short\n");
        let long = "é".repeat(20); // 40 bytes, two a character
        let mut out = Vec::new();
        assert_eq!(capped(&mut out, long.as_bytes(), 7).unwrap(), 40);
        let text = String::from_utf8(out).expect("cut inside a character");
        assert_eq!(text, "ééé… [34 more bytes of this log line cut]\n");
    }
}

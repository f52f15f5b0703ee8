//! The frames between the parent and a `tool_search_code` child: one JSON object per line
//! over the socketpair at the child's fd 3 (see `bridge-js/runtime.js` for the other side).
//!
//! Every child frame is untrusted input. [`decode`] accepts exactly the shapes below and
//! nothing else (unknown types or fields, wrong types, oversized frames are errors), so a
//! child that misbehaves, or guest code that got hold of the channel, ends the run with a
//! protocol error instead of steering the parent.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the child may send.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ChildFrame {
    Ready {},
    Log {
        level: LogLevel,
        items: Vec<String>,
    },
    Bridge {
        id: u64,
        method: BridgeMethod,
        args: Vec<Value>,
    },
    Result {
        ok: bool,
        #[serde(default)]
        value: Value,
        #[serde(default)]
        error: Option<GuestError>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Log,
    Warn,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BridgeMethod {
    Search,
    Describe,
    Call,
}

/// A failure the guest side reports (`code-error`, `output-too-large`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestError {
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
}

/// Why a frame was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    TooLarge {
        bytes: usize,
        limit: usize,
    },
    NotUtf8,
    Malformed(String),
    /// Reading the channel failed.
    Io(String),
}

impl From<std::io::Error> for ProtocolError {
    fn from(e: std::io::Error) -> Self {
        ProtocolError::Io(e.to_string())
    }
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtocolError::TooLarge { bytes, limit } => {
                write!(
                    f,
                    "a frame of {bytes} bytes from the child (the limit is {limit})"
                )
            }
            ProtocolError::NotUtf8 => f.write_str("a frame from the child is not UTF-8"),
            ProtocolError::Malformed(m) => write!(f, "a malformed frame from the child: {m}"),
            ProtocolError::Io(e) => write!(f, "reading from the child: {e}"),
        }
    }
}

/// Decodes one line (without its newline).
pub fn decode(line: &[u8], max_bytes: usize) -> Result<ChildFrame, ProtocolError> {
    if line.len() > max_bytes {
        return Err(ProtocolError::TooLarge {
            bytes: line.len(),
            limit: max_bytes,
        });
    }
    let text = std::str::from_utf8(line).map_err(|_| ProtocolError::NotUtf8)?;
    let frame: ChildFrame = serde_json::from_str(text).map_err(|e| {
        let m = e.to_string();
        ProtocolError::Malformed(crate::shown::head(&m, 200).to_string())
    })?;
    match &frame {
        ChildFrame::Result {
            ok: false,
            error: None,
            ..
        } => Err(ProtocolError::Malformed(
            "a failed result without `error`".into(),
        )),
        ChildFrame::Bridge { method, args, .. } => {
            let arity = match method {
                BridgeMethod::Search => 2,
                BridgeMethod::Describe => 1,
                BridgeMethod::Call => 2,
            };
            if args.len() == arity {
                Ok(frame)
            } else {
                Err(ProtocolError::Malformed(format!(
                    "bridge {method:?} with {} arguments",
                    args.len()
                )))
            }
        }
        _ => Ok(frame),
    }
}

/// A decoded frame and the size of its line, which the parent checks against its own
/// bounds (a bridge call's arguments) whatever the child claims to have checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub frame: ChildFrame,
    pub bytes: usize,
}

/// Newline-delimited child frames for a `FramedRead`. Its state is the read buffer, so a
/// read cancelled by another `select!` arm loses nothing: the next poll goes on where this
/// one stopped (a hand-written `fill_buf` loop inside `select!` dropped half-read lines).
/// A line is refused as soon as it passes `max_bytes`, without buffering more.
#[derive(Debug, Clone)]
pub struct FrameCodec {
    max_bytes: usize,
    /// How far the current partial line has been searched for a newline.
    scanned: usize,
}

impl FrameCodec {
    pub fn new(max_bytes: usize) -> Self {
        FrameCodec {
            max_bytes,
            scanned: 0,
        }
    }
}

impl tokio_util::codec::Decoder for FrameCodec {
    type Item = Frame;
    type Error = ProtocolError;

    fn decode(&mut self, buf: &mut bytes::BytesMut) -> Result<Option<Frame>, ProtocolError> {
        let from = self.scanned.min(buf.len());
        match buf[from..].iter().position(|&b| b == b'\n') {
            Some(i) => {
                let end = from + i;
                self.scanned = 0;
                let line = buf.split_to(end + 1);
                let line = &line[..end];
                let frame = decode(line, self.max_bytes)?;
                Ok(Some(Frame {
                    frame,
                    bytes: line.len(),
                }))
            }
            None if buf.len() > self.max_bytes => Err(ProtocolError::TooLarge {
                bytes: buf.len(),
                limit: self.max_bytes,
            }),
            None => {
                self.scanned = buf.len();
                Ok(None)
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut bytes::BytesMut) -> Result<Option<Frame>, ProtocolError> {
        match self.decode(buf)? {
            Some(frame) => Ok(Some(frame)),
            // A line cut off by the end of the stream is the child dying mid-write: the
            // caller reports how it died, so the fragment is dropped, not parsed.
            None => {
                buf.clear();
                self.scanned = 0;
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX: usize = 1 << 20;

    #[test]
    fn accepts_the_documented_frames() {
        assert_eq!(
            decode(br#"{"type":"ready"}"#, MAX),
            Ok(ChildFrame::Ready {})
        );
        assert!(matches!(
            decode(br#"{"type":"log","level":"warn","items":["a"]}"#, MAX),
            Ok(ChildFrame::Log {
                level: LogLevel::Warn,
                ..
            })
        ));
        assert!(matches!(
            decode(
                br#"{"type":"bridge","id":3,"method":"call","args":["x",{}]}"#,
                MAX
            ),
            Ok(ChildFrame::Bridge {
                id: 3,
                method: BridgeMethod::Call,
                ..
            })
        ));
        assert!(matches!(
            decode(br#"{"type":"result","ok":true,"value":[1]}"#, MAX),
            Ok(ChildFrame::Result { ok: true, .. })
        ));
        assert!(matches!(
            decode(br#"{"type":"result","ok":false,"error":{"code":"code-error","message":"x","line":2}}"#, MAX),
            Ok(ChildFrame::Result { ok: false, error: Some(_), .. })
        ));
    }

    #[test]
    fn refuses_everything_else() {
        for bad in [
            &br#"{"type":"exec","cmd":"rm"}"#[..],
            br#"{"type":"ready","extra":1}"#,
            br#"{"type":"log","level":"debug","items":[]}"#,
            br#"{"type":"log","level":"log","items":[1]}"#,
            br#"{"type":"bridge","id":-1,"method":"call","args":[]}"#,
            br#"{"type":"bridge","id":1,"method":"call","args":["only-one"]}"#,
            br#"{"type":"bridge","id":1,"method":"spawn","args":[]}"#,
            br#"{"type":"result","ok":false}"#,
            br#"[]"#,
            b"not json",
            b"\xff\xfe",
        ] {
            assert!(
                decode(bad, MAX).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(matches!(
            decode(&[b' '; 100], 10),
            Err(ProtocolError::TooLarge {
                bytes: 100,
                limit: 10
            })
        ));
    }

    fn decode_all(chunks: &[&[u8]], max: usize) -> Vec<Result<Frame, ProtocolError>> {
        use tokio_util::codec::Decoder;
        let mut codec = FrameCodec::new(max);
        let mut buf = bytes::BytesMut::new();
        let mut out = Vec::new();
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            loop {
                match codec.decode(&mut buf) {
                    Ok(Some(f)) => out.push(Ok(f)),
                    Ok(None) => break,
                    Err(e) => {
                        out.push(Err(e));
                        return out;
                    }
                }
            }
        }
        if let Ok(Some(f)) = codec.decode_eof(&mut buf) {
            out.push(Ok(f));
        }
        out
    }

    #[test]
    fn the_codec_joins_lines_split_anywhere() {
        let text = br#"{"type":"ready"}
{"type":"log","level":"log","items":["a\nb"]}
"#;
        for cut in 0..text.len() {
            let frames = decode_all(&[&text[..cut], &text[cut..]], MAX);
            assert_eq!(frames.len(), 2, "cut at {cut}: {frames:?}");
            assert!(frames.iter().all(Result::is_ok), "cut at {cut}");
            assert_eq!(frames[0].as_ref().map(|f| f.bytes), Ok(16));
        }
    }

    #[test]
    fn the_codec_refuses_a_long_line_before_its_end() {
        let long = [b'x'; 100];
        let frames = decode_all(&[&long[..60], &long[60..]], 64);
        assert!(matches!(
            frames.last(),
            Some(Err(ProtocolError::TooLarge { limit: 64, .. }))
        ));
    }

    #[test]
    fn the_codec_drops_a_fragment_at_the_end_of_the_stream() {
        let frames = decode_all(&[br#"{"type":"ready"}"#, b"\n{\"type\":\"re"], MAX);
        assert_eq!(frames.len(), 1);
    }

    #[test]
    fn an_error_quoting_multibyte_text_is_cut_on_a_character() {
        let frame = format!(r#"{{"type":"{}"}}"#, "é".repeat(100));
        let e = decode(frame.as_bytes(), MAX).unwrap_err().to_string();
        assert!(e.len() < 300, "{e}");
    }

    proptest! {
        #[test]
        fn the_codec_gives_the_same_frames_however_the_bytes_are_cut(
            cuts in prop::collection::vec(0usize..120, 0..6)
        ) {
            let text: &[u8] = br#"{"type":"ready"}
{"type":"bridge","id":1,"method":"describe","args":["x"]}
{"type":"result","ok":true,"value":{"a":[1,2,3]}}
"#;
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c % text.len()).collect();
            points.sort_unstable();
            let mut chunks = Vec::new();
            let mut last = 0;
            for p in points {
                chunks.push(&text[last..p]);
                last = p;
            }
            chunks.push(&text[last..]);
            let frames = decode_all(&chunks, MAX);
            prop_assert_eq!(frames.len(), 3);
            prop_assert!(frames.iter().all(Result::is_ok));
        }

        #[test]
        fn never_panics_on_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&bytes, 256);
        }

        #[test]
        fn never_panics_on_json_like_text(text in r#"\{"type":"(ready|log|bridge|result)"[ -~]{0,80}\}"#) {
            let _ = decode(text.as_bytes(), MAX);
        }

        /// Serde's errors quote the text they refuse, and a cut of one inside a character
        /// panicked the host (sandbox round 27 F1: `{"type":"` then 100 × `é`).
        #[test]
        fn never_panics_on_errors_quoting_any_characters(
            pad in 0usize..8,
            tail in "\\PC{0,300}",
        ) {
            let text = format!(r#"{{"type":"{}{tail}"}}"#, "a".repeat(pad));
            prop_assert!(decode(text.as_bytes(), MAX).is_err() || text.contains("ready"));
            let text = format!(r#"{{"type":"bridge","id":{}{tail}}}"#, "1".repeat(pad));
            let _ = decode(text.as_bytes(), MAX);
        }
    }
}

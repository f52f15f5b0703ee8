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
    TooLarge { bytes: usize, limit: usize },
    NotUtf8,
    Malformed(String),
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
        let mut m = e.to_string();
        m.truncate(200);
        ProtocolError::Malformed(m)
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

    proptest! {
        #[test]
        fn never_panics_on_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&bytes, 256);
        }

        #[test]
        fn never_panics_on_json_like_text(text in r#"\{"type":"(ready|log|bridge|result)"[ -~]{0,80}\}"#) {
            let _ = decode(text.as_bytes(), MAX);
        }
    }
}

//! JSON read within a bound on what it becomes in memory. A parsed value costs far more
//! than its text — tens of bytes per value, so `[[],[],...]` grows twentyfold — and a
//! client's body or a provider's answer is whatever its sender chose. So a text is first
//! scanned (linear, nothing allocated) for an upper bound on the values it holds, and
//! parsed only under [`MAX_JSON_VALUES`]. Nesting is bounded by serde_json itself (128
//! levels).

use serde_json::Value;

/// The most JSON values (containers, keys and scalars) one document may hold: a request
/// with 128 tools and a long conversation holds tens of thousands; this bound keeps one
/// parsed document under about 20 MB.
pub const MAX_JSON_VALUES: usize = 200_000;

/// An upper bound on the values `text` parses into: one, plus one per container opened,
/// per `,` and per `:` outside strings. Malformed text gets a number too; the parser
/// refuses it later.
pub fn count_values(text: &[u8]) -> usize {
    let mut n = 1usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in text {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' | b',' | b':' => n += 1,
            _ => {}
        }
    }
    n
}

/// Whether `text` is within `max` values; the error says how many it holds.
pub fn check(text: &[u8], max: usize) -> Result<(), String> {
    let n = count_values(text);
    if n > max {
        return Err(format!(
            "it holds about {n} JSON values; at most {max} are read"
        ));
    }
    Ok(())
}

/// `text` parsed, when it holds at most [`MAX_JSON_VALUES`] values.
pub fn parse(text: &str) -> Result<Value, String> {
    check(text.as_bytes(), MAX_JSON_VALUES)?;
    serde_json::from_str(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_counted_outside_strings_only() {
        assert_eq!(count_values(b"1"), 1);
        assert_eq!(count_values(br#"{"a": 1}"#), 3);
        assert_eq!(count_values(br#"[[], [], []]"#), 7);
        // Brackets, commas and escaped quotes inside strings are text.
        assert_eq!(count_values(br#""[,:{\"[""#), 1);
        assert_eq!(count_values(br#"{"a\\": [1, 2]}"#), 5);
    }

    #[test]
    fn a_document_of_many_small_values_is_refused_before_it_is_parsed() {
        let many = format!("[{}]", vec!["[]"; MAX_JSON_VALUES].join(","));
        let e = parse(&many).unwrap_err();
        assert!(e.contains("JSON values"), "{e}");
        let text = format!("\"{}\"", "x".repeat(1 << 20));
        assert!(parse(&text).is_ok(), "a long string is one value");
    }
}

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
    read(text).map_err(|e| e.to_string())
}

/// `text` as `T`, its lone surrogate escapes read as U+FFFD ([`mend_lone_surrogates`]):
/// what a JavaScript client, proxy or provider writes, everywhere a text from outside is
/// parsed (front round 22 F2: a call's `arguments` string, parsed on its own, still
/// refused them).
pub fn read<T: serde::de::DeserializeOwned>(text: &str) -> serde_json::Result<T> {
    match mend_lone_surrogates(text.as_bytes()) {
        Some(mended) => serde_json::from_slice(&mended),
        None => serde_json::from_str(text),
    }
}

/// `text` with every lone UTF-16 surrogate escape in its strings (`\ud83d` not followed by
/// a low one, or a low one alone) made `\ufffd`, or `None` when it has none. JavaScript's
/// `JSON.stringify` writes half of a character cut in two that way, and JavaScript and
/// Python read it; serde refuses the whole document. The text keeps its length, so bounds
/// measured before still hold.
pub fn mend_lone_surrogates(text: &[u8]) -> Option<Vec<u8>> {
    /// The code unit of a `\uXXXX` escape starting at `at` (the backslash).
    fn unit(text: &[u8], at: usize) -> Option<u16> {
        let hex = text.get(at..at + 6)?;
        if hex[0] != b'\\' || hex[1] != b'u' {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(&hex[2..]).ok()?, 16).ok()
    }
    let mut mended: Option<Vec<u8>> = None;
    let mut in_string = false;
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if !in_string {
            in_string = b == b'"';
            i += 1;
            continue;
        }
        match b {
            b'"' => {
                in_string = false;
                i += 1;
            }
            b'\\' => match unit(text, i) {
                Some(0xD800..=0xDBFF)
                    if unit(text, i + 6).is_some_and(|u| (0xDC00..=0xDFFF).contains(&u)) =>
                {
                    i += 12
                }
                Some(0xD800..=0xDFFF) => {
                    mended.get_or_insert_with(|| text.to_vec())[i..i + 6]
                        .copy_from_slice(br"\ufffd");
                    i += 6;
                }
                // Any other escape: its two bytes (a `\uXXXX`'s hex is plain text after).
                _ => i += 2,
            },
            _ => i += 1,
        }
    }
    mended
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

    #[test]
    fn lone_surrogates_are_mended_and_pairs_and_escaped_backslashes_kept() {
        let mend =
            |t: &str| mend_lone_surrogates(t.as_bytes()).map(|v| String::from_utf8(v).unwrap());
        assert_eq!(
            mend(r#"{"a":"R\ud83d"}"#).as_deref(),
            Some(r#"{"a":"R\ufffd"}"#)
        );
        assert_eq!(mend(r#"["\udc00x"]"#).as_deref(), Some(r#"["\ufffdx"]"#));
        assert_eq!(mend(r#"["\ud83d\ude00"]"#), None);
        assert_eq!(mend(r#"["\\ud83d", "\u00e9"]"#), None);
        assert_eq!(
            mend(r#"{"\ud800": 1}"#).as_deref(),
            Some(r#"{"\ufffd": 1}"#)
        );
        // Outside strings nothing is touched (the parser refuses it as it was).
        assert_eq!(mend(r#"\ud800"#), None);
    }

    proptest::proptest! {
        /// Any UTF-16 text, written as `JSON.stringify` writes it (a surrogate as an escape),
        /// reads after mending as JavaScript's lossy reading of it.
        #[test]
        fn mended_text_reads_as_javascript_reads_it(
            units in proptest::collection::vec(
                proptest::prop_oneof![0xD7F0u16..0xE010, 0x20u16..0x80],
                0..24,
            ),
        ) {
            let mut json = String::from("\"");
            for u in &units {
                match char::from_u32(u32::from(*u)) {
                    Some('"') => json.push_str("\\\""),
                    Some('\\') => json.push_str("\\\\"),
                    Some(c) => json.push(c),
                    None => json.push_str(&format!("\\u{u:04x}")),
                }
            }
            json.push('"');
            let text = mend_lone_surrogates(json.as_bytes()).unwrap_or_else(|| json.clone().into_bytes());
            proptest::prop_assert_eq!(text.len(), json.len());
            let read: String = serde_json::from_slice(&text).unwrap();
            proptest::prop_assert_eq!(read, String::from_utf16_lossy(&units));
        }
    }
}

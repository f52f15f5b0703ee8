//! Text others chose (a guest's console lines and errors, a tool's description or result,
//! a client's ids) made safe to show a person: in a terminal, control characters act, and
//! a body that printed `ESC[2K`, `CR` or an OSC sequence erased and forged the program's
//! own lines, set the window title and wrote the clipboard (review 11 F1). Every human
//! output and every log line passes through here, so no renderer can forget it.

use std::borrow::Cow;

/// Whether a terminal acts on `c` instead of showing it, or shows nothing for it: C0
/// controls but the line feed and the tab, DEL, C1 controls (U+009B is a one-character
/// CSI), the line and paragraph separators, the bidirectional marks, overrides and isolates
/// that reorder what is shown, and the characters that take no room (zero-width spaces and
/// joiners, the BOM, invisible operators, tags, fillers): `create_issue` with a zero-width
/// space in it listed beside the real one, the two alike on screen (review 12).
fn acts(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{ad}' | '\u{34f}' | '\u{61c}' | '\u{115f}' | '\u{1160}' | '\u{17b4}' | '\u{17b5}'
        | '\u{180b}'..='\u{180f}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}' | '\u{3164}' | '\u{fe00}'..='\u{fe0f}' | '\u{feff}'
        | '\u{ffa0}' | '\u{fff0}'..='\u{fffb}' | '\u{13430}'..='\u{1343f}'
        | '\u{1bca0}'..='\u{1bca3}' | '\u{1d173}'..='\u{1d17a}'
        | '\u{e0000}'..='\u{e0fff}')
}

/// The longest start of `text` of at most `max` bytes that ends on a character boundary.
/// Every cut of a text by bytes goes through here: `String::truncate` inside a character
/// panics, and a child's error quoting its own bytes cut at byte 200 took its host down
/// (sandbox round 27 F1).
pub fn head(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` with every character a terminal would act on written as a visible escape
/// (`\u{1b}`); line feeds and tabs stay.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if acts(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// JSON for a person: indented when small, compact past [`INDENTED_UP_TO`] bytes. Indenting
/// multiplies a value's size by its depth: a 600 KB result nested 99 deep printed 60 MB
/// and took the CLI to 158 MB (review 15).
pub fn json_readable<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let compact = serde_json::to_string(value)?;
    if compact.len() > INDENTED_UP_TO {
        return Ok(compact);
    }
    serde_json::to_string_pretty(value)
}

/// The largest compact JSON [`json_readable`] still indents.
pub const INDENTED_UP_TO: usize = 64 * 1024;

/// A JSON text with the characters a terminal acts on that JSON leaves raw (serde escapes
/// C0 only) written as `\uXXXX` escapes: the same value, safe to print or `tail -f`. They
/// occur only inside strings, where the escape means the same character.
pub fn json_for_terminal(json: String) -> String {
    if !json.chars().any(acts) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if acts(c) {
            // Past U+FFFF (tags), JSON escapes a character as its surrogate pair.
            for unit in c.encode_utf16(&mut [0; 2]) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Writes `text` to stderr made safe ([`for_terminal`]): the one way anything but the
/// tracing writer reaches stderr (an architecture test holds to it), so an error naming a
/// server's stderr or an approval prompt quoting a guest's arguments cannot act on the
/// terminal (review 12). A failed write is dropped: stderr is where failures would go.
pub fn to_stderr(text: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(for_terminal(text).as_bytes());
    let _ = err.flush();
}

/// `text` whose every line after the first begins with `indent`: a line of someone
/// else's text cannot pass for one of the program's own.
pub fn indented<'a>(text: &'a str, indent: &str) -> Cow<'a, str> {
    if text.contains('\n') {
        Cow::Owned(text.replace('\n', &format!("\n{indent}")))
    } else {
        Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn small_json_is_indented_and_large_json_compact() {
        let small = serde_json::json!({"a": [1, 2]});
        assert!(super::json_readable(&small).unwrap().contains("\n  \"a\""));
        let mut deep = serde_json::json!("x".repeat(super::INDENTED_UP_TO));
        for _ in 0..99 {
            deep = serde_json::json!([deep]);
        }
        let text = super::json_readable(&deep).unwrap();
        assert!(!text.contains('\n'));
        assert_eq!(text.len(), super::INDENTED_UP_TO + 2 + 2 * 99);
    }

    use super::*;

    #[test]
    fn controls_become_visible_and_plain_text_is_untouched() {
        assert!(matches!(for_terminal("plain\ttext\n"), Cow::Borrowed(_)));
        assert_eq!(
            for_terminal("a\u{1b}[2K\rb\u{9b}2J\u{7}\u{202e}c"),
            "a\\u{1b}[2K\\u{d}b\\u{9b}2J\\u{7}\\u{202e}c"
        );
        assert_eq!(indented("one\ntwo", "  "), "one\n  two");
        assert_eq!(
            for_terminal("create\u{200b}_issue\u{feff}\u{e0041}"),
            "create\\u{200b}_issue\\u{feff}\\u{e0041}"
        );
    }

    #[test]
    fn json_keeps_its_value_with_no_raw_control() {
        let value =
            serde_json::json!({"k\u{9b}": "x\u{1b}]52;c;AA\u{7}\u{2028}\u{85}\u{e0041}\u{200b}"});
        let safe = json_for_terminal(value.to_string());
        assert!(!safe.chars().any(acts), "{safe}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&safe).unwrap(),
            value
        );
    }
}

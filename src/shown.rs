//! Text others chose (a guest's console lines and errors, a tool's description or result,
//! a client's ids) made safe to show a person: in a terminal, control characters act, and
//! a body that printed `ESC[2K`, `CR` or an OSC sequence erased and forged the program's
//! own lines, set the window title and wrote the clipboard (review 11 F1). Every human
//! output and every log line passes through here, so no renderer can forget it.

use std::borrow::Cow;

/// Whether a terminal acts on `c` instead of showing it: C0 controls but the line feed and
/// the tab, DEL, C1 controls (U+009B is a one-character CSI), the line and paragraph
/// separators, and the bidirectional overrides and isolates that reorder what is shown.
fn acts(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
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
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
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
    use super::*;

    #[test]
    fn controls_become_visible_and_plain_text_is_untouched() {
        assert!(matches!(for_terminal("plain\ttext\n"), Cow::Borrowed(_)));
        assert_eq!(
            for_terminal("a\u{1b}[2K\rb\u{9b}2J\u{7}\u{202e}c"),
            "a\\u{1b}[2K\\u{d}b\\u{9b}2J\\u{7}\\u{202e}c"
        );
        assert_eq!(indented("one\ntwo", "  "), "one\n  two");
    }

    #[test]
    fn json_keeps_its_value_with_no_raw_control() {
        let value = serde_json::json!({"k\u{9b}": "x\u{1b}]52;c;AA\u{7}\u{2028}\u{85}"});
        let safe = json_for_terminal(value.to_string());
        assert!(!safe.chars().any(acts), "{safe}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&safe).unwrap(),
            value
        );
    }
}

//! The provider's secrets kept out of every text the gateway writes: its API key and what
//! `[provider] base_url` carries in its userinfo and query (some providers take a key
//! there). Every error of the provider client goes through [`Redactor::error`] on its way
//! out — to the client, the session log or the gateway's log — so a new error path cannot
//! forget it; URLs in messages are [`shown_url`]s, without userinfo and query.
//!
//! A secret is found in the forms a provider may repeat it in: as it is, in any ASCII
//! case, percent-encoded, in base64 (standard or URL-safe, at any alignment, as in a
//! `Basic` header), and in pieces: a message cut in the middle of a key or of one of those
//! forms, wherever the cut was made, keeps no run of [`MIN_PIECE`] or more of its
//! characters. Texts are cut to
//! [`MAX_CHARS`] first, after the whole forms are replaced, so the piece search stays
//! cheap whatever the provider sent.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};

use crate::agent::ModelError;

/// What a secret is replaced with.
pub const MARK: &str = "[redacted]";

/// The shortest run of a secret's characters taken for a piece of it; shorter secrets are
/// found only whole.
pub const MIN_PIECE: usize = 8;

/// Characters of a provider's text an error message keeps.
pub const MAX_CHARS: usize = 2000;

/// Secrets shorter than this are not looked for: they would match ordinary words.
const MIN_SECRET: usize = 4;

/// The provider's secrets and their findable forms, lowercased.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Forms matched whole (any case).
    whole: Vec<String>,
    /// Secrets also matched in pieces (any case).
    pieces: Vec<String>,
}

impl Redactor {
    /// The secrets of a provider: its key, and the userinfo and query of its base URL.
    pub fn new(key: Option<&str>, base_url: &str) -> Self {
        let mut secrets: Vec<String> = key.map(str::to_string).into_iter().collect();
        if let Ok(url) = reqwest::Url::parse(base_url) {
            secrets.push(url.username().to_string());
            secrets.extend(url.password().map(str::to_string));
            if let Some(query) = url.query() {
                secrets.push(query.to_string());
                secrets.extend(url.query_pairs().map(|(_, v)| v.into_owned()));
            }
        }
        let mut r = Redactor::default();
        for secret in secrets.into_iter().filter(|s| s.len() >= MIN_SECRET) {
            r.add(&secret);
        }
        r
    }

    fn add(&mut self, secret: &str) {
        let mut forms = vec![secret.to_string(), percent_encoded(secret)];
        forms.extend(base64_forms(secret));
        // Every form is looked for in pieces too, not only the secret as it is: a base64
        // form cut before the text reached here (a stream line cut at 80 characters, a
        // header value at 40) kept 36 of a key's 39 characters (front round 30 F1, F2).
        for form in forms {
            let form = form.to_ascii_lowercase();
            if form.len() >= MIN_SECRET && !self.whole.contains(&form) {
                self.whole.push(form.clone());
            }
            if form.len() >= MIN_PIECE && !self.pieces.contains(&form) {
                self.pieces.push(form);
            }
        }
    }

    /// `text` without the secrets, cut to [`MAX_CHARS`].
    pub fn text(&self, text: &str) -> String {
        let mut out = replace_whole(text, &self.whole);
        if out.chars().count() > MAX_CHARS {
            out = out.chars().take(MAX_CHARS).collect();
            out.push('…');
        }
        for secret in &self.pieces {
            out = replace_pieces(&out, secret);
        }
        out
    }

    /// A provider's error as it may leave the client: every text in it redacted.
    pub fn error(&self, e: ModelError) -> ModelError {
        ModelError {
            message: self.text(&e.message),
            kind: e.kind.map(|k| self.text(&k)),
            code: e.code.map(|c| self.text(&c)),
            param: e.param.map(|p| self.text(&p).into_boxed_str()),
            retry_after: e.retry_after,
            status: e.status,
        }
    }
}

/// `url` as messages show it: scheme, host, port and path; never userinfo or query.
pub fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => "<the provider's URL>".into(),
    }
}

/// Every occurrence of a form, in any ASCII case, replaced by [`MARK`].
fn replace_whole(text: &str, forms: &[String]) -> String {
    let mut out = text.to_string();
    for form in forms {
        // ASCII lowercasing keeps every byte offset, so a match in the lowered text is a
        // match at the same bytes of the original.
        let lower = out.to_ascii_lowercase();
        if !lower.contains(form.as_str()) {
            continue;
        }
        let mut next = String::with_capacity(out.len());
        let mut at = 0;
        for (i, _) in lower.match_indices(form.as_str()) {
            if i < at {
                continue;
            }
            next.push_str(&out[at..i]);
            next.push_str(MARK);
            at = i + form.len();
        }
        next.push_str(&out[at..]);
        out = next;
    }
    out
}

/// Every run of [`MIN_PIECE`] or more characters that also occurs in `secret` (any ASCII
/// case) replaced by [`MARK`]. Quadratic in the text and the secret, which is why texts
/// are cut first.
fn replace_pieces(text: &str, secret: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let l = lower.as_bytes();
    let s = secret.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < l.len() {
        let longest = (0..s.len())
            .map(|j| {
                l[i..]
                    .iter()
                    .zip(&s[j..])
                    .take_while(|(a, b)| a == b)
                    .count()
            })
            .max()
            .unwrap_or(0);
        // A run that would end inside a multibyte character is not a run of the secret
        // (secrets are ASCII where it matters; the check keeps the slicing safe).
        if longest >= MIN_PIECE && text.is_char_boundary(i) && text.is_char_boundary(i + longest) {
            out.push_str(&text[copied..i]);
            out.push_str(MARK);
            i += longest;
            copied = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// `secret` with every byte outside the unreserved set percent-encoded.
fn percent_encoded(secret: &str) -> String {
    secret
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The base64 text `secret` shows wherever it sits in an encoded value: for each of the
/// three alignments, the characters that depend on the secret's bytes alone (the edges,
/// which mix in the neighbours' bits, are left off), in both alphabets.
fn base64_forms(secret: &str) -> Vec<String> {
    let mut forms = Vec::new();
    for lead in 0..3usize {
        let mut bytes = vec![0u8; lead];
        bytes.extend_from_slice(secret.as_bytes());
        let encoded = STANDARD_NO_PAD.encode(&bytes);
        let safe = URL_SAFE_NO_PAD.encode(&bytes);
        // Characters from the first one wholly inside the secret to the last one.
        let first = (lead * 8).div_ceil(6);
        let last = ((lead + secret.len()) * 8) / 6;
        for e in [encoded, safe] {
            if first < last && last <= e.len() {
                forms.push(e[first..last].to_string());
            }
        }
    }
    forms
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-SECRET-UPSTREAM-KEY-0123456789abcdef";

    fn r() -> Redactor {
        Redactor::new(
            Some(KEY),
            "http://u:pw-URLSECRET@h:1/v1?api-key=URLSECRET123",
        )
    }

    #[test]
    fn the_key_goes_in_every_form() {
        let plain = STANDARD_NO_PAD.encode(KEY);
        let basic = STANDARD_NO_PAD.encode(format!("user:{KEY}"));
        for text in [
            format!("your key {KEY} is bad"),
            format!("KEY {}", KEY.to_uppercase()),
            format!("b64 {plain}"),
            format!("basic {basic}"),
            format!("url {}", percent_encoded(KEY)),
        ] {
            let out = r().text(&text);
            assert!(!out.to_lowercase().contains("secret-upstream"), "{out}");
            assert!(!out.contains(&plain[4..20]), "{out}");
            assert!(out.contains(MARK), "{text} -> {out}");
        }
    }

    #[test]
    fn a_piece_of_the_key_left_by_a_cut_goes_too() {
        // The text was cut 12 characters into the key, before it reached us.
        let cut = format!("{}{}", "A".repeat(280), &KEY[..12]);
        let out = r().text(&cut);
        assert!(!out.contains(&KEY[..12]), "{out}");
        assert!(out.ends_with(MARK), "{out}");
        // And the other end of a key cut at the start.
        let out = r().text(&format!("{} tail", &KEY[KEY.len() - 10..]));
        assert_eq!(out, format!("{MARK} tail"));
    }

    #[test]
    fn url_secrets_go_and_shown_urls_have_none() {
        let out = r().text("failed at http://u:pw-URLSECRET@h:1/v1?api-key=URLSECRET123");
        assert!(!out.contains("URLSECRET"), "{out}");
        assert_eq!(
            shown_url("http://u:pw@h:1/v1?api-key=URLSECRET123#x"),
            "http://h:1/v1"
        );
    }

    #[test]
    fn ordinary_text_is_kept_and_long_text_is_cut() {
        let text = "the model is overloaded; try again";
        assert_eq!(r().text(text), text);
        let long = "é".repeat(MAX_CHARS + 5);
        let out = r().text(&long);
        assert_eq!(out.chars().count(), MAX_CHARS + 1);
        // Without secrets nothing but the cut happens.
        assert_eq!(Redactor::new(None, "http://h/v1").text("a key"), "a key");
    }

    /// A piece of a base64 form, left by a cut made before redaction, is a piece too.
    #[test]
    fn a_cut_base64_form_is_found_in_pieces() {
        let r = r();
        for lead in ["", "x", "xx"] {
            let encoded = STANDARD_NO_PAD.encode(format!("{lead}{KEY}"));
            let cut: String = encoded.chars().take(encoded.len() - 4).collect();
            let out = r.text(&format!("Authorization: Basic {cut}"));
            assert!(!out.contains(&cut[cut.len() - 12..]), "{lead:?}: {out}");
            assert!(out.contains(MARK), "{out}");
        }
    }
}

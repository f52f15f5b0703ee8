//! The one way the gateway reads JSON it did not write itself: a client's body, the
//! argument texts inside it, the stored conversation or session history a request
//! continues, a stored response replayed, and (in the mock provider) what the gateway
//! sends. Parsed, a JSON value costs tens of bytes, so a 4 MiB text can become hundreds
//! of megabytes; every parse here first counts the values its text can hold
//! ([`bounded::count_values`]) and takes them from a [`Budget`] — one per request, so
//! one body, its argument strings and the conversation it continues share
//! [`bounded::MAX_JSON_VALUES`] together. A test below fails on any other JSON parse in
//! `src/gateway/`.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::errors::ApiError;
use crate::provider::bounded;

/// Why [`Budget::parse_at`] read nothing.
#[derive(Debug)]
pub enum Unread {
    /// The text holds more values than the budget has left.
    Over(String),
    /// The gateway's pool of values parsed at once is spent (the request may retry).
    Busy(String),
    /// Not JSON, or not a `T` (with the path of the bad value).
    Bad(serde_path_to_error::Error<serde_json::Error>),
    /// A whole document with more text after it (`{...} trailing`, two bodies in one):
    /// not a request (front round 21: it was answered as the first).
    Trailing(String),
}

/// The JSON values one request may still have parsed.
#[derive(Debug)]
pub struct Budget {
    left: usize,
    /// The pool of values parsed at once that this budget draws on too, if any (the
    /// gateway's: [`VALUES_IN_FLIGHT`]), and what it holds of it.
    pool: Option<Arc<Semaphore>>,
    held: Option<OwnedSemaphorePermit>,
}

/// JSON values the requests in flight may have parsed together, in units of
/// [`VALUES_PER_UNIT`]. Each request may parse 200,000, and parsed they cost ~280 bytes
/// each with the gateway's messages (measured: 128 requests of 39,000 one-letter messages
/// held 7 GB); 4,000,000 is about 1.1 GB, twenty requests at their bound at once.
pub const VALUES_IN_FLIGHT: usize = 4_000_000;
pub const VALUES_PER_UNIT: usize = 64;

impl Default for Budget {
    fn default() -> Self {
        Budget::new(bounded::MAX_JSON_VALUES)
    }
}

impl Budget {
    pub fn new(values: usize) -> Self {
        Budget {
            left: values,
            pool: None,
            held: None,
        }
    }

    /// A request's budget that also takes what it parses from `pool` (units of
    /// [`VALUES_PER_UNIT`]), until what [`Budget::into_held`] gives back is dropped.
    pub fn pooled(pool: Arc<Semaphore>) -> Self {
        Budget {
            pool: Some(pool),
            ..Budget::default()
        }
    }

    /// What this budget holds of its pool, to keep for as long as what it parsed lives.
    pub fn into_held(mut self) -> Option<OwnedSemaphorePermit> {
        self.held.take()
    }

    /// Takes what `text` may hold from the budget (and the pool), or says why not.
    fn take(&mut self, text: &[u8]) -> Result<(), Unread> {
        let n = bounded::count_values(text);
        if n > self.left {
            return Err(Unread::Over(format!(
                "it holds about {n} JSON values, over the {} this request may still have read (at most {} in all)",
                self.left,
                bounded::MAX_JSON_VALUES
            )));
        }
        if let Some(pool) = &self.pool {
            let units = u32::try_from(n.div_ceil(VALUES_PER_UNIT)).unwrap_or(u32::MAX);
            let Ok(permit) = Arc::clone(pool).try_acquire_many_owned(units) else {
                return Err(Unread::Busy(format!(
                    "the requests in flight have about {VALUES_IN_FLIGHT} JSON values parsed, the most this gateway holds at once; retry shortly"
                )));
            };
            match &mut self.held {
                Some(held) => held.merge(permit),
                None => self.held = Some(permit),
            }
        }
        self.left -= n;
        Ok(())
    }

    /// `text` as `T`, within the budget.
    pub fn parse<T: DeserializeOwned>(&mut self, text: &str) -> Result<T, String> {
        self.take(text.as_bytes()).map_err(|e| match e {
            Unread::Over(m) | Unread::Busy(m) | Unread::Trailing(m) => m,
            Unread::Bad(e) => e.to_string(),
        })?;
        bounded::read(text).map_err(|e| e.to_string())
    }

    /// `text` as `T` within the budget; a value that is not a `T` is named by its path.
    pub fn parse_at<T: DeserializeOwned>(&mut self, text: &[u8]) -> Result<T, Unread> {
        self.take(text)?;
        let mended = bounded::mend_lone_surrogates(text);
        let text = mended.as_deref().unwrap_or(text);
        let mut de = serde_json::Deserializer::from_slice(text);
        let value = serde_path_to_error::deserialize(&mut de).map_err(Unread::Bad)?;
        de.end().map_err(|e| Unread::Trailing(e.to_string()))?;
        Ok(value)
    }

    /// A request body as `T`: malformed JSON, a wrong type or an unknown field is a 400
    /// naming where; a body over the budget is a 400 before it is parsed.
    pub fn body<T: DeserializeOwned>(&mut self, body: &[u8]) -> Result<T, ApiError> {
        self.parse_at(body).map_err(|e| {
            let e = match e {
                Unread::Over(e) => {
                    return ApiError::bad_request(format!("the body is too intricate: {e}"));
                }
                Unread::Busy(e) => return ApiError::too_many(e),
                Unread::Trailing(e) => {
                    return ApiError::bad_request(format!("the body is not valid JSON: {e}"));
                }
                Unread::Bad(e) => e,
            };
            let path = e.path().to_string();
            let inner = e.into_inner();
            if inner.is_syntax() || inner.is_eof() {
                ApiError::bad_request(format!("the body is not valid JSON: {inner}"))
            } else if path.is_empty() || path == "." {
                ApiError::bad_request(format!("bad request body: {inner}"))
            } else {
                ApiError::bad_request(format!("`{path}`: {inner}")).param(&path)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn a_bad_body_names_the_field() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct B {
            temperature: Option<f64>,
        }
        let e = Budget::default()
            .body::<B>(br#"{"temperature": "hot"}"#)
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("temperature"));
        let e = Budget::default().body::<B>(b"{not json").unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
        let many = format!("[{}]", vec!["[]"; bounded::MAX_JSON_VALUES].join(","));
        let e = Budget::default()
            .body::<Value>(many.as_bytes())
            .unwrap_err();
        assert!(e.message.contains("JSON values"), "{}", e.message);
    }

    /// Text after the body's document is refused (front round 21: `{...} trailing` and two
    /// bodies in one were answered as the first); a lone surrogate escape, as JavaScript
    /// writes half a character, is read as U+FFFD, as JavaScript reads it.
    #[test]
    fn a_body_is_one_document_and_a_lone_surrogate_is_mended() {
        for trailing in [
            &br#"{"input": "x"} trailing"#[..],
            br#"{"input":"x"}{"input":"y"}"#,
        ] {
            let e = Budget::default().body::<Value>(trailing).unwrap_err();
            assert!(e.message.contains("trailing characters"), "{}", e.message);
        }
        let ok: Value = Budget::default()
            .body(b"{\"input\": \"R\\ud83d\"}  \n")
            .unwrap();
        assert_eq!(ok["input"], "R\u{fffd}");
        // A text parsed on its own (a call's `arguments` string) too (front round 22 F2).
        let args: Value = Budget::default().parse(r#"{"q": "\ud83d"}"#).unwrap();
        assert_eq!(args["q"], "\u{fffd}");
    }

    #[test]
    fn one_budget_covers_every_text_of_a_request() {
        let mut budget = Budget::new(10);
        let _: Value = budget.parse("[1, 2, 3]").unwrap();
        let _: Value = budget.parse("[1, 2, 3]").unwrap();
        // 8 of 10 taken: a third list of four does not fit, however small its text.
        let e = budget.parse::<Value>("[1, 2, 3]").unwrap_err();
        assert!(e.contains("JSON values"), "{e}");
    }

    /// The requests in flight share one pool: a request's parse that would take the pool
    /// past its bound is refused (429, the body unparsed), and what a request held comes
    /// back when it is dropped.
    #[test]
    fn the_requests_in_flight_share_one_pool_of_parsed_values() {
        // 5 units of values and the list itself: 6 units each, two fit in 12.
        let pool = Arc::new(Semaphore::new(12));
        let list = format!("[{}]", vec!["0"; 5 * VALUES_PER_UNIT].join(","));
        let mut first = Budget::pooled(Arc::clone(&pool));
        let _: Value = first.body(list.as_bytes()).unwrap();
        let mut second = Budget::pooled(Arc::clone(&pool));
        let _: Value = second.body(list.as_bytes()).unwrap();
        let e = Budget::pooled(Arc::clone(&pool))
            .body::<Value>(list.as_bytes())
            .unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::TOO_MANY_REQUESTS);
        assert!(e.message.contains("retry"), "{}", e.message);
        let held = first.into_held();
        assert!(held.is_some());
        assert_eq!(pool.available_permits(), 0);
        drop(held);
        let _: Value = Budget::pooled(Arc::clone(&pool))
            .body(list.as_bytes())
            .unwrap();
    }

    /// Every JSON parse in `src/gateway/` goes through [`Budget`]: a parse written
    /// anywhere else there fails this test.
    #[test]
    fn no_json_is_parsed_in_the_gateway_but_here() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gateway");
        let banned = [
            "serde_json::from_str",
            "serde_json::from_slice",
            "serde_json::from_value",
            "serde_json::from_reader",
            "Deserializer::from_",
            "bounded::parse(",
        ];
        let mut found = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if path.ends_with("gateway/json.rs") || name == "tests.rs" {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                // Unit tests at a file's end may parse what they wrote themselves.
                let code = text.split("#[cfg(test)]").next().unwrap_or("");
                for (i, line) in code.lines().enumerate() {
                    if banned.iter().any(|b| line.contains(b)) {
                        found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "JSON parsed outside gateway/json.rs:\n{}",
            found.join("\n")
        );
    }
}

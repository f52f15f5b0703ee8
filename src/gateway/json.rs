//! The one way the gateway reads JSON it did not write itself: a client's body, the
//! argument texts inside it, the stored conversation or session history a request
//! continues, a stored response replayed, and (in the mock provider) what the gateway
//! sends. Parsed, a JSON value costs tens of bytes, so a 4 MiB text can become hundreds
//! of megabytes; every parse here first counts the values its text can hold
//! ([`bounded::count_values`]) and takes them from a [`Budget`] — one per request, so
//! one body, its argument strings and the conversation it continues share
//! [`bounded::MAX_JSON_VALUES`] together. A test below fails on any other JSON parse in
//! `src/gateway/`.

use serde::de::DeserializeOwned;

use super::errors::ApiError;
use crate::provider::bounded;

/// Why [`Budget::parse_at`] read nothing.
#[derive(Debug)]
pub enum Unread {
    /// The text holds more values than the budget has left.
    Over(String),
    /// Not JSON, or not a `T` (with the path of the bad value).
    Bad(serde_path_to_error::Error<serde_json::Error>),
}

/// The JSON values one request may still have parsed.
#[derive(Debug)]
pub struct Budget {
    left: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(bounded::MAX_JSON_VALUES)
    }
}

impl Budget {
    pub fn new(values: usize) -> Self {
        Budget { left: values }
    }

    /// Takes what `text` may hold from the budget, or says it is over.
    fn take(&mut self, text: &[u8]) -> Result<(), String> {
        let n = bounded::count_values(text);
        if n > self.left {
            return Err(format!(
                "it holds about {n} JSON values, over the {} this request may still have read (at most {} in all)",
                self.left,
                bounded::MAX_JSON_VALUES
            ));
        }
        self.left -= n;
        Ok(())
    }

    /// `text` as `T`, within the budget.
    pub fn parse<T: DeserializeOwned>(&mut self, text: &str) -> Result<T, String> {
        self.take(text.as_bytes())?;
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    /// `text` as `T` within the budget; a value that is not a `T` is named by its path.
    pub fn parse_at<T: DeserializeOwned>(&mut self, text: &[u8]) -> Result<T, Unread> {
        self.take(text).map_err(Unread::Over)?;
        let mut de = serde_json::Deserializer::from_slice(text);
        serde_path_to_error::deserialize(&mut de).map_err(Unread::Bad)
    }

    /// A request body as `T`: malformed JSON, a wrong type or an unknown field is a 400
    /// naming where; a body over the budget is a 400 before it is parsed.
    pub fn body<T: DeserializeOwned>(&mut self, body: &[u8]) -> Result<T, ApiError> {
        self.parse_at(body).map_err(|e| {
            let e = match e {
                Unread::Over(e) => {
                    return ApiError::bad_request(format!("the body is too intricate: {e}"));
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

    #[test]
    fn one_budget_covers_every_text_of_a_request() {
        let mut budget = Budget::new(10);
        let _: Value = budget.parse("[1, 2, 3]").unwrap();
        let _: Value = budget.parse("[1, 2, 3]").unwrap();
        // 8 of 10 taken: a third list of four does not fit, however small its text.
        let e = budget.parse::<Value>("[1, 2, 3]").unwrap_err();
        assert!(e.contains("JSON values"), "{e}");
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

//! The gateway's own extractors for what a URL carries: axum's answer a path or query it
//! cannot read with a plain-text 400 (`Invalid URL: Invalid UTF-8 in `id``), which no SDK
//! reads as an error (front round 23 F4); these answer in OpenAI's error shape.

use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};

use super::errors::ApiError;

/// The `{id}` of a route. One that is not UTF-8 once decoded names nothing held: a 404.
pub struct Id(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Id {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(id)) => Ok(Id(id)),
            Err(e) => Err(ApiError::not_found(format!(
                "nothing has the id in {}: {}",
                parts.uri.path(),
                e.body_text()
            ))
            .into_response()),
        }
    }
}

/// The query string's parameters as given. Those the gateway reads are read with
/// [`Params::one`]; the others (`include[]=a&include[]=b`, as the SDKs write an array) are
/// let be (front round 25 F2: every repeated key was refused, and `include` with it).
pub struct Params(Vec<(String, String)>);

impl Params {
    /// The value of `key`, if given; given more than once, a 400 (`stream=true&stream=false`
    /// was settled by whichever came last, front round 24).
    pub fn one(&self, key: &str) -> Result<Option<&str>, ApiError> {
        let mut found = self.0.iter().filter(|(k, _)| k == key).map(|(_, v)| v);
        match (found.next(), found.next()) {
            (Some(_), Some(_)) => Err(ApiError::bad_request(format!(
                "{key}: given more than once in the query string"
            ))
            .param(key)),
            (value, _) => Ok(value.map(String::as_str)),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<Vec<(String, String)>>::from_request_parts(parts, state).await {
            Ok(Query(pairs)) => Ok(Params(pairs)),
            Err(e) => Err(ApiError::bad_request(format!(
                "the query string cannot be read: {}",
                e.body_text()
            ))
            .into_response()),
        }
    }
}

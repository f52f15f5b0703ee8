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

/// The query string's parameters, each once; a query that cannot be read is a 400.
pub struct Params(pub std::collections::HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let pairs = match Query::<Vec<(String, String)>>::from_request_parts(parts, state).await {
            Ok(Query(pairs)) => pairs,
            Err(e) => {
                return Err(ApiError::bad_request(format!(
                    "the query string cannot be read: {}",
                    e.body_text()
                ))
                .into_response());
            }
        };
        // A parameter given twice (`stream=true&stream=false`) is refused, not settled by
        // whichever came last (front round 24).
        let mut params = std::collections::HashMap::with_capacity(pairs.len());
        for (key, value) in pairs {
            if params.contains_key(&key) {
                let named = crate::shown::head(&key, 64).to_string();
                return Err(ApiError::bad_request(format!(
                    "{named}: given more than once in the query string"
                ))
                .param(&named)
                .into_response());
            }
            params.insert(key, value);
        }
        Ok(Params(params))
    }
}

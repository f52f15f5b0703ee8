//! The HTTP fronts of a model: [`server`], the gateway — an OpenAI-compatible endpoint
//! ([`responses`], [`chat`]) that runs one [`crate::agent`] turn per request ([`turn`])
//! against the configured provider, streamed ([`sse`]) or not, keeping responses for
//! `previous_response_id` ([`store`]); [`client`], the HTTP client of that provider; and
//! [`mock`], a scripted provider for QA and tests.

pub mod answers;
mod chat;
pub mod client;
pub mod errors;
mod extract;
mod forward;
mod joined;
pub(crate) mod json;
mod kept;
pub mod mock;
pub mod redact;
mod responses;
pub mod server;
mod sessions;
mod sse;
pub mod store;
mod turn;

//! The HTTP fronts of a model: [`server`], the gateway (`POST /v1/responses` runs one
//! [`crate::agent`] turn against the configured provider), [`client`], the HTTP client of that
//! provider, and [`mock`], a scripted provider for QA and tests.

pub mod client;
pub mod mock;
pub mod server;

//! The agent loop ([`agent`]): the surface and the conversation to the model, tool calls
//! through the one dispatch path, results back, until the turn ends. The HTTP gateway and
//! the mock provider build on it.

pub mod agent;
pub mod client;
pub mod mock;
pub mod server;

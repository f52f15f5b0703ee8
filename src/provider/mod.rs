//! Provider formats: the request body each model API receives for a tool list and a
//! conversation, and the tool calls each API sends back, normalised to one shape.
//!
//! Four formats: OpenAI Chat Completions, OpenAI Responses, Anthropic
//! Messages and Google Gemini `generateContent`. The flow, one way:
//!
//! - out: [`ToolSpec`]s and the conversation's [`Item`]s (provider-neutral) ->
//!   [`WireNames`] (names the provider accepts) -> [`payload::request_body`] (the exact,
//!   byte-stable body; [`schema`] shapes each tool's schema for the format);
//! - in: a response -> [`normalize::tool_calls`], or the events of a stream (an SSE body
//!   read by [`normalize::parse_sse`]) -> [`normalize::StreamAssembler`]; either gives
//!   [`ToolCall`]s `{id, name, arguments: object}` -> [`ToolCall::with_original_names`]
//!   (back to catalog names);
//! - beside them: [`options`], what a client asks beyond tools and conversation (model,
//!   sampling, limits, format, tool choice), spelled per provider; and the answer's text,
//!   whole or streamed ([`normalize::reply_text`], [`normalize::stream_text`]).
//!
//! Nothing here talks to the network, and nothing here knows the agent loop. There is one
//! encoder: `toolsearch surface` prints what [`payload::request_body`] builds for one
//! prompt, the gateway's client sends what it builds for the whole conversation, and the
//! mock provider answers with its assistant shapes. So what `surface` reports and what QA
//! measures (the bodies the mock recorded) is what a provider gets.

pub mod bounded;
pub mod normalize;
pub mod options;
pub mod payload;
pub mod schema;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Error;

pub use normalize::{StreamAssembler, Usage, parse_sse, tool_calls};
pub use options::{OutputFormat, Reasoning, RequestOptions, ToolChoice};
pub use payload::{PayloadSummary, request_body, summary, tool_bytes};

/// One tool as the model sees it, provider-neutral.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// A JSON Schema object for the arguments.
    pub parameters: Value,
    /// The tool's own `strict` (a gateway client's tool), over the request's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// A provider's request and response format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Provider {
    OpenaiCompletions,
    OpenaiResponses,
    Anthropic,
    Google,
}

impl Provider {
    /// Every format, in the order the documentation lists them.
    pub const ALL: [Provider; 4] = [
        Provider::OpenaiCompletions,
        Provider::OpenaiResponses,
        Provider::Anthropic,
        Provider::Google,
    ];

    /// The stable name used in configuration and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenaiCompletions => "openai-completions",
            Provider::OpenaiResponses => "openai-responses",
            Provider::Anthropic => "anthropic",
            Provider::Google => "google",
        }
    }

    /// Parses [`Provider::as_str`]'s names exactly; anything else is `invalid-request`
    /// naming the accepted values, so a typo in a config is caught where it is made.
    pub fn parse(name: &str) -> Result<Provider, Error> {
        Provider::ALL
            .into_iter()
            .find(|p| p.as_str() == name)
            .ok_or_else(|| {
                Error::InvalidRequest(format!(
                    "unknown provider format `{name}`; expected one of {}",
                    Provider::ALL.map(Provider::as_str).join(", ")
                ))
            })
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Provider {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Provider::parse(s)
    }
}

/// Everything one request body is built from.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The system prompt; empty means none is sent.
    pub system: &'a str,
    /// The conversation so far, oldest first. The first request of a turn (what `surface`
    /// reports) is `[Item::User(prompt)]`.
    pub conversation: &'a [Item<'a>],
    pub tools: &'a [ToolSpec],
    /// Sent in the body by every format but Google's, which takes it in the URL.
    pub model: &'a str,
    /// OpenAI Responses strict mode: schemas are rewritten to what strict mode accepts
    /// (see [`schema`]).
    pub strict: bool,
    /// Google: send `parameters` reduced to Gemini's OpenAPI 3.0 subset instead of
    /// `parametersJsonSchema` (for models or endpoints without JSON Schema support).
    pub google_legacy: bool,
}

/// One item of the conversation a request carries, provider-neutral. Tool names are
/// catalog names: the body sends their [`WireNames`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Item<'a> {
    /// What the user said.
    User(&'a str),
    /// One answer of the model: its text (may be empty) and the tool calls it made.
    Assistant {
        text: &'a str,
        calls: &'a [ToolCall],
    },
    /// The result of one tool call, as the model reads it.
    ToolResult {
        call_id: &'a str,
        /// The tool that was called (Gemini matches results by name, not id).
        name: &'a str,
        content: &'a str,
        is_error: bool,
    },
}

/// One tool call, whatever provider it came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's call id, or `call_<n>` (n the 1-based position of the call in its
    /// response) when the provider gave none.
    pub id: String,
    /// The name as the provider sent it; see [`ToolCall::with_original_names`].
    pub name: String,
    /// Always a JSON object (`{}` when the model's were unreadable).
    pub arguments: Value,
    /// Why the model's arguments could not be read (not JSON, not an object): such a call
    /// is not run but answered to the model, which can call again; it failed the whole
    /// turn, the work of its earlier rounds lost (front round 17 F7). Not kept with the
    /// conversation: its result says it.
    #[serde(skip)]
    pub unreadable: Option<String>,
}

impl ToolCall {
    /// The call with its wire name mapped back to the catalog name. A name the list does
    /// not know (a model inventing a tool) is kept as sent, so the dispatcher can answer it
    /// with `unknown-tool` and suggestions instead of it vanishing here.
    pub fn with_original_names(mut self, names: &WireNames) -> ToolCall {
        if let Some(original) = names.original(&self.name) {
            self.name = original.to_string();
        }
        self
    }
}

/// Errors of this layer, each with a stable code. They are not [`crate::Error`] variants
/// because they describe what a provider sent, not what our caller asked for; the gateway
/// turns them into tool-error results or failed turns.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    /// A tool call that cannot be used: no name, or arguments that are not a JSON object
    /// (or not JSON at all). `tool` is the name, or `#n` for a nameless call.
    #[error("bad tool call `{tool}`: {message}")]
    BadToolCall { tool: String, message: String },

    /// A response or stream event that does not have its format's shape.
    #[error("malformed provider response: {0}")]
    BadResponse(String),

    /// The provider answered with an error object instead of a result: its message, and
    /// the `type` and `code` it gave (kept so a gateway client hears a rate limit as one,
    /// not as a bad gateway).
    #[error("the provider reported an error: {message}")]
    Upstream {
        message: String,
        kind: Option<String>,
        code: Option<String>,
    },
}

impl ProviderError {
    /// The stable machine-readable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            ProviderError::BadToolCall { .. } => "bad-tool-call",
            ProviderError::BadResponse(_) => "bad-provider-response",
            ProviderError::Upstream { .. } => "provider-error",
        }
    }
}

/// Longest tool name every format accepts.
pub const MAX_WIRE_NAME: usize = 64;
/// Hex digits of the hash suffix a projected name gets when it was cut or collided.
const HASH_DIGITS: usize = 8;

/// Tool names as one provider accepts them, and the way back.
///
/// Catalog names may hold characters a provider refuses (`github.create_issue`,
/// `mcp/notion:search`) or be longer than 64 bytes. OpenAI and Anthropic accept
/// `^[a-zA-Z0-9_-]{1,64}$`; Google accepts letters, digits, `_ . : -`, at most 64, starting
/// with a letter or `_`.
///
/// The projection, chosen to be readable, deterministic and collision-free:
/// 1. a name the provider accepts is sent as is;
/// 2. otherwise every refused character becomes `_` (for Google a name that does not start
///    with a letter or `_` gets a leading `_`; an empty name becomes `tool`);
/// 3. a result longer than 64 bytes is cut to 55 and gets `_` and 8 hex digits of a hash
///    (FNV-1a) of the original name;
/// 4. a result that another tool already uses (an accepted name, or an earlier projection;
///    projections are made in byte order of the original names) gets the same suffix, and,
///    in the astronomically unlikely case that still collides, a hash salted with a counter.
///
/// A name's projection therefore depends only on the name itself unless it collides, and
/// the same tool list always gives the same wire names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireNames {
    provider: Provider,
    to_wire: HashMap<String, String>,
    to_original: HashMap<String, String>,
}

impl WireNames {
    /// The wire names of a tool list for `provider`.
    pub fn new(provider: Provider, tools: &[ToolSpec]) -> WireNames {
        WireNames::from_names(provider, tools.iter().map(|t| t.name.as_str()))
    }

    /// The wire names of a list of tool names (duplicates share one wire name).
    pub fn from_names<'a>(
        provider: Provider,
        names: impl IntoIterator<Item = &'a str>,
    ) -> WireNames {
        let mut unique: Vec<&str> = names.into_iter().collect();
        unique.sort_unstable();
        unique.dedup();

        let mut to_wire = HashMap::with_capacity(unique.len());
        let mut to_original = HashMap::with_capacity(unique.len());
        let mut taken: HashSet<String> = HashSet::with_capacity(unique.len());
        for &name in unique.iter().filter(|n| is_allowed(provider, n)) {
            taken.insert(name.to_string());
            to_wire.insert(name.to_string(), name.to_string());
            to_original.insert(name.to_string(), name.to_string());
        }
        for &name in unique.iter().filter(|n| !is_allowed(provider, n)) {
            let base = project(provider, name);
            let mut wire = base.clone();
            let mut salt = 0u32;
            while taken.contains(&wire) {
                wire = with_suffix(&base, name, salt);
                salt += 1;
            }
            taken.insert(wire.clone());
            to_wire.insert(name.to_string(), wire.clone());
            to_original.insert(wire, name.to_string());
        }
        WireNames {
            provider,
            to_wire,
            to_original,
        }
    }

    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// The name to send for `name`. A name outside the list is returned unchanged: the
    /// list is the contract, and inventing a projection for a stranger could not be mapped
    /// back.
    pub fn wire_name<'a>(&'a self, name: &'a str) -> &'a str {
        self.to_wire.get(name).map_or(name, String::as_str)
    }

    /// The catalog name behind a wire name; `None` for a name no listed tool has.
    pub fn original(&self, wire: &str) -> Option<&str> {
        self.to_original.get(wire).map(String::as_str)
    }

    /// How many names had to be changed for this provider.
    pub fn renamed(&self) -> usize {
        self.to_wire.iter().filter(|(k, v)| k != v).count()
    }

    /// Whether `provider` accepts `name` exactly as it is.
    pub fn is_allowed(provider: Provider, name: &str) -> bool {
        is_allowed(provider, name)
    }
}

fn is_allowed(provider: Provider, name: &str) -> bool {
    if name.is_empty() || name.len() > MAX_WIRE_NAME {
        return false;
    }
    if provider == Provider::Google && !starts_well_for_google(name) {
        return false;
    }
    name.chars().all(|c| allowed_char(provider, c))
}

fn allowed_char(provider: Provider, c: char) -> bool {
    c.is_ascii_alphanumeric()
        || c == '_'
        || c == '-'
        || (provider == Provider::Google && (c == '.' || c == ':'))
}

fn starts_well_for_google(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
}

/// Steps 2 and 3 of the projection. The result is ASCII, so byte cuts are char cuts.
fn project(provider: Provider, name: &str) -> String {
    let mut wire: String = name
        .chars()
        .map(|c| if allowed_char(provider, c) { c } else { '_' })
        .collect();
    if wire.is_empty() {
        return with_suffix("tool", name, 0);
    }
    if provider == Provider::Google && !starts_well_for_google(&wire) {
        wire.insert(0, '_');
    }
    if wire.len() > MAX_WIRE_NAME {
        wire = with_suffix(&wire, name, 0);
    }
    wire
}

/// `base` cut to leave room for `_` and the hash of `original` (salted when `salt > 0`).
fn with_suffix(base: &str, original: &str, salt: u32) -> String {
    let keep = MAX_WIRE_NAME - HASH_DIGITS - 1;
    let base = &base[..base.len().min(keep)];
    let mut hash = fnv1a(original.as_bytes());
    if salt > 0 {
        hash = fnv1a_continue(hash, &salt.to_le_bytes());
    }
    let short = (hash ^ (hash >> 32)) as u32;
    format!("{base}_{short:08x}")
}

/// FNV-1a, 64 bits: tiny, stable across releases and platforms (unlike `DefaultHasher`).
fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_continue(0xcbf2_9ce4_8422_2325, bytes)
}

fn fnv1a_continue(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

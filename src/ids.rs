//! Tool identity: where a tool comes from ([`Source`]), its id
//! (`{source}:{source_name}:{name}`), the safe form of a server or plugin name inside an id,
//! and [`ToolKey`], what policy and patterns match a tool by.
//!
//! A leaf: config, policy and catalog all name tools, and none of them may depend on another
//! just to spell an id.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a tool comes from. The source decides trust: only `openclaw` tools (core and
/// plugins, shipped with the agent) have their parameter text indexed and their argument
/// signature shown; MCP servers and clients are third parties whose schemas are shown only
/// on `describe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Openclaw,
    Mcp,
    Client,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Openclaw => "openclaw",
            Source::Mcp => "mcp",
            Source::Client => "client",
        }
    }

    pub fn is_trusted(self) -> bool {
        self == Source::Openclaw
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `{source}:{source_name}:{name}`.
pub fn tool_id(source: Source, source_name: &str, name: &str) -> String {
    format!("{source}:{source_name}:{name}")
}

/// The name a server or plugin id takes inside ids: lowercase ASCII letters, digits, `_`
/// and `-`; anything else becomes `_`. Keeps `:` (the id separator) out of source names.
pub fn safe_name(raw: &str) -> String {
    let cleaned: String = raw
        .trim()
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if cleaned.is_empty() {
        "unnamed".to_string()
    } else {
        cleaned
    }
}

/// What a tool is matched by in allow, deny, approval and `tools.active` lists: its name and
/// its id. Catalog descriptors implement it; so could anything else policy must judge.
pub trait ToolKey {
    fn name(&self) -> &str;
    fn id(&self) -> String;
}

/// `bytes` random bytes from the OS's source, as hex. Without OS randomness (never seen on
/// Linux) a clock-and-counter string, unique in the process but guessable, is still better
/// than no answer.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    if getrandom::fill(&mut buf).is_err() {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        return format!("{t:x}{n:x}");
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_join_source_source_name_and_name() {
        assert_eq!(
            tool_id(Source::Openclaw, "github", "create_issue"),
            "openclaw:github:create_issue"
        );
        assert_eq!(
            tool_id(Source::Client, "client", "pick_file"),
            "client:client:pick_file"
        );
    }

    #[test]
    fn safe_names_drop_separators() {
        assert_eq!(safe_name("My Server:v2"), "my_server_v2");
        assert_eq!(safe_name("  "), "unnamed");
        assert_eq!(safe_name("calendar-pro"), "calendar-pro");
    }
}

//! Policy: which tools exist at all for this agent, profile, sandbox, session and channel.
//!
//! The effective policy is the intersection of the top-level `[tools] allow/deny` and every
//! configured level (`[policy.agent]`, `[policy.profile]`, `[policy.sandbox]`,
//! `[policy.session]`, `[policy.channel]`): a tool must be allowed by each and denied by none.
//! Deny wins within a level, and a level with no `allow` list allows everything the others
//! allow. A tool outside the effective policy is removed before the catalog is indexed, so
//! search cannot return it and describe and call say it is unknown (fail closed).
//!
//! This module decides; it never runs a tool (hooks run the configured hook programs, which
//! only answer allow, deny or rewrite) and never reads the index.

pub mod approval;
pub mod hooks;
pub mod pattern;

use crate::config::{Config, PolicyLevel};
use crate::error::Result;
use crate::ids::ToolKey;
pub use pattern::{PatternSet, Toolsets};

#[derive(Debug, Clone)]
struct Rule {
    level: String,
    allow: Option<PatternSet>,
    deny: PatternSet,
}

/// The compiled effective policy. The default allows every tool.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    rules: Vec<Rule>,
}

impl Policy {
    /// Compiles the policy of a config; toolsets expand inside every list.
    pub fn from_config(config: &Config, toolsets: &Toolsets) -> Result<Self> {
        let mut rules = vec![compile_rule(
            "tools",
            &PolicyLevel {
                allow: Some(config.tools.allow.clone()),
                deny: config.tools.deny.clone(),
            },
            toolsets,
        )?];
        for (name, level) in config.policy.levels() {
            if let Some(level) = level {
                rules.push(compile_rule(&format!("policy.{name}"), level, toolsets)?);
            }
        }
        Ok(Policy { rules })
    }

    /// `None` when the policy permits the tool, otherwise the rule that keeps it out
    /// (for debug logs only: a filtered tool is never described to the model).
    pub fn refusal(&self, tool: &impl ToolKey) -> Option<String> {
        for rule in &self.rules {
            if rule.deny.matches(tool) {
                return Some(format!("denied by {}.deny", rule.level));
            }
            if let Some(allow) = &rule.allow
                && !allow.matches(tool)
            {
                return Some(format!("not in {}.allow", rule.level));
            }
        }
        None
    }

    pub fn permits(&self, tool: &impl ToolKey) -> bool {
        self.refusal(tool).is_none()
    }

    /// Whether a tool of this name and id is permitted (for tools that are not catalog
    /// entries, such as the surfaces' own `tool_search_code`).
    pub fn permits_parts(&self, name: &str, id: &str) -> bool {
        self.rules.iter().all(|r| {
            !r.deny.matches_parts(name, id)
                && r.allow.as_ref().is_none_or(|a| a.matches_parts(name, id))
        })
    }
}

fn compile_rule(level: &str, config: &PolicyLevel, toolsets: &Toolsets) -> Result<Rule> {
    Ok(Rule {
        level: level.to_string(),
        allow: match &config.allow {
            Some(list) => Some(PatternSet::compile(
                list,
                toolsets,
                &format!("{level}.allow"),
            )?),
            None => None,
        },
        deny: PatternSet::compile(&config.deny, toolsets, &format!("{level}.deny"))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Source, ToolDescriptor};

    fn tool(source: Source, source_name: &str, name: &str) -> ToolDescriptor {
        ToolDescriptor::builder(source, source_name, name)
            .origin("test")
            .build()
    }

    fn policy(toml_text: &str) -> Policy {
        let config = Config::from_toml_str(toml_text, "t.toml".as_ref()).unwrap();
        let ts = Toolsets::new(
            &config.toolsets,
            [("openclaw", "github"), ("mcp", "github")],
        );
        Policy::from_config(&config, &ts).unwrap()
    }

    #[test]
    fn deny_wins_over_allow() {
        let p = policy("[tools]\nallow = [\"*\"]\ndeny = [\"mcp:github:*\"]\n");
        assert!(p.permits(&tool(Source::Openclaw, "github", "create_issue")));
        let refused = p.refusal(&tool(Source::Mcp, "github", "create_issue"));
        assert_eq!(refused.as_deref(), Some("denied by tools.deny"));
    }

    #[test]
    fn levels_intersect() {
        let p = policy(
            "[tools]\nallow = [\"*\"]\n[policy.agent]\nallow = [\"github\", \"message\"]\n[policy.channel]\ndeny = [\"*delete*\"]\n",
        );
        assert!(p.permits(&tool(Source::Openclaw, "github", "create_issue")));
        assert!(p.permits(&tool(Source::Openclaw, "core", "message")));
        assert_eq!(
            p.refusal(&tool(Source::Openclaw, "core", "web_search"))
                .as_deref(),
            Some("not in policy.agent.allow")
        );
        assert_eq!(
            p.refusal(&tool(Source::Openclaw, "github", "delete_branch"))
                .as_deref(),
            Some("denied by policy.channel.deny")
        );
    }

    #[test]
    fn an_empty_allow_list_allows_nothing() {
        let p = policy("[tools]\nallow = []\n");
        assert!(!p.permits(&tool(Source::Openclaw, "core", "message")));
    }
}

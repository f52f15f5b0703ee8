//! Tool patterns: how allow, deny, approval and `tools.active` lists name tools.
//!
//! A pattern is one of:
//! - a glob with `:` in it, matched against the id (`mcp:github:*`, `openclaw:*:delete_*`);
//! - a glob without `:`, matched against the name (`create_*`, `message`);
//! - a toolset: `group:NAME`, or a bare word that is a toolset's name or alias (`github`).
//!   A bare word also matches a tool of that name, so `github` names both the toolset and a
//!   tool called `github`, if there is one.
//!
//! Matching is ASCII case-insensitive: a deny rule written `Exec_Command` must not let
//! `exec_command` through. `*` matches any run of characters (`:` included), `?` one.

use std::collections::BTreeMap;

use globset::{GlobBuilder, GlobMatcher};

use crate::config::Toolset;
use crate::error::{Error, Result};
use crate::ids::ToolKey;

/// Toolsets by name. Every plugin id and MCP server name is an implicit toolset of all
/// its tools (`github` = `openclaw:github:*`), of every source of that name together (a
/// plugin and a server both called `github`: `deny = ["github"]` named only the plugin's,
/// and the server's `delete_repo` ran, review 17); a configured toolset of the same name
/// wins.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Toolsets {
    by_name: BTreeMap<String, Vec<String>>,
    /// A source's other spelling (a server's config key) -> the name its ids use.
    spelled: BTreeMap<String, String>,
}

impl Toolsets {
    /// Builds the lookup from configured toolsets and the source names present.
    pub fn new<'a>(
        configured: &BTreeMap<String, Toolset>,
        sources: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Self {
        let mut by_name = BTreeMap::new();
        for (source, source_name) in sources {
            if source_name == "core" || source_name == "client" {
                continue;
            }
            let members: &mut Vec<String> =
                by_name.entry(source_name.to_ascii_lowercase()).or_default();
            let pattern = format!("{source}:{source_name}:*");
            if !members.contains(&pattern) {
                members.push(pattern);
            }
        }
        for (name, set) in configured {
            by_name.insert(name.to_ascii_lowercase(), set.patterns.clone());
            for alias in &set.aliases {
                by_name.insert(alias.to_ascii_lowercase(), set.patterns.clone());
            }
        }
        Toolsets {
            by_name,
            spelled: BTreeMap::new(),
        }
    }

    /// `alias` names what `name` names, unless `alias` is a toolset already (a server's
    /// config key for its safe name: `deny = ["Corp.Shell"]` matched nothing, and the
    /// tools of `[mcp.servers."Corp.Shell"]`, ids `mcp:corp_shell:*`, stayed callable,
    /// review 18).
    ///
    /// Inside an id pattern too: `mcp:Corp.Shell:*` names `mcp:corp_shell:*` (it matched
    /// nothing, silently).
    pub fn alias(&mut self, alias: &str, name: &str) {
        let key = alias.to_ascii_lowercase();
        if key != name.to_ascii_lowercase() {
            self.spelled.insert(key.clone(), name.to_string());
        }
        if self.by_name.contains_key(&key) {
            return;
        }
        if let Some(members) = self.get(name).cloned() {
            self.by_name.insert(key, members);
        }
    }

    /// An id pattern whose source part is another spelling of a source, with the spelling
    /// its ids use (`mcp:Corp.Shell:*` -> `mcp:corp_shell:*`).
    fn respell(&self, pattern: &str) -> Option<String> {
        let mut parts = pattern.splitn(3, ':');
        let (source, name, rest) = (parts.next()?, parts.next()?, parts.next()?);
        let id_name = self.spelled.get(&name.to_ascii_lowercase())?;
        Some(format!("{source}:{id_name}:{rest}"))
    }

    /// Whether `name` is a toolset (a configured one, a source's name, an alias).
    pub fn names(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    fn get(&self, name: &str) -> Option<&Vec<String>> {
        self.by_name.get(&name.to_ascii_lowercase())
    }
}

/// A compiled list of patterns.
#[derive(Debug, Clone, Default)]
pub struct PatternSet {
    id_globs: Vec<GlobMatcher>,
    name_globs: Vec<GlobMatcher>,
    /// The patterns as written, to report the ones that matched nothing.
    written: Vec<String>,
}

/// Toolsets may name toolsets; this bounds the expansion so a cycle cannot loop.
const MAX_TOOLSET_DEPTH: usize = 8;

impl PatternSet {
    /// Compiles `patterns`, expanding toolsets. `what` names the list in errors
    /// (`tools.deny`, `policy.channel.allow`).
    pub fn compile(patterns: &[String], toolsets: &Toolsets, what: &str) -> Result<Self> {
        let mut set = PatternSet {
            written: patterns.to_vec(),
            ..Default::default()
        };
        for p in patterns {
            set.add(p, toolsets, what, 0)?;
        }
        Ok(set)
    }

    fn add(&mut self, pattern: &str, toolsets: &Toolsets, what: &str, depth: usize) -> Result<()> {
        let pattern = pattern.trim();
        if pattern.is_empty() {
            return Err(Error::Usage(format!("{what}: an empty tool pattern")));
        }
        if let Some(group) = pattern.strip_prefix("group:") {
            let Some(members) = toolsets.get(group) else {
                return Err(Error::Usage(format!(
                    "{what}: `{pattern}` names no toolset; define [toolsets.{group}] or use a plugin or server name"
                )));
            };
            return self.add_toolset(members.clone(), toolsets, what, depth);
        }
        let glob = compile_glob(pattern, what)?;
        if pattern.contains(':') {
            self.id_globs.push(glob);
            if let Some(respelled) = toolsets.respell(pattern) {
                self.id_globs.push(compile_glob(&respelled, what)?);
            }
        } else {
            self.name_globs.push(glob);
            let plain = !pattern.contains(['*', '?', '[', '{']);
            if plain && let Some(members) = toolsets.get(pattern) {
                self.add_toolset(members.clone(), toolsets, what, depth)?;
            }
        }
        Ok(())
    }

    fn add_toolset(
        &mut self,
        members: Vec<String>,
        toolsets: &Toolsets,
        what: &str,
        depth: usize,
    ) -> Result<()> {
        if depth >= MAX_TOOLSET_DEPTH {
            return Err(Error::Usage(format!(
                "{what}: toolsets nest more than {MAX_TOOLSET_DEPTH} deep (a cycle?)"
            )));
        }
        for m in members {
            self.add(&m, toolsets, what, depth + 1)?;
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.id_globs.is_empty() && self.name_globs.is_empty()
    }

    /// Whether the tool with this name and id matches any pattern.
    pub fn matches_parts(&self, name: &str, id: &str) -> bool {
        self.name_globs.iter().any(|g| g.is_match(name))
            || self.id_globs.iter().any(|g| g.is_match(id))
    }

    pub fn matches(&self, tool: &impl ToolKey) -> bool {
        self.matches_parts(tool.name(), &tool.id())
    }

    /// The patterns as written that match none of `tools`.
    pub fn unmatched<'a, T: ToolKey>(&'a self, tools: &[T], toolsets: &Toolsets) -> Vec<&'a str> {
        self.written
            .iter()
            .filter(|p| {
                let single =
                    PatternSet::compile(std::slice::from_ref(*p), toolsets, "").unwrap_or_default();
                !tools.iter().any(|t| single.matches(t))
            })
            .map(String::as_str)
            .collect()
    }
}

/// Case is ignored by the matcher, not by lowercasing the pattern: lowercased, a class
/// changes meaning (`[A-z]` holds `_`, `[a-z]` does not: `deny = ["create[A-z]issue"]`
/// stopped denying `create_issue`; `[0-Z]` widened to `[0-z]`; review 19 F1).
fn compile_glob(pattern: &str, what: &str) -> Result<GlobMatcher> {
    GlobBuilder::new(pattern)
        .case_insensitive(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| Error::Usage(format!("{what}: bad tool pattern `{pattern}`: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(patterns: &[&str], toolsets: &Toolsets) -> PatternSet {
        let patterns: Vec<String> = patterns.iter().map(|s| s.to_string()).collect();
        PatternSet::compile(&patterns, toolsets, "test").unwrap()
    }

    #[test]
    fn colon_patterns_match_ids_and_bare_ones_names() {
        let none = Toolsets::default();
        let s = set(&["mcp:github:*"], &none);
        assert!(s.matches_parts("create_issue", "mcp:github:create_issue"));
        assert!(!s.matches_parts("create_issue", "openclaw:github:create_issue"));
        let s = set(&["delete_*"], &none);
        assert!(s.matches_parts("delete_event", "openclaw:calendar:delete_event"));
        assert!(!s.matches_parts("undelete", "openclaw:calendar:undelete"));
        let s = set(&["openclaw:*:delete_*"], &none);
        assert!(s.matches_parts("delete_event", "openclaw:calendar:delete_event"));
    }

    /// A plugin and a server of one name: the bare word names the tools of both (review
    /// 17: `deny = ["github"]` left the server's `delete_repo` callable).
    #[test]
    fn a_name_shared_by_two_sources_names_the_tools_of_both() {
        let ts = Toolsets::new(
            &BTreeMap::new(),
            [("openclaw", "github"), ("mcp", "github"), ("mcp", "github")],
        );
        let s = set(&["github"], &ts);
        assert!(s.matches_parts("create_issue", "openclaw:github:create_issue"));
        assert!(s.matches_parts("delete_repo", "mcp:github:delete_repo"));
        assert_eq!(ts.get("github").unwrap().len(), 2, "{ts:?}");
    }

    /// A server's config key names it inside an id pattern as it does bare (review 18:
    /// `mcp:Corp.Shell:*` matched nothing, and said nothing).
    #[test]
    fn a_config_key_names_its_server_inside_an_id_pattern() {
        let mut ts = Toolsets::new(&BTreeMap::new(), [("mcp", "corp_shell")]);
        ts.alias("Corp.Shell", "corp_shell");
        let s = set(&["mcp:Corp.Shell:*"], &ts);
        assert!(s.matches_parts("run", "mcp:corp_shell:run"));
        assert!(!s.matches_parts("run", "mcp:other:run"));
        let s = set(&["Corp.Shell"], &ts);
        assert!(s.matches_parts("run", "mcp:corp_shell:run"));
    }

    #[test]
    fn matching_ignores_ascii_case() {
        let s = set(&["Exec_Command"], &Toolsets::default());
        assert!(s.matches_parts("exec_command", "openclaw:core:exec_command"));
        let s = set(&["exec_command"], &Toolsets::default());
        assert!(s.matches_parts("EXEC_COMMAND", "openclaw:core:EXEC_COMMAND"));
    }

    /// A class means what it says as written, case aside: `[A-z]` holds `_` and the
    /// letters between `Z` and `a`; `[0-Z]` does not hold lowercase-only signs; `[Z-a]`
    /// is a valid range (review 19 F1: the pattern was lowercased first).
    #[test]
    fn classes_keep_their_ranges_as_written() {
        let none = Toolsets::default();
        let s = set(&["create[A-z]issue"], &none);
        assert!(s.matches_parts("create_issue", "openclaw:github:create_issue"));
        let s = set(&["x[0-Z]y"], &none);
        assert!(!s.matches_parts("x{y", "openclaw:t:x{y"));
        assert!(s.matches_parts("x@y", "openclaw:t:x@y"));
        let s = set(&["x[Z-a]y"], &none);
        assert!(s.matches_parts("x_y", "openclaw:t:x_y"));
    }

    #[test]
    fn toolsets_expand_by_name_alias_and_group_prefix() {
        let mut configured = BTreeMap::new();
        configured.insert(
            "planning".to_string(),
            Toolset {
                patterns: vec!["calendar".into(), "openclaw:tickets:*".into()],
                aliases: vec!["plan".into()],
            },
        );
        let ts = Toolsets::new(
            &configured,
            [
                ("openclaw", "github"),
                ("openclaw", "calendar"),
                ("openclaw", "tickets"),
            ],
        );
        let s = set(&["github"], &ts);
        assert!(s.matches_parts("create_issue", "openclaw:github:create_issue"));
        let s = set(&["plan"], &ts);
        assert!(s.matches_parts("create_event", "openclaw:calendar:create_event"));
        assert!(s.matches_parts("create_ticket", "openclaw:tickets:create_ticket"));
        assert!(!s.matches_parts("create_issue", "openclaw:github:create_issue"));
        let s = set(&["group:planning"], &ts);
        assert!(s.matches_parts("create_ticket", "openclaw:tickets:create_ticket"));
        let e = PatternSet::compile(&["group:nope".into()], &ts, "tools.allow").unwrap_err();
        assert!(
            e.to_string()
                .contains("tools.allow: `group:nope` names no toolset")
        );
    }

    #[test]
    fn toolset_cycles_are_an_error_not_a_hang() {
        let mut configured = BTreeMap::new();
        configured.insert(
            "a".to_string(),
            Toolset {
                patterns: vec!["b".into()],
                aliases: vec![],
            },
        );
        configured.insert(
            "b".to_string(),
            Toolset {
                patterns: vec!["a".into()],
                aliases: vec![],
            },
        );
        let ts = Toolsets::new(&configured, []);
        let e = PatternSet::compile(&["a".into()], &ts, "tools.allow").unwrap_err();
        assert!(e.to_string().contains("cycle"), "{e}");
    }
}

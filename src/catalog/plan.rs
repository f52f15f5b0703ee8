//! The registry merge and the planner: from every loaded descriptor to the visible,
//! direct-only and hidden sets, checking the contract README's "The planner" states.
//!
//! Order of work, each step on the output of the one before:
//! 1. **Contract: duplicates.** Two descriptors of one source (`source:source_name`) with
//!    one name are `duplicate-tool-name`, whatever else they say.
//! 2. **Registry merge.** OpenClaw tools (core, then plugins in load order) share one
//!    namespace by name, last write wins: a plugin tool replaces an earlier plugin's tool of
//!    that name (reported), and replaces a core tool only if `[plugins]
//!    allow_core_override` admits the plugin (otherwise the plugin's tool is refused, with a
//!    diagnostic). MCP and client tools keep their own ids; their names may repeat a
//!    registry name, and a bare name that matches several is then ambiguous.
//! 3. **Policy.** Tools outside the effective policy are dropped, not hidden: nothing about
//!    them reaches the model.
//! 4. **`tools.active`.** When set, only tools it names stay; names that match nothing are
//!    skipped with a debug log.
//! 5. **Availability.** Each failing signal hides the tool with a diagnostic. A tool of a
//!    disabled plugin is hidden with reason `plugin-enabled`.
//! 6. **Contract: executors.** A visible tool without an executor is `missing-executor`.
//! 7. **Split and sort.** Direct-only tools apart; each set sorted by `sort_key` (or name),
//!    then id, so the same inputs always give the same bytes.
//!
//! A plan is computed whole from its inputs; a change of tools or policy plans again.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::descriptor::{Availability, CatalogMode, Source, ToolDescriptor};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::policy::{PatternSet, Policy, Toolsets};

/// Why a tool is not offered, in the words of one failing signal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// The signal that failed: `auth`, `config`, `env`, `plugin-enabled`, `context`, or
    /// `source-down`.
    pub reason: String,
    pub message: String,
}

/// A tool kept out of the catalog because a signal failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HiddenTool {
    pub id: String,
    pub name: String,
    pub source: Source,
    pub source_name: String,
    pub diagnostics: Vec<Diagnostic>,
}

/// Something the merge decided that a person should be able to see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// `core-override`, `override-refused`, `plugin-replaced`, `fallback`...
    pub code: String,
    pub message: String,
}

/// What the model may see, and what it may not and why.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub cataloged: Vec<ToolDescriptor>,
    pub direct_only: Vec<ToolDescriptor>,
    pub hidden: Vec<HiddenTool>,
    pub notices: Vec<Notice>,
    /// Tools removed by the policy or by `tools.active` (a count only).
    pub filtered: usize,
    /// The toolsets the patterns of this plan expanded (for approvals and `--approve`).
    pub toolsets: Toolsets,
    /// The effective policy the plan applied (the surfaces check their own control tools
    /// against it).
    pub policy: Policy,
}

/// The facts availability signals are checked against.
pub struct Facts<'a> {
    pub config: &'a Config,
    /// Reads an environment variable; a parameter so tests need not touch the process's.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Sources that cannot run their tools now (`mcp:NAME` of an MCP server that failed
    /// to start, timed out or died), with why: their tools are hidden, fail closed.
    pub sources_down: &'a BTreeMap<String, String>,
}

impl<'a> Facts<'a> {
    /// `config` with no environment and every source up: what tests and benchmarks build
    /// catalogs from.
    pub fn bare(config: &'a Config) -> Self {
        fn no_env(_: &str) -> Option<String> {
            None
        }
        static NONE_DOWN: BTreeMap<String, String> = BTreeMap::new();
        Facts {
            config,
            env: &no_env,
            sources_down: &NONE_DOWN,
        }
    }

    /// The process environment.
    pub fn process_env(name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

/// Plans the catalog; see the module doc for the steps.
pub fn plan(descriptors: Vec<ToolDescriptor>, facts: &Facts<'_>) -> Result<Plan> {
    check_duplicates(&descriptors)?;
    let mut notices = Vec::new();
    let merged = merge_registry(descriptors, facts.config, &mut notices);

    // Every configured server is a toolset from the start, its tools or not: a server that
    // listed its tools only after start-up was no toolset when the approval rules were
    // compiled, so `[[approvals]] tools = ["shell"]` became a plain name, and the tools it
    // added later ran unapproved (review 17).
    let toolsets = Toolsets::new(
        &facts.config.toolsets,
        merged
            .iter()
            .map(|t| (t.source.as_str(), t.source_name.as_str()))
            .chain(
                facts
                    .config
                    .mcp
                    .servers
                    .values()
                    .map(|s| (Source::Mcp.as_str(), s.name.as_str())),
            ),
    );
    let mut toolsets = toolsets;
    for server in facts.config.mcp.servers.values() {
        toolsets.alias(&server.key, &server.name);
    }
    let policy =
        Policy::from_config(facts.config, &toolsets).map_err(|e| in_config(facts.config, e))?;
    let before = merged.len();
    let mut kept: Vec<ToolDescriptor> = merged
        .into_iter()
        .filter(|t| match policy.refusal(t) {
            None => true,
            Some(why) => {
                tracing::debug!(tool = %t.id(), "{why}");
                false
            }
        })
        .collect();
    if let Some(active) = &facts.config.tools.active {
        let set = PatternSet::compile(active, &toolsets, "tools.active")
            .map_err(|e| in_config(facts.config, e))?;
        for p in set.unmatched(&kept, &toolsets) {
            tracing::debug!("tools.active: `{p}` matches no tool; skipped");
        }
        kept.retain(|t| set.matches(t));
    }
    let filtered = before - kept.len();

    let plugins: BTreeSet<String> = kept
        .iter()
        .filter(|t| t.source == Source::Openclaw && t.source_name != "core")
        .map(|t| t.source_name.clone())
        .collect();
    let mut hidden = Vec::new();
    let mut visible = Vec::new();
    for tool in kept {
        let mut diagnostics = Vec::new();
        if tool.source == Source::Openclaw
            && facts.config.plugins.disabled.contains(&tool.source_name)
        {
            diagnostics.push(Diagnostic {
                reason: "plugin-enabled".into(),
                message: format!(
                    "plugin `{}` is disabled ([plugins] disabled)",
                    tool.source_name
                ),
            });
        }
        if let Some(a) = &tool.availability
            && let Err(d) = check(a, facts, &plugins)
        {
            diagnostics.extend(d);
        }
        if let Some(why) =
            facts
                .sources_down
                .get(&format!("{}:{}", tool.source.as_str(), tool.source_name))
        {
            diagnostics.push(Diagnostic {
                reason: "source-down".into(),
                message: why.clone(),
            });
        }
        if diagnostics.is_empty() {
            visible.push(tool);
        } else {
            hidden.push(HiddenTool {
                id: tool.id(),
                name: tool.name,
                source: tool.source,
                source_name: tool.source_name,
                diagnostics,
            });
        }
    }

    if let Some(t) = visible.iter().find(|t| t.executor.is_none()) {
        return Err(Error::MissingExecutor {
            id: t.id(),
            origin: t.origin.clone(),
        });
    }

    let (mut direct_only, mut cataloged): (Vec<_>, Vec<_>) = visible
        .into_iter()
        .partition(|t| t.catalog_mode == CatalogMode::DirectOnly);
    sort(&mut cataloged);
    sort(&mut direct_only);
    hidden.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(Plan {
        cataloged,
        direct_only,
        hidden,
        notices,
        filtered,
        toolsets,
        policy,
    })
}

/// A bad tool pattern is a mistake in the config file: say which file.
fn in_config(config: &Config, e: Error) -> Error {
    Error::BadConfig {
        file: config
            .file
            .clone()
            .unwrap_or_else(|| "(built-in defaults)".into()),
        message: e.to_string(),
    }
}

/// Catalog order: by sort key or name, then tools of one name by how much their source is
/// trusted — core, plugins, the client's, upstream servers — then by id. Surfaces that
/// declare one tool per name (direct mode) keep the first: an upstream server's `message`
/// sorted before the core one by id (`mcp:` < `openclaw:`) and took its place, with the
/// user's text (review 17).
fn sort(tools: &mut [ToolDescriptor]) {
    tools.sort_by_cached_key(|t| {
        (
            t.sort_key.clone().unwrap_or_else(|| t.name.clone()),
            trust(t),
            t.id(),
        )
    });
}

/// How much a tool's source is trusted, most first: core, plugins, the client's, upstream
/// servers.
pub fn trust(t: &ToolDescriptor) -> u8 {
    match (t.source, t.source_name.as_str()) {
        (Source::Openclaw, "core") => 0,
        (Source::Openclaw, _) => 1,
        (Source::Client, _) => 2,
        (Source::Mcp, _) => 3,
    }
}

fn check_duplicates(descriptors: &[ToolDescriptor]) -> Result<()> {
    let mut seen: HashMap<(Source, &str, &str), &ToolDescriptor> = HashMap::new();
    for d in descriptors {
        let key = (d.source, d.source_name.as_str(), d.name.as_str());
        if let Some(first) = seen.insert(key, d) {
            return Err(Error::DuplicateToolName {
                source_id: format!("{}:{}", d.source, d.source_name),
                name: d.name.clone(),
                first: first.origin.clone(),
                second: d.origin.clone(),
            });
        }
    }
    Ok(())
}

fn merge_registry(
    descriptors: Vec<ToolDescriptor>,
    config: &Config,
    notices: &mut Vec<Notice>,
) -> Vec<ToolDescriptor> {
    // A disabled plugin is not loaded: its tools replace nothing, and are only listed as
    // hidden (reason plugin-enabled) further on.
    let (registry, others): (Vec<_>, Vec<_>) = descriptors.into_iter().partition(|d| {
        d.source == Source::Openclaw && !config.plugins.disabled.contains(&d.source_name)
    });
    // Core builtins first, then plugins in the order they were loaded.
    let (core, plugins): (Vec<_>, Vec<_>) =
        registry.into_iter().partition(|d| d.source_name == "core");
    let core_names: BTreeSet<String> = core.iter().map(|d| d.name.clone()).collect();
    let mut by_name: BTreeMap<String, ToolDescriptor> = BTreeMap::new();
    for d in core {
        by_name.insert(d.name.clone(), d);
    }
    for d in plugins {
        let plugin = d.source_name.clone();
        // Replacing a core tool needs admission, also when an admitted plugin replaced it
        // first: admission is per plugin, not per name.
        if core_names.contains(&d.name) && !config.plugins.allow_core_override.contains(&plugin) {
            notices.push(Notice {
                code: "override-refused".into(),
                message: format!(
                    "plugin `{plugin}` defines `{}`, a core tool; it is not used (add `{plugin}` to [plugins] allow_core_override to let it replace the core tool)",
                    d.name
                ),
            });
            continue;
        }
        let notice = match by_name.get(&d.name) {
            Some(existing) if existing.source_name == "core" => Some(Notice {
                code: "core-override".into(),
                message: format!(
                    "plugin `{plugin}` replaces core tool `{}` (admitted by [plugins] allow_core_override)",
                    d.name
                ),
            }),
            Some(existing) => Some(Notice {
                code: "plugin-replaced".into(),
                message: format!(
                    "plugin `{plugin}` replaces `{}` of plugin `{}` (last loaded wins)",
                    d.name, existing.source_name
                ),
            }),
            None => None,
        };
        notices.extend(notice);
        by_name.insert(d.name.clone(), d);
    }
    by_name.into_values().chain(others).collect()
}

/// Checks a signal; the error lists why it failed.
fn check(
    a: &Availability,
    facts: &Facts<'_>,
    plugins: &BTreeSet<String>,
) -> std::result::Result<(), Vec<Diagnostic>> {
    let fail = |reason: &str, message: String| {
        Err(vec![Diagnostic {
            reason: reason.into(),
            message,
        }])
    };
    let config = facts.config;
    match a {
        Availability::Auth(profile) => {
            if config.auth.profiles.contains(profile) {
                Ok(())
            } else {
                fail(
                    "auth",
                    format!("auth profile `{profile}` is not configured ([auth] profiles)"),
                )
            }
        }
        Availability::Config(key) => match config.setting(key) {
            Some(v) if is_set(v) => Ok(()),
            _ => fail(
                "config",
                format!("setting `{key}` is not set ([settings] {key})"),
            ),
        },
        Availability::Env(var) => match (facts.env)(var) {
            Some(v) if !v.is_empty() => Ok(()),
            _ => fail("env", format!("environment variable `{var}` is not set")),
        },
        Availability::PluginEnabled(id) => {
            if config.plugins.disabled.contains(id) {
                fail(
                    "plugin-enabled",
                    format!("plugin `{id}` is disabled ([plugins] disabled)"),
                )
            } else if !plugins.contains(id) {
                fail("plugin-enabled", format!("plugin `{id}` is not loaded"))
            } else {
                Ok(())
            }
        }
        Availability::Context(fact) => {
            let (key, want) = match fact.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (fact.trim(), None),
            };
            match (config.context.get(key), want) {
                (Some(_), None) => Ok(()),
                (Some(have), Some(want)) if have == want => Ok(()),
                (Some(have), Some(want)) => fail(
                    "context",
                    format!("context `{key}` is `{have}`, not `{want}`"),
                ),
                (None, _) => fail(
                    "context",
                    format!("context `{key}` is not set ([context] {key})"),
                ),
            }
        }
        Availability::AllOf(all) => {
            let failures: Vec<Diagnostic> = all
                .iter()
                .filter_map(|a| check(a, facts, plugins).err())
                .flatten()
                .collect();
            if failures.is_empty() {
                Ok(())
            } else {
                Err(failures)
            }
        }
        Availability::AnyOf(any) => {
            let mut failures = Vec::new();
            for a in any {
                match check(a, facts, plugins) {
                    Ok(()) => return Ok(()),
                    Err(d) => failures.extend(d),
                }
            }
            let mut reasons: Vec<&str> = failures.iter().map(|d| d.reason.as_str()).collect();
            reasons.dedup();
            let reason = if reasons.len() == 1 {
                reasons[0].to_string()
            } else {
                "any_of".to_string()
            };
            fail(
                &reason,
                format!(
                    "none of the alternatives holds: {}",
                    failures
                        .iter()
                        .map(|d| d.message.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            )
        }
    }
}

fn is_set(v: &toml::Value) -> bool {
    match v {
        toml::Value::Boolean(b) => *b,
        toml::Value::String(s) => !s.is_empty(),
        toml::Value::Array(a) => !a.is_empty(),
        toml::Value::Table(t) => !t.is_empty(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::descriptor::ExecutorSpec;
    use std::path::Path;

    fn tool(source: Source, source_name: &str, name: &str) -> ToolDescriptor {
        ToolDescriptor::builder(source, source_name, name)
            .description(format!("{name} tool"))
            .executor(ExecutorSpec::Fixture {
                text: "ok".into(),
                details: None,
            })
            .origin(format!("test:{source_name}:{name}"))
            .build()
    }

    fn config(text: &str) -> Config {
        Config::from_toml_str(text, Path::new("t.toml")).unwrap()
    }

    fn run(tools: Vec<ToolDescriptor>, config: &Config, env: &[(&str, &str)]) -> Result<Plan> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| env.get(k).cloned();
        plan(
            tools,
            &Facts {
                config,
                env: &lookup,
                sources_down: &Default::default(),
            },
        )
    }

    fn ids(tools: &[ToolDescriptor]) -> Vec<String> {
        tools.iter().map(ToolDescriptor::id).collect()
    }

    #[test]
    fn duplicate_name_within_a_source_is_an_error() {
        let e = run(
            vec![
                tool(Source::Openclaw, "github", "a"),
                tool(Source::Openclaw, "github", "a"),
            ],
            &Config::default(),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.code(), "duplicate-tool-name");
        assert!(e.to_string().contains("openclaw:github"), "{e}");
        assert!(e.to_string().contains("test:github:a"), "{e}");
    }

    #[test]
    fn names_may_repeat_across_mcp_and_client() {
        let p = run(
            vec![
                tool(Source::Openclaw, "core", "search"),
                tool(Source::Mcp, "notion", "search"),
                tool(Source::Client, "client", "search"),
            ],
            &Config::default(),
            &[],
        )
        .unwrap();
        assert_eq!(p.cataloged.len(), 3);
    }

    /// One name in many sources: the core tool first, then the client's, then upstream
    /// servers, whatever their ids (a plugin may not take a core name at all) (review 17: `mcp:` sorted before `openclaw:`,
    /// and direct mode declared an upstream server's `message` in the core one's place).
    #[test]
    fn tools_of_one_name_are_ordered_by_how_much_their_source_is_trusted() {
        let p = run(
            vec![
                tool(Source::Mcp, "aaa", "message"),
                tool(Source::Client, "client", "message"),
                tool(Source::Openclaw, "core", "message"),
            ],
            &Config::default(),
            &[],
        )
        .unwrap();
        assert_eq!(
            ids(&p.cataloged),
            [
                "openclaw:core:message",
                "client:client:message",
                "mcp:aaa:message"
            ]
        );
    }

    /// A configured server is a toolset before it lists a tool: approval and deny rules
    /// naming it by its bare name cover the tools it adds later (review 17: they became a
    /// plain name, and a late tool ran unapproved).
    #[test]
    fn a_configured_server_is_a_toolset_before_it_lists_any_tool() {
        let config = config("[mcp.servers.shell]\ncommand = \"/bin/true\"\n");
        let p = run(vec![tool(Source::Openclaw, "core", "x")], &config, &[]).unwrap();
        let set = PatternSet::compile(&["shell".to_string()], &p.toolsets, "approvals").unwrap();
        assert!(set.matches_parts("run_command", "mcp:shell:run_command"));
    }

    /// A server named by its config key in rules means its tools, whose ids carry its safe
    /// name (review 18: `deny = ["Corp.Shell"]` matched nothing).
    #[test]
    fn a_server_s_config_key_names_its_tools() {
        let config = config("[mcp.servers.\"Corp.Shell\"]\ncommand = \"/bin/true\"\n");
        let p = run(vec![tool(Source::Openclaw, "core", "x")], &config, &[]).unwrap();
        let set =
            PatternSet::compile(&["Corp.Shell".to_string()], &p.toolsets, "tools.deny").unwrap();
        let name = &config.mcp.servers.values().next().unwrap().name;
        assert!(
            set.matches_parts("run", &format!("mcp:{name}:run")),
            "{name}"
        );
    }

    #[test]
    fn a_visible_tool_without_executor_is_an_error_but_a_hidden_one_is_not() {
        let mut t = tool(Source::Openclaw, "core", "x");
        t.executor = None;
        let e = run(vec![t.clone()], &Config::default(), &[]).unwrap_err();
        assert_eq!(e.code(), "missing-executor");
        assert!(e.to_string().contains("openclaw:core:x"));
        t.availability = Some(Availability::Env("NOPE".into()));
        let p = run(vec![t], &Config::default(), &[]).unwrap();
        assert_eq!(p.hidden.len(), 1);
    }

    #[test]
    fn plugin_override_of_core_needs_admission() {
        let tools = vec![
            tool(Source::Openclaw, "github", "message"),
            tool(Source::Openclaw, "core", "message"),
        ];
        let p = run(tools.clone(), &Config::default(), &[]).unwrap();
        assert_eq!(ids(&p.cataloged), ["openclaw:core:message"]);
        assert_eq!(p.notices[0].code, "override-refused");
        let p = run(
            tools,
            &config("[plugins]\nallow_core_override = [\"github\"]\n"),
            &[],
        )
        .unwrap();
        assert_eq!(ids(&p.cataloged), ["openclaw:github:message"]);
        assert_eq!(p.notices[0].code, "core-override");
    }

    #[test]
    fn later_plugin_replaces_earlier_plugin() {
        let p = run(
            vec![
                tool(Source::Openclaw, "a", "share"),
                tool(Source::Openclaw, "b", "share"),
            ],
            &Config::default(),
            &[],
        )
        .unwrap();
        assert_eq!(ids(&p.cataloged), ["openclaw:b:share"]);
        assert_eq!(p.notices[0].code, "plugin-replaced");
    }

    #[test]
    fn availability_signals_hide_with_reasons() {
        let mut a = tool(Source::Openclaw, "core", "a");
        a.availability = Some(Availability::AllOf(vec![
            Availability::Env("TOKEN".into()),
            Availability::Auth("gh".into()),
        ]));
        let mut b = tool(Source::Openclaw, "core", "b");
        b.availability = Some(Availability::AnyOf(vec![
            Availability::Config("sms.gateway".into()),
            Availability::Env("SMS".into()),
        ]));
        let mut c = tool(Source::Openclaw, "core", "c");
        c.availability = Some(Availability::Context("channel=slack".into()));
        let mut d = tool(Source::Openclaw, "core", "d");
        d.availability = Some(Availability::PluginEnabled("github".into()));
        let tools = vec![a, b, c, d, tool(Source::Openclaw, "github", "e")];

        let p = run(tools.clone(), &Config::default(), &[]).unwrap();
        let reasons: Vec<(String, Vec<String>)> = p
            .hidden
            .iter()
            .map(|h| {
                (
                    h.name.clone(),
                    h.diagnostics.iter().map(|d| d.reason.clone()).collect(),
                )
            })
            .collect();
        assert_eq!(
            reasons,
            [
                ("a".to_string(), vec!["env".to_string(), "auth".to_string()]),
                ("b".to_string(), vec!["any_of".to_string()]),
                ("c".to_string(), vec!["context".to_string()]),
            ]
        );
        assert!(p.hidden[2].diagnostics[0].message.contains("not set"));

        let all = config(
            "[auth]\nprofiles = [\"gh\"]\n[settings]\nsms.gateway = \"x\"\n[context]\nchannel = \"slack\"\n",
        );
        let p = run(tools.clone(), &all, &[("TOKEN", "t")]).unwrap();
        assert!(p.hidden.is_empty(), "{:?}", p.hidden);
        assert_eq!(p.cataloged.len(), 5);

        let wrong =
            config("[context]\nchannel = \"discord\"\n[plugins]\ndisabled = [\"github\"]\n");
        let p = run(tools, &wrong, &[("TOKEN", "t")]).unwrap();
        let c = p.hidden.iter().find(|h| h.name == "c").unwrap();
        assert_eq!(
            c.diagnostics[0].message,
            "context `channel` is `discord`, not `slack`"
        );
        let d = p.hidden.iter().find(|h| h.name == "d").unwrap();
        assert_eq!(d.diagnostics[0].reason, "plugin-enabled");
        let e = p.hidden.iter().find(|h| h.name == "e").unwrap();
        assert_eq!(e.diagnostics[0].reason, "plugin-enabled");
    }

    #[test]
    fn direct_only_is_kept_apart_and_sorting_uses_sort_key() {
        let mut m = tool(Source::Openclaw, "core", "message");
        m.catalog_mode = CatalogMode::DirectOnly;
        let mut z = tool(Source::Openclaw, "core", "zeta");
        z.sort_key = Some("0".into());
        let p = run(
            vec![tool(Source::Openclaw, "core", "beta"), m, z],
            &Config::default(),
            &[],
        )
        .unwrap();
        assert_eq!(ids(&p.direct_only), ["openclaw:core:message"]);
        assert_eq!(
            ids(&p.cataloged),
            ["openclaw:core:zeta", "openclaw:core:beta"]
        );
    }

    #[test]
    fn policy_and_active_remove_tools_entirely() {
        let tools = vec![
            tool(Source::Openclaw, "core", "message"),
            tool(Source::Openclaw, "github", "create_issue"),
            tool(Source::Mcp, "github", "create_issue"),
        ];
        let p = run(
            tools.clone(),
            &config("[tools]\ndeny = [\"mcp:github:*\"]\n"),
            &[],
        )
        .unwrap();
        assert_eq!(
            ids(&p.cataloged),
            ["openclaw:github:create_issue", "openclaw:core:message"]
        );
        assert_eq!(p.filtered, 1);
        assert!(p.hidden.is_empty());
        let p = run(
            tools,
            &config("[tools]\nactive = [\"message\", \"no_such_tool\"]\n"),
            &[],
        )
        .unwrap();
        assert_eq!(ids(&p.cataloged), ["openclaw:core:message"]);
    }
}

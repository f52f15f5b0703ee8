//! Integration tests of the `toolsearch` command line.
//!
//! Every command runs in its own temporary folder (`current_dir`), with the environment
//! variables the catalogs read removed, so that neither the machine nor a stray
//! `toolsearch.toml` changes the outcome. Catalog fixtures live in `fixtures/tests/`;
//! anything large or generated (a 400 KB description, a deep schema, configs) is written
//! into the test's temporary folder.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::{Value, json};

mod common;
use common::{COMPACT_KEYS, Sandbox, err_json, fixture, ok_json, run};

/// Every fixture catalog of a valid format, for `--catalog` one by one.
fn all_format_fixtures() -> Vec<PathBuf> {
    [
        "descriptors.json",
        "tools.jsonl",
        "plugins",
        "mcp",
        "openai/tools.json",
    ]
    .iter()
    .map(|p| fixture(p))
    .collect()
}

/// The commands of this file, on the shared temporary folder.
impl Sandbox {
    /// `toolsearch --catalog P1 --catalog P2 ...`.
    fn with_catalogs<P: AsRef<Path>>(&self, catalogs: &[P]) -> Command {
        let mut cmd = self.cmd();
        for c in catalogs {
            cmd.arg("--catalog").arg(c.as_ref());
        }
        cmd
    }

    /// `toolsearch --config FILE` with the config written into the sandbox.
    fn with_config(&self, toml: &str) -> Command {
        let file = self.write("test-config.toml", toml);
        let mut cmd = self.cmd();
        cmd.arg("--config").arg(file);
        cmd
    }
}

fn ids(descriptors: &Value) -> Vec<String> {
    descriptors
        .as_array()
        .expect("an array of descriptors")
        .iter()
        .map(|d| d["id"].as_str().expect("id is a string").to_string())
        .collect()
}

/// Every id of `catalog --json`: cataloged and direct-only.
fn visible_ids(catalog: &Value) -> Vec<String> {
    let mut out = ids(&catalog["cataloged"]);
    out.extend(ids(&catalog["direct_only"]));
    out
}

fn hidden_ids(catalog: &Value) -> Vec<String> {
    ids(&catalog["hidden"])
}

fn assert_compact(d: &Value) {
    let keys: BTreeSet<&str> = d
        .as_object()
        .unwrap_or_else(|| panic!("a descriptor is an object: {d}"))
        .keys()
        .map(String::as_str)
        .collect();
    let want: BTreeSet<&str> = COMPACT_KEYS.iter().copied().collect();
    assert_eq!(keys, want, "compact descriptor keys: {d}");
    for k in COMPACT_KEYS {
        assert!(d[k].is_string(), "`{k}` is a string: {d}");
    }
    let id = format!("{}:{}:{}", d["source"], d["source_name"], d["name"]).replace('"', "");
    assert_eq!(d["id"], id.as_str(), "id = source:source_name:name");
}

/// A schema whose JSON nesting is exactly `levels` deep (an object of `items` chains).
fn schema_of_depth(levels: usize) -> Value {
    let mut schema = json!({});
    for _ in 1..levels {
        schema = json!({ "items": schema });
    }
    schema
}

const FIXTURE_EXECUTOR: &str = r#"{"kind": "fixture", "text": "ok"}"#;

// ---------------------------------------------------------------------------------------
// 1. The embedded demo catalog (no --catalog, no config)
// ---------------------------------------------------------------------------------------
mod embedded_default {
    use super::*;

    #[test]
    fn search_puts_github_create_issue_first() {
        let sb = Sandbox::new();
        let hits = ok_json(sb.cmd().args(["search", "create a GitHub issue", "--json"]));
        let ids = ids(&hits);
        assert_eq!(ids[0], "openclaw:github:create_issue", "{ids:?}");
        assert_eq!(hits[0]["source"], "openclaw");
        assert_eq!(hits[0]["source_name"], "github");
        assert_eq!(hits[0]["name"], "create_issue");
        assert!(
            hits[0]["input"].as_str().unwrap().contains("title: string"),
            "trusted tools show a signature: {}",
            hits[0]["input"]
        );
    }

    #[test]
    fn single_search_is_an_array_of_compact_descriptors() {
        let sb = Sandbox::new();
        let hits = ok_json(sb.cmd().args(["search", "calendar meeting", "--json"]));
        let hits = hits.as_array().expect("single search prints an array");
        assert!(!hits.is_empty());
        for h in hits {
            assert_compact(h);
        }
    }

    #[test]
    fn catalog_json_reports_counts_sources_hidden_and_diagnostics() {
        let sb = Sandbox::new();
        let c = ok_json(sb.cmd().args(["catalog", "--json"]));
        assert_eq!(c["mode"], "code");
        let counts = &c["counts"];
        let cataloged = counts["cataloged"].as_u64().unwrap();
        assert!(cataloged > 150, "{counts}");
        assert_eq!(counts["direct_only"], 2, "{counts}");
        assert!(counts["hidden"].as_u64().unwrap() > 0, "{counts}");
        assert_eq!(c["cataloged"].as_array().unwrap().len() as u64, cataloged);
        assert_eq!(c["direct_only"].as_array().unwrap().len(), 2);
        assert_eq!(
            c["hidden"].as_array().unwrap().len() as u64,
            counts["hidden"].as_u64().unwrap()
        );

        let by_source = counts["by_source"].as_object().unwrap();
        for s in ["openclaw", "mcp", "client"] {
            assert!(
                by_source.get(s).and_then(Value::as_u64).unwrap_or(0) > 0,
                "by_source lacks {s}: {counts}"
            );
        }
        let total: u64 = by_source.values().map(|n| n.as_u64().unwrap()).sum();
        assert_eq!(total, cataloged + 2, "by_source counts visible tools");

        for h in c["hidden"].as_array().unwrap() {
            let diags = h["diagnostics"].as_array().unwrap();
            assert!(!diags.is_empty(), "{h}");
            for d in diags {
                assert!(!d["reason"].as_str().unwrap().is_empty(), "{h}");
                assert!(!d["message"].as_str().unwrap().is_empty(), "{h}");
            }
        }
        let reasons: BTreeSet<&str> = c["hidden"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|h| h["diagnostics"].as_array().unwrap())
            .map(|d| d["reason"].as_str().unwrap())
            .collect();
        // The demo exercises every signal and a composed one.
        for r in [
            "auth",
            "config",
            "env",
            "context",
            "plugin-enabled",
            "any_of",
        ] {
            assert!(
                reasons.contains(r),
                "no hidden tool with reason {r}: {reasons:?}"
            );
        }
        assert_eq!(c["notices"], json!([]));
        assert_eq!(c["filtered"], 0);
        for d in c["cataloged"].as_array().unwrap() {
            assert_compact(d);
        }
        // No hidden tool is visible.
        let visible = visible_ids(&c);
        for h in hidden_ids(&c) {
            assert!(!visible.contains(&h), "{h} is both hidden and visible");
        }
    }

    #[test]
    fn compact_descriptors_of_the_demo_are_bounded_and_untrusted_inputs_unknown() {
        let sb = Sandbox::new();
        let c = ok_json(sb.cmd().args(["catalog", "--json"]));
        for d in c["cataloged"]
            .as_array()
            .unwrap()
            .iter()
            .chain(c["direct_only"].as_array().unwrap())
        {
            let input = d["input"].as_str().unwrap();
            assert!(input.chars().count() <= 320, "{d}");
            assert!(d["description"].as_str().unwrap().chars().count() <= 240);
            if d["source"] != "openclaw" {
                assert_eq!(
                    input, "unknown",
                    "MCP and client schemas are untrusted: {d}"
                );
            }
        }
    }

    #[test]
    fn describe_gives_the_full_input_schema() {
        let sb = Sandbox::new();
        let d = ok_json(
            sb.cmd()
                .args(["describe", "openclaw:github:create_issue", "--json"]),
        );
        assert_eq!(d["id"], "openclaw:github:create_issue");
        assert!(d["input_schema"]["properties"]["title"].is_object(), "{d}");
        assert!(
            d.as_object().unwrap().contains_key("output_schema"),
            "output_schema is always present (null when absent): {d}"
        );
        for k in COMPACT_KEYS {
            assert!(d[k].is_string(), "describe keeps the compact `{k}`: {d}");
        }
        // The compact part equals what search returns.
        let hits = ok_json(sb.cmd().args(["search", "create a GitHub issue", "--json"]));
        for k in COMPACT_KEYS {
            assert_eq!(d[k], hits[0][k], "{k}");
        }
    }

    #[test]
    fn person_readable_outputs_are_non_empty() {
        let sb = Sandbox::new();
        sb.cmd()
            .arg("catalog")
            .assert()
            .success()
            .stdout(predicate::str::contains("cataloged"))
            .stdout(predicate::str::contains("openclaw:github:create_issue"))
            .stdout(predicate::str::contains("Hidden"));
        sb.cmd()
            .args(["search", "create a GitHub issue"])
            .assert()
            .success()
            .stdout(predicate::str::starts_with(
                " 1. openclaw:github:create_issue",
            ));
        sb.cmd()
            .args(["describe", "create_issue"])
            .assert()
            .success()
            .stdout(predicate::str::contains("input_schema"))
            .stdout(predicate::str::contains("openclaw:github:create_issue"));
        sb.cmd()
            .args(["search", "zzyzxq"])
            .assert()
            .success()
            .stdout(predicate::str::contains("no tool matches"));
    }

    #[test]
    fn search_tolerates_punctuation_case_and_query_syntax() {
        let sb = Sandbox::new();
        for q in [
            "\"create a github issue\"",
            "(github issue)",
            "github, issue!",
            "GITHUB ISSUE",
            "github-issue",
            "Create a GitHub issue.",
        ] {
            let hits = ok_json(sb.cmd().args(["search", q, "--json"]));
            assert_eq!(ids(&hits)[0], "openclaw:github:create_issue", "{q}");
        }
        for q in [
            "\"unbalanced",
            "AND OR NOT",
            "*",
            "+-!(){}[]^~:\\/",
            "title:",
            "🎉",
        ] {
            let hits = ok_json(sb.cmd().args(["search", q, "--json"]));
            assert!(hits.is_array(), "{q}: {hits}");
        }
    }

    #[test]
    fn blank_query_returns_an_empty_array() {
        let sb = Sandbox::new();
        let hits = ok_json(sb.cmd().args(["search", "   ", "--json"]));
        assert_eq!(hits, json!([]));
        let hits = ok_json(sb.cmd().args(["search", "", "--json"]));
        assert_eq!(hits, json!([]));
    }

    #[test]
    fn default_limit_is_8_and_limits_clamp_to_1_and_max_search_limit() {
        let sb = Sandbox::new();
        let n = |args: &[&str]| {
            ok_json(sb.cmd().args(args))
                .as_array()
                .expect("array")
                .len()
        };
        assert_eq!(n(&["search", "issue", "--json"]), 8);
        assert_eq!(n(&["search", "issue", "--limit", "3", "--json"]), 3);
        assert_eq!(n(&["search", "issue", "--limit", "500", "--json"]), 20);
        assert_eq!(n(&["search", "issue", "--limit", "0", "--json"]), 1);
    }

    #[test]
    fn direct_only_tools_describe_but_never_search() {
        let sb = Sandbox::new();
        let c = ok_json(sb.cmd().args(["catalog", "--json"]));
        for id in ids(&c["direct_only"]) {
            let name = id.rsplit(':').next().unwrap().to_string();
            let hits = ok_json(sb.cmd().args(["search", &name, "--limit", "20", "--json"]));
            assert!(!ids(&hits).contains(&id), "{id} was searched");
            let d = ok_json(sb.cmd().args(["describe", &id, "--json"]));
            assert_eq!(d["catalog_mode"], "direct-only");
        }
    }

    #[test]
    fn mode_comes_from_the_flag_over_the_config() {
        let sb = Sandbox::new();
        let c = ok_json(sb.cmd().args(["--mode", "tools", "catalog", "--json"]));
        assert_eq!(c["mode"], "tools");
        let c = ok_json(
            sb.with_config("[tools]\ntoolSearch = false\n")
                .args(["catalog", "--json"]),
        );
        assert_eq!(c["mode"], "direct");
        let c = ok_json(sb.with_config("[tools]\ntoolSearch = false\n").args([
            "--mode",
            "directory",
            "catalog",
            "--json",
        ]));
        assert_eq!(c["mode"], "directory");
        let c = ok_json(
            sb.with_config("[tools.toolSearch]\nmode = \"tools\"\n")
                .args(["catalog", "--json"]),
        );
        assert_eq!(c["mode"], "tools");
    }

    #[test]
    fn a_toolsearch_toml_in_the_current_folder_is_read() {
        let sb = Sandbox::new();
        sb.write("toolsearch.toml", "[tools]\ndeny = [\"mcp:*\"]\n");
        let c = ok_json(sb.cmd().args(["catalog", "--json"]));
        assert!(
            c["counts"]["by_source"].get("mcp").is_none(),
            "{}",
            c["counts"]
        );
        // An explicit --config wins over it.
        let c = ok_json(sb.with_config("").args(["catalog", "--json"]));
        assert!(c["counts"]["by_source"]["mcp"].as_u64().unwrap() > 0);
    }
}

// ---------------------------------------------------------------------------------------
// 2. Catalog formats
// ---------------------------------------------------------------------------------------
mod formats {
    use super::*;

    fn catalog_of(sb: &Sandbox, paths: &[PathBuf]) -> Value {
        ok_json(sb.with_catalogs(paths).args(["catalog", "--json"]))
    }

    #[test]
    fn descriptor_file_tools_default_to_openclaw_core() {
        let sb = Sandbox::new();
        let c = catalog_of(&sb, &[fixture("descriptors.json")]);
        assert_eq!(
            ids(&c["cataloged"]),
            ["openclaw:core:ping", "openclaw:core:search"]
        );
        assert_eq!(ids(&c["direct_only"]), ["openclaw:core:notify"]);
        assert_eq!(hidden_ids(&c), ["openclaw:core:secret_tool"]);
        let ping = &c["cataloged"][0];
        assert_compact(ping);
        assert_eq!(ping["input"], "{ host: string }");
        assert_eq!(ping["label"], "Ping", "a label derived from the name");
        let search = &c["cataloged"][1];
        assert_eq!(search["label"], "Search Workspace");
        assert_eq!(search["input"], "{ query: string; limit?: number }");
        assert_eq!(
            c["counts"],
            json!({"cataloged": 2, "direct_only": 1, "hidden": 1, "by_source": {"openclaw": 3}})
        );
    }

    #[test]
    fn jsonl_holds_one_descriptor_a_line() {
        let sb = Sandbox::new();
        let c = catalog_of(&sb, &[fixture("tools.jsonl")]);
        assert_eq!(
            ids(&c["cataloged"]),
            ["client:client:pick_color", "openclaw:core:translate"]
        );
        let translate = &c["cataloged"][1];
        assert_eq!(translate["input"], "{ text: string; to: string }");
        assert_eq!(c["cataloged"][0]["input"], "unknown");
    }

    #[test]
    fn a_folder_of_plugin_manifests_gives_openclaw_plugin_ids() {
        let sb = Sandbox::new();
        let c = catalog_of(&sb, &[fixture("plugins")]);
        assert_eq!(
            ids(&c["cataloged"]),
            [
                "openclaw:weather:air_quality",
                "openclaw:weather:forecast",
                "openclaw:shipping:track_parcel"
            ]
        );
        let forecast = &c["cataloged"][1];
        assert_eq!(forecast["source_name"], "weather");
        assert_eq!(forecast["input"], "{ city: string; days?: number }");
        let hits = ok_json(sb.with_catalogs(&[fixture("plugins")]).args([
            "search",
            "weather forecast for a city",
            "--json",
        ]));
        assert_eq!(ids(&hits)[0], "openclaw:weather:forecast");
    }

    #[test]
    fn mcp_tools_list_result_takes_the_file_stem_and_untrusted_input() {
        let sb = Sandbox::new();
        let c = catalog_of(&sb, &[fixture("mcp/docs.json")]);
        assert_eq!(
            ids(&c["cataloged"]),
            ["mcp:docs:get_page", "mcp:docs:search"]
        );
        for d in c["cataloged"].as_array().unwrap() {
            assert_compact(d);
            assert_eq!(d["source"], "mcp");
            assert_eq!(d["input"], "unknown", "MCP is untrusted: {d}");
        }
        assert_eq!(
            c["cataloged"][1]["label"], "Search Docs",
            "MCP `title` is the label"
        );
        let d = ok_json(sb.with_catalogs(&[fixture("mcp/docs.json")]).args([
            "describe",
            "mcp:docs:search",
            "--json",
        ]));
        assert_eq!(d["input"], "unknown");
        assert_eq!(
            d["input_schema"],
            json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
            "describe shows the full MCP inputSchema"
        );
    }

    #[test]
    fn mcp_json_rpc_response_is_unwrapped() {
        let sb = Sandbox::new();
        let c = catalog_of(&sb, &[fixture("mcp/wiki-rpc.json")]);
        assert_eq!(ids(&c["cataloged"]), ["mcp:wiki-rpc:wiki_lookup"]);
        assert_eq!(c["cataloged"][0]["input"], "unknown");
    }

    #[test]
    fn mcp_server_key_names_the_source_by_its_safe_name() {
        let sb = Sandbox::new();
        let c = catalog_of(&sb, &[fixture("mcp/named-server.json")]);
        assert_eq!(ids(&c["cataloged"]), ["mcp:kanban_board:move_card"]);
    }

    #[test]
    fn openai_tools_of_both_shapes_are_client_tools() {
        let sb = Sandbox::new();
        let c = catalog_of(&sb, &[fixture("openai/tools.json")]);
        assert_eq!(
            ids(&c["cataloged"]),
            ["client:client:open_camera", "client:client:read_clipboard"]
        );
        for d in c["cataloged"].as_array().unwrap() {
            assert_eq!(d["source"], "client");
            assert_eq!(d["input"], "unknown", "client tools are untrusted: {d}");
        }
        assert_eq!(
            c["cataloged"][1]["description"],
            "Read the text on the user's clipboard."
        );
        let d = ok_json(sb.with_catalogs(&[fixture("openai/tools.json")]).args([
            "describe",
            "open_camera",
            "--json",
        ]));
        assert_eq!(
            d["input_schema"]["properties"]["facing"]["enum"],
            json!(["front", "back"])
        );
    }

    #[test]
    fn several_catalog_flags_combine_every_format() {
        let sb = Sandbox::new();
        let c = catalog_of(&sb, &all_format_fixtures());
        assert_eq!(
            c["counts"],
            json!({
                "cataloged": 13,
                "direct_only": 1,
                "hidden": 1,
                "by_source": {"client": 3, "mcp": 4, "openclaw": 7}
            })
        );
        let visible = visible_ids(&c);
        for id in [
            "openclaw:core:search",
            "openclaw:core:translate",
            "openclaw:weather:forecast",
            "openclaw:shipping:track_parcel",
            "mcp:docs:search",
            "mcp:wiki-rpc:wiki_lookup",
            "mcp:kanban_board:move_card",
            "client:client:pick_color",
            "client:client:open_camera",
            "client:client:read_clipboard",
            "openclaw:core:notify",
        ] {
            assert!(
                visible.contains(&id.to_string()),
                "{id} missing: {visible:?}"
            );
        }
        let q = |query: &str| {
            ids(&ok_json(
                sb.with_catalogs(&all_format_fixtures())
                    .args(["search", query, "--json"]),
            ))
        };
        assert_eq!(q("track a parcel")[0], "openclaw:shipping:track_parcel");
        assert_eq!(
            q("take a photo with the camera")[0],
            "client:client:open_camera"
        );
        assert_eq!(q("documentation page")[0], "mcp:docs:get_page");
    }

    #[test]
    fn catalog_output_is_deterministic() {
        let sb = Sandbox::new();
        let a = run(sb
            .with_catalogs(&all_format_fixtures())
            .args(["catalog", "--json"]));
        let b = run(sb
            .with_catalogs(&all_format_fixtures())
            .args(["catalog", "--json"]));
        assert_eq!(a.code, 0);
        assert_eq!(a.stdout, b.stdout);
    }

    #[test]
    fn config_catalog_paths_resolve_against_the_config_folder() {
        let cfg = Sandbox::new();
        cfg.write(
            "conf/cat/tools.json",
            format!(r#"{{"tools": [{{"name": "from_config", "executor": {FIXTURE_EXECUTOR}}}]}}"#),
        );
        let config = cfg.write("conf/ts.toml", "[catalog]\npaths = [\"cat/tools.json\"]\n");
        let elsewhere = Sandbox::new();
        let c = ok_json(
            elsewhere
                .cmd()
                .arg("--config")
                .arg(&config)
                .args(["catalog", "--json"]),
        );
        assert_eq!(ids(&c["cataloged"]), ["openclaw:core:from_config"]);
        // --catalog replaces the config's paths.
        let c = ok_json(
            elsewhere
                .cmd()
                .arg("--config")
                .arg(&config)
                .arg("--catalog")
                .arg(fixture("tools.jsonl"))
                .args(["catalog", "--json"]),
        );
        assert!(!visible_ids(&c).contains(&"openclaw:core:from_config".to_string()));
        assert!(visible_ids(&c).contains(&"openclaw:core:translate".to_string()));
    }

    #[test]
    fn names_may_repeat_across_sources() {
        let sb = Sandbox::new();
        let c = catalog_of(
            &sb,
            &[fixture("descriptors.json"), fixture("mcp/docs.json")],
        );
        let visible = visible_ids(&c);
        assert!(visible.contains(&"openclaw:core:search".to_string()));
        assert!(visible.contains(&"mcp:docs:search".to_string()));
    }

    #[test]
    fn an_empty_folder_is_an_empty_catalog() {
        let sb = Sandbox::new();
        fs::create_dir(sb.path().join("empty")).unwrap();
        let c = ok_json(sb.cmd().args(["--catalog", "empty", "catalog", "--json"]));
        assert_eq!(c["counts"]["cataloged"], 0);
        let hits = ok_json(
            sb.cmd()
                .args(["--catalog", "empty", "search", "anything", "--json"]),
        );
        assert_eq!(hits, json!([]));
    }
}

// ---------------------------------------------------------------------------------------
// 3. Bad catalogs: exit 2, a stable code, the file and the line or JSON pointer
// ---------------------------------------------------------------------------------------
mod bad_catalogs {
    use super::*;

    /// Loads one catalog with `catalog --json`; asserts a bad-catalog naming the file.
    fn bad(sb: &Sandbox, path: &Path) -> String {
        let m = err_json(
            sb.with_catalogs(&[path]).args(["catalog", "--json"]),
            2,
            "bad-catalog",
        );
        assert!(
            m.starts_with(&format!("{}: ", path.display())),
            "the message starts with the file: {m}"
        );
        m
    }

    #[test]
    fn malformed_json_names_line_and_column() {
        let sb = Sandbox::new();
        let m = bad(&sb, &fixture("bad/malformed.json"));
        assert!(m.contains("malformed.json: line 4, column 18: "), "{m}");
        assert!(m.contains("expected `,` or `}`"), "{m}");
    }

    #[test]
    fn malformed_jsonl_names_the_line() {
        let sb = Sandbox::new();
        let m = bad(&sb, &fixture("bad/malformed.jsonl"));
        assert!(m.contains("malformed.jsonl: line 3, column "), "{m}");
        assert!(m.contains("EOF while parsing"), "{m}");
    }

    #[test]
    fn malformed_jsonl_message_does_not_name_a_wrong_line() {
        let sb = Sandbox::new();
        let m = bad(&sb, &fixture("bad/malformed.jsonl"));
        assert!(!m.contains("at line 1 column"), "{m}");
    }

    #[test]
    fn wrong_type_in_jsonl_names_line_and_pointer() {
        let sb = Sandbox::new();
        let path = sb.write(
            "tags.jsonl",
            format!(
                "{{\"name\": \"a\", \"executor\": {FIXTURE_EXECUTOR}}}\n{{\"name\": \"b\", \"tags\": \"x\", \"executor\": {FIXTURE_EXECUTOR}}}\n"
            ),
        );
        let m = bad(&sb, &path);
        assert!(m.contains("tags.jsonl: line 2, /tags: "), "{m}");
        assert!(m.contains("expected a sequence"), "{m}");
    }

    #[test]
    fn wrong_type_names_the_json_pointer() {
        let sb = Sandbox::new();
        let m = bad(&sb, &fixture("bad/wrong_type.json"));
        assert!(m.contains("wrong_type.json: /tools/0/name: "), "{m}");
        assert!(m.contains("expected a string"), "{m}");
    }

    #[test]
    fn unknown_descriptor_key_is_refused() {
        let sb = Sandbox::new();
        let m = bad(&sb, &fixture("bad/unknown_key.json"));
        assert!(m.contains("/tools/0/descripton"), "{m}");
        assert!(m.contains("unknown field `descripton`"), "{m}");
    }

    #[test]
    fn unknown_executor_kind_is_refused() {
        let sb = Sandbox::new();
        let m = bad(&sb, &fixture("bad/unknown_executor.json"));
        assert!(m.contains("/tools/1/executor"), "{m}");
        assert!(m.contains("teleport"), "{m}");
    }

    #[test]
    fn duplicate_names_within_one_source_name_both_origins() {
        let sb = Sandbox::new();
        let path = fixture("bad/duplicate.json");
        let m = err_json(
            sb.with_catalogs(&[&path]).args(["catalog", "--json"]),
            2,
            "duplicate-tool-name",
        );
        assert!(m.contains("`twice`"), "{m}");
        assert!(m.contains("openclaw:dup"), "{m}");
        assert!(m.contains(&format!("{}#/tools/0", path.display())), "{m}");
        assert!(m.contains(&format!("{}#/tools/2", path.display())), "{m}");
    }

    #[test]
    fn duplicate_names_across_two_files_of_one_source() {
        let sb = Sandbox::new();
        let a = sb.write(
            "a.json",
            format!(r#"{{"tools": [{{"name": "same", "executor": {FIXTURE_EXECUTOR}}}]}}"#),
        );
        let b = sb.write(
            "b.jsonl",
            format!("{{\"name\": \"same\", \"executor\": {FIXTURE_EXECUTOR}}}\n"),
        );
        let m = err_json(
            sb.with_catalogs(&[&a, &b])
                .args(["search", "same", "--json"]),
            2,
            "duplicate-tool-name",
        );
        assert!(m.contains("openclaw:core"), "{m}");
        assert!(m.contains(&format!("{}#/tools/0", a.display())), "{m}");
        assert!(m.contains(&format!("{} line 1", b.display())), "{m}");
    }

    #[test]
    fn missing_executor_names_the_id_and_origin() {
        let sb = Sandbox::new();
        let path = fixture("bad/missing_executor.json");
        let m = err_json(
            sb.with_catalogs(&[&path]).args(["catalog", "--json"]),
            2,
            "missing-executor",
        );
        assert!(m.contains("openclaw:core:no_executor"), "{m}");
        assert!(m.contains(&format!("{}#/tools/1", path.display())), "{m}");
    }

    #[test]
    fn a_hidden_tool_needs_no_executor() {
        let sb = Sandbox::new();
        let path = sb.write(
            "hidden.json",
            r#"{"tools": [{"name": "later", "availability": {"env": "TS_TEST_VAR"}}]}"#,
        );
        let c = ok_json(sb.with_catalogs(&[&path]).args(["catalog", "--json"]));
        assert_eq!(hidden_ids(&c), ["openclaw:core:later"]);
        // Once visible it must have one.
        let m = err_json(
            sb.with_catalogs(&[&path])
                .env("TS_TEST_VAR", "1")
                .args(["catalog", "--json"]),
            2,
            "missing-executor",
        );
        assert!(m.contains("openclaw:core:later"), "{m}");
    }

    #[test]
    fn a_400_kb_description_is_refused_with_its_size_and_the_limit() {
        let sb = Sandbox::new();
        let doc = json!({"tools": [{
            "name": "big",
            "description": "x".repeat(400 * 1024),
            "executor": {"kind": "fixture", "text": "ok"}
        }]});
        let path = sb.write("big.json", doc.to_string());
        let m = bad(&sb, &path);
        assert!(m.contains("big.json: /tools/0/description: "), "{m}");
        assert!(m.contains("409600 bytes"), "{m}");
        assert!(m.contains("the limit is 65536 bytes"), "{m}");
    }

    #[test]
    fn a_schema_64_levels_deep_is_refused() {
        let sb = Sandbox::new();
        let doc = json!({"tools": [{
            "name": "deep",
            "input_schema": schema_of_depth(64),
            "executor": {"kind": "fixture", "text": "ok"}
        }]});
        let path = sb.write("deep.json", doc.to_string());
        let m = bad(&sb, &path);
        assert!(m.contains("deep.json: /tools/0/input_schema: "), "{m}");
        assert!(m.contains("64 levels deep"), "{m}");
        assert!(m.contains("the limit is 32"), "{m}");

        let doc = json!({"tools": [{
            "name": "deep_out",
            "output_schema": schema_of_depth(33),
            "executor": {"kind": "fixture", "text": "ok"}
        }]});
        let path = sb.write("deep_out.json", doc.to_string());
        let m = bad(&sb, &path);
        assert!(m.contains("/tools/0/output_schema"), "{m}");
        assert!(m.contains("33 levels deep"), "{m}");
    }

    #[test]
    fn a_schema_32_levels_deep_is_accepted() {
        let sb = Sandbox::new();
        let doc = json!({"tools": [{
            "name": "deep_ok",
            "input_schema": schema_of_depth(32),
            "executor": {"kind": "fixture", "text": "ok"}
        }]});
        let path = sb.write("ok.json", doc.to_string());
        let c = ok_json(sb.with_catalogs(&[&path]).args(["catalog", "--json"]));
        assert_eq!(ids(&c["cataloged"]), ["openclaw:core:deep_ok"]);
    }

    #[test]
    fn a_nonexistent_catalog_path_is_bad_catalog() {
        let sb = Sandbox::new();
        let path = sb.path().join("no/such/catalog.json");
        let m = bad(&sb, &path);
        assert!(m.contains("cannot read"), "{m}");
    }

    #[test]
    fn one_bad_file_fails_the_whole_load() {
        let sb = Sandbox::new();
        let out = run(sb
            .with_catalogs(&[fixture("descriptors.json"), fixture("bad/wrong_type.json")])
            .args(["search", "ping", "--json"]));
        assert_eq!(out.code, 2);
        assert_eq!(out.json()["error"]["code"], "bad-catalog");
        // A bad file inside a folder fails the folder too.
        sb.write(
            "dir/good.json",
            fs::read(fixture("descriptors.json")).unwrap(),
        );
        sb.write(
            "dir/sub/bad.json",
            fs::read(fixture("bad/wrong_type.json")).unwrap(),
        );
        let m = err_json(
            sb.cmd().args(["--catalog", "dir", "catalog", "--json"]),
            2,
            "bad-catalog",
        );
        assert!(m.contains("bad.json: /tools/0/name"), "{m}");
    }

    #[test]
    fn json_rpc_errors_point_inside_result() {
        let sb = Sandbox::new();
        let path = sb.write(
            "rpc.json",
            r#"{"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": 3, "inputSchema": {}}]}}"#,
        );
        let m = bad(&sb, &path);
        assert!(m.contains("rpc.json: /result/tools/0/name: "), "{m}");
        let path = sb.write(
            "rpc-error.json",
            r#"{"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "no"}}"#,
        );
        let m = bad(&sb, &path);
        assert!(m.contains("without `result`"), "{m}");
    }

    #[test]
    fn openai_shape_errors_point_at_the_item() {
        let sb = Sandbox::new();
        let path = sb.write(
            "oa.json",
            r#"[{"type": "function", "function": {"name": 3}}]"#,
        );
        let m = bad(&sb, &path);
        assert!(m.contains("oa.json: /0/function/name: "), "{m}");
        let path = sb.write(
            "oa-type.json",
            r#"[{"type": "function", "name": "ok"}, {"type": "web_search"}]"#,
        );
        let m = bad(&sb, &path);
        assert!(m.contains("/1/type"), "{m}");
        assert!(m.contains("web_search"), "{m}");
        let path = sb.write("oa-noname.json", r#"[{"type": "function"}]"#);
        let m = bad(&sb, &path);
        assert!(m.contains("/0: "), "{m}");
        assert!(m.contains("function.name"), "{m}");
    }

    #[test]
    fn openai_flat_shape_wrong_type_points_at_the_field() {
        let sb = Sandbox::new();
        let path = sb.write("flat.json", r#"[{"type": "function", "name": 3}]"#);
        let m = bad(&sb, &path);
        assert!(m.contains("/0/name"), "{m}");
    }

    #[test]
    fn a_flat_openai_tool_with_a_bad_schema_points_at_parameters() {
        let sb = Sandbox::new();
        let path = sb.write(
            "flat-params.json",
            r#"[{"type": "function", "name": "x", "parameters": []}]"#,
        );
        let m = bad(&sb, &path);
        assert!(m.contains("flat-params.json: /0/parameters: "), "{m}");
        assert!(m.contains("JSON object"), "{m}");
    }

    #[test]
    fn mcp_schema_errors_point_at_input_schema_as_spelled_in_the_file() {
        let sb = Sandbox::new();
        let path = sb.write(
            "srv.json",
            r#"{"tools": [{"name": "x", "inputSchema": []}]}"#,
        );
        let m = bad(&sb, &path);
        assert!(m.contains("/tools/0/inputSchema"), "{m}");
        let path = sb.write(
            "srv-out.json",
            r#"{"tools": [{"name": "x", "inputSchema": {}, "outputSchema": 3}]}"#,
        );
        let m = bad(&sb, &path);
        assert!(m.contains("/tools/0/outputSchema"), "{m}");
    }

    #[test]
    fn openai_chat_schema_errors_point_inside_function() {
        let sb = Sandbox::new();
        let path = sb.write(
            "oa.json",
            r#"[{"type": "function", "function": {"name": "x", "parameters": []}}]"#,
        );
        let m = bad(&sb, &path);
        assert!(m.contains("/0/function/parameters"), "{m}");
    }

    #[test]
    fn other_descriptor_contract_violations() {
        let sb = Sandbox::new();
        let cases: &[(&str, &str, &[&str])] = &[
            (
                "colon.json",
                r#"{"tools": [{"name": "a:b", "executor": {"kind": "client"}}]}"#,
                &["/tools/0/name", "id separator"],
            ),
            (
                "empty-name.json",
                r#"{"tools": [{"name": "", "executor": {"kind": "client"}}]}"#,
                &["/tools/0/name", "empty"],
            ),
            (
                "schema-array.json",
                r#"{"tools": [{"name": "a", "input_schema": [], "executor": {"kind": "client"}}]}"#,
                &["/tools/0/input_schema", "JSON object"],
            ),
            (
                "plugin-id.json",
                r#"{"plugin": "My Plugin", "tools": []}"#,
                &["/plugin", "my_plugin"],
            ),
            (
                "plugin-source.json",
                r#"{"plugin": "p", "tools": [{"name": "a", "source": "mcp", "source_name": "x"}]}"#,
                &["/tools/0/source"],
            ),
            (
                "mcp-no-server.json",
                r#"{"tools": [{"name": "a", "source": "mcp", "executor": {"kind": "client"}}]}"#,
                &["/tools/0/source_name", "server"],
            ),
            (
                "command.json",
                r#"{"tools": [{"name": "a", "executor": {"kind": "command", "command": []}}]}"#,
                &["/tools/0/executor/command"],
            ),
            ("scalar.json", r#""tools""#, &["/: ", "expected an object"]),
            ("no-tools.json", r#"{"tool": []}"#, &["tool"]),
            ("empty.json", "", &["line 1, column 0"]),
        ];
        for (file, text, needles) in cases {
            let path = sb.write(file, text);
            let m = bad(&sb, &path);
            for n in *needles {
                assert!(m.contains(n), "{file}: `{n}` not in: {m}");
            }
        }
    }

    #[test]
    fn without_json_the_error_goes_to_stderr_only() {
        let sb = Sandbox::new();
        sb.with_catalogs(&[fixture("bad/wrong_type.json")])
            .arg("catalog")
            .assert()
            .code(2)
            .stdout(predicate::str::is_empty())
            .stderr(predicate::str::contains("toolsearch: "))
            .stderr(predicate::str::contains("/tools/0/name"));
    }
}

// ---------------------------------------------------------------------------------------
// 3b. Bad configuration: exit 2, bad-config, the key by its dotted path
// ---------------------------------------------------------------------------------------
mod bad_configs {
    use super::*;

    fn bad(sb: &Sandbox, toml: &str) -> String {
        let m = err_json(
            sb.with_config(toml).args(["catalog", "--json"]),
            2,
            "bad-config",
        );
        assert!(m.contains("test-config.toml"), "names the file: {m}");
        m
    }

    #[test]
    fn unknown_key_is_named() {
        let sb = Sandbox::new();
        let m = bad(&sb, "[tools]\nalow = [\"*\"]\n");
        assert!(m.contains("tools.alow"), "{m}");
        assert!(m.contains("unknown field `alow`"), "{m}");
        let m = bad(&sb, "[policy.chanel]\ndeny = []\n");
        assert!(m.contains("chanel"), "{m}");
        let m = bad(&sb, "[tools.toolSearch]\nmaxSearchLimt = 3\n");
        assert!(m.contains("maxSearchLimt"), "{m}");
        let m = bad(&sb, "[toolsets.x]\ntools = []\nalias = [\"y\"]\n");
        assert!(m.contains("alias"), "{m}");
    }

    #[test]
    fn wrong_type_names_the_dotted_key() {
        let sb = Sandbox::new();
        let m = bad(&sb, "[tools.toolSearch]\ncodeTimeoutMs = \"fast\"\n");
        assert!(m.contains("tools.toolSearch.codeTimeoutMs"), "{m}");
        let m = bad(&sb, "[tools]\ndeny = \"x\"\n");
        assert!(m.contains("tools.deny"), "{m}");
        let m = bad(&sb, "[tools]\ntoolSearch = 3\n");
        assert!(m.contains("tools.toolSearch"), "{m}");
        let m = bad(&sb, "[tools.toolSearch]\nmaxSearchLimit = -1\n");
        assert!(m.contains("tools.toolSearch.maxSearchLimit"), "{m}");
    }

    #[test]
    fn toml_syntax_error_is_bad_config() {
        let sb = Sandbox::new();
        let m = bad(&sb, "[tools\n");
        assert!(m.contains("at byte"), "{m}");
    }

    #[test]
    fn a_nonexistent_config_file_is_bad_config() {
        let sb = Sandbox::new();
        let m = err_json(
            sb.cmd()
                .args(["--config", "missing.toml", "catalog", "--json"]),
            2,
            "bad-config",
        );
        assert!(m.contains("missing.toml"), "{m}");
        assert!(m.contains("cannot read"), "{m}");
    }

    #[test]
    fn a_bad_config_fails_search_and_describe_too() {
        let sb = Sandbox::new();
        err_json(
            sb.with_config("[tools]\nalow = []\n")
                .args(["search", "issue", "--json"]),
            2,
            "bad-config",
        );
        err_json(
            sb.with_config("[tools]\nalow = []\n")
                .args(["describe", "create_issue", "--json"]),
            2,
            "bad-config",
        );
    }

    #[test]
    fn a_toolset_reference_to_nothing_is_bad_config() {
        let sb = Sandbox::new();
        let out = run(sb
            .with_config("[tools]\nallow = [\"group:nope\"]\n")
            .args(["catalog", "--json"]));
        assert_eq!(out.code, 2, "{}", out.stderr);
        let v = out.json();
        let code = v["error"]["code"].as_str().unwrap();
        assert_eq!(code, "bad-config", "{v}");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(m.contains("test-config.toml"), "{m}");
        assert!(m.contains("tools.allow"), "{m}");
        assert!(m.contains("group:nope"), "{m}");
    }
}

// ---------------------------------------------------------------------------------------
// 4. Policy, toolsets, tools.active and plugin overrides through the config
// ---------------------------------------------------------------------------------------
mod policy {
    use super::*;

    #[test]
    fn deny_mcp_removes_mcp_tools_from_search_and_describe() {
        let sb = Sandbox::new();
        let config = "[tools]\ndeny = [\"mcp:*\"]\n";
        let c = ok_json(sb.with_config(config).args(["catalog", "--json"]));
        assert!(
            c["counts"]["by_source"].get("mcp").is_none(),
            "{}",
            c["counts"]
        );
        assert!(c["filtered"].as_u64().unwrap() > 0);
        assert!(visible_ids(&c).iter().all(|id| !id.starts_with("mcp:")));
        assert!(hidden_ids(&c).iter().all(|id| !id.starts_with("mcp:")));

        let hits = ok_json(sb.with_config(config).args([
            "search",
            "notion page",
            "--limit",
            "20",
            "--json",
        ]));
        assert!(
            hits.as_array()
                .unwrap()
                .iter()
                .all(|h| h["source"] != "mcp"),
            "{hits}"
        );

        let m = err_json(
            sb.with_config(config)
                .args(["describe", "mcp:notion:notion-search", "--json"]),
            1,
            "unknown-tool",
        );
        assert!(m.contains("mcp:notion:notion-search"), "{m}");
        let suggestions = m.split("did you mean").nth(1).unwrap_or("");
        assert!(
            !suggestions.contains("`mcp:"),
            "a denied tool is never suggested: {m}"
        );

        // Without the policy the same tool is there.
        let hits = ok_json(sb.cmd().args(["search", "notion page", "--json"]));
        assert!(
            hits.as_array()
                .unwrap()
                .iter()
                .any(|h| h["source"] == "mcp")
        );
    }

    #[test]
    fn patterns_ignore_ascii_case() {
        let sb = Sandbox::new();
        let c = ok_json(
            sb.with_config("[tools]\ndeny = [\"MCP:*\", \"Create_Issue\"]\n")
                .args(["catalog", "--json"]),
        );
        let visible = visible_ids(&c);
        assert!(visible.iter().all(|id| !id.starts_with("mcp:")));
        assert!(!visible.contains(&"openclaw:github:create_issue".to_string()));
    }

    #[test]
    fn policy_levels_intersect() {
        let sb = Sandbox::new();
        let c = ok_json(
            sb.with_config(
                "[tools]\nallow = [\"github\", \"calendar\"]\n\
                 [policy.channel]\ndeny = [\"openclaw:calendar:*\", \"delete_*\"]\n",
            )
            .args(["catalog", "--json"]),
        );
        let visible = visible_ids(&c);
        assert!(!visible.is_empty());
        for id in visible.iter().chain(&hidden_ids(&c)) {
            assert!(id.starts_with("openclaw:github:"), "{id}");
            assert!(!id.contains(":delete_"), "{id}");
        }
        assert!(visible.contains(&"openclaw:github:create_issue".to_string()));

        // An agent-level allow narrows further.
        let c = ok_json(
            sb.with_config(
                "[tools]\nallow = [\"github\", \"calendar\"]\n\
                 [policy.agent]\nallow = [\"*_issue\"]\n\
                 [policy.channel]\ndeny = [\"close_*\"]\n",
            )
            .args(["catalog", "--json"]),
        );
        let visible = visible_ids(&c);
        assert!(visible.contains(&"openclaw:github:create_issue".to_string()));
        assert!(!visible.contains(&"openclaw:github:close_issue".to_string()));
        assert!(
            visible.iter().all(|id| id.ends_with("_issue")),
            "{visible:?}"
        );
    }

    #[test]
    fn an_empty_allow_list_allows_nothing() {
        let sb = Sandbox::new();
        let c = ok_json(
            sb.with_config("[tools]\nallow = []\n")
                .args(["catalog", "--json"]),
        );
        assert_eq!(c["counts"]["cataloged"], 0);
        assert_eq!(c["counts"]["direct_only"], 0);
        assert_eq!(c["counts"]["hidden"], 0);
    }

    #[test]
    fn toolsets_and_their_aliases_are_usable_in_allow() {
        let sb = Sandbox::new();
        let toolset = "[toolsets.planning]\ntools = [\"openclaw:calendar:*\", \"create_ticket\"]\naliases = [\"plan\"]\n";
        for allow in ["plan", "planning", "group:planning", "group:plan"] {
            let c = ok_json(
                sb.with_config(&format!("{toolset}[tools]\nallow = [\"{allow}\"]\n"))
                    .args(["catalog", "--json"]),
            );
            let visible = visible_ids(&c);
            assert!(
                visible.contains(&"openclaw:tickets:create_ticket".to_string()),
                "{allow}: {visible:?}"
            );
            assert!(visible.contains(&"openclaw:calendar:create_event".to_string()));
            for id in &visible {
                assert!(
                    id.starts_with("openclaw:calendar:") || id == "openclaw:tickets:create_ticket",
                    "{allow}: {id}"
                );
            }
        }
    }

    #[test]
    fn plugin_and_server_names_are_implicit_toolsets() {
        let sb = Sandbox::new();
        let c = ok_json(
            sb.with_config("[tools]\nallow = [\"weather\", \"docs\"]\n")
                .arg("--catalog")
                .arg(fixture("plugins"))
                .arg("--catalog")
                .arg(fixture("mcp"))
                .args(["catalog", "--json"]),
        );
        assert_eq!(
            visible_ids(&c),
            [
                "openclaw:weather:air_quality",
                "openclaw:weather:forecast",
                "mcp:docs:get_page",
                "mcp:docs:search"
            ]
        );
    }

    #[test]
    fn active_narrows_and_ignores_names_that_match_nothing() {
        let sb = Sandbox::new();
        let out = run(sb
            .with_config("[tools]\nactive = [\"github\", \"no_such_tool\"]\n")
            .args(["catalog", "--json"]));
        assert_eq!(out.code, 0, "{}", out.stderr);
        let c = out.json();
        let visible = visible_ids(&c);
        assert!(visible.len() > 10);
        assert!(
            visible.iter().all(|id| id.starts_with("openclaw:github:")),
            "{visible:?}"
        );
        assert!(c["filtered"].as_u64().unwrap() > 100);
        let hits = ok_json(
            sb.with_config("[tools]\nactive = [\"github\", \"no_such_tool\"]\n")
                .args(["search", "calendar event", "--json"]),
        );
        assert!(
            hits.as_array()
                .unwrap()
                .iter()
                .all(|h| h["source_name"] == "github"),
            "{hits}"
        );
    }

    #[test]
    fn a_plugin_cannot_replace_a_core_tool_unless_admitted() {
        let sb = Sandbox::new();
        let catalogs = [fixture("descriptors.json"), fixture("override")];
        let c = ok_json(sb.with_catalogs(&catalogs).args(["catalog", "--json"]));
        let visible = visible_ids(&c);
        assert!(visible.contains(&"openclaw:core:ping".to_string()));
        assert!(!visible.contains(&"openclaw:shadow:ping".to_string()));
        let notices = c["notices"].as_array().unwrap();
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert_eq!(notices[0]["code"], "override-refused");
        let msg = notices[0]["message"].as_str().unwrap();
        assert!(msg.contains("shadow") && msg.contains("ping"), "{msg}");
        let d = ok_json(
            sb.with_catalogs(&catalogs)
                .args(["describe", "ping", "--json"]),
        );
        assert_eq!(d["id"], "openclaw:core:ping");
        err_json(
            sb.with_catalogs(&catalogs)
                .args(["describe", "openclaw:shadow:ping", "--json"]),
            1,
            "unknown-tool",
        );
        // The person-readable catalog shows the notice too.
        sb.with_catalogs(&catalogs)
            .arg("catalog")
            .assert()
            .success()
            .stdout(predicate::str::contains("[override-refused]"));
    }

    #[test]
    fn allow_core_override_admits_the_plugin() {
        let sb = Sandbox::new();
        let config = "[plugins]\nallow_core_override = [\"shadow\"]\n";
        let mut cmd = sb.with_config(config);
        cmd.arg("--catalog")
            .arg(fixture("descriptors.json"))
            .arg("--catalog")
            .arg(fixture("override"));
        let c = ok_json(cmd.args(["catalog", "--json"]));
        let visible = visible_ids(&c);
        assert!(
            visible.contains(&"openclaw:shadow:ping".to_string()),
            "{visible:?}"
        );
        assert!(!visible.contains(&"openclaw:core:ping".to_string()));
        assert_eq!(c["notices"][0]["code"], "core-override");
        let mut cmd = sb.with_config(config);
        cmd.arg("--catalog")
            .arg(fixture("descriptors.json"))
            .arg("--catalog")
            .arg(fixture("override"));
        let d = ok_json(cmd.args(["describe", "ping", "--json"]));
        assert_eq!(d["id"], "openclaw:shadow:ping");
    }

    #[test]
    fn an_unadmitted_plugin_cannot_replace_a_core_tool_through_an_admitted_one() {
        let sb = Sandbox::new();
        for plugin in ["a", "b"] {
            sb.write(
                &format!("chain/{plugin}.json"),
                format!(
                    r#"{{"plugin": "{plugin}", "tools": [{{"name": "ping", "executor": {FIXTURE_EXECUTOR}}}]}}"#
                ),
            );
        }
        let mut cmd = sb.with_config("[plugins]\nallow_core_override = [\"a\"]\n");
        cmd.arg("--catalog").arg(fixture("descriptors.json")).args([
            "--catalog",
            "chain",
            "catalog",
            "--json",
        ]);
        let c = ok_json(&mut cmd);
        let visible = visible_ids(&c);
        assert!(
            !visible.contains(&"openclaw:b:ping".to_string()),
            "b was never admitted to replace core `ping`: {visible:?}, notices {}",
            c["notices"]
        );
    }

    #[test]
    fn a_later_plugin_replaces_an_earlier_one() {
        let sb = Sandbox::new();
        for plugin in ["alpha", "beta"] {
            sb.write(
                &format!("plugins/{plugin}.json"),
                format!(
                    r#"{{"plugin": "{plugin}", "tools": [{{"name": "share", "executor": {FIXTURE_EXECUTOR}}}]}}"#
                ),
            );
        }
        let c = ok_json(sb.cmd().args(["--catalog", "plugins", "catalog", "--json"]));
        assert_eq!(visible_ids(&c), ["openclaw:beta:share"]);
        assert_eq!(c["notices"][0]["code"], "plugin-replaced");
    }

    #[test]
    fn a_disabled_plugin_is_hidden_with_a_reason() {
        let sb = Sandbox::new();
        let c = ok_json(
            sb.with_config("[plugins]\ndisabled = [\"weather\"]\n")
                .arg("--catalog")
                .arg(fixture("plugins"))
                .args(["catalog", "--json"]),
        );
        assert_eq!(visible_ids(&c), ["openclaw:shipping:track_parcel"]);
        assert_eq!(
            hidden_ids(&c),
            ["openclaw:weather:air_quality", "openclaw:weather:forecast"]
        );
        assert_eq!(c["hidden"][0]["diagnostics"][0]["reason"], "plugin-enabled");
        let m = err_json(
            sb.with_config("[plugins]\ndisabled = [\"weather\"]\n")
                .arg("--catalog")
                .arg(fixture("plugins"))
                .args(["describe", "forecast", "--json"]),
            1,
            "unavailable-tool",
        );
        assert!(m.contains("weather"), "{m}");
    }
}

// ---------------------------------------------------------------------------------------
// 4b. Availability signals
// ---------------------------------------------------------------------------------------
mod availability {
    use super::*;

    fn cmd(sb: &Sandbox) -> Command {
        sb.with_catalogs(&[fixture("descriptors.json")])
    }

    #[test]
    fn an_env_signal_hides_the_tool_until_the_variable_is_set() {
        let sb = Sandbox::new();
        let c = ok_json(cmd(&sb).args(["catalog", "--json"]));
        assert_eq!(hidden_ids(&c), ["openclaw:core:secret_tool"]);
        let diag = &c["hidden"][0]["diagnostics"][0];
        assert_eq!(diag["reason"], "env");
        assert!(
            diag["message"].as_str().unwrap().contains("TS_TEST_VAR"),
            "{diag}"
        );
        let hits = ok_json(cmd(&sb).args(["search", "read a secret from the vault", "--json"]));
        assert!(!ids(&hits).contains(&"openclaw:core:secret_tool".to_string()));

        let c = ok_json(cmd(&sb).env("TS_TEST_VAR", "1").args(["catalog", "--json"]));
        assert!(hidden_ids(&c).is_empty());
        assert!(visible_ids(&c).contains(&"openclaw:core:secret_tool".to_string()));
        let hits = ok_json(cmd(&sb).env("TS_TEST_VAR", "1").args([
            "search",
            "read a secret from the vault",
            "--json",
        ]));
        assert_eq!(ids(&hits)[0], "openclaw:core:secret_tool");
        let d =
            ok_json(
                cmd(&sb)
                    .env("TS_TEST_VAR", "1")
                    .args(["describe", "secret_tool", "--json"]),
            );
        assert_eq!(d["id"], "openclaw:core:secret_tool");
    }

    #[test]
    fn an_empty_variable_does_not_count_as_set() {
        let sb = Sandbox::new();
        let c = ok_json(cmd(&sb).env("TS_TEST_VAR", "").args(["catalog", "--json"]));
        assert_eq!(hidden_ids(&c), ["openclaw:core:secret_tool"]);
    }

    #[test]
    fn describing_a_hidden_tool_is_unavailable_tool() {
        let sb = Sandbox::new();
        for requested in ["openclaw:core:secret_tool", "secret_tool"] {
            let m = err_json(
                cmd(&sb).args(["describe", requested, "--json"]),
                1,
                "unavailable-tool",
            );
            assert!(m.contains("openclaw:core:secret_tool"), "{m}");
            assert!(m.contains("TS_TEST_VAR"), "{m}");
        }
    }

    #[test]
    fn demo_signals_are_satisfied_by_config_and_env() {
        let sb = Sandbox::new();
        let config = "[context]\nchannel = \"slack\"\ncanvas = \"on\"\n\
                      [settings]\nvoice.provider = \"twilio\"\nsms.gateway = \"gw\"\ncalendar.rooms_directory = \"rooms\"\n\
                      [auth]\nprofiles = [\"github-admin\"]\n";
        let c = ok_json(
            sb.with_config(config)
                .env("GITHUB_ADMIN_TOKEN", "t")
                .args(["catalog", "--json"]),
        );
        // Only the tool that needs a plugin that is not loaded stays hidden.
        assert_eq!(hidden_ids(&c), ["openclaw:tickets:page_on_call"]);
        assert_eq!(c["hidden"][0]["diagnostics"][0]["reason"], "plugin-enabled");
        let visible = visible_ids(&c);
        for id in [
            "openclaw:core:add_reaction",
            "openclaw:core:send_sms",
            "openclaw:core:voice_call",
            "openclaw:github:delete_repository",
        ] {
            assert!(visible.contains(&id.to_string()), "{id}");
        }

        // A context of another value says so.
        let c = ok_json(
            sb.with_config("[context]\nchannel = \"discord\"\n")
                .args(["catalog", "--json"]),
        );
        let reaction = c["hidden"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["id"] == "openclaw:core:add_reaction")
            .expect("add_reaction stays hidden");
        assert_eq!(
            reaction["diagnostics"][0]["message"],
            "context `channel` is `discord`, not `slack`"
        );
        // all_of lists every failing part.
        let c = ok_json(sb.cmd().args(["catalog", "--json"]));
        let delete = c["hidden"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["id"] == "openclaw:github:delete_repository")
            .unwrap();
        let reasons: Vec<&str> = delete["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["reason"].as_str().unwrap())
            .collect();
        assert_eq!(reasons, ["auth", "env"]);
    }
}

// ---------------------------------------------------------------------------------------
// 5. Resolution: ids, exact names, ambiguity and suggestions
// ---------------------------------------------------------------------------------------
mod resolution {
    use super::*;

    #[test]
    fn unknown_id_is_exit_1_with_a_suggestion() {
        let sb = Sandbox::new();
        let m = err_json(
            sb.cmd()
                .args(["describe", "openclaw:github:create_isue", "--json"]),
            1,
            "unknown-tool",
        );
        assert!(
            m.contains("unknown tool `openclaw:github:create_isue`"),
            "{m}"
        );
        assert!(
            m.contains("did you mean `openclaw:github:create_issue`"),
            "{m}"
        );
        let m = err_json(
            sb.cmd().args(["describe", "create_isue", "--json"]),
            1,
            "unknown-tool",
        );
        assert!(m.contains("`openclaw:github:create_issue`"), "{m}");
    }

    #[test]
    fn unknown_tool_without_json_prints_to_stderr_and_exits_1() {
        let sb = Sandbox::new();
        sb.cmd()
            .args(["describe", "no_such_tool_at_all"])
            .assert()
            .code(1)
            .stdout(predicate::str::is_empty())
            .stderr(predicate::str::contains(
                "unknown tool `no_such_tool_at_all`",
            ));
    }

    #[test]
    fn a_bare_name_in_two_sources_is_ambiguous() {
        let sb = Sandbox::new();
        let catalogs = [fixture("descriptors.json"), fixture("mcp/docs.json")];
        let m = err_json(
            sb.with_catalogs(&catalogs)
                .args(["describe", "search", "--json"]),
            1,
            "ambiguous-tool",
        );
        assert!(m.contains("openclaw:core:search"), "{m}");
        assert!(m.contains("mcp:docs:search"), "{m}");
        assert!(m.contains("exact tool id"), "{m}");
        // Each id still resolves.
        for id in ["openclaw:core:search", "mcp:docs:search"] {
            let d = ok_json(sb.with_catalogs(&catalogs).args(["describe", id, "--json"]));
            assert_eq!(d["id"], id);
        }
    }

    #[test]
    fn describe_by_exact_unique_name() {
        let sb = Sandbox::new();
        let d = ok_json(sb.cmd().args(["describe", "create_issue", "--json"]));
        assert_eq!(d["id"], "openclaw:github:create_issue");
        let d = ok_json(sb.with_catalogs(&all_format_fixtures()).args([
            "describe",
            "track_parcel",
            "--json",
        ]));
        assert_eq!(d["id"], "openclaw:shipping:track_parcel");
        assert_eq!(d["input_schema"]["required"], json!(["tracking_number"]));
        assert_eq!(d["execution_mode"], "parallel");
        assert_eq!(d["catalog_mode"], "catalog");
        // Surrounding whitespace is ignored.
        let d = ok_json(sb.cmd().args(["describe", "  create_issue ", "--json"]));
        assert_eq!(d["id"], "openclaw:github:create_issue");
    }

    #[test]
    fn describe_of_a_direct_only_tool_works() {
        let sb = Sandbox::new();
        let d = ok_json(
            sb.with_catalogs(&[fixture("descriptors.json")])
                .args(["describe", "notify", "--json"]),
        );
        assert_eq!(d["id"], "openclaw:core:notify");
        assert_eq!(d["catalog_mode"], "direct-only");
        assert_eq!(d["output_schema"], Value::Null);
    }
}

// ---------------------------------------------------------------------------------------
// 6. Batch search
// ---------------------------------------------------------------------------------------
mod batch {
    use super::*;

    fn compact_bytes(v: &Value) -> usize {
        serde_json::to_vec(v).unwrap().len()
    }

    #[test]
    fn seventeen_queries_are_refused_sixteen_are_not() {
        let sb = Sandbox::new();
        let queries: Vec<String> = (0..17).map(|i| format!("query {i}")).collect();
        let m = err_json(
            sb.cmd().arg("search").args(&queries).arg("--json"),
            2,
            "invalid-request",
        );
        assert!(m.contains("16") && m.contains("17"), "{m}");
        let r = ok_json(sb.cmd().arg("search").args(&queries[..16]).arg("--json"));
        assert_eq!(r["results"].as_array().unwrap().len(), 16);
    }

    #[test]
    fn a_query_over_512_bytes_is_refused() {
        let sb = Sandbox::new();
        let long = "x".repeat(513);
        let m = err_json(
            sb.cmd().args(["search", "calendar", &long, "--json"]),
            2,
            "invalid-request",
        );
        assert!(m.contains("512"), "{m}");
        assert!(m.contains("query 2 is 513 bytes"), "{m}");
        // A single search has the same bound.
        let m = err_json(
            sb.cmd().args(["search", &long, "--json"]),
            2,
            "invalid-request",
        );
        assert!(m.contains("512"), "{m}");
        // Bytes, not characters: 257 × `é` is 514 bytes.
        let accents = "é".repeat(257);
        let m = err_json(
            sb.cmd().args(["search", &accents, "--json"]),
            2,
            "invalid-request",
        );
        assert!(m.contains("514 bytes"), "{m}");
        // Exactly 512 bytes is fine.
        let ok = "calendar ".repeat(56) + "calendar";
        assert_eq!(ok.len(), 512);
        ok_json(sb.cmd().args(["search", &ok, "--json"]));
    }

    #[test]
    fn three_queries_come_back_grouped_in_order() {
        let sb = Sandbox::new();
        let queries = ["calendar event", "github pull request", "ticket"];
        let r = ok_json(sb.cmd().arg("search").args(queries).arg("--json"));
        let groups = r["results"].as_array().unwrap();
        assert_eq!(groups.len(), 3);
        let total: usize = groups
            .iter()
            .map(|g| g["candidates"].as_array().unwrap().len())
            .sum();
        assert!(total <= 50);
        for (g, q) in groups.iter().zip(queries) {
            assert_eq!(g["query"], q);
            let candidates = g["candidates"].as_array().unwrap();
            assert_eq!(candidates.len(), 8, "default limit per query");
            for c in candidates {
                assert_compact(c);
            }
            assert!(g.get("truncated").is_none(), "not truncated: {g}");
            // A group equals the single search of its query.
            let single = ok_json(sb.cmd().args(["search", q, "--json"]));
            assert_eq!(&g["candidates"], &single, "{q}");
        }
        assert!(r.get("truncated").is_none());
        assert_eq!(
            ids(&groups[1]["candidates"])[0].split(':').nth(1),
            Some("github")
        );
    }

    #[test]
    fn a_batch_keeps_at_most_50_candidates_and_under_24_kib() {
        let sb = Sandbox::new();
        let r = ok_json(sb.cmd().args([
            "search",
            "calendar event",
            "github pull request",
            "ticket",
            "--limit",
            "20",
            "--json",
        ]));
        let groups = r["results"].as_array().unwrap();
        let lens: Vec<usize> = groups
            .iter()
            .map(|g| g["candidates"].as_array().unwrap().len())
            .collect();
        assert_eq!(lens.iter().sum::<usize>(), 50, "{lens:?}");
        assert_eq!(r["truncated"], true);
        assert!(groups.iter().all(|g| g["truncated"] == true), "{lens:?}");
        // Earlier queries keep at least as many as later ones.
        assert!(lens.windows(2).all(|w| w[0] >= w[1]), "{lens:?}");

        let queries: Vec<String> = [
            "issue",
            "calendar",
            "ticket",
            "email",
            "file",
            "browser",
            "page",
            "pull request",
            "meeting",
            "reminder",
            "image",
            "notion",
            "repository",
            "sprint",
            "customer",
            "note",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let r = ok_json(
            sb.cmd()
                .arg("search")
                .args(&queries)
                .args(["--limit", "20", "--json"]),
        );
        let groups = r["results"].as_array().unwrap();
        assert_eq!(groups.len(), 16);
        let total: usize = groups
            .iter()
            .map(|g| g["candidates"].as_array().unwrap().len())
            .sum();
        assert!(total <= 50, "{total}");
        assert!(compact_bytes(&r["results"]) <= 24 * 1024);
        for (g, q) in groups.iter().zip(&queries) {
            assert_eq!(g["query"], q.as_str());
        }
    }

    #[test]
    fn person_readable_batch_has_a_section_per_query() {
        let sb = Sandbox::new();
        let out = run(sb.cmd().args(["search", "calendar", "ticket", "zzyzxq"]));
        assert_eq!(out.code, 0);
        let a = out.stdout.find("## calendar").expect("calendar section");
        let b = out.stdout.find("## ticket").expect("ticket section");
        let c = out.stdout.find("## zzyzxq").expect("empty section");
        assert!(a < b && b < c, "{}", out.stdout);
        assert!(out.stdout.contains("no tool matches \"zzyzxq\""));
    }
}

// ---------------------------------------------------------------------------------------
// 7. Clamped settings
// ---------------------------------------------------------------------------------------
mod clamps {
    use super::*;

    fn count(cmd: &mut Command) -> usize {
        ok_json(cmd).as_array().unwrap().len()
    }

    #[test]
    fn max_search_limit_caps_the_requested_limit() {
        let sb = Sandbox::new();
        let config = "[tools.toolSearch]\nmaxSearchLimit = 3\n";
        assert_eq!(
            count(
                sb.with_config(config)
                    .args(["search", "issue", "--limit", "10", "--json"])
            ),
            3
        );
        // The default limit follows the max down.
        assert_eq!(
            count(sb.with_config(config).args(["search", "issue", "--json"])),
            3
        );
        let r = ok_json(
            sb.with_config(config)
                .args(["search", "issue", "calendar", "--limit", "10", "--json"]),
        );
        for g in r["results"].as_array().unwrap() {
            assert_eq!(g["candidates"].as_array().unwrap().len(), 3);
        }
    }

    #[test]
    fn search_default_limit_is_read() {
        let sb = Sandbox::new();
        let config = "[tools.toolSearch]\nsearchDefaultLimit = 5\n";
        assert_eq!(
            count(sb.with_config(config).args(["search", "issue", "--json"])),
            5
        );
        assert_eq!(
            count(
                sb.with_config(config)
                    .args(["search", "issue", "--limit", "12", "--json"])
            ),
            12
        );
    }

    #[test]
    fn out_of_range_values_are_clamped_with_a_warning() {
        let sb = Sandbox::new();
        let config =
            "[tools.toolSearch]\nmaxSearchLimit = 500\ncodeTimeoutMs = 5\nsearchDefaultLimit = 0\n";
        let out = run(sb.with_config(config).args(["search", "issue", "--json"]));
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert_eq!(
            out.json().as_array().unwrap().len(),
            1,
            "searchDefaultLimit 0 -> 1"
        );
        for needle in [
            "tools.toolSearch.maxSearchLimit = 500 is outside 1..=50; using 50",
            "tools.toolSearch.codeTimeoutMs = 5 is outside 1000..=60000; using 1000",
            "tools.toolSearch.searchDefaultLimit = 0 is outside 1..=50; using 1",
        ] {
            assert!(
                out.stderr.contains(needle),
                "`{needle}` not in:\n{}",
                out.stderr
            );
        }
        assert!(out.stderr.contains("WARN"), "{}", out.stderr);
        // maxSearchLimit clamped to 50, so --limit 500 gives at most 50.
        let n = count(
            sb.with_config(config)
                .args(["search", "issue", "--limit", "500", "--json"]),
        );
        assert!(n > 20 && n <= 50, "{n}");

        let out = run(sb
            .with_config("[tools.toolSearch]\ncodeTimeoutMs = 999999\nmaxSearchLimit = 0\n")
            .args(["catalog", "--json"]));
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stderr.contains("using 60000"), "{}", out.stderr);
        assert!(
            out.stderr
                .contains("maxSearchLimit = 0 is outside 1..=50; using 1")
        );
    }

    #[test]
    fn an_unknown_mode_is_code_with_a_warning() {
        let sb = Sandbox::new();
        let out = run(sb
            .with_config("[tools.toolSearch]\nmode = \"banana\"\n")
            .args(["catalog", "--json"]));
        assert_eq!(out.code, 0);
        assert_eq!(out.json()["mode"], "code");
        assert!(out.stderr.contains("banana"), "{}", out.stderr);
    }

    #[test]
    fn in_range_values_do_not_warn() {
        let sb = Sandbox::new();
        let out = run(sb
            .with_config("[tools.toolSearch]\nmaxSearchLimit = 10\ncodeTimeoutMs = 5000\n")
            .args(["search", "issue", "--json"]));
        assert_eq!(out.code, 0);
        assert!(!out.stderr.contains("WARN"), "{}", out.stderr);
    }
}

// ---------------------------------------------------------------------------------------
// 8. eval
// ---------------------------------------------------------------------------------------
mod eval {
    use super::*;

    fn eval(sb: &Sandbox, catalog: &Path, queries: &Path, extra: &[&str]) -> Command {
        let mut cmd = sb.cmd();
        cmd.arg("eval")
            .arg("--catalog")
            .arg(catalog)
            .arg("--queries")
            .arg(queries)
            .args(extra);
        cmd
    }

    fn close(v: &Value, want: f64) {
        let got = v.as_f64().unwrap_or_else(|| panic!("a number: {v}"));
        assert!((got - want).abs() < 1e-9, "got {got}, want {want}");
    }

    #[test]
    fn metrics_match_a_hand_computed_case() {
        // q1 is a tool's exact name, q2 and q3 plainly describe one tool each (q3's gold
        // is one gold_any_of group, so finding t2 alone is full recall), q4 matches
        // nothing: every metric is 3/4.
        let sb = Sandbox::new();
        let r = ok_json(&mut eval(
            &sb,
            &fixture("eval/catalog.jsonl"),
            &fixture("eval/queries.jsonl"),
            &["--json"],
        ));
        let recall = r["recall"].as_object().unwrap();
        let keys: BTreeSet<&str> = recall.keys().map(String::as_str).collect();
        assert_eq!(keys, BTreeSet::from(["1", "5", "10"]));
        for k in ["1", "5", "10"] {
            close(&r["recall"][k], 0.75);
        }
        for k in ["5", "10"] {
            close(&r["ndcg"][k], 0.75);
        }
        close(&r["mrr"], 0.75);
        assert_eq!(r["queries"], 4);
        assert_eq!(r["empty"], 1);
        assert_eq!(r["tools"], 4);
        let p50 = r["latency_us"]["p50"].as_f64().unwrap();
        let p95 = r["latency_us"]["p95"].as_f64().unwrap();
        assert!(p50 >= 0.0 && p50 <= p95, "{p50} {p95}");
    }

    #[test]
    fn a_query_equal_to_a_tool_name_is_found_first() {
        let sb = Sandbox::new();
        let queries = sb.write(
            "exact.jsonl",
            "{\"query\": \"create_invoice\", \"gold\": [\"t1\"]}\n\
             {\"query\": \"send_sms\", \"gold\": [\"t2\"]}\n\
             {\"query\": \"get_weather\", \"gold\": [\"t3\"]}\n\
             {\"query\": \"resize_image\", \"gold\": [\"t4\"]}\n",
        );
        let r = ok_json(&mut eval(
            &sb,
            &fixture("eval/catalog.jsonl"),
            &queries,
            &["--json"],
        ));
        close(&r["recall"]["1"], 1.0);
        close(&r["mrr"], 1.0);
        close(&r["ndcg"]["5"], 1.0);
        assert_eq!(r["empty"], 0);
    }

    #[test]
    fn a_gold_any_of_group_is_one_unit() {
        let sb = Sandbox::new();
        // t9 does not exist: counted apart it would halve the recall.
        let queries = sb.write(
            "any.jsonl",
            "{\"query\": \"send a text message to a phone\", \"gold\": [\"t2\", \"t9\"], \"gold_any_of\": [[\"t2\", \"t9\"]]}\n",
        );
        let r = ok_json(&mut eval(
            &sb,
            &fixture("eval/catalog.jsonl"),
            &queries,
            &["--json"],
        ));
        close(&r["recall"]["1"], 1.0);
        let queries = sb.write(
            "apart.jsonl",
            "{\"query\": \"send a text message to a phone\", \"gold\": [\"t2\", \"t9\"]}\n",
        );
        let r = ok_json(&mut eval(
            &sb,
            &fixture("eval/catalog.jsonl"),
            &queries,
            &["--json"],
        ));
        close(&r["recall"]["10"], 0.5);
        // nDCG: one hit at rank 1 out of an ideal of two.
        close(&r["ndcg"]["5"], 1.0 / (1.0 + 1.0 / 3f64.log2()));
        close(&r["mrr"], 1.0);
    }

    #[test]
    fn k_chooses_the_recall_cut_offs() {
        let sb = Sandbox::new();
        let r = ok_json(&mut eval(
            &sb,
            &fixture("eval/catalog.jsonl"),
            &fixture("eval/queries.jsonl"),
            &["--k", "1,3", "--json"],
        ));
        let keys: Vec<&String> = r["recall"].as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 2);
        assert!(r["recall"]["3"].is_number() && r["recall"]["1"].is_number());
        assert!(r["ndcg"]["5"].is_number() && r["ndcg"]["10"].is_number());
        let m = err_json(
            &mut eval(
                &sb,
                &fixture("eval/catalog.jsonl"),
                &fixture("eval/queries.jsonl"),
                &["--k", "0", "--json"],
            ),
            2,
            "usage",
        );
        assert!(m.contains("--k"), "{m}");
    }

    #[test]
    fn subsets_are_reported_apart() {
        let sb = Sandbox::new();
        let queries = sb.write(
            "sub.jsonl",
            "{\"query\": \"create_invoice\", \"gold\": [\"t1\"], \"subset\": \"easy\"}\n\
             {\"query\": \"zzyzx qwxv\", \"gold\": [\"t4\"], \"subset\": \"hard\"}\n",
        );
        let r = ok_json(&mut eval(
            &sb,
            &fixture("eval/catalog.jsonl"),
            &queries,
            &["--json"],
        ));
        close(&r["recall"]["1"], 0.5);
        close(&r["subsets"]["easy"]["recall"]["1"], 1.0);
        close(&r["subsets"]["hard"]["recall"]["1"], 0.0);
        assert_eq!(r["subsets"]["hard"]["empty"], 1);
    }

    #[test]
    fn a_malformed_queries_line_is_exit_2_naming_file_and_line() {
        let sb = Sandbox::new();
        let path = fixture("eval/bad_queries.jsonl");
        let m = err_json(
            &mut eval(&sb, &fixture("eval/catalog.jsonl"), &path, &["--json"]),
            2,
            "bad-dataset",
        );
        assert!(
            m.contains(&format!("{}: line 2, column", path.display())),
            "{m}"
        );
        let queries = sb.write(
            "broken.jsonl",
            "{\"query\": \"a\", \"gold\": [\"t1\"]}\n{oops\n",
        );
        let m = err_json(
            &mut eval(&sb, &fixture("eval/catalog.jsonl"), &queries, &["--json"]),
            2,
            "bad-dataset",
        );
        assert!(m.contains("broken.jsonl: line 2, column"), "{m}");
    }

    #[test]
    fn a_malformed_queries_line_does_not_name_a_wrong_line() {
        let sb = Sandbox::new();
        let m = err_json(
            &mut eval(
                &sb,
                &fixture("eval/catalog.jsonl"),
                &fixture("eval/bad_queries.jsonl"),
                &["--json"],
            ),
            2,
            "bad-dataset",
        );
        assert!(!m.contains("at line 1 column"), "{m}");
    }

    #[test]
    fn bad_data_set_files_are_exit_2() {
        let sb = Sandbox::new();
        let catalog = sb.write(
            "catalog.jsonl",
            "{\"id\": \"a\", \"name\": \"x\"}\n{\"id\": \"a\", \"name\": \"y\"}\n",
        );
        let m = err_json(
            &mut eval(&sb, &catalog, &fixture("eval/queries.jsonl"), &["--json"]),
            2,
            "bad-dataset",
        );
        assert!(m.contains("duplicate id"), "{m}");
        let missing = sb.path().join("missing.jsonl");
        let m = err_json(
            &mut eval(&sb, &fixture("eval/catalog.jsonl"), &missing, &["--json"]),
            2,
            "bad-dataset",
        );
        assert!(m.contains("missing.jsonl"), "{m}");
    }

    #[test]
    fn eval_reads_the_config_like_every_command() {
        let sb = Sandbox::new();
        let run = |extra: &[&str]| {
            let mut cmd = eval(
                &sb,
                &fixture("eval/catalog.jsonl"),
                &fixture("eval/queries.jsonl"),
                &["--json"],
            );
            cmd.args(extra);
            cmd
        };
        let r = ok_json(&mut run(&[]));
        assert_eq!(r["ranking"], "lexical", "{r}");
        assert!(r.get("model").is_none(), "{r}");

        let bad = sb.write("bad.toml", "[search]\nsemantik = {}\n");
        let m = err_json(
            &mut run(&["--config", bad.to_str().unwrap()]),
            2,
            "bad-config",
        );
        assert!(m.contains("semantik"), "{m}");
        sb.write("toolsearch.toml", "this is not toml [[[");
        err_json(&mut run(&[]), 2, "bad-config");
    }

    #[test]
    fn person_readable_eval_is_a_table() {
        let sb = Sandbox::new();
        eval(
            &sb,
            &fixture("eval/catalog.jsonl"),
            &fixture("eval/queries.jsonl"),
            &[],
        )
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "| set | queries | R@1 | R@5 | R@10 |",
        ))
        .stdout(predicate::str::contains("| eval (4 tools) | 4 | 75.0 |"));
    }
}

// ---------------------------------------------------------------------------------------
// Command-line usage errors (clap)
// ---------------------------------------------------------------------------------------
mod usage {
    use super::*;

    #[test]
    fn bad_usage_is_exit_2() {
        let sb = Sandbox::new();
        for args in [
            &["search", "--limit", "abc", "issue"][..],
            &["search"][..],
            &["--mode", "banana", "catalog"][..],
            &["describe"][..],
            &["no-such-command"][..],
            &[][..],
        ] {
            let out = run(sb.cmd().args(args));
            assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
            assert!(!out.stderr.is_empty(), "{args:?}");
        }
    }

    #[test]
    fn help_and_version_exit_0() {
        let sb = Sandbox::new();
        sb.cmd()
            .arg("--help")
            .assert()
            .success()
            .stdout(predicate::str::contains("search"));
        sb.cmd()
            .arg("--version")
            .assert()
            .success()
            .stdout(predicate::str::contains("toolsearch"));
    }

    #[test]
    fn usage_errors_with_json_print_a_json_error() {
        let sb = Sandbox::new();
        let out = run(sb
            .cmd()
            .args(["search", "issue", "--limit", "abc", "--json"]));
        assert_eq!(out.code, 2);
        let v = out.json();
        assert!(v["error"]["code"].is_string(), "{v}");
    }
}

/// An MCP client or a CI log that captures stderr shows colour codes as text: a warning
/// written to a pipe has none, with or without `NO_COLOR`.
#[test]
fn log_lines_on_a_pipe_carry_no_colour_codes() {
    let sb = Sandbox::new();
    let mut cmd = sb.with_config("[tools.toolSearch]\nmode = \"sideways\"\n");
    cmd.env_remove("NO_COLOR")
        .args(["search", "issue", "--json"]);
    let out = cmd.output().expect("run toolsearch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("sideways"),
        "no warning was written: {stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes on a pipe: {stderr:?}"
    );
}

// ---------------------------------------------------------------------------------------
// The catalog store: planned catalogs and indexes kept between runs
// ---------------------------------------------------------------------------------------
mod store {
    use super::*;

    fn tool(name: &str, description: &str) -> String {
        json!({
            "name": name,
            "description": description,
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
            "executor": {"kind": "fixture", "text": "ok"}
        })
        .to_string()
            + "\n"
    }

    /// `toolsearch` with its cache in the sandbox.
    fn cached(sb: &Sandbox, catalog: &Path) -> Command {
        let mut cmd = sb.cmd();
        cmd.env("XDG_CACHE_HOME", sb.path().join("cache"))
            .arg("--catalog")
            .arg(catalog);
        cmd
    }

    fn stored(sb: &Sandbox, suffix: &str) -> usize {
        fs::read_dir(sb.path().join("cache/toolsearch/catalogs"))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(suffix))
                    .count()
            })
            .unwrap_or(0)
    }

    #[test]
    fn a_repeated_search_reads_the_stored_catalog_and_sees_every_change() {
        let sb = Sandbox::new();
        let file = sb.write(
            "tools.jsonl",
            tool("weather_now", "Current weather for a city") + &tool("send_mail", "Send an email"),
        );
        let first = ok_json(cached(&sb, &file).args(["search", "weather in Paris", "--json"]));
        assert_eq!(ids(&first)[0], "openclaw:core:weather_now");
        assert_eq!((stored(&sb, ".catalog"), stored(&sb, ".index")), (1, 1));
        let again = ok_json(cached(&sb, &file).args(["search", "weather in Paris", "--json"]));
        assert_eq!(again, first);
        assert_eq!(stored(&sb, ".catalog"), 1, "an unchanged file is a hit");

        // The repeated run read the entry rather than writing one (the file is the same
        // inode); a stored entry edited in place fails its hash, is not believed (the
        // answer is the file's) and is written again.
        use std::os::unix::fs::MetadataExt;
        let entry = fs::read_dir(sb.path().join("cache/toolsearch/catalogs"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "catalog"))
            .unwrap();
        let inode = fs::metadata(&entry).unwrap().ino();
        ok_json(cached(&sb, &file).args(["search", "weather in Paris", "--json"]));
        assert_eq!(
            fs::metadata(&entry).unwrap().ino(),
            inode,
            "a hit writes nothing"
        );
        let mut edited = fs::read(&entry).unwrap();
        let (from, to) = (b"Current weather", b"Archived report");
        let at = edited
            .windows(from.len())
            .position(|w| w == from)
            .expect("the description is stored");
        edited[at..at + from.len()].copy_from_slice(to);
        fs::write(&entry, &edited).unwrap();
        let d = ok_json(cached(&sb, &file).args(["describe", "weather_now", "--json"]));
        assert_eq!(d["description"], "Current weather for a city");
        assert_ne!(fs::metadata(&entry).unwrap().ino(), inode, "written again");

        // A tool appended to the file is found by the next search.
        let mut text = fs::read_to_string(&file).unwrap();
        text.push_str(&tool("book_flight", "Book a flight between two airports"));
        fs::write(&file, &text).unwrap();
        let hits = ok_json(cached(&sb, &file).args(["search", "book a flight", "--json"]));
        assert_eq!(ids(&hits)[0], "openclaw:core:book_flight");

        // One byte changed, the same length, in the same second: still seen.
        let changed = text.replace("Send an email", "Send an emaiL");
        assert_eq!(changed.len(), text.len());
        fs::write(&file, &changed).unwrap();
        let d = ok_json(cached(&sb, &file).args(["describe", "send_mail", "--json"]));
        assert_eq!(d["description"], "Send an emaiL");

        // A file that no longer parses is an error, not an old answer.
        fs::write(&file, "{not json\n").unwrap();
        let m = err_json(
            cached(&sb, &file).args(["search", "mail", "--json"]),
            2,
            "bad-catalog",
        );
        assert!(m.contains("tools.jsonl"), "{m}");
    }

    #[test]
    fn processes_racing_on_a_cold_store_all_answer_alike() {
        let sb = Sandbox::new();
        let mut text = String::new();
        for i in 0..300 {
            text.push_str(&tool(
                &format!("tool_{i}"),
                &format!("Does thing number {i}"),
            ));
        }
        text.push_str(&tool("weather_now", "Current weather for a city"));
        let file = sb.write("tools.jsonl", text);
        // Started together (assert_cmd waits for each), with the cache in the sandbox.
        let mut procs = Vec::new();
        for _ in 0..8 {
            let mut cmd = std::process::Command::new(common::BIN);
            for var in common::SCRUBBED_ENV {
                cmd.env_remove(var);
            }
            cmd.current_dir(sb.path())
                .env("XDG_CACHE_HOME", sb.path().join("cache"))
                .arg("--catalog")
                .arg(&file)
                .args(["search", "weather in Paris", "--json"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            procs.push(cmd.spawn().expect("spawn"));
        }
        let outs: Vec<_> = procs
            .into_iter()
            .map(|p| p.wait_with_output().expect("wait"))
            .collect();
        for o in &outs {
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            assert_eq!(o.stdout, outs[0].stdout);
        }
        let hits: Value = serde_json::from_slice(&outs[0].stdout).unwrap();
        assert_eq!(ids(&hits)[0], "openclaw:core:weather_now");
        let names: Vec<String> = fs::read_dir(sb.path().join("cache/toolsearch/catalogs"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names.len(),
            2,
            "one catalog and one index, nothing half written: {names:?}"
        );
    }

    #[test]
    fn a_group_writable_umask_still_stores_privately() {
        use std::os::unix::fs::PermissionsExt;
        let sb = Sandbox::new();
        let file = sb.write(
            "tools.jsonl",
            tool("weather_now", "Current weather for a city"),
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg("umask 002; exec \"$0\" --catalog \"$1\" search weather --json")
            .arg(common::BIN)
            .arg(&file)
            .current_dir(sb.path())
            .env("XDG_CACHE_HOME", sb.path().join("cache"))
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(stored(&sb, ".catalog"), 1);
        for d in ["cache/toolsearch", "cache/toolsearch/catalogs"] {
            let mode = fs::metadata(sb.path().join(d))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{d}");
        }
    }

    #[test]
    fn a_changed_environment_variable_replans() {
        let sb = Sandbox::new();
        let file = fixture("descriptors.json");
        for (value, hidden) in [
            (None, true),
            (Some("1"), false),
            (None, true),
            (Some("1"), false),
        ] {
            let mut cmd = cached(&sb, &file);
            if let Some(v) = value {
                cmd.env("TS_TEST_VAR", v);
            }
            let c = ok_json(cmd.args(["catalog", "--json"]));
            assert_eq!(
                hidden_ids(&c).contains(&"openclaw:core:secret_tool".to_string()),
                hidden,
                "TS_TEST_VAR={value:?}"
            );
        }
    }

    #[test]
    fn a_damaged_or_unwritable_store_is_never_an_error() {
        let sb = Sandbox::new();
        let file = sb.write(
            "tools.jsonl",
            tool("weather_now", "Current weather for a city"),
        );
        let want = ok_json(cached(&sb, &file).args(["search", "weather", "--json"]));

        // Every stored file cut short or overwritten with garbage.
        let dir = sb.path().join("cache/toolsearch/catalogs");
        let mut files = vec![];
        for e in fs::read_dir(&dir).unwrap().flatten() {
            if e.path().is_dir() {
                files.extend(fs::read_dir(e.path()).unwrap().flatten().map(|f| f.path()));
            } else {
                files.push(e.path());
            }
        }
        assert!(files.len() > 2, "{files:?}");
        for f in &files {
            fs::write(f, b"\x00garbage").unwrap();
        }
        for _ in 0..2 {
            let hits = ok_json(cached(&sb, &file).args(["search", "weather", "--json"]));
            assert_eq!(hits, want);
        }

        // A cache root that is a file: nothing is stored, everything works.
        let blocked = sb.write("blocked", "not a folder");
        let hits = ok_json(
            sb.cmd()
                .env("XDG_CACHE_HOME", &blocked)
                .arg("--catalog")
                .arg(&file)
                .args(["search", "weather", "--json"]),
        );
        assert_eq!(hits, want);

        // `[catalog] cache = false`: nothing is written.
        let sb2 = Sandbox::new();
        let config = sb2.write("c.toml", "[catalog]\ncache = false\n");
        let hits = ok_json(
            cached(&sb2, &file)
                .arg("--config")
                .arg(&config)
                .args(["search", "weather", "--json"]),
        );
        assert_eq!(hits, want);
        assert!(!sb2.path().join("cache/toolsearch/catalogs").exists());
    }
}

use std::path::Path;

use super::*;
use crate::catalog::{Facts, embedded};
use crate::config::Config;

fn catalog_with(config_text: &str, tools: Vec<crate::ToolDescriptor>) -> Catalog {
    let config = Config::from_toml_str(config_text, Path::new("t.toml")).unwrap();
    Catalog::build(tools, &Facts::bare(&config)).unwrap()
}

fn demo(config_text: &str) -> Catalog {
    catalog_with(config_text, embedded::demo_descriptors().unwrap())
}

fn options(mode: Mode) -> Options<'static> {
    Options {
        mode,
        code_available: Ok(()),
        prompt: "open a github issue about the crash",
        context_window: None,
        likely: LIKELY_DEFAULT,
        required: &[],
        code_timeout_ms: 10_000,
    }
}

fn names(s: &Surface) -> Vec<&str> {
    s.tools.iter().map(|t| t.name.as_str()).collect()
}

#[test]
fn code_and_tools_declare_their_controls_and_the_direct_only_tools() {
    let c = demo("");
    let s = build(&c, &options(Mode::Code)).unwrap();
    assert_eq!(s.mode, Mode::Code);
    assert_eq!(names(&s), ["tool_search_code", "message", "exec_command"]);
    let s = build(&c, &options(Mode::Tools)).unwrap();
    assert_eq!(
        names(&s),
        [
            "tool_search",
            "tool_describe",
            "tool_call",
            "message",
            "exec_command"
        ]
    );
    let s = build(&c, &options(Mode::Direct)).unwrap();
    assert_eq!(s.tools.len(), c.cataloged().len() + c.direct_only().len());
}

#[test]
fn code_mode_falls_back_without_node_or_when_denied() {
    let c = demo("");
    let mut o = options(Mode::Code);
    o.code_available = Err("no node".into());
    let s = build(&c, &o).unwrap();
    assert_eq!(s.mode, Mode::Tools);
    assert!(s.reasons[0].contains("no node"), "{:?}", s.reasons);

    let c = demo("[tools]\ndeny = [\"tool_search_code\"]\n");
    let s = build(&c, &options(Mode::Code)).unwrap();
    assert_eq!(s.mode, Mode::Tools);
    assert!(s.reasons[0].contains("denies tool_search_code"));

    let c = demo("[tools]\ndeny = [\"tool_search_code\", \"tool_call\"]\n");
    let s = build(&c, &options(Mode::Code)).unwrap();
    assert_eq!(s.mode, Mode::Direct, "{:?}", s.reasons);
    assert!(!names(&s).contains(&"tool_call"));
}

#[test]
fn auto_is_direct_for_small_catalogs_and_code_for_large_ones() {
    let small = catalog_with("", crate::synth::catalog(10, 1));
    let s = build(&small, &options(Mode::Auto)).unwrap();
    assert_eq!(s.mode, Mode::Direct, "{:?}", s.reasons);
    let large = demo("");
    let s = build(&large, &options(Mode::Auto)).unwrap();
    assert_eq!(s.mode, Mode::Code);
    assert!(s.reasons[0].starts_with("auto: "));
    let mut o = options(Mode::Auto);
    o.code_available = Err("no node".into());
    assert_eq!(build(&large, &o).unwrap().mode, Mode::Tools);
}

#[test]
fn the_directory_is_bounded_sorted_and_says_what_it_left_out() {
    for n in [200usize, 10_000] {
        let c = catalog_with("", crate::synth::catalog(n, 3));
        let s = build(&c, &options(Mode::Directory)).unwrap();
        let d = s.directory.clone().unwrap();
        assert!(d.chars <= DIRECTORY_MAX_CHARS, "{n}: {}", d.chars);
        assert_eq!(d.chars, s.system.chars().count());
        assert!(s.system.starts_with(texts::DIRECTORY_HEADING));
        let lines: Vec<&str> = s.system.lines().filter(|l| l.starts_with("- ")).collect();
        assert_eq!(lines.len(), d.listed);
        let mut sorted = lines.clone();
        sorted.sort();
        assert_eq!(lines, sorted);
        assert!(
            lines
                .iter()
                .all(|l| l.chars().count() <= DIRECTORY_LINE_CHARS + 80)
        );
        assert_eq!(d.listed + d.omitted, c.cataloged().len());
        if d.omitted > 0 {
            assert!(s.system.contains(&format!("{} more tools", d.omitted)));
        }
        assert!(s.tools.len() <= 3 + c.direct_only().len() + LIKELY_MAX);
    }
    // A small context window gets a smaller directory.
    let c = catalog_with("", crate::synth::catalog(200, 3));
    let mut o = options(Mode::Directory);
    o.context_window = Some(8_000);
    let d = build(&c, &o).unwrap().directory.unwrap();
    assert_eq!(d.bound, 3_200);
    assert!(d.chars <= 3_200);
}

#[test]
fn the_directory_loads_likely_and_required_schemas() {
    let c = demo("");
    let mut o = options(Mode::Directory);
    let required = vec!["openclaw:calendar:create_event".to_string()];
    o.required = &required;
    let s = build(&c, &o).unwrap();
    assert_eq!(s.loaded[0], "openclaw:calendar:create_event");
    assert!(
        s.loaded
            .contains(&"openclaw:github:create_issue".to_string()),
        "{:?}",
        s.loaded
    );
    assert_eq!(s.loaded.len(), LIKELY_DEFAULT);
    // Client tools stay directly visible.
    assert!(names(&s).contains(&"pick_file"));
    assert!(!s.system.contains("- pick_file"));
}

#[test]
fn a_client_tool_colliding_with_a_cataloged_name_is_an_error_naming_both() {
    let mut tools = embedded::demo_descriptors().unwrap();
    let mut clash = tools
        .iter()
        .find(|t| t.source == Source::Client)
        .unwrap()
        .clone();
    clash.name = "create_issue".into();
    tools.push(clash);
    let c = catalog_with("", tools);
    let e = build(&c, &options(Mode::Directory)).unwrap_err();
    assert_eq!(e.code(), "name-collision");
    assert!(e.to_string().contains("client:client:create_issue"), "{e}");
    assert!(
        e.to_string().contains("openclaw:github:create_issue"),
        "{e}"
    );
}

#[test]
fn deferred_calls_need_the_exact_unique_name() {
    let c = demo("");
    assert_eq!(
        deferred(&c, "create_issue").unwrap().map(|e| e.id.as_str()),
        Some("openclaw:github:create_issue")
    );
    for miss in [
        "create_iss",
        "create_isue",
        "openclaw:github:create_issue",
        "Create_Issue",
        "",
    ] {
        assert!(deferred(&c, miss).unwrap().is_none(), "{miss}");
    }
    // Direct-only tools are declared anyway; they are not deferred.
    assert!(deferred(&c, "message").unwrap().is_none());
    let mut tools = embedded::demo_descriptors().unwrap();
    let mut twin = tools
        .iter()
        .find(|t| t.name == "create_issue")
        .unwrap()
        .clone();
    twin.source = Source::Mcp;
    twin.source_name = "gh".into();
    tools.push(twin);
    let c = catalog_with("", tools);
    assert_eq!(
        deferred(&c, "create_issue").unwrap_err().code(),
        "ambiguous-tool"
    );
}

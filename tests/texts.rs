//! Snapshot tests of every text a model reads (src/texts.rs and the declared control
//! tools): a change to what models are told shows up as a reviewed snapshot diff.

use toolsearch::Catalog;
use toolsearch::catalog::{Facts, embedded};
use toolsearch::config::{Config, Mode};
use toolsearch::surface::{self, Options};
use toolsearch::texts;

fn demo() -> Catalog {
    let config = Config::default();
    Catalog::build(embedded::demo_descriptors().unwrap(), &Facts::bare(&config)).unwrap()
}

fn options(mode: Mode) -> Options<'static> {
    Options {
        mode,
        code_available: Ok(()),
        prompt: "open a github issue about the crash",
        context_window: Some(8_000),
        likely: 2,
        required: &[],
        code_timeout_ms: 10_000,
    }
}

#[test]
fn control_tool_texts() {
    insta::assert_snapshot!("tool_search_code", texts::tool_search_code(10));
    insta::assert_snapshot!("tool_search", texts::tool_search(8, 20));
    insta::assert_snapshot!("tool_describe", texts::TOOL_DESCRIBE);
    insta::assert_snapshot!("tool_call", texts::TOOL_CALL);
    insta::assert_snapshot!("directory_footer", texts::directory_footer(42));
    let hints: Vec<String> = ["code", "tool_call", "directory", "cli", "other"]
        .iter()
        .map(|c| format!("{c}: {}", texts::recovery_hint(c)))
        .collect();
    insta::assert_snapshot!("recovery_hints", hints.join("\n"));
}

#[test]
fn declared_control_tools() {
    let c = demo();
    for mode in [Mode::Code, Mode::Tools] {
        let s = surface::build(&c, &options(mode)).unwrap();
        let controls: Vec<_> = s
            .tools
            .iter()
            .filter(|t| surface::is_control(&t.name))
            .collect();
        insta::assert_snapshot!(
            format!("controls_{}", mode.as_str()),
            serde_json::to_string_pretty(&controls).unwrap()
        );
    }
}

#[test]
fn the_directory_for_a_small_window() {
    let s = surface::build(&demo(), &options(Mode::Directory)).unwrap();
    insta::assert_snapshot!("directory_8k", s.system);
}

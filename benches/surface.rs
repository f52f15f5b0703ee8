//! Surface sizes and build time. For the embedded demo and a generated 500-tool catalog,
//! each provider and mode: declared tools, request bytes and the ratio to direct mode; the
//! directory's size at 10,000 tools; the time to build each surface for 10,000 tools.
//! `cargo bench --bench surface` prints markdown tables.

use std::time::Instant;

use toolsearch::Catalog;
use toolsearch::catalog::{Facts, embedded};
use toolsearch::config::{Config, Mode};
use toolsearch::provider::Provider;
use toolsearch::surface::{self, Options};

fn catalog(tools: Vec<toolsearch::ToolDescriptor>) -> Catalog {
    let config = Config::default();
    Catalog::build(tools, &Facts::bare(&config)).expect("catalog")
}

fn options(mode: Mode) -> Options<'static> {
    Options {
        mode,
        code_available: Ok(()),
        prompt: "open a github issue about the crash on start",
        context_window: None,
        likely: surface::LIKELY_DEFAULT,
        required: &[],
        code_timeout_ms: 10_000,
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("benchmark skipped: run it with `cargo bench`");
        return;
    }
    let providers = [
        Provider::OpenaiCompletions,
        Provider::OpenaiResponses,
        Provider::Anthropic,
        Provider::Google,
    ];
    println!("| catalog | provider | mode | declared tools | request bytes | % of direct |");
    println!("|---|---|---|---:|---:|---:|");
    for (label, c) in [
        (
            "demo (213)",
            catalog(embedded::demo_descriptors().expect("demo")),
        ),
        ("synthetic 500", catalog(toolsearch::synth::catalog(500, 5))),
    ] {
        for p in providers {
            for mode in [Mode::Direct, Mode::Code, Mode::Tools, Mode::Directory] {
                let planned = surface::plan_request(&c, &options(mode), p, "", true).expect("plan");
                let s = &planned.summary;
                println!(
                    "| {label} | {} | {} | {} | {} | {:.1}% |",
                    p.as_str(),
                    mode.as_str(),
                    s.declared_tools,
                    s.request_bytes,
                    100.0 * s.ratio_to_direct.unwrap_or(1.0)
                );
            }
        }
    }
    let big = catalog(toolsearch::synth::catalog(10_000, 9));
    let d = surface::build(&big, &options(Mode::Directory)).expect("directory");
    let stats = d.directory.expect("stats");
    println!(
        "\ndirectory at 10,000 tools: {} lines listed, {} omitted, {} characters (bound {})",
        stats.listed, stats.omitted, stats.chars, stats.bound
    );
    println!("\n| mode | build a surface for 10,000 tools, p50 (ms) |");
    println!("|---|---:|");
    for mode in [Mode::Code, Mode::Tools, Mode::Directory, Mode::Direct] {
        let mut times: Vec<f64> = (0..15)
            .map(|_| {
                let started = Instant::now();
                let s = surface::build(&big, &options(mode)).expect("surface");
                std::hint::black_box(s);
                started.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!("| {} | {:.2} |", mode.as_str(), times[times.len() / 2]);
    }
}

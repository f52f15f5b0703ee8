//! Writes a synthetic catalog as JSONL: `cargo run --release --example synth_catalog -- 10000 > tools.jsonl`.
fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    print!(
        "{}",
        toolsearch::synth::to_jsonl(&toolsearch::synth::catalog(n, 42))
    );
}

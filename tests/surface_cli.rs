//! `toolsearch surface`: the exact request body and its summary, per mode and provider.

use assert_cmd::Command;
use serde_json::Value;

mod common;

fn surface(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(common::BIN)
        .current_dir(dir.path())
        .args(["--state-dir", dir.path().join("state").to_str().unwrap()])
        .arg("surface")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_summary_and_request_match_for_every_provider_and_mode() {
    for provider in [
        "openai-completions",
        "openai-responses",
        "anthropic",
        "google",
    ] {
        let direct = surface(&["--mode", "direct", "--provider", provider]);
        for mode in ["code", "tools", "directory"] {
            let v = surface(&[
                "--mode",
                mode,
                "--provider",
                provider,
                "--prompt",
                "open a github issue",
            ]);
            let s = &v["summary"];
            assert_eq!(s["mode"], mode, "{s}");
            assert_eq!(s["provider"], provider);
            let body = serde_json::to_vec(&v["request"]).unwrap();
            assert_eq!(
                s["request_bytes"].as_u64().unwrap() as usize,
                body.len(),
                "{provider} {mode}"
            );
            for key in ["declared_tools", "tool_bytes", "prompt_bytes"] {
                assert!(s[key].is_u64(), "{key}: {s}");
            }
            let ratio = s["ratio_to_direct"].as_f64().unwrap();
            let limit = if mode == "directory" { 0.25 } else { 0.05 };
            assert!(ratio <= limit, "{provider} {mode}: {ratio}");
            assert!(
                s["request_bytes"].as_u64() < direct["summary"]["request_bytes"].as_u64(),
                "{provider} {mode}"
            );
        }
    }
}

#[test]
fn the_same_inputs_give_the_same_bytes() {
    let args = [
        "--mode",
        "directory",
        "--provider",
        "openai-responses",
        "--prompt",
        "x y",
    ];
    let (a, b) = (surface(&args), surface(&args));
    assert_eq!(
        serde_json::to_string(&a["request"]).unwrap(),
        serde_json::to_string(&b["request"]).unwrap()
    );
}

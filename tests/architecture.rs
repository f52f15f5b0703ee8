//! The shape of the code, checked: dependencies among `src/`'s top-level modules flow one
//! way (no cycle), and `main.rs` stays a thin shell.
//!
//! A dependency is a `crate::X` path in code (not in a comment, not under `#[cfg(test)]`,
//! not in a `tests.rs` file) in module A naming another top-level module X.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments and without what follows its first `#[cfg(test)]`
/// (by convention the test module ends a file).
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            // A `//` inside a string (a URL) keeps the line; such lines name no module.
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules `code` names through `crate::`, grouped imports included.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect()
    };
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            // Nested groups close early; their first segments are still the modules.
            for part in group[..end].split(',') {
                let name = ident(part.trim());
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let tops: BTreeSet<String> = files
        .iter()
        .filter_map(|f| f.strip_prefix(&root).ok())
        .filter_map(|rel| rel.components().next())
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .filter(|m| m != "lib" && m != "main")
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(&root).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if !tops.contains(&top) || file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let deps = graph.entry(top.clone()).or_default();
        for m in named_modules(&code) {
            if m != top && tops.contains(&m) {
                deps.insert(m);
            }
        }
    }
    graph
}

/// Every cycle's modules, found as the strongly connected components of more than one
/// module (Tarjan's algorithm is overkill for twenty nodes: reachability both ways).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for d in graph.get(&m).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut found: Vec<BTreeSet<String>> = Vec::new();
    for (m, r) in &reachable {
        if !r.contains(*m) {
            continue;
        }
        let scc: BTreeSet<String> = r
            .iter()
            .filter(|o| reachable.get(o).is_some_and(|back| back.contains(*m)))
            .cloned()
            .collect();
        if !found.contains(&scc) {
            found.push(scc);
        }
    }
    found
}

#[test]
fn top_level_modules_depend_one_way() {
    let graph = module_graph();
    assert!(
        graph.len() > 10,
        "the scan found too few modules: {graph:?}"
    );
    let found = cycles(&graph);
    let detail: Vec<String> = found
        .iter()
        .map(|scc| {
            scc.iter()
                .map(|m| {
                    let deps: Vec<&String> = graph[m].iter().filter(|d| scc.contains(*d)).collect();
                    format!("{m} -> {deps:?}")
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
        .collect();
    assert!(found.is_empty(), "module cycles: {detail:#?}");
}

#[test]
fn the_cycle_check_sees_a_cycle() {
    let mut graph = BTreeMap::new();
    graph.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    graph.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    graph.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    graph.insert("d".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(
        cycles(&graph),
        vec![BTreeSet::from(["a".into(), "b".into(), "c".into()])]
    );
    let code = code_of(
        "use crate::{config::Mode, error::Result};\n// crate::gateway in a comment\nlet x = crate::policy::Policy::default();\n#[cfg(test)]\nuse crate::qa;",
    );
    assert_eq!(
        named_modules(&code),
        BTreeSet::from(["config".into(), "error".into(), "policy".into()])
    );
}

#[test]
fn main_is_a_thin_shell() {
    let main = std::fs::read_to_string(src().join("main.rs")).unwrap();
    let lines = main.lines().count();
    assert!(lines <= 400, "src/main.rs has {lines} lines; at most 400");
}

/// Group killing and the parent-death signal are one concern with one owner: a second
/// copy is how a child outlives its host on one path and not another.
#[test]
fn process_groups_and_parent_death_live_in_one_file() {
    let owner = code_of(&std::fs::read_to_string(src().join("process/mod.rs")).unwrap());
    assert!(owner.contains("PR_SET_PDEATHSIG") && owner.contains("killpg"));
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    for needle in ["PR_SET_PDEATHSIG", "killpg", "setpgid", "process_group("] {
        let holders: Vec<String> = files
            .iter()
            .filter(|f| code_of(&std::fs::read_to_string(f).unwrap()).contains(needle))
            .map(|f| f.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        assert!(
            holders.iter().all(|h| h == "process/mod.rs"),
            "`{needle}` outside src/process/mod.rs: {holders:?}"
        );
    }
}

/// Every folder made in the shared temp dir comes from `cache::private_temp_dir` (a random
/// name, made fresh by the call): a name built from a PID or a counter can be made first by
/// another user, with a link or a config planted in it (QA's folder was one). Only the
/// sandbox's clean-up of dead hosts' folders reads the temp dir's path besides.
#[test]
fn no_folder_is_made_in_the_temp_dir_but_by_private_temp_dir() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let allowed = ["cache.rs", "sandbox/spawn.rs"];
    let mut offenders = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(src())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if rel.ends_with("tests.rs") || allowed.contains(&rel.as_str()) {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        if code.contains("temp_dir()") {
            offenders.push(rel);
        }
    }
    assert!(
        offenders.is_empty(),
        "the temp dir used outside cache::private_temp_dir: {offenders:?}"
    );
}

/// Text reaches stderr through `shown::to_stderr` (made safe for a terminal) or the tracing
/// writer: an `eprintln!` of an error that quoted a dead server's stderr, and an approval
/// prompt that quoted a guest's arguments, set the title and reversed a command on the
/// screen where a person decides (review 12).
#[test]
fn stderr_is_written_only_through_shown() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let root = src();
    let mut offenders = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&root).unwrap().display().to_string();
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        let writes = code.contains("eprintln!")
            || code.contains("eprint!")
            || code
                .replace("io::stderr().is_terminal()", "")
                .contains("io::stderr()");
        if writes && !["shown.rs", "telemetry/stderr.rs"].contains(&rel.as_str()) {
            offenders.push(rel);
        }
    }
    assert!(
        offenders.is_empty(),
        "stderr written outside src/shown.rs: {offenders:?}"
    );
}

//! What the command line prints for a person (the `--json` forms are the serde shapes of
//! the library types). Kept here so `main.rs` stays a thin shell.

use std::fmt::Write;

use serde::Serialize;

use crate::catalog::{
    BatchResult, Catalog, CompactDescriptor, Counts, Description, HiddenTool, Notice,
};
use crate::config::Mode;
use crate::eval::{Metrics, Report};
use crate::mcp::upstream::ServerStatus;
use crate::sandbox::CodeModeStatus;
use crate::shown;

/// `catalog --json`: the effective catalog in the mode it is used in.
#[derive(Serialize)]
pub struct CatalogJson<'a> {
    mode: &'static str,
    counts: Counts,
    cataloged: Vec<&'a CompactDescriptor>,
    direct_only: Vec<&'a CompactDescriptor>,
    hidden: &'a [HiddenTool],
    notices: &'a [Notice],
    filtered: usize,
}

impl<'a> CatalogJson<'a> {
    pub fn of(c: &'a Catalog, mode: Mode) -> Self {
        CatalogJson {
            mode: mode.as_str(),
            counts: c.counts(),
            cataloged: c.cataloged().iter().map(|e| &e.compact).collect(),
            direct_only: c.direct_only().iter().map(|e| &e.compact).collect(),
            hidden: c.hidden(),
            notices: c.notices(),
            filtered: c.filtered(),
        }
    }
}

/// `catalog`: [`catalog`], then whether code mode can run (when the mode is code) and the
/// upstream servers.
pub fn catalog_with_status(
    c: &Catalog,
    mode: Mode,
    code_mode: Option<&CodeModeStatus>,
    servers: &[ServerStatus],
) -> String {
    let mut text = catalog(c, mode);
    match code_mode {
        Some(s) if s.available => {
            if let Some(n) = &s.node {
                let _ = write!(
                    text,
                    "\ncode mode: node {} at {} ({})\n",
                    n.version,
                    n.path.display(),
                    n.permission_flag
                );
            }
        }
        Some(s) => {
            let _ = write!(
                text,
                "\ncode mode unavailable ({}); falling back to tools mode\n",
                s.reason.as_deref().unwrap_or("unknown reason")
            );
        }
        None => {}
    }
    text.push_str(&mcp_servers(servers));
    text
}

pub fn catalog(c: &Catalog, mode: Mode) -> String {
    let counts = c.counts();
    let mut out = String::new();
    let by_source = counts
        .by_source
        .iter()
        .map(|(s, n)| format!("{s} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        out,
        "{} cataloged, {} direct-only, {} hidden (by source: {by_source}); mode {}",
        counts.cataloged,
        counts.direct_only,
        counts.hidden,
        mode.as_str()
    );
    let width = c
        .cataloged()
        .iter()
        .chain(c.direct_only())
        .map(|e| e.id.len())
        .max()
        .unwrap_or(0);
    let _ = writeln!(out, "\nCataloged (behind search):");
    for e in c.cataloged() {
        let _ = writeln!(
            out,
            "  {:width$}  {}",
            e.id,
            one_line(&e.compact.description, 80)
        );
    }
    if !c.direct_only().is_empty() {
        let _ = writeln!(out, "\nDirect-only (always sent to the model):");
        for e in c.direct_only() {
            let _ = writeln!(
                out,
                "  {:width$}  {}",
                e.id,
                one_line(&e.compact.description, 80)
            );
        }
    }
    if !c.hidden().is_empty() {
        let _ = writeln!(out, "\nHidden (unavailable):");
        for h in c.hidden() {
            for d in &h.diagnostics {
                let _ = writeln!(out, "  {}  [{}] {}", h.id, d.reason, d.message);
            }
        }
    }
    if !c.notices().is_empty() {
        let _ = writeln!(out, "\nNotices:");
        for n in c.notices() {
            let _ = writeln!(out, "  [{}] {}", n.code, n.message);
        }
    }
    if c.filtered() > 0 {
        let _ = writeln!(
            out,
            "\n{} tools removed by the policy or tools.active.",
            c.filtered()
        );
    }
    out
}

pub fn search(hits: &[CompactDescriptor], query: &str) -> String {
    if hits.is_empty() {
        return format!(
            "no tool matches {query:?} (search matches English words of names, descriptions and parameters)\n"
        );
    }
    let mut out = String::new();
    for (i, h) in hits.iter().enumerate() {
        let _ = writeln!(out, "{:>2}. {}  {}", i + 1, h.id, h.label);
        let _ = writeln!(out, "    {}", one_line(&h.description, 100));
        let _ = writeln!(out, "    input: {}", h.input);
    }
    out
}

pub fn batch(result: &BatchResult) -> String {
    let mut out = String::new();
    for g in &result.results {
        let more = if g.truncated { " (truncated)" } else { "" };
        let _ = writeln!(out, "## {}{more}", g.query);
        out.push_str(&search(&g.candidates, &g.query));
        out.push('\n');
    }
    out
}

pub fn describe(d: &Description) -> String {
    let mut out = String::new();
    let c = &d.compact;
    let _ = writeln!(out, "{}  ({})", c.id, c.label);
    let _ = writeln!(out, "{}", c.description);
    let _ = writeln!(out, "input: {}", c.input);
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let _ = writeln!(out, "\ninput_schema:\n{}", pretty(&d.input_schema));
    if let Some(o) = &d.output_schema {
        let _ = writeln!(out, "\noutput_schema:\n{}", pretty(o));
    }
    out
}

pub fn eval(name: &str, r: &Report) -> String {
    let mut out = String::new();
    let mut ks: Vec<&String> = r.all.recall.keys().collect();
    ks.sort_by_key(|k| k.parse::<usize>().unwrap_or(usize::MAX));
    let mut header = String::from("| set | queries |");
    for k in &ks {
        let _ = write!(header, " R@{k} |");
    }
    header.push_str(" nDCG@5 | nDCG@10 | MRR | empty | p50 µs | p95 µs |");
    let _ = writeln!(out, "{header}");
    let _ = writeln!(out, "|{}", "---|".repeat(header.matches('|').count() - 1));
    let row = |out: &mut String, label: &str, m: &Metrics| {
        let mut line = format!("| {label} | {} |", m.queries);
        for k in &ks {
            let _ = write!(
                line,
                " {:.1} |",
                100.0 * m.recall.get(*k).copied().unwrap_or(0.0)
            );
        }
        let _ = writeln!(
            out,
            "{line} {:.1} | {:.1} | {:.3} | {} | {:.0} | {:.0} |",
            100.0 * m.ndcg.get("5").copied().unwrap_or(0.0),
            100.0 * m.ndcg.get("10").copied().unwrap_or(0.0),
            m.mrr,
            m.empty,
            m.latency_us.p50,
            m.latency_us.p95
        );
    };
    row(&mut out, &format!("{name} ({} tools)", r.tools), &r.all);
    for (subset, m) in &r.subsets {
        row(&mut out, &format!("{name} {subset}"), m);
    }
    match &r.model {
        Some(m) => {
            let _ = writeln!(
                out,
                "\nranking: hybrid, lexical fused with {} ({} dimensions; loaded in {:.0} ms, \
                 catalog indexed and embedded in {:.0} ms)",
                m.name, m.dim, m.load_ms, m.index_ms
            );
        }
        None => {
            let _ = writeln!(out, "\nranking: lexical");
        }
    }
    out
}

fn one_line(text: &str, max: usize) -> String {
    crate::catalog::compact::cut(text, max)
}

pub fn envelope(e: &crate::dispatch::Envelope) -> String {
    let mut out = String::new();
    let status = if e.result.is_error { "error" } else { "ok" };
    let _ = writeln!(out, "{} ({status}, {})", e.tool.id, e.call_id);
    let _ = writeln!(out, "{}", e.result.text());
    if !e.result.details.is_null() && e.result.details != serde_json::json!({}) {
        let _ = writeln!(out, "details: {}", e.result.details);
    }
    out
}

pub fn code(r: &crate::code::CodeResult) -> String {
    use crate::code::CodeResult;
    let mut out = String::new();
    let (logs, t) = match r {
        CodeResult::Ok {
            logs, telemetry, ..
        }
        | CodeResult::Err {
            logs, telemetry, ..
        } => (logs, telemetry),
    };
    // The guest's lines continue indented: none can pass for the program's own.
    for l in logs {
        let _ = writeln!(out, "[{:?}] {}", l.level, shown::indented(&l.text, "    "));
    }
    match r {
        CodeResult::Ok { value, .. } => {
            let _ = writeln!(out, "{}", shown::json_readable(value).unwrap_or_default());
        }
        CodeResult::Err { error, .. } => {
            let _ = writeln!(
                out,
                "error [{}]: {}",
                error.code,
                shown::indented(&error.message, "    ")
            );
        }
    }
    let _ = writeln!(
        out,
        "({} searches, {} describes, {} calls; catalog of {})",
        t.search_count, t.describe_count, t.call_count, t.catalog_size
    );
    out
}

pub fn doctor(r: &crate::sandbox::doctor::Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "node: {} ({}, permission flag {})",
        r.node.path.display(),
        r.node.version,
        r.node.permission_flag
    );
    let _ = writeln!(out, "heap cap: {} MiB", r.heap_cap_mib);
    match &r.snapshot {
        Some(p) => {
            let _ = writeln!(out, "startup snapshot: {}", p.display());
        }
        None => {
            let _ = writeln!(out, "startup snapshot: none (runtime given inline)");
        }
    }
    let _ = writeln!(out, "\n| barrier | applied | detail |\n|---|---|---|");
    for b in &r.barriers {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            b.name,
            if b.applied { "yes" } else { "NO" },
            b.detail
        );
    }
    match (&r.cold_run_ms, &r.cold_run_error) {
        (Some(ms), _) => {
            let _ = writeln!(
                out,
                "\ncold run (spawn, one bridge call, result, reap): {ms:.1} ms; node -e 0: {}",
                r.node_e0_ms
                    .map(|m| format!("{m:.1} ms"))
                    .unwrap_or("n/a".into())
            );
        }
        (None, Some(e)) => {
            let _ = writeln!(out, "\ncold run FAILED: {e}");
        }
        _ => {}
    }
    let _ = writeln!(
        out,
        "\n| escape probe (outside the vm) | result |\n|---|---|"
    );
    for p in &r.probes {
        let _ = writeln!(out, "| {} | {} |", p.attempt, p.detail);
    }
    if let Some(e) = &r.probe_error {
        let _ = writeln!(out, "probe failed: {e}");
    }
    let _ = writeln!(
        out,
        "\n{}",
        if r.usable() && r.all_blocked() {
            "code mode can run here; every probe was blocked"
        } else if r.usable() {
            "code mode can run here, but some probes were NOT blocked"
        } else {
            "code mode cannot run here"
        }
    );
    out
}

pub fn surface(p: &crate::surface::Planned) -> String {
    let mut out = serde_json::to_string_pretty(&p.body).unwrap_or_default();
    out.push('\n');
    let s = &p.summary;
    let _ = writeln!(
        out,
        "\nmode {} ({}): {} declared tools, {} tool bytes, {} prompt bytes, {} request bytes, {:.1}% of direct",
        s.mode.as_str(),
        s.provider.as_str(),
        s.declared_tools,
        s.tool_bytes,
        s.prompt_bytes,
        s.request_bytes,
        100.0 * s.ratio_to_direct.unwrap_or(1.0)
    );
    for r in &p.surface.reasons {
        let _ = writeln!(out, "note: {r}");
    }
    out
}

/// The upstream MCP servers, one line each (nothing when none is configured).
pub fn mcp_servers(servers: &[ServerStatus]) -> String {
    let mut out = String::new();
    if servers.is_empty() {
        return out;
    }
    let _ = writeln!(out, "\nMCP servers:");
    for s in servers {
        if s.up {
            let _ = writeln!(
                out,
                "  {}: up, {} tools (protocol {})",
                s.name,
                s.tools,
                s.protocol.as_deref().unwrap_or("?")
            );
        } else {
            let _ = writeln!(out, "  {}: DOWN", s.name);
        }
        for n in &s.notes {
            let _ = writeln!(out, "    {n}");
        }
    }
    out
}

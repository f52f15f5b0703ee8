//! The semantic half of the index: one vector per tool from the configured model, and the
//! tools nearest a query's vector by cosine.
//!
//! What of a tool is embedded ([`document_text`]) is what a person would read to tell what
//! it does: its name as words, its label, description and parameters (the index document's
//! parameters are empty for untrusted MCP and client tools, so their schemas stay out here
//! as they stay out of the lexical text), and the name of its plugin or server, which
//! often says the domain that terse endpoint names leave out.

use std::sync::Arc;

use super::IndexDoc;
use crate::error::Result;
use crate::semantic::Model;

/// Source names that say nothing of a tool's domain: OpenClaw's own tools, the client's,
/// and `eval`'s name for a data-set tool without a server.
const UNINFORMATIVE_SOURCES: &[&str] = &["core", "client", "dataset"];

pub struct Dense {
    model: Arc<Model>,
    /// `len` rows of `dim` floats, unit length when the model normalises.
    vectors: Vec<f32>,
    dim: usize,
}

impl Dense {
    /// Embeds `docs` (from the model's caches where it can).
    pub fn build(model: Arc<Model>, docs: &[IndexDoc]) -> Result<Dense> {
        let texts: Vec<String> = docs.iter().map(document_text).collect();
        let vectors = model.embed_documents(&texts)?;
        Ok(Dense {
            dim: model.dim(),
            model,
            vectors,
        })
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The vectors of `queries`, one row each.
    pub fn embed(&self, queries: &[&str]) -> Result<Vec<f32>> {
        self.model.embed_queries(queries)
    }

    /// The best `n` tools for one query vector, as (ord, cosine), best first; ties go to
    /// the lower ord.
    pub fn top(&self, query: &[f32], n: usize) -> Vec<(usize, f32)> {
        let mut scored: Vec<(usize, f32)> = self
            .vectors
            .chunks_exact(self.dim)
            .map(|v| dot(v, query))
            .enumerate()
            .collect();
        let better = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if scored.len() > n && n > 0 {
            scored.select_nth_unstable_by(n - 1, better);
            scored.truncate(n);
        }
        scored.sort_unstable_by(better);
        scored
    }

    pub fn dim(&self) -> usize {
        self.dim
    }
}

/// Eight running sums, so the compiler can keep them in one vector register.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// The text of a tool the model embeds; see the module doc.
pub fn document_text(d: &IndexDoc) -> String {
    let mut text = words(&d.name);
    let source_name = d.source.split_once(' ').map(|(_, n)| n).unwrap_or("");
    if !source_name.is_empty() && !UNINFORMATIVE_SOURCES.contains(&source_name) {
        text.push_str(" (");
        text.push_str(&words(source_name));
        text.push(')');
    }
    for part in [d.label.as_str(), d.description.as_str()] {
        let part = part.trim();
        if !part.is_empty() {
            text.push_str(": ");
            text.push_str(part);
        }
    }
    if !d.params.is_empty() {
        text.push_str(". Parameters: ");
        let names: Vec<String> = d.params.iter().map(|(name, _)| words(name)).collect();
        text.push_str(&names.join(", "));
    }
    text
}

/// An identifier as words: `list_pull_requests`, `listPullRequests` and
/// `list-pull-requests` all become `list pull requests`, which a model trained on prose
/// reads better than one token soup.
fn words(identifier: &str) -> String {
    let mut out = String::with_capacity(identifier.len() + 4);
    let mut prev: Option<char> = None;
    let chars: Vec<char> = identifier.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !out.ends_with(' ') && !out.is_empty() {
                out.push(' ');
            }
            prev = None;
            continue;
        }
        if let Some(p) = prev {
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            // fooBar -> foo Bar; HTTPServer -> HTTP Server
            if c.is_uppercase() && (p.is_lowercase() || (p.is_uppercase() && next_lower)) {
                out.push(' ');
            }
        }
        out.push(c);
        prev = Some(c);
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_become_words() {
        assert_eq!(words("list_pull_requests"), "list pull requests");
        assert_eq!(words("listPullRequests"), "list Pull Requests");
        assert_eq!(words("HTTPServer"), "HTTP Server");
        assert_eq!(words("azure.storage-blob"), "azure storage blob");
        assert_eq!(words("__x__"), "x");
        assert_eq!(words(""), "");
    }

    #[test]
    fn document_text_reads_like_a_sentence_and_skips_placeholder_sources() {
        let d = IndexDoc {
            id: "openclaw:github:create_issue".into(),
            name: "create_issue".into(),
            label: String::new(),
            description: "Open a new issue".into(),
            params: vec![("repoName".into(), "repoName the repo".into())],
            source: "openclaw github".into(),
        };
        assert_eq!(
            document_text(&d),
            "create issue (github): Open a new issue. Parameters: repo Name"
        );
        let core = IndexDoc {
            source: "openclaw core".into(),
            params: Vec::new(),
            ..d
        };
        assert_eq!(document_text(&core), "create issue: Open a new issue");
    }

    #[test]
    fn dot_matches_the_plain_sum() {
        let a: Vec<f32> = (0..19).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..19).map(|i| 1.0 - i as f32 * 0.1).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - plain).abs() < 1e-4);
    }
}

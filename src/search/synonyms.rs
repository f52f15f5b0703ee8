//! Query-side synonyms: the words people use for the same intent.
//!
//! Tool descriptions say "retrieve" where users say "get", "remove" where they say
//! "delete". Each group below is a set of words interchangeable in a request to a tool; a
//! query term pulls in the other members of its groups at a reduced weight, so a literal
//! match still wins over a synonym. The groups are general English for the actions and
//! objects tools deal with, not the vocabulary of any one catalog or data set.

use std::collections::HashMap;

use tantivy::tokenizer::TextAnalyzer;

use super::analyze::terms;

const GROUPS: &[&[&str]] = &[
    // actions
    &[
        "create", "make", "add", "new", "generate", "compose", "draft", "open",
    ],
    &[
        "delete", "remove", "erase", "destroy", "discard", "trash", "purge",
    ],
    &[
        "search", "find", "lookup", "query", "locate", "discover", "seek",
    ],
    &[
        "get", "fetch", "retrieve", "read", "obtain", "view", "show", "display", "see", "check",
    ],
    &["list", "enumerate", "browse"],
    &[
        "update", "edit", "modify", "change", "patch", "adjust", "alter", "amend",
    ],
    &["send", "post", "deliver", "dispatch", "submit"],
    &[
        "run", "execute", "exec", "launch", "invoke", "trigger", "start",
    ],
    &["stop", "halt", "kill", "terminate", "abort", "cancel"],
    &["close", "resolve", "finish", "complete", "done"],
    &["download", "export", "save"],
    &["upload", "import", "attach"],
    &["copy", "duplicate", "clone"],
    &["move", "rename", "relocate"],
    &["summarize", "summary", "digest", "recap", "tldr"],
    &["translate", "translation", "language"],
    &["calculate", "compute", "calculator", "math", "arithmetic"],
    &[
        "recommend",
        "suggest",
        "suggestion",
        "recommendation",
        "advice",
    ],
    &["compare", "comparison", "versus", "diff", "difference"],
    &[
        "analyze", "analyse", "analysis", "inspect", "examine", "evaluate",
    ],
    &["schedule", "book", "reserve", "plan", "arrange"],
    &["remind", "reminder", "alert", "notify", "notification"],
    &["track", "monitor", "watch", "follow"],
    &["buy", "purchase", "order", "shop", "shopping"],
    &["assign", "delegate", "allocate"],
    &["reply", "respond", "answer", "comment"],
    &["write", "author", "compose"],
    &["merge", "combine", "join"],
    &["approve", "accept", "confirm"],
    &["reject", "decline", "deny", "refuse"],
    // objects
    &["message", "msg", "chat", "dm"],
    &["email", "mail", "inbox", "gmail"],
    &["file", "document", "doc", "attachment"],
    &["folder", "directory", "dir"],
    &["image", "picture", "photo", "pic", "img", "illustration"],
    &["video", "movie", "film", "clip"],
    &["music", "song", "track", "audio", "playlist", "tune"],
    &["meeting", "event", "appointment", "invite", "invitation"],
    &["calendar", "agenda", "schedule"],
    &["issue", "ticket", "bug", "incident", "defect"],
    &["pr", "pull", "merge"],
    &["repo", "repository", "codebase"],
    &["note", "memo", "notebook"],
    &[
        "user", "account", "member", "profile", "person", "people", "contact",
    ],
    &[
        "price",
        "cost",
        "fee",
        "rate",
        "cheap",
        "expensive",
        "deal",
        "discount",
        "coupon",
    ],
    &["trip", "travel", "flight", "hotel", "vacation", "journey"],
    &[
        "job",
        "career",
        "employment",
        "hire",
        "hiring",
        "recruit",
        "vacancy",
    ],
    &[
        "stock",
        "share",
        "equity",
        "invest",
        "investment",
        "portfolio",
        "trading",
    ],
    &["crypto", "cryptocurrency", "bitcoin", "coin"],
    &["recipe", "cook", "cooking", "meal", "dish", "food"],
    &["news", "headline", "article"],
    &[
        "paper",
        "research",
        "academic",
        "scholar",
        "publication",
        "study",
    ],
    &[
        "map",
        "location",
        "place",
        "address",
        "direction",
        "route",
        "navigate",
        "nearby",
    ],
    &["weather", "forecast", "temperature", "rain", "climate"],
    &["car", "vehicle", "auto"],
    &["doctor", "health", "medical", "medicine", "symptom"],
    &["learn", "course", "lesson", "tutor", "education", "teach"],
    &["website", "site", "webpage", "url", "link", "page"],
    &["web", "internet", "online", "google"],
    &["time", "clock", "date", "timezone"],
    &["password", "credential", "secret", "token", "key"],
    &["log", "logs", "trace"],
    &["error", "failure", "exception", "crash"],
    &["setting", "config", "configuration", "preference", "option"],
    &["database", "db", "table", "sql"],
    &["vm", "server", "instance", "machine", "host"],
    &["storage", "bucket", "blob"],
    &["picture", "drawing", "art", "artwork"],
    &["game", "play", "fun", "puzzle", "trivia", "quiz"],
    &["word", "vocabulary", "dictionary", "definition", "meaning"],
];

/// Weight of a synonym relative to the word the user typed.
pub const SYNONYM_WEIGHT: f32 = 0.35;

/// Analyzed synonym lookup: stem -> the other stems of its groups.
#[derive(Debug, Clone, Default)]
pub struct Synonyms {
    by_term: HashMap<String, Vec<String>>,
}

impl Synonyms {
    /// Runs every group through `analyzer`, so lookups work on analyzed query terms.
    pub fn new(analyzer: &mut TextAnalyzer) -> Self {
        let mut by_term: HashMap<String, Vec<String>> = HashMap::new();
        for group in GROUPS {
            let stems: Vec<String> = group.iter().flat_map(|w| terms(analyzer, w)).collect();
            for s in &stems {
                let entry = by_term.entry(s.clone()).or_default();
                for other in &stems {
                    if other != s && !entry.contains(other) {
                        entry.push(other.clone());
                    }
                }
            }
        }
        Synonyms { by_term }
    }

    pub fn of(&self, term: &str) -> &[String] {
        self.by_term.get(term).map(Vec::as_slice).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::analyze::analyzer;

    #[test]
    fn groups_are_analyzed_and_symmetric() {
        let s = Synonyms::new(&mut analyzer());
        assert!(s.of("delet").contains(&"remov".to_string()));
        assert!(s.of("remov").contains(&"delet".to_string()));
        assert!(s.of("zzz").is_empty());
    }
}

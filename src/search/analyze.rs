//! Query and document analysis: one analyzer for both sides, so a word indexed is the word
//! searched.
//!
//! Tool text is full of identifiers (`create_issue`, `listPullRequests`, `mcp:github:*`,
//! `azure.storage-blob`), so the tokenizer splits on every non-alphanumeric character and on
//! camelCase boundaries (`HTTPServer` -> `http`, `server`). A camelCase word is also kept
//! whole (`GitHub` -> `git`, `hub`, `github`), since people type brand names joined. Then:
//! lowercase, drop English stop words (including the filler of requests to an assistant:
//! "can you please help me", "specifically", "additionally", and what contractions leave:
//! the `m` of "I'm"), and stem with the English Snowball stemmer.

use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, Stemmer, StopWordFilter, TextAnalyzer, Token,
    TokenStream, Tokenizer,
};

/// Longer tokens are noise (base64, hashes) and are dropped.
const MAX_TOKEN_BYTES: usize = 40;

/// English stop words: the usual function words plus the politeness and request filler that
/// queries written to an assistant carry. Tool verbs (`get`, `list`, `find`, `show`) are
/// deliberately kept: they tell tools apart.
const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "during",
    "each",
    "either",
    "else",
    "etc",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "hello",
    "help",
    "her",
    "here",
    "hers",
    "herself",
    "hey",
    "hi",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "kindly",
    "let",
    "me",
    "might",
    "more",
    "most",
    "much",
    "must",
    "my",
    "myself",
    "need",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "please",
    "really",
    "same",
    "shall",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "thank",
    "thanks",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "us",
    "very",
    "via",
    "want",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "whether",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// What is left of an English contraction once the apostrophe splits it ("I'm" -> `i`,
/// `m`; "don't" -> `don`, `t`; "it's" -> `it`, `s`). Never a word about a tool, but as rare
/// single letters they score high against any tool text that happens to hold them
/// (ToolLens R@5 +0.2; no set lost).
const CONTRACTION_FRAGMENTS: &[&str] = &[
    "s", "t", "m", "d", "re", "ve", "ll", "don", "doesn", "didn", "isn", "aren", "wasn", "weren",
    "haven", "hasn", "hadn", "couldn", "wouldn", "shouldn", "mustn",
];

/// The discourse of a long request to an assistant ("Could you provide ..., specifically
/// ..., including ...? Additionally, ... Finally, ..."): words that frame what is asked and
/// never say which tool does it, yet match tool text that uses them in passing ("provide",
/// "including"). Words that may name a tool's action ("like" a post, "give" kudos) stay.
/// (metatool R@5 +0.44, sealtools +0.11, toollens +0.07, azure unchanged.)
const REQUEST_DISCOURSE: &[&str] = &[
    "additionally",
    "assist",
    "assistance",
    "comprehensive",
    "finally",
    "including",
    "interested",
    "lastly",
    "looking",
    "provide",
    "specifically",
    "various",
];

/// The scaffolding of a web address: a request that names a site ("on www.google.com")
/// otherwise matches every tool whose text holds some other address. The words that tell
/// sites apart stay (`google`, `github`), and so do `http`/`https` (a protocol some tools
/// speak), `org` (a GitHub organisation) and `html` (a format tools convert). (toollens R@5
/// +0.2, metatool +0.01, the others unchanged.)
const URL_SCAFFOLDING: &[&str] = &["www", "com"];

/// Builds the analyzer used for indexing and for queries.
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(IdentifierTokenizer)
        .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
        .filter(LowerCaser)
        .filter(StopWordFilter::remove(
            STOP_WORDS
                .iter()
                .chain(CONTRACTION_FRAGMENTS)
                .chain(REQUEST_DISCOURSE)
                .chain(URL_SCAFFOLDING)
                .map(|w| w.to_string()),
        ))
        .filter(Stemmer::new(Language::English))
        .build()
}

/// The analyzed terms of `text`, in order, duplicates kept.
pub fn terms(analyzer: &mut TextAnalyzer, text: &str) -> Vec<String> {
    let mut stream = analyzer.token_stream(text);
    let mut out = Vec::new();
    while stream.advance() {
        out.push(stream.token().text.clone());
    }
    out
}

/// The words of `text`, analyzed, one per position: a camelCase word's joined form
/// (`github` of `GitHub`), which shares its first part's position, is an alias of its
/// parts and left out.
pub fn part_terms(analyzer: &mut TextAnalyzer, text: &str) -> Vec<String> {
    let mut stream = analyzer.token_stream(text);
    let mut out = Vec::new();
    let mut last = None;
    while stream.advance() {
        let token = stream.token();
        if last.is_some_and(|p| token.position <= p) {
            continue;
        }
        last = Some(token.position);
        out.push(token.text.clone());
    }
    out
}

/// Splits on non-alphanumerics and camelCase; see the module doc.
#[derive(Clone, Default)]
pub struct IdentifierTokenizer;

pub struct IdentifierTokenStream {
    tokens: Vec<Token>,
    next: usize,
}

impl Tokenizer for IdentifierTokenizer {
    type TokenStream<'a> = IdentifierTokenStream;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> IdentifierTokenStream {
        let mut tokens = Vec::new();
        let mut position = 0;
        let mut run_start = None;
        for (i, c) in text
            .char_indices()
            .chain(std::iter::once((text.len(), ' ')))
        {
            match (c.is_alphanumeric(), run_start) {
                (true, None) => run_start = Some(i),
                (false, Some(start)) => {
                    split_run(text, start, i, &mut position, &mut tokens);
                    run_start = None;
                }
                _ => {}
            }
        }
        IdentifierTokenStream { tokens, next: 0 }
    }
}

/// Emits the camelCase parts of `text[start..end]`, and the whole run if it had parts.
fn split_run(text: &str, start: usize, end: usize, position: &mut usize, out: &mut Vec<Token>) {
    let run = &text[start..end];
    let chars: Vec<(usize, char)> = run.char_indices().collect();
    let mut cuts = vec![0];
    for w in 1..chars.len() {
        let (i, c) = chars[w];
        let prev = chars[w - 1].1;
        let next = chars.get(w + 1).map(|&(_, n)| n);
        // lower -> Upper (`createIssue`), or the last capital of an acronym before a
        // lowercase letter (`HTTPServer` cuts before `S`).
        let lower_to_upper = prev.is_lowercase() && c.is_uppercase();
        let acronym_end =
            prev.is_uppercase() && c.is_uppercase() && next.is_some_and(char::is_lowercase);
        if lower_to_upper || acronym_end {
            cuts.push(i);
        }
    }
    cuts.push(run.len());
    let first_position = *position;
    for pair in cuts.windows(2) {
        push(out, text, start + pair[0], start + pair[1], *position);
        *position += 1;
    }
    if cuts.len() > 2 {
        push(out, text, start, end, first_position);
    }
}

fn push(out: &mut Vec<Token>, text: &str, from: usize, to: usize, position: usize) {
    out.push(Token {
        offset_from: from,
        offset_to: to,
        position,
        text: text[from..to].to_string(),
        position_length: 1,
    });
}

impl TokenStream for IdentifierTokenStream {
    fn advance(&mut self) -> bool {
        if self.next < self.tokens.len() {
            self.next += 1;
            true
        } else {
            false
        }
    }

    fn token(&self) -> &Token {
        &self.tokens[self
            .next
            .saturating_sub(1)
            .min(self.tokens.len().saturating_sub(1))]
    }

    fn token_mut(&mut self) -> &mut Token {
        let i = self
            .next
            .saturating_sub(1)
            .min(self.tokens.len().saturating_sub(1));
        &mut self.tokens[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(text: &str) -> Vec<String> {
        terms(&mut analyzer(), text)
    }

    #[test]
    fn splits_identifiers_of_every_style() {
        assert_eq!(t("create_issue"), ["creat", "issu"]);
        assert_eq!(
            t("mcp:github:list-pulls"),
            ["mcp", "github", "list", "pull"]
        );
        assert_eq!(
            t("listPullRequests"),
            ["list", "pull", "request", "listpullrequest"]
        );
        assert_eq!(
            t("HTTPServer.start"),
            ["http", "server", "httpserver", "start"]
        );
        assert_eq!(t("GitHub"), ["git", "hub", "github"]);
    }

    #[test]
    fn part_terms_leave_out_joined_forms() {
        let mut a = analyzer();
        assert_eq!(
            part_terms(&mut a, "listPullRequests"),
            ["list", "pull", "request"]
        );
        assert_eq!(
            part_terms(&mut a, "the_GitHub_tool"),
            ["git", "hub", "tool"]
        );
    }

    #[test]
    fn drops_stop_words_and_stems() {
        assert_eq!(
            t("Can you please help me find the running meetings?"),
            ["find", "run", "meet"]
        );
        assert!(t("the of and").is_empty());
    }

    #[test]
    fn request_discourse_is_dropped() {
        assert_eq!(
            t("Could you provide the forecast, specifically including rain? Finally, book it."),
            ["forecast", "rain", "book"]
        );
    }

    #[test]
    fn web_addresses_keep_only_their_names() {
        assert_eq!(t("https://www.github.com/org"), ["https", "github", "org"]);
    }

    #[test]
    fn contractions_leave_no_fragments() {
        assert_eq!(
            t("I'm sure it's the user's, don't ask"),
            ["sure", "user", "ask"]
        );
    }

    #[test]
    fn keeps_non_ascii_letters() {
        assert_eq!(t("café_menü"), ["café", "menü"]);
    }

    proptest! {
        #[test]
        fn never_panics_and_offsets_are_in_bounds(text in "\\PC{0,64}") {
            let mut tokens = Vec::new();
            let mut tk = IdentifierTokenizer;
            let mut s = tk.token_stream(&text);
            while s.advance() {
                let tok = s.token().clone();
                prop_assert!(text.is_char_boundary(tok.offset_from));
                prop_assert!(text.is_char_boundary(tok.offset_to));
                prop_assert!(tok.offset_from < tok.offset_to);
                tokens.push(tok);
            }
        }
    }
}

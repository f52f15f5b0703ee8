//! "Did you mean": the ids closest to an unknown one, at a cost bounded whatever the catalog
//! holds and whatever a caller sends.
//!
//! Closeness is the normalized Levenshtein similarity (rapidfuzz's, on characters,
//! lowercased) of the unknown id to an entry's id, or of its last `:` part to the entry's
//! name, whichever is higher; below 0.5 an entry is not close. Computed against every entry
//! it cost 50 ms an unknown id on 10,000 tools of ordinary names and 600 ms on 128-byte
//! names, and a sandboxed body can ask 64 times at once (sandbox round 35: runs past their
//! deadlines, `mcp serve` silent for 43 s). So each entry's id and name are kept lowercased
//! with a histogram of their characters, made once; an unknown id is compared to every entry
//! by histogram first (half the L1 distance of two histograms, or the difference of their
//! lengths, is a lower bound of the edit distance, so an upper bound of the similarity), and
//! by edit distance only for the entries whose bound is best, best first, until no entry
//! left can beat the three found or [`EXACT_BUDGET`] entries have been compared.

use rapidfuzz::distance::levenshtein::{Args, BatchComparator};

/// Buckets of a character histogram: letters, digits and the separators of ids each have
/// their own; other characters share the rest. Two characters in one bucket only weaken the
/// bound (it stays a lower bound).
const BUCKETS: usize = 64;

/// Entries compared by edit distance at most, for one unknown id.
pub const EXACT_BUDGET: usize = 256;

/// Similarity below which an entry is not suggested.
const CLOSE: f64 = 0.5;

/// An id or a name as compared: lowercased, its length in characters, its histogram.
#[derive(Debug)]
struct Form {
    text: Vec<char>,
    hist: [u8; BUCKETS],
}

impl Form {
    fn new(text: &str) -> Form {
        let text: Vec<char> = text.to_lowercase().chars().collect();
        let mut hist = [0u8; BUCKETS];
        for &c in &text {
            let b = bucket(c);
            hist[b] = hist[b].saturating_add(1);
        }
        Form { text, hist }
    }

    /// The highest similarity `self` and `other` can have.
    fn bound(&self, other: &Form) -> f64 {
        let (la, lb) = (self.text.len(), other.text.len());
        let longest = la.max(lb);
        if longest == 0 {
            return 1.0;
        }
        let l1: usize = self
            .hist
            .iter()
            .zip(&other.hist)
            .map(|(a, b)| usize::from(a.abs_diff(*b)))
            .sum();
        let least = la.abs_diff(lb).max(l1.div_ceil(2));
        1.0 - least as f64 / longest as f64
    }
}

fn bucket(c: char) -> usize {
    match c {
        'a'..='z' => c as usize - 'a' as usize,
        '0'..='9' => 26 + (c as usize - '0' as usize),
        '_' => 36,
        '-' => 37,
        ':' => 38,
        '.' => 39,
        '/' => 40,
        ' ' => 41,
        other => 42 + other as usize % (BUCKETS - 42),
    }
}

/// The forms of every entry's id and name, in the catalog's order.
#[derive(Debug)]
pub struct Suggester {
    ids: Vec<Form>,
    names: Vec<Form>,
}

impl Suggester {
    pub fn new<'a>(entries: impl Iterator<Item = (&'a str, &'a str)>) -> Suggester {
        let (ids, names) = entries
            .map(|(id, name)| (Form::new(id), Form::new(name)))
            .unzip();
        Suggester { ids, names }
    }

    /// Positions of at most `n` entries close to `requested`, closest first (ties in
    /// catalog order).
    pub fn closest(&self, requested: &str, n: usize) -> Vec<usize> {
        if n == 0 {
            return Vec::new();
        }
        let wanted = Form::new(requested);
        let lowered = requested.to_lowercase();
        let wanted_name = Form::new(lowered.rsplit(':').next().unwrap_or(&lowered));
        let mut bounded: Vec<(f64, usize)> = self
            .ids
            .iter()
            .zip(&self.names)
            .enumerate()
            .map(|(i, (id, name))| (wanted.bound(id).max(wanted_name.bound(name)), i))
            .filter(|(b, _)| *b >= CLOSE)
            .collect();
        let order = |a: &(f64, usize), b: &(f64, usize)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if bounded.len() > EXACT_BUDGET {
            bounded.select_nth_unstable_by(EXACT_BUDGET, order);
            bounded.truncate(EXACT_BUDGET);
        }
        bounded.sort_by(order);

        let by_id = BatchComparator::new(wanted.text.iter().copied());
        let by_name = BatchComparator::new(wanted_name.text.iter().copied());
        let args = Args::default().score_cutoff(CLOSE);
        let mut found: Vec<(f64, usize)> = Vec::new();
        for (bound, i) in bounded {
            if found.len() >= n && found[n - 1].0 >= bound {
                break;
            }
            let id = by_id.normalized_similarity_with_args(self.ids[i].text.iter().copied(), &args);
            let name =
                by_name.normalized_similarity_with_args(self.names[i].text.iter().copied(), &args);
            if let Some(score) = id.into_iter().chain(name).reduce(f64::max) {
                found.push((score, i));
                found.sort_by(order);
                found.truncate(n);
            }
        }
        found.into_iter().map(|(_, i)| i).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suggester(ids: &[&str]) -> Suggester {
        Suggester::new(
            ids.iter()
                .map(|id| (*id, id.rsplit(':').next().unwrap_or(id))),
        )
    }

    /// The histogram bound is never below the similarity itself, on ids of every kind.
    #[test]
    fn the_bound_is_an_upper_bound_of_the_similarity() {
        let words = [
            "openclaw:github:create_issue",
            "github:create_isue",
            "Create_Issue",
            "mcp/notion:search",
            "ÉTÉ:été",
            "",
            "a",
            "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
            "日本語のツール:検索",
        ];
        for a in words {
            for b in words {
                let (fa, fb) = (Form::new(a), Form::new(b));
                let exact = rapidfuzz::distance::levenshtein::normalized_similarity(
                    fa.text.iter().copied(),
                    fb.text.iter().copied(),
                );
                assert!(fa.bound(&fb) + 1e-9 >= exact, "{a} / {b}");
            }
        }
    }

    #[test]
    fn a_typo_a_missing_source_and_a_case_are_found_closest_first() {
        let s = suggester(&[
            "openclaw:github:create_issue",
            "openclaw:github:close_issue",
            "openclaw:slack:send_message",
            "openclaw:github:create_pull_request",
        ]);
        assert_eq!(s.closest("openclaw:github:create_isue", 3)[0], 0);
        assert_eq!(s.closest("github:create_issue", 3)[0], 0);
        assert_eq!(s.closest("OpenClaw:GitHub:Create_Issue", 1), vec![0]);
        assert_eq!(s.closest("send_mesage", 3)[0], 2);
        assert!(s.closest("qqqqqqqqqqqqqqqqqq", 3).is_empty());
        assert!(s.closest("openclaw:github:create_issue", 0).is_empty());
    }

    /// The scores of comparing every entry, when the entries whose bound is good enough fit
    /// the budget; past it, still close entries, and a typo's own entry first.
    #[test]
    fn the_bounded_search_finds_what_the_whole_comparison_finds() {
        let whole = |refs: &[&str], requested: &str| {
            let lowered = requested.to_lowercase();
            let name = lowered.rsplit(':').next().unwrap().to_string();
            let sim = |a: &str, b: &str| {
                rapidfuzz::distance::levenshtein::normalized_similarity(a.chars(), b.chars())
            };
            let mut all: Vec<(f64, usize)> = refs
                .iter()
                .enumerate()
                .map(|(i, id)| {
                    let entry_name = id.rsplit(':').next().unwrap();
                    (sim(&lowered, id).max(sim(&name, entry_name)), i)
                })
                .filter(|(score, _)| *score >= CLOSE)
                .collect();
            all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            all
        };
        for size in [EXACT_BUDGET / 2, 5000] {
            let ids: Vec<String> = (0..size)
                .map(|i| format!("openclaw:svc{}:tool_{}_{}", i % 37, i * 7919 % 1000, i))
                .collect();
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            let s = suggester(&refs);
            for requested in [
                "openclaw:svc3:tool_12_40",
                "svc9:tool_77_100",
                "openclaw:svc1:tol_5_1",
                "tool_999",
                "openclaw:svc22:tool_1_23",
            ] {
                let all = whole(&refs, requested);
                let got = s.closest(requested, 3);
                let scores: Vec<f64> = got
                    .iter()
                    .map(|i| all.iter().find(|(_, j)| j == i).unwrap().0)
                    .collect();
                if size <= EXACT_BUDGET {
                    let best: Vec<f64> = all.iter().take(3).map(|(s, _)| *s).collect();
                    assert_eq!(scores, best, "{requested}");
                } else {
                    assert_eq!(got.len(), 3, "{requested}");
                }
            }
            // A typo of an entry's id finds that entry first.
            for i in (0..size).step_by(size / 7) {
                let typo = ids[i].replacen("tool", "tol", 1);
                assert_eq!(s.closest(&typo, 3)[0], i, "{typo}");
            }
        }
    }
}

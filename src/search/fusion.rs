//! How the lexical and the semantic rankings become one: weighted reciprocal rank fusion.
//!
//! Each ranking gives a tool `weight / (k + rank)`; the sums order the result. Ranks, not
//! scores, because the two scores live on unrelated scales (BM25 grows with the query's
//! length and its words' rarity, a cosine does not) and their spread differs from query to
//! query, so no fixed blend of them holds across catalogs; a rank means the same in both.
//!
//! A request of several sentences is fused part by part (the whole, then each sentence,
//! as the lexical stage searches it) and the fused rankings are interleaved, so each
//! sentence's best tool reaches the top: one pooled vector of a whole multi-part request
//! is a blur of its parts and loses most of their tools.
//!
//! The constants are tuned leave-one-set-out on the four development sets (README,
//! "Semantic search").

use super::SearchIndex;
use super::dense::Dense;

/// The fusion's parameters; [`FUSION`] is the one production uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fusion {
    /// Reciprocal rank's constant: the smaller, the more the first ranks count.
    pub k: f32,
    /// Weight of the semantic ranking (the lexical one weighs 1).
    pub semantic_weight: f32,
    /// Candidates taken from each ranking.
    pub depth: usize,
    /// Whether the whole of a request of several sentences is embedded too, not only its
    /// sentences.
    pub whole_request: bool,
    /// Tokens a search may embed (special tokens included): the encoder's work grows with
    /// them, and a request's parts past the budget are ranked lexically alone.
    pub token_budget: usize,
}

/// A part left with fewer tokens of the budget than this is not embedded: a few words cut
/// from a sentence's start say too little to rank by.
pub const MIN_PART_TOKENS: usize = 8;

/// Tuned leave-one-set-out (README): k 5 was chosen on three sets for three of the four
/// folds, with equal weights; embedding the whole of a multi-sentence request besides its
/// sentences gains nothing on average (+4.17 R@5 either way) and costs a second pass over
/// every token, so only the sentences are embedded.
pub const FUSION: Fusion = Fusion {
    k: 5.0,
    semantic_weight: 1.0,
    depth: 50,
    whole_request: false,
    token_budget: TOKEN_BUDGET,
};

/// Chosen for latency, then checked on the four sets (README, "Semantic search"): at 48
/// tokens a sealtools query (long multi-part requests, the only ones the budget cuts) took
/// 26–30 ms p50 on one core of this machine, over the 25 ms target; 32 tokens cost no set
/// more than 0.25 point of R@5 against 48 and none against sealtools' lexical ranking.
pub const TOKEN_BUDGET: usize = 32;

/// The ranking of each part of a request (`parts[0]` the whole), lexical and semantic
/// fused, `n` deep. If the query cannot be embedded (a bug, not bad input), the lexical
/// rankings are kept.
pub(super) fn rank_parts(
    index: &SearchIndex,
    dense: &Dense,
    parts: &[&str],
    n: usize,
) -> Vec<Vec<(usize, f32)>> {
    let f = FUSION;
    let depth = n.max(f.depth);
    let lexical: Vec<Vec<(usize, f32)>> = parts.iter().map(|p| index.ranked(p, depth)).collect();
    let has_terms: Vec<bool> = parts.iter().map(|p| index.has_terms(p)).collect();
    let embedded = dense.token_counts(parts).map(|tokens| {
        let embedded = embedded_parts(&f, &has_terms, &tokens);
        let texts: Vec<&str> = embedded.iter().map(|&(i, _)| parts[i]).collect();
        let limits: Vec<usize> = embedded.iter().map(|&(_, l)| l).collect();
        (embedded, texts, limits)
    });
    let vectors = embedded
        .and_then(|(embedded, texts, limits)| dense.embed(&texts, &limits).map(|v| (embedded, v)));
    let (embedded, vectors) = match vectors {
        Ok(v) => v,
        Err(e) => {
            tracing::error!("semantic search skipped: {e}");
            return fuse_parts(&f, &lexical, &vec![Vec::new(); parts.len()], n);
        }
    };
    let mut semantic = vec![Vec::new(); parts.len()];
    for (row, &(i, _)) in embedded.iter().enumerate() {
        semantic[i] = dense.top(&vectors[row * dense.dim()..(row + 1) * dense.dim()], depth);
    }
    fuse_parts(&f, &lexical, &semantic, n)
}

/// The parts of a request that are embedded, and the tokens each may use, given whether
/// each has a usable term and how many tokens it is: each that has a term (a query of
/// stop words alone ranks nothing, as in lexical search), the whole of a request of
/// several sentences only when `f.whole_request` says so, in order, each within what is
/// left of `f.token_budget` (the last one cut to fit, none given fewer than
/// [`MIN_PART_TOKENS`]).
pub fn embedded_parts(f: &Fusion, has_terms: &[bool], tokens: &[usize]) -> Vec<(usize, usize)> {
    let several = has_terms.len() > 1;
    let mut left = f.token_budget;
    let mut out = Vec::new();
    for (i, &usable) in has_terms.iter().enumerate() {
        if !usable || (several && i == 0 && !f.whole_request) {
            continue;
        }
        if left < MIN_PART_TOKENS {
            break;
        }
        let take = tokens.get(i).copied().unwrap_or(0).min(left);
        left -= take;
        out.push((i, take));
    }
    out
}

/// Each part's lexical and semantic rankings fused, `n` deep.
pub fn fuse_parts(
    f: &Fusion,
    lexical: &[Vec<(usize, f32)>],
    semantic: &[Vec<(usize, f32)>],
    n: usize,
) -> Vec<Vec<(usize, f32)>> {
    lexical
        .iter()
        .zip(semantic)
        .map(|(lex, sem)| fuse(f, lex, sem, n))
        .collect()
}

/// Weighted reciprocal rank fusion of two rankings (best first), the best `n`; ties go to
/// the lexical order, then the lower ord.
pub fn fuse(
    f: &Fusion,
    lexical: &[(usize, f32)],
    semantic: &[(usize, f32)],
    n: usize,
) -> Vec<(usize, f32)> {
    let mut scores: Vec<(usize, f32, usize)> = Vec::with_capacity(lexical.len() + semantic.len());
    for (rank, &(ord, _)) in lexical.iter().take(f.depth.max(n)).enumerate() {
        scores.push((ord, 1.0 / (f.k + rank as f32 + 1.0), rank));
    }
    for (rank, &(ord, _)) in semantic.iter().take(f.depth.max(n)).enumerate() {
        let share = f.semantic_weight / (f.k + rank as f32 + 1.0);
        match scores.iter_mut().find(|s| s.0 == ord) {
            Some(s) => s.1 += share,
            None => scores.push((ord, share, usize::MAX)),
        }
    }
    scores.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)).then(a.0.cmp(&b.0)));
    scores.truncate(n);
    scores.into_iter().map(|(ord, s, _)| (ord, s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ords(l: &[(usize, f32)]) -> Vec<usize> {
        l.iter().map(|x| x.0).collect()
    }

    #[test]
    fn agreement_wins_and_either_side_alone_can_place() {
        let f = Fusion {
            k: 10.0,
            semantic_weight: 1.0,
            depth: 10,
            whole_request: true,
            token_budget: 100,
        };
        let lexical = [(1, 9.0), (2, 8.0), (3, 7.0)];
        let semantic = [(3, 0.9), (4, 0.8), (1, 0.7)];
        // 1: 1/11 + 1/13; 3: 1/13 + 1/11: equal, lexical order breaks the tie.
        assert_eq!(ords(&fuse(&f, &lexical, &semantic, 4)), [1, 3, 2, 4]);
        assert_eq!(ords(&fuse(&f, &lexical, &[], 2)), [1, 2]);
        assert_eq!(ords(&fuse(&f, &[], &semantic, 5)), [3, 4, 1]);
        let heavy = Fusion {
            semantic_weight: 3.0,
            ..f
        };
        assert_eq!(fuse(&heavy, &lexical, &semantic, 1)[0].0, 3);
    }

    #[test]
    fn the_budget_takes_parts_in_order_and_cuts_the_last() {
        let f = Fusion {
            token_budget: 40,
            ..FUSION
        };
        // The whole request (part 0) is not embedded when it has sentences; part 2 has no
        // usable term.
        let has = [true, true, false, true, true];
        assert_eq!(
            embedded_parts(&f, &has, &[90, 20, 10, 15, 30]),
            [(1, 20), (3, 15)],
            "5 tokens left are fewer than a part's minimum"
        );
        assert_eq!(
            embedded_parts(&f, &has, &[60, 20, 10, 12, 30]),
            [(1, 20), (3, 12), (4, 8)],
            "the last part is cut to what is left"
        );
        assert_eq!(
            embedded_parts(&f, &[true], &[70]),
            [(0, 40)],
            "a single long request is cut, not dropped"
        );
        let whole = Fusion {
            whole_request: true,
            ..f
        };
        assert_eq!(
            embedded_parts(&whole, &has, &[30, 20, 10, 15, 30]),
            [(0, 30), (1, 10)]
        );
    }
}

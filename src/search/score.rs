//! BM25 scoring over tantivy's postings, term at a time.
//!
//! Why not tantivy's `BooleanQuery`: a tool query is a few dozen weighted terms (typed words
//! and their synonyms, over two fields) against at most tens of thousands of short
//! documents. Through the query engine each term costs two dictionary lookups, a boxed
//! scorer and a 256-entry BM25 cache built per query, which put search at 60–700 µs; read
//! directly, the block postings of all terms are summed into one dense score array in a
//! few microseconds. The index, analysis and postings stay tantivy's; only the loop that
//! adds up the scores is ours, and it is plain Okapi BM25 (k1 1.2, b 0.75, tantivy's
//! constants) with exact document lengths.
//!
//! One rule sits on top of BM25: a name's score grows with how much of the name the query
//! says ([`Scorer::top`]).

use std::sync::Arc;

use tantivy::postings::TermInfo;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{InvertedIndexReader, Searcher, Term};

use crate::error::{Error, Result};

const K1: f32 = 1.2;
const B: f32 = 0.75;
/// The scored fields: the weighted combined text, and the name.
const FIELDS: usize = 2;
const NAME: usize = 1;

struct Segment {
    inverted: [Arc<InvertedIndexReader>; FIELDS],
    /// Position in the indexed slice, by tantivy doc id.
    doc_ord: Vec<u32>,
    /// Term count of each field, by doc id.
    lengths: [Vec<f32>; FIELDS],
    /// The summed idf of the words of each name, by doc id: what a query must say to say
    /// the whole name.
    name_mass: Vec<f32>,
}

pub(super) struct Scorer {
    segments: Vec<Segment>,
    fields: [Field; FIELDS],
    average_length: [f32; FIELDS],
    docs: u32,
}

impl Scorer {
    /// `lengths[ord]` holds the term count of each field of the document at `ord`,
    /// `name_mass[ord]` its [`name_mass`].
    pub(super) fn new(
        searcher: Searcher,
        ord_field: Field,
        fields: [Field; FIELDS],
        lengths: &[[u32; FIELDS]],
        name_mass: &[f32],
    ) -> Result<Self> {
        let ord_name = searcher.schema().get_field_name(ord_field).to_string();
        let docs = lengths.len() as u32;
        let mut segments = Vec::new();
        for reader in searcher.segment_readers() {
            let ords = reader.fast_fields().u64(&ord_name)?;
            let max_doc = reader.max_doc();
            let mut doc_ord = Vec::with_capacity(max_doc as usize);
            let mut seg_lengths: [Vec<f32>; FIELDS] = Default::default();
            let mut seg_name_mass = Vec::with_capacity(max_doc as usize);
            for doc in 0..max_doc {
                let ord = ords
                    .first(doc)
                    .ok_or_else(|| Error::Index(format!("document {doc} has no ord")))?;
                let len = lengths
                    .get(ord as usize)
                    .ok_or_else(|| Error::Index(format!("ord {ord} out of range")))?;
                doc_ord.push(ord as u32);
                for f in 0..FIELDS {
                    seg_lengths[f].push(len[f] as f32);
                }
                let mass = name_mass
                    .get(ord as usize)
                    .ok_or_else(|| Error::Index(format!("ord {ord} has no name mass")))?;
                seg_name_mass.push(*mass);
            }
            segments.push(Segment {
                inverted: [
                    reader.inverted_index(fields[0])?,
                    reader.inverted_index(fields[1])?,
                ],
                doc_ord,
                lengths: seg_lengths,
                name_mass: seg_name_mass,
            });
        }
        let mut average_length = [0.0; FIELDS];
        for (f, avg) in average_length.iter_mut().enumerate() {
            let total = lengths.iter().map(|l| l[f] as f32).sum::<f32>();
            *avg = (total / docs.max(1) as f32).max(1.0);
        }
        Ok(Scorer {
            segments,
            fields,
            average_length,
            docs,
        })
    }

    /// The best `n` documents for weighted `terms`, as (ord, score), best first; ties go
    /// to the lower ord so results are stable.
    ///
    /// The name's BM25 score is scaled by the square root of the share of the name the
    /// query says (the idf of the name's words it holds, typed or as a synonym, over the
    /// idf of all of them). A request that says all of `mysql_server_list` is about that
    /// tool; one that shares only "latitude" and "longitude" with "airports - Nearest
    /// airports for a given latitude and longitude" (a weather request giving its place)
    /// says little about that one, and a word left unsaid counts by how rare it is
    /// (sealtools R@5 +0.47, azure_mcp +0.21, toollens +0.95, metatool -0.09). This carries
    /// the exact-name rule over to the partial matches below it.
    pub(super) fn top(
        &self,
        terms: &[(String, f32)],
        name_boost: f32,
        n: usize,
    ) -> Vec<(usize, f32)> {
        let field_boost = [1.0, name_boost];
        // (segment, field, term weight, term info, idf) and document frequencies per
        // term/field.
        let mut postings: Vec<(usize, usize, f32, TermInfo, f32)> = Vec::new();
        let mut idf = vec![[0.0f32; FIELDS]; terms.len()];
        for (t, (text, weight)) in terms.iter().enumerate() {
            for f in 0..FIELDS {
                if field_boost[f] <= 0.0 {
                    continue;
                }
                let term = Term::from_field_text(self.fields[f], text);
                let mut doc_freq = 0;
                let first = postings.len();
                for (s, segment) in self.segments.iter().enumerate() {
                    match segment.inverted[f].get_term_info(&term) {
                        Ok(Some(info)) => {
                            doc_freq += info.doc_freq;
                            postings.push((s, f, *weight * field_boost[f], info, 0.0));
                        }
                        Ok(None) => {}
                        Err(e) => tracing::error!("reading the term dictionary failed: {e}"),
                    }
                }
                idf[t][f] = bm25_idf(doc_freq, self.docs);
                for p in &mut postings[first..] {
                    p.2 *= idf[t][f];
                    p.4 = idf[t][f];
                }
            }
        }
        let mut results: Vec<(usize, f32)> = Vec::new();
        for (s, segment) in self.segments.iter().enumerate() {
            let mut scores = vec![0.0f32; segment.doc_ord.len()];
            let mut name_scores = vec![0.0f32; segment.doc_ord.len()];
            // The idf of the name's words the query says.
            let mut name_said = vec![0.0f32; segment.doc_ord.len()];
            for &(_, f, weight, ref info, idf) in postings.iter().filter(|p| p.0 == s) {
                let scores = if f == NAME {
                    &mut name_scores
                } else {
                    &mut scores
                };
                let mut block = match segment.inverted[f]
                    .read_block_postings_from_terminfo(info, IndexRecordOption::WithFreqs)
                {
                    Ok(block) => block,
                    Err(e) => {
                        tracing::error!("reading postings failed: {e}");
                        continue;
                    }
                };
                let lengths = &segment.lengths[f];
                let norm = K1 / self.average_length[f];
                loop {
                    let docs = block.docs();
                    if docs.is_empty() {
                        break;
                    }
                    for (&doc, &tf) in docs.iter().zip(block.freqs()) {
                        let (Some(score), Some(&len)) =
                            (scores.get_mut(doc as usize), lengths.get(doc as usize))
                        else {
                            continue;
                        };
                        let tf = tf as f32;
                        *score += weight * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B) + norm * B * len);
                        if f == NAME
                            && let Some(said) = name_said.get_mut(doc as usize)
                        {
                            *said += idf;
                        }
                    }
                    block.advance();
                }
            }
            for (d, name_score) in name_scores.iter().enumerate() {
                if *name_score > 0.0 {
                    let share = (name_said[d] / segment.name_mass[d].max(f32::EPSILON)).min(1.0);
                    scores[d] += name_score * share.sqrt();
                }
            }
            results.extend(
                scores
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| **s > 0.0)
                    .map(|(doc, s)| (segment.doc_ord[doc] as usize, *s)),
            );
        }
        let better = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if results.len() > n && n > 0 {
            results.select_nth_unstable_by(n - 1, better);
            results.truncate(n);
        }
        results.sort_unstable_by(better);
        results
    }
}

/// The summed idf, over the name field of `searcher`, of the distinct words of each name
/// (`name_words[ord]`: analyzed, one per position, so a camelCase word's joined form is an
/// alias, not one more word to say): what a query must say to say the whole name.
pub(super) fn name_mass(
    searcher: &Searcher,
    name_field: Field,
    name_words: &[Vec<String>],
) -> Result<Vec<f32>> {
    let docs = name_words.len() as u32;
    let name_indexes = searcher
        .segment_readers()
        .iter()
        .map(|r| r.inverted_index(name_field))
        .collect::<tantivy::Result<Vec<_>>>()?;
    let name_idf = |word: &String| -> Result<f32> {
        let term = Term::from_field_text(name_field, word);
        let mut doc_freq = 0;
        for index in &name_indexes {
            doc_freq += index
                .doc_freq(&term)
                .map_err(|e| Error::Index(format!("reading the name index: {e}")))?;
        }
        Ok(bm25_idf(doc_freq, docs))
    };
    let mut mass_by_ord = Vec::with_capacity(name_words.len());
    for words in name_words {
        let mut distinct: Vec<&String> = words.iter().collect();
        distinct.sort_unstable();
        distinct.dedup();
        let mut mass = 0.0;
        for w in distinct {
            mass += name_idf(w)?;
        }
        mass_by_ord.push(mass);
    }
    Ok(mass_by_ord)
}

/// Okapi BM25's idf, as tantivy computes it: never negative.
fn bm25_idf(doc_freq: u32, docs: u32) -> f32 {
    let df = doc_freq as f32;
    let n = docs as f32;
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idf_falls_with_frequency_and_stays_positive() {
        assert!(bm25_idf(1, 100) > bm25_idf(10, 100));
        assert!(bm25_idf(100, 100) > 0.0);
    }
}

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

use std::sync::Arc;

use tantivy::postings::TermInfo;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{InvertedIndexReader, Searcher, Term};

use crate::error::{Error, Result};

const K1: f32 = 1.2;
const B: f32 = 0.75;
/// The scored fields: the weighted combined text, and the name.
const FIELDS: usize = 2;

struct Segment {
    inverted: [Arc<InvertedIndexReader>; FIELDS],
    /// Position in the indexed slice, by tantivy doc id.
    doc_ord: Vec<u32>,
    /// Term count of each field, by doc id.
    lengths: [Vec<f32>; FIELDS],
}

pub(super) struct Scorer {
    segments: Vec<Segment>,
    fields: [Field; FIELDS],
    average_length: [f32; FIELDS],
    docs: u32,
}

impl Scorer {
    /// `lengths[ord]` holds the term count of each field of the document at `ord`.
    pub(super) fn new(
        searcher: Searcher,
        ord_field: Field,
        fields: [Field; FIELDS],
        lengths: &[[u32; FIELDS]],
    ) -> Result<Self> {
        let ord_name = searcher.schema().get_field_name(ord_field).to_string();
        let mut segments = Vec::new();
        for reader in searcher.segment_readers() {
            let ords = reader.fast_fields().u64(&ord_name)?;
            let max_doc = reader.max_doc();
            let mut doc_ord = Vec::with_capacity(max_doc as usize);
            let mut seg_lengths: [Vec<f32>; FIELDS] = Default::default();
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
            }
            segments.push(Segment {
                inverted: [
                    reader.inverted_index(fields[0])?,
                    reader.inverted_index(fields[1])?,
                ],
                doc_ord,
                lengths: seg_lengths,
            });
        }
        let docs = lengths.len().max(1) as f32;
        let mut average_length = [0.0; FIELDS];
        for (f, avg) in average_length.iter_mut().enumerate() {
            *avg = (lengths.iter().map(|l| l[f] as f32).sum::<f32>() / docs).max(1.0);
        }
        Ok(Scorer {
            segments,
            fields,
            average_length,
            docs: lengths.len() as u32,
        })
    }

    /// The best `n` documents for weighted `terms`, as (ord, score), best first; ties go
    /// to the lower ord so results are stable.
    pub(super) fn top(
        &self,
        terms: &[(String, f32)],
        name_boost: f32,
        n: usize,
    ) -> Vec<(usize, f32)> {
        let field_boost = [1.0, name_boost];
        // (segment, field, term weight, term info) and document frequencies per term/field.
        let mut postings: Vec<(usize, usize, f32, TermInfo)> = Vec::new();
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
                            postings.push((s, f, *weight * field_boost[f], info));
                        }
                        Ok(None) => {}
                        Err(e) => tracing::error!("reading the term dictionary failed: {e}"),
                    }
                }
                idf[t][f] = bm25_idf(doc_freq, self.docs);
                for p in &mut postings[first..] {
                    p.2 *= idf[t][f];
                }
            }
        }
        let mut results: Vec<(usize, f32)> = Vec::new();
        for (s, segment) in self.segments.iter().enumerate() {
            let mut scores = vec![0.0f32; segment.doc_ord.len()];
            for (_, f, weight, info) in postings.iter().filter(|p| p.0 == s) {
                let mut block = match segment.inverted[*f]
                    .read_block_postings_from_terminfo(info, IndexRecordOption::WithFreqs)
                {
                    Ok(block) => block,
                    Err(e) => {
                        tracing::error!("reading postings failed: {e}");
                        continue;
                    }
                };
                let lengths = &segment.lengths[*f];
                let norm = K1 / self.average_length[*f];
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
                    }
                    block.advance();
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

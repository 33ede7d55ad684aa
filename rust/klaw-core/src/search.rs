//! Reciprocal Rank Fusion of the vector and keyword candidate lists.

use std::collections::HashMap;

#[derive(Clone, Debug)]
pub struct FusionParams {
    /// Candidates taken from each list (design: 20).
    pub candidates: usize,
    /// RRF constant k (design: 60).
    pub rrf_k: f64,
    pub vector_weight: f64,
    pub keyword_weight: f64,
}

impl Default for FusionParams {
    fn default() -> Self {
        FusionParams {
            candidates: 20,
            rrf_k: 60.0,
            vector_weight: 1.0,
            keyword_weight: 1.0,
        }
    }
}

/// The hybrid search every index uses (archival memory and the docs): int8 vector
/// candidates rescored exactly, BM25 candidates from tantivy, fused by weighted RRF.
/// `vector` and `keyword` each return up to `want` (id, score) best first.
pub fn hybrid(
    vector: impl FnOnce(usize) -> crate::Result<Vec<(i64, f32)>>,
    keyword: impl FnOnce(usize) -> crate::Result<Vec<(i64, f32)>>,
    p: &FusionParams,
    top_k: usize,
) -> crate::Result<Vec<(i64, f64)>> {
    if top_k == 0 {
        return Ok(Vec::new());
    }
    let want = p.candidates.max(top_k);
    let v = vector(want)?;
    let k = keyword(want)?;
    Ok(rrf(&v, &k, p, top_k))
}

/// Rescores int8 candidates with exact float dot products (`exact` gives a vector's
/// cosine, or None to keep the approximate score), best first, `k` kept.
pub fn rescore(
    cands: Vec<(i64, f32)>,
    k: usize,
    mut exact: impl FnMut(i64) -> crate::Result<Option<f32>>,
) -> crate::Result<Vec<(i64, f32)>> {
    let mut out = Vec::with_capacity(cands.len());
    for (id, approx) in cands {
        out.push((id, exact(id)?.unwrap_or(approx)));
    }
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.truncate(k);
    Ok(out)
}

/// How many int8 candidates to rescore for `k` results.
pub fn int8_candidates(k: usize) -> usize {
    (k * 4).max(40)
}

/// score(d) = Σ w_i / (k + rank_i(d)), ranks from 1; ties broken by id for stability.
pub fn rrf(
    vector: &[(i64, f32)],
    keyword: &[(i64, f32)],
    p: &FusionParams,
    top_k: usize,
) -> Vec<(i64, f64)> {
    let mut scores: HashMap<i64, f64> = HashMap::new();
    for (list, w) in [(vector, p.vector_weight), (keyword, p.keyword_weight)] {
        for (rank, (id, _)) in list.iter().enumerate() {
            *scores.entry(*id).or_insert(0.0) += w / (p.rrf_k + (rank + 1) as f64);
        }
    }
    let mut out: Vec<(i64, f64)> = scores.into_iter().collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.truncate(top_k);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_lists_rank_higher_and_k_is_used() {
        let p = FusionParams::default();
        let v = [(1, 0.9), (2, 0.8)];
        let k = [(2, 5.0), (3, 4.0)];
        let r = rrf(&v, &k, &p, 10);
        assert_eq!(r[0].0, 2);
        assert!((r[0].1 - (1.0 / 62.0 + 1.0 / 61.0)).abs() < 1e-12);
        assert!((r[1].1 - 1.0 / 61.0).abs() < 1e-12);
        assert_eq!(rrf(&v, &[], &p, 1), vec![(1, 1.0 / 61.0)]);
        assert_eq!(rrf(&[], &k, &p, 10).len(), 2);
        assert!(rrf(&[], &[], &p, 10).is_empty());
    }
}

//! Fusion of the vector and keyword candidate lists: a convex combination of min-max
//! normalised scores whose weights follow how peaked each list is for the query (the
//! default, chosen by leave-one-set-out: docs/memory-eval.md), the plain convex
//! combination, or weighted RRF, with an optional bonus for the newer candidates.

use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fusion {
    /// score = wv·norm(cosine) + wk·norm(bm25), each min-max normalised over its list.
    Convex,
    /// score = Σ w / (k + rank): ranks only (wave 1).
    Rrf,
    /// Convex, each weight scaled by how peaked its list is for this query (`peakedness`)
    /// and the two rescaled to their old sum: a list whose best candidate stands out
    /// from the next ones gets more say than a flat one.
    Peaked,
}

/// How many candidates after a list's best measure how flat it is (`peakedness`).
pub const PEAK_WINDOW: usize = 3;

#[derive(Clone, Debug)]
pub struct FusionParams {
    /// Candidates taken from each list.
    pub candidates: usize,
    pub fusion: Fusion,
    /// RRF constant k.
    pub rrf_k: f64,
    pub vector_weight: f64,
    pub keyword_weight: f64,
    /// Added to a candidate's score in proportion to how recent it is among the
    /// candidates (0 = the oldest, `recency` = the newest): a changed fact's newer
    /// value comes first. 0 turns it off (a query about the past).
    pub recency: f64,
    /// Query-dependent weights: a query of more than this many distinct terms moves
    /// keyword weight to the vector list in proportion (`wk·pivot/terms` stays), since
    /// a long question ORs many common words into BM25. 0 turns it off.
    pub keyword_pivot: usize,
}

impl Default for FusionParams {
    fn default() -> Self {
        FusionParams {
            candidates: 20,
            fusion: Fusion::Convex,
            rrf_k: 60.0,
            vector_weight: 0.7,
            keyword_weight: 0.3,
            recency: 0.0,
            keyword_pivot: 0,
        }
    }
}

/// The hybrid search every index uses (archival memory and the docs): int8 vector
/// candidates rescored exactly, BM25 candidates from tantivy, fused by `p.fusion`.
/// `vector` and `keyword` each return up to `want` (id, score) best first; `created`
/// gives a candidate's time (for `p.recency`).
pub fn hybrid(
    vector: impl FnOnce(usize) -> crate::Result<Vec<(i64, f32)>>,
    keyword: impl FnOnce(usize) -> crate::Result<Vec<(i64, f32)>>,
    created: impl Fn(i64) -> Option<i64>,
    p: &FusionParams,
    top_k: usize,
) -> crate::Result<Vec<(i64, f64)>> {
    hybrid_terms(vector, keyword, created, p, top_k, 0)
}

/// `hybrid` for a query of `terms` distinct analysed terms (for `keyword_pivot`).
pub fn hybrid_terms(
    vector: impl FnOnce(usize) -> crate::Result<Vec<(i64, f32)>>,
    keyword: impl FnOnce(usize) -> crate::Result<Vec<(i64, f32)>>,
    created: impl Fn(i64) -> Option<i64>,
    p: &FusionParams,
    top_k: usize,
    terms: usize,
) -> crate::Result<Vec<(i64, f64)>> {
    if top_k == 0 {
        return Ok(Vec::new());
    }
    let p = &adapt(p, terms);
    let want = p.candidates.max(top_k);
    let v = vector(want)?;
    let k = keyword(want)?;
    let mut scores = match p.fusion {
        Fusion::Convex => convex(&v, &k, p),
        Fusion::Rrf => rrf_scores(&v, &k, p),
        Fusion::Peaked => peaked(&v, &k, p),
    };
    if p.recency > 0.0 {
        add_recency(&mut scores, created, p.recency);
    }
    Ok(best(scores, top_k))
}

/// The weights for a query of `terms` terms (see `keyword_pivot`).
fn adapt(p: &FusionParams, terms: usize) -> FusionParams {
    let mut q = p.clone();
    if p.keyword_pivot > 0 && terms > p.keyword_pivot {
        let keep = p.keyword_pivot as f64 / terms as f64;
        let moved = p.keyword_weight * (1.0 - keep);
        q.keyword_weight -= moved;
        q.vector_weight += moved;
    }
    q
}

fn best(scores: HashMap<i64, f64>, top_k: usize) -> Vec<(i64, f64)> {
    let mut out: Vec<(i64, f64)> = scores.into_iter().collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.truncate(top_k);
    out
}

fn add_recency(scores: &mut HashMap<i64, f64>, created: impl Fn(i64) -> Option<i64>, weight: f64) {
    let when: Vec<(i64, i64)> = scores
        .keys()
        .filter_map(|&id| created(id).map(|t| (id, t)))
        .collect();
    let lo = when.iter().map(|w| w.1).min().unwrap_or(0);
    let hi = when.iter().map(|w| w.1).max().unwrap_or(0);
    if hi <= lo {
        return;
    }
    for (id, t) in when {
        if let Some(s) = scores.get_mut(&id) {
            *s += weight * (t - lo) as f64 / (hi - lo) as f64;
        }
    }
}

/// Min-max normalised: the list's best is 1 and its worst 0 (a single hit is 1).
fn minmax(list: &[(i64, f32)]) -> impl Iterator<Item = (i64, f64)> + '_ {
    let lo = list.iter().map(|x| x.1).fold(f32::INFINITY, f32::min);
    let hi = list.iter().map(|x| x.1).fold(f32::NEG_INFINITY, f32::max);
    list.iter().map(move |&(id, x)| {
        let n = if hi > lo { (x - lo) / (hi - lo) } else { 1.0 };
        (id, f64::from(n))
    })
}

/// score(d) = wv·norm_v(d) + wk·norm_k(d); a list that does not hold d adds 0.
pub fn convex(
    vector: &[(i64, f32)],
    keyword: &[(i64, f32)],
    p: &FusionParams,
) -> HashMap<i64, f64> {
    weighted(vector, keyword, p.vector_weight, p.keyword_weight)
}

fn weighted(vector: &[(i64, f32)], keyword: &[(i64, f32)], wv: f64, wk: f64) -> HashMap<i64, f64> {
    let mut scores: HashMap<i64, f64> = HashMap::new();
    for (list, w) in [(vector, wv), (keyword, wk)] {
        for (id, n) in minmax(list) {
            *scores.entry(id).or_insert(0.0) += w * n;
        }
    }
    scores
}

/// 1 − the mean min-max score of the `PEAK_WINDOW` candidates after the list's best:
/// 1 when the best stands alone (or is the only one), near 0 for a flat list, 0 for
/// an empty one.
pub fn peakedness(list: &[(i64, f32)]) -> f64 {
    let mut xs: Vec<f64> = minmax(list).map(|x| x.1).collect();
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(|a, b| b.total_cmp(a));
    let next = &xs[1..xs.len().min(PEAK_WINDOW + 1)];
    if next.is_empty() {
        return 1.0;
    }
    1.0 - next.iter().sum::<f64>() / next.len() as f64
}

/// `convex` with wv·peak_v and wk·peak_k, rescaled to sum to wv + wk (both lists flat:
/// plain `convex`).
pub fn peaked(
    vector: &[(i64, f32)],
    keyword: &[(i64, f32)],
    p: &FusionParams,
) -> HashMap<i64, f64> {
    let (wv, wk) = (p.vector_weight, p.keyword_weight);
    let (pv, pk) = (wv * peakedness(vector), wk * peakedness(keyword));
    if pv + pk <= 0.0 {
        return weighted(vector, keyword, wv, wk);
    }
    let scale = (wv + wk) / (pv + pk);
    weighted(vector, keyword, pv * scale, pk * scale)
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

/// score(d) = Σ w_i / (k + rank_i(d)), ranks from 1.
fn rrf_scores(
    vector: &[(i64, f32)],
    keyword: &[(i64, f32)],
    p: &FusionParams,
) -> HashMap<i64, f64> {
    let mut scores: HashMap<i64, f64> = HashMap::new();
    for (list, w) in [(vector, p.vector_weight), (keyword, p.keyword_weight)] {
        for (rank, (id, _)) in list.iter().enumerate() {
            *scores.entry(*id).or_insert(0.0) += w / (p.rrf_k + (rank + 1) as f64);
        }
    }
    scores
}

/// Weighted RRF, best first, ties broken by id for stability.
pub fn rrf(
    vector: &[(i64, f32)],
    keyword: &[(i64, f32)],
    p: &FusionParams,
    top_k: usize,
) -> Vec<(i64, f64)> {
    best(rrf_scores(vector, keyword, p), top_k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn convex_normalises_each_list_and_weights_them() {
        let p = FusionParams::default();
        // Vector: 1 best, 3 worst; keyword: only 3 (so it is that list's best).
        let v = [(1, 0.9), (2, 0.8), (3, 0.7)];
        let k = [(3, 7.5)];
        let fused = convex(&v, &k, &p);
        assert!((fused[&1] - 0.7).abs() < 1e-9);
        assert!((fused[&2] - 0.35).abs() < 1e-6);
        assert!((fused[&3] - 0.3).abs() < 1e-9);
        // Recency lifts the newest candidate by the full weight, the oldest by none.
        let recent = FusionParams {
            recency: 0.5,
            ..p.clone()
        };
        let ranked = hybrid(
            |_| Ok(v.to_vec()),
            |_| Ok(k.to_vec()),
            |id| Some(id * 100),
            &recent,
            3,
        )
        .unwrap();
        assert_eq!(ranked[0].0, 3);
        assert!((ranked[0].1 - 0.8).abs() < 1e-9 && (ranked[1].1 - 0.7).abs() < 1e-9);
        // Without dates (or one date for all), recency changes nothing.
        let same = hybrid(
            |_| Ok(v.to_vec()),
            |_| Ok(k.to_vec()),
            |_| Some(5),
            &recent,
            3,
        )
        .unwrap();
        assert_eq!(same[0].0, 1);
    }

    #[test]
    fn peaked_gives_the_list_whose_best_stands_out_more_say() {
        let p = FusionParams {
            fusion: Fusion::Peaked,
            vector_weight: 0.6,
            keyword_weight: 0.4,
            ..FusionParams::default()
        };
        // Flat vector list (its next three are 0.9 of the best after min-max), peaked
        // keyword list (one term matched one chunk well).
        let v = [(1, 0.80), (2, 0.79), (3, 0.79), (4, 0.79), (5, 0.70)];
        let k = [(9, 9.0), (6, 2.0), (7, 1.5), (8, 1.0)];
        assert!((peakedness(&v) - 0.1).abs() < 1e-5);
        let pk = 1.0 - (1.0 / 8.0 + 0.5 / 8.0 + 0.0) / 3.0;
        assert!((peakedness(&k) - pk).abs() < 1e-9);
        let fused = peaked(&v, &k, &p);
        let wk = 0.4 * pk / (0.6 * 0.1 + 0.4 * pk);
        assert!((fused[&9] - wk).abs() < 1e-4);
        // Plain convex at 0.6/0.4 ranks the vector list's best first; peaked, the
        // keyword list's.
        let top = |m: HashMap<i64, f64>| best(m, 1)[0].0;
        assert_eq!(top(convex(&v, &k, &p)), 1);
        assert_eq!(top(fused), 9);
        // One candidate is fully peaked; an empty list has no say; two flat lists fall
        // back to the prior weights.
        assert!((peakedness(&[(1, 0.5)]) - 1.0).abs() < 1e-12);
        assert!(peakedness(&[]).abs() < 1e-12);
        assert!((peaked(&v, &[], &p)[&1] - 1.0).abs() < 1e-12);
        let flat = [(1, 1.0), (2, 1.0)];
        assert_eq!(peaked(&flat, &flat, &p), convex(&flat, &flat, &p));
    }

    #[test]
    fn long_queries_move_keyword_weight_to_vectors() {
        let p = FusionParams {
            keyword_pivot: 4,
            ..FusionParams::default()
        };
        let short = adapt(&p, 3);
        assert!((short.keyword_weight - 0.3).abs() < 1e-12);
        let long = adapt(&p, 8);
        assert!((long.keyword_weight - 0.15).abs() < 1e-12);
        assert!((long.vector_weight - 0.85).abs() < 1e-12);
        assert!((adapt(&FusionParams::default(), 50).keyword_weight - 0.3).abs() < 1e-12);
    }

    #[test]
    fn both_lists_rank_higher_and_k_is_used() {
        let p = FusionParams {
            fusion: Fusion::Rrf,
            vector_weight: 1.0,
            keyword_weight: 1.0,
            ..FusionParams::default()
        };
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

//! Archival keyword index: tantivy BM25 over text analysed by `analyze`.
//!
//! FTS5 must score every matching row of an OR query; tantivy's block-max WAND
//! skips most of them, which is what keeps natural-language queries fast (see
//! docs/decisions.md for the measurements). The index is derived data: it lives
//! beside klaw.db and is rebuilt from `memory_chunks` whenever it disagrees.

use crate::analyze::{analyze, analyze_joined, Mode};
use crate::error::Result;
use std::path::{Path, PathBuf};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::{TextAnalyzer, WhitespaceTokenizer};
use tantivy::{doc, Index, IndexReader, ReloadPolicy, Term};

const TOKENIZER: &str = "klaw_pre";
const WRITER_HEAP: usize = 20_000_000;

pub struct KeywordIndex {
    index: Index,
    reader: IndexReader,
    id: Field,
    text: Field,
    /// 1 for documents a plain search leaves out (conversations, facts): excluded in
    /// the query, so a plain search need not over-fetch past them.
    hidden: Field,
    dir: PathBuf,
}

fn schema() -> (Schema, Field, Field, Field) {
    let mut b = Schema::builder();
    let id = b.add_u64_field("id", NumericOptions::default().set_indexed().set_fast());
    let hidden = b.add_u64_field("hidden", NumericOptions::default().set_indexed());
    let text_opts = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(TOKENIZER)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let text = b.add_text_field("text", text_opts);
    (b.build(), id, text, hidden)
}

impl KeywordIndex {
    /// Opens the index in `dir`, creating it if absent. A directory that is not a
    /// readable index is wiped and recreated: it holds nothing that isn't in klaw.db.
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let (schema, id, text, hidden) = schema();
        let index = match Index::open_in_dir(dir) {
            Ok(ix) if ix.schema() == schema => ix,
            _ => {
                std::fs::remove_dir_all(dir)?;
                std::fs::create_dir_all(dir)?;
                Index::create_in_dir(dir, schema)?
            }
        };
        Self::ready(index, [id, text, hidden], dir.to_path_buf())
    }

    /// A throwaway index in memory (the docs: a few hundred chunks, rebuilt from
    /// klaw.db when first searched).
    pub fn in_ram() -> Result<Self> {
        let (schema, id, text, hidden) = schema();
        Self::ready(
            Index::create_in_ram(schema),
            [id, text, hidden],
            PathBuf::new(),
        )
    }

    /// `index` with the tokenizer its text field names (the text arrives analysed by
    /// `analyze`, so splitting at spaces is all that is left) and a reader.
    fn ready(index: Index, [id, text, hidden]: [Field; 3], dir: PathBuf) -> Result<Self> {
        index.tokenizers().register(
            TOKENIZER,
            TextAnalyzer::from(WhitespaceTokenizer::default()),
        );
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(KeywordIndex {
            index,
            reader,
            id,
            text,
            hidden,
            dir,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn num_docs(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// Deletes `remove` and adds `add` in one commit.
    pub fn apply(&self, add: &[(i64, &str)], remove: &[i64]) -> Result<()> {
        self.apply_hidden(add, remove, false)
    }

    /// `apply`, the added documents marked hidden or not (see `hidden`).
    pub fn apply_hidden(&self, add: &[(i64, &str)], remove: &[i64], hidden: bool) -> Result<()> {
        if add.is_empty() && remove.is_empty() {
            return Ok(());
        }
        let mut w = self
            .index
            .writer_with_num_threads::<tantivy::TantivyDocument>(1, WRITER_HEAP)?;
        for &r in remove {
            w.delete_term(Term::from_field_u64(self.id, r as u64));
        }
        for &(id, text) in add {
            w.add_document(self.doc(id, text, hidden))?;
        }
        w.commit()?;
        w.wait_merging_threads()?;
        self.reader.reload()?;
        Ok(())
    }

    fn doc(&self, id: i64, text: &str, hidden: bool) -> tantivy::TantivyDocument {
        doc!(
            self.id => id as u64,
            self.text => analyze_joined(text, Mode::Index),
            self.hidden => u64::from(hidden),
        )
    }

    /// Replaces the whole content (used when the index disagrees with klaw.db).
    pub fn rebuild<'a>(&self, docs: impl Iterator<Item = (i64, &'a str)>) -> Result<()> {
        self.rebuild_flagged(docs.map(|(i, t)| (i, t, false)))
    }

    /// `rebuild` with each document's hidden flag.
    pub fn rebuild_flagged<'a>(
        &self,
        docs: impl Iterator<Item = (i64, &'a str, bool)>,
    ) -> Result<()> {
        let mut w = self
            .index
            .writer_with_num_threads::<tantivy::TantivyDocument>(1, WRITER_HEAP)?;
        w.delete_all_documents()?;
        for (id, text, hidden) in docs {
            w.add_document(self.doc(id, text, hidden))?;
        }
        w.commit()?;
        w.wait_merging_threads()?;
        self.reader.reload()?;
        Ok(())
    }

    /// `search` among the documents `ids` only (the facts a filter selects).
    pub fn search_in(&self, query: &str, k: usize, ids: &[i64]) -> Result<Vec<(i64, f32)>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let only: Box<dyn Query> = Box::new(tantivy::query::TermSetQuery::new(
            ids.iter().map(|&i| Term::from_field_u64(self.id, i as u64)),
        ));
        self.search_with(query, k, Some((Occur::Must, only)))
    }

    /// BM25 top-`k` ids for a natural-language query (terms OR-ed), best first.
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<(i64, f32)>> {
        self.search_with(query, k, None)
    }

    /// `search` without the hidden documents (a plain archival search).
    pub fn search_visible(&self, query: &str, k: usize) -> Result<Vec<(i64, f32)>> {
        let hidden: Box<dyn Query> = Box::new(TermQuery::new(
            Term::from_field_u64(self.hidden, 1),
            IndexRecordOption::Basic,
        ));
        self.search_with(query, k, Some((Occur::MustNot, hidden)))
    }

    fn search_with(
        &self,
        query: &str,
        k: usize,
        only: Option<(Occur, Box<dyn Query>)>,
    ) -> Result<Vec<(i64, f32)>> {
        let mut terms = analyze(query, Mode::Query);
        terms.sort();
        terms.dedup();
        if terms.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let clauses: Vec<(Occur, Box<dyn Query>)> = terms
            .iter()
            .map(|t| {
                let q: Box<dyn Query> = Box::new(TermQuery::new(
                    Term::from_field_text(self.text, t),
                    IndexRecordOption::WithFreqs,
                ));
                (Occur::Should, q)
            })
            .collect();
        let mut q = BooleanQuery::new(clauses);
        if let Some((occur, extra)) = only {
            q = BooleanQuery::new(vec![
                (Occur::Must, Box::new(q) as Box<dyn Query>),
                (occur, extra),
            ]);
        }
        let searcher = self.reader.searcher();
        let top = searcher.search(&q, &TopDocs::with_limit(k))?;
        let mut out = Vec::with_capacity(top.len());
        for (score, addr) in top {
            let col = searcher
                .segment_reader(addr.segment_ord)
                .fast_fields()
                .u64("id")?;
            if let Some(id) = col.first(addr.doc_id) {
                out.push((id as i64, score));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multilingual_keyword_search() {
        let dir = tempfile::tempdir().unwrap();
        let ix = KeywordIndex::open(dir.path()).unwrap();
        ix.apply(
            &[
                (1, "Нужно улучшить работу памяти агента"),
                (2, "我下周二要去看医生"),
                (3, "The dogs were running in the park"),
                (4, "Completely unrelated note about bread"),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(ix.search("память", 5).unwrap()[0].0, 1);
        assert_eq!(ix.search("医生", 5).unwrap()[0].0, 2);
        assert_eq!(ix.search("dog runs", 5).unwrap()[0].0, 3);
        assert!(ix.search("zebra", 5).unwrap().is_empty());
        ix.apply(&[], &[2]).unwrap();
        assert!(ix.search("医生", 5).unwrap().is_empty());
        assert_eq!(ix.num_docs(), 3);
        drop(ix);
        let ix = KeywordIndex::open(dir.path()).unwrap();
        assert_eq!(ix.num_docs(), 3);
    }

    #[test]
    fn hidden_documents_are_left_out_of_a_visible_search_only() {
        let ix = KeywordIndex::in_ram().unwrap();
        ix.apply(&[(1, "tea in the garden")], &[]).unwrap();
        let many: Vec<(i64, &str)> = (2..500).map(|i| (i, "tea tea tea")).collect();
        ix.apply_hidden(&many, &[], true).unwrap();
        assert_eq!(ix.search_visible("tea", 5).unwrap().len(), 1);
        assert_eq!(ix.search("tea", 5).unwrap().len(), 5);
        assert_eq!(ix.search_in("tea", 5, &[1, 7]).unwrap().len(), 2);
        ix.rebuild_flagged([(1, "tea", true), (2, "tea", false)].into_iter())
            .unwrap();
        assert_eq!(
            ix.search_visible("tea", 5).unwrap(),
            [(2, ix.search_visible("tea", 5).unwrap()[0].1)]
        );
    }
}

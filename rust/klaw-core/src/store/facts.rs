//! Retained facts (the `## Retain` bullets of daily logs, parsed in Python by
//! klaw.memory.retain): one chunk per fact, searchable like any chunk but hidden from
//! a plain search (its source is `fact:<path>`), with its kind, entities and times
//! in `facts` / `fact_entities`, so a search can be restricted to the facts of a kind
//! or about an entity. A fact chunk belongs to its file's `files` row: replacing or
//! removing the file drops its facts with its chunks.

use super::{Inner, Store};
use crate::error::{CoreError, Result};
use crate::timeutil::parse_iso;
use rusqlite::{params, params_from_iter, OptionalExtension};
use std::collections::HashSet;

/// Sources of fact chunks start with this; like `chat:` they are searched only when
/// asked for (by a fact filter).
pub const FACT_SOURCE_PREFIX: &str = "fact:";

/// A fact to store (its vector is passed alongside).
#[derive(Clone, Debug, Default)]
pub struct NewFact {
    pub fact_id: String,
    pub kind: Option<String>,
    pub confidence: Option<f64>,
    pub attribute: Option<String>,
    pub day: Option<String>,
    pub start_day: Option<String>,
    pub end_day: Option<String>,
    /// The time it ranks and filters by (ISO 8601).
    pub created_at: String,
    pub content: String,
    pub line: i64,
    pub end_line: i64,
    /// (name as written, its analysed terms), one per entity.
    pub entities: Vec<(String, Vec<String>)>,
}

/// A stored fact, as read back.
#[derive(Clone, Debug, PartialEq)]
pub struct FactRow {
    pub chunk_id: i64,
    pub fact_id: String,
    pub kind: Option<String>,
    pub confidence: Option<f64>,
    pub attribute: Option<String>,
    pub day: Option<String>,
    pub start_day: Option<String>,
    pub end_day: Option<String>,
    pub created_at: String,
    pub content: String,
    pub path: String,
    pub line: i64,
    pub end_line: i64,
    pub entities: Vec<String>,
    pub superseded_by: Option<String>,
}

const ROW_SQL: &str = "SELECT c.id, t.fact_id, t.kind, t.confidence, t.attribute, t.day, \
     t.start_day, t.end_day, c.created_at, c.content, f.path, c.start_line, c.end_line, \
     t.superseded_by FROM facts t JOIN memory_chunks c ON c.id = t.chunk_id \
     JOIN files f ON f.id = c.file_id";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<FactRow> {
    Ok(FactRow {
        chunk_id: r.get(0)?,
        fact_id: r.get(1)?,
        kind: r.get(2)?,
        confidence: r.get(3)?,
        attribute: r.get(4)?,
        day: r.get(5)?,
        start_day: r.get(6)?,
        end_day: r.get(7)?,
        created_at: r.get(8)?,
        content: r.get(9)?,
        path: r.get(10)?,
        line: r.get::<_, Option<i64>>(11)?.unwrap_or(0),
        end_line: r.get::<_, Option<i64>>(12)?.unwrap_or(0),
        entities: Vec::new(),
        superseded_by: r.get(13)?,
    })
}

impl Store {
    /// Replaces the facts of the indexed file `path` in one transaction; returns
    /// their chunk ids. The file must be indexed first (its chunks give it a row).
    pub fn replace_facts(
        &self,
        path: &str,
        facts: &[NewFact],
        vectors: &[f32],
    ) -> Result<Vec<i64>> {
        self.check_vectors(facts.len(), vectors)?;
        let mut created = Vec::with_capacity(facts.len());
        for f in facts {
            created.push(parse_iso(&f.created_at).ok_or_else(|| {
                CoreError::InvalidInput(format!(
                    "fact {} of {path}: created_at is not ISO 8601: {:?}",
                    f.fact_id, f.created_at
                ))
            })?);
        }
        let dim = self.dim;
        let source = format!("{FACT_SOURCE_PREFIX}{path}");
        self.write(|inner, conn| {
            let tx = conn.transaction()?;
            let file_id: i64 = tx
                .query_row("SELECT id FROM files WHERE path = ?1", [path], |r| r.get(0))
                .optional()?
                .ok_or_else(|| {
                    CoreError::InvalidInput(format!(
                        "{path} is not indexed: index it before its facts"
                    ))
                })?;
            let removed: Vec<i64> = tx
                .prepare_cached("SELECT id FROM memory_chunks WHERE source = ?1")?
                .query_map([&source], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            {
                let mut del = tx.prepare_cached("DELETE FROM vec_memory WHERE rowid = ?1")?;
                for id in &removed {
                    del.execute([id])?;
                }
            }
            // facts and fact_entities go with their chunks (ON DELETE CASCADE).
            tx.execute("DELETE FROM memory_chunks WHERE source = ?1", [&source])?;
            let mut ids = Vec::with_capacity(facts.len());
            {
                let mut ins = tx.prepare_cached(
                    "INSERT INTO memory_chunks(source, content, created_at, file_id, start_line, \
                     end_line, heading, chunk_hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )?;
                let mut vins =
                    tx.prepare_cached("INSERT INTO vec_memory(rowid, embedding) VALUES (?1, ?2)")?;
                let mut fins = tx.prepare_cached(
                    "INSERT INTO facts(chunk_id, fact_id, kind, confidence, attribute, day, \
                     start_day, end_day) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )?;
                let mut eins = tx.prepare_cached(
                    "INSERT INTO fact_entities(chunk_id, ord, name, term) VALUES (?1, ?2, ?3, ?4)",
                )?;
                for (i, f) in facts.iter().enumerate() {
                    ins.execute(params![
                        source,
                        f.content,
                        f.created_at,
                        file_id,
                        f.line,
                        f.end_line,
                        f.kind,
                        f.fact_id
                    ])?;
                    let id = tx.last_insert_rowid();
                    vins.execute(params![
                        id,
                        super::f32_bytes(&vectors[i * dim..(i + 1) * dim])
                    ])?;
                    fins.execute(params![
                        id,
                        f.fact_id,
                        f.kind,
                        f.confidence,
                        f.attribute,
                        f.day,
                        f.start_day,
                        f.end_day
                    ])?;
                    for (ord, (name, terms)) in f.entities.iter().enumerate() {
                        // The name's own row (term NULL) keeps it when it has no terms.
                        eins.execute(params![id, ord as i64, name, Option::<&str>::None])?;
                        let unique: HashSet<&String> = terms.iter().collect();
                        for t in unique {
                            eins.execute(params![id, ord as i64, name, t])?;
                        }
                    }
                    ids.push(id);
                }
            }
            tx.commit()?;
            Self::after_facts(
                inner, &ids, &removed, &source, &created, facts, vectors, dim,
            )?;
            Ok(ids)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn after_facts(
        inner: &Inner,
        ids: &[i64],
        removed: &[i64],
        source: &str,
        created: &[i64],
        facts: &[NewFact],
        vectors: &[f32],
        dim: usize,
    ) -> Result<()> {
        {
            let mut mem = inner.mem_mut()?;
            for r in removed {
                mem.vindex.remove(*r);
            }
            let s = mem.intern(source);
            for (i, id) in ids.iter().enumerate() {
                mem.vindex
                    .upsert_meta(*id, &vectors[i * dim..(i + 1) * dim], created[i], s);
            }
        }
        let add: Vec<(i64, &str)> = ids
            .iter()
            .zip(facts)
            .map(|(i, f)| (*i, f.content.as_str()))
            .collect();
        inner.keyword.apply_hidden(&add, removed, true)
    }

    /// Chunk ids of the facts of one of `kinds` (any when empty) about an entity
    /// whose terms include all of one of `entities` (each the analysed terms of a
    /// name or alias; any entity when empty), in id order.
    pub fn fact_ids(&self, kinds: &[String], entities: &[Vec<String>]) -> Result<Vec<i64>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut by_entity: Option<HashSet<i64>> = None;
            for terms in entities {
                let unique: Vec<&String> = {
                    let mut seen = HashSet::new();
                    terms.iter().filter(|t| seen.insert(*t)).collect()
                };
                if unique.is_empty() {
                    continue;
                }
                let marks = vec!["?"; unique.len()].join(",");
                let sql = format!(
                    "SELECT chunk_id FROM fact_entities WHERE term IN ({marks}) \
                     GROUP BY chunk_id, ord HAVING count(DISTINCT term) = {}",
                    unique.len()
                );
                let mut st = r.prepare(&sql)?;
                let found =
                    st.query_map(params_from_iter(unique.iter()), |r| r.get::<_, i64>(0))?;
                let set = by_entity.get_or_insert_with(HashSet::new);
                for id in found {
                    set.insert(id?);
                }
            }
            if !entities.is_empty() && by_entity.is_none() {
                return Ok(Vec::new()); // names without a single term match nothing
            }
            let mut out: Vec<i64> = if kinds.is_empty() {
                match by_entity {
                    Some(set) => set.into_iter().collect(),
                    None => r
                        .prepare_cached("SELECT chunk_id FROM facts")?
                        .query_map([], |r| r.get(0))?
                        .collect::<rusqlite::Result<_>>()?,
                }
            } else {
                let marks = vec!["?"; kinds.len()].join(",");
                let sql = format!("SELECT chunk_id FROM facts WHERE kind IN ({marks})");
                let mut st = r.prepare(&sql)?;
                let of_kind =
                    st.query_map(params_from_iter(kinds.iter()), |r| r.get::<_, i64>(0))?;
                let mut v = Vec::new();
                for id in of_kind {
                    let id = id?;
                    if by_entity.as_ref().is_none_or(|s| s.contains(&id)) {
                        v.push(id);
                    }
                }
                v
            };
            out.sort_unstable();
            Ok(out)
        })
    }

    /// The facts with these chunk ids (in that order; unknown ids left out), or of
    /// the file `path`, or all of them (path order, then line), entities included.
    pub fn facts(&self, ids: Option<&[i64]>, path: Option<&str>) -> Result<Vec<FactRow>> {
        self.read(|inner| {
            let r = inner.reader.lock().map_err(|_| CoreError::Closed)?;
            let mut rows: Vec<FactRow> = match (ids, path) {
                (Some(ids), _) => {
                    let mut st = r.prepare_cached(&format!("{ROW_SQL} WHERE c.id = ?1"))?;
                    let mut v = Vec::with_capacity(ids.len());
                    for id in ids {
                        v.extend(st.query_row([id], row).optional()?);
                    }
                    v
                }
                (None, Some(p)) => r
                    .prepare_cached(&format!(
                        "{ROW_SQL} WHERE f.path = ?1 ORDER BY c.start_line, c.id"
                    ))?
                    .query_map([p], row)?
                    .collect::<rusqlite::Result<_>>()?,
                (None, None) => r
                    .prepare_cached(&format!("{ROW_SQL} ORDER BY f.path, c.start_line, c.id"))?
                    .query_map([], row)?
                    .collect::<rusqlite::Result<_>>()?,
            };
            let mut names = r.prepare_cached(
                "SELECT name FROM fact_entities WHERE chunk_id = ?1 AND term IS NULL ORDER BY ord",
            )?;
            for f in &mut rows {
                f.entities = names
                    .query_map([f.chunk_id], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
            }
            Ok(rows)
        })
    }

    /// Sets (or clears, with None) the fact id that supersedes each fact chunk.
    pub fn set_superseded(&self, changes: &[(i64, Option<String>)]) -> Result<usize> {
        self.write(|_inner, conn| {
            let tx = conn.transaction()?;
            let mut n = 0;
            {
                let mut st =
                    tx.prepare_cached("UPDATE facts SET superseded_by = ?2 WHERE chunk_id = ?1")?;
                for (id, by) in changes {
                    n += st.execute(params![id, by])?;
                }
            }
            tx.commit()?;
            Ok(n)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::search::Filter;
    use crate::store::testing::{chunk, open, unit};
    use crate::store::FileState;
    use std::sync::Arc;

    fn fact(id: &str, kind: &str, content: &str, entity: &str, line: i64) -> NewFact {
        NewFact {
            fact_id: id.into(),
            kind: Some(kind.into()),
            created_at: "2026-02-24T00:00:00Z".into(),
            content: content.into(),
            line,
            end_line: line,
            entities: vec![(entity.into(), vec![entity.to_lowercase()])],
            ..NewFact::default()
        }
    }

    #[test]
    fn facts_are_hidden_from_a_plain_search_and_found_by_their_filter() {
        let (_d, s) = open(4);
        let state = FileState {
            hash: "h".into(),
            mtime: 0.0,
            size: 1,
        };
        let v = unit(&[1.0, 0.0, 0.0, 0.0]);
        let at = "2026-02-24T00:00:00Z";
        s.replace_file(
            "memory/d.md",
            "memory/d.md",
            &state,
            at,
            &[chunk("the log about lisbon")],
            &v,
        )
        .unwrap();
        let facts = [
            fact("a", "world", "Anna moved to lisbon", "Anna", 3),
            fact("b", "opinion", "Bob likes lisbon", "Bob", 4),
        ];
        let ids = s
            .replace_facts("memory/d.md", &facts, &[v.clone(), v.clone()].concat())
            .unwrap();
        let p = crate::search::FusionParams::default();
        let plain = s
            .search(Some(&v), "lisbon", 10, &p, &Filter::default())
            .unwrap();
        assert_eq!(plain.len(), 1, "only the log's chunk");
        let anna = s.fact_ids(&[], &[vec!["anna".into()]]).unwrap();
        assert_eq!(anna, [ids[0]]);
        assert_eq!(s.fact_ids(&["opinion".into()], &[]).unwrap(), [ids[1]]);
        let f = Filter {
            ids: Some(Arc::new(anna)),
            ..Filter::default()
        };
        let hits = s.search(Some(&v), "lisbon", 10, &p, &f).unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].citation(), "memory/d.md#L3-L3");
        // Replacing the file drops its facts with its chunks.
        s.replace_file(
            "memory/d.md",
            "memory/d.md",
            &state,
            at,
            &[chunk("new")],
            &v,
        )
        .unwrap();
        assert!(s.facts(None, None).unwrap().is_empty());
        assert_eq!(s.fact_ids(&[], &[]).unwrap(), Vec::<i64>::new());
    }

    #[test]
    fn supersession_is_kept_and_rows_read_back() {
        let (_d, s) = open(4);
        let state = FileState {
            hash: "h".into(),
            mtime: 0.0,
            size: 1,
        };
        let v = unit(&[0.0, 1.0, 0.0, 0.0]);
        s.replace_file(
            "memory/d.md",
            "memory/d.md",
            &state,
            "2026-02-24",
            &[chunk("x")],
            &v,
        )
        .unwrap();
        let ids = s
            .replace_facts("memory/d.md", &[fact("a", "world", "x", "Anna", 2)], &v)
            .unwrap();
        assert_eq!(s.set_superseded(&[(ids[0], Some("b".into()))]).unwrap(), 1);
        let rows = s.facts(None, Some("memory/d.md")).unwrap();
        assert_eq!(rows[0].superseded_by.as_deref(), Some("b"));
        assert_eq!(rows[0].entities, ["Anna"]);
        assert!(s.replace_facts("memory/none.md", &[], &[]).is_err());
    }
}

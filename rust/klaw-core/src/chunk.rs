//! Markdown-aware chunker.
//!
//! The text is parsed into blocks (heading line, fenced code block, list item
//! with its continuation lines, table row, paragraph). Blocks are packed whole
//! into chunks of at most `size` estimated tokens; a block that alone exceeds
//! `size` is cut into sentences, then lines, then character windows. The
//! pieces ("segments") are packed greedily, preferring to end a chunk at a
//! block boundary and never right after a heading, and each chunk repeats
//! the trailing segments of the previous one up to `overlap` tokens.
//!
//! Line endings are normalised first: the source is split on `\n` and one
//! trailing `\r` is dropped from every line. A chunk's `text` is the exact
//! slice of that normalised source from its first segment to its last, so a
//! chunk made of whole lines equals `"\n".join(lines[start_line-1:end_line])`.
//! A chunk that starts or ends inside a line (an oversize block cut at a
//! sentence end or a character window) starts at the first non-blank
//! character of its first piece and ends at the last non-blank character of
//! its last piece; its line range names the lines those characters sit on.
//!
//! `benches/pychunker.py` implements the same rules in pure Python.

use std::borrow::Cow;

use crate::tokens::{estimate_tokens, estimate_units, is_space, UNITS_PER_TOKEN};

/// Chunk size and overlap, in estimated tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkConfig {
    pub size: usize,
    pub overlap: usize,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        Self {
            size: 400,
            overlap: 80,
        }
    }
}

/// One chunk of a Markdown document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub text: String,
    /// 1-based, inclusive.
    pub start_line: usize,
    /// 1-based, inclusive.
    pub end_line: usize,
    /// Headings (without `#`) the first line sits under, outermost first.
    pub heading_path: Vec<String>,
    /// `estimate_tokens(text)`.
    pub tokens: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Heading,
    Fence,
    ListItem,
    TableRow,
    Paragraph,
}

struct Block {
    kind: Kind,
    /// Line range, 0-based, end exclusive.
    first: usize,
    end: usize,
    /// Index into the list of heading paths.
    path: usize,
}

/// A packable piece: a whole block, or part of an oversize one.
#[derive(Debug)]
struct Seg {
    /// Byte range in the normalised text.
    a: usize,
    b: usize,
    units: u64,
    /// Units of the whitespace between the previous segment and this one.
    gap: u64,
    path: usize,
    heading: bool,
    /// A block boundary follows this segment.
    block_end: bool,
}

/// Splits `text` into chunks; see the module docs for the rules.
pub fn chunk_markdown(text: &str, cfg: &ChunkConfig) -> Vec<Chunk> {
    let norm = normalise(text);
    let doc = Doc::new(&norm);
    let (blocks, paths) = parse_blocks(&doc);
    let segs = segments(&doc, &blocks, budget(cfg.size.max(1)));
    pack(&doc, &segs, &paths, cfg)
}

/// Chunks many documents with the same configuration.
pub fn chunk_all(texts: &[String], cfg: &ChunkConfig) -> Vec<Vec<Chunk>> {
    texts.iter().map(|t| chunk_markdown(t, cfg)).collect()
}

/// Largest unit count that still rounds to at most `tokens`, so that "fits"
/// means `estimate_tokens(text) <= tokens`; zero stays zero.
fn budget(tokens: usize) -> u64 {
    match tokens {
        0 => 0,
        t => (t as u64).saturating_mul(UNITS_PER_TOKEN) + (UNITS_PER_TOKEN / 2 - 1),
    }
}

fn normalise(text: &str) -> Cow<'_, str> {
    if memchr::memchr(b'\r', text.as_bytes()).is_none() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(line.strip_suffix('\r').unwrap_or(line));
    }
    Cow::Owned(out)
}

/// The normalised text with its line starts.
struct Doc<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> Doc<'a> {
    fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(memchr::memchr_iter(b'\n', text.as_bytes()).map(|i| i + 1));
        Self { text, starts }
    }

    fn len(&self) -> usize {
        self.starts.len()
    }

    fn line_start(&self, i: usize) -> usize {
        self.starts[i]
    }

    fn line_end(&self, i: usize) -> usize {
        self.starts.get(i + 1).map_or(self.text.len(), |s| s - 1)
    }

    fn line(&self, i: usize) -> &'a str {
        &self.text[self.line_start(i)..self.line_end(i)]
    }

    /// 0-based line holding byte `pos`.
    fn line_of(&self, pos: usize) -> usize {
        self.starts.partition_point(|&s| s <= pos) - 1
    }
}

// ---- line classification -------------------------------------------------

fn is_blank(line: &str) -> bool {
    line.chars().all(is_space)
}

fn trim_indent(line: &str) -> &str {
    line.trim_start_matches([' ', '\t'])
}

/// Indentation width; a tab counts 4.
fn indent(line: &str) -> usize {
    line.chars()
        .take_while(|c| matches!(c, ' ' | '\t'))
        .map(|c| if c == '\t' { 4 } else { 1 })
        .sum()
}

fn fence_open(line: &str) -> Option<(char, usize)> {
    let s = trim_indent(line);
    let ch = s.chars().next().filter(|c| matches!(c, '`' | '~'))?;
    let n = s.chars().take_while(|&c| c == ch).count();
    (n >= 3).then_some((ch, n))
}

fn fence_close(line: &str, ch: char, n: usize) -> bool {
    let s = trim_indent(line);
    let run = s.chars().take_while(|&c| c == ch).count();
    run >= n
        && s[run * ch.len_utf8()..]
            .chars()
            .all(|c| matches!(c, ' ' | '\t'))
}

/// ATX heading: level and title.
fn heading(line: &str) -> Option<(usize, &str)> {
    if indent(line) > 3 {
        return None;
    }
    let s = trim_indent(line);
    let level = s.bytes().take_while(|&b| b == b'#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &s[level..];
    if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let title = rest.trim_matches([' ', '\t']);
    let without_closing = title.trim_end_matches('#');
    let title = if without_closing.is_empty() {
        ""
    } else if without_closing.ends_with([' ', '\t']) {
        without_closing.trim_end_matches([' ', '\t'])
    } else {
        title
    };
    Some((level, title))
}

fn list_marker(line: &str) -> bool {
    let s = trim_indent(line).as_bytes();
    let after = match s.first() {
        Some(b'-' | b'*' | b'+') => 1,
        Some(b'0'..=b'9') => {
            let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
            if digits > 9 || !matches!(s.get(digits), Some(b'.' | b')')) {
                return false;
            }
            digits + 1
        }
        _ => return false,
    };
    matches!(s.get(after), None | Some(b' ' | b'\t'))
}

fn table_row(line: &str) -> bool {
    trim_indent(line).starts_with('|')
}

// ---- blocks --------------------------------------------------------------

/// End (exclusive) of a fence opened on line `i`; an unclosed fence runs to EOF.
fn fence_end(doc: &Doc<'_>, i: usize, ch: char, n: usize) -> usize {
    (i + 1..doc.len())
        .find(|&j| fence_close(doc.line(j), ch, n))
        .map_or(doc.len(), |j| j + 1)
}

fn list_item_end(doc: &Doc<'_>, i: usize) -> usize {
    let ind = indent(doc.line(i));
    let mut j = i + 1;
    while j < doc.len() {
        let l = doc.line(j);
        if is_blank(l) {
            // Blank lines stay in the item only if indented content follows.
            let k = (j..doc.len())
                .find(|&k| !is_blank(doc.line(k)))
                .unwrap_or(doc.len());
            if k < doc.len() && indent(doc.line(k)) > ind && !list_marker(doc.line(k)) {
                j = k;
                continue;
            }
            break;
        }
        if list_marker(l) {
            break;
        }
        let fence = fence_open(l);
        if indent(l) <= ind && (fence.is_some() || heading(l).is_some() || table_row(l)) {
            break;
        }
        j = match fence {
            Some((ch, n)) => fence_end(doc, j, ch, n),
            None => j + 1,
        };
    }
    j
}

fn parse_blocks(doc: &Doc<'_>) -> (Vec<Block>, Vec<Vec<String>>) {
    let mut blocks = Vec::new();
    let mut paths: Vec<Vec<String>> = vec![Vec::new()];
    let mut levels: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < doc.len() {
        let line = doc.line(i);
        if is_blank(line) {
            i += 1;
            continue;
        }
        let (kind, end) = if let Some((ch, n)) = fence_open(line) {
            (Kind::Fence, fence_end(doc, i, ch, n))
        } else if let Some((level, title)) = heading(line) {
            while levels.last().is_some_and(|&l| l >= level) {
                levels.pop();
            }
            let mut path = paths.last().cloned().unwrap_or_default();
            path.truncate(levels.len());
            path.push(title.to_string());
            levels.push(level);
            paths.push(path);
            (Kind::Heading, i + 1)
        } else if table_row(line) {
            (Kind::TableRow, i + 1)
        } else if list_marker(line) {
            (Kind::ListItem, list_item_end(doc, i))
        } else {
            let end = (i + 1..doc.len())
                .find(|&j| {
                    let l = doc.line(j);
                    is_blank(l)
                        || fence_open(l).is_some()
                        || heading(l).is_some()
                        || table_row(l)
                        || list_marker(l)
                })
                .unwrap_or(doc.len());
            (Kind::Paragraph, end)
        };
        blocks.push(Block {
            kind,
            first: i,
            end,
            path: paths.len() - 1,
        });
        i = end;
    }
    (blocks, paths)
}

// ---- segments ------------------------------------------------------------

/// Byte range `[a, b)` of `text` without surrounding whitespace, or None.
fn trim_range(text: &str, a: usize, b: usize) -> Option<(usize, usize)> {
    let s = &text[a..b];
    let lead = s.len() - s.trim_start_matches(is_space).len();
    let trimmed = s.trim_matches(is_space);
    (!trimmed.is_empty()).then(|| (a + lead, a + lead + trimmed.len()))
}

/// Sentence ranges in `[a, b)`: a sentence ends after `. ! ? ;` plus closing
/// quotes/brackets when whitespace follows, or after `。！？；` plus closers.
fn sentences(text: &str, a: usize, b: usize) -> Vec<(usize, usize)> {
    const CLOSERS: &[char] = &['"', '\'', ')', ']', '»', '”', '’', '」', '』', '）'];
    let s = &text[a..b];
    let mut out = Vec::new();
    let mut start = 0;
    let mut it = s.char_indices().peekable();
    while let Some((_, c)) = it.next() {
        let cjk = matches!(c, '。' | '！' | '？' | '；');
        if !(cjk || matches!(c, '.' | '!' | '?' | ';')) {
            continue;
        }
        while it.peek().is_some_and(|&(_, n)| CLOSERS.contains(&n)) {
            it.next();
        }
        let end = it.peek().map_or(s.len(), |&(i, _)| i);
        if cjk || it.peek().is_none_or(|&(_, n)| is_space(n)) {
            out.extend(trim_range(text, a + start, a + end));
            start = end;
        }
    }
    out.extend(trim_range(text, a + start, b));
    out
}

/// Character windows of `[a, b)` each within `limit` units; a window ends at
/// its last whitespace when that keeps at least half of it.
fn windows(text: &str, a: usize, b: usize, limit: u64, out: &mut Vec<(usize, usize)>) {
    let bounds: Vec<usize> = text[a..b]
        .char_indices()
        .map(|(i, _)| a + i)
        .chain(std::iter::once(b))
        .collect();
    let mut s = 0; // index into bounds
    let last = bounds.len() - 1;
    while s < last {
        let e = if estimate_units(&text[bounds[s]..b]) <= limit {
            last
        } else {
            // Largest e with units(s..e) <= limit; at least one character.
            let (mut lo, mut hi) = (s + 1, last);
            while lo < hi {
                let mid = (lo + hi).div_ceil(2);
                if estimate_units(&text[bounds[s]..bounds[mid]]) <= limit {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            let half = s + (lo - s) / 2;
            (half.max(s + 1)..lo)
                .rev()
                .find(|&k| text[bounds[k]..].starts_with(is_space))
                .unwrap_or(lo)
        };
        out.extend(trim_range(text, bounds[s], bounds[e]));
        s = e;
        while s < last && text[bounds[s]..].starts_with(is_space) {
            s += 1;
        }
    }
}

/// Cuts an oversize block into pieces that each fit `limit`.
fn split_block(doc: &Doc<'_>, block: &Block, limit: u64) -> Vec<(usize, usize)> {
    let text = doc.text;
    let (a, b) = (doc.line_start(block.first), doc.line_end(block.end - 1));
    let mut pieces = Vec::new();
    let by_lines = |a: usize, b: usize, pieces: &mut Vec<(usize, usize)>| {
        for l in doc.line_of(a)..=doc.line_of(b.saturating_sub(1).max(a)) {
            let la = doc.line_start(l).max(a);
            let lb = doc.line_end(l).min(b);
            if la >= lb || is_blank(&text[la..lb]) {
                continue;
            }
            if estimate_units(&text[la..lb]) <= limit {
                // Whole lines keep their indentation.
                pieces.push((la, lb));
            } else {
                windows(text, la, lb, limit, pieces);
            }
        }
    };
    if matches!(block.kind, Kind::Fence | Kind::TableRow) {
        by_lines(a, b, &mut pieces);
    } else {
        for (sa, sb) in sentences(text, a, b) {
            if estimate_units(&text[sa..sb]) <= limit {
                pieces.push((sa, sb));
            } else {
                by_lines(sa, sb, &mut pieces);
            }
        }
    }
    pieces
}

fn segments(doc: &Doc<'_>, blocks: &[Block], limit: u64) -> Vec<Seg> {
    let mut segs: Vec<Seg> = Vec::with_capacity(blocks.len());
    let push = |segs: &mut Vec<Seg>, a: usize, b: usize, units: u64, block: &Block| {
        let gap = segs
            .last()
            .map_or(0, |p: &Seg| estimate_units(&doc.text[p.b..a]));
        segs.push(Seg {
            a,
            b,
            units,
            gap,
            path: block.path,
            heading: block.kind == Kind::Heading,
            block_end: false,
        });
    };
    for block in blocks {
        let (a, b) = (doc.line_start(block.first), doc.line_end(block.end - 1));
        let units = estimate_units(&doc.text[a..b]);
        if units <= limit {
            push(&mut segs, a, b, units, block);
        } else {
            for (pa, pb) in split_block(doc, block, limit) {
                let units = estimate_units(&doc.text[pa..pb]);
                push(&mut segs, pa, pb, units, block);
            }
        }
        if let Some(last) = segs.last_mut() {
            last.block_end = true;
        }
    }
    segs
}

// ---- packing -------------------------------------------------------------

fn pack(doc: &Doc<'_>, segs: &[Seg], paths: &[Vec<String>], cfg: &ChunkConfig) -> Vec<Chunk> {
    let limit = budget(cfg.size.max(1));
    let olimit = budget(cfg.overlap);
    // cum[k] = sum of gap + units of segs[..k]; span(i, j) covers segs[i..=j].
    let mut cum = Vec::with_capacity(segs.len() + 1);
    cum.push(0u64);
    for s in segs {
        cum.push(cum[cum.len() - 1] + s.gap + s.units);
    }
    let span = |i: usize, j: usize| cum[j + 1] - cum[i] - segs[i].gap;

    let mut chunks = Vec::new();
    let mut i = 0;
    // The next chunk must end at or after this segment.
    let mut min_end = 0;
    while i < segs.len() {
        let mut j = i;
        while j + 1 < segs.len() && span(i, j + 1) <= limit {
            j += 1;
        }
        let clean_end = segs[j].block_end && !segs[j].heading;
        if j + 1 < segs.len() && !clean_end {
            // End at the last block boundary that keeps the chunk half full,
            // does not leave a heading at the end and still adds new text.
            if let Some(c) = (i..j)
                .rev()
                .take_while(|&c| c >= min_end && span(i, c) * 2 >= limit)
                .find(|&c| segs[c].block_end && !segs[c].heading)
            {
                j = c;
            }
        }
        let text = &doc.text[segs[i].a..segs[j].b];
        chunks.push(Chunk {
            text: text.to_string(),
            start_line: doc.line_of(segs[i].a) + 1,
            end_line: doc.line_of(segs[j].b - 1) + 1,
            heading_path: paths[segs[i].path].clone(),
            tokens: estimate_tokens(text),
        });
        if j + 1 >= segs.len() {
            break;
        }
        min_end = j + 1;
        // Repeat trailing segments up to the overlap, keeping room for the next one.
        let mut k = j + 1;
        while k - 1 > i && span(k - 1, j) <= olimit && span(k - 1, j + 1) <= limit {
            k -= 1;
        }
        i = k;
    }
    chunks
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::*;

    fn cfg(size: usize, overlap: usize) -> ChunkConfig {
        ChunkConfig { size, overlap }
    }

    fn lines(text: &str) -> Vec<&str> {
        text.split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .collect()
    }

    /// Every chunk's text matches its line range when it is made of whole lines.
    fn check_ranges(text: &str, chunks: &[Chunk]) {
        let ls = lines(text);
        for c in chunks {
            assert!(c.start_line >= 1 && c.start_line <= c.end_line);
            let joined = ls[c.start_line - 1..c.end_line].join("\n");
            if c.text == joined {
                continue;
            }
            // Intra-line piece: must be a slice of the joined lines.
            assert!(joined.contains(&c.text), "{c:?} not in {joined:?}");
        }
    }

    fn paragraph(words: usize, seed: usize) -> String {
        let vocab = [
            "alpha", "beta", "gamma", "delta", "memory", "agent", "chunk",
        ];
        let mut s = String::new();
        for w in 0..words {
            s.push_str(vocab[(w * 7 + seed) % vocab.len()]);
            s.push(if w % 12 == 11 { '.' } else { ' ' });
            if w % 12 == 11 {
                s.push(' ');
            }
        }
        s.trim_end().to_string()
    }

    #[test]
    fn chunk_empty_gives_none() {
        assert!(chunk_markdown("", &ChunkConfig::default()).is_empty());
        assert!(chunk_markdown("  \n\t\n \r\n", &ChunkConfig::default()).is_empty());
    }

    #[test]
    fn chunk_short_text_single_chunk() {
        let text = "# Title\n\nA short note.\n";
        let chunks = chunk_markdown(text, &ChunkConfig::default());
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].text, "# Title\n\nA short note.");
        assert_eq!((chunks[0].start_line, chunks[0].end_line), (1, 3));
        assert_eq!(chunks[0].heading_path, vec!["Title".to_string()]);
    }

    #[test]
    fn chunk_basic_text_near_size() {
        let text: Vec<String> = (0..60).map(|i| paragraph(40, i)).collect();
        let text = text.join("\n\n");
        let chunks = chunk_markdown(&text, &ChunkConfig::default());
        assert!(chunks.len() > 3);
        for c in &chunks[..chunks.len() - 1] {
            assert!(c.tokens <= 400, "{}", c.tokens);
            assert!(c.tokens >= 300, "{}", c.tokens);
        }
        check_ranges(&text, &chunks);
    }

    #[test]
    fn chunk_overlap_between_consecutive() {
        let text: Vec<String> = (0..40).map(|i| paragraph(20, i)).collect();
        let text = text.join("\n\n");
        let chunks = chunk_markdown(&text, &cfg(200, 60));
        assert!(chunks.len() > 2);
        for w in chunks.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            assert!(b.start_line > a.start_line);
            assert!(b.start_line <= a.end_line, "no overlap: {a:?} {b:?}");
            let shared = lines(&text)[b.start_line - 1..a.end_line].join("\n");
            assert!(estimate_tokens(&shared) <= 60);
            assert!(a.text.ends_with(&shared) && b.text.starts_with(&shared));
        }
    }

    #[test]
    fn chunk_zero_overlap() {
        let text: Vec<String> = (0..20).map(|i| paragraph(20, i)).collect();
        let text = text.join("\n\n");
        let chunks = chunk_markdown(&text, &cfg(100, 0));
        for w in chunks.windows(2) {
            assert!(w[1].start_line > w[0].end_line);
        }
    }

    #[test]
    fn chunk_heading_not_split_and_path() {
        let mut text = String::from("# Top\n\n");
        for s in 0..6 {
            text.push_str("## Section ");
            text.push_str(&s.to_string());
            text.push_str(" with a long heading line\n\n");
            text.push_str(&paragraph(50, s));
            text.push_str("\n\n### Sub\n\n");
            text.push_str(&paragraph(30, s + 1));
            text.push_str("\n\n");
        }
        let chunks = chunk_markdown(&text, &cfg(120, 20));
        check_ranges(&text, &chunks);
        for c in &chunks {
            for l in c.text.lines() {
                if l.starts_with('#') {
                    assert!(lines(&text).contains(&l), "heading cut: {l:?}");
                }
            }
            // A chunk never ends on a heading line when more text follows.
            assert!(!c.text.lines().last().unwrap_or("").starts_with('#'));
            assert_eq!(c.heading_path[0], "Top");
        }
        let sec = chunks
            .iter()
            .find(|c| c.text.starts_with("## Section 1"))
            .unwrap();
        assert_eq!(
            sec.heading_path,
            ["Top", "Section 1 with a long heading line"]
        );
        let small = chunk_markdown(&text, &cfg(40, 0));
        let sub = small
            .iter()
            .find(|c| c.text.starts_with("### Sub"))
            .unwrap();
        assert_eq!(sub.heading_path.len(), 3);
        assert!(sub.heading_path[1].starts_with("Section"));
    }

    #[test]
    fn chunk_code_block_not_split() {
        let code: Vec<String> = (0..30).map(|i| format!("    let x{i} = {i};")).collect();
        let text = format!(
            "{}\n\n```rust\nfn main() {{\n{}\n}}\n```\n\n{}",
            paragraph(150, 1),
            code.join("\n"),
            paragraph(150, 2)
        );
        let fence = text.find("```rust").unwrap();
        let fence_src = &text[fence..text.rfind("```").unwrap() + 3];
        let chunks = chunk_markdown(&text, &cfg(300, 50));
        assert!(chunks.len() >= 2);
        assert!(chunks.iter().any(|c| c.text.contains(fence_src)));
        for c in &chunks {
            assert_eq!(c.text.matches("```").count() % 2, 0, "{c:?}");
        }
    }

    #[test]
    fn chunk_unclosed_fence_runs_to_eof() {
        let text = "intro\n\n~~~\ncode\n\n# not a heading\n";
        let chunks = chunk_markdown(text, &ChunkConfig::default());
        assert_eq!(chunks.len(), 1);
        assert!(chunks[0].heading_path.is_empty());
    }

    #[test]
    fn chunk_list_items_not_split() {
        let items: Vec<String> = (0..40)
            .map(|i| {
                format!(
                    "- item {i} {}\n  continued {}",
                    paragraph(8, i),
                    paragraph(6, i)
                )
            })
            .collect();
        let text = items.join("\n");
        let chunks = chunk_markdown(&text, &cfg(100, 20));
        assert!(chunks.len() > 3);
        check_ranges(&text, &chunks);
        for c in &chunks {
            assert!(c.text.starts_with("- item"), "{c:?}");
            assert!(c.text.lines().last().unwrap().starts_with("  continued"));
        }
    }

    #[test]
    fn chunk_respects_max_tokens_including_oversize() {
        let long_sentences = paragraph(2000, 3);
        let one_word = "x".repeat(20_000);
        let code: Vec<String> = (0..400).map(|i| format!("call_{i}(arg, other);")).collect();
        let text = format!(
            "{long_sentences}\n\n```\n{}\n```\n\n{one_word}\n\n| {} |",
            code.join("\n"),
            "cell ".repeat(1000)
        );
        for c in [cfg(50, 10), cfg(400, 80), cfg(17, 0)] {
            let chunks = chunk_markdown(&text, &c);
            check_ranges(&text, &chunks);
            for ch in &chunks {
                assert!(ch.tokens <= c.size, "{} > {}", ch.tokens, c.size);
                assert!(!ch.text.is_empty());
            }
        }
    }

    #[test]
    fn chunk_cjk_and_cyrillic_sentence_breaks() {
        let zh = "这是一个很长的中文句子，用来测试分块。".repeat(40);
        let chunks = chunk_markdown(&zh, &cfg(60, 0));
        assert!(chunks.len() > 5);
        for c in &chunks {
            assert!(c.text.ends_with('。'), "{:?}", c.text);
            assert!(c.tokens <= 60);
        }
        assert_eq!(
            chunks.iter().map(|c| c.text.as_str()).collect::<String>(),
            zh
        );

        let ru = "Это длинное русское предложение для проверки. ".repeat(40);
        let chunks = chunk_markdown(&ru, &cfg(60, 0));
        assert!(chunks.len() > 3);
        for c in &chunks {
            assert!(c.text.ends_with("проверки."), "{:?}", c.text);
            assert!(c.tokens <= 60);
        }
    }

    #[test]
    fn chunk_line_ranges_and_crlf() {
        let text = "# A\r\n\r\npara one\r\nline two\r\n\r\n## B\r\n\r\n- x\r\n- y\r\n";
        let chunks = chunk_markdown(text, &cfg(6, 0));
        check_ranges(text, &chunks);
        let got: Vec<_> = chunks
            .iter()
            .map(|c| (c.text.as_str(), c.start_line, c.end_line))
            .collect();
        assert_eq!(
            got,
            vec![
                ("# A", 1, 1),
                ("para one\nline two", 3, 4),
                ("## B\n\n- x", 6, 8),
                ("- y", 9, 9)
            ]
        );
        assert_eq!(chunks[3].heading_path, vec!["A", "B"]);
    }

    #[test]
    fn chunk_progress_with_large_overlap() {
        // The break preference must not end a chunk where the previous one
        // ended (found by the Python property tests). Unique words make every
        // chunk's offset unambiguous.
        let mut text = String::new();
        let mut n = 0;
        for i in 0..20 {
            for _ in 0..i % 3 {
                writeln!(text, "# h{n}").unwrap();
                n += 1;
            }
            for w in 0..10 + i * 3 {
                write!(text, "w{n}{}", if w % 9 == 8 { ". " } else { " " }).unwrap();
                n += 1;
            }
            text.push('\n');
        }
        for c in [cfg(118, 117), cfg(30, 29), cfg(8, 7)] {
            let chunks = chunk_markdown(&text, &c);
            check_ranges(&text, &chunks);
            let spans: Vec<(usize, usize)> = chunks
                .iter()
                .map(|ch| {
                    let a = text.find(&ch.text).unwrap();
                    (a, a + ch.text.len())
                })
                .collect();
            for w in spans.windows(2) {
                assert!(w[1].0 > w[0].0 && w[1].1 > w[0].1, "{w:?}");
            }
        }
    }

    #[test]
    fn chunk_all_batches() {
        let texts = vec!["one".to_string(), String::new(), "# t\n\ntwo".to_string()];
        let out = chunk_all(&texts, &ChunkConfig::default());
        assert_eq!(out.iter().map(Vec::len).collect::<Vec<_>>(), vec![1, 0, 1]);
    }

    #[test]
    fn chunk_heading_titles() {
        assert_eq!(heading("## Foo ##"), Some((2, "Foo")));
        assert_eq!(heading("# Foo#"), Some((1, "Foo#")));
        assert_eq!(heading("#Foo"), None);
        assert_eq!(heading("#######"), None);
        assert_eq!(heading("    # code"), None);
        assert!(list_marker("12) x") && list_marker("  - y") && list_marker("*"));
        assert!(!list_marker("**bold**") && !list_marker("1.5 m"));
    }
}

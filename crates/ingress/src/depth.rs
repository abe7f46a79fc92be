//! A linear look at how deeply the YAML nests, before the parser sees it: the parser takes
//! time quadratic in the depth (100,000 levels in 200 KB: 38 s), and real Ingress objects
//! nest fewer than 20 levels. The scan counts, line by line:
//! - flow nesting: `[` and `{` outside quoted scalars, comments and block scalars;
//! - block nesting: each deeper indentation, and each node begun on the same line after a
//!   `- `, `? ` or `key: ` indicator (`- - - x`, `a: b: c`).
//!
//! It errs towards counting more (a scalar after `key: ` counts as a level): the bound is
//! far above what real objects need. Where the parser would read structure, the scan never
//! takes it for text: a quote opens a quoted scalar only where a scalar may begin, and a
//! block scalar (`|`, `>`) covers only the lines indented deeper than the node it belongs to.

use super::ImportError;

/// The deepest nesting an import accepts.
pub const MAX_DEPTH: usize = 128;

/// Refuses `yaml` nested deeper than [`MAX_DEPTH`], naming the first line that goes deeper.
pub(crate) fn check(yaml: &str) -> Result<(), ImportError> {
    let mut scan = Scan::default();
    for (n, line) in yaml.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if !scan.line(line.as_bytes()) {
            return Err(ImportError::TooDeep {
                line: n + 1,
                max: MAX_DEPTH,
            });
        }
    }
    Ok(())
}

#[derive(Default)]
struct Scan {
    /// Columns of the block nodes open at this point, shallowest first.
    indents: Vec<usize>,
    /// Open flow collections.
    flow: usize,
    /// The quote of a quoted scalar left open at the end of the last line.
    quote: Option<u8>,
    /// In a flow collection, where a node may begin (after `[`, `{`, `,`, `:` or `?`): only
    /// there does a quote open a quoted scalar. Inside a plain scalar (`[x "`) a quote is
    /// text, as the parser reads it; taking it for a quote would hide the brackets after it.
    flow_node_start: bool,
    /// Inside a block scalar: lines indented deeper than this column are its text.
    text_over: Option<usize>,
}

/// Where a line's scan stands.
#[derive(Clone, Copy)]
enum Mode {
    /// Where a block node may begin (after the indentation or an indicator).
    Node,
    /// In a plain or quoted scalar begun at this column (it becomes a key if `: ` follows).
    Scalar(usize),
    /// Inside a flow collection.
    Flow,
}

fn blank(c: u8) -> bool {
    c == b' ' || c == b'\t'
}

impl Scan {
    fn depth(&self) -> usize {
        self.indents.len() + self.flow
    }

    /// A block node begins at `col` (deeper than every open one, else it is one of them).
    fn open(&mut self, col: usize) -> bool {
        if self.indents.last().is_none_or(|&top| top < col) {
            self.indents.push(col);
        }
        self.depth() <= MAX_DEPTH
    }

    /// False when the line goes deeper than the bound.
    fn line(&mut self, b: &[u8]) -> bool {
        let indent = b.iter().take_while(|&&c| c == b' ').count();
        let empty = b[indent..].iter().all(|&c| blank(c));
        if let Some(over) = self.text_over {
            if empty || indent > over {
                return true;
            }
            self.text_over = None;
        }
        let marker =
            (b.starts_with(b"---") || b.starts_with(b"...")) && b.get(3).is_none_or(|&c| blank(c));
        if marker {
            *self = Scan::default();
            return self.scan(b, 3, Mode::Node, 0);
        }
        if self.quote.is_some() || self.flow > 0 {
            let mode = if self.flow > 0 {
                Mode::Flow
            } else {
                Mode::Scalar(indent)
            };
            return self.scan(b, 0, mode, indent);
        }
        if empty || b[indent] == b'#' {
            return true;
        }
        while self.indents.last().is_some_and(|&top| top > indent) {
            self.indents.pop();
        }
        self.open(indent) && self.scan(b, indent, Mode::Node, indent)
    }

    /// One byte inside a flow collection (`[...]`, `{...}`): `Some(answer)` when the line's
    /// scan ends at it.
    fn flow_byte(&mut self, b: &[u8], i: usize, mode: &mut Mode) -> Option<bool> {
        let c = b[i];
        match c {
            b'[' | b'{' => {
                self.flow += 1;
                self.flow_node_start = true;
                if self.depth() > MAX_DEPTH {
                    return Some(false);
                }
            }
            b']' | b'}' => {
                self.flow = self.flow.saturating_sub(1);
                self.flow_node_start = false;
                if self.flow == 0 {
                    *mode = Mode::Scalar(i);
                }
            }
            b',' | b':' | b'?' => self.flow_node_start = true,
            b'\'' | b'"' if self.flow_node_start => {
                self.quote = Some(c);
                self.flow_node_start = false;
            }
            b'#' if i == 0 || blank(b[i - 1]) => return Some(true),
            _ if blank(c) => {}
            _ => self.flow_node_start = false,
        }
        None
    }

    fn scan(&mut self, b: &[u8], mut i: usize, mut mode: Mode, indent: usize) -> bool {
        // The node a block scalar begun on this line belongs to.
        let mut owner = indent;
        let after = |i: usize| b.get(i + 1).is_none_or(|&c| blank(c));
        while i < b.len() {
            if let Some(q) = self.quote {
                match closing(b, i, q) {
                    Some(end) => {
                        self.quote = None;
                        i = end + 1;
                        continue;
                    }
                    None => return true,
                }
            }
            let c = b[i];
            match mode {
                Mode::Flow => {
                    if let Some(answer) = self.flow_byte(b, i, &mut mode) {
                        return answer;
                    }
                    i += 1;
                }
                Mode::Node => match c {
                    _ if blank(c) => i += 1,
                    b'#' => return true,
                    b'-' | b'?' if after(i) => {
                        owner = i;
                        i += 1;
                        let next = i + b[i..].iter().take_while(|&&c| blank(c)).count();
                        if next < b.len() && b[next] != b'#' && !self.open(next) {
                            return false;
                        }
                        i = next;
                    }
                    b'[' | b'{' => {
                        self.flow += 1;
                        self.flow_node_start = true;
                        if self.depth() > MAX_DEPTH {
                            return false;
                        }
                        mode = Mode::Flow;
                        i += 1;
                    }
                    b'\'' | b'"' => {
                        self.quote = Some(c);
                        mode = Mode::Scalar(i);
                        i += 1;
                    }
                    b'|' | b'>' => {
                        // The rest is the block scalar's header; its text follows.
                        self.text_over = Some(owner);
                        return true;
                    }
                    b'&' | b'!' => {
                        i += b[i..].iter().take_while(|&&c| !blank(c)).count();
                    }
                    _ => mode = Mode::Scalar(i),
                },
                Mode::Scalar(start) => {
                    match c {
                        b':' if after(i) => {
                            // A key: its value is a node one level deeper.
                            owner = start;
                            i += 1;
                            let next = i + b[i..].iter().take_while(|&&c| blank(c)).count();
                            if next < b.len() && b[next] != b'#' && !self.open(next) {
                                return false;
                            }
                            i = next;
                            mode = Mode::Node;
                            continue;
                        }
                        b'#' if i > 0 && blank(b[i - 1]) => return true,
                        _ => {}
                    }
                    i += 1;
                }
            }
        }
        true
    }
}

/// Where the quoted scalar that `q` opened ends on this line, from `i` on (`''` inside single
/// quotes and `\` escapes inside double quotes do not end it).
fn closing(b: &[u8], mut i: usize, q: u8) -> Option<usize> {
    while i < b.len() {
        match b[i] {
            b'\\' if q == b'"' => i += 2,
            c if c == q => {
                if q == b'\'' && b.get(i + 1) == Some(&b'\'') {
                    i += 2;
                } else {
                    return Some(i);
                }
            }
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn depth_ok(yaml: &str) -> bool {
        check(yaml).is_ok()
    }

    fn refused_fast(yaml: &str, line: usize) {
        let start = Instant::now();
        match check(yaml) {
            Err(ImportError::TooDeep { line: l, max }) => {
                assert_eq!((l, max), (line, MAX_DEPTH));
            }
            other => panic!("not refused: {other:?}"),
        }
        assert!(start.elapsed().as_secs() < 1, "{:?}", start.elapsed());
    }

    const LEVELS: usize = 100_000;

    #[test]
    fn a_hundred_thousand_levels_are_refused_at_once() {
        refused_fast(&"[".repeat(LEVELS), 1);
        refused_fast(&"{a: ".repeat(LEVELS), 1);
        refused_fast(&format!("{}x\n", "- ".repeat(LEVELS)), 1);
        refused_fast(&format!("{}x\n", "a: ".repeat(LEVELS)), 1);
        refused_fast(&format!("k: {}\n", "[".repeat(LEVELS)), 1);
        // Flow nesting over many lines (the top node is a level), and one indented mapping
        // per line.
        refused_fast(&"[\n".repeat(LEVELS), MAX_DEPTH);
        let indented: String = (0..1_000)
            .map(|n| format!("{}a:\n", " ".repeat(n)))
            .collect();
        refused_fast(&indented, MAX_DEPTH + 1);
        let listed: String = (0..1_000)
            .map(|n| format!("{}-\n", " ".repeat(n)))
            .collect();
        refused_fast(&listed, MAX_DEPTH + 1);
    }

    #[test]
    fn the_bound_is_exact_for_flow_and_block_nesting() {
        // The document's top node is the first level.
        let flow = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(depth_ok(&flow(MAX_DEPTH - 1)));
        assert!(!depth_ok(&flow(MAX_DEPTH)));
        let block =
            |n: usize| -> String { (0..n).map(|d| format!("{}a:\n", " ".repeat(d))).collect() };
        assert!(depth_ok(&block(MAX_DEPTH)));
        assert!(!depth_ok(&block(MAX_DEPTH + 1)));
    }

    #[test]
    fn text_is_not_structure() {
        let open = "[".repeat(200);
        // Brackets in quoted scalars (over lines too), comments, plain scalars and block
        // scalars are text.
        for yaml in [
            format!("a: \"{open}\"\nb: '{open}'\n"),
            format!("a: \"x\n  {open}\n  y\"\nb: 1\n"),
            format!("a: 'it''s {open}'\n"),
            format!("a: x # {open}\n# {open}\n"),
            format!("a: x{open}\n"),
            format!("a: |\n  {open}\n  {{{{{{\nb: >-\n   {open}\n"),
            format!("- k: |\n    {open}\n  j: 1\n"),
            format!("a: [\"{open}\", '{open}'] # {open}\n"),
        ] {
            assert!(depth_ok(&yaml), "{yaml}");
        }
        // But structure after them is counted: the block scalar ends where its node does,
        // an apostrophe inside a plain scalar opens nothing.
        assert!(!depth_ok(&format!("- k: |\n    x\n  j: {open}\n")));
        assert!(!depth_ok(&format!("a: don't\nb: {open}\n")));
        assert!(!depth_ok(&format!("a: \"x\"\nb: {open}\n")));
        // A quote inside a flow plain scalar is text (`[x "` is the scalar `x "`): the
        // brackets after it are structure, as the parser reads them.
        assert!(!depth_ok(&format!("a: [x \", {open}\n")));
        assert!(!depth_ok(&format!("a: [x ', {open}\n")));
        refused_fast(&format!("a: [x \", {}\n", "[".repeat(LEVELS)), 1);
        // Where a flow node begins, it opens a quoted scalar still.
        assert!(depth_ok(&format!("a: [1, \"{open}\", {{k: '{open}'}}]\n")));
    }
}

//! A line of the module as every pass reads it (split from its comment and trimmed once), its
//! statements (split once, on first use), and the byte scans the line reader is built from.

use super::access::{self, classify, split_instr, Classified, Instr};
use super::bodies;
use super::stmt::{ends_statement, kills_checks, label};

/// The part of a line before a `//` comment (PTX has no string literals outside `.file`/`.section`).
pub(in crate::ptx) fn strip_comment(line: &str) -> &str {
    match find_pair(line, b'/', b'/') {
        Some(p) if find_byte(b'"', &line.as_bytes()[..p]).is_none() => &line[..p],
        _ => line,
    }
}

/// The byte classes the line scans look up: brace 1, `[` 2, `/` 4, and `"` 4 too when `quote`.
const fn flag_table(quote: bool) -> [u8; 256] {
    let mut t = [0; 256];
    t[b'{' as usize] = 1;
    t[b'}' as usize] = 1;
    t[b'[' as usize] = 2;
    t[b'/' as usize] = 4;
    if quote {
        t[b'"' as usize] = 4;
    }
    t
}

/// (class 1, class 2, class 4) seen in `s` under `table`: one lookup a byte.
#[inline]
fn flags_in(s: &[u8], table: &[u8; 256]) -> (bool, bool, bool) {
    let seen = s.iter().fold(0, |m, &b| m | table[usize::from(b)]);
    (seen & 1 != 0, seen & 2 != 0, seen & 4 != 0)
}

/// Whether `s` holds a brace, a `[`, a `/`: one pass over a line for all three, a table lookup
/// a byte (three compares a byte were a fifth of reading a module).
pub(in crate::ptx) fn byte_flags(s: &[u8]) -> (bool, bool, bool) {
    const CLASS: [u8; 256] = flag_table(false);
    flags_in(s, &CLASS)
}

/// [`byte_flags`] with `"` flagged with `/`: (brace, bracket, `/` or `"`).
fn code_flags(s: &[u8]) -> (bool, bool, bool) {
    const CLASS: [u8; 256] = flag_table(true);
    flags_in(s, &CLASS)
}

/// A line of the module body as every pass reads it: split from its `//` comment and trimmed
/// once, not by each pass again; its statements split into their parts once, on first use
/// ([`Line::stmts`]).
#[derive(Clone, Debug)]
pub(in crate::ptx) struct Line<'a> {
    /// As written, newline included.
    pub(in crate::ptx) raw: &'a str,
    /// The length of the part before any `//` comment ([`Line::stripped`]; a length, not a
    /// second `&str`: every pass reads the lines, and each byte of a line costs them all).
    stripped_len: usize,
    /// `stripped` without surrounding whitespace: the statement text that `ir` parses. Private to
    /// `ir`, so that no pass reads a line's text: passes ask the line's typed questions
    /// ([`Line::stmts`], [`Line::directive`], [`Line::is_blank`], [`Line::names`], ...), and a
    /// fact about the input is decided here once. (The emitting walk copies `raw`.)
    pub(super) code: &'a str,
    parsed: std::sync::OnceLock<Stmts<'a>>,
    /// [`kills_checks`] of `code`, asked by several passes of most lines.
    kills_checks: LazyFlag,
    /// `code` holds a brace (its statements may have scope braces to split off).
    pub(in crate::ptx) braces: bool,
    /// `code` holds a `[`: every memory access names its address in brackets, so a line without
    /// one holds none (asked of every line by several passes).
    pub(in crate::ptx) brackets: bool,
    /// `code` holds a `/`: a line without one neither opens nor closes a block comment (the
    /// module-wide body scan asks this of every line).
    pub(in crate::ptx) slash: bool,
    /// The rewriter wrote the line (loop versioning's range tests, labels and branches:
    /// [`Line::read_generated`]): it names only gasan's own registers, which no input line can
    /// name (the reserved prefixes), so it declares no register any pass asks about.
    pub(in crate::ptx) generated: bool,
}

/// A `bool` computed on first use and kept, shared between threads: a pure function of what it
/// describes, so two threads that both compute it store the same value (no `Once` needed, which
/// costs a `OnceLock` ten times a relaxed load and store).
#[derive(Debug, Default)]
pub(in crate::ptx) struct LazyFlag(std::sync::atomic::AtomicU8);

impl LazyFlag {
    const UNKNOWN: u8 = 0;

    #[inline]
    pub(in crate::ptx) fn get_or_init(&self, f: impl FnOnce() -> bool) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        match self.0.load(Relaxed) {
            Self::UNKNOWN => {
                let v = f();
                self.0.store(1 + u8::from(v), Relaxed);
                v
            }
            known => known == 2,
        }
    }
}

impl Clone for LazyFlag {
    fn clone(&self) -> Self {
        LazyFlag(std::sync::atomic::AtomicU8::new(self.0.load(std::sync::atomic::Ordering::Relaxed)))
    }
}

/// One statement of a line ([`Line::statements`]) and its parts ([`split_instr`]; `None` for
/// directives, labels and other text that is no instruction), with its access classification
/// made on first use ([`ParsedStmt::class`]): several passes ask it of the same statement.
#[derive(Clone, Debug)]
pub(in crate::ptx) struct ParsedStmt<'a> {
    pub(in crate::ptx) text: &'a str,
    /// A `;` ended it (scope braces split off a line have none).
    pub(in crate::ptx) terminated: bool,
    pub(in crate::ptx) instr: Option<Instr<'a>>,
    pub(in crate::ptx) class: std::sync::OnceLock<Classified>,
}

/// A line's parsed statements, boxed: held in place, a statement made every `Line` some 170
/// bytes larger, parsed or not (blank lines, `.loc`s), and the lines are read into one vector on
/// one thread before a split rewrite starts: its size was most of that serial read's time. Boxed,
/// a statement is allocated where it is parsed, on the parts' threads.
#[derive(Clone, Debug)]
pub(in crate::ptx) enum Stmts<'a> {
    One(Box<ParsedStmt<'a>>),
    /// None or several.
    Many(Box<[ParsedStmt<'a>]>),
}

impl<'a> Stmts<'a> {
    pub(in crate::ptx) fn as_slice(&self) -> &[ParsedStmt<'a>] {
        match self {
            Stmts::One(s) => std::slice::from_ref(&**s),
            Stmts::Many(s) => s,
        }
    }
}

impl<'a> ParsedStmt<'a> {
    /// The registers it writes ([`Instr::dests`]; none when it is no instruction). (The
    /// instruction's own iterator, not a flat map of the `Option`: its state was copied at each
    /// step, and the passes ask this of every statement that may end a check's reach.)
    #[inline]
    pub(in crate::ptx) fn dests(&self) -> access::Dests<'a> {
        match &self.instr {
            Some(ins) => ins.dests(),
            None => access::Dests::none(),
        }
    }

    /// What kind of access the instruction is ([`classify`]); `None` when it is no instruction.
    #[inline]
    pub(in crate::ptx) fn class(&self) -> Option<&Classified> {
        let ins = self.instr.as_ref()?;
        Some(self.class.get_or_init(|| classify(ins, true)))
    }

    /// The access it makes, when it is one gasan checks.
    #[inline]
    pub(in crate::ptx) fn checked_access(&self) -> Option<&access::Access> {
        match self.class()? {
            Classified::Check(a) => Some(a),
            _ => None,
        }
    }

    /// The instruction and the access it makes, when it is one gasan checks.
    pub(in crate::ptx) fn checked(&self) -> Option<(&Instr<'_>, &access::Access)> {
        Some((self.instr.as_ref()?, self.checked_access()?))
    }
}

impl<'a> Line<'a> {
    pub(in crate::ptx) fn read(raw: &'a str) -> Self {
        // The flags of the whole line first: without a `/` it holds no comment, and the flags
        // of its code are the line's (trimming takes only whitespace). Most lines are read this
        // way, in one pass.
        let (mut braces, mut brackets, mut slash) = byte_flags(raw.as_bytes());
        let stripped = if slash { strip_comment(raw) } else { raw };
        let code = access::trim(stripped);
        if slash {
            (braces, brackets, slash) = byte_flags(code.as_bytes());
        }
        Line { raw, stripped_len: stripped.len(), code, parsed: std::sync::OnceLock::new(), kills_checks: LazyFlag::default(), braces, brackets, slash, generated: false }
    }

    /// A line the rewriter wrote ([`Line::generated`]), read as [`Line::read`] reads it. Its
    /// lines end in ` //gasan` ([`crate::ptx::MARKER`]): where the text before the marker holds
    /// no `/` and no `"`, the marker is the line's comment and the text before it its code, and
    /// the line is read in one pass over that text (the comment search and a second pass over
    /// the code cost twice as much, on some 10,000 such lines of the corpus).
    pub(in crate::ptx) fn read_generated(raw: &'a str) -> Self {
        const MARKED_END: &str = "//gasan\n";
        if let Some(head) = raw.strip_suffix(MARKED_END) {
            let (braces, brackets, slash_or_quote) = code_flags(head.as_bytes());
            if !slash_or_quote {
                let code = access::trim(head);
                return Line { raw, stripped_len: head.len(), code, parsed: std::sync::OnceLock::new(), kills_checks: LazyFlag::default(), braces, brackets, slash: false, generated: true };
            }
        }
        Line { generated: true, ..Line::read(raw) }
    }

    /// [`has_block_comment_marker`] of the whole line, skipping the search where the line holds
    /// no `/` (its code holds none and it has no `//` comment): most lines.
    pub(in crate::ptx) fn block_comment_marker(&self) -> bool {
        (self.slash || self.stripped_len < self.raw.len()) && has_block_comment_marker(self.raw)
    }

    /// The file a `.file` line declares, (index, name): `.file 1 "name"` or `.file 1 "name",
    /// mtime, size`. `None` for any other line, or one whose index or quoted name is unreadable.
    #[inline]
    pub(in crate::ptx) fn file_entry(&self) -> Option<(u32, &'a str)> {
        if !self.code.starts_with(".file") {
            return None;
        }
        let rest = self.code.trim_start_matches(".file").trim();
        let (idx, name) = rest.split_once(char::is_whitespace)?;
        let idx = idx.parse::<u32>().ok()?;
        let inner = name.trim().strip_prefix('"')?;
        Some((idx, &inner[..inner.find('"')?]))
    }

    /// The braces the line's code opens and closes, (opening, closing) (without searching a line
    /// that holds none).
    #[inline]
    pub(in crate::ptx) fn brace_counts(&self) -> (i32, i32) {
        if self.braces {
            count_braces(self.code)
        } else {
            (0, 0)
        }
    }

    /// Whether the line's code (outside its `//` comment) holds a `/*`.
    #[inline]
    pub(in crate::ptx) fn code_opens_block_comment(&self) -> bool {
        self.slash && find_pair(self.code, b'/', b'*').is_some()
    }

    /// The part before any `//` comment.
    #[inline]
    pub(in crate::ptx) fn stripped(&self) -> &'a str {
        &self.raw[..self.stripped_len]
    }

    /// The line's statements with their parts, split on first use and kept for every pass.
    #[inline]
    pub(in crate::ptx) fn stmts(&self) -> &[ParsedStmt<'a>] {
        self.parsed
            .get_or_init(|| {
                // Most lines: one statement ended by the line's only `;`, no brace. Its piece is
                // the text before the `;`, trimmed (what [`StatementPieces`] cuts first; it cuts
                // nothing after the last byte), parsed without the pieces' iterator.
                let b = self.code.as_bytes();
                if !self.braces && b.last() == Some(&b';') && find_byte(b';', &b[..b.len() - 1]).is_none() {
                    let text = access::trim(&self.code[..b.len() - 1]);
                    if !text.is_empty() {
                        return Stmts::One(Box::new(ParsedStmt { text, terminated: true, instr: split_instr(text), class: std::sync::OnceLock::new() }));
                    }
                }
                parse_pieces(self.code, self.braces)
            })
            .as_slice()
    }

    /// The line's one piece when it holds no brace and no `;` but as its last byte (most
    /// lines: a statement ended by its only `;`, a label, a directive without one), and the piece
    /// is not blank: the text before that `;`, trimmed, and whether the `;` ended it. That is the
    /// one piece [`StatementPieces`] cuts of such a line (it cuts nothing after the last byte).
    /// `None` for any other line.
    #[inline]
    pub(in crate::ptx) fn sole_piece(&self) -> Option<(&'a str, bool)> {
        if self.braces {
            return None;
        }
        let b = self.code.as_bytes();
        let (text, terminated) = match find_byte(b';', b) {
            None => (self.code, false),
            Some(p) if p + 1 == b.len() => (access::trim(&self.code[..p]), true),
            Some(_) => return None,
        };
        (!text.is_empty()).then_some((text, terminated))
    }

    /// Drops the parsed statements (a line list dropped on several threads drops each line's
    /// parse where it is, not all on one thread).
    pub(in crate::ptx) fn drop_parse(&mut self) {
        drop(self.parsed.take());
    }

    /// The first statement's instruction: the line's one instruction where a pass knows the line
    /// holds one statement.
    #[inline]
    pub(in crate::ptx) fn first_instr(&self) -> Option<&Instr<'a>> {
        self.stmts().first()?.instr.as_ref()
    }

    /// The line's instruction when it holds exactly one statement. Back edges are read this way:
    /// the passes that move code around a loop's branch need it alone on its line.
    pub(in crate::ptx) fn sole_instr(&self) -> Option<&Instr<'a>> {
        match self.stmts() {
            [only] => only.instr.as_ref(),
            _ => None,
        }
    }

    /// Whether the line's code is exactly one statement, ended by the line's only `;` (no
    /// statement before it, none left open after it). Decided on the text, without parsing,
    /// unless the line holds a brace: then its pieces decide (`ld [a]};` is a statement left
    /// open and a scope brace, which the walk does not check; the passes must not either).
    #[inline]
    pub(in crate::ptx) fn is_lone_statement(&self) -> bool {
        // (`memchr`: `str::contains` of a `char` cost about twice as much on a line's few bytes.)
        self.code.strip_suffix(';').is_some_and(|s| find_byte(b';', s.as_bytes()).is_none()) && (!self.braces || matches!(self.stmts(), [only] if only.terminated))
    }

    /// The line's statement when the line is exactly one ([`Line::is_lone_statement`]): the
    /// passes that look at plain one-statement lines (loop bodies, address arithmetic, what lies
    /// between the members of a run) read them this way.
    #[inline]
    pub(in crate::ptx) fn lone_statement(&self) -> Option<&ParsedStmt<'a>> {
        self.is_lone_statement().then(|| self.stmts().first()).flatten()
    }

    /// Does no check before the line hold after it ([`kills_checks`] of its code)?
    #[inline]
    pub(in crate::ptx) fn kills_checks(&self) -> bool {
        self.kills_checks.get_or_init(|| kills_checks(self.code))
    }

    /// The label the line is ([`label`]).
    #[inline]
    pub(in crate::ptx) fn label(&self) -> Option<&'a str> {
        label(self.code)
    }

    /// The first statement (with its classification): the line's one statement where a pass
    /// knows the line holds one.
    #[inline]
    pub(in crate::ptx) fn first_stmt(&self) -> Option<&ParsedStmt<'a>> {
        self.stmts().first()
    }

    /// The registers its statements write.
    pub(in crate::ptx) fn dests(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.stmts().iter().flat_map(ParsedStmt::dests)
    }

    /// The same line, its parse kept, borrowing for the shorter `'s`: the rewritten lines of a
    /// versioned module mix input lines with the versioning's own (`Versioned::take_lines`). (The
    /// parse's `OnceCell` ties its lifetime exactly, so the cell is taken apart and rebuilt.)
    pub(in crate::ptx) fn shortened<'s>(self) -> Line<'s>
    where
        'a: 's,
    {
        let parsed = self.parsed.into_inner().map_or_else(std::sync::OnceLock::new, std::sync::OnceLock::from);
        Line {
            raw: self.raw,
            stripped_len: self.stripped_len,
            code: self.code,
            parsed,
            kills_checks: self.kills_checks,
            braces: self.braces,
            brackets: self.brackets,
            slash: self.slash,
            generated: self.generated,
        }
    }

    /// (The tests' reader; the rewriter reads whole texts with [`Line::read_text_scanning`].)
    #[cfg(test)]
    pub(in crate::ptx) fn read_all(raws: impl IntoIterator<Item = &'a str>) -> Vec<Self> {
        raws.into_iter().map(Line::read).collect()
    }

    /// `read_all` of `text.split_inclusive('\n')`, the vector sized first (its lines counted
    /// with `memchr`: collected, it grew by doubling and copied every line it held each time),
    /// each line also given to `bodies` as it is read.
    pub(in crate::ptx) fn read_text_scanning(text: &'a str, bodies: &mut bodies::Scanner) -> Vec<Self> {
        let mut lines = Vec::with_capacity(memchr::memchr_iter(b'\n', text.as_bytes()).count() + 1);
        // (`split_inclusive('\n')` cut with `memchr` directly: the `char` searcher's setup per
        // line cost more than the search.)
        let mut start = 0;
        let mut push = |raw: &'a str| {
            lines.push(Line::read(raw));
            let i = lines.len() - 1;
            bodies.line(i, &lines[i]);
        };
        // (Each line's end found in the line's first 64 bytes with [`find_byte`], past them with
        // `memchr`: an iterator's `memchr` per line cost more than the short search.)
        let bytes = text.as_bytes();
        while start < bytes.len() {
            let window = (start + 64).min(bytes.len());
            let nl = find_byte(b'\n', &bytes[start..window]).map(|p| start + p).or_else(|| memchr::memchr(b'\n', &bytes[window..]).map(|p| window + p));
            let Some(nl) = nl else { break };
            push(&text[start..=nl]);
            start = nl + 1;
        }
        if start < text.len() {
            push(&text[start..]);
        }
        lines
    }

    /// The directive the line starts with, as a whole word (`.loc`, `.reg`, `.local`, `.entry`,
    /// `.pragma`): `.local` is not `.loc`. `None` when the line starts with anything else or is
    /// empty. Every pass that skips or stops at directives asks this, not the line's text.
    pub(in crate::ptx) fn directive(&self) -> Option<&'a str> {
        let t = self.code;
        let rest = t.strip_prefix('.')?;
        // (Byte by byte: the word is ASCII, and a longer character's first byte ends it as the
        // character would.)
        let end = rest.bytes().position(|b| !(b.is_ascii_alphanumeric() || b == b'_')).map_or(t.len(), |p| p + 1);
        Some(&t[..end])
    }

    /// (does the line hold a memory-like statement, does it hold one that gets a check), in one pass:
    /// the walk's access lines (and spaces.rs', which follows them).
    pub(in crate::ptx) fn memory(&self) -> (bool, bool) {
        let line = self;
        let t = line.code;
        // Every PTX memory access names its address in brackets: most lines are decided here,
        // without splitting them into operands (asked first: the cheapest test, and every test
        // below answers the same for a line without a bracket).
        if !line.brackets {
            return (false, false);
        }
        // A directive alone on its line is no access; one followed by statements on the line
        // (`.reg .f32 %f; ld.global.f32 %f, [%rd1];`, as hand-written PTX and inline asm may put
        // it) is read statement by statement below, its directive being none.
        if t.is_empty() || line.is_lone_directive() || line.label().is_some() {
            return (false, false);
        }
        // Only complete statements: a multi-line statement (nvcc's `call` sequences) is never a
        // memory access. Scope braces sharing the line (one-line inline asm) are statements of
        // their own, ended by no `;`.
        if !line.stmts().iter().all(|st| st.terminated || st.text == "{" || st.text == "}") {
            return (false, false);
        }
        let (mut memory, mut check) = (false, false);
        for class in line.stmts().iter().filter_map(ParsedStmt::class) {
            match class {
                Classified::NotMemory => {}
                Classified::Check(_) => {
                    memory = true;
                    check = true;
                }
                _ => memory = true,
            }
        }
        (memory, check)
    }

    /// Whether the line's code is one directive with nothing after it on the line (`.loc 1 5 3`,
    /// `.reg .b32 %r<5>;`): it starts with `.` and holds no `;` before its last byte. Its
    /// statements then hold no instruction (each begins with the `.` or is a scope brace split
    /// off its end), which the passes that read every line's instructions know without
    /// splitting it.
    #[inline]
    pub(in crate::ptx) fn is_lone_directive(&self) -> bool {
        let t = self.code;
        t.starts_with('.') && find_byte(b';', t.as_bytes()).is_none_or(|p| p + 1 == t.len())
    }

    /// The line's statements, trimmed and without their `;`, empty ones skipped, scope braces
    /// apart ([`StatementPieces`]): every pass splits a line this way, so a statement's index on
    /// its line means the same to all of them.
    pub(in crate::ptx) fn statements(&self) -> impl Iterator<Item = &'a str> {
        StatementPieces::of(self.code, self.braces).map(|(text, _)| text)
    }

    /// Whether the line holds no code: blank, or a comment only.
    #[inline]
    pub(in crate::ptx) fn is_blank(&self) -> bool {
        self.code.is_empty()
    }

    /// Whether the line's code ends where a statement does ([`ends_statement`]): the next line
    /// begins a new one. A blank line ends nothing.
    #[inline]
    pub(in crate::ptx) fn ends_statement(&self) -> bool {
        ends_statement(self.code)
    }

    /// The operands of a `.loc` line (`1 42 7`, or with `, inlined_at ...`); `None` for any other.
    #[inline]
    pub(in crate::ptx) fn loc_operands(&self) -> Option<&'a str> {
        self.code.strip_prefix(".loc").filter(|rest| !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
    }

    /// Whether `name` occurs in the line's code as a whole word: not inside a longer identifier
    /// (`%rd1` is not in `%rd12`; letters, digits, `_`, `$` and `%` make words). Each occurrence
    /// of the name's first byte is found with `memchr` and compared there: a body's every line is
    /// searched, most are a few dozen bytes without that byte, and a substring searcher's setup
    /// or rolling hash cost more than that.
    #[inline]
    pub(in crate::ptx) fn names(&self, name: &str) -> bool {
        let text = self.code;
        if text.len() < name.len() {
            return false;
        }
        let word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%');
        let (hay, needle) = (text.as_bytes(), name.as_bytes());
        let Some((&first, _)) = needle.split_first() else {
            // (The empty name occurs at every position.)
            return (0..=text.len()).any(|i| text.is_char_boundary(i) && !text[..i].ends_with(word) && !text[i..].starts_with(word));
        };
        memchr::memchr_iter(first, hay).any(|i| hay[i..].starts_with(needle) && !text[..i].ends_with(word) && !text[i + needle.len()..].starts_with(word))
    }

    /// Which of a set of names the line's code names, as [`Line::names`] finds each: bit `k` for
    /// the set's `k`th name. One search of the code when the names begin with at most three
    /// distinct bytes (a kernel's parameters all begin with its name), [`Line::names`] for each
    /// otherwise.
    pub(in crate::ptx) fn names_of(&self, set: &NameSet<'_>) -> u32 {
        let names = set.names;
        let text = self.code;
        if set.each {
            return names.iter().enumerate().filter(|(_, n)| self.names(n)).fold(0, |m, (k, _)| m | 1 << k);
        }
        if text.len() < set.shortest {
            return 0;
        }
        // (Byte by byte: a word character is ASCII, and no byte of a longer character is one.)
        let word = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'%');
        let hay = text.as_bytes();
        let mut found = 0u32;
        let mut from = 0;
        while let Some(p) = match set.firsts[..] {
            [a] => memchr::memchr(a, &hay[from..]),
            [a, b] => memchr::memchr2(a, b, &hay[from..]),
            [a, b, c] => memchr::memchr3(a, b, c, &hay[from..]),
            _ => unreachable!("one to three first bytes"),
        } {
            let i = from + p;
            from = i + 1;
            if i > 0 && word(hay[i - 1]) {
                continue;
            }
            for (k, n) in names.iter().enumerate() {
                let needle = n.as_bytes();
                if hay[i..].starts_with(needle) && !hay.get(i + needle.len()).is_some_and(|&b| word(b)) {
                    found |= 1 << k;
                }
            }
        }
        found
    }

    /// Whether the braces of the line's code pair up within it, each `{` before its `}`: a
    /// statement's register list or vector (`{ %rs1 }`, wgmma's accumulators) opens and closes no
    /// scope, where a stray brace in a statement (`m}l.wide.u32 ...;`, malformed) ends the body for
    /// the scope scan.
    pub(in crate::ptx) fn braces_pair_up(&self) -> bool {
        let mut depth = 0u32;
        for c in self.code.bytes() {
            match c {
                b'{' => depth += 1,
                b'}' => match depth.checked_sub(1) {
                    Some(d) => depth = d,
                    None => return false,
                },
                _ => {}
            }
        }
        depth == 0
    }

    /// Whether a statement of the line may be a declaration with one of `directives`
    /// (`.shared`, `.local`): only a statement starting with `.` declares, the line's first or one
    /// after a `;` or a brace (tested first: instruction lines are most lines, and hold several
    /// dots each). A filter: the statements that pass are parsed to tell.
    #[inline]
    pub(in crate::ptx) fn may_declare(&self, directives: &[&str]) -> bool {
        let t = self.code;
        let may_declare = t.starts_with('.') || self.braces || find_byte(b';', t.as_bytes()).is_some_and(|p| p + 1 < t.len());
        may_declare && contains_dotted(t, directives)
    }

    /// The line's `.reg` declarations (`.reg .b32 %r<5>`), as [`RegTypes::declare`] takes them.
    pub(in crate::ptx) fn reg_declarations(&self) -> impl Iterator<Item = &'a str> {
        self.statements().filter(|s| s.starts_with(".reg"))
    }
}

/// The statements of `code` (a line's, `braces`: it holds a brace), each piece of
/// [`StatementPieces`] parsed: what [`Line::stmts`] gives every line.
fn parse_pieces(code: &str, braces: bool) -> Stmts<'_> {
    let mut pieces = StatementPieces::of(code, braces).map(|(text, terminated)| ParsedStmt { text, terminated, instr: split_instr(text), class: std::sync::OnceLock::new() });
    let Some(first) = pieces.next() else { return Stmts::Many(Box::default()) };
    let Some(second) = pieces.next() else { return Stmts::One(Box::new(first)) };
    let mut stmts = vec![first, second];
    stmts.extend(pieces);
    Stmts::Many(stmts.into_boxed_slice())
}

/// A line's statements: its text cut at each `;`, each piece trimmed (empty ones skipped), with
/// the scope braces that open or close inside a line split off as statements of their own, so
/// that `{ .reg .pred p; setp.ne.b32 p, %r1, 0; @p ld.global.u32 %r2, [%rd1]; }` (one-line
/// inline asm) is `{`, `.reg .pred p`, `setp...`, `@p ld...`, `}`. A brace is split off a
/// piece's start or end only while the piece's braces do not balance, so vector operands
/// (`{%r1, %r2}`) stay whole. Each statement comes with whether a `;` ended it.
pub(in crate::ptx) struct StatementPieces<'a> {
    /// Text after the piece being split (`None`: the line is done).
    pub(in crate::ptx) rest: Option<&'a str>,
    /// The current piece's braces split off its start and end, and what is between them.
    pub(in crate::ptx) lead: &'a str,
    pub(in crate::ptx) middle: &'a str,
    pub(in crate::ptx) trail: &'a str,
    /// A `;` ended the current piece (its last statement gets it).
    pub(in crate::ptx) terminated: bool,
    /// The line holds a brace at all (most do not: their pieces are only cut and trimmed).
    pub(in crate::ptx) braces: bool,
}

impl<'a> StatementPieces<'a> {
    /// The statements of `code`; `braces`: it holds a brace.
    pub(in crate::ptx) fn of(code: &'a str, braces: bool) -> Self {
        StatementPieces { rest: Some(code), lead: "", middle: "", trail: "", terminated: false, braces }
    }

    /// The next piece of the line up to its `;` (or the line's end), trimmed, and whether a `;`
    /// ended it; `None` at the end of the line.
    pub(in crate::ptx) fn cut(&mut self) -> Option<(&'a str, bool)> {
        let rest = self.rest?;
        if rest.is_empty() {
            // (The line ended with its `;`, as most do: its empty last piece, not searched.)
            self.rest = None;
            return Some(("", false));
        }
        Some(match find_byte(b';', rest.as_bytes()) {
            Some(p) => {
                self.rest = Some(&rest[p + 1..]);
                (access::trim(&rest[..p]), true)
            }
            None => {
                self.rest = None;
                (access::trim(rest), false)
            }
        })
    }

    /// The first brace of `s` (skipping whitespace) and what follows it, if `s` holds one.
    pub(in crate::ptx) fn next_brace(s: &'a str) -> Option<(&'a str, &'a str)> {
        let s = access::trim_start(s);
        (!s.is_empty()).then(|| (&s[..1], &s[1..]))
    }
}

impl<'a> Iterator for StatementPieces<'a> {
    type Item = (&'a str, bool);

    fn next(&mut self) -> Option<Self::Item> {
        if !self.braces {
            // Most lines: pieces cut at `;` and trimmed, nothing to split off.
            loop {
                let (piece, terminated) = self.cut()?;
                if !piece.is_empty() {
                    return Some((piece, terminated));
                }
            }
        }
        loop {
            if let Some((brace, rest)) = Self::next_brace(self.lead) {
                self.lead = rest;
                let last = self.lead.trim().is_empty() && self.middle.is_empty() && self.trail.trim().is_empty();
                return Some((brace, last && self.terminated));
            }
            if !self.middle.is_empty() {
                let m = std::mem::take(&mut self.middle);
                return Some((m, self.trail.trim().is_empty() && self.terminated));
            }
            if let Some((brace, rest)) = Self::next_brace(self.trail) {
                self.trail = rest;
                return Some((brace, self.trail.trim().is_empty() && self.terminated));
            }
            let (piece, terminated) = self.cut()?;
            self.terminated = terminated;
            (self.lead, self.middle, self.trail) = split_scope_braces(piece);
        }
    }
}

/// `piece` as (its leading scope braces, the statement between them, its trailing scope braces):
/// a brace at either end is split off while the piece's braces do not balance in its direction.
pub(in crate::ptx) fn split_scope_braces(piece: &str) -> (&str, &str, &str) {
    let (mut opens, mut closes) = count_braces(piece);
    let (mut start, mut end) = (0, piece.len());
    loop {
        let inner = &piece[start..end];
        let body_start = start + (inner.len() - inner.trim_start().len());
        let body = inner.trim();
        let unbalanced = |b: u8| (b == b'{' && opens > closes) || (b == b'}' && closes > opens);
        let brace = match (body.bytes().next(), body.bytes().last()) {
            (Some(b), _) if unbalanced(b) => {
                start = body_start + 1;
                b
            }
            (_, Some(b)) if unbalanced(b) => {
                end = body_start + body.len() - 1;
                b
            }
            _ => break,
        };
        if brace == b'{' {
            opens -= 1;
        } else {
            closes -= 1;
        }
    }
    (&piece[..start], piece[start..end].trim(), &piece[end..])
}

/// `memchr::memchr(needle, hay)` for the few dozen bytes of a line: eight bytes at a time in a
/// `u64` (the classic test for a zero byte, of the bytes XORed with the needle), without
/// `memchr`'s dispatch and vector setup, which cost more than such a search (the statement
/// split, the check window and the access tests ask it of every line). Long haystacks go to
/// `memchr`. (The crate's own portable searcher, `memchr::arch::all::memchr::One`, measured 2%
/// more instructions on the whole rewrite, corpus and 2.71 MB module alike: it handles
/// alignment and raw pointers for haystacks of any length.)
#[inline]
pub(in crate::ptx) fn find_byte(needle: u8, hay: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    if hay.len() > 64 {
        return memchr::memchr(needle, hay);
    }
    let splat = ONES * u64::from(needle);
    let mut chunks = hay.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let x = u64::from_le_bytes(chunk.try_into().expect("eight bytes")) ^ splat;
        // A byte of `x` is zero where the needle is; the lowest flagged byte is the first such
        // (a borrow only ever flags bytes above a zero one).
        let zero = x.wrapping_sub(ONES) & !x & HIGHS;
        if zero != 0 {
            return Some(at + (zero.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks.remainder().iter().position(|&b| b == needle).map(|p| at + p)
}

/// `text.split_inclusive('\n')`, each line's end found with [`find_byte`] (the `char`
/// searcher's setup per line cost more than the search, on the lines the rewriter writes itself
/// and reads back).
pub(in crate::ptx) fn split_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = find_byte(b'\n', rest.as_bytes()).map_or(rest.len(), |p| p + 1);
        let (line, after) = rest.split_at(end);
        rest = after;
        Some(line)
    })
}

/// `s.split(',')`, each `,` found with [`find_byte`] (`str::split` of a `char` sets up a searcher
/// for each line's few bytes).
pub(in crate::ptx) fn comma_pieces(s: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let r = rest?;
        Some(match find_byte(b',', r.as_bytes()) {
            Some(p) => {
                rest = Some(&r[p + 1..]);
                &r[..p]
            }
            None => {
                rest = None;
                r
            }
        })
    })
}

/// Byte offset of the two-byte sequence `ab` (cheaper than a substring searcher per line; the
/// first byte is searched with [`find_byte`], a word at a time).
#[inline]
pub(in crate::ptx) fn find_pair(s: &str, a: u8, b: u8) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut from = 0;
    while let Some(i) = find_byte(a, &bytes[from..]) {
        let i = from + i;
        if bytes.get(i + 1) == Some(&b) {
            return Some(i);
        }
        from = i + 1;
    }
    None
}

/// Opening and closing braces on a line, in one pass.
pub(in crate::ptx) fn count_braces(t: &str) -> (i32, i32) {
    t.bytes().fold((0, 0), |(o, c), b| (o + i32::from(b == b'{'), c + i32::from(b == b'}')))
}

/// Does the line open or close a block comment (`/*`, `*/`)? One scan for `*`, which is rare.
pub(in crate::ptx) fn has_block_comment_marker(line: &str) -> bool {
    memchr::memchr(b'*', line.as_bytes()).is_some() && (find_pair(line, b'/', b'*').is_some() || find_pair(line, b'*', b'/').is_some())
}

/// `(file, line, column)` of a `.loc` directive.
pub(in crate::ptx) type Loc = (u32, u32, u32);

/// Whether `s` contains one of `words`, each of which starts with `.` (a directive or qualifier
/// such as `.shared`): tested at each `.`, found byte by byte (lines are short: a substring
/// searcher per word, or even `memchr`'s setup, cost more).
pub(in crate::ptx) fn contains_dotted(s: &str, words: &[&str]) -> bool {
    debug_assert!(words.iter().all(|w| w.starts_with('.')));
    let b = s.as_bytes();
    // (Each `.` found with [`find_byte`], a word of the line at a time: most `.`-led lines are
    // `.loc` and `.reg` lines, a few dots in a few dozen bytes.)
    let mut from = 0;
    while let Some(p) = find_byte(b'.', &b[from..]) {
        let i = from + p;
        if words.iter().any(|w| b[i..].starts_with(w.as_bytes())) {
            return true;
        }
        from = i + 1;
    }
    false
}

/// Capacity a per-block map keeps once emptied. Emptying a map costs its capacity, not its
/// length: after one long block grew it, every later (short) block would pay for the long one.
pub(in crate::ptx) const KEEP_CAPACITY: usize = 1024;

/// Releases the excess capacity of an emptied per-block map (see [`KEEP_CAPACITY`]).
pub(in crate::ptx) fn release_excess<K: Eq + std::hash::Hash, V, S: std::hash::BuildHasher>(m: &mut std::collections::HashMap<K, V, S>) {
    if m.capacity() > KEEP_CAPACITY {
        m.shrink_to(KEEP_CAPACITY);
    }
}

/// Maps and sets keyed by line number, looked up for every line of a module: a multiplicative hash
/// instead of SipHash (the keys are not attacker-chosen in any way that matters here).
pub(in crate::ptx) type LineMap<V> = std::collections::HashMap<usize, V, std::hash::BuildHasherDefault<LineHasher>>;
pub(in crate::ptx) type LineSet = std::collections::HashSet<usize, std::hash::BuildHasherDefault<LineHasher>>;

#[derive(Default)]
pub(in crate::ptx) struct LineHasher(u64);

impl std::hash::Hasher for LineHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Names a line is searched for at once ([`Line::names_of`]): at most 32.
pub(in crate::ptx) struct NameSet<'n> {
    names: &'n [&'n str],
    /// The names' distinct first bytes (one to three), unless `each`.
    firsts: Vec<u8>,
    /// Searched one by one: an empty name, or more than three first bytes.
    each: bool,
    shortest: usize,
}

impl<'n> NameSet<'n> {
    pub fn new(names: &'n [&'n str]) -> Self {
        assert!(names.len() <= 32, "at most 32 names");
        let mut firsts: Vec<u8> = names.iter().filter_map(|n| n.as_bytes().first().copied()).collect();
        firsts.sort_unstable();
        firsts.dedup();
        let each = names.iter().any(|n| n.is_empty()) || !(1..=3).contains(&firsts.len());
        NameSet { names, firsts, each, shortest: names.iter().map(|n| n.len()).min().unwrap_or(0) }
    }
}

#[cfg(test)]
mod statement_pieces_tests {
    use super::{access, StatementPieces};
    use proptest::prelude::*;

    fn pieces(code: &str) -> Vec<(&str, bool)> {
        StatementPieces::of(code, code.contains(['{', '}'])).collect()
    }

    #[test]
    fn scope_braces_on_a_line_are_statements_of_their_own() {
        assert_eq!(
            pieces("{ .reg .pred p; setp.ne.b32 p, %r1, 0; @p ld.global.u32 %r2, [%rd1]; }"),
            [("{", false), (".reg .pred p", true), ("setp.ne.b32 p, %r1, 0", true), ("@p ld.global.u32 %r2, [%rd1]", true), ("}", false)]
        );
        // Vector operands stay whole; a brace that balances inside a piece is not split off.
        assert_eq!(pieces("st.global.v2.u32 [%rd1], {%r1, %r2};"), [("st.global.v2.u32 [%rd1], {%r1, %r2}", true)]);
        assert_eq!(pieces("ld.global.v2.u32 {%r1, %r2}, [%rd1]; }"), [("ld.global.v2.u32 {%r1, %r2}, [%rd1]", true), ("}", false)]);
        assert_eq!(pieces("} ld.global.f32 %f1, [%rd1];"), [("}", false), ("ld.global.f32 %f1, [%rd1]", true)]);
        assert_eq!(pieces("{{"), [("{", false), ("{", false)]);
        // Unchanged where there is no brace: cut at `;`, trimmed, empty pieces dropped.
        assert_eq!(pieces(";; add.s32 %r1, %r1, 1 ;x"), [("add.s32 %r1, %r1, 1", true), ("x", false)]);
        assert_eq!(pieces(".visible .entry m() { ret; }"), [(".visible .entry m() { ret", true), ("}", false)]);
    }

    proptest! {
        /// A set of names is found in a line as each name is.
        #[test]
        fn a_name_set_is_found_as_each_name(code in "[ _a-c%$\\[\\]+,.0-9é]{0,40}", names in proptest::collection::vec("[_a-c%$0-9é]{0,4}", 0..6)) {
            let line = super::Line::read(&code);
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let each = names.iter().enumerate().filter(|(_, n)| line.names(n)).fold(0, |m, (k, _)| m | 1 << k);
            prop_assert_eq!(line.names_of(&super::NameSet::new(&names)), each);
        }

        /// A text is read into the lines `split_inclusive` cuts it into, short lines or long.
        #[test]
        fn a_text_is_read_line_by_line(lens in proptest::collection::vec(0usize..150, 0..6), last in any::<bool>()) {
            let mut text: String = lens.iter().map(|&n| format!("{}\n", "a;".repeat(n / 2))).collect();
            if last {
                text.push_str("ret;");
            }
            let mut scanner = super::bodies::Scanner::default();
            let raws: Vec<&str> = super::Line::read_text_scanning(&text, &mut scanner).iter().map(|l| l.raw).collect();
            prop_assert_eq!(raws, text.split_inclusive('\n').collect::<Vec<_>>());
        }

        /// A line the rewriter wrote is read as [`super::Line::read`] reads it, the marker's
        /// fast path (no `/` or `"` before it) or not.
        #[test]
        fn a_generated_line_is_read_as_any_line(head in "[ \t{}\\[\\]/\"*;a-z%.,0-9é\u{a0}]{0,30}", marked in any::<bool>(), tail in prop_oneof![Just("//gasan\n"), Just(" //gasan\n"), Just("//gasan"), Just("\n"), Just("/gasan\n")]) {
            let raw = if marked { format!("{head}{tail}") } else { head.clone() };
            let (a, b) = (super::Line::read_generated(&raw), super::Line::read(&raw));
            prop_assert!(a.generated && !b.generated);
            prop_assert_eq!((a.raw, a.stripped(), a.code, a.braces, a.brackets, a.slash), (b.raw, b.stripped(), b.code, b.braces, b.brackets, b.slash));
        }

        /// A lone directive's statements hold no instruction.
        #[test]
        fn a_lone_directive_holds_no_instruction(code in "\\.[a-z {};.%@]{0,20}(;|)") {
            let line = super::Line::read(&code);
            if line.is_lone_directive() {
                prop_assert!(line.stmts().iter().all(|st| st.instr.is_none()), "{:?}", code);
            }
        }

        /// The dotted-word test found from each `.` is the test at every byte.
        #[test]
        fn contains_dotted_is_a_search_for_the_words(s in "[.a-z ;]{0,24}|\\.(loc|local|shared|sha|lo)[ .a-z]{0,8}", words in proptest::collection::vec("\\.[a-z]{0,6}", 1..3)) {
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            let searched = s.as_bytes().iter().enumerate().any(|(i, &c)| c == b'.' && words.iter().any(|w| s.as_bytes()[i..].starts_with(w.as_bytes())));
            prop_assert_eq!(super::contains_dotted(&s, &words), searched);
        }

        /// Comma pieces are `str::split(',')`'s.
        #[test]
        fn comma_pieces_are_a_split(s in "[a,é ]{0,12}") {
            prop_assert_eq!(super::comma_pieces(&s).collect::<Vec<_>>(), s.split(',').collect::<Vec<_>>());
        }

        /// Lines split with the byte search are `split_inclusive`'s.
        #[test]
        fn split_lines_is_split_inclusive(text in "[a\n\u{85}é]{0,12}|[a;\n]{60,90}") {
            prop_assert_eq!(super::split_lines(&text).collect::<Vec<_>>(), text.split_inclusive('\n').collect::<Vec<_>>());
        }

        /// The line-length byte search finds what `memchr` finds.
        #[test]
        fn find_byte_is_memchr(hay in proptest::collection::vec(prop_oneof![Just(b';'), Just(0u8), Just(0x80u8), Just(0xffu8), Just(b'a'), Just(b':'), any::<u8>()], 0..80), needle in prop_oneof![Just(b';'), Just(0u8), Just(0xffu8), any::<u8>()]) {
            prop_assert_eq!(super::find_byte(needle, &hay), memchr::memchr(needle, &hay));
        }

        #[test]
        fn ascii_trims_are_trims(t in "[ a-z\t\n\r\u{b}\u{c}\u{85}\u{a0}\u{3000}é.;]{0,12}") {
                prop_assert_eq!(access::trim(&t), t.trim());
                prop_assert_eq!(access::trim_start(&t), t.trim_start());
                prop_assert_eq!(access::trim_end(&t), t.trim_end());
            }

            #[test]
    fn pieces_are_the_line_cut_up(code in "[ {};a-z%\\[\\],.@0-9]{0,40}") {
                let ps = pieces(&code);
                let squeeze = |s: &str| s.chars().filter(|c| !c.is_whitespace() && *c != ';').collect::<String>();
                prop_assert_eq!(squeeze(&ps.iter().map(|p| p.0).collect::<String>()), squeeze(&code));
                prop_assert!(ps.iter().all(|p| !p.0.is_empty() && p.0.trim() == p.0));
                prop_assert!(ps.iter().filter(|p| p.1).count() <= code.matches(';').count());
            }
        }
}

#[cfg(test)]
mod tests {
    use super::Line;
    use proptest::prelude::*;

    proptest! {
        /// A line's statements, parsed on its one-statement path or not, are those of its
        /// pieces ([`super::parse_pieces`]).
        #[test]
        fn a_lines_statements_are_its_pieces_parsed(raw in r"[ \t]{0,2}(@!?%p[0-9] )?[a-z.0-9]{0,10}[ \t]{0,2}[%a-z0-9, \[\]{}();:+\u{a0}é]{0,24}(;[ \t]*)?(// [a-z;{]{0,6})?\n?") {
            let line = Line::read(&raw);
            let pieces = super::parse_pieces(line.code, line.braces);
            let got: Vec<_> = line.stmts().iter().map(|s| (s.text, s.terminated, s.instr.clone())).collect();
            let want: Vec<_> = pieces.as_slice().iter().map(|s| (s.text, s.terminated, s.instr.clone())).collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(matches!(line.parsed.get(), Some(super::Stmts::One(_))), matches!(pieces, super::Stmts::One(_)));
            // The one piece, where the line has one by its shape, is the pieces' only one.
            if let Some(one) = line.sole_piece() {
                prop_assert_eq!(super::StatementPieces::of(line.code, line.braces).collect::<Vec<_>>(), vec![one]);
            }
        }
    }

    #[test]
    fn a_lone_statement_is_one_statement_ended_by_the_lines_only_semicolon() {
        let lone = |raw: &str| Line::read(raw).lone_statement().map(|st| st.text.to_string());
        assert_eq!(lone("\tadd.s64 %rd3, %rd1, %rd2;\n").as_deref(), Some("add.s64 %rd3, %rd1, %rd2"));
        assert_eq!(lone("\t@%p1 bra $L__BB0_2; // back\n").as_deref(), Some("@%p1 bra $L__BB0_2"));
        // Two statements, an empty one, a statement left open, a line with none; a statement
        // left open by a scope brace (`};`) and one after a brace (a fuzz find: coalesce took the
        // first into a batch that the walk never counted).
        for raw in [
            "\tmov.u32 %r1, 0; mov.u32 %r2, 1;\n",
            "\t;add.s32 %r1, %r1, 1;\n",
            "\tcall.uni (retval0),\n",
            "$L__BB0_1:\n",
            "\t{ mov.u32 %r1, 0; }\n",
            "\n",
            "\tst.f32\t[%rd1]};\n",
            "\t{ st.f32 [%rd1], %f1;\n",
        ] {
            assert_eq!(lone(raw), None, "{raw:?}");
            assert!(!Line::read(raw).is_lone_statement(), "{raw:?}");
        }
    }

    #[test]
    fn a_directive_is_read_as_a_whole_word() {
        let directive = |raw: &str| Line::read(raw).directive().map(str::to_string);
        assert_eq!(directive("\t.loc 1 5 3\n").as_deref(), Some(".loc"));
        // `.local` begins with `.loc`: the word decides, not the prefix.
        assert_eq!(directive("\t.local .align 4 .b8 __local_depot0[16];\n").as_deref(), Some(".local"));
        assert_eq!(directive(".visible .entry k(\n").as_deref(), Some(".visible"));
        assert_eq!(directive("\t.reg .b32 %r<5>; ld.global.u32 %r1, [%rd1];\n").as_deref(), Some(".reg"));
        assert_eq!(directive("\t.pragma \"nounroll\";\n").as_deref(), Some(".pragma"));
        // Comments are not code: a commented-out directive is no directive.
        for raw in ["\tld.global.u32 %r1, [%rd1]; // .loc\n", "$L__BB0_1:\n", "\n", "\t// .loc 1 2 3\n", "\t{\n"] {
            assert_eq!(directive(raw), None, "{raw:?}");
        }
    }

    #[test]
    fn the_typed_questions_read_only_the_lines_code() {
        let line = Line::read;
        // `.loc`'s operands, never those of `.local`; a commented `.loc` is none.
        assert_eq!(line("\t.loc\t1 5 3\n").loc_operands(), Some("\t1 5 3"));
        assert_eq!(line("\t.local .align 4 .b8 d[16];\n").loc_operands(), None);
        assert_eq!(line("\t// .loc 1 5 3\n").loc_operands(), None);
        // `.file` entries, with or without mtime and size; unreadable ones are none.
        assert_eq!(line("\t.file\t1 \"/src/a.cu\"\n").file_entry(), Some((1, "/src/a.cu")));
        assert_eq!(line(".file 2 \"b.py\", 1700000000, 512\n").file_entry(), Some((2, "b.py")));
        for raw in [".file x \"a\"\n", ".file 1 a\n", ".file 1 \"a\n", "// .file 1 \"a\"\n"] {
            assert_eq!(line(raw).file_entry(), None, "{raw:?}");
        }
        // Whole words: `%rd1` is not in `%rd12` nor in a comment.
        assert!(line("\tld.param.u64 %rd1, [p_0];\n").names("p_0"));
        assert!(!line("\tld.param.u64 %rd1, [p_01];\n").names("p_0"));
        assert!(!line("\tmov.u64 %rd12, 0; // %rd1\n").names("%rd1"));
        // Braces: counted in the code only; a vector pairs up, a stray one does not.
        assert_eq!(line("\t{ // }\n").brace_counts(), (1, 0));
        assert!(line("\tld.global.v2.u32 {%r1, %r2}, [%rd1];\n").braces_pair_up());
        assert!(!line("\tm}l.wide.u32 %rd1, %r1, 4;\n").braces_pair_up());
        // Blank lines, statements spread over lines, block comments in the code.
        assert!(line("\t// only a comment\n").is_blank() && !line("\tret;\n").is_blank());
        assert!(line("\tret;\n").ends_statement() && !line("\tcall.uni (retval0),\n").ends_statement());
        assert!(line("\tret; /* x\n").code_opens_block_comment() && !line("\tret; // /* x\n").code_opens_block_comment());
        // Declarations: the filter passes a `.shared` statement wherever it starts on the line.
        assert!(line("\t.shared .align 4 .b8 s[64];\n").may_declare(&[".shared"]));
        assert!(line("\tret; .shared .b8 s[4];\n").may_declare(&[".shared"]));
        assert!(!line("\tld.shared.u32 %r1, [s];\n").may_declare(&[".shared"]));
    }
}

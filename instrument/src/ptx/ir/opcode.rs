//! PTX opcodes, split once when a statement is parsed: the instruction ([`Op`]) and its
//! dot-separated qualifiers (`ld.global.nc.v2.u64`: `ld`, then `global`, `nc`, `v2`, `u64`).
//! Passes decide on the [`Op`], and on qualifiers through [`Opcode`]'s methods, instead of
//! matching opcode text.

use std::fmt;

macro_rules! ops {
    ($($variant:ident = $name:literal,)*) => {
        /// The instructions gasan's passes tell apart, by their PTX names; any other is
        /// [`Op::Other`] (its name stays in the opcode's first part).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Op {
            $($variant,)*
            Other,
        }

        impl Op {
            /// The instruction named `name` (an opcode's text before its first `.`).
            pub fn from_name(name: &str) -> Op {
                match name {
                    $($name => Op::$variant,)*
                    _ => Op::Other,
                }
            }
        }

        #[cfg(test)]
        const NAMED: &[(Op, &str)] = &[$((Op::$variant, $name),)*];
    };
}

ops! {
    Abs = "abs",
    Add = "add",
    Alloca = "alloca",
    And = "and",
    ApplyPriority = "applypriority",
    Atom = "atom",
    Bar = "bar",
    Barrier = "barrier",
    Bfe = "bfe",
    Bfi = "bfi",
    Bra = "bra",
    Brev = "brev",
    Brkpt = "brkpt",
    Brx = "brx",
    Call = "call",
    ClusterLaunchControl = "clusterlaunchcontrol",
    Clz = "clz",
    Cnot = "cnot",
    Cp = "cp",
    CreatePolicy = "createpolicy",
    Cvt = "cvt",
    Cvta = "cvta",
    Discard = "discard",
    Div = "div",
    Elect = "elect",
    Exit = "exit",
    Fence = "fence",
    GetCtaRank = "getctarank",
    IsSpaceP = "isspacep",
    IsTypeP = "istypep",
    Ld = "ld",
    LdMatrix = "ldmatrix",
    Ldu = "ldu",
    Mad = "mad",
    Mad24 = "mad24",
    Mapa = "mapa",
    Max = "max",
    Mbarrier = "mbarrier",
    Membar = "membar",
    Min = "min",
    Mov = "mov",
    MovMatrix = "movmatrix",
    Mul = "mul",
    Mul24 = "mul24",
    Multimem = "multimem",
    Neg = "neg",
    Not = "not",
    Or = "or",
    Popc = "popc",
    Prefetch = "prefetch",
    Prefetchu = "prefetchu",
    Prmt = "prmt",
    Red = "red",
    Rem = "rem",
    Ret = "ret",
    Selp = "selp",
    SetMaxNReg = "setmaxnreg",
    Setp = "setp",
    Shl = "shl",
    Shr = "shr",
    St = "st",
    StackRestore = "stackrestore",
    StMatrix = "stmatrix",
    Sub = "sub",
    Suld = "suld",
    Suq = "suq",
    Sured = "sured",
    Sust = "sust",
    Tcgen05 = "tcgen05",
    TensorMap = "tensormap",
    Tex = "tex",
    Tld4 = "tld4",
    Trap = "trap",
    Txq = "txq",
    Wgmma = "wgmma",
    Wmma = "wmma",
    Xor = "xor",
}

impl Op {
    /// Transfers control or may not come back: the end of any straight-line run of statements.
    pub fn transfers_control(self) -> bool {
        matches!(self, Op::Bra | Op::Brx | Op::Call | Op::Ret | Op::Exit | Op::Trap | Op::Brkpt)
    }

    /// Of [`Op::transfers_control`], those after which (unguarded) the next statement is never
    /// reached by falling through.
    pub fn jumps_away(self) -> bool {
        matches!(self, Op::Bra | Op::Brx | Op::Ret | Op::Exit | Op::Trap)
    }

    /// The instructions that name a memory operand gasan may check: loads, stores, atomics,
    /// reductions, copies, prefetches and multimem accesses.
    pub fn may_access_memory(self) -> bool {
        matches!(self, Op::Ld | Op::Ldu | Op::St | Op::Atom | Op::Red | Op::Cp | Op::Prefetch | Op::Prefetchu | Op::Multimem)
    }

    /// Loads, stores, atomics and reductions: one address operand of one state space.
    pub fn is_load_store(self) -> bool {
        matches!(self, Op::Ld | Op::Ldu | Op::St | Op::Atom | Op::Red)
    }
}

/// An instruction's opcode as written (`ld.global.nc.v2.u64`) and the instruction it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opcode<'a> {
    pub text: &'a str,
    pub op: Op,
}

impl<'a> Opcode<'a> {
    #[inline]
    pub fn parse(text: &'a str) -> Self {
        // (A byte search: opcodes are a few bytes, shorter than a `char` searcher's setup.)
        let name = match text.bytes().position(|b| b == b'.') {
            Some(p) => &text[..p],
            None => text,
        };
        Opcode { text, op: Op::from_name(name) }
    }

    /// Every dot-separated part, the instruction's name first (`ld`, `global`, `nc`, `v2`, `u64`).
    pub fn parts(&self) -> Parts<'a> {
        Parts::new(self.text)
    }

    /// The qualifiers: the parts after the name.
    pub fn quals(&self) -> impl Iterator<Item = &'a str> + Clone {
        self.parts().skip(1)
    }

    /// Whether a qualifier is `q`, or `q` with a `::` sub-qualifier (`shared::cta` has `shared`).
    pub fn has(&self, q: &str) -> bool {
        // The qualifiers found byte by byte ([`Opcode::quals`] with less setup per part).
        let b = self.text.as_bytes();
        let Some(dot) = b.iter().position(|&c| c == b'.') else { return false };
        let mut start = dot + 1;
        loop {
            let end = b[start..].iter().position(|&c| c == b'.').map_or(b.len(), |p| start + p);
            if self.text[start..end].strip_prefix(q).is_some_and(|r| r.is_empty() || r.starts_with("::")) {
                return true;
            }
            if end == b.len() {
                return false;
            }
            start = end + 1;
        }
    }

    /// The first qualifier, if any (`async` of `cp.async.ca.shared.global`).
    pub fn first_qual(&self) -> Option<&'a str> {
        self.quals().next()
    }

    /// The qualifier, when there is exactly one (`s64` of `add.s64`; none of `add.cc.s64`).
    pub fn only_qual(&self) -> Option<&'a str> {
        let mut q = self.quals();
        q.next().filter(|_| q.next().is_none())
    }
}

/// `text.split([A, B])` for two ASCII separators (one given twice: one separator), cut byte by
/// byte (a `char` searcher's setup costs more than the few bytes of an opcode's part or an
/// operand; passes ask the qualifiers and the destinations of most instructions).
#[derive(Clone, Debug)]
pub struct SplitBytes<'a, const A: u8, const B: u8> {
    /// The text not yet cut (`None`: done).
    rest: Option<&'a str>,
}

impl<'a, const A: u8, const B: u8> SplitBytes<'a, A, B> {
    pub fn new(text: &'a str) -> Self {
        Self { rest: Some(text) }
    }

    /// No pieces at all.
    pub fn none() -> Self {
        Self { rest: None }
    }
}

impl<'a, const A: u8, const B: u8> Iterator for SplitBytes<'a, A, B> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        let rest = self.rest?;
        match rest.bytes().position(|b| b == A || b == B) {
            Some(p) => {
                self.rest = Some(&rest[p + 1..]);
                Some(&rest[..p])
            }
            None => {
                self.rest = None;
                Some(rest)
            }
        }
    }
}

/// [`Opcode::parts`]: the text cut at its dots.
pub type Parts<'a> = SplitBytes<'a, b'.', b'.'>;

impl fmt::Display for Opcode<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_named_instruction_reads_back_and_others_are_other() {
        for &(op, name) in NAMED {
            assert_eq!(Op::from_name(name), op, "{name}");
            assert_eq!(Opcode::parse(&format!("{name}.u32")).op, op);
        }
        assert_eq!(NAMED.iter().map(|(_, n)| n).collect::<std::collections::HashSet<_>>().len(), NAMED.len(), "names are distinct");
        for other in ["ldx", "l", "", "LD", "vote", "shfl"] {
            assert_eq!(Op::from_name(other), Op::Other, "{other}");
        }
    }

    #[test]
    fn qualifiers() {
        let o = Opcode::parse("ld.shared::cta.v2.u64");
        assert_eq!((o.op, o.parts().next(), o.first_qual()), (Op::Ld, Some("ld"), Some("shared::cta")));
        assert!(o.has("shared") && o.has("shared::cta") && o.has("v2") && !o.has("share") && !o.has("ld"));
        assert_eq!(o.quals().collect::<Vec<_>>(), ["shared::cta", "v2", "u64"]);
        let r = Opcode::parse("ret");
        assert_eq!((r.op, r.parts().next(), r.first_qual(), r.quals().count()), (Op::Ret, Some("ret"), None, 0));
        assert!(r.op.jumps_away() && r.op.transfers_control());
        let only = |t: &'static str| Opcode::parse(t).only_qual();
        assert_eq!((only("add.s64"), only("add.cc.s64"), only("ret"), o.only_qual()), (Some("s64"), None, None, None));
        assert!(Op::Call.transfers_control() && !Op::Call.jumps_away());
    }

    proptest! {
        /// The parts are the text cut at its dots; the name is the first, the qualifiers the rest.
        #[test]
        fn parts_are_the_text_cut_at_dots(parts in prop::collection::vec("[a-z0-9:]{0,6}", 1..6)) {
            let text = parts.join(".");
            let o = Opcode::parse(&text);
            prop_assert_eq!(o.parts().collect::<Vec<_>>(), parts.iter().map(String::as_str).collect::<Vec<_>>());
            prop_assert_eq!(o.quals().collect::<Vec<_>>(), parts[1..].iter().map(String::as_str).collect::<Vec<_>>());
            prop_assert_eq!(o.op, Op::from_name(&parts[0]));
            prop_assert_eq!(o.to_string(), text.clone());
            for q in ["", "a", "ab", "shared", "u32"] {
                prop_assert_eq!(o.has(q), o.quals().any(|x| x.strip_prefix(q).is_some_and(|r| r.is_empty() || r.starts_with("::"))));
            }
        }
    }
}

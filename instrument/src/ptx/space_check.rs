//! What a shared/local check bounds (spaces.rs plans them; thread_ranges.rs proves some needless
//! and emit.rs writes them): its own file, so that the two planners that read it do not name
//! each other both ways.

use crate::abi::{AccessKind, MemorySpace};

/// A shared/local check of one access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SpaceCheck {
    pub space: MemorySpace,
    /// The variable (or frame) bounded.
    pub var: String,
    /// `None`: dynamic shared memory (bounded by `%dynamic_smem_size`).
    pub size: Option<u64>,
    pub base: Base,
    pub offset: i64,
    pub width: u32,
    pub kind: AccessKind,
    /// Only lanes below this one access memory (32: every lane).
    pub lanes: u32,
    /// A 32-bit register holding the width instead (`width` is then 0).
    pub width_reg: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Base {
    /// A register holding a window address of the variable, of this many bits.
    Window(String, u32),
    /// A register holding a generic address of the variable.
    Generic(String),
    /// The variable itself (`[var+off]`).
    Symbol,
    /// An untraced local-window (`false`) or generic (`true`) address in a kernel, tested against
    /// the kernel's own frame (use after return).
    OutsideFrame(String, bool),
    /// An untraced local-window (`false`) or generic (`true`) address in a kernel without a frame
    /// of its own: every local address is a returned callee's (dead) frame.
    NoFrame(String, bool),
    /// An untraced local-window (`false`) or generic (`true`) address in a called function,
    /// tested against the top of its callers' live frames (frames.rs); with the function's own
    /// frame as the check's variable, the frame is allowed too.
    PastTop(String, bool),
}

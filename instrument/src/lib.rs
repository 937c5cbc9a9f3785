//! gasan-instrument: reads CUDA fatbinaries and rewrites PTX so that every global memory access is
//! checked against gasan's shadow memory.
//!
//! Public API (kept small; the runtime uses only these):
//! * [`abi`]: control-block and error-ring layouts shared with the runtime;
//! * [`shadow`]: the GASan-128/256 encodings;
//! * [`container`]: fatbin / ELF / PTX image reader;
//! * [`device_heap`]: the checked in-kernel heap's layout, shared with the runtime;
//! * [`ptx`]: the PTX rewriter, site table and statistics.

// Parsing and rewriting text needs no unsafe code (only the layout tests transmute).
#![cfg_attr(not(test), forbid(unsafe_code))]

pub mod abi;
pub mod container;
pub mod device_heap;
pub mod ptx;
pub mod shadow;

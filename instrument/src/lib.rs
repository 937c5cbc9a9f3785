//! gasan-instrument: reads CUDA fatbinaries and rewrites PTX so that every global memory access is
//! checked against gasan's shadow memory.
//!
//! Public API (kept small; the runtime uses only these):
//! * [`abi`]: control-block and error-ring layouts shared with the runtime;
//! * [`shadow`]: the GASan-128/256 encodings.

pub mod abi;
pub mod shadow;

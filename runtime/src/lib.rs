//! gasan-runtime: the preloaded library (driver-API interposition, allocator, shadow poisoning,
//! module loading, error ring, reports) and the gasan-run launcher.

pub mod allocator;
pub mod options;
pub mod report;

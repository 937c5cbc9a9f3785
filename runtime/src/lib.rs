//! gasan-runtime (filled in by the runtime issue).

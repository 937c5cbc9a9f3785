//! Options (GASAN_OPTIONS and gasan-run flags), by ASan names.

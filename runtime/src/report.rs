//! ASan-style reports (text and JSON).

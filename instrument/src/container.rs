//! Fatbinary, ELF and PTX image reader.

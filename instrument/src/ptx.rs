//! PTX rewriter: shadow checks, slow path, site table, check elimination.

//! gasan-uvm: GPU virtual-address pool (filled in by the uvm-shim issue).

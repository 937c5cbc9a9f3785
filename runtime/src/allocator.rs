//! Device allocator: slabs with redzones, large allocations with guard gaps, quarantine.

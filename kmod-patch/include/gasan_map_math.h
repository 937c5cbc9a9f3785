/* SPDX-License-Identifier: MIT
 * Kernel-independent mapping arithmetic of gasan's nvidia-uvm patch, mirrored by uvm-shim's Rust
 * planner (uvm-shim/src/plan.rs) and checked against it by property tests.
 */
#ifndef GASAN_MAP_MATH_H
#define GASAN_MAP_MATH_H
#include "uvm_gasan_ioctl.h"

/* 0 if [va, va+len) is non-empty, gran-aligned at both ends and does not wrap; -1 otherwise. */
int gasan_check_aligned(gasan_u64 va, gasan_u64 len, gasan_u64 gran);
/* 1 if [va, va+len) lies inside [base, base+size). */
int gasan_contains(gasan_u64 base, gasan_u64 size, gasan_u64 va, gasan_u64 len);
/* Shadow bytes [*start, *start + *len) describing pool range [va, va+len) at scale shift. */
void gasan_shadow_range(gasan_u64 pool_base, gasan_u64 shadow_base, gasan_u32 shift,
                        gasan_u64 va, gasan_u64 len, gasan_u64 *start, gasan_u64 *out_len);
/* Alias of va when [src, ...) is mirrored at alias_base. */
gasan_u64 gasan_alias_addr(gasan_u64 src, gasan_u64 alias_base, gasan_u64 va);
/* Splits an aligned range into the largest pages of sizes {2 MiB, 64 KiB, 4 KiB} allowed by the
 * alignment of each position. Writes up to max (va, size) pairs; returns the number of pages, or
 * -1 if the range is not 4 KiB aligned. */
int gasan_split_pages(gasan_u64 va, gasan_u64 len, gasan_u64 *out_va, gasan_u64 *out_size, int max);

#endif

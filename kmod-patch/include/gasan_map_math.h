/* SPDX-License-Identifier: MIT
 * Kernel-independent arithmetic and parameter validation of gasan's nvidia-uvm patch. The ioctl
 * handlers call these; uvm-shim compiles this file in userspace and checks it against its Rust
 * model (uvm-shim/src/plan.rs, uvm-shim/src/kmod_check.rs) on random input and on every malformed
 * case of the self-test table (uvm-shim/tests/kmod_math.rs).
 */
#ifndef GASAN_MAP_MATH_H
#define GASAN_MAP_MATH_H
#include "uvm_gasan_ioctl.h"

/* 0 if [va, va+len) is non-empty, gran-aligned at both ends and does not wrap; -1 otherwise. */
int gasan_check_aligned(gasan_u64 va, gasan_u64 len, gasan_u64 gran);
/* 1 if [va, va+len) lies inside [base, base+size). */
int gasan_contains(gasan_u64 base, gasan_u64 size, gasan_u64 va, gasan_u64 len);
/* 1 if [a, a+alen) and [b, b+blen) share a byte (neither may wrap). */
int gasan_overlaps(gasan_u64 a, gasan_u64 alen, gasan_u64 b, gasan_u64 blen);
/* Shadow bytes [*start, *start + *len) describing pool range [va, va+len) at scale shift. */
void gasan_shadow_range(gasan_u64 pool_base, gasan_u64 shadow_base, gasan_u32 shift,
                        gasan_u64 va, gasan_u64 len, gasan_u64 *start, gasan_u64 *out_len);
/* Alias of va when [src, ...) is mirrored at alias_base. */
gasan_u64 gasan_alias_addr(gasan_u64 src, gasan_u64 alias_base, gasan_u64 va);
/* Splits an aligned range into the largest pages of sizes {2 MiB, 64 KiB, 4 KiB} allowed by the
 * alignment of each position. Writes up to max (va, size) pairs; returns the number of pages, or
 * -1 if the range is not 4 KiB aligned. */
int gasan_split_pages(gasan_u64 va, gasan_u64 len, gasan_u64 *out_va, gasan_u64 *out_size, int max);

/* ---- parameter validation ---------------------------------------------------------------------
 * Each gasan_validate_* returns UVM_GASAN_ST_OK or the UVM_GASAN_ST_* the ioctl answers; the
 * handler changes nothing before it returned OK. Checks run in this order: padding, enumerations
 * and flags, the range's own shape (zero base, empty, misaligned, wrapping: like upstream's
 * uvm_api_range_invalid_aligned), the VA space's state (pool), membership, GPU reach. */

/* What the validators know of the VA space; the handler fills it under the gasan lock. */
typedef struct {
    gasan_u64 pool_base;
    gasan_u64 pool_length;    /* 0: no pool reserved yet */
    gasan_u64 max_va;         /* exclusive bound all registered GPUs address; 0: no GPU registered */
} gasan_limits_t;

/* UVM_GASAN_ST_INVALID_ADDRESS unless [va, va+len) is a non-empty, non-wrapping, gran-aligned
 * range that does not start at 0. */
gasan_u32 gasan_check_range(gasan_u64 va, gasan_u64 len, gasan_u64 gran);
gasan_u32 gasan_validate_identify(const UVM_GASAN_IDENTIFY_PARAMS *p);
gasan_u32 gasan_validate_query(const UVM_GASAN_QUERY_PARAMS *p);
gasan_u32 gasan_validate_reserve_pool(const UVM_GASAN_RESERVE_POOL_PARAMS *p, const gasan_limits_t *lim);
gasan_u32 gasan_validate_map_alias(const UVM_GASAN_MAP_ALIAS_PARAMS *p, const gasan_limits_t *lim);
gasan_u32 gasan_validate_unmap_alias(const UVM_GASAN_UNMAP_ALIAS_PARAMS *p, const gasan_limits_t *lim);
gasan_u32 gasan_validate_set_protection(const UVM_GASAN_SET_PROTECTION_PARAMS *p, const gasan_limits_t *lim);
gasan_u32 gasan_validate_map_sparse_zero(const UVM_GASAN_MAP_SPARSE_ZERO_PARAMS *p, const gasan_limits_t *lim);
gasan_u32 gasan_validate_subscribe_faults(const UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS *p, const gasan_limits_t *lim);

/* nvidia-uvm's UvmGpuMappingType values (uvm_types.h; uvm_gasan.c asserts they match). */
#define GASAN_MAPPING_DEFAULT           0u
#define GASAN_MAPPING_READ_WRITE_ATOMIC 1u
#define GASAN_MAPPING_READ_WRITE        2u
#define GASAN_MAPPING_READ_ONLY         3u

/* The mapping type a piece gets for prot (RO or RW), given the type it was first mapped with by
 * UvmMapExternalAllocation: RO is read-only; RW is the original type, and is refused
 * (UVM_GASAN_ST_INVALID_ACCESS_TYPE) for a mapping made read-only. */
gasan_u32 gasan_prot_mapping_type(gasan_u32 prot, gasan_u32 orig_type, gasan_u32 *out_type);

#endif

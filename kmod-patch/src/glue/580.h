/* SPDX-License-Identifier: MIT
 *
 * gasan's glue to nvidia-uvm, 580 branch (tested: 580.142). Copied into the tree as
 * nvidia-uvm/uvm_gasan_glue.h by this branch's series (kmod-patch/patches-580). Everything
 * uvm_gasan.c needs that differs between driver branches is here; the hooks into upstream files and
 * the fields the series adds are in the branch's patches.
 *
 * 580+: uvm_va_range_t is split into typed ranges; an external range is a uvm_va_range_external_t
 * (base class va_range) and the external-range helpers take it; page sizes are NvU64.
 */
#ifndef UVM_GASAN_GLUE_H
#define UVM_GASAN_GLUE_H

#include "uvm_gpu.h"
#include "uvm_map_external.h"
#include "uvm_va_range.h"
#include "uvm_va_space.h"

#define GASAN_NV_BRANCH 580

typedef uvm_va_range_external_t gasan_ext_range_t;
typedef NvU64 gasan_page_size_t;

#define GASAN_EXT_VA_RANGE(r) (&(r)->va_range)
#define GASAN_EXT_VA_SPACE(r) ((r)->va_range.va_space)
#define GASAN_EXT_START(r) ((r)->va_range.node.start)
#define GASAN_EXT_END(r) ((r)->va_range.node.end)
#define GASAN_EXT_MAPPED_GPUS(r) (&(r)->mapped_gpus)
#define GASAN_EXT_SERIAL(r) ((r)->gasan_serial)

/* The external range holding addr, or NULL. The caller holds the VA space lock. */
static inline gasan_ext_range_t *gasan_ext_range_find(uvm_va_space_t *va_space, NvU64 addr)
{
    return uvm_va_range_external_find(va_space, addr);
}

/* Counts the ranges in [start, end] and those of them that are not external. The caller holds the
 * VA space lock. */
static inline void gasan_ranges_in(uvm_va_space_t *va_space, NvU64 start, NvU64 end, NvU32 *all, NvU32 *not_external)
{
    uvm_va_range_t *r;

    *all = *not_external = 0;
    for (r = uvm_va_space_iter_first(va_space, start, end); r; r = uvm_va_space_iter_next(r, end)) {
        (*all)++;
        if (r->type != UVM_VA_RANGE_TYPE_EXTERNAL)
            (*not_external)++;
    }
}

/* UvmCreateExternalRange's core. The caller holds the mm (if any) and the VA space lock for write. */
static inline NV_STATUS gasan_ext_range_create(uvm_va_space_t *va_space, struct mm_struct *mm, NvU64 base, NvU64 length)
{
    return uvm_va_range_create_external(va_space, mm, base, length, NULL);
}

/* UvmFree of exactly [base, base + length) (exported by this branch's patch 2). No VA space lock held. */
static inline NV_STATUS gasan_ext_range_free(uvm_va_space_t *va_space, NvU64 base, NvU64 length)
{
    return uvm_free(va_space, base, length);
}

/* Exclusive upper bound of the lower half of the GPU's VA space (as uvm_gpu_can_address() splits
 * it on canonical-form platforms). */
static inline NvU64 gasan_gpu_max_va(uvm_gpu_t *gpu)
{
    NvU64 first, outer;

    uvm_get_unaddressable_range(gpu->address_space_tree.hal->num_va_bits(), &first, &outer);
    return first;
}

/* Can the GPU map sparse (zero-reading) PTEs? (Pascal and later.) */
static inline bool gasan_gpu_sparse_supported(uvm_gpu_t *gpu)
{
    return gpu->parent->sparse_mappings_supported;
}

#endif /* UVM_GASAN_GLUE_H */

/* SPDX-License-Identifier: MIT
 *
 * gasan's glue to nvidia-uvm, 550 branch (tested: 550.163.01). Copied into the tree as
 * nvidia-uvm/uvm_gasan_glue.h by this branch's series (kmod-patch/patches). Everything uvm_gasan.c
 * needs that differs between driver branches is here; the hooks into upstream files
 * (uvm_ioctl(), uvm_va_space_unregister_gpu(), uvm_va_space_destroy(), the fatal fault record) and
 * the fields the series adds are in the branch's patches.
 *
 * 550: external ranges are uvm_va_range_t of type UVM_VA_RANGE_TYPE_EXTERNAL with their state in
 * va_range->external; page sizes are NvU32.
 */
#ifndef UVM_GASAN_GLUE_H
#define UVM_GASAN_GLUE_H

#include "uvm_gpu.h"
#include "uvm_map_external.h"
#include "uvm_va_range.h"
#include "uvm_va_space.h"

#define GASAN_NV_BRANCH 550

typedef uvm_va_range_t gasan_ext_range_t;
typedef NvU32 gasan_page_size_t;

#define GASAN_EXT_VA_RANGE(r) (r)
#define GASAN_EXT_VA_SPACE(r) ((r)->va_space)
#define GASAN_EXT_START(r) ((r)->node.start)
#define GASAN_EXT_END(r) ((r)->node.end)
#define GASAN_EXT_MAPPED_GPUS(r) (&(r)->external.mapped_gpus)
#define GASAN_EXT_SERIAL(r) ((r)->external.gasan_serial)

/* The external range holding addr, or NULL. The caller holds the VA space lock. */
static inline gasan_ext_range_t *gasan_ext_range_find(uvm_va_space_t *va_space, NvU64 addr)
{
    uvm_va_range_t *r = uvm_va_range_find(va_space, addr);

    return r && r->type == UVM_VA_RANGE_TYPE_EXTERNAL ? r : NULL;
}

/* Counts the ranges in [start, end] and those of them that are not external. The caller holds the
 * VA space lock. */
static inline void gasan_ranges_in(uvm_va_space_t *va_space, NvU64 start, NvU64 end, NvU32 *all, NvU32 *not_external)
{
    uvm_va_range_t *r;

    *all = *not_external = 0;
    uvm_for_each_va_range_in(r, va_space, start, end) {
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

/* Exclusive upper bound of the lower half of the GPU's VA space (canonical-form platforms split it). */
static inline NvU64 gasan_gpu_max_va(uvm_gpu_t *gpu)
{
    NvU32 bits = gpu->address_space_tree.hal->num_va_bits();

    if (uvm_platform_uses_canonical_form_address())
        bits -= 1;
    return 1ull << bits;
}

/* Can the GPU map sparse (zero-reading) PTEs? (Pascal and later.) */
static inline bool gasan_gpu_sparse_supported(uvm_gpu_t *gpu)
{
    return gpu->parent->sparse_mappings_supported;
}

#endif /* UVM_GASAN_GLUE_H */

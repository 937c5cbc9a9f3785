/* SPDX-License-Identifier: MIT
 *
 * gasan extensions to nvidia-uvm (ioctls 81-87 of include/uvm_gasan_ioctl.h).
 *
 * gasan keeps all device allocations of a process in one pool of GPU VA. These ioctls give it what
 * the CUDA VMM API cannot: protections at 64 KiB / 4 KiB granularity inside the pool (guard pages
 * for small allocations), alias mappings of pool pages at addresses only the GPU can reach (above
 * the CPU's 47-bit line), sparse zero-reading shadow, and the pool's fatal faults delivered to the
 * process through a pollable file descriptor.
 *
 * Everything is built from nvidia-uvm's external-range machinery: an external mapping remembers its
 * duplicated RM handle, offset and attributes (previous patch), so any piece of it can be unmapped
 * and mapped again with other page sizes, protections or addresses without going back to RM for a
 * new handle. Pieces unmapped by UVM_GASAN_PROT_NONE are "parked" with their handle reference so a
 * later protection change can bring them back.
 *
 * Locking: the per-VA-space gasan mutex is taken first, then the mm lock (when creating ranges),
 * then the VA space lock, then one external range tree lock at a time. The fault hook runs under the
 * VA space lock and only takes the fault queue spinlock and the window spinlock.
 */

#include "uvm_api.h"
#include "uvm_gasan.h"
#include "uvm_gpu.h"
#include "uvm_map_external.h"
#include "uvm_mmu.h"
#include "uvm_va_range.h"
#include "uvm_va_space.h"
#include "uvm_va_space_mm.h"
#include "gasan_map_math.h"

#include <linux/anon_inodes.h>
#include <linux/fs.h>
#include <linux/kref.h>
#include <linux/mutex.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

/* Version glue (kept here, small): epoll bit names and __poll_t arrived in Linux 4.16. */
#ifndef EPOLLIN
typedef unsigned int __poll_t;
#define EPOLLIN POLLIN
#define EPOLLRDNORM POLLRDNORM
#define EPOLLHUP POLLHUP
#endif

#define GASAN_FAULT_QUEUE_LEN 256u
#define GASAN_MAX_WINDOWS 64u
#define GASAN_2M (2ull << 20)
#define GASAN_CPU_VA_LIMIT (1ull << 47)

/* Fatal faults waiting to be read through the subscription fd. Shared by the VA space and the file,
 * so either can go first. */
typedef struct
{
    struct kref ref;
    spinlock_t lock;
    wait_queue_head_t wait;
    UVM_GASAN_FAULT_EVENT events[GASAN_FAULT_QUEUE_LEN];
    NvU32 head;
    NvU32 count;
    NvU64 dropped;
    bool closed;
} gasan_fault_queue_t;

/* A VA window gasan owns: the pool, an alias range or a sparse shadow range. */
typedef struct
{
    NvU64 base;
    NvU64 length;
    enum { GASAN_WINDOW_POOL, GASAN_WINDOW_ALIAS, GASAN_WINDOW_SPARSE } kind;
} gasan_window_t;

/* A piece of an external mapping: its backing, where it starts in the allocation and how it was
 * mapped. Holds a reference on mem_handle (NULL for sparse pieces). */
typedef struct
{
    struct list_head node;
    uvm_gpu_t *gpu;
    NvU64 start;
    NvU64 length;
    uvm_ext_gpu_mem_handle *mem_handle;
    uvm_gpu_t *owning_gpu;
    bool is_sysmem;
    bool is_egm;
    NvU64 map_offset;
    UvmGpuMappingType mapping_type;
    UvmGpuCachingType caching_type;
    UvmGpuFormatType format_type;
    UvmGpuFormatElementBits element_bits;
    UvmGpuCompressionType compression_type;
} gasan_piece_t;

struct uvm_gasan_va_space_struct
{
    /* Serializes the gasan ioctls of this VA space. */
    struct mutex lock;

    /* Windows, read by the fault hook under window_lock. windows[0] is the pool once reserved. */
    spinlock_t window_lock;
    gasan_window_t windows[GASAN_MAX_WINDOWS];
    NvU32 window_count;
    bool pool_reserved;

    /* Pieces unmapped by UVM_GASAN_PROT_NONE, with their backing kept. */
    struct list_head parked;

    gasan_fault_queue_t *faults;
};

typedef struct uvm_gasan_va_space_struct uvm_gasan_va_space_t;

/* ---- VA space state ------------------------------------------------------------------------- */

static uvm_gasan_va_space_t *gasan_get(uvm_va_space_t *va_space, bool create)
{
    uvm_gasan_va_space_t *g, *fresh;

    uvm_va_space_down_read(va_space);
    g = va_space->gasan;
    uvm_va_space_up_read(va_space);
    if (g || !create)
        return g;

    fresh = uvm_kvmalloc_zero(sizeof(*fresh));
    if (!fresh)
        return NULL;
    mutex_init(&fresh->lock);
    spin_lock_init(&fresh->window_lock);
    INIT_LIST_HEAD(&fresh->parked);

    uvm_va_space_down_write(va_space);
    if (!va_space->gasan) {
        va_space->gasan = fresh;
        fresh = NULL;
    }
    g = va_space->gasan;
    uvm_va_space_up_write(va_space);
    uvm_kvfree(fresh);
    return g;
}

static bool gasan_window_lookup(uvm_gasan_va_space_t *g, NvU64 va, NvU64 len, int kind)
{
    unsigned long flags;
    bool found = false;
    NvU32 i;

    spin_lock_irqsave(&g->window_lock, flags);
    for (i = 0; i < g->window_count && !found; i++) {
        if ((kind < 0 || g->windows[i].kind == kind) &&
            gasan_contains(g->windows[i].base, g->windows[i].length, va, len))
            found = true;
    }
    spin_unlock_irqrestore(&g->window_lock, flags);
    return found;
}

static bool gasan_window_overlaps(uvm_gasan_va_space_t *g, NvU64 va, NvU64 len)
{
    unsigned long flags;
    bool hit = false;
    NvU32 i;

    spin_lock_irqsave(&g->window_lock, flags);
    for (i = 0; i < g->window_count && !hit; i++)
        hit = va < g->windows[i].base + g->windows[i].length && g->windows[i].base < va + len;
    spin_unlock_irqrestore(&g->window_lock, flags);
    return hit;
}

static NV_STATUS gasan_window_add(uvm_gasan_va_space_t *g, NvU64 base, NvU64 length, int kind)
{
    unsigned long flags;
    NV_STATUS status = NV_OK;

    spin_lock_irqsave(&g->window_lock, flags);
    if (g->window_count == GASAN_MAX_WINDOWS) {
        status = NV_ERR_INSUFFICIENT_RESOURCES;
    }
    else {
        g->windows[g->window_count].base = base;
        g->windows[g->window_count].length = length;
        g->windows[g->window_count].kind = kind;
        g->window_count++;
    }
    spin_unlock_irqrestore(&g->window_lock, flags);
    return status;
}

static bool gasan_in_pool(uvm_gasan_va_space_t *g, NvU64 va, NvU64 len)
{
    return g->pool_reserved && gasan_contains(g->windows[0].base, g->windows[0].length, va, len);
}

/* ---- GPU reach ------------------------------------------------------------------------------ */

/* Exclusive upper bound of the lower half of the GPU's VA space. Addresses between the CPU's limit
 * (2^47) and this bound are reachable by the GPU only; uvm_gpu_can_address() refuses them, gasan's
 * aliases live there on purpose. */
static NvU64 gasan_gpu_max_va(uvm_gpu_t *gpu)
{
    NvU32 bits = gpu->address_space_tree.hal->num_va_bits();

    if (uvm_platform_uses_canonical_form_address())
        bits -= 1;
    return 1ull << bits;
}

static bool gasan_gpu_reaches(uvm_gpu_t *gpu, NvU64 va, NvU64 len)
{
    return va + len > va && va + len <= gasan_gpu_max_va(gpu);
}

/* ---- pieces ----------------------------------------------------------------------------------- */

static void gasan_piece_free(gasan_piece_t *p)
{
    if (p->mem_handle)
        nv_kref_put(&p->mem_handle->ref_count, uvm_release_rm_handle);
    uvm_kvfree(p);
}

static void gasan_piece_list_free(struct list_head *list)
{
    gasan_piece_t *p, *next;

    list_for_each_entry_safe(p, next, list, node) {
        list_del(&p->node);
        gasan_piece_free(p);
    }
}

/* Describes [start, start + length) of ext_gpu_map as a piece (takes a handle reference). */
static gasan_piece_t *gasan_piece_from_map(uvm_ext_gpu_map_t *m, NvU64 start, NvU64 length)
{
    gasan_piece_t *p = uvm_kvmalloc_zero(sizeof(*p));

    if (!p)
        return NULL;
    p->gpu = m->gpu;
    p->start = start;
    p->length = length;
    p->mem_handle = m->mem_handle;
    if (p->mem_handle)
        nv_kref_get(&p->mem_handle->ref_count);
    p->owning_gpu = m->owning_gpu;
    p->is_sysmem = m->is_sysmem;
    p->is_egm = m->is_egm;
    p->map_offset = m->map_offset + (start - m->node.start);
    p->mapping_type = m->mapping_type;
    p->caching_type = m->caching_type;
    p->format_type = m->format_type;
    p->element_bits = m->element_bits;
    p->compression_type = m->compression_type;
    return p;
}

/* A copy of the sub-piece [start, start + length) of p (takes a handle reference). */
static gasan_piece_t *gasan_piece_slice(const gasan_piece_t *p, NvU64 start, NvU64 length)
{
    gasan_piece_t *q = uvm_kvmalloc(sizeof(*q));

    if (!q)
        return NULL;
    *q = *p;
    INIT_LIST_HEAD(&q->node);
    q->start = start;
    q->length = length;
    q->map_offset = p->map_offset + (start - p->start);
    if (q->mem_handle)
        nv_kref_get(&q->mem_handle->ref_count);
    return q;
}

/* Maps the piece's backing at [va, va + p->length) of va_range on p->gpu with mapping_type. The
 * page size is the largest the alignment of va, length, offset and the allocation allow, as for a
 * fresh UvmMapExternalAllocation. The caller holds the GPU's range tree lock of va_range. */
static NV_STATUS gasan_map_piece(uvm_va_range_t *va_range,
                                 const gasan_piece_t *p,
                                 NvU64 va,
                                 UvmGpuMappingType mapping_type,
                                 uvm_tracker_t *out_tracker)
{
    uvm_gpu_t *gpu = p->gpu;
    uvm_gpu_va_space_t *gpu_va_space = uvm_gpu_va_space_get(va_range->va_space, gpu);
    uvm_ext_gpu_range_tree_t *range_tree = uvm_ext_gpu_range_tree(va_range, gpu);
    uvm_ext_gpu_map_t *m;
    UvmGpuMemoryInfo mem_info;
    uvm_map_rm_params_t params;
    NvU64 alignments;
    NvU32 page_size;
    NV_STATUS status;

    if (!gpu_va_space)
        return NV_ERR_INVALID_DEVICE;
    if (!p->mem_handle)
        return NV_ERR_INVALID_ARGUMENT; /* sparse ranges are not re-protected or aliased */

    status = uvm_unmap_external_in_range(va_range, gpu, va, va + p->length - 1, NULL);
    if (status != NV_OK)
        return status;

    m = uvm_kvmalloc_zero(sizeof(*m));
    if (!m)
        return NV_ERR_NO_MEMORY;
    m->node.start = va;
    m->node.end = va + p->length - 1;
    RB_CLEAR_NODE(&m->node.rb_node);
    uvm_tracker_init(&m->tracker);
    m->mem_handle = p->mem_handle;
    nv_kref_get(&m->mem_handle->ref_count);
    m->gpu = gpu;
    m->owning_gpu = p->owning_gpu;
    m->is_sysmem = p->is_sysmem;
    m->is_egm = p->is_egm;
    m->map_offset = p->map_offset;
    m->mapping_type = mapping_type;
    m->caching_type = p->caching_type;
    m->format_type = p->format_type;
    m->element_bits = p->element_bits;
    m->compression_type = p->compression_type;

    /* The range was just unmapped, so adding cannot collide. */
    status = uvm_range_tree_add(&range_tree->tree, &m->node);
    UVM_ASSERT(status == NV_OK);
    uvm_processor_mask_set_atomic(&va_range->external.mapped_gpus, gpu->id);

    mem_info = m->mem_handle->mem_info;
    alignments = mem_info.pageSize | va | p->length | p->map_offset;
    page_size = uvm_mmu_biggest_page_size_up_to(&gpu_va_space->page_tables, alignments & ~(alignments - 1));
    if (!page_size) {
        status = NV_ERR_INVALID_ADDRESS;
        goto error;
    }
    if (!m->is_sysmem && m->gpu == m->owning_gpu && page_size > gpu->mem_info.max_vidmem_page_size)
        page_size = gpu->mem_info.max_vidmem_page_size;
    mem_info.pageSize = page_size;

    params.map_offset = p->map_offset;
    params.mapping_type = mapping_type;
    params.caching_type = p->caching_type;
    params.format_type = p->format_type;
    params.element_bits = p->element_bits;
    params.compression_type = p->compression_type;

    status = uvm_va_range_map_rm_allocation(va_range, gpu, &mem_info, &params, m, out_tracker);
    if (status != NV_OK)
        goto error;
    return NV_OK;

error:
    uvm_ext_gpu_map_destroy(va_range, m, NULL);
    return status;
}

/* Maps a piece split into runs of equal largest page size (2 MiB / 64 KiB / 4 KiB, by
 * gasan_split_pages), so a remainder next to a 4 KiB guard keeps big pages where it can. */
static NV_STATUS gasan_map_piece_split(uvm_va_range_t *va_range,
                                       const gasan_piece_t *p,
                                       UvmGpuMappingType mapping_type,
                                       uvm_tracker_t *tracker)
{
    enum { MAX_RUNS = 64 };
    NvU64 va[MAX_RUNS], size[MAX_RUNS];
    NvU64 run_start, run_len;
    int n, i;
    NV_STATUS status;

    n = gasan_split_pages(p->start, p->length, va, size, MAX_RUNS);
    if (n < 0)
        return NV_ERR_INVALID_ADDRESS;
    if (n >= MAX_RUNS) /* too many runs to list: one mapping, page size from alignment */
        return gasan_map_piece(va_range, p, p->start, mapping_type, tracker);

    run_start = p->start;
    run_len = 0;
    for (i = 0; i <= n; i++) {
        if (i < n && (run_len == 0 || size[i] == size[i - 1])) {
            run_len += size[i];
            continue;
        }
        {
            gasan_piece_t *run = gasan_piece_slice(p, run_start, run_len);

            if (!run)
                return NV_ERR_NO_MEMORY;
            status = gasan_map_piece(va_range, run, run_start, mapping_type, tracker);
            gasan_piece_free(run);
            if (status != NV_OK)
                return status;
        }
        if (i < n) {
            run_start = va[i];
            run_len = size[i];
        }
    }
    return NV_OK;
}

/* The external range that holds all of [va, va + len), or NULL. */
static uvm_va_range_t *gasan_external_range(uvm_va_space_t *va_space, NvU64 va, NvU64 len)
{
    uvm_va_range_t *r = uvm_va_range_find(va_space, va);

    if (!r || r->type != UVM_VA_RANGE_TYPE_EXTERNAL || r->node.end < va + len - 1)
        return NULL;
    return r;
}

/* Creates an external range at [base, base + length) unless one already holds it exactly. */
static NV_STATUS gasan_create_range(uvm_va_space_t *va_space, NvU64 base, NvU64 length)
{
    struct mm_struct *mm;
    uvm_va_range_t *r;
    NV_STATUS status;

    mm = uvm_va_space_mm_or_current_retain_lock(va_space);
    uvm_va_space_down_write(va_space);
    r = uvm_va_range_find(va_space, base);
    if (r && r->type == UVM_VA_RANGE_TYPE_EXTERNAL && r->node.start == base && r->node.end == base + length - 1)
        status = NV_OK;
    else
        status = uvm_va_range_create_external(va_space, mm, base, length, NULL);
    uvm_va_space_up_write(va_space);
    uvm_va_space_mm_or_current_release_unlock(va_space, mm);
    return status;
}

/* ---- ioctls ----------------------------------------------------------------------------------- */

NV_STATUS uvm_api_gasan_query(UVM_GASAN_QUERY_PARAMS *params, struct file *filp)
{
    uvm_va_space_t *va_space = uvm_va_space_get(filp);
    uvm_gpu_t *gpu;
    NvU32 caps = UVM_GASAN_CAP_PAGE_4K | UVM_GASAN_CAP_PAGE_64K | UVM_GASAN_CAP_SPARSE_ZERO | UVM_GASAN_CAP_FAULT_EVENTS;
    NvU64 max_va = ~0ull;
    bool any = false;

    uvm_va_space_down_read(va_space);
    for_each_va_space_gpu(gpu, va_space) {
        uvm_gpu_va_space_t *gpu_va_space = uvm_gpu_va_space_get(va_space, gpu);

        any = true;
        max_va = min(max_va, gasan_gpu_max_va(gpu));
        if (!gpu->parent->sparse_mappings_supported)
            caps &= ~UVM_GASAN_CAP_SPARSE_ZERO;
        if (gpu_va_space) {
            if (!uvm_mmu_page_size_supported(&gpu_va_space->page_tables, UVM_PAGE_SIZE_4K))
                caps &= ~UVM_GASAN_CAP_PAGE_4K;
            if (!uvm_mmu_page_size_supported(&gpu_va_space->page_tables, UVM_PAGE_SIZE_64K))
                caps &= ~UVM_GASAN_CAP_PAGE_64K;
        }
    }
    uvm_va_space_up_read(va_space);

    if (!any)
        max_va = 0; /* unknown until a GPU is registered */
    if (max_va > GASAN_CPU_VA_LIMIT)
        caps |= UVM_GASAN_CAP_GPU_ONLY_VA;
    params->abiVersion = UVM_GASAN_ABI_VERSION;
    params->caps = caps;
    params->maxVa = max_va;
    return NV_OK;
}

NV_STATUS uvm_api_gasan_reserve_pool(UVM_GASAN_RESERVE_POOL_PARAMS *params, struct file *filp)
{
    uvm_va_space_t *va_space = uvm_va_space_get(filp);
    uvm_gasan_va_space_t *g;
    uvm_gpu_t *gpu;
    uvm_va_range_t *r;
    NV_STATUS status = NV_OK;
    bool foreign = false;

    if (gasan_check_aligned(params->base, params->length, GASAN_2M) != 0)
        return NV_ERR_INVALID_ADDRESS;

    g = gasan_get(va_space, true);
    if (!g)
        return NV_ERR_NO_MEMORY;

    mutex_lock(&g->lock);
    /* The pool is reserved once, before anything else (it becomes windows[0]). */
    if (g->pool_reserved || g->window_count != 0) {
        status = NV_ERR_STATE_IN_USE;
        goto out;
    }
    if (gasan_window_overlaps(g, params->base, params->length)) {
        status = NV_ERR_UVM_ADDRESS_IN_USE;
        goto out;
    }

    uvm_va_space_down_read(va_space);
    for_each_va_space_gpu(gpu, va_space) {
        if (!gasan_gpu_reaches(gpu, params->base, params->length))
            status = NV_ERR_OUT_OF_RANGE;
    }
    /* Ranges already inside the pool (the CUDA driver's own external ranges) are accepted; any
     * other kind of range there (managed memory, channels) is not ours to remap. */
    uvm_for_each_va_range_in(r, va_space, params->base, params->base + params->length - 1) {
        foreign = true;
        if (r->type != UVM_VA_RANGE_TYPE_EXTERNAL)
            status = NV_ERR_UVM_ADDRESS_IN_USE;
    }
    uvm_va_space_up_read(va_space);
    if (status != NV_OK)
        goto out;

    /* An empty pool becomes one external range: allocations are then mapped into it with
     * UvmMapExternalAllocation and re-protected with the ioctls below. */
    if (!foreign) {
        status = gasan_create_range(va_space, params->base, params->length);
        if (status != NV_OK)
            goto out;
    }

    status = gasan_window_add(g, params->base, params->length, GASAN_WINDOW_POOL);
    if (status == NV_OK)
        g->pool_reserved = true;
out:
    mutex_unlock(&g->lock);
    return status;
}

/* Collects, for one GPU, the pieces of [va, va + len) of va_range. Fails unless all of it is
 * mapped with real backing (no holes, no sparse parts). */
static NV_STATUS gasan_collect_mapped(uvm_va_range_t *va_range, uvm_gpu_t *gpu, NvU64 va, NvU64 len, struct list_head *out)
{
    uvm_ext_gpu_range_tree_t *range_tree = uvm_ext_gpu_range_tree(va_range, gpu);
    uvm_ext_gpu_map_t *m;
    NvU64 next = va, end = va + len - 1;
    NV_STATUS status = NV_OK;

    uvm_mutex_lock(&range_tree->lock);
    uvm_ext_gpu_map_for_each_in(m, va_range, gpu, va, end) {
        NvU64 s = max(m->node.start, va), e = min(m->node.end, end);
        gasan_piece_t *p;

        if (s != next || !m->mem_handle) {
            status = NV_ERR_INVALID_ADDRESS;
            break;
        }
        p = gasan_piece_from_map(m, s, e - s + 1);
        if (!p) {
            status = NV_ERR_NO_MEMORY;
            break;
        }
        list_add_tail(&p->node, out);
        next = e + 1;
    }
    uvm_mutex_unlock(&range_tree->lock);
    if (status == NV_OK && next != end + 1)
        status = NV_ERR_INVALID_ADDRESS;
    return status;
}

NV_STATUS uvm_api_gasan_map_alias(UVM_GASAN_MAP_ALIAS_PARAMS *params, struct file *filp)
{
    uvm_va_space_t *va_space = uvm_va_space_get(filp);
    uvm_gasan_va_space_t *g = gasan_get(va_space, false);
    uvm_va_range_t *src, *dst;
    uvm_gpu_t *gpu;
    uvm_tracker_t tracker = UVM_TRACKER_INIT();
    LIST_HEAD(pieces);
    NV_STATUS status = NV_OK;
    bool new_window;
    int mapped_gpus = 0;

    if (!g)
        return NV_ERR_INVALID_STATE;
    if (gasan_check_aligned(params->srcBase, params->length, UVM_PAGE_SIZE_4K) != 0 ||
        gasan_check_aligned(params->aliasBase, params->length, UVM_PAGE_SIZE_4K) != 0)
        return NV_ERR_INVALID_ADDRESS;

    mutex_lock(&g->lock);
    if (!gasan_in_pool(g, params->srcBase, params->length)) {
        status = NV_ERR_INVALID_ADDRESS;
        goto out;
    }
    /* The alias goes into a range gasan made for aliases, or into fresh VA outside every window. */
    new_window = !gasan_window_lookup(g, params->aliasBase, params->length, GASAN_WINDOW_ALIAS);
    if (new_window && gasan_window_overlaps(g, params->aliasBase, params->length)) {
        status = NV_ERR_UVM_ADDRESS_IN_USE;
        goto out;
    }

    uvm_va_space_down_read(va_space);
    for_each_va_space_gpu(gpu, va_space) {
        if (!gasan_gpu_reaches(gpu, params->aliasBase, params->length))
            status = NV_ERR_OUT_OF_RANGE;
    }
    uvm_va_space_up_read(va_space);
    if (status != NV_OK)
        goto out;

    if (new_window) {
        status = gasan_create_range(va_space, params->aliasBase, params->length);
        if (status != NV_OK)
            goto out;
        status = gasan_window_add(g, params->aliasBase, params->length, GASAN_WINDOW_ALIAS);
        if (status != NV_OK)
            goto out;
    }

    uvm_va_space_down_read_rm(va_space);
    src = gasan_external_range(va_space, params->srcBase, params->length);
    dst = gasan_external_range(va_space, params->aliasBase, params->length);
    if (!src || !dst) {
        status = NV_ERR_INVALID_ADDRESS;
        goto out_unlock;
    }
    for_each_va_space_gpu(gpu, va_space) {
        gasan_piece_t *p;
        uvm_ext_gpu_range_tree_t *dst_tree;

        if (!uvm_processor_mask_test(&src->external.mapped_gpus, gpu->id) || !uvm_gpu_va_space_get(va_space, gpu))
            continue;
        status = gasan_collect_mapped(src, gpu, params->srcBase, params->length, &pieces);
        if (status != NV_OK)
            goto out_unlock;

        /* Pieces were collected under the source tree lock; map them under the alias tree lock
         * (never both: they share a lock order class). */
        dst_tree = uvm_ext_gpu_range_tree(dst, gpu);
        uvm_mutex_lock(&dst_tree->lock);
        list_for_each_entry(p, &pieces, node) {
            status = gasan_map_piece(dst, p, params->aliasBase + (p->start - params->srcBase), p->mapping_type, &tracker);
            if (status != NV_OK)
                break;
        }
        uvm_mutex_unlock(&dst_tree->lock);
        gasan_piece_list_free(&pieces);
        if (status != NV_OK)
            goto out_unlock;
        mapped_gpus++;
    }
    if (mapped_gpus == 0)
        status = NV_ERR_INVALID_ADDRESS; /* the source is not mapped on any GPU */

out_unlock:
    gasan_piece_list_free(&pieces);
    uvm_va_space_up_read_rm(va_space);
    if (uvm_tracker_wait_deinit(&tracker) != NV_OK && status == NV_OK)
        status = NV_ERR_INVALID_STATE;
out:
    mutex_unlock(&g->lock);
    return status;
}

NV_STATUS uvm_api_gasan_unmap_alias(UVM_GASAN_UNMAP_ALIAS_PARAMS *params, struct file *filp)
{
    uvm_va_space_t *va_space = uvm_va_space_get(filp);
    uvm_gasan_va_space_t *g = gasan_get(va_space, false);
    uvm_va_range_t *r;
    uvm_gpu_t *gpu;
    NV_STATUS status = NV_OK;

    if (!g)
        return NV_ERR_INVALID_STATE;
    if (gasan_check_aligned(params->aliasBase, params->length, UVM_PAGE_SIZE_4K) != 0)
        return NV_ERR_INVALID_ADDRESS;

    mutex_lock(&g->lock);
    /* Only gasan's alias ranges: never the pool or the CUDA driver's own mappings. The range stays
     * reserved (retired alias VA), only its PTEs go. */
    if (!gasan_window_lookup(g, params->aliasBase, params->length, GASAN_WINDOW_ALIAS)) {
        status = NV_ERR_INVALID_ADDRESS;
        goto out;
    }
    uvm_va_space_down_read_rm(va_space);
    r = gasan_external_range(va_space, params->aliasBase, params->length);
    if (!r) {
        status = NV_ERR_INVALID_ADDRESS;
    }
    else {
        for_each_va_space_gpu(gpu, va_space) {
            uvm_ext_gpu_range_tree_t *tree = uvm_ext_gpu_range_tree(r, gpu);

            if (!uvm_processor_mask_test(&r->external.mapped_gpus, gpu->id))
                continue;
            uvm_mutex_lock(&tree->lock);
            status = uvm_unmap_external_in_range(r, gpu, params->aliasBase, params->aliasBase + params->length - 1, NULL);
            uvm_mutex_unlock(&tree->lock);
            if (status != NV_OK)
                break;
        }
    }
    uvm_va_space_up_read_rm(va_space);
out:
    mutex_unlock(&g->lock);
    return status;
}

/* Re-protects [base, end] of r on one GPU. Mapped pieces around the range that share a big page
 * with it are remapped with smaller pages; the range itself is parked (NONE) or remapped with the
 * new protection; parked pieces inside it come back for RO/RW. */
static NV_STATUS gasan_protect_on_gpu(uvm_gasan_va_space_t *g,
                                      uvm_va_range_t *r,
                                      uvm_gpu_t *gpu,
                                      NvU64 base,
                                      NvU64 end,
                                      NvU32 prot,
                                      uvm_tracker_t *tracker)
{
    uvm_ext_gpu_range_tree_t *tree = uvm_ext_gpu_range_tree(r, gpu);
    uvm_ext_gpu_map_t *m;
    gasan_piece_t *p, *next;
    LIST_HEAD(outside);
    LIST_HEAD(inside);
    LIST_HEAD(outer);
    NV_STATUS status = NV_OK;
    UvmGpuMappingType new_type = prot == UVM_GASAN_PROT_RO ? UvmGpuMappingTypeReadOnly : UvmGpuMappingTypeDefault;

    uvm_mutex_lock(&tree->lock);

    /* 1. Describe what is mapped: the part inside [base, end], and the parts of the same big
     *    pages outside it (they must be remapped with pages that stop at base and end + 1). */
    if (uvm_processor_mask_test(&r->external.mapped_gpus, gpu->id)) {
        uvm_ext_gpu_map_for_each_in(m, r, gpu, base, end) {
            NvU64 page = m->pt_range_vec.page_size;
            NvU64 o_start = max(m->node.start, base & ~(page - 1));
            NvU64 o_end = min(m->node.end, ((end + page) & ~(page - 1)) - 1);
            NvU64 i_start = max(m->node.start, base), i_end = min(m->node.end, end);
            gasan_piece_t *whole, *in;

            if (!m->mem_handle) {
                status = NV_ERR_INVALID_ADDRESS; /* sparse: not part of the pool's allocations */
                goto out;
            }
            whole = gasan_piece_from_map(m, o_start, o_end - o_start + 1);
            in = gasan_piece_from_map(m, i_start, i_end - i_start + 1);
            if (whole)
                list_add_tail(&whole->node, &outer);
            if (in)
                list_add_tail(&in->node, &inside);
            if (!whole || !in) {
                status = NV_ERR_NO_MEMORY;
                goto out;
            }
            if (o_start < i_start) {
                p = gasan_piece_from_map(m, o_start, i_start - o_start);
                if (!p) {
                    status = NV_ERR_NO_MEMORY;
                    goto out;
                }
                list_add_tail(&p->node, &outside);
            }
            if (i_end < o_end) {
                p = gasan_piece_from_map(m, i_end + 1, o_end - i_end);
                if (!p) {
                    status = NV_ERR_NO_MEMORY;
                    goto out;
                }
                list_add_tail(&p->node, &outside);
            }
        }
    }

    /* 2. Unmap the big pages involved (their edges are page aligned, so splitting succeeds). */
    list_for_each_entry(p, &outer, node) {
        status = uvm_unmap_external_in_range(r, gpu, p->start, p->start + p->length - 1, NULL);
        if (status != NV_OK)
            goto out;
    }

    /* 3. Bring back the neighbours with the pages their new edges allow. */
    list_for_each_entry(p, &outside, node) {
        status = gasan_map_piece_split(r, p, p->mapping_type, tracker);
        if (status != NV_OK)
            goto out;
    }

    /* 4. Parked pieces overlapping the range: the overlap joins `inside`, the rest stays parked. */
    list_for_each_entry_safe(p, next, &g->parked, node) {
        NvU64 s, e;

        if (p->gpu != gpu || p->start > end || p->start + p->length - 1 < base)
            continue;
        s = max(p->start, base);
        e = min(p->start + p->length - 1, end);
        if (p->start < s) {
            gasan_piece_t *left = gasan_piece_slice(p, p->start, s - p->start);

            if (!left) {
                status = NV_ERR_NO_MEMORY;
                goto out;
            }
            list_add_tail(&left->node, &g->parked);
        }
        if (e < p->start + p->length - 1) {
            gasan_piece_t *right = gasan_piece_slice(p, e + 1, p->start + p->length - 1 - e);

            if (!right) {
                status = NV_ERR_NO_MEMORY;
                goto out;
            }
            list_add_tail(&right->node, &g->parked);
        }
        list_del(&p->node);
        p->map_offset += s - p->start;
        p->start = s;
        p->length = e - s + 1;
        list_add_tail(&p->node, &inside);
    }

    /* 5. The range itself. */
    if (prot == UVM_GASAN_PROT_NONE) {
        list_splice_tail_init(&inside, &g->parked);
    }
    else {
        list_for_each_entry(p, &inside, node) {
            status = gasan_map_piece_split(r, p, new_type, tracker);
            if (status != NV_OK)
                goto out;
        }
    }

out:
    uvm_mutex_unlock(&tree->lock);
    gasan_piece_list_free(&outer);
    gasan_piece_list_free(&outside);
    gasan_piece_list_free(&inside);
    return status;
}

NV_STATUS uvm_api_gasan_set_protection(UVM_GASAN_SET_PROTECTION_PARAMS *params, struct file *filp)
{
    uvm_va_space_t *va_space = uvm_va_space_get(filp);
    uvm_gasan_va_space_t *g = gasan_get(va_space, false);
    uvm_tracker_t tracker = UVM_TRACKER_INIT();
    uvm_va_range_t *r;
    uvm_gpu_t *gpu;
    NV_STATUS status = NV_OK;

    if (!g)
        return NV_ERR_INVALID_STATE;
    if (params->pageSize != UVM_PAGE_SIZE_4K && params->pageSize != UVM_PAGE_SIZE_64K)
        return NV_ERR_INVALID_ARGUMENT;
    if (params->prot != UVM_GASAN_PROT_NONE && params->prot != UVM_GASAN_PROT_RO && params->prot != UVM_GASAN_PROT_RW)
        return NV_ERR_INVALID_ARGUMENT;
    if (gasan_check_aligned(params->base, params->length, params->pageSize) != 0)
        return NV_ERR_INVALID_ADDRESS;

    mutex_lock(&g->lock);
    if (!gasan_in_pool(g, params->base, params->length)) {
        status = NV_ERR_INVALID_ADDRESS;
        goto out;
    }
    uvm_va_space_down_read_rm(va_space);
    r = gasan_external_range(va_space, params->base, params->length);
    if (!r) {
        status = NV_ERR_INVALID_ADDRESS; /* the range must lie in one external range */
        goto out_unlock;
    }
    for_each_va_space_gpu(gpu, va_space) {
        uvm_gpu_va_space_t *gpu_va_space = uvm_gpu_va_space_get(va_space, gpu);

        if (!gpu_va_space)
            continue;
        if (!uvm_mmu_page_size_supported(&gpu_va_space->page_tables, params->pageSize)) {
            status = NV_ERR_NOT_SUPPORTED;
            break;
        }
        status = gasan_protect_on_gpu(g, r, gpu, params->base, params->base + params->length - 1, params->prot, &tracker);
        if (status != NV_OK)
            break;
    }
out_unlock:
    uvm_va_space_up_read_rm(va_space);
    if (uvm_tracker_wait_deinit(&tracker) != NV_OK && status == NV_OK)
        status = NV_ERR_INVALID_STATE;
out:
    mutex_unlock(&g->lock);
    return status;
}

NV_STATUS uvm_api_gasan_map_sparse_zero(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS *params, struct file *filp)
{
    uvm_va_space_t *va_space = uvm_va_space_get(filp);
    uvm_gasan_va_space_t *g = gasan_get(va_space, false);
    uvm_va_range_t *r;
    uvm_gpu_t *gpu;
    NV_STATUS status = NV_OK;
    bool new_window;

    if (!g)
        return NV_ERR_INVALID_STATE;
    if (gasan_check_aligned(params->base, params->length, GASAN_2M) != 0)
        return NV_ERR_INVALID_ADDRESS;

    mutex_lock(&g->lock);
    if (!g->pool_reserved) {
        status = NV_ERR_INVALID_STATE; /* shadow belongs to a pool */
        goto out;
    }
    new_window = !gasan_window_lookup(g, params->base, params->length, GASAN_WINDOW_SPARSE);
    if (new_window && gasan_window_overlaps(g, params->base, params->length)) {
        status = NV_ERR_UVM_ADDRESS_IN_USE;
        goto out;
    }
    uvm_va_space_down_read(va_space);
    for_each_va_space_gpu(gpu, va_space) {
        if (!gasan_gpu_reaches(gpu, params->base, params->length))
            status = NV_ERR_OUT_OF_RANGE;
        else if (!gpu->parent->sparse_mappings_supported)
            status = NV_ERR_NOT_SUPPORTED;
    }
    uvm_va_space_up_read(va_space);
    if (status != NV_OK)
        goto out;
    if (new_window) {
        status = gasan_create_range(va_space, params->base, params->length);
        if (status == NV_OK)
            status = gasan_window_add(g, params->base, params->length, GASAN_WINDOW_SPARSE);
        if (status != NV_OK)
            goto out;
    }

    uvm_va_space_down_read(va_space);
    r = gasan_external_range(va_space, params->base, params->length);
    if (!r)
        status = NV_ERR_INVALID_ADDRESS;
    for_each_va_space_gpu(gpu, va_space) {
        if (status != NV_OK || !uvm_gpu_va_space_get(va_space, gpu))
            continue;
        status = uvm_map_external_sparse_on_gpu(r, gpu, params->base, params->length, NULL);
    }
    uvm_va_space_up_read(va_space);
out:
    mutex_unlock(&g->lock);
    return status;
}

/* ---- fault events ----------------------------------------------------------------------------- */

static void gasan_fault_queue_release(struct kref *ref)
{
    kfree(container_of(ref, gasan_fault_queue_t, ref));
}

static ssize_t gasan_fault_read(struct file *filp, char __user *buf, size_t len, loff_t *pos)
{
    gasan_fault_queue_t *q = filp->private_data;
    const size_t rec = sizeof(UVM_GASAN_FAULT_EVENT);
    size_t done = 0;
    int ret;

    if (len < rec)
        return -EINVAL;
    if (!(filp->f_flags & O_NONBLOCK)) {
        ret = wait_event_interruptible(q->wait, READ_ONCE(q->count) != 0 || READ_ONCE(q->closed));
        if (ret)
            return ret;
    }
    while (done + rec <= len) {
        UVM_GASAN_FAULT_EVENT ev;
        unsigned long flags;
        bool have = false;

        spin_lock_irqsave(&q->lock, flags);
        if (q->count) {
            ev = q->events[q->head];
            q->head = (q->head + 1) % GASAN_FAULT_QUEUE_LEN;
            q->count--;
            have = true;
        }
        spin_unlock_irqrestore(&q->lock, flags);
        if (!have)
            break;
        if (copy_to_user(buf + done, &ev, rec))
            return done ? (ssize_t)done : -EFAULT;
        done += rec;
    }
    if (done == 0 && !READ_ONCE(q->closed))
        return -EAGAIN;
    return done;
}

static __poll_t gasan_fault_poll(struct file *filp, poll_table *wait)
{
    gasan_fault_queue_t *q = filp->private_data;
    __poll_t mask = 0;

    poll_wait(filp, &q->wait, wait);
    if (READ_ONCE(q->count))
        mask |= EPOLLIN | EPOLLRDNORM;
    if (READ_ONCE(q->closed))
        mask |= EPOLLHUP;
    return mask;
}

static int gasan_fault_release(struct inode *inode, struct file *filp)
{
    gasan_fault_queue_t *q = filp->private_data;

    kref_put(&q->ref, gasan_fault_queue_release);
    return 0;
}

static const struct file_operations gasan_fault_fops = {
    .owner = THIS_MODULE,
    .read = gasan_fault_read,
    .poll = gasan_fault_poll,
    .release = gasan_fault_release,
    .llseek = noop_llseek,
};

NV_STATUS uvm_api_gasan_subscribe_faults(UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS *params, struct file *filp)
{
    uvm_va_space_t *va_space = uvm_va_space_get(filp);
    uvm_gasan_va_space_t *g = gasan_get(va_space, false);
    gasan_fault_queue_t *q;
    NV_STATUS status = NV_OK;
    int fd;

    if (!g)
        return NV_ERR_INVALID_STATE;
    mutex_lock(&g->lock);
    if (!g->pool_reserved) {
        status = NV_ERR_INVALID_STATE;
        goto out;
    }
    if (g->faults) {
        status = NV_ERR_STATE_IN_USE; /* one subscriber per pool */
        goto out;
    }
    q = kzalloc(sizeof(*q), GFP_KERNEL);
    if (!q) {
        status = NV_ERR_NO_MEMORY;
        goto out;
    }
    kref_init(&q->ref);
    spin_lock_init(&q->lock);
    init_waitqueue_head(&q->wait);

    kref_get(&q->ref); /* the file's reference */
    fd = anon_inode_getfd("[gasan-faults]", &gasan_fault_fops, q, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        kref_put(&q->ref, gasan_fault_queue_release);
        kref_put(&q->ref, gasan_fault_queue_release);
        status = NV_ERR_INSUFFICIENT_RESOURCES;
        goto out;
    }
    /* Publish under the VA space lock: the fault hook reads g->faults under it. */
    uvm_va_space_down_write(va_space);
    g->faults = q;
    uvm_va_space_up_write(va_space);
    params->eventFd = fd;
out:
    mutex_unlock(&g->lock);
    return status;
}

void uvm_gasan_record_fatal_fault(uvm_va_space_t *va_space, NvU32 gpu_index, NvU64 address, NvU32 access_type)
{
    uvm_gasan_va_space_t *g = va_space->gasan;
    gasan_fault_queue_t *q;
    unsigned long flags;

    if (!g || !g->faults || !gasan_window_lookup(g, address, 1, -1))
        return;
    q = g->faults;
    spin_lock_irqsave(&q->lock, flags);
    if (q->count == GASAN_FAULT_QUEUE_LEN) {
        q->dropped++;
    }
    else {
        UVM_GASAN_FAULT_EVENT *ev = &q->events[(q->head + q->count) % GASAN_FAULT_QUEUE_LEN];

        ev->address = address;
        ev->timestampNs = NV_GETTIME();
        ev->accessType = access_type;
        ev->gpuIndex = gpu_index;
        q->count++;
    }
    spin_unlock_irqrestore(&q->lock, flags);
    wake_up_interruptible(&q->wait);
}

void uvm_gasan_va_space_destroy(uvm_va_space_t *va_space)
{
    uvm_gasan_va_space_t *g;

    /* Detach under the write lock so the fault hook (which runs under the lock) never sees a
     * half-freed state; no ioctl can run any more (the file is being released). */
    uvm_va_space_down_write(va_space);
    g = va_space->gasan;
    va_space->gasan = NULL;
    uvm_va_space_up_write(va_space);
    if (!g)
        return;

    gasan_piece_list_free(&g->parked);
    if (g->faults) {
        WRITE_ONCE(g->faults->closed, true);
        wake_up_interruptible(&g->faults->wait);
        kref_put(&g->faults->ref, gasan_fault_queue_release);
    }
    uvm_kvfree(g);
}

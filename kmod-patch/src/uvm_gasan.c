/* SPDX-License-Identifier: MIT
 *
 * gasan extensions to nvidia-uvm (the ioctls of include/uvm_gasan_ioctl.h).
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
 * later protection change can bring them back. A parked piece depends on its GPUs (the mapping GPU
 * frees the duplicated handle through RM; the owning GPU holds the memory), so the pieces of a GPU
 * are released when that GPU is unregistered from the VA space (uvm_gasan_unregister_gpu), and the
 * rest at VA-space destruction, before the VA space drops its GPUs.
 *
 * Every ioctl validates its whole parameter block with the kernel-independent checks of
 * gasan_map_math.c (padding, flags, alignment, zero base, wrap, pool membership, GPU reach) before
 * it changes anything, and returns the NV_STATUS in rmStatus as upstream's ioctls do.
 *
 * Locking: the per-VA-space gasan mutex is taken first, then the mm lock (when creating ranges),
 * then the VA space lock, then one external range tree lock at a time. The fault hook runs under the
 * VA space lock and only takes the fault queue spinlock and the window spinlock. GPU unregister
 * calls uvm_gasan_unregister_gpu() holding no lock.
 *
 * RM handle frees: uvm_lock.h allows RM calls under the VA space read lock only together with its
 * serialize_writers_lock (uvm_va_space_down_read_rm). Paths that hold the plain read lock
 * (MAP_SPARSE_ZERO, UNMAP_ALIAS, as upstream's UvmMapExternalSparse / UvmUnmapExternal do) pass a
 * deferred-free list to every unmap, retain the mapping GPUs before unlocking and free after
 * (gasan_deferred_*). Parked pieces hold handle references too; they are freed with no VA space
 * lock held (their GPUs stay registered while gasan's mutex is held: uvm_gasan_unregister_gpu()
 * takes it).
 *
 * Memory: gasan's per-VA-space objects (its state, parked pieces, the fault queue) are charged to
 * the caller's memory cgroup (GFP_KERNEL_ACCOUNT). The uvm_ext_gpu_map_t it creates are upstream's
 * objects, allocated and freed as upstream allocates its own (uvm_kvmalloc, not charged).
 */

#include "uvm_api.h"
#include "uvm_gasan.h"
#include "uvm_gasan_glue.h"
#include "uvm_gpu.h"
#include "uvm_map_external.h"
#include "uvm_mmu.h"
#include "uvm_va_range.h"
#include "uvm_va_space.h"
#include "uvm_va_space_mm.h"
#include "gasan_map_math.h"

#include <linux/anon_inodes.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/kref.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
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
/* Parked pieces per VA space (each about 120 bytes): a pool's guard pages, per GPU. */
#define GASAN_MAX_PARKED 65536u
#define GASAN_2M (2ull << 20)
#define GASAN_GFP (GFP_KERNEL_ACCOUNT)
#define GASAN_CPU_VA_LIMIT (1ull << 47)

/* The ABI version, readable without any ioctl: /sys/module/nvidia_uvm/parameters/gasan_abi. */
static unsigned int gasan_abi = UVM_GASAN_ABI_VERSION;
module_param(gasan_abi, uint, 0444);
MODULE_PARM_DESC(gasan_abi, "ABI version of gasan's ioctls (read-only; present only in the gasan-patched module)");

/* The userspace names of the statuses are the NV_STATUS values. */
#define GASAN_SAME_STATUS(ours, nv) _Static_assert((ours) == (nv), #ours " != " #nv)
GASAN_SAME_STATUS(UVM_GASAN_ST_OK, NV_OK);
GASAN_SAME_STATUS(UVM_GASAN_ST_ILLEGAL_ACTION, NV_ERR_ILLEGAL_ACTION);
GASAN_SAME_STATUS(UVM_GASAN_ST_INSUFFICIENT_RESOURCES, NV_ERR_INSUFFICIENT_RESOURCES);
GASAN_SAME_STATUS(UVM_GASAN_ST_INVALID_ACCESS_TYPE, NV_ERR_INVALID_ACCESS_TYPE);
GASAN_SAME_STATUS(UVM_GASAN_ST_INVALID_ADDRESS, NV_ERR_INVALID_ADDRESS);
GASAN_SAME_STATUS(UVM_GASAN_ST_INVALID_ARGUMENT, NV_ERR_INVALID_ARGUMENT);
GASAN_SAME_STATUS(UVM_GASAN_ST_INVALID_STATE, NV_ERR_INVALID_STATE);
GASAN_SAME_STATUS(UVM_GASAN_ST_NOT_SUPPORTED, NV_ERR_NOT_SUPPORTED);
GASAN_SAME_STATUS(UVM_GASAN_ST_OUT_OF_RANGE, NV_ERR_OUT_OF_RANGE);
GASAN_SAME_STATUS(UVM_GASAN_ST_STATE_IN_USE, NV_ERR_STATE_IN_USE);
GASAN_SAME_STATUS(UVM_GASAN_ST_ADDRESS_IN_USE, NV_ERR_UVM_ADDRESS_IN_USE);
GASAN_SAME_STATUS(GASAN_MAPPING_DEFAULT, UvmGpuMappingTypeDefault);
GASAN_SAME_STATUS(GASAN_MAPPING_READ_WRITE_ATOMIC, UvmGpuMappingTypeReadWriteAtomic);
GASAN_SAME_STATUS(GASAN_MAPPING_READ_WRITE, UvmGpuMappingTypeReadWrite);
GASAN_SAME_STATUS(GASAN_MAPPING_READ_ONLY, UvmGpuMappingTypeReadOnly);

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
    bool closed;       /* the VA space is gone */
    bool reader_gone;  /* the fd was closed: a new subscriber may replace this queue */
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
    /* The external range the piece was cut from (gasan_range_serial()): a parked piece comes back
     * only into that range, never into a new range made later at the same address. */
    NvU64 range_serial;
    NvU64 start;
    NvU64 length;
    uvm_ext_gpu_mem_handle *mem_handle;
    uvm_gpu_t *owning_gpu;
    bool is_sysmem;
    bool is_egm;
    NvU64 map_offset;
    UvmGpuMappingType mapping_type;
    UvmGpuMappingType orig_mapping_type;
    UvmGpuCachingType caching_type;
    UvmGpuFormatType format_type;
    UvmGpuFormatElementBits element_bits;
    UvmGpuCompressionType compression_type;
} gasan_piece_t;

struct uvm_gasan_va_space_struct
{
    /* Serializes the gasan ioctls of this VA space and GPU unregister's release of pieces. */
    struct mutex lock;

    /* Windows, read by the fault hook under window_lock. windows[0] is the pool once reserved. */
    spinlock_t window_lock;
    gasan_window_t windows[GASAN_MAX_WINDOWS];
    NvU32 window_count;
    bool pool_reserved;

    /* Pieces unmapped by UVM_GASAN_PROT_NONE, with their backing kept; at most GASAN_MAX_PARKED. */
    struct list_head parked;
    NvU32 parked_count;

    gasan_fault_queue_t *faults;

    /* The GPUs retained for the deferred frees of the ioctl running now (under lock). */
    uvm_processor_mask_t deferred_gpus;
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

    fresh = kzalloc(sizeof(*fresh), GASAN_GFP);
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
    kfree(fresh);
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
        hit = gasan_overlaps(g->windows[i].base, g->windows[i].length, va, len);
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

/* Forgets the window that is exactly [base, base + length) (the pool, windows[0], is never removed). */
static void gasan_window_remove(uvm_gasan_va_space_t *g, NvU64 base, NvU64 length)
{
    unsigned long flags;
    NvU32 i;

    spin_lock_irqsave(&g->window_lock, flags);
    for (i = g->pool_reserved ? 1 : 0; i < g->window_count; i++) {
        if (g->windows[i].base == base && g->windows[i].length == length) {
            g->windows[i] = g->windows[g->window_count - 1];
            g->window_count--;
            break;
        }
    }
    spin_unlock_irqrestore(&g->window_lock, flags);
}

/* Is [va, va + len) exactly one window of the kind? */
static bool gasan_window_is(uvm_gasan_va_space_t *g, NvU64 va, NvU64 len, int kind)
{
    unsigned long flags;
    bool found = false;
    NvU32 i;

    spin_lock_irqsave(&g->window_lock, flags);
    for (i = 0; i < g->window_count && !found; i++)
        found = g->windows[i].kind == kind && g->windows[i].base == va && g->windows[i].length == len;
    spin_unlock_irqrestore(&g->window_lock, flags);
    return found;
}

/* ---- deferred RM frees ------------------------------------------------------------------------- */

/* Retains the GPUs through which the handles on deferred get freed; called before the VA space lock
 * is dropped (they are registered then). */
static void gasan_deferred_retain(uvm_gasan_va_space_t *g, struct list_head *deferred)
{
    uvm_deferred_free_object_t *o;

    uvm_processor_mask_zero(&g->deferred_gpus);
    list_for_each_entry(o, deferred, list_node) {
        if (o->type == UVM_DEFERRED_FREE_OBJECT_TYPE_EXTERNAL_ALLOCATION)
            uvm_processor_mask_set(&g->deferred_gpus, container_of(o, uvm_ext_gpu_map_t, deferred_free)->gpu->id);
    }
    uvm_global_gpu_retain(&g->deferred_gpus);
}

/* Frees what gasan_deferred_retain() retained for; called with no VA space lock held. */
static void gasan_deferred_free(uvm_gasan_va_space_t *g, struct list_head *deferred)
{
    if (list_empty(deferred))
        return;
    uvm_deferred_free_object_list(deferred);
    uvm_global_gpu_release(&g->deferred_gpus);
    uvm_processor_mask_zero(&g->deferred_gpus);
}

/* ---- GPU reach ------------------------------------------------------------------------------ */

/* gasan_gpu_max_va() (uvm_gasan_glue.h) is the exclusive upper bound of the lower half of a GPU's
 * VA space. Addresses between the CPU's limit (2^47) and it are reachable by the GPU only;
 * uvm_gpu_can_address() refuses them, gasan's aliases live there on purpose. */

/* Takes the gasan lock of the VA space (creating its state when create is set; g is NULL when it
 * has none) and describes the VA space for the validators: the pool, and the VA bound every
 * registered GPU reaches. */
static uvm_gasan_va_space_t *gasan_enter(uvm_va_space_t *va_space, bool create, gasan_limits_t *lim)
{
    uvm_gasan_va_space_t *g = gasan_get(va_space, create);
    uvm_gpu_t *gpu;

    memset(lim, 0, sizeof(*lim));
    if (g) {
        mutex_lock(&g->lock);
        if (g->pool_reserved) {
            lim->pool_base = g->windows[0].base;
            lim->pool_length = g->windows[0].length;
        }
    }
    uvm_va_space_down_read(va_space);
    for_each_va_space_gpu(gpu, va_space) {
        NvU64 max_va = gasan_gpu_max_va(gpu);

        if (lim->max_va == 0 || max_va < lim->max_va)
            lim->max_va = max_va;
    }
    uvm_va_space_up_read(va_space);
    return g;
}

static void gasan_leave(uvm_gasan_va_space_t *g)
{
    if (g)
        mutex_unlock(&g->lock);
}

/* ---- pieces ----------------------------------------------------------------------------------- */

static void gasan_piece_free(gasan_piece_t *p)
{
    if (p->mem_handle)
        nv_kref_put(&p->mem_handle->ref_count, uvm_release_rm_handle);
    kfree(p);
}

static void gasan_piece_list_free(struct list_head *list)
{
    gasan_piece_t *p, *next;

    list_for_each_entry_safe(p, next, list, node) {
        list_del(&p->node);
        gasan_piece_free(p);
    }
}

static NvU32 gasan_piece_list_count(struct list_head *list)
{
    struct list_head *pos;
    NvU32 n = 0;

    list_for_each(pos, list)
        n++;
    return n;
}

/* Does the piece need gpu? It is mapped on it, its memory lives on it, or RM frees its duplicated
 * handle through it. */
static bool gasan_piece_uses_gpu(const gasan_piece_t *p, const uvm_gpu_t *gpu)
{
    return p->gpu == gpu || p->owning_gpu == gpu || (p->mem_handle && p->mem_handle->gpu == gpu);
}

/* Describes [start, start + length) of ext_gpu_map, a mapping of the range with range_serial, as a
 * piece (takes a handle reference). */
static gasan_piece_t *gasan_piece_from_map(uvm_ext_gpu_map_t *m, NvU64 range_serial, NvU64 start, NvU64 length)
{
    gasan_piece_t *p = kzalloc(sizeof(*p), GASAN_GFP);

    if (!p)
        return NULL;
    INIT_LIST_HEAD(&p->node);
    p->gpu = m->gpu;
    p->range_serial = range_serial;
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
    p->orig_mapping_type = m->orig_mapping_type;
    p->caching_type = m->caching_type;
    p->format_type = m->format_type;
    p->element_bits = m->element_bits;
    p->compression_type = m->compression_type;
    return p;
}

/* A copy of the sub-piece [start, start + length) of p (takes a handle reference). */
static gasan_piece_t *gasan_piece_slice(const gasan_piece_t *p, NvU64 start, NvU64 length)
{
    gasan_piece_t *q = kmalloc(sizeof(*q), GASAN_GFP);

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
static NV_STATUS gasan_map_piece(gasan_ext_range_t *va_range,
                                 const gasan_piece_t *p,
                                 NvU64 va,
                                 UvmGpuMappingType mapping_type,
                                 uvm_tracker_t *out_tracker)
{
    uvm_gpu_t *gpu = p->gpu;
    uvm_gpu_va_space_t *gpu_va_space = uvm_gpu_va_space_get(GASAN_EXT_VA_SPACE(va_range), gpu);
    uvm_ext_gpu_range_tree_t *range_tree = uvm_ext_gpu_range_tree(va_range, gpu);
    uvm_ext_gpu_map_t *m;
    UvmGpuMemoryInfo mem_info;
    uvm_map_rm_params_t params;
    NvU64 alignments;
    gasan_page_size_t page_size;
    NV_STATUS status;

    if (!gpu_va_space)
        return NV_ERR_INVALID_DEVICE;
    if (!p->mem_handle)
        return NV_ERR_INVALID_ARGUMENT; /* sparse ranges are not re-protected or aliased */
    if (mapping_type != UvmGpuMappingTypeReadOnly && p->orig_mapping_type == UvmGpuMappingTypeReadOnly)
        return NV_ERR_INVALID_ACCESS_TYPE; /* never more access than the original mapping had */
    /* Peer memory only while the peers are enabled (upstream drops such mappings when they are
     * disabled). */
    if (p->owning_gpu && p->owning_gpu != gpu && (!p->is_sysmem || p->is_egm) &&
        !uvm_va_space_peer_enabled(GASAN_EXT_VA_SPACE(va_range), gpu, p->owning_gpu))
        return NV_ERR_INVALID_DEVICE;

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
    m->orig_mapping_type = p->orig_mapping_type;
    m->caching_type = p->caching_type;
    m->format_type = p->format_type;
    m->element_bits = p->element_bits;
    m->compression_type = p->compression_type;

    /* The range was just unmapped, so adding cannot collide. */
    status = uvm_range_tree_add(&range_tree->tree, &m->node);
    UVM_ASSERT(status == NV_OK);
    uvm_processor_mask_set_atomic(GASAN_EXT_MAPPED_GPUS(va_range), gpu->id);

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

    status = uvm_va_range_map_rm_allocation(GASAN_EXT_VA_RANGE(va_range), gpu, &mem_info, &params, m, out_tracker);
    if (status != NV_OK)
        goto error;
    return NV_OK;

error:
    uvm_ext_gpu_map_destroy(va_range, m, NULL);
    return status;
}

/* Maps a piece split into runs of equal largest page size (2 MiB / 64 KiB / 4 KiB, by
 * gasan_split_pages), so a remainder next to a 4 KiB guard keeps big pages where it can. */
static NV_STATUS gasan_map_piece_split(gasan_ext_range_t *va_range,
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
static gasan_ext_range_t *gasan_external_range(uvm_va_space_t *va_space, NvU64 va, NvU64 len)
{
    gasan_ext_range_t *r = gasan_ext_range_find(va_space, va);

    if (!r || GASAN_EXT_END(r) < va + len - 1)
        return NULL;
    return r;
}

/* A number naming the external range r for as long as it exists (never reused: a range made later
 * at the same address gets another). Ranges are allocated zeroed, so the first call stamps the
 * range; only gasan reads or writes the field, under its mutex. */
static NvU64 gasan_range_serial(gasan_ext_range_t *r)
{
    static atomic64_t next_serial = ATOMIC64_INIT(0);

    if (!READ_ONCE(GASAN_EXT_SERIAL(r)))
        WRITE_ONCE(GASAN_EXT_SERIAL(r), (NvU64)atomic64_inc_return(&next_serial));
    return GASAN_EXT_SERIAL(r);
}

/* Creates an external range at [base, base + length): fresh VA only (NV_ERR_UVM_ADDRESS_IN_USE when
 * any range is there, including one the CUDA driver made with the same bounds: gasan never takes
 * over a range it did not make). */
static NV_STATUS gasan_create_range(uvm_va_space_t *va_space, NvU64 base, NvU64 length)
{
    struct mm_struct *mm;
    NV_STATUS status;

    mm = uvm_va_space_mm_or_current_retain_lock(va_space);
    uvm_va_space_down_write(va_space);
    status = gasan_ext_range_create(va_space, mm, base, length);
    uvm_va_space_up_write(va_space);
    uvm_va_space_mm_or_current_release_unlock(va_space, mm);
    return status;
}

/* Destroys a range gasan made (an alias or sparse window) with upstream's UvmFree path, which
 * unmaps it on every GPU and frees the handles after dropping the VA space lock. Called with no VA
 * space lock held. */
static NV_STATUS gasan_destroy_range(uvm_va_space_t *va_space, NvU64 base, NvU64 length)
{
    return gasan_ext_range_free(va_space, base, length);
}

/* ---- ioctls ----------------------------------------------------------------------------------- */

NV_STATUS uvm_api_gasan_identify(UVM_GASAN_IDENTIFY_PARAMS *params, struct file *filp)
{
    NV_STATUS status = gasan_validate_identify(params);

    if (status != NV_OK)
        return status;
    params->magic = UVM_GASAN_MAGIC;
    params->abiVersion = UVM_GASAN_ABI_VERSION;
    params->nrCount = UVM_GASAN_NR_COUNT;
    return NV_OK;
}

NV_STATUS uvm_api_gasan_query(UVM_GASAN_QUERY_PARAMS *params, struct file *filp)
{
    uvm_va_space_t *va_space = uvm_va_space_get(filp);
    uvm_gpu_t *gpu;
    NvU32 caps = UVM_GASAN_CAP_PAGE_4K | UVM_GASAN_CAP_PAGE_64K | UVM_GASAN_CAP_SPARSE_ZERO | UVM_GASAN_CAP_FAULT_EVENTS;
    NvU64 max_va = ~0ull;
    bool any = false;
    NV_STATUS status = gasan_validate_query(params);

    if (status != NV_OK)
        return status;
    uvm_va_space_down_read(va_space);
    for_each_va_space_gpu(gpu, va_space) {
        uvm_gpu_va_space_t *gpu_va_space = uvm_gpu_va_space_get(va_space, gpu);

        any = true;
        max_va = min(max_va, gasan_gpu_max_va(gpu));
        if (!gasan_gpu_sparse_supported(gpu))
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
    gasan_limits_t lim;
    NvU32 ranges, not_external;
    NV_STATUS status;

    g = gasan_enter(va_space, true, &lim);
    if (!g)
        return NV_ERR_NO_MEMORY;
    status = gasan_validate_reserve_pool(params, &lim);
    if (status != NV_OK)
        goto out;
    /* The pool is reserved once, before anything else (it becomes windows[0]). */
    if (g->window_count != 0) {
        status = NV_ERR_STATE_IN_USE;
        goto out;
    }

    /* Ranges already inside the pool (the CUDA driver's own external ranges) are accepted; any
     * other kind of range there (managed memory, channels) is not ours to remap. */
    uvm_va_space_down_read(va_space);
    gasan_ranges_in(va_space, params->base, params->base + params->length - 1, &ranges, &not_external);
    uvm_va_space_up_read(va_space);
    if (not_external != 0) {
        status = NV_ERR_UVM_ADDRESS_IN_USE;
        goto out;
    }

    /* An empty pool becomes one external range: allocations are then mapped into it with
     * UvmMapExternalAllocation and re-protected with the ioctls below. */
    if (ranges == 0) {
        status = gasan_create_range(va_space, params->base, params->length);
        if (status != NV_OK)
            goto out;
    }

    status = gasan_window_add(g, params->base, params->length, GASAN_WINDOW_POOL);
    if (status == NV_OK)
        g->pool_reserved = true;
out:
    gasan_leave(g);
    return status;
}

/* Collects, for one GPU, the pieces of [va, va + len) of va_range. Fails unless all of it is
 * mapped with real backing (no holes, no sparse parts). */
static NV_STATUS gasan_collect_mapped(gasan_ext_range_t *va_range, uvm_gpu_t *gpu, NvU64 va, NvU64 len, struct list_head *out)
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
        p = gasan_piece_from_map(m, gasan_range_serial(va_range), s, e - s + 1);
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

/* Unmaps [va, va + len) of r on every GPU that has mappings in r. The caller holds the VA space lock
 * (read); handles go on deferred. */
static NV_STATUS gasan_unmap_all_gpus(uvm_va_space_t *va_space, gasan_ext_range_t *r, NvU64 va, NvU64 len,
                                      struct list_head *deferred)
{
    NV_STATUS status = NV_OK;
    uvm_gpu_t *gpu;

    for_each_va_space_gpu(gpu, va_space) {
        uvm_ext_gpu_range_tree_t *tree = uvm_ext_gpu_range_tree(r, gpu);
        NV_STATUS st;

        uvm_mutex_lock(&tree->lock);
        if (uvm_processor_mask_test(GASAN_EXT_MAPPED_GPUS(r), gpu->id))
            st = uvm_unmap_external_in_range(r, gpu, va, va + len - 1, deferred);
        else
            st = NV_OK;
        uvm_mutex_unlock(&tree->lock);
        if (status == NV_OK)
            status = st;
    }
    return status;
}

/* Maps the alias on every GPU the source is mapped on. All or nothing: on failure the alias range is
 * left unmapped on every GPU (a window made by this call is destroyed again, freeing its slot). */
NV_STATUS uvm_api_gasan_map_alias(UVM_GASAN_MAP_ALIAS_PARAMS *params, struct file *filp)
{
    uvm_va_space_t *va_space = uvm_va_space_get(filp);
    uvm_gasan_va_space_t *g;
    gasan_limits_t lim;
    gasan_ext_range_t *src, *dst = NULL;
    uvm_gpu_t *gpu;
    uvm_tracker_t tracker = UVM_TRACKER_INIT();
    LIST_HEAD(pieces);
    LIST_HEAD(deferred);
    NV_STATUS status, tracker_status;
    bool new_window = false;
    int mapped_gpus = 0;

    g = gasan_enter(va_space, false, &lim);
    status = gasan_validate_map_alias(params, &lim);
    if (status != NV_OK)
        goto out;
    /* The alias goes into a range gasan made for aliases, or into fresh VA outside every window. */
    new_window = !gasan_window_lookup(g, params->aliasBase, params->length, GASAN_WINDOW_ALIAS);
    if (new_window && gasan_window_overlaps(g, params->aliasBase, params->length)) {
        status = NV_ERR_UVM_ADDRESS_IN_USE;
        new_window = false;
        goto out;
    }
    if (new_window) {
        status = gasan_window_add(g, params->aliasBase, params->length, GASAN_WINDOW_ALIAS);
        if (status != NV_OK) {
            new_window = false;
            goto out;
        }
        status = gasan_create_range(va_space, params->aliasBase, params->length);
        if (status != NV_OK) {
            gasan_window_remove(g, params->aliasBase, params->length);
            new_window = false;
            goto out;
        }
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

        if (!uvm_processor_mask_test(GASAN_EXT_MAPPED_GPUS(src), gpu->id) || !uvm_gpu_va_space_get(va_space, gpu))
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
    /* Under the _rm lock RM calls are allowed; the pieces' handle references are never the last
     * (the source mappings and the new alias mappings hold theirs). */
    gasan_piece_list_free(&pieces);
    tracker_status = uvm_tracker_wait_deinit(&tracker);
    if (tracker_status != NV_OK && status == NV_OK)
        status = tracker_status;
    /* Cross-GPU rollback: the GPUs already mapped are unmapped again. */
    if (status != NV_OK && dst && !new_window)
        (void)gasan_unmap_all_gpus(va_space, dst, params->aliasBase, params->length, &deferred);
    if (!list_empty(&deferred))
        gasan_deferred_retain(g, &deferred);
    uvm_va_space_up_read_rm(va_space);
    gasan_deferred_free(g, &deferred);
    if (status != NV_OK && new_window) {
        (void)gasan_destroy_range(va_space, params->aliasBase, params->length);
        gasan_window_remove(g, params->aliasBase, params->length);
    }
out:
    gasan_leave(g);
    return status;
}

/* Unmaps [aliasBase, aliasBase + length) of an alias window. When that is the whole window, its range
 * is destroyed and the window's slot freed (another MAP_ALIAS may use the VA again); otherwise only
 * the PTEs go and the window stays reserved. */
NV_STATUS uvm_api_gasan_unmap_alias(UVM_GASAN_UNMAP_ALIAS_PARAMS *params, struct file *filp)
{
    uvm_va_space_t *va_space = uvm_va_space_get(filp);
    uvm_gasan_va_space_t *g;
    gasan_limits_t lim;
    gasan_ext_range_t *r;
    LIST_HEAD(deferred);
    NV_STATUS status;

    g = gasan_enter(va_space, false, &lim);
    status = gasan_validate_unmap_alias(params, &lim);
    if (status != NV_OK)
        goto out;
    /* Only gasan's alias ranges: never the pool or the CUDA driver's own mappings. */
    if (!gasan_window_lookup(g, params->aliasBase, params->length, GASAN_WINDOW_ALIAS)) {
        status = NV_ERR_INVALID_ADDRESS;
        goto out;
    }
    if (gasan_window_is(g, params->aliasBase, params->length, GASAN_WINDOW_ALIAS)) {
        status = gasan_destroy_range(va_space, params->aliasBase, params->length);
        if (status == NV_OK)
            gasan_window_remove(g, params->aliasBase, params->length);
        goto out;
    }
    uvm_va_space_down_read(va_space);
    r = gasan_external_range(va_space, params->aliasBase, params->length);
    if (!r)
        status = NV_ERR_INVALID_ADDRESS;
    else
        status = gasan_unmap_all_gpus(va_space, r, params->aliasBase, params->length, &deferred);
    if (!list_empty(&deferred))
        gasan_deferred_retain(g, &deferred);
    uvm_va_space_up_read(va_space);
    gasan_deferred_free(g, &deferred);
out:
    gasan_leave(g);
    return status;
}

/* ---- protection changes ------------------------------------------------------------------------
 * A protection change is a transaction over all GPUs of the VA space. For each GPU, under its range
 * tree lock: (A) describe everything without touching the GPU or the parked list's contents (the
 * pieces to map again, the parked pieces the range takes, their new mapping types, the parked
 * count afterwards), then (B) unmap and map. The parked list changes only at commit, once every
 * GPU succeeded. A failure on any GPU puts back every GPU already changed (the range unmapped, the
 * big pages around it mapped as they were) and the parked pieces taken out, so no piece is lost,
 * mapped twice or listed twice. */

typedef struct
{
    uvm_gpu_t *gpu;
    struct list_head outer;   /* mapped pages touching the range, as they were (for undo) */
    struct list_head outside; /* their parts outside the range, to map again with smaller pages */
    struct list_head inside;  /* the range's pieces, mapped and parked, with their new type */
    struct list_head taken;   /* parked pieces overlapping the range, out of g->parked until commit */
    struct list_head kept;    /* the parts of `taken` outside the range: parked at commit */
    bool changed;             /* (B) ran: the GPU's mappings may differ from `outer` */
} gasan_prot_txn_t;

static void gasan_txn_init(gasan_prot_txn_t *t, uvm_gpu_t *gpu)
{
    t->gpu = gpu;
    INIT_LIST_HEAD(&t->outer);
    INIT_LIST_HEAD(&t->outside);
    INIT_LIST_HEAD(&t->inside);
    INIT_LIST_HEAD(&t->taken);
    INIT_LIST_HEAD(&t->kept);
    t->changed = false;
}

static void gasan_txn_free(gasan_prot_txn_t *t)
{
    gasan_piece_list_free(&t->outer);
    gasan_piece_list_free(&t->outside);
    gasan_piece_list_free(&t->inside);
    gasan_piece_list_free(&t->taken);
    gasan_piece_list_free(&t->kept);
}

/* (A) for one GPU; the caller holds the tree lock. */
static NV_STATUS gasan_txn_describe(uvm_gasan_va_space_t *g,
                                    gasan_ext_range_t *r,
                                    gasan_prot_txn_t *t,
                                    NvU64 base,
                                    NvU64 end,
                                    NvU32 prot)
{
    uvm_gpu_t *gpu = t->gpu;
    NvU64 serial = gasan_range_serial(r);
    uvm_ext_gpu_map_t *m;
    gasan_piece_t *p, *next;

    if (uvm_processor_mask_test(GASAN_EXT_MAPPED_GPUS(r), gpu->id)) {
        uvm_ext_gpu_map_for_each_in(m, r, gpu, base, end) {
            NvU64 page = m->pt_range_vec.page_size;
            NvU64 o_start = max(m->node.start, base & ~(page - 1));
            NvU64 o_end = min(m->node.end, ((end + page) & ~(page - 1)) - 1);
            NvU64 i_start = max(m->node.start, base), i_end = min(m->node.end, end);

            if (!m->mem_handle)
                return NV_ERR_INVALID_ADDRESS; /* sparse: not part of the pool's allocations */
            p = gasan_piece_from_map(m, serial, o_start, o_end - o_start + 1);
            if (!p)
                return NV_ERR_NO_MEMORY;
            list_add_tail(&p->node, &t->outer);
            p = gasan_piece_from_map(m, serial, i_start, i_end - i_start + 1);
            if (!p)
                return NV_ERR_NO_MEMORY;
            list_add_tail(&p->node, &t->inside);
            if (o_start < i_start) {
                p = gasan_piece_from_map(m, serial, o_start, i_start - o_start);
                if (!p)
                    return NV_ERR_NO_MEMORY;
                list_add_tail(&p->node, &t->outside);
            }
            if (i_end < o_end) {
                p = gasan_piece_from_map(m, serial, i_end + 1, o_end - i_end);
                if (!p)
                    return NV_ERR_NO_MEMORY;
                list_add_tail(&p->node, &t->outside);
            }
        }
    }

    /* Parked pieces overlapping the range: the overlap joins `inside`, the rest is kept parked. The
     * piece itself moves to `taken` (back to g->parked on undo, freed on commit). A piece parked
     * from a range that no longer exists (the CUDA driver freed it; this range is another one at the
     * same address) is stale: taken and not brought back, so it is freed at commit. */
    list_for_each_entry_safe(p, next, &g->parked, node) {
        NvU64 s, e;
        gasan_piece_t *q;

        if (p->gpu != gpu || p->start > end || p->start + p->length - 1 < base)
            continue;
        list_move_tail(&p->node, &t->taken);
        if (p->range_serial != serial)
            continue;
        s = max(p->start, base);
        e = min(p->start + p->length - 1, end);
        if (p->start < s) {
            q = gasan_piece_slice(p, p->start, s - p->start);
            if (!q)
                return NV_ERR_NO_MEMORY;
            list_add_tail(&q->node, &t->kept);
        }
        if (e < p->start + p->length - 1) {
            q = gasan_piece_slice(p, e + 1, p->start + p->length - 1 - e);
            if (!q)
                return NV_ERR_NO_MEMORY;
            list_add_tail(&q->node, &t->kept);
        }
        q = gasan_piece_slice(p, s, e - s + 1);
        if (!q)
            return NV_ERR_NO_MEMORY;
        list_add_tail(&q->node, &t->inside);
    }

    /* The new mapping type of each piece of the range: read-only, or back to what it was mapped
     * with (refused for a mapping made read-only). */
    if (prot != UVM_GASAN_PROT_NONE) {
        list_for_each_entry(p, &t->inside, node) {
            gasan_u32 type;
            NV_STATUS status = gasan_prot_mapping_type(prot, p->orig_mapping_type, &type);

            if (status != NV_OK)
                return status;
            p->mapping_type = type;
        }
    }
    return NV_OK;
}

/* How the parked count changes when t commits. */
static long gasan_txn_parked_delta(gasan_prot_txn_t *t, NvU32 prot)
{
    long delta = (long)gasan_piece_list_count(&t->kept) - (long)gasan_piece_list_count(&t->taken);

    if (prot == UVM_GASAN_PROT_NONE)
        delta += gasan_piece_list_count(&t->inside);
    return delta;
}

/* (B) for one GPU; the caller holds the tree lock. */
static NV_STATUS gasan_txn_apply(gasan_ext_range_t *r, gasan_prot_txn_t *t, NvU32 prot, uvm_tracker_t *tracker)
{
    gasan_piece_t *p;
    NV_STATUS status;

    t->changed = true;
    /* Unmap the big pages involved (their edges are page aligned, so splitting succeeds). */
    list_for_each_entry(p, &t->outer, node) {
        status = uvm_unmap_external_in_range(r, t->gpu, p->start, p->start + p->length - 1, NULL);
        if (status != NV_OK)
            return status;
    }
    /* Bring back the neighbours with the pages their new edges allow. */
    list_for_each_entry(p, &t->outside, node) {
        status = gasan_map_piece_split(r, p, p->mapping_type, tracker);
        if (status != NV_OK)
            return status;
    }
    if (prot == UVM_GASAN_PROT_NONE)
        return NV_OK;
    list_for_each_entry(p, &t->inside, node) {
        status = gasan_map_piece_split(r, p, p->mapping_type, tracker);
        if (status != NV_OK)
            return status;
    }
    return NV_OK;
}

/* Puts one GPU back as it was: the range unmapped (it held parked pieces, or is mapped again from
 * `outer`), the pages around it as they were, the taken parked pieces parked again. */
static void gasan_txn_undo(uvm_gasan_va_space_t *g, gasan_ext_range_t *r, gasan_prot_txn_t *t, NvU64 base, NvU64 end,
                           uvm_tracker_t *tracker)
{
    uvm_ext_gpu_range_tree_t *tree = uvm_ext_gpu_range_tree(r, t->gpu);
    gasan_piece_t *p;
    NV_STATUS status = NV_OK;

    if (t->changed) {
        uvm_mutex_lock(&tree->lock);
        status = uvm_unmap_external_in_range(r, t->gpu, base, end, NULL);
        list_for_each_entry(p, &t->outer, node) {
            if (status == NV_OK)
                status = gasan_map_piece_split(r, p, p->mapping_type, tracker);
        }
        uvm_mutex_unlock(&tree->lock);
        if (status != NV_OK)
            UVM_ERR_PRINT("gasan: protection change on GPU %s failed and could not be undone (%s): "
                          "[0x%llx, 0x%llx] stays unmapped\n",
                          uvm_gpu_name(t->gpu), nvstatusToString(status), base, end);
    }
    list_splice_tail_init(&t->taken, &g->parked);
}

/* Makes one GPU's change final. */
static void gasan_txn_commit(uvm_gasan_va_space_t *g, gasan_prot_txn_t *t, NvU32 prot)
{
    g->parked_count = g->parked_count + gasan_txn_parked_delta(t, prot);
    list_splice_tail_init(&t->kept, &g->parked);
    if (prot == UVM_GASAN_PROT_NONE)
        list_splice_tail_init(&t->inside, &g->parked);
}

NV_STATUS uvm_api_gasan_set_protection(UVM_GASAN_SET_PROTECTION_PARAMS *params, struct file *filp)
{
    uvm_va_space_t *va_space = uvm_va_space_get(filp);
    uvm_gasan_va_space_t *g;
    gasan_limits_t lim;
    uvm_tracker_t tracker = UVM_TRACKER_INIT();
    gasan_prot_txn_t *txns = NULL;
    NvU64 base = params->base, end = params->base + params->length - 1;
    long parked = 0;
    gasan_ext_range_t *r;
    uvm_gpu_t *gpu;
    NvU32 n = 0, i;
    NV_STATUS status;

    g = gasan_enter(va_space, false, &lim);
    status = gasan_validate_set_protection(params, &lim);
    if (status != NV_OK)
        goto out;
    txns = uvm_kvmalloc_zero(sizeof(*txns) * UVM_ID_MAX_GPUS);
    if (!txns) {
        status = NV_ERR_NO_MEMORY;
        goto out;
    }
    parked = g->parked_count;

    uvm_va_space_down_read_rm(va_space);
    r = gasan_external_range(va_space, params->base, params->length);
    if (!r) {
        status = NV_ERR_INVALID_ADDRESS; /* the range must lie in one external range */
        goto out_unlock;
    }
    for_each_va_space_gpu(gpu, va_space) {
        uvm_gpu_va_space_t *gpu_va_space = uvm_gpu_va_space_get(va_space, gpu);
        uvm_ext_gpu_range_tree_t *tree = uvm_ext_gpu_range_tree(r, gpu);
        gasan_prot_txn_t *t;

        if (!gpu_va_space)
            continue;
        if (!uvm_mmu_page_size_supported(&gpu_va_space->page_tables, params->pageSize)) {
            status = NV_ERR_NOT_SUPPORTED;
            break;
        }
        t = &txns[n++];
        gasan_txn_init(t, gpu);
        uvm_mutex_lock(&tree->lock);
        status = gasan_txn_describe(g, r, t, base, end, params->prot);
        if (status == NV_OK) {
            parked += gasan_txn_parked_delta(t, params->prot);
            if (parked > GASAN_MAX_PARKED)
                status = NV_ERR_INSUFFICIENT_RESOURCES;
        }
        if (status == NV_OK)
            status = gasan_txn_apply(r, t, params->prot, &tracker);
        uvm_mutex_unlock(&tree->lock);
        if (status != NV_OK)
            break;
    }
    for (i = 0; i < n; i++) {
        if (status == NV_OK)
            gasan_txn_commit(g, &txns[i], params->prot);
        else
            gasan_txn_undo(g, r, &txns[i], base, end, &tracker);
    }
out_unlock:
    uvm_va_space_up_read_rm(va_space);
    if (uvm_tracker_wait_deinit(&tracker) != NV_OK && status == NV_OK)
        status = NV_ERR_INVALID_STATE;
    for (i = 0; i < n; i++)
        gasan_txn_free(&txns[i]);
out:
    uvm_kvfree(txns);
    gasan_leave(g);
    return status;
}

/* Maps sparse zero-reading PTEs over [base, base + length) on every GPU. All or nothing across GPUs:
 * on failure the range is unmapped on every GPU (a window made by this call is destroyed again).
 * Runs under the plain VA space read lock, as upstream's UvmMapExternalSparse: what the sparse
 * mapping replaces is freed through a deferred list after unlocking. */
NV_STATUS uvm_api_gasan_map_sparse_zero(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS *params, struct file *filp)
{
    uvm_va_space_t *va_space = uvm_va_space_get(filp);
    uvm_gasan_va_space_t *g;
    gasan_limits_t lim;
    gasan_ext_range_t *r;
    uvm_gpu_t *gpu;
    LIST_HEAD(deferred);
    NV_STATUS status;
    bool new_window;

    g = gasan_enter(va_space, false, &lim);
    status = gasan_validate_map_sparse_zero(params, &lim);
    if (status != NV_OK)
        goto out;
    new_window = !gasan_window_lookup(g, params->base, params->length, GASAN_WINDOW_SPARSE);
    if (new_window && gasan_window_overlaps(g, params->base, params->length)) {
        status = NV_ERR_UVM_ADDRESS_IN_USE;
        goto out;
    }
    uvm_va_space_down_read(va_space);
    for_each_va_space_gpu(gpu, va_space) {
        if (!gasan_gpu_sparse_supported(gpu))
            status = NV_ERR_NOT_SUPPORTED;
    }
    uvm_va_space_up_read(va_space);
    if (status != NV_OK)
        goto out;
    if (new_window) {
        status = gasan_window_add(g, params->base, params->length, GASAN_WINDOW_SPARSE);
        if (status != NV_OK)
            goto out;
        status = gasan_create_range(va_space, params->base, params->length);
        if (status != NV_OK) {
            gasan_window_remove(g, params->base, params->length);
            goto out;
        }
    }

    uvm_va_space_down_read(va_space);
    r = gasan_external_range(va_space, params->base, params->length);
    if (!r)
        status = NV_ERR_INVALID_ADDRESS;
    for_each_va_space_gpu(gpu, va_space) {
        if (status != NV_OK || !uvm_gpu_va_space_get(va_space, gpu))
            continue;
        /* Checked again: a GPU may have been registered since the check above (the lock was
         * dropped to create the range), and uvm_map_external_sparse_on_gpu() does not check. */
        if (!gasan_gpu_sparse_supported(gpu))
            status = NV_ERR_NOT_SUPPORTED;
        else
            status = uvm_map_external_sparse_on_gpu(r, gpu, params->base, params->length, &deferred);
    }
    /* Cross-GPU rollback (an existing window; a new one is destroyed below). */
    if (status != NV_OK && r && !new_window)
        (void)gasan_unmap_all_gpus(va_space, r, params->base, params->length, &deferred);
    if (!list_empty(&deferred))
        gasan_deferred_retain(g, &deferred);
    uvm_va_space_up_read(va_space);
    gasan_deferred_free(g, &deferred);
    if (status != NV_OK && new_window) {
        (void)gasan_destroy_range(va_space, params->base, params->length);
        gasan_window_remove(g, params->base, params->length);
    }
out:
    gasan_leave(g);
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
again:
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
    if (done == 0 && !READ_ONCE(q->closed)) {
        /* Another reader of the same file (a forked child, a thread) took the events this one
         * woke up for: a blocking read waits again, only a non-blocking one says EAGAIN. */
        if (!(filp->f_flags & O_NONBLOCK))
            goto again;
        return -EAGAIN;
    }
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

    WRITE_ONCE(q->reader_gone, true);
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

/* The descriptor UVM_GASAN_SUBSCRIBE_FAULTS hands out, installed only once the parameters reached
 * userspace (an fd number userspace never saw must not exist). */
typedef struct
{
    int fd;
    struct file *file;
    gasan_fault_queue_t *queue;
} gasan_pending_fd_t;

static NV_STATUS gasan_subscribe_faults(UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS *params, struct file *filp,
                                        gasan_pending_fd_t *pending)
{
    uvm_va_space_t *va_space = uvm_va_space_get(filp);
    uvm_gasan_va_space_t *g;
    gasan_limits_t lim;
    gasan_fault_queue_t *q, *old = NULL;
    struct file *file;
    NV_STATUS status;
    int fd;

    g = gasan_enter(va_space, false, &lim);
    status = gasan_validate_subscribe_faults(params, &lim);
    if (status != NV_OK)
        goto out;
    /* One subscriber per pool; a closed subscription's queue is replaced. */
    if (g->faults && !READ_ONCE(g->faults->reader_gone)) {
        status = NV_ERR_STATE_IN_USE;
        goto out;
    }
    q = kzalloc(sizeof(*q), GASAN_GFP);
    if (!q) {
        status = NV_ERR_NO_MEMORY;
        goto out;
    }
    kref_init(&q->ref); /* the VA space's reference */
    spin_lock_init(&q->lock);
    init_waitqueue_head(&q->wait);

    fd = get_unused_fd_flags(O_CLOEXEC);
    if (fd < 0) {
        kfree(q);
        status = NV_ERR_INSUFFICIENT_RESOURCES;
        goto out;
    }
    kref_get(&q->ref); /* the file's reference, dropped by gasan_fault_release() */
    file = anon_inode_getfile("[gasan-faults]", &gasan_fault_fops, q,
                              O_RDONLY | ((params->flags & UVM_GASAN_SUBSCRIBE_NONBLOCK) ? O_NONBLOCK : 0));
    if (IS_ERR(file)) {
        put_unused_fd(fd);
        kfree(q);
        status = NV_ERR_INSUFFICIENT_RESOURCES;
        goto out;
    }
    /* Publish under the VA space lock: the fault hook reads g->faults under it. */
    uvm_va_space_down_write(va_space);
    old = g->faults;
    g->faults = q;
    uvm_va_space_up_write(va_space);
    if (old)
        kref_put(&old->ref, gasan_fault_queue_release);

    params->eventFd = fd;
    pending->fd = fd;
    pending->file = file;
    pending->queue = q;
out:
    gasan_leave(g);
    return status;
}

/* The parameters could not be copied back: withdraw the subscription and its descriptor. */
static void gasan_subscribe_abort(struct file *filp, gasan_pending_fd_t *pending)
{
    uvm_va_space_t *va_space = uvm_va_space_get(filp);
    uvm_gasan_va_space_t *g = gasan_get(va_space, false);
    bool unpublished = false;

    if (g) {
        mutex_lock(&g->lock);
        uvm_va_space_down_write(va_space);
        if (g->faults == pending->queue) {
            g->faults = NULL;
            unpublished = true;
        }
        uvm_va_space_up_write(va_space);
        mutex_unlock(&g->lock);
    }
    if (unpublished)
        kref_put(&pending->queue->ref, gasan_fault_queue_release);
    fput(pending->file); /* its release drops the file's reference */
    put_unused_fd(pending->fd);
}

/* ---- dispatch ----------------------------------------------------------------------------------- */

bool uvm_gasan_owns_cmd(unsigned int cmd)
{
    /* Directional _IOC numbers are >= 1 << 30 on every architecture nvidia-uvm builds for, so no
     * plain-numbered nvidia-uvm command can have gasan's type byte here. */
    return _IOC_TYPE(cmd) == UVM_GASAN_IOC_TYPE && _IOC_DIR(cmd) != _IOC_NONE;
}

/* Every parameter block ends with { rmStatus, pad0 }. */
#define GASAN_CHECK_TAIL(t) \
    BUILD_BUG_ON(offsetof(t, rmStatus) != sizeof(t) - 2 * sizeof(gasan_u32) || sizeof(t) > 32)

long uvm_gasan_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
    union {
        UVM_GASAN_IDENTIFY_PARAMS identify;
        UVM_GASAN_QUERY_PARAMS query;
        UVM_GASAN_RESERVE_POOL_PARAMS reserve_pool;
        UVM_GASAN_MAP_ALIAS_PARAMS map_alias;
        UVM_GASAN_UNMAP_ALIAS_PARAMS unmap_alias;
        UVM_GASAN_SET_PROTECTION_PARAMS set_protection;
        UVM_GASAN_MAP_SPARSE_ZERO_PARAMS map_sparse_zero;
        UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS subscribe_faults;
    } u;
    gasan_pending_fd_t pending = { .fd = -1 };
    gasan_u32 rm_status;
    size_t size;

    GASAN_CHECK_TAIL(UVM_GASAN_IDENTIFY_PARAMS);
    GASAN_CHECK_TAIL(UVM_GASAN_QUERY_PARAMS);
    GASAN_CHECK_TAIL(UVM_GASAN_RESERVE_POOL_PARAMS);
    GASAN_CHECK_TAIL(UVM_GASAN_MAP_ALIAS_PARAMS);
    GASAN_CHECK_TAIL(UVM_GASAN_UNMAP_ALIAS_PARAMS);
    GASAN_CHECK_TAIL(UVM_GASAN_SET_PROTECTION_PARAMS);
    GASAN_CHECK_TAIL(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS);
    GASAN_CHECK_TAIL(UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS);

    switch (cmd) {
    case UVM_GASAN_IDENTIFY:         size = sizeof(u.identify); break;
    case UVM_GASAN_QUERY:            size = sizeof(u.query); break;
    case UVM_GASAN_RESERVE_POOL:     size = sizeof(u.reserve_pool); break;
    case UVM_GASAN_MAP_ALIAS:        size = sizeof(u.map_alias); break;
    case UVM_GASAN_UNMAP_ALIAS:      size = sizeof(u.unmap_alias); break;
    case UVM_GASAN_SET_PROTECTION:   size = sizeof(u.set_protection); break;
    case UVM_GASAN_MAP_SPARSE_ZERO:  size = sizeof(u.map_sparse_zero); break;
    case UVM_GASAN_SUBSCRIBE_FAULTS: size = sizeof(u.subscribe_faults); break;
    default:
        /* A known command with another size or direction is a caller built against another ABI. */
        if (_IOC_NR(cmd) >= UVM_GASAN_NR_IDENTIFY && _IOC_NR(cmd) < UVM_GASAN_NR_COUNT)
            return -EINVAL;
        return -ENOTTY;
    }
    if (copy_from_user(&u, (void __user *)arg, size))
        return -EFAULT;

    rm_status = uvm_global_get_status();
    /* Only the identification works before UVM_INITIALIZE. */
    if (rm_status == NV_OK && cmd != UVM_GASAN_IDENTIFY && !uvm_fd_va_space(filp))
        rm_status = NV_ERR_ILLEGAL_ACTION;
    if (rm_status == NV_OK) {
        switch (cmd) {
        case UVM_GASAN_IDENTIFY:         rm_status = uvm_api_gasan_identify(&u.identify, filp); break;
        case UVM_GASAN_QUERY:            rm_status = uvm_api_gasan_query(&u.query, filp); break;
        case UVM_GASAN_RESERVE_POOL:     rm_status = uvm_api_gasan_reserve_pool(&u.reserve_pool, filp); break;
        case UVM_GASAN_MAP_ALIAS:        rm_status = uvm_api_gasan_map_alias(&u.map_alias, filp); break;
        case UVM_GASAN_UNMAP_ALIAS:      rm_status = uvm_api_gasan_unmap_alias(&u.unmap_alias, filp); break;
        case UVM_GASAN_SET_PROTECTION:   rm_status = uvm_api_gasan_set_protection(&u.set_protection, filp); break;
        case UVM_GASAN_MAP_SPARSE_ZERO:  rm_status = uvm_api_gasan_map_sparse_zero(&u.map_sparse_zero, filp); break;
        case UVM_GASAN_SUBSCRIBE_FAULTS: rm_status = gasan_subscribe_faults(&u.subscribe_faults, filp, &pending); break;
        }
    }
    memcpy((char *)&u + size - 2 * sizeof(gasan_u32), &rm_status, sizeof(rm_status));

    if (copy_to_user((void __user *)arg, &u, size)) {
        if (pending.file)
            gasan_subscribe_abort(filp, &pending);
        return -EFAULT;
    }
    if (pending.file)
        fd_install(pending.fd, pending.file);
    return 0;
}

/* ---- hooks -------------------------------------------------------------------------------------- */

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

void uvm_gasan_unregister_gpu(uvm_va_space_t *va_space, uvm_gpu_t *gpu)
{
    uvm_gasan_va_space_t *g = gasan_get(va_space, false);
    gasan_piece_t *p, *next;
    LIST_HEAD(dead);

    if (!g)
        return;
    /* The GPU left va_space->registered_gpus under the VA space write lock before this runs, so no
     * protection change can park a new piece of it; the ones parked before go now, while the
     * caller still holds its reference on the GPU. */
    mutex_lock(&g->lock);
    list_for_each_entry_safe(p, next, &g->parked, node) {
        if (gasan_piece_uses_gpu(p, gpu)) {
            list_move_tail(&p->node, &dead);
            g->parked_count--;
        }
    }
    mutex_unlock(&g->lock);
    gasan_piece_list_free(&dead);
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

    /* Every parked piece's GPUs are still registered: pieces of unregistered GPUs were released by
     * uvm_gasan_unregister_gpu(), and the VA space drops its GPUs after this. */
    gasan_piece_list_free(&g->parked);
    if (g->faults) {
        WRITE_ONCE(g->faults->closed, true);
        wake_up_interruptible(&g->faults->wait);
        kref_put(&g->faults->ref, gasan_fault_queue_release);
    }
    kfree(g);
}

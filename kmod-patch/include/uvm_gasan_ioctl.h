/* SPDX-License-Identifier: MIT
 *
 * gasan extensions to nvidia-uvm: the ioctl ABI shared by the kernel patch and gasan's uvm-shim.
 * Numbers follow the last upstream regular ioctl (UVM_DISCARD = 80). Every parameter block has a
 * fixed layout (u64 fields 8-byte aligned, explicit padding) and ends with rmStatus (OUT).
 * Userspace (uvm-shim) mirrors these structs; sizes and offsets are asserted on both sides.
 */
#ifndef UVM_GASAN_IOCTL_H
#define UVM_GASAN_IOCTL_H

#ifdef __KERNEL__
#include <linux/types.h>
typedef __u64 gasan_u64;
typedef __u32 gasan_u32;
#else
#include <stdint.h>
typedef uint64_t gasan_u64;
typedef uint32_t gasan_u32;
#endif

#define UVM_GASAN_ABI_VERSION 1u

#define UVM_GASAN_QUERY           81 /* version and capabilities */
#define UVM_GASAN_RESERVE_POOL    82 /* reserve the pool region in this VA space */
#define UVM_GASAN_MAP_ALIAS       83 /* map an external allocation's pages at an alias address */
#define UVM_GASAN_UNMAP_ALIAS     84
#define UVM_GASAN_SET_PROTECTION  85 /* map / unmap / protect at 64 KiB or 4 KiB inside the pool */
#define UVM_GASAN_MAP_SPARSE_ZERO 86 /* zero-reading sparse range (shadow) */
#define UVM_GASAN_SUBSCRIBE_FAULTS 87 /* pollable fd with fatal-fault events for the pool */

/* Capability bits (UVM_GASAN_QUERY_PARAMS.caps). */
#define UVM_GASAN_CAP_PAGE_4K       (1u << 0)
#define UVM_GASAN_CAP_PAGE_64K      (1u << 1)
#define UVM_GASAN_CAP_GPU_ONLY_VA   (1u << 2) /* alias addresses above 2^47 */
#define UVM_GASAN_CAP_SPARSE_ZERO   (1u << 3)
#define UVM_GASAN_CAP_FAULT_EVENTS  (1u << 4)

/* Protections (UVM_GASAN_SET_PROTECTION_PARAMS.prot). */
#define UVM_GASAN_PROT_NONE  0u /* unmapped: any access faults */
#define UVM_GASAN_PROT_RO    1u
#define UVM_GASAN_PROT_RW    3u

typedef struct {
    gasan_u32 abiVersion;     /* OUT */
    gasan_u32 caps;           /* OUT */
    gasan_u64 maxVa;          /* OUT: highest GPU VA usable for aliases (exclusive) */
    gasan_u32 rmStatus;       /* OUT */
    gasan_u32 pad0;
} UVM_GASAN_QUERY_PARAMS;

typedef struct {
    gasan_u64 base;           /* IN: pool base, 2 MiB aligned */
    gasan_u64 length;         /* IN: multiple of 2 MiB */
    gasan_u32 rmStatus;       /* OUT */
    gasan_u32 pad0;
} UVM_GASAN_RESERVE_POOL_PARAMS;

typedef struct {
    gasan_u64 srcBase;        /* IN: start of the mapped external allocation (inside the pool) */
    gasan_u64 length;         /* IN */
    gasan_u64 aliasBase;      /* IN: alias address (may be above 2^47: GPU-only) */
    gasan_u32 rmStatus;       /* OUT */
    gasan_u32 pad0;
} UVM_GASAN_MAP_ALIAS_PARAMS;

typedef struct {
    gasan_u64 aliasBase;      /* IN */
    gasan_u64 length;         /* IN */
    gasan_u32 rmStatus;       /* OUT */
    gasan_u32 pad0;
} UVM_GASAN_UNMAP_ALIAS_PARAMS;

typedef struct {
    gasan_u64 base;           /* IN: inside the pool, aligned to pageSize */
    gasan_u64 length;         /* IN: multiple of pageSize */
    gasan_u32 pageSize;       /* IN: 4096 or 65536 */
    gasan_u32 prot;           /* IN: UVM_GASAN_PROT_* */
    gasan_u32 rmStatus;       /* OUT */
    gasan_u32 pad0;
} UVM_GASAN_SET_PROTECTION_PARAMS;

typedef struct {
    gasan_u64 base;           /* IN: shadow range, 2 MiB aligned */
    gasan_u64 length;         /* IN */
    gasan_u32 rmStatus;       /* OUT */
    gasan_u32 pad0;
} UVM_GASAN_MAP_SPARSE_ZERO_PARAMS;

typedef struct {
    gasan_u32 eventFd;        /* OUT: pollable fd; reads return UVM_GASAN_FAULT_EVENT records */
    gasan_u32 rmStatus;       /* OUT */
} UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS;

typedef struct {
    gasan_u64 address;        /* faulting GPU VA */
    gasan_u64 timestampNs;
    gasan_u32 accessType;     /* UvmEventMemoryAccessType: 1 read, 2 write, 3 atomic, 4 prefetch */
    gasan_u32 gpuIndex;
} UVM_GASAN_FAULT_EVENT;

#define GASAN_ASSERT_SIZE(t, n) _Static_assert(sizeof(t) == (n), #t " layout changed")
GASAN_ASSERT_SIZE(UVM_GASAN_QUERY_PARAMS, 24);
GASAN_ASSERT_SIZE(UVM_GASAN_RESERVE_POOL_PARAMS, 24);
GASAN_ASSERT_SIZE(UVM_GASAN_MAP_ALIAS_PARAMS, 32);
GASAN_ASSERT_SIZE(UVM_GASAN_UNMAP_ALIAS_PARAMS, 24);
GASAN_ASSERT_SIZE(UVM_GASAN_SET_PROTECTION_PARAMS, 32);
GASAN_ASSERT_SIZE(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS, 24);
GASAN_ASSERT_SIZE(UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS, 8);
GASAN_ASSERT_SIZE(UVM_GASAN_FAULT_EVENT, 24);

#endif /* UVM_GASAN_IOCTL_H */

/* SPDX-License-Identifier: MIT
 *
 * gasan extensions to nvidia-uvm: the ioctl ABI shared by the kernel patch and gasan's uvm-shim.
 *
 * Numbering. nvidia-uvm numbers its own ioctls with plain small integers (UVM_IOCTL_BASE(i) = i:
 * 1..80 on the 550-595 branches, the built-in tests from 200 up), and public forks add theirs the
 * same way next to them. gasan's commands are instead encoded with the kernel's _IOWR() under a
 * type byte of their own: direction and parameter size are part of the number, so every gasan
 * command is at least 1 << 30 and no plain-numbered command (upstream's, a fork's) can equal one,
 * and a caller with a differently sized struct sends a different number, which is refused.
 *
 * Identification. UVM_GASAN_IDENTIFY is answered before UVM_INITIALIZE, touches no state and
 * returns UVM_GASAN_MAGIC and UVM_GASAN_ABI_VERSION; userspace sends it before anything else, and
 * sends nothing else unless both match. The module also shows the ABI version in
 * /sys/module/nvidia_uvm/parameters/gasan_abi, so userspace can recognise a stock module without
 * sending it any gasan ioctl at all.
 *
 * Every parameter block has a fixed layout (u64 fields 8-byte aligned, explicit padding that must
 * be zero) and ends with rmStatus (OUT). Userspace (uvm-shim) mirrors these structs through bindgen;
 * sizes are asserted on both sides.
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

#define UVM_GASAN_ABI_VERSION 2u
/* "GASANUVM" read as a little-endian u64. */
#define UVM_GASAN_MAGIC 0x4d56554e41534147ull

/* _IOWR(UVM_GASAN_IOC_TYPE, UVM_GASAN_NR_x, UVM_GASAN_x_PARAMS) is command x. */
#define UVM_GASAN_IOC_TYPE 0x67u /* 'g' */
#define UVM_GASAN_NR_IDENTIFY         0x01u /* magic and ABI version; no state, no init needed */
#define UVM_GASAN_NR_QUERY            0x02u /* capabilities of this VA space's GPUs */
#define UVM_GASAN_NR_RESERVE_POOL     0x03u /* reserve the pool region in this VA space */
#define UVM_GASAN_NR_MAP_ALIAS        0x04u /* map pool pages again at an alias address */
#define UVM_GASAN_NR_UNMAP_ALIAS      0x05u
#define UVM_GASAN_NR_SET_PROTECTION   0x06u /* none / ro / rw at 64 KiB or 4 KiB inside the pool */
#define UVM_GASAN_NR_MAP_SPARSE_ZERO  0x07u /* zero-reading sparse range (shadow) */
#define UVM_GASAN_NR_SUBSCRIBE_FAULTS 0x08u /* pollable fd with fatal-fault events for the pool */
#define UVM_GASAN_NR_COUNT            0x09u

#define UVM_GASAN_IDENTIFY         _IOWR(UVM_GASAN_IOC_TYPE, UVM_GASAN_NR_IDENTIFY, UVM_GASAN_IDENTIFY_PARAMS)
#define UVM_GASAN_QUERY            _IOWR(UVM_GASAN_IOC_TYPE, UVM_GASAN_NR_QUERY, UVM_GASAN_QUERY_PARAMS)
#define UVM_GASAN_RESERVE_POOL     _IOWR(UVM_GASAN_IOC_TYPE, UVM_GASAN_NR_RESERVE_POOL, UVM_GASAN_RESERVE_POOL_PARAMS)
#define UVM_GASAN_MAP_ALIAS        _IOWR(UVM_GASAN_IOC_TYPE, UVM_GASAN_NR_MAP_ALIAS, UVM_GASAN_MAP_ALIAS_PARAMS)
#define UVM_GASAN_UNMAP_ALIAS      _IOWR(UVM_GASAN_IOC_TYPE, UVM_GASAN_NR_UNMAP_ALIAS, UVM_GASAN_UNMAP_ALIAS_PARAMS)
#define UVM_GASAN_SET_PROTECTION   _IOWR(UVM_GASAN_IOC_TYPE, UVM_GASAN_NR_SET_PROTECTION, UVM_GASAN_SET_PROTECTION_PARAMS)
#define UVM_GASAN_MAP_SPARSE_ZERO  _IOWR(UVM_GASAN_IOC_TYPE, UVM_GASAN_NR_MAP_SPARSE_ZERO, UVM_GASAN_MAP_SPARSE_ZERO_PARAMS)
#define UVM_GASAN_SUBSCRIBE_FAULTS _IOWR(UVM_GASAN_IOC_TYPE, UVM_GASAN_NR_SUBSCRIBE_FAULTS, UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS)

/* Capability bits (UVM_GASAN_QUERY_PARAMS.caps). */
#define UVM_GASAN_CAP_PAGE_4K       (1u << 0)
#define UVM_GASAN_CAP_PAGE_64K      (1u << 1)
#define UVM_GASAN_CAP_GPU_ONLY_VA   (1u << 2) /* alias addresses above 2^47 */
#define UVM_GASAN_CAP_SPARSE_ZERO   (1u << 3)
#define UVM_GASAN_CAP_FAULT_EVENTS  (1u << 4)

/* Protections (UVM_GASAN_SET_PROTECTION_PARAMS.prot). */
#define UVM_GASAN_PROT_NONE  0u /* unmapped: any access faults */
#define UVM_GASAN_PROT_RO    1u
#define UVM_GASAN_PROT_RW    3u /* back to the access the mapping was made with (never above it) */

/* UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS.flags */
#define UVM_GASAN_SUBSCRIBE_NONBLOCK (1u << 0) /* the fd is opened O_NONBLOCK */

/* The NV_STATUS values the gasan ioctls return in rmStatus for bad input (nvstatuscodes.h; the
 * kernel side asserts they match). */
#define UVM_GASAN_ST_OK                     0x00u
#define UVM_GASAN_ST_ILLEGAL_ACTION         0x16u /* NV_ERR_ILLEGAL_ACTION: fd not UVM_INITIALIZEd */
#define UVM_GASAN_ST_INSUFFICIENT_RESOURCES 0x1au /* windows or parked pieces at their limit */
#define UVM_GASAN_ST_INVALID_ACCESS_TYPE    0x1du /* RW asked of a read-only mapping */
#define UVM_GASAN_ST_INVALID_ADDRESS        0x1eu /* misaligned, zero, empty, wrapping, outside */
#define UVM_GASAN_ST_INVALID_ARGUMENT       0x1fu /* unknown page size, prot, flag; padding != 0 */
#define UVM_GASAN_ST_INVALID_STATE          0x40u /* no pool yet */
#define UVM_GASAN_ST_NOT_SUPPORTED          0x56u
#define UVM_GASAN_ST_OUT_OF_RANGE           0x5bu /* beyond what a GPU can address */
#define UVM_GASAN_ST_STATE_IN_USE           0x63u /* second pool, second subscriber */
#define UVM_GASAN_ST_ADDRESS_IN_USE         0x68u /* NV_ERR_UVM_ADDRESS_IN_USE */

typedef struct {
    gasan_u64 magic;          /* OUT: UVM_GASAN_MAGIC */
    gasan_u32 abiVersion;     /* OUT: UVM_GASAN_ABI_VERSION */
    gasan_u32 nrCount;        /* OUT: UVM_GASAN_NR_COUNT (commands are 1 .. nrCount - 1) */
    gasan_u32 rmStatus;       /* OUT */
    gasan_u32 pad0;           /* IN: 0 */
} UVM_GASAN_IDENTIFY_PARAMS;

typedef struct {
    gasan_u32 abiVersion;     /* OUT */
    gasan_u32 caps;           /* OUT */
    gasan_u64 maxVa;          /* OUT: highest GPU VA usable for aliases (exclusive) */
    gasan_u32 rmStatus;       /* OUT */
    gasan_u32 pad0;           /* IN: 0 */
} UVM_GASAN_QUERY_PARAMS;

typedef struct {
    gasan_u64 base;           /* IN: pool base, 2 MiB aligned, not 0 */
    gasan_u64 length;         /* IN: multiple of 2 MiB */
    gasan_u32 rmStatus;       /* OUT */
    gasan_u32 pad0;           /* IN: 0 */
} UVM_GASAN_RESERVE_POOL_PARAMS;

typedef struct {
    gasan_u64 srcBase;        /* IN: start of the mapped external allocation (inside the pool) */
    gasan_u64 length;         /* IN */
    gasan_u64 aliasBase;      /* IN: alias address (may be above 2^47: GPU-only), outside the pool */
    gasan_u32 rmStatus;       /* OUT */
    gasan_u32 pad0;           /* IN: 0 */
} UVM_GASAN_MAP_ALIAS_PARAMS;

typedef struct {
    gasan_u64 aliasBase;      /* IN */
    gasan_u64 length;         /* IN */
    gasan_u32 rmStatus;       /* OUT */
    gasan_u32 pad0;           /* IN: 0 */
} UVM_GASAN_UNMAP_ALIAS_PARAMS;

typedef struct {
    gasan_u64 base;           /* IN: inside the pool, aligned to pageSize */
    gasan_u64 length;         /* IN: multiple of pageSize */
    gasan_u32 pageSize;       /* IN: 4096 or 65536 */
    gasan_u32 prot;           /* IN: UVM_GASAN_PROT_* */
    gasan_u32 rmStatus;       /* OUT */
    gasan_u32 pad0;           /* IN: 0 */
} UVM_GASAN_SET_PROTECTION_PARAMS;

typedef struct {
    gasan_u64 base;           /* IN: shadow range, 2 MiB aligned, not 0, outside the pool */
    gasan_u64 length;         /* IN */
    gasan_u32 rmStatus;       /* OUT */
    gasan_u32 pad0;           /* IN: 0 */
} UVM_GASAN_MAP_SPARSE_ZERO_PARAMS;

typedef struct {
    gasan_u32 flags;          /* IN: UVM_GASAN_SUBSCRIBE_* */
    gasan_u32 eventFd;        /* OUT: pollable fd; reads return UVM_GASAN_FAULT_EVENT records */
    gasan_u32 rmStatus;       /* OUT */
    gasan_u32 pad0;           /* IN: 0 */
} UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS;

typedef struct {
    gasan_u64 address;        /* faulting GPU VA */
    gasan_u64 timestampNs;
    gasan_u32 accessType;     /* UvmEventMemoryAccessType: 1 read, 2 write, 3 atomic, 4 prefetch */
    gasan_u32 gpuIndex;
} UVM_GASAN_FAULT_EVENT;

#define GASAN_ASSERT_SIZE(t, n) _Static_assert(sizeof(t) == (n), #t " layout changed")
GASAN_ASSERT_SIZE(UVM_GASAN_IDENTIFY_PARAMS, 24);
GASAN_ASSERT_SIZE(UVM_GASAN_QUERY_PARAMS, 24);
GASAN_ASSERT_SIZE(UVM_GASAN_RESERVE_POOL_PARAMS, 24);
GASAN_ASSERT_SIZE(UVM_GASAN_MAP_ALIAS_PARAMS, 32);
GASAN_ASSERT_SIZE(UVM_GASAN_UNMAP_ALIAS_PARAMS, 24);
GASAN_ASSERT_SIZE(UVM_GASAN_SET_PROTECTION_PARAMS, 32);
GASAN_ASSERT_SIZE(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS, 24);
GASAN_ASSERT_SIZE(UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS, 16);
GASAN_ASSERT_SIZE(UVM_GASAN_FAULT_EVENT, 24);

#endif /* UVM_GASAN_IOCTL_H */

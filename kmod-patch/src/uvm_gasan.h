/* SPDX-License-Identifier: MIT
 *
 * gasan extensions to nvidia-uvm: ioctl entry points and the hooks the rest of the module calls.
 * The ABI is include/uvm_gasan_ioctl.h; the arithmetic and parameter checks are gasan_map_math.c
 * (shared with uvm-shim).
 */
#ifndef UVM_GASAN_H
#define UVM_GASAN_H

#include "uvm_forward_decl.h"
#include "uvm_gasan_ioctl.h"
#include "nvstatus.h"

struct file;
struct uvm_gasan_va_space_struct;

/* True for the numbers gasan's commands are encoded in (_IOWR under UVM_GASAN_IOC_TYPE); uvm_ioctl()
 * hands those to uvm_gasan_ioctl(), which copies the parameters in and out, fills rmStatus and
 * returns -ENOTTY for an unknown command, -EINVAL for a known one of another size, -EFAULT for a bad
 * pointer. */
bool uvm_gasan_owns_cmd(unsigned int cmd);
long uvm_gasan_ioctl(struct file *filp, unsigned int cmd, unsigned long arg);

NV_STATUS uvm_api_gasan_identify(UVM_GASAN_IDENTIFY_PARAMS *params, struct file *filp);
NV_STATUS uvm_api_gasan_query(UVM_GASAN_QUERY_PARAMS *params, struct file *filp);
NV_STATUS uvm_api_gasan_reserve_pool(UVM_GASAN_RESERVE_POOL_PARAMS *params, struct file *filp);
NV_STATUS uvm_api_gasan_map_alias(UVM_GASAN_MAP_ALIAS_PARAMS *params, struct file *filp);
NV_STATUS uvm_api_gasan_unmap_alias(UVM_GASAN_UNMAP_ALIAS_PARAMS *params, struct file *filp);
NV_STATUS uvm_api_gasan_set_protection(UVM_GASAN_SET_PROTECTION_PARAMS *params, struct file *filp);
NV_STATUS uvm_api_gasan_map_sparse_zero(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS *params, struct file *filp);

/* Releases the parked pieces that depend on gpu (mapped on it, backed by its memory, or holding a
 * handle RM frees through it). Called from uvm_va_space_unregister_gpu() after the GPU left the VA
 * space and before the VA space drops its reference on it, with no lock held. */
void uvm_gasan_unregister_gpu(uvm_va_space_t *va_space, uvm_gpu_t *gpu);

/* Releases the VA space's gasan state (parked pieces, fault subscription). Called from
 * uvm_va_space_destroy() while the VA space still holds its GPUs; pieces of GPUs unregistered
 * earlier were released by uvm_gasan_unregister_gpu(). */
void uvm_gasan_va_space_destroy(uvm_va_space_t *va_space);

/* Queues a fatal GPU fault for the pool's subscriber, if any. Called with the VA space lock held;
 * does not sleep. access_type is a UvmEventMemoryAccessType. */
void uvm_gasan_record_fatal_fault(uvm_va_space_t *va_space, NvU32 gpu_index, NvU64 address, NvU32 access_type);

#endif /* UVM_GASAN_H */

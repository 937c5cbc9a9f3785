/* SPDX-License-Identifier: MIT
 *
 * gasan extensions to nvidia-uvm: ioctl entry points and the hooks the rest of the module calls.
 * The ABI is include/uvm_gasan_ioctl.h; the arithmetic is gasan_map_math.c (shared with uvm-shim).
 */
#ifndef UVM_GASAN_H
#define UVM_GASAN_H

#include "uvm_forward_decl.h"
#include "uvm_gasan_ioctl.h"
#include "nvstatus.h"

struct file;
struct uvm_gasan_va_space_struct;

NV_STATUS uvm_api_gasan_query(UVM_GASAN_QUERY_PARAMS *params, struct file *filp);
NV_STATUS uvm_api_gasan_reserve_pool(UVM_GASAN_RESERVE_POOL_PARAMS *params, struct file *filp);
NV_STATUS uvm_api_gasan_map_alias(UVM_GASAN_MAP_ALIAS_PARAMS *params, struct file *filp);
NV_STATUS uvm_api_gasan_unmap_alias(UVM_GASAN_UNMAP_ALIAS_PARAMS *params, struct file *filp);
NV_STATUS uvm_api_gasan_set_protection(UVM_GASAN_SET_PROTECTION_PARAMS *params, struct file *filp);
NV_STATUS uvm_api_gasan_map_sparse_zero(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS *params, struct file *filp);
NV_STATUS uvm_api_gasan_subscribe_faults(UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS *params, struct file *filp);

/* Releases the VA space's gasan state (parked mappings, fault subscription). Called from
 * uvm_va_space_destroy() while the GPUs are still registered. */
void uvm_gasan_va_space_destroy(uvm_va_space_t *va_space);

/* Queues a fatal GPU fault for the pool's subscriber, if any. Called with the VA space lock held;
 * does not sleep. access_type is a UvmEventMemoryAccessType. */
void uvm_gasan_record_fatal_fault(uvm_va_space_t *va_space, NvU32 gpu_index, NvU64 address, NvU32 access_type);

#endif /* UVM_GASAN_H */

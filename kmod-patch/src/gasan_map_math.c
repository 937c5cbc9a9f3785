/* SPDX-License-Identifier: MIT
 * Mapping arithmetic and parameter validation shared by the kernel patch and the uvm-shim tests
 * (no kernel headers needed).
 */
#include "gasan_map_math.h"

#define GASAN_4K (4ull << 10)
#define GASAN_64K (64ull << 10)
#define GASAN_2M (2ull << 20)

int gasan_check_aligned(gasan_u64 va, gasan_u64 len, gasan_u64 gran)
{
    if (len == 0 || gran == 0 || (gran & (gran - 1)) != 0)
        return -1;
    if ((va & (gran - 1)) != 0 || (len & (gran - 1)) != 0)
        return -1;
    if (va + len < va)
        return -1;
    return 0;
}

int gasan_contains(gasan_u64 base, gasan_u64 size, gasan_u64 va, gasan_u64 len)
{
    if (va < base || va + len < va)
        return 0;
    return va + len <= base + size;
}

int gasan_overlaps(gasan_u64 a, gasan_u64 alen, gasan_u64 b, gasan_u64 blen)
{
    return alen != 0 && blen != 0 && a < b + blen && b < a + alen;
}

void gasan_shadow_range(gasan_u64 pool_base, gasan_u64 shadow_base, gasan_u32 shift,
                        gasan_u64 va, gasan_u64 len, gasan_u64 *start, gasan_u64 *out_len)
{
    gasan_u64 first = (va - pool_base) >> shift;
    gasan_u64 end = va - pool_base + len;
    gasan_u64 last = (end >> shift) + ((end & ((1ull << shift) - 1)) != 0);
    *start = shadow_base + first;
    *out_len = last - first;
}

gasan_u64 gasan_alias_addr(gasan_u64 src, gasan_u64 alias_base, gasan_u64 va)
{
    return alias_base + (va - src);
}

int gasan_split_pages(gasan_u64 va, gasan_u64 len, gasan_u64 *out_va, gasan_u64 *out_size, int max)
{
    static const gasan_u64 sizes[3] = { GASAN_2M, GASAN_64K, GASAN_4K };
    int n = 0;
    if (gasan_check_aligned(va, len, GASAN_4K) != 0)
        return -1;
    while (len > 0) {
        int i;
        for (i = 0; i < 3; i++) {
            if ((va & (sizes[i] - 1)) == 0 && len >= sizes[i])
                break;
        }
        if (n < max) {
            out_va[n] = va;
            out_size[n] = sizes[i];
        }
        n++;
        va += sizes[i];
        len -= sizes[i];
    }
    return n;
}

/* ---- parameter validation --------------------------------------------------------------------- */

gasan_u32 gasan_check_range(gasan_u64 va, gasan_u64 len, gasan_u64 gran)
{
    if (va == 0 || gasan_check_aligned(va, len, gran) != 0)
        return UVM_GASAN_ST_INVALID_ADDRESS;
    return UVM_GASAN_ST_OK;
}

static int gasan_reaches(const gasan_limits_t *lim, gasan_u64 va, gasan_u64 len)
{
    return lim->max_va == 0 || va + len <= lim->max_va;
}

gasan_u32 gasan_validate_identify(const UVM_GASAN_IDENTIFY_PARAMS *p)
{
    return p->pad0 != 0 ? UVM_GASAN_ST_INVALID_ARGUMENT : UVM_GASAN_ST_OK;
}

gasan_u32 gasan_validate_query(const UVM_GASAN_QUERY_PARAMS *p)
{
    return p->pad0 != 0 ? UVM_GASAN_ST_INVALID_ARGUMENT : UVM_GASAN_ST_OK;
}

gasan_u32 gasan_validate_reserve_pool(const UVM_GASAN_RESERVE_POOL_PARAMS *p, const gasan_limits_t *lim)
{
    gasan_u32 st;

    if (p->pad0 != 0)
        return UVM_GASAN_ST_INVALID_ARGUMENT;
    st = gasan_check_range(p->base, p->length, GASAN_2M);
    if (st != UVM_GASAN_ST_OK)
        return st;
    if (lim->pool_length != 0)
        return UVM_GASAN_ST_STATE_IN_USE;
    if (!gasan_reaches(lim, p->base, p->length))
        return UVM_GASAN_ST_OUT_OF_RANGE;
    return UVM_GASAN_ST_OK;
}

gasan_u32 gasan_validate_map_alias(const UVM_GASAN_MAP_ALIAS_PARAMS *p, const gasan_limits_t *lim)
{
    gasan_u32 st;

    if (p->pad0 != 0)
        return UVM_GASAN_ST_INVALID_ARGUMENT;
    st = gasan_check_range(p->srcBase, p->length, GASAN_4K);
    if (st == UVM_GASAN_ST_OK)
        st = gasan_check_range(p->aliasBase, p->length, GASAN_4K);
    if (st != UVM_GASAN_ST_OK)
        return st;
    if (lim->pool_length == 0)
        return UVM_GASAN_ST_INVALID_STATE;
    if (!gasan_contains(lim->pool_base, lim->pool_length, p->srcBase, p->length))
        return UVM_GASAN_ST_INVALID_ADDRESS;
    if (gasan_overlaps(lim->pool_base, lim->pool_length, p->aliasBase, p->length))
        return UVM_GASAN_ST_ADDRESS_IN_USE;
    if (!gasan_reaches(lim, p->aliasBase, p->length))
        return UVM_GASAN_ST_OUT_OF_RANGE;
    return UVM_GASAN_ST_OK;
}

gasan_u32 gasan_validate_unmap_alias(const UVM_GASAN_UNMAP_ALIAS_PARAMS *p, const gasan_limits_t *lim)
{
    gasan_u32 st;

    if (p->pad0 != 0)
        return UVM_GASAN_ST_INVALID_ARGUMENT;
    st = gasan_check_range(p->aliasBase, p->length, GASAN_4K);
    if (st != UVM_GASAN_ST_OK)
        return st;
    if (lim->pool_length == 0)
        return UVM_GASAN_ST_INVALID_STATE;
    return UVM_GASAN_ST_OK;
}

gasan_u32 gasan_validate_set_protection(const UVM_GASAN_SET_PROTECTION_PARAMS *p, const gasan_limits_t *lim)
{
    gasan_u32 st;

    if (p->pad0 != 0)
        return UVM_GASAN_ST_INVALID_ARGUMENT;
    if (p->pageSize != GASAN_4K && p->pageSize != GASAN_64K)
        return UVM_GASAN_ST_INVALID_ARGUMENT;
    if (p->prot != UVM_GASAN_PROT_NONE && p->prot != UVM_GASAN_PROT_RO && p->prot != UVM_GASAN_PROT_RW)
        return UVM_GASAN_ST_INVALID_ARGUMENT;
    st = gasan_check_range(p->base, p->length, p->pageSize);
    if (st != UVM_GASAN_ST_OK)
        return st;
    if (lim->pool_length == 0)
        return UVM_GASAN_ST_INVALID_STATE;
    if (!gasan_contains(lim->pool_base, lim->pool_length, p->base, p->length))
        return UVM_GASAN_ST_INVALID_ADDRESS;
    return UVM_GASAN_ST_OK;
}

gasan_u32 gasan_validate_map_sparse_zero(const UVM_GASAN_MAP_SPARSE_ZERO_PARAMS *p, const gasan_limits_t *lim)
{
    gasan_u32 st;

    if (p->pad0 != 0)
        return UVM_GASAN_ST_INVALID_ARGUMENT;
    st = gasan_check_range(p->base, p->length, GASAN_2M);
    if (st != UVM_GASAN_ST_OK)
        return st;
    if (lim->pool_length == 0)
        return UVM_GASAN_ST_INVALID_STATE;
    if (gasan_overlaps(lim->pool_base, lim->pool_length, p->base, p->length))
        return UVM_GASAN_ST_ADDRESS_IN_USE;
    if (!gasan_reaches(lim, p->base, p->length))
        return UVM_GASAN_ST_OUT_OF_RANGE;
    return UVM_GASAN_ST_OK;
}

gasan_u32 gasan_validate_subscribe_faults(const UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS *p, const gasan_limits_t *lim)
{
    if (p->pad0 != 0 || (p->flags & ~UVM_GASAN_SUBSCRIBE_NONBLOCK) != 0)
        return UVM_GASAN_ST_INVALID_ARGUMENT;
    if (lim->pool_length == 0)
        return UVM_GASAN_ST_INVALID_STATE;
    return UVM_GASAN_ST_OK;
}

gasan_u32 gasan_prot_mapping_type(gasan_u32 prot, gasan_u32 orig_type, gasan_u32 *out_type)
{
    if (orig_type > GASAN_MAPPING_READ_ONLY)
        return UVM_GASAN_ST_INVALID_ARGUMENT;
    if (prot == UVM_GASAN_PROT_RO) {
        *out_type = GASAN_MAPPING_READ_ONLY;
        return UVM_GASAN_ST_OK;
    }
    if (prot != UVM_GASAN_PROT_RW)
        return UVM_GASAN_ST_INVALID_ARGUMENT;
    if (orig_type == GASAN_MAPPING_READ_ONLY)
        return UVM_GASAN_ST_INVALID_ACCESS_TYPE;
    *out_type = orig_type;
    return UVM_GASAN_ST_OK;
}

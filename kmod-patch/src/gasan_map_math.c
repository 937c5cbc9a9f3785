/* SPDX-License-Identifier: MIT
 * Mapping arithmetic shared by the kernel patch and the uvm-shim tests (no kernel headers needed).
 */
#include "gasan_map_math.h"

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
    static const gasan_u64 sizes[3] = { 2ull << 20, 64ull << 10, 4ull << 10 };
    int n = 0;
    if (gasan_check_aligned(va, len, 4096) != 0)
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

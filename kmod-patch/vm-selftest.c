/*
 * The malformed-parameter half of `gasan-uvm kmod-selftest`, as a static C program that needs no GPU
 * and no CUDA: kmod-patch/vm-test.sh runs it inside a QEMU guest against the real patched
 * nvidia-uvm.ko (kmod-patch/README.md, "Loading in a VM"). Every row states the call, what the module
 * answered and what was expected; the exit status is the number of failed rows (0: all passed).
 *
 * Rows: IDENTIFY and QUERY before UVM_INITIALIZE, every command with a struct 8 bytes too short and
 * too long (EINVAL), unknown command numbers (ENOTTY), a parameter pointer to an unmapped address
 * (EFAULT); then, after UVM_INITIALIZE, QUERY, non-zero padding on every command, every pool command
 * before a pool exists (INVALID_STATE, the table of uvm-shim kmod_check::no_pool_cases), and
 * RESERVE_POOL with a zero, misaligned, empty or wrapping range (INVALID_ADDRESS).
 *
 * Build: gcc -static -O2 -Wall -Wextra -Werror -I kmod-patch/include kmod-patch/vm-selftest.c
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "uvm_gasan_ioctl.h"

/* nvidia-uvm's own UVM_INITIALIZE (uvm_linux_ioctl.h): a bare number, not an _IOC encoding. */
#define UVM_INITIALIZE 0x30000001
typedef struct {
    uint64_t flags;
    uint32_t rmStatus;
    uint32_t pad;
} UVM_INITIALIZE_PARAMS;

static int failed, passed;

static void row(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void row(int ok, const char *name, const char *fmt, ...)
{
    va_list ap;
    printf("%s  %-58s ", ok ? "ok  " : "FAIL", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (ok)
        passed++;
    else
        failed++;
}

/* The gasan ioctl number for command nr with a struct of size bytes. */
static unsigned long nr_cmd(unsigned nr, unsigned size)
{
    return _IOC(_IOC_READ | _IOC_WRITE, UVM_GASAN_IOC_TYPE, nr, size);
}

/* Sends command nr with the struct p (size bytes, rmStatus at status_off); returns the status,
 * or -errno when the ioctl itself failed. */
static long send(int fd, unsigned nr, void *p, unsigned size, unsigned status_off)
{
    if (ioctl(fd, nr_cmd(nr, size), p) != 0)
        return -errno;
    uint32_t st;
    memcpy(&st, (char *)p + status_off, sizeof st);
    return st;
}

#define SEND(fd, nr, s) send(fd, nr, &(s), sizeof(s), offsetof(__typeof__(s), rmStatus))

static void expect_status(const char *name, long got, uint32_t want)
{
    if (got < 0)
        row(0, name, "errno %s, expected status %#x", strerror((int)-got), want);
    else
        row((uint32_t)got == want, name, "status %#lx (expected %#x)", got, want);
}

static void expect_errno(const char *name, int rc, int err, int want)
{
    if (rc == 0)
        row(0, name, "accepted, expected %s", strerror(want));
    else
        row(err == want, name, "%s (expected %s)", strerror(err), strerror(want));
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "/dev/nvidia-uvm";
    char name[128];
    unsigned char buf[64];
    const unsigned sizes[UVM_GASAN_NR_COUNT] = {0, 24, 24, 24, 32, 24, 32, 24, 16};
    const uint64_t near = 0x7f0000000000ull, K4 = 4096, K64 = 65536, M2 = 2ull << 20;

    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        printf("FAIL  open %s: %s\n", path, strerror(errno));
        return 1;
    }
    row(1, "open", "%s", path);

    UVM_GASAN_IDENTIFY_PARAMS id = {0};
    long st = SEND(fd, UVM_GASAN_NR_IDENTIFY, id);
    row(st == 0 && id.magic == UVM_GASAN_MAGIC && id.abiVersion == UVM_GASAN_ABI_VERSION && id.nrCount == UVM_GASAN_NR_COUNT,
        "UVM_GASAN_IDENTIFY before UVM_INITIALIZE", "status %ld magic %#llx ABI %u commands 1..%u", st,
        (unsigned long long)id.magic, id.abiVersion, id.nrCount - 1);
    UVM_GASAN_QUERY_PARAMS q = {0};
    expect_status("UVM_GASAN_QUERY before UVM_INITIALIZE", SEND(fd, UVM_GASAN_NR_QUERY, q), UVM_GASAN_ST_ILLEGAL_ACTION);

    for (unsigned nr = UVM_GASAN_NR_IDENTIFY; nr < UVM_GASAN_NR_COUNT; nr++) {
        unsigned wrong[2] = {sizes[nr] - 8, sizes[nr] + 8};
        for (int i = 0; i < 2; i++) {
            memset(buf, 0, sizeof buf);
            int rc = ioctl(fd, nr_cmd(nr, wrong[i]), buf);
            snprintf(name, sizeof name, "command %u with a %u-byte struct", nr, wrong[i]);
            expect_errno(name, rc, errno, EINVAL);
        }
    }
    unsigned unknown[3] = {0, UVM_GASAN_NR_COUNT, 0xff};
    for (int i = 0; i < 3; i++) {
        memset(buf, 0, sizeof buf);
        int rc = ioctl(fd, nr_cmd(unknown[i], 24), buf);
        snprintf(name, sizeof name, "unknown command %u", unknown[i]);
        expect_errno(name, rc, errno, ENOTTY);
    }
    {
        int rc = ioctl(fd, UVM_GASAN_IDENTIFY, (void *)8);
        expect_errno("UVM_GASAN_IDENTIFY at an unmapped address", rc, errno, EFAULT);
    }

    UVM_INITIALIZE_PARAMS init = {0};
    int rc = ioctl(fd, UVM_INITIALIZE, &init);
    row(rc == 0 && init.rmStatus == 0, "UVM_INITIALIZE", "rc %d (%s) rmStatus %#x", rc, rc ? strerror(errno) : "ok", init.rmStatus);
    if (rc != 0 || init.rmStatus != 0)
        goto out;

    memset(&q, 0, sizeof q);
    st = SEND(fd, UVM_GASAN_NR_QUERY, q);
    row(st == 0 && q.abiVersion == UVM_GASAN_ABI_VERSION, "UVM_GASAN_QUERY", "status %#lx ABI %u caps %#x maxVa %#llx (no GPU registered)", st,
        q.abiVersion, q.caps, (unsigned long long)q.maxVa);

    /* Non-zero padding: refused before anything else is looked at. */
    {
        UVM_GASAN_QUERY_PARAMS a = {.pad0 = 1};
        expect_status("UVM_GASAN_QUERY pad0 != 0", SEND(fd, UVM_GASAN_NR_QUERY, a), UVM_GASAN_ST_INVALID_ARGUMENT);
        UVM_GASAN_RESERVE_POOL_PARAMS b = {.base = near, .length = M2, .pad0 = 1};
        expect_status("UVM_GASAN_RESERVE_POOL pad0 != 0", SEND(fd, UVM_GASAN_NR_RESERVE_POOL, b), UVM_GASAN_ST_INVALID_ARGUMENT);
        UVM_GASAN_MAP_ALIAS_PARAMS c = {.srcBase = near, .length = K64, .aliasBase = near + (1ull << 40), .pad0 = 1};
        expect_status("UVM_GASAN_MAP_ALIAS pad0 != 0", SEND(fd, UVM_GASAN_NR_MAP_ALIAS, c), UVM_GASAN_ST_INVALID_ARGUMENT);
        UVM_GASAN_UNMAP_ALIAS_PARAMS d = {.aliasBase = near, .length = K64, .pad0 = 1};
        expect_status("UVM_GASAN_UNMAP_ALIAS pad0 != 0", SEND(fd, UVM_GASAN_NR_UNMAP_ALIAS, d), UVM_GASAN_ST_INVALID_ARGUMENT);
        UVM_GASAN_SET_PROTECTION_PARAMS e = {.base = near, .length = K4, .pageSize = K4, .prot = UVM_GASAN_PROT_NONE, .pad0 = 1};
        expect_status("UVM_GASAN_SET_PROTECTION pad0 != 0", SEND(fd, UVM_GASAN_NR_SET_PROTECTION, e), UVM_GASAN_ST_INVALID_ARGUMENT);
        UVM_GASAN_MAP_SPARSE_ZERO_PARAMS f = {.base = near, .length = M2, .pad0 = 1};
        expect_status("UVM_GASAN_MAP_SPARSE_ZERO pad0 != 0", SEND(fd, UVM_GASAN_NR_MAP_SPARSE_ZERO, f), UVM_GASAN_ST_INVALID_ARGUMENT);
        UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS g = {.pad0 = 1};
        expect_status("UVM_GASAN_SUBSCRIBE_FAULTS pad0 != 0", SEND(fd, UVM_GASAN_NR_SUBSCRIBE_FAULTS, g), UVM_GASAN_ST_INVALID_ARGUMENT);
    }
    /* kmod_check::no_pool_cases: well-formed calls before RESERVE_POOL. */
    {
        UVM_GASAN_MAP_ALIAS_PARAMS c = {.srcBase = near, .length = K64, .aliasBase = near + (1ull << 40)};
        expect_status("UVM_GASAN_MAP_ALIAS no pool", SEND(fd, UVM_GASAN_NR_MAP_ALIAS, c), UVM_GASAN_ST_INVALID_STATE);
        UVM_GASAN_UNMAP_ALIAS_PARAMS d = {.aliasBase = near, .length = K64};
        expect_status("UVM_GASAN_UNMAP_ALIAS no pool", SEND(fd, UVM_GASAN_NR_UNMAP_ALIAS, d), UVM_GASAN_ST_INVALID_STATE);
        UVM_GASAN_SET_PROTECTION_PARAMS e = {.base = near, .length = K4, .pageSize = K4, .prot = UVM_GASAN_PROT_NONE};
        expect_status("UVM_GASAN_SET_PROTECTION no pool", SEND(fd, UVM_GASAN_NR_SET_PROTECTION, e), UVM_GASAN_ST_INVALID_STATE);
        UVM_GASAN_MAP_SPARSE_ZERO_PARAMS f = {.base = near, .length = M2};
        expect_status("UVM_GASAN_MAP_SPARSE_ZERO no pool", SEND(fd, UVM_GASAN_NR_MAP_SPARSE_ZERO, f), UVM_GASAN_ST_INVALID_STATE);
        UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS g = {0};
        expect_status("UVM_GASAN_SUBSCRIBE_FAULTS no pool", SEND(fd, UVM_GASAN_NR_SUBSCRIBE_FAULTS, g), UVM_GASAN_ST_INVALID_STATE);
    }
    /* RESERVE_POOL with a malformed range. */
    {
        struct { const char *what; uint64_t base, length; } bad[] = {
            {"base 0", 0, M2},
            {"misaligned base", near + K64, M2},
            {"empty", near, 0},
            {"length not a multiple of 2 MiB", near, M2 + K4},
            {"wrapping", ~(M2 - 1), 2 * M2},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            UVM_GASAN_RESERVE_POOL_PARAMS b = {.base = bad[i].base, .length = bad[i].length};
            snprintf(name, sizeof name, "UVM_GASAN_RESERVE_POOL %s", bad[i].what);
            expect_status(name, SEND(fd, UVM_GASAN_NR_RESERVE_POOL, b), UVM_GASAN_ST_INVALID_ADDRESS);
        }
    }
out:
    close(fd);
    printf("vm-selftest: %d passed, %d failed\n", passed, failed);
    return failed;
}

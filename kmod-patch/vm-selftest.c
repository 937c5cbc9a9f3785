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
 * Then rows that create and tear down real state, which needs no GPU (no GPU is registered, so
 * nothing is mapped on one): a pool (and a second refused), protection changes in it, sparse
 * windows (repeat, overlap refused, a range nvidia-uvm's own UvmCreateExternalRange made never
 * taken over), failed MAP_ALIAS calls that free their window (more calls than there are window
 * slots), the window limit and its rollback, the fault fd (poll, non-blocking and short reads,
 * second subscriber refused, resubscribing after close), a forked child blocked in read() on the
 * inherited fd that gets end-of-file when the VA space goes, many threads racing on one VA space,
 * and children that exit or are killed with everything live. After each section the kernel log
 * (/dev/kmsg) must hold no warning, BUG, Oops or assertion. vm-test.sh then unloads the module.
 *
 * Build: gcc -static -O2 -Wall -Wextra -Werror -pthread -I kmod-patch/include kmod-patch/vm-selftest.c
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "uvm_gasan_ioctl.h"

/* nvidia-uvm's own UVM_INITIALIZE (uvm_linux_ioctl.h): a bare number, not an _IOC encoding. */
#define UVM_INITIALIZE 0x30000001
typedef struct {
    uint64_t flags;
    uint32_t rmStatus;
    uint32_t pad;
} UVM_INITIALIZE_PARAMS;
/* nvidia-uvm's UvmCreateExternalRange (uvm_ioctl.h, UVM_IOCTL_BASE(73) on 550-595). */
#define UVM_CREATE_EXTERNAL_RANGE 73
typedef struct {
    uint64_t base;
    uint64_t length;
    uint32_t rmStatus;
    uint32_t pad;
} UVM_CREATE_EXTERNAL_RANGE_PARAMS;

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

/* ---- the kernel log ------------------------------------------------------------------------ */

static int kmsg = -1;

/* Fails a row when the kernel logged a warning, BUG, Oops or assertion since the last check. */
static void klog_check(const char *section)
{
    static const char *bad[] = {"WARNING:", "BUG:", "Oops", "Call Trace", "general protection", "Assert", "KASAN",
                                "gasan: "};
    char line[2048], name[128];
    int hits = 0;

    if (kmsg < 0)
        return;
    for (;;) {
        ssize_t n = read(kmsg, line, sizeof line - 1);
        if (n < 0 && errno == EPIPE)
            continue; /* overwritten records: go on with the next */
        if (n <= 0)
            break;
        line[n] = 0;
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            if (strstr(line, bad[i])) {
                printf("      kernel log: %s", strchr(line, ';') ? strchr(line, ';') + 1 : line);
                hits++;
                break;
            }
        }
    }
    snprintf(name, sizeof name, "kernel log after %s", section);
    row(hits == 0, name, "%d warning line(s)", hits);
}

/* ---- state rows ------------------------------------------------------------------------------- */

static const uint64_t K4 = 4096, K64 = 65536, M2 = 2ull << 20;
static const uint64_t POOL = 0x7e0000000000ull, POOL_LEN = 64ull << 20;
static const uint64_t SHADOW = 0x7c0000000000ull, FOREIGN = 0x7b0000000000ull, SPARSE_MANY = 0x7a0000000000ull;
static const uint64_t ALIAS = 1ull << 47; /* GPU-only VA */

static int uvm_open(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    UVM_INITIALIZE_PARAMS init = {0};

    if (fd < 0)
        return -1;
    if (ioctl(fd, UVM_INITIALIZE, &init) != 0 || init.rmStatus != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static long reserve_pool(int fd, uint64_t base, uint64_t len)
{
    UVM_GASAN_RESERVE_POOL_PARAMS p = {.base = base, .length = len};
    return SEND(fd, UVM_GASAN_NR_RESERVE_POOL, p);
}

static long set_protection(int fd, uint64_t base, uint64_t len, uint32_t page, uint32_t prot)
{
    UVM_GASAN_SET_PROTECTION_PARAMS p = {.base = base, .length = len, .pageSize = page, .prot = prot};
    return SEND(fd, UVM_GASAN_NR_SET_PROTECTION, p);
}

static long map_sparse(int fd, uint64_t base, uint64_t len)
{
    UVM_GASAN_MAP_SPARSE_ZERO_PARAMS p = {.base = base, .length = len};
    return SEND(fd, UVM_GASAN_NR_MAP_SPARSE_ZERO, p);
}

static long map_alias(int fd, uint64_t src, uint64_t len, uint64_t alias)
{
    UVM_GASAN_MAP_ALIAS_PARAMS p = {.srcBase = src, .length = len, .aliasBase = alias};
    return SEND(fd, UVM_GASAN_NR_MAP_ALIAS, p);
}

static long unmap_alias(int fd, uint64_t alias, uint64_t len)
{
    UVM_GASAN_UNMAP_ALIAS_PARAMS p = {.aliasBase = alias, .length = len};
    return SEND(fd, UVM_GASAN_NR_UNMAP_ALIAS, p);
}

/* Returns the fd, or -(status) / -(1000 + errno) on failure. */
static long subscribe(int fd, uint32_t flags)
{
    UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS p = {.flags = flags};
    long st = SEND(fd, UVM_GASAN_NR_SUBSCRIBE_FAULTS, p);
    if (st < 0)
        return -(1000 - st);
    if (st != 0)
        return -st;
    return p.eventFd;
}

static long create_external_range(int fd, uint64_t base, uint64_t len)
{
    UVM_CREATE_EXTERNAL_RANGE_PARAMS p = {.base = base, .length = len};
    if (ioctl(fd, UVM_CREATE_EXTERNAL_RANGE, &p) != 0)
        return -errno;
    return p.rmStatus;
}

/* Waits for pid up to seconds; returns its wait status, or -1 (then it is killed). */
static int wait_child(pid_t pid, int seconds)
{
    int status;
    for (int i = 0; i < seconds * 10; i++) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

/* Everything a process can hold: pool, guards, sparse windows, a subscription, failed aliases. */
static int make_live_state(int fd, long *event_fd)
{
    int bad = 0;
    bad += reserve_pool(fd, POOL, POOL_LEN) != 0;
    bad += set_protection(fd, POOL + K64, K4, K4, UVM_GASAN_PROT_NONE) != 0;
    bad += set_protection(fd, POOL + 2 * K64, K64, K64, UVM_GASAN_PROT_RO) != 0;
    bad += map_sparse(fd, SHADOW, 4 * M2) != 0;
    bad += map_alias(fd, POOL, K64, ALIAS) != UVM_GASAN_ST_INVALID_ADDRESS;
    *event_fd = subscribe(fd, 0);
    bad += *event_fd < 0;
    return bad;
}

struct race {
    int fd;
    int index;
    int pool_ok, pool_in_use, subscribed, unexpected;
    pthread_barrier_t *start;
};

static void *race_thread(void *arg)
{
    struct race *r = arg;
    pthread_barrier_wait(r->start);
    long st = reserve_pool(r->fd, POOL, POOL_LEN);
    if (st == 0)
        r->pool_ok++;
    else if (st == UVM_GASAN_ST_STATE_IN_USE)
        r->pool_in_use++;
    else
        r->unexpected++;
    long ev = subscribe(r->fd, UVM_GASAN_SUBSCRIBE_NONBLOCK);
    if (ev >= 0)
        r->subscribed++; /* kept open: closed at teardown */
    else if (ev != -(long)UVM_GASAN_ST_STATE_IN_USE)
        r->unexpected++;
    for (int i = 0; i < 40; i++) {
        uint64_t at = POOL + (uint64_t)(r->index * 40 + i) * K64;
        uint32_t prot = i % 3 == 0 ? UVM_GASAN_PROT_NONE : i % 3 == 1 ? UVM_GASAN_PROT_RO : UVM_GASAN_PROT_RW;
        r->unexpected += set_protection(r->fd, at, K4, K4, prot) != 0;
        r->unexpected += map_alias(r->fd, POOL, K64, ALIAS + (uint64_t)(r->index * 40 + i) * M2) != UVM_GASAN_ST_INVALID_ADDRESS;
        r->unexpected += map_sparse(r->fd, SHADOW + (uint64_t)r->index * M2, M2) != 0;
        UVM_GASAN_QUERY_PARAMS q = {0};
        r->unexpected += SEND(r->fd, UVM_GASAN_NR_QUERY, q) != 0;
    }
    return NULL;
}

static void state_rows(const char *path)
{
    char name[160];
    long st;
    int fd = uvm_open(path);

    row(fd >= 0, "state: open + UVM_INITIALIZE", "fd %d", fd);
    if (fd < 0)
        return;

    /* Pool and protections (no GPU: nothing to map, the bookkeeping runs). */
    expect_status("state: RESERVE_POOL 64 MiB", reserve_pool(fd, POOL, POOL_LEN), 0);
    expect_status("state: RESERVE_POOL a second pool", reserve_pool(fd, POOL + POOL_LEN, M2), UVM_GASAN_ST_STATE_IN_USE);
    expect_status("state: UvmCreateExternalRange inside the pool", create_external_range(fd, POOL + M2, M2),
                  UVM_GASAN_ST_ADDRESS_IN_USE);
    expect_status("state: SET_PROTECTION none 4 KiB", set_protection(fd, POOL + K64, K4, K4, UVM_GASAN_PROT_NONE), 0);
    expect_status("state: SET_PROTECTION ro 64 KiB", set_protection(fd, POOL + 2 * K64, K64, K64, UVM_GASAN_PROT_RO), 0);
    expect_status("state: SET_PROTECTION rw 4 KiB", set_protection(fd, POOL + K64, K4, K4, UVM_GASAN_PROT_RW), 0);
    expect_status("state: SET_PROTECTION outside the pool", set_protection(fd, POOL + POOL_LEN, K4, K4, UVM_GASAN_PROT_NONE),
                  UVM_GASAN_ST_INVALID_ADDRESS);

    /* Sparse windows. */
    expect_status("state: MAP_SPARSE_ZERO 8 MiB window", map_sparse(fd, SHADOW, 4 * M2), 0);
    expect_status("state: MAP_SPARSE_ZERO again, inside the window", map_sparse(fd, SHADOW + M2, M2), 0);
    expect_status("state: MAP_SPARSE_ZERO overlapping the window", map_sparse(fd, SHADOW + 2 * M2, 4 * M2),
                  UVM_GASAN_ST_ADDRESS_IN_USE);
    /* A range nvidia-uvm's own ioctl made (as the CUDA driver makes its ranges) is never adopted. */
    expect_status("state: UvmCreateExternalRange of a foreign range", create_external_range(fd, FOREIGN, M2), 0);
    expect_status("state: MAP_SPARSE_ZERO exactly on the foreign range", map_sparse(fd, FOREIGN, M2), UVM_GASAN_ST_ADDRESS_IN_USE);
    expect_status("state: MAP_ALIAS exactly on the foreign range", map_alias(fd, POOL, M2, FOREIGN), UVM_GASAN_ST_ADDRESS_IN_USE);
    klog_check("pool, protections, sparse windows");

    /* Failed aliases free their window: more calls than there are slots. */
    {
        int as_expected = 0, other = 0;
        long last = 0;
        for (int i = 0; i < 100; i++) {
            st = map_alias(fd, POOL, K64, ALIAS + (uint64_t)i * M2);
            if (st == UVM_GASAN_ST_INVALID_ADDRESS)
                as_expected++;
            else
                other++, last = st;
        }
        row(other == 0, "state: 100 MAP_ALIAS of an unmapped source (64 window slots)",
            "%d INVALID_ADDRESS, %d other (last %#lx)", as_expected, other, last);
        expect_status("state: UNMAP_ALIAS where a failed alias was", unmap_alias(fd, ALIAS, K64), UVM_GASAN_ST_INVALID_ADDRESS);
        expect_status("state: the failed alias's range is gone (UvmCreateExternalRange there)",
                      create_external_range(fd, ALIAS + 200 * M2, M2), 0);
        expect_status("state: MAP_ALIAS into that foreign range", map_alias(fd, POOL, K64, ALIAS + 200 * M2),
                      UVM_GASAN_ST_ADDRESS_IN_USE);
    }
    /* The window limit: pool + shadow + 62 more; the 63rd is refused and leaves no range behind. */
    {
        int ok = 0, full = 0, other = 0;
        uint64_t first_full = 0;
        for (int i = 0; i < 70; i++) {
            st = map_sparse(fd, SPARSE_MANY + (uint64_t)i * 2 * M2, M2);
            if (st == 0)
                ok++;
            else if (st == UVM_GASAN_ST_INSUFFICIENT_RESOURCES) {
                if (!full++)
                    first_full = SPARSE_MANY + (uint64_t)i * 2 * M2;
            }
            else
                other++;
        }
        row(ok == 62 && full == 8 && other == 0, "state: 70 sparse windows (64 slots, 2 taken)", "%d made, %d refused, %d other",
            ok, full, other);
        expect_status("state: a refused window left no range (UvmCreateExternalRange there)",
                      create_external_range(fd, first_full, M2), 0);
    }
    klog_check("alias and window slots");

    /* The fault fd. */
    {
        long ev = subscribe(fd, UVM_GASAN_SUBSCRIBE_NONBLOCK);
        row(ev >= 0, "state: SUBSCRIBE_FAULTS (non-blocking)", "fd %ld", ev);
        if (ev >= 0) {
            UVM_GASAN_FAULT_EVENT rec[4];
            struct pollfd pfd = {.fd = (int)ev, .events = POLLIN};
            int n = poll(&pfd, 1, 0);
            row(n == 0, "state: poll on the fault fd, no fault", "poll %d revents %#x", n, pfd.revents);
            ssize_t r = read((int)ev, rec, sizeof rec);
            expect_errno("state: non-blocking read, no fault", r < 0 ? -1 : 0, errno, EAGAIN);
            r = read((int)ev, rec, sizeof rec[0] - 1);
            expect_errno("state: read shorter than a record", r < 0 ? -1 : 0, errno, EINVAL);
            expect_status("state: SUBSCRIBE_FAULTS a second subscriber", -subscribe(fd, 0), UVM_GASAN_ST_STATE_IN_USE);
            close((int)ev);
            ev = subscribe(fd, 0);
            row(ev >= 0, "state: SUBSCRIBE_FAULTS again after close (blocking)", "fd %ld", ev);
        }
        /* fork: the child inherits both fds, drops its copy of the VA space's and blocks in read();
         * closing the parent's last reference destroys the VA space, which ends the child's read. */
        if (ev >= 0) {
            pid_t pid = fork();
            if (pid == 0) {
                UVM_GASAN_FAULT_EVENT rec;
                close(fd);
                ssize_t r = read((int)ev, &rec, sizeof rec);
                _exit(r == 0 ? 0 : r < 0 ? 10 + errno % 100 : 2);
            }
            struct timespec ts = {0, 300 * 1000 * 1000};
            nanosleep(&ts, NULL); /* let the child block */
            int alive = waitpid(pid, NULL, WNOHANG) == 0;
            row(alive, "state: forked child blocked in read() on the inherited fd", "%s", alive ? "blocked" : "returned early");
            close(fd);
            fd = -1;
            int ws = wait_child(pid, 60);
            row(ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "state: VA space gone: the child's read() returns 0",
                "wait status %#x", ws);
            struct pollfd pfd = {.fd = (int)ev, .events = POLLIN};
            int n = poll(&pfd, 1, 1000);
            row(n == 1 && (pfd.revents & POLLHUP), "state: poll after the VA space is gone", "poll %d revents %#x", n, pfd.revents);
            close((int)ev);
        }
        if (fd >= 0)
            close(fd);
    }
    klog_check("the fault fd and fork");

    /* Many threads on one VA space. */
    {
        enum { THREADS = 16 };
        pthread_t t[THREADS];
        struct race r[THREADS];
        pthread_barrier_t start;
        int pool_ok = 0, in_use = 0, subscribed = 0, unexpected = 0;

        fd = uvm_open(path);
        row(fd >= 0, "state: threads: open + UVM_INITIALIZE", "fd %d", fd);
        if (fd >= 0) {
            pthread_barrier_init(&start, NULL, THREADS);
            for (int i = 0; i < THREADS; i++) {
                r[i] = (struct race){.fd = fd, .index = i, .start = &start};
                pthread_create(&t[i], NULL, race_thread, &r[i]);
            }
            for (int i = 0; i < THREADS; i++) {
                pthread_join(t[i], NULL);
                pool_ok += r[i].pool_ok;
                in_use += r[i].pool_in_use;
                subscribed += r[i].subscribed;
                unexpected += r[i].unexpected;
            }
            snprintf(name, sizeof name, "state: %d threads racing RESERVE_POOL", THREADS);
            row(pool_ok == 1 && in_use == THREADS - 1, name, "%d made it, %d STATE_IN_USE", pool_ok, in_use);
            row(subscribed == 1, "state: threads racing SUBSCRIBE_FAULTS", "%d subscribed", subscribed);
            row(unexpected == 0, "state: threads: 40 protections, failed aliases, sparse maps, queries each",
                "%d unexpected statuses", unexpected);
            close(fd); /* with the subscription's fd still open */
            pthread_barrier_destroy(&start);
        }
    }
    klog_check("threads");

    /* Teardown with everything live: a child exits without undoing anything; another is killed
     * blocked in read(). */
    {
        pid_t pid = fork();
        if (pid == 0) {
            int cfd = uvm_open(path);
            long ev;
            _exit(cfd < 0 ? 3 : make_live_state(cfd, &ev) != 0 ? 4 : 0);
        }
        int ws = wait_child(pid, 60);
        row(ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "state: child exits with pool, windows, subscription live",
            "wait status %#x", ws);
        int pipefd[2];
        if (pipe(pipefd) != 0)
            pipefd[0] = pipefd[1] = -1;
        pid = fork();
        if (pid == 0) {
            int cfd = uvm_open(path);
            long ev;
            UVM_GASAN_FAULT_EVENT rec;
            if (cfd < 0 || make_live_state(cfd, &ev) != 0)
                _exit(3);
            if (write(pipefd[1], "x", 1) != 1)
                _exit(5);
            (void)!read((int)ev, &rec, sizeof rec); /* blocks: no GPU, no fault */
            _exit(6);
        }
        char c;
        int ready = pipefd[0] >= 0 && read(pipefd[0], &c, 1) == 1;
        kill(pid, SIGKILL);
        ws = wait_child(pid, 60);
        row(ready && ws >= 0 && WIFSIGNALED(ws), "state: child killed with everything live", "ready %d wait status %#x", ready, ws);
        if (pipefd[0] >= 0) {
            close(pipefd[0]);
            close(pipefd[1]);
        }
    }
    klog_check("teardown with everything live");
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "/dev/nvidia-uvm";
    char name[128];
    unsigned char buf[64];
    const unsigned sizes[UVM_GASAN_NR_COUNT] = {0, 24, 24, 24, 32, 24, 32, 24, 16};
    const uint64_t near = 0x7f0000000000ull;

    kmsg = open("/dev/kmsg", O_RDONLY | O_NONBLOCK);
    if (kmsg >= 0)
        lseek(kmsg, 0, SEEK_END);

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
    klog_check("malformed parameters");
    if (rc == 0 && init.rmStatus == 0)
        state_rows(path);
    printf("vm-selftest: %d passed, %d failed\n", passed, failed);
    return failed;
}

/* Signal handling under the preloaded runtime, which exports sigaction and signal: with no managed
 * block on the device, every call must reach libc unchanged. Sets SIGSEGV and SIGUSR1 handlers
 * through both entry points, reads them back, and takes one real fault and one raised signal. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static volatile int hits;
static char *page;

static void on_segv(int sig, siginfo_t *si, void *ctx) {
    (void)sig; (void)ctx;
    if ((char *)si->si_addr == page) hits += 1;
    mprotect(page, 4096, PROT_READ | PROT_WRITE);
}

static void on_usr1(int sig) { (void)sig; hits += 10; }

int main(void) {
    page = mmap(0, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct sigaction act, old, now;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_segv;
    act.sa_flags = SA_SIGINFO;
    sigemptyset(&act.sa_mask);
    if (sigaction(SIGSEGV, &act, &old) != 0) return 1;
    sigaction(SIGSEGV, NULL, &now);
    int same = now.sa_sigaction == on_segv;
    volatile char c = page[0];
    (void)c;
    void (*prev)(int) = signal(SIGUSR1, on_usr1);
    raise(SIGUSR1);
    void (*back)(int) = signal(SIGUSR1, SIG_DFL);
    printf("same=%d hits=%d prev_default=%d back=%d\n", same, hits, prev == SIG_DFL, back == on_usr1);
    return 0;
}

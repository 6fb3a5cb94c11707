/* Sample binary for the uprobe technique: `fib` is a plain C function whose arguments and
 * return values uprobe-trace captures from the sidecar. Not stripped, not inlined. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) int fib(int n) {
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

static void stop(int signo) { (void)signo; exit(0); }

int main(int argc, char **argv) {
    int max = argc > 1 ? atoi(argv[1]) : 15;
    struct timespec pause = {0, 200 * 1000 * 1000};
    signal(SIGTERM, stop);
    for (unsigned long round = 0;; round++) {
        int n = (int)(round % (unsigned long)max) + 1;
        printf("fib(%d) = %d\n", n, fib(n));
        fflush(stdout);
        nanosleep(&pause, NULL);
    }
}

/* Sample for perf flame graphs of native code: built -O2 WITHOUT frame pointers (as most
 * distribution binaries are), so that only DWARF unwinding (.eh_frame) finds its callers.
 * main -> run_round -> {checksum -> qsort (libc, no frame pointers) -> compare_values,
 *                        fib_recursive (the hot function)}.
 * Prints its throughput once a second as JSON: {"rate": rounds per second, ...}. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile sig_atomic_t stopping;

__attribute__((noinline)) long fib_recursive(int n) {
    return n < 2 ? n : fib_recursive(n - 1) + fib_recursive(n - 2);
}

__attribute__((noinline)) static int compare_values(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

__attribute__((noinline)) static long checksum(long *values, size_t count) {
    qsort(values, count, sizeof(long), compare_values);
    long sum = 0;
    for (size_t i = 0; i < count; i++) sum = sum * 31 + values[i];
    return sum;
}

__attribute__((noinline)) static long run_round(unsigned seed) {
    long values[256];
    for (size_t i = 0; i < 256; i++) values[i] = (long)((seed + i) * 2654435761u % 1000);
    return checksum(values, 256) ^ fib_recursive(24);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void stop(int signo) { (void)signo; stopping = 1; }

int main(void) {
    signal(SIGTERM, stop);
    double start = now();
    long rounds = 0, result = 0;
    while (!stopping) {
        result ^= run_round((unsigned)rounds);
        rounds++;
        double elapsed = now() - start;
        if (elapsed >= 1.0) {
            struct timespec wall;
            clock_gettime(CLOCK_REALTIME, &wall);
            printf("{\"rate\": %.1f, \"result\": %ld, \"time\": %lld}\n", rounds / elapsed,
                   result, (long long)wall.tv_sec * 1000 + wall.tv_nsec / 1000000);
            fflush(stdout);
            rounds = 0;
            start = now();
        }
    }
    return 0;
}

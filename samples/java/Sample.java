// Sample Java app (hot `Sample.fibRecursive`) for perf flame graphs: JIT-compiled code named
// through the perf map that `flamegraph` has the JVM write (jattach PID jcmd Compiler.perfmap),
// unwound through frame pointers (-XX:+PreserveFramePointer, the injection's `java` hint).
// Prints its throughput once a second as JSON: {"rate": rounds per second, ...}.
public final class Sample {
    static int fibRecursive(int n) {
        return n < 2 ? n : fibRecursive(n - 1) + fibRecursive(n - 2);
    }

    static int computeRound(int seed) {
        return fibRecursive(24) ^ seed;
    }

    static void runRounds() {
        long start = System.nanoTime();
        int rounds = 0;
        int result = 0;
        while (true) {
            result ^= computeRound(rounds);
            rounds++;
            long elapsed = System.nanoTime() - start;
            if (elapsed >= 1_000_000_000L) {
                System.out.printf("{\"rate\": %.1f, \"result\": %d, \"time\": %d}%n",
                        rounds * 1e9 / elapsed, result, System.currentTimeMillis());
                System.out.flush();
                rounds = 0;
                start = System.nanoTime();
            }
        }
    }

    public static void main(String[] args) {
        runRounds();
    }
}

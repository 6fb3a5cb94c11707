// Sample Go app for perf flame graphs: Go keeps frame pointers, and the binary is static, so
// the recording uses the kernel's frame-pointer walk. main -> runRounds -> computeRound ->
// fibRecursive (the hot function), plus a goroutine that mostly waits (for --type offcpu/wall).
// Prints its throughput once a second as JSON: {"rate": rounds per second, ...}.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

//go:noinline
func fibRecursive(n int) int {
	if n < 2 {
		return n
	}
	return fibRecursive(n-1) + fibRecursive(n-2)
}

//go:noinline
func computeRound(seed int) int {
	return fibRecursive(24) ^ seed
}

func waitForTicks(ticks chan<- int) {
	for i := 0; ; i++ {
		time.Sleep(50 * time.Millisecond)
		ticks <- i
	}
}

//go:noinline
func runRounds() {
	ticks := make(chan int, 1)
	go waitForTicks(ticks)
	start, rounds, result := time.Now(), 0, 0
	for {
		select {
		case <-ticks:
		default:
		}
		result ^= computeRound(rounds)
		rounds++
		if elapsed := time.Since(start); elapsed >= time.Second {
			fmt.Printf("{\"rate\": %.1f, \"result\": %d, \"time\": %d}\n",
				float64(rounds)/elapsed.Seconds(), result, time.Now().UnixMilli())
			start, rounds = time.Now(), 0
		}
	}
}

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	go func() { <-stop; os.Exit(0) }()
	runRounds()
}

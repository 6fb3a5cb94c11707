// Sample app for the perf + flame graph technique: a CPU-bound loop around a hot, recursive
// `fibonacci`. Run with `node --perf-basic-prof` (the injection's runtime hint `node` appends it
// to NODE_OPTIONS) so that perf can name the JIT-compiled frames through /tmp/perf-PID.map.
// Prints its throughput once a second as JSON: {"rate": calls per second, ...}.
'use strict';

function fibonacci(n) {
  return n < 2 ? n : fibonacci(n - 1) + fibonacci(n - 2);
}

const depth = Number(process.env.FIB_DEPTH || 25);
let calls = 0;
let windowStart = Date.now();

function work() {
  const sliceEnd = Date.now() + 50;
  while (Date.now() < sliceEnd) {
    fibonacci(depth);
    calls += 1;
  }
  const now = Date.now();
  if (now - windowStart >= 1000) {
    console.log(JSON.stringify({ rate: (calls * 1000) / (now - windowStart), depth, time: now }));
    calls = 0;
    windowStart = now;
  }
  setImmediate(work);
}

process.on('SIGTERM', () => process.exit(0));
work();

// BullMQ's harness (see harness.py for the commands and the handlers every system runs):
// one Node process, a Worker with the concurrency as its `concurrency` option, jobs removed on
// completion (`removeOnComplete: true`, the bounded choice BullMQ's docs recommend; by default
// every completed job is kept). The handlers' own client is a separate ioredis connection.
// Run with NODE_PATH pointing at the node_modules that `just bench --peers` installs.
"use strict";
const { Queue, Worker } = require("bullmq");
const IORedis = require("ioredis");

const DONE = "bench:done";
const LAT = "bench:lat";
const SLEEP_MS = 10;
const URL = process.env.BENCH_REDIS_URL || "redis://127.0.0.1:6379/0";
const QUEUE = "bench";

// Wall-clock nanoseconds with sub-microsecond steps, comparable with Python's time.time_ns()
// on the same host (timeOrigin is the realtime clock at the process start).
const nowNs = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function parse(argv) {
  const opts = { command: argv[0], kind: "incr", n: 1, rate: 200, concurrency: 50 };
  for (let i = 1; i < argv.length; i += 2) opts[argv[i].replace(/^--/, "")] = argv[i + 1];
  return { ...opts, n: Number(opts.n), rate: Number(opts.rate), concurrency: Number(opts.concurrency) };
}

function connection() {
  return new IORedis(URL, { maxRetriesPerRequest: null });
}

async function work(concurrency) {
  const r = connection();
  const worker = new Worker(
    QUEUE,
    async (job) => {
      if (job.name === "latency") {
        const lat = nowNs() - BigInt(job.data.t);
        await r.rpush(LAT, lat.toString());
      } else {
        if (job.name === "sleep") await sleep(SLEEP_MS);
        await r.incr(DONE);
      }
    },
    { connection: connection(), concurrency, removeOnComplete: true },
  );
  const stop = async () => {
    await worker.close();
    r.disconnect();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

async function produce(kind, n, rate) {
  const queue = new Queue(QUEUE, { connection: connection() });
  const out = {};
  if (kind === "latency") {
    const durations = [];
    const start = performance.now();
    for (let i = 0; i < n; i++) {
      const t = nowNs();
      await queue.add("latency", { t: t.toString() });
      durations.push(Number(nowNs() - t));
      const wait = start + ((i + 1) * 1000) / rate - performance.now();
      if (wait > 0) await sleep(wait);
    }
    out.enqueue_ns = durations;
  } else {
    const t0 = performance.now();
    for (let start = 0; start < n; start += 1000) {
      const jobs = [];
      for (let i = start; i < Math.min(n, start + 1000); i++) jobs.push({ name: kind, data: {} });
      await queue.addBulk(jobs);
    }
    out.seconds = (performance.now() - t0) / 1000;
  }
  await queue.close();
  process.stdout.write(JSON.stringify(out) + "\n");
}

const opts = parse(process.argv.slice(2));
if (opts.command === "work") work(opts.concurrency);
else produce(opts.kind, opts.n, opts.rate).then(() => process.exit(0));

// The official JavaScript client's half of client_bench.py: npm bunqueue 2.9.5
// (`bunqueue/client`), run with bun. client_bench.py starts it; run by hand:
//
//   tests/interop/node_modules/.bin/bun benchmarks/client_bench_js.mjs '<config JSON>'
//
// config: {
//   "interop": "/abs/path/tests/interop",   where node_modules/bunqueue is (imported by path,
//                                          so this file needs no node_modules of its own)
//   "mode": "tcp" | "embedded",            embedded: `new Queue(name, {embedded: true})`, the
//                                          client's in-process engine (no server)
//   "port": 6789,                          (tcp) the server on 127.0.0.1
//   "server_pid": 1234,                    (tcp, optional) read its CPU time per window
//   "prefix": "cb-js-r0",                  queue names are <prefix>-<workload label>
//   "workloads": [ {"label": "add-seq", "kind": "add-seq", "n": 5000, "auto_batch": true},
//                  {"kind": "add-gather", "n": 10000, "auto_batch": false, ...},
//                  {"kind": "add-bulk", "n": 50000, "batch": 1000},
//                  {"kind": "worker", "n": 20000, "concurrency": 8} ]
// }
// A workload with "warm": true is run the same way (its queue named <prefix>-<label>-warm) and
// reported with "warm": true; client_bench.py puts a smaller copy of every workload first, so
// bun's JIT has seen the code before the timed ones.
//
// Workloads (the same as client_bench.py's Python side; the clock is wall time around the
// timed part only, queue connected and warmed by a Ping/count before it):
//   add-seq     n x `await queue.add("bench", {i})`, one at a time
//   add-gather  `await Promise.all(n x queue.add("bench", {i}))`, all issued at once
//   add-bulk    n/batch x `await queue.addBulk([...batch x {name, data: {i}}])`, one at a time
//   worker      (untimed) addBulk n jobs in batches of 1000; (timed) from `new Worker(queue,
//               async () => ({ok: true}), {connection, concurrency})` until its n-th
//               'completed' event (emitted once the job's ACK was accepted by the server)
// `auto_batch: false` builds the Queue with `autoBatch: {enabled: false}`: each add() is one
// PUSH. By default (true) the client's AddBatcher sends add() calls as PUSHB (one job when none
// is in flight, up to 50 while one is). After each workload the job counts are checked
// (waiting == n, or completed == n for worker) and the queue is obliterated (untimed).
//
// Output: one JSON line per measurement on stdout:
//   {"client":"js","mode":...,"label":...,"kind":...,"n":...,"warm":false,"auto_batch":...,
//    "batch":...,"concurrency":...,"seconds":...,"client_cpu_s":...,"server_cpu_s":...|null,
//    "jobs_per_s":...,"counts":{...},"ok":true,"first_completion_s":...|null}
// and {"error": "...", "label": ...} (exit status 1) when something failed.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const config = JSON.parse(process.argv[2] ?? '{}');
const out = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');
const { Queue, Worker } = await import(
  join(config.interop, 'node_modules', 'bunqueue', 'dist', 'client', 'index.js'));

const embedded = config.mode === 'embedded';
const connection = embedded ? undefined
  : { host: '127.0.0.1', port: config.port, commandTimeout: 30000 };

// CPU seconds used so far by every thread of the server (scheduler run time, ns, from
// /proc/<pid>/task/*/schedstat), as client_bench.py's proc_cpu reads it.
function serverCpu() {
  if (!config.server_pid) return null;
  let tasks;
  try {
    tasks = readdirSync(`/proc/${config.server_pid}/task`);
  } catch {
    return null;
  }
  let total = 0;
  for (const task of tasks) {
    try {
      total += Number(readFileSync(`/proc/${config.server_pid}/task/${task}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // a thread that ended meanwhile
    }
  }
  return total / 1e9;
}

function clientCpu() {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1e6;
}

function queueOptions(autoBatch) {
  const opts = embedded ? { embedded: true } : { connection };
  if (!embedded && autoBatch === false) opts.autoBatch = { enabled: false };
  return opts;
}

async function counts(queue) {
  return embedded ? await queue.getJobCountsAsync() : await queue.getJobCounts();
}

async function timed(fn) {
  const cpu0 = clientCpu();
  const srv0 = serverCpu();
  const t0 = performance.now();
  await fn();
  const seconds = (performance.now() - t0) / 1000;
  const srv1 = serverCpu();
  return {
    seconds,
    client_cpu_s: clientCpu() - cpu0,
    server_cpu_s: srv0 === null || srv1 === null ? null : srv1 - srv0,
  };
}

async function addBulkAll(queue, n, batch) {
  for (let start = 0; start < n; start += batch) {
    const jobs = [];
    for (let i = start; i < Math.min(n, start + batch); i++) jobs.push({ name: 'bench', data: { i } });
    const added = await queue.addBulk(jobs);
    if (added.length !== jobs.length) throw new Error(`addBulk returned ${added.length} of ${jobs.length}`);
  }
}

async function runOne(w) {
  const label = w.label ?? w.kind;
  const name = `${config.prefix}-${label}${w.warm ? '-warm' : ''}`;
  const queue = new Queue(name, queueOptions(w.auto_batch));
  if (!embedded) await queue.waitUntilReady();
  await counts(queue); // one round trip on the connection before the clock starts
  const n = w.n;
  let timing;
  let expect;
  let firstCompletion = null;
  if (w.kind === 'add-seq') {
    timing = await timed(async () => {
      for (let i = 0; i < n; i++) await queue.add('bench', { i });
    });
    expect = 'waiting';
  } else if (w.kind === 'add-gather') {
    timing = await timed(async () => {
      const pending = new Array(n);
      for (let i = 0; i < n; i++) pending[i] = queue.add('bench', { i });
      await Promise.all(pending);
    });
    expect = 'waiting';
  } else if (w.kind === 'add-bulk') {
    timing = await timed(() => addBulkAll(queue, n, w.batch));
    expect = 'waiting';
  } else if (w.kind === 'worker') {
    await addBulkAll(queue, n, 1000);
    let worker;
    timing = await timed(async () => {
      let completed = 0;
      const t0 = performance.now();
      await new Promise((resolve, reject) => {
        const opts = embedded ? { embedded: true, concurrency: w.concurrency }
          : { connection, concurrency: w.concurrency };
        worker = new Worker(name, async () => ({ ok: true }), opts);
        worker.on('completed', () => {
          completed += 1;
          if (firstCompletion === null) firstCompletion = (performance.now() - t0) / 1000;
          if (completed >= n) resolve();
        });
        worker.on('failed', (job, err) => {
          reject(new Error(`job failed: ${err?.message ?? err}`));
        });
        worker.on('error', (err) => reject(err instanceof Error ? err : new Error(String(err))));
      });
    });
    await worker.close();
    expect = 'completed';
  } else {
    throw new Error(`unknown workload kind ${w.kind}`);
  }
  const c = await counts(queue);
  const ok = c[expect] === n;
  out({
    client: 'js', mode: config.mode, label, kind: w.kind, n, warm: Boolean(w.warm),
    auto_batch: embedded ? null : w.auto_batch !== false,
    batch: w.batch ?? null, concurrency: w.concurrency ?? null,
    ...timing, jobs_per_s: n / timing.seconds, counts: c, ok,
    first_completion_s: firstCompletion,
  });
  await queue.obliterateAsync();
  if (!embedded) await queue.disconnect(); else queue.close();
  if (typeof Bun !== 'undefined') Bun.gc(true);
  if (!ok) throw new Error(`${label}: expected ${expect} == ${n}, counts ${JSON.stringify(c)}`);
}

let current = null;
try {
  for (const w of config.workloads ?? []) {
    current = w.label ?? w.kind;
    await runOne(w);
  }
  process.exit(0);
} catch (err) {
  out({ error: String(err?.stack ?? err), label: current });
  process.exit(1);
}

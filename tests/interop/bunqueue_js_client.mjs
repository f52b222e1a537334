// Drives the REAL npm bunqueue client (bunqueue 2.9.5, `bunqueue/client`) against a server
// over TCP. Run with bun (the client is Bun-only):
//
//   node_modules/.bin/bun bunqueue_js_client.mjs <port> [count] [timeoutMs]
//
// It adds <count> jobs with Queue.add(), processes them with a Worker, and prints one JSON
// line per event on stdout:
//   {"event":"pushed","id":...,"n":...}     one per Queue.add()
//   {"event":"processed","id":...,"n":...}  one per processor call
//   {"event":"completed","id":...}          one per worker 'completed' event
//   {"event":"counts","counts":{...}}       Queue.getJobCounts() at the end
//   {"event":"error","where":...,"message":...}
// Exit 0 when all <count> jobs completed, 1 on error or after timeoutMs.
import { Queue, Worker } from 'bunqueue/client';

const port = Number(process.argv[2] ?? process.env.BUNQUEUE_PORT);
const count = Number(process.argv[3] ?? 10);
const timeoutMs = Number(process.argv[4] ?? 20000);
const queueName = process.env.BUNQUEUE_QUEUE ?? `interop-js-${Date.now()}`;
const out = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

if (!Number.isInteger(port) || port <= 0) {
  out({ event: 'error', where: 'args', message: 'usage: bunqueue_js_client.mjs <port> [count]' });
  process.exit(1);
}

const connection = { host: '127.0.0.1', port };
const timer = setTimeout(() => {
  out({ event: 'error', where: 'timeout', message: `not all ${count} jobs completed in ${timeoutMs} ms` });
  process.exit(1);
}, timeoutMs);

let queue;
let worker;
try {
  queue = new Queue(queueName, { connection });
  out({ event: 'start', queue: queueName, count });
  for (let n = 0; n < count; n++) {
    const job = await queue.add('interop', { n });
    out({ event: 'pushed', id: String(job.id), n });
  }

  const completed = new Set();
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });
  worker = new Worker(queueName, async (job) => {
    out({ event: 'processed', id: String(job.id), n: job.data?.n, name: job.name });
    return { double: job.data.n * 2 };
  }, { connection, concurrency: 2 });
  worker.on('completed', (job) => {
    out({ event: 'completed', id: String(job.id) });
    completed.add(String(job.id));
    if (completed.size >= count) resolveDone();
  });
  worker.on('failed', (job, err) => {
    out({ event: 'error', where: 'failed', id: job ? String(job.id) : null, message: String(err?.message ?? err) });
  });
  worker.on('error', (err) => {
    out({ event: 'error', where: 'worker', message: String(err?.message ?? err) });
  });
  await done;
  // ACKs are batched by the worker (every ~50 ms); close() flushes them.
  await worker.close();
  worker = undefined;
  const counts = await queue.getJobCounts();
  out({ event: 'counts', counts });
  await queue.close();
  clearTimeout(timer);
  process.exit(0);
} catch (err) {
  out({ event: 'error', where: 'exception', message: String(err?.stack ?? err) });
  process.exit(1);
}

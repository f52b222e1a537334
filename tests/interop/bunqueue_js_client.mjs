// Drives the REAL npm bunqueue client (bunqueue 2.9.5, `bunqueue/client`) against a server
// over TCP. Run with bun (the client is Bun-only):
//
//   node_modules/.bin/bun bunqueue_js_client.mjs <port> [count] [timeoutMs]
//
// It opens a QueueEvents listener (SubscribeEvents; the server pushes event frames), adds
// <count> jobs with Queue.add(), processes them with a Worker (which subscribes to its queue's
// events too), and prints one JSON line per event on stdout:
//   {"event":"pushed","id":...,"n":...}       one per Queue.add()
//   {"event":"processed","id":...,"n":...,"name":...,"attempt":...}  one per processor call
//   {"event":"attempt_failed","id":...,"message":...}  a worker 'failed' event (retry mode)
//   {"event":"completed","id":...}            one per worker 'completed' event
//   {"event":"qe_completed","id":...,"returnvalue":...}  QueueEvents 'completed' (pushed frame)
//   {"event":"qe_failed","id":...,"failedReason":...}    QueueEvents 'failed' (pushed frame)
//   {"event":"counts","counts":{...}}         Queue.getJobCounts() at the end
//   {"event":"error","where":...,"message":...}
// Exit 0 when all <count> jobs completed (and QueueEvents saw each completion), 1 on error
// or after timeoutMs.
//
// Environment:
//   BUNQUEUE_QUEUE      queue name
//   BUNQUEUE_TOKEN      connection.token (the client sends Auth first on every connection)
//   BUNQUEUE_FAIL_FIRST "1": each job's first attempt throws; jobs are added with
//                       attempts 2 and a 50 ms backoff, so the second attempt completes
//   BUNQUEUE_WORK_MS    the processor takes this long (default 0)
//   BUNQUEUE_HEARTBEAT_MS  the Worker's heartbeatInterval (default: the client's 10000)
import { Queue, QueueEvents, Worker } from 'bunqueue/client';

const port = Number(process.argv[2] ?? process.env.BUNQUEUE_PORT);
const count = Number(process.argv[3] ?? 10);
const timeoutMs = Number(process.argv[4] ?? 20000);
const queueName = process.env.BUNQUEUE_QUEUE ?? `interop-js-${Date.now()}`;
const token = process.env.BUNQUEUE_TOKEN || undefined;
const failFirst = process.env.BUNQUEUE_FAIL_FIRST === '1';
const workMs = Number(process.env.BUNQUEUE_WORK_MS ?? 0);
const heartbeatMs = process.env.BUNQUEUE_HEARTBEAT_MS ? Number(process.env.BUNQUEUE_HEARTBEAT_MS) : undefined;
const out = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

if (!Number.isInteger(port) || port <= 0) {
  out({ event: 'error', where: 'args', message: 'usage: bunqueue_js_client.mjs <port> [count]' });
  process.exit(1);
}

const connection = token ? { host: '127.0.0.1', port, token } : { host: '127.0.0.1', port };
const timer = setTimeout(() => {
  out({ event: 'error', where: 'timeout', message: `not all ${count} jobs completed in ${timeoutMs} ms` });
  process.exit(1);
}, timeoutMs);

let queue;
let worker;
let queueEvents;
try {
  queueEvents = new QueueEvents(queueName, { connection });
  const seenByEvents = new Set();
  let resolveEventsDone;
  const eventsDone = new Promise((resolve) => { resolveEventsDone = resolve; });
  queueEvents.on('completed', ({ jobId, returnvalue }) => {
    out({ event: 'qe_completed', id: String(jobId), returnvalue });
    seenByEvents.add(String(jobId));
    if (seenByEvents.size >= count) resolveEventsDone();
  });
  queueEvents.on('failed', ({ jobId, failedReason }) => {
    out({ event: 'qe_failed', id: String(jobId), failedReason });
  });
  queueEvents.on('error', (err) => {
    // a failed attempt is also reported as an 'error' by QueueEvents (it carries event.error)
    if (!(failFirst && String(err?.message ?? err).startsWith('first attempt fails'))) {
      out({ event: 'error', where: 'queueEvents', message: String(err?.message ?? err) });
    }
  });
  await queueEvents.waitUntilReady();

  queue = new Queue(queueName, { connection });
  out({ event: 'start', queue: queueName, count });
  const addOpts = failFirst ? { attempts: 2, backoff: 50 } : {};
  for (let n = 0; n < count; n++) {
    const job = await queue.add('interop', { n }, addOpts);
    out({ event: 'pushed', id: String(job.id), n });
  }

  const completed = new Set();
  const attempts = new Map();
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });
  const workerOpts = { connection, concurrency: 2 };
  if (heartbeatMs !== undefined) workerOpts.heartbeatInterval = heartbeatMs;
  worker = new Worker(queueName, async (job) => {
    const id = String(job.id);
    const attempt = (attempts.get(id) ?? 0) + 1;
    attempts.set(id, attempt);
    out({ event: 'processed', id, n: job.data?.n, name: job.name, attempt });
    if (workMs > 0) await new Promise((resolve) => setTimeout(resolve, workMs));
    if (failFirst && attempt === 1) throw new Error(`first attempt fails: ${id}`);
    return { double: job.data.n * 2 };
  }, workerOpts);
  worker.on('completed', (job) => {
    out({ event: 'completed', id: String(job.id) });
    completed.add(String(job.id));
    if (completed.size >= count) resolveDone();
  });
  worker.on('failed', (job, err) => {
    const message = String(err?.message ?? err);
    if (failFirst && message.startsWith('first attempt fails')) {
      out({ event: 'attempt_failed', id: job ? String(job.id) : null, message });
    } else {
      out({ event: 'error', where: 'failed', id: job ? String(job.id) : null, message });
    }
  });
  worker.on('error', (err) => {
    out({ event: 'error', where: 'worker', message: String(err?.message ?? err) });
  });
  await done;
  await eventsDone;
  // ACKs are batched by the worker (every ~50 ms); close() flushes them.
  await worker.close();
  worker = undefined;
  const counts = await queue.getJobCounts();
  out({ event: 'counts', counts });
  queueEvents.close();
  await queue.close();
  clearTimeout(timer);
  process.exit(0);
} catch (err) {
  out({ event: 'error', where: 'exception', message: String(err?.stack ?? err) });
  process.exit(1);
}

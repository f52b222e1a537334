// Testee adapter for the REAL npm bunqueue client (bunqueue 2.9.5, `bunqueue/client`), for
// `queuewire conform client` (the testee contract: docs/conformance/client-testee.md).
// Run with bun from tests/interop (the client is Bun-only):
//
//   node_modules/.bin/bun bunqueue_js_testee.mjs
//
// Reads one JSON request per line on stdin, plays its actions with a fresh Queue (and a
// Worker for "process") on the request's target, and writes {"scenario", "results"} as one
// line on stdout. Options map onto the client's connection options (commandTimeout, token,
// pingInterval, maxCommandTimeouts, poolSize) and worker options (heartbeatInterval,
// lockDuration). The client throws plain Errors; their messages map onto error types:
// 'Command timeout' -> timeout, 'Connection lost'/'Connection closed'/'Not connected' ->
// connection_lost, a server's error string -> refused.
import { Queue, Worker } from 'bunqueue/client';
import readline from 'node:readline';

const SERVER_ERRORS = /Not authenticated|Rate limit exceeded|Invalid token|Invalid command|Invalid request|Unknown command|Job not found|lock token/i;

function errorType(err) {
  const msg = String(err?.message ?? err);
  if (/timeout|timed out/i.test(msg)) return 'timeout';
  if (/Connection (lost|closed)|Not connected|ECONNRESET|socket|Max reconnection/i.test(msg)) return 'connection_lost';
  if (SERVER_ERRORS.test(msg) || /Authentication failed/.test(msg)) return 'refused';
  return 'other';
}

const fail = (err) => ({ ok: false, error: String(err?.message ?? err), error_type: errorType(err) });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const withTimeout = (promise, ms) => Promise.race([promise, sleep(ms)]);

async function play(request) {
  const [host, port] = [request.target.slice(0, request.target.lastIndexOf(':')),
    Number(request.target.slice(request.target.lastIndexOf(':') + 1))];
  const o = request.options ?? {};
  const connection = { host, port };
  if (o.command_timeout != null) connection.commandTimeout = o.command_timeout;
  if (o.token != null) connection.token = o.token;
  if (o.ping_interval != null) connection.pingInterval = o.ping_interval;
  if (o.max_command_timeouts != null) connection.maxCommandTimeouts = o.max_command_timeouts;
  if (o.pool_size != null) connection.poolSize = o.pool_size;
  const queues = new Map();
  const queue = (name) => {
    if (!queues.has(name)) queues.set(name, new Queue(name, { connection }));
    return queues.get(name);
  };
  const results = [];
  for (const action of request.actions ?? []) {
    try {
      results.push({ ok: true, value: await act(action, queue, connection, o) });
    } catch (err) {
      results.push(fail(err));
    }
  }
  for (const q of queues.values()) {
    try { await withTimeout(Promise.resolve(q.close()), 2000); } catch { /* closing */ }
  }
  return results;
}

async function act(action, queue, connection, o) {
  switch (action.op) {
    case 'add': {
      const job = await queue(action.queue).add(action.name, action.data ?? {});
      return { id: String(job.id) };
    }
    case 'add_many': {
      const q = queue(action.queue);
      const jobs = await Promise.all((action.items ?? []).map((item) => q.add(action.name, item)));
      return { ids: jobs.map((job) => String(job.id)) };
    }
    case 'count':
      return await queue(action.queue).countAsync();
    case 'get_job': {
      const job = await queue(action.queue).getJob(action.id);
      return job ? { id: String(job.id) } : null;
    }
    case 'sleep':
      await sleep(action.ms ?? 0);
      return null;
    case 'process':
      return await processJobs(action, connection, o);
    default: {
      const err = new Error(`unknown op ${action.op}`);
      throw Object.assign(err, { unsupported: true });
    }
  }
}

async function processJobs(action, connection, o) {
  const want = action.count ?? 1;
  const ids = [];
  const errors = [];
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });
  const opts = { connection, concurrency: 1 };
  if (o.heartbeat_interval != null) opts.heartbeatInterval = o.heartbeat_interval;
  if (o.lock_ttl != null) opts.lockDuration = o.lock_ttl;
  const worker = new Worker(action.queue, async (job) => {
    ids.push(String(job.id));
    if (action.work_ms) await sleep(action.work_ms);
    if (ids.length >= want) resolveDone();
    return { processed: String(job.id) };
  }, opts);
  worker.on('error', (err) => errors.push(String(err?.message ?? err)));
  const timedOut = await Promise.race([done.then(() => false), sleep(action.timeout_ms ?? 10000).then(() => true)]);
  try { await withTimeout(worker.close(), 2000 + (action.work_ms ?? 0)); } catch { /* closing */ }
  if (timedOut) throw new Error(`process timeout: processed ${ids.length} of ${want} job(s)`);
  return { ids, errors };
}

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  if (!line.trim()) continue;
  let request;
  try { request = JSON.parse(line); } catch (err) { console.error(`not JSON: ${err}`); continue; }
  let results;
  try {
    results = await play(request);
  } catch (err) {
    results = (request.actions ?? []).map(() => fail(err));
  }
  process.stdout.write(JSON.stringify({ scenario: request.scenario, results }) + '\n');
}
process.exit(0);

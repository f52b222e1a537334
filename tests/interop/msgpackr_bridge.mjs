// A line-oriented bridge to msgpackr, the MessagePack library bunqueue's server and client
// use, with its module-level defaults exactly as bunqueue calls them (pack / unpack).
// stdin: one JSON request per line
//   {"op": "decode", "hex": "<payload>"}   -> {"ok": true, "value": <tagged>, "repacked": "<hex>"}
//   {"op": "encode", "value": <tagged>}    -> {"ok": true, "hex": "<payload>"}
// Errors come back as {"ok": false, "error": "<message>"}; the bridge never exits on one.
// Tagged JSON keeps what JSON cannot say: {"$undefined": true}, {"$bigint": "123"},
// {"$date": <ms>}, {"$binary": "<hex>"}; numbers carry {"$float": x} when not integral.
import { pack, unpack } from 'msgpackr';
import { createInterface } from 'node:readline';

function tag(v) {
  if (v === undefined) return { $undefined: true };
  if (typeof v === 'bigint') return { $bigint: v.toString() };
  if (v instanceof Date) return { $date: v.getTime() };
  if (v instanceof Uint8Array) return { $binary: Buffer.from(v).toString('hex') };
  if (Array.isArray(v)) return v.map(tag);
  if (v !== null && typeof v === 'object') {
    const out = {};
    for (const [k, x] of Object.entries(v)) out[k] = tag(x);
    return out;
  }
  return v;
}

function untag(v) {
  if (Array.isArray(v)) return v.map(untag);
  if (v !== null && typeof v === 'object') {
    if ('$undefined' in v) return undefined;
    if ('$bigint' in v) return BigInt(v.$bigint);
    if ('$date' in v) return new Date(v.$date);
    if ('$binary' in v) return Uint8Array.from(Buffer.from(v.$binary, 'hex'));
    const out = {};
    for (const [k, x] of Object.entries(v)) out[k] = untag(x);
    return out;
  }
  return v;
}

const rl = createInterface({ input: process.stdin });
for await (const line of rl) {
  let reply;
  try {
    const req = JSON.parse(line);
    if (req.op === 'decode') {
      const value = unpack(Buffer.from(req.hex, 'hex'));
      reply = { ok: true, value: tag(value), repacked: Buffer.from(pack(value)).toString('hex') };
    } else if (req.op === 'encode') {
      reply = { ok: true, hex: Buffer.from(pack(untag(req.value))).toString('hex') };
    } else {
      reply = { ok: false, error: `unknown op ${req.op}` };
    }
  } catch (e) {
    reply = { ok: false, error: String(e && e.message || e) };
  }
  process.stdout.write(JSON.stringify(reply) + '\n');
}

// A grpc-js server (spec/sdk's @grpc/grpc-js + @grpc/proto-loader) for spec/lib/grpc_spec.lua, serving
// spec/fixtures/grpc/test.proto insecurely (h2c) on loopback. It counts the HTTP/2 connections
// it accepts (by watching the http2 servers grpc-js creates) and the calls open at once.
//
//   node grpc_server.mjs PORTFILE   -> writes {"port": N} to PORTFILE once listening
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const here = path.dirname(fileURLToPath(import.meta.url));
const sdk = path.join(here, '..', 'sdk', 'node_modules');
const http2 = require('node:http2');
let connections = 0;
const createServer = http2.createServer;
http2.createServer = function (...args) { // grpc-js calls this when binding: count its sessions
  const s = createServer.apply(this, args);
  s.on('session', () => { connections++; });
  return s;
};
const grpc = require(path.join(sdk, '@grpc', 'grpc-js'));
const loader = require(path.join(sdk, '@grpc', 'proto-loader'));

const def = loader.loadSync(path.join(here, '..', 'fixtures', 'grpc', 'test.proto'),
  { keepCase: true, longs: String, enums: Number, defaults: false, oneofs: true });
const pkg = grpc.loadPackageDefinition(def).cseng.grpctest;

let calls = 0, open = 0, maxOpen = 0, lastDeadline = 0;
const barrier = [];
const gates = new Map();
function track(fn) {
  return (call, cb) => {
    calls++; open++; maxOpen = Math.max(maxOpen, open);
    let closed = false;
    const done = () => { if (!closed) { closed = true; open--; } };
    call.on('cancelled', done);
    if (cb) return fn(call, (...a) => { done(); cb(...a); });
    call.on('finish', done);
    return fn(call);
  };
}

const server = new grpc.Server();
server.addService(pkg.Test.service, {
  Echo: track((call, cb) => {
    const md = {};
    for (const [k, v] of Object.entries(call.metadata.getMap())) md[k] = Buffer.isBuffer(v) ? 'bin:' + v.toString('hex') : String(v);
    const r = call.request;
    cb(null, { text: r.text, data: r.data, nums: r.nums, labels: r.labels, inner: r.inner, metadata: md });
  }),
  Count: track((call) => {
    const { n, id, gated, fail_at } = call.request;
    let i = 0;
    const next = () => {
      i++;
      if (fail_at && i === fail_at) { call.emit('error', { code: grpc.status.ABORTED, details: `failed at ${i}` }); return; }
      call.write({ i, pad: 'x'.repeat(i * 1000) });
      if (i >= n) { gates.delete(id); call.end(); return; }
      if (gated) gates.set(id, next); else setImmediate(next);
    };
    next();
  }),
  Release: track((call, cb) => {
    const next = gates.get(call.request.id);
    if (!next) return cb({ code: grpc.status.NOT_FOUND, details: 'no stream ' + call.request.id });
    cb(null, { i: 0 });
    next();
  }),
  Fail: track((call, cb) => {
    const md = new grpc.Metadata();
    md.set('x-detail', 'see-trailers');
    cb({ code: call.request.code, details: call.request.message, metadata: md });
  }),
  Hang: track((call, cb) => {
    const d = call.getDeadline();
    lastDeadline = d instanceof Date ? d.getTime() - Date.now() : (d === Infinity ? -1 : Number(d) - Date.now());
    // never answers: the client's deadline ends the call
    void cb;
  }),
  Barrier: track((call, cb) => {
    barrier.push(cb);
    if (barrier.length >= call.request.n) {
      const n = barrier.length;
      for (const c of barrier.splice(0)) c(null, { text: `released with ${n} open` });
    }
  }),
  Stats: track((call, cb) => {
    cb(null, { connections, calls, max_open: maxOpen, last_deadline_ms: String(lastDeadline) });
  }),
});

server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err) { console.error(err); process.exit(1); }
  fs.writeFileSync(process.argv[2] + '.tmp', JSON.stringify({ port }));
  fs.renameSync(process.argv[2] + '.tmp', process.argv[2]);
});
process.on('SIGTERM', () => process.exit(0));

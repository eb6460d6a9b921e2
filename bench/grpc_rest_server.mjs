// bench/grpc_vs_rest.lua's servers, one node process: a grpc-js server (h2c) answering
// cseng.bench.Bench/Call and an HTTP/1.1 server answering POST /call with the same content as
// JSON. Both hold each call DELAY_MS and report how long they held it (CallReply.held_ns, the
// X-Held-Ns header), so the client's timing error is its measured time minus that.
//
//   node grpc_rest_server.mjs PORTFILE DELAY_MS   -> {"grpc": port, "rest": port}
import { createRequire } from 'node:module';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const here = path.dirname(fileURLToPath(import.meta.url));
const sdk = path.join(here, '..', 'spec', 'sdk', 'node_modules');
const grpc = require(path.join(sdk, '@grpc', 'grpc-js'));
const loader = require(path.join(sdk, '@grpc', 'proto-loader'));
const delay = Number(process.argv[3] || 20);
const def = loader.loadSync(path.join(here, 'grpc_bench.proto'), { keepCase: true, longs: String, defaults: false });
const pkg = grpc.loadPackageDefinition(def).cseng.bench;

const server = new grpc.Server();
server.addService(pkg.Bench.service, {
  Call: (call, cb) => {
    const t0 = process.hrtime.bigint();
    setTimeout(() => {
      const held = process.hrtime.bigint() - t0;
      cb(null, { id: call.request.id, stdout: 'arena-startup-ready-20261001\n', exit_code: 0, held_ns: held.toString() });
    }, delay);
  },
});

const rest = http.createServer((req, res) => {
  const t0 = process.hrtime.bigint();
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = JSON.parse(Buffer.concat(chunks).toString() || '{}');
    setTimeout(() => {
      const out = JSON.stringify({ id: body.id, stdout: 'arena-startup-ready-20261001\n', exit_code: 0 });
      const held = process.hrtime.bigint() - t0;
      res.writeHead(200, { 'content-type': 'application/json', 'x-held-ns': held.toString(), 'content-length': Buffer.byteLength(out) });
      res.end(out);
    }, delay);
  });
});
rest.keepAliveTimeout = 60000;

server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err) { console.error(err); process.exit(1); }
  rest.listen(0, '127.0.0.1', () => {
    fs.writeFileSync(process.argv[2] + '.tmp', JSON.stringify({ grpc: port, rest: rest.address().port }));
    fs.renameSync(process.argv[2] + '.tmp', process.argv[2]);
  });
});
process.on('SIGTERM', () => process.exit(0));

// A scripted raw HTTP/1.1 server on loopback for spec/engine/http_native_spec.lua, on node's `net`
// module: every reply is written byte for byte as the route says (no HTTP library on this side),
// so both of cseng.http's paths (engine/h1.c and libcurl) meet the same odd servers.
//
//   node h1_raw_server.mjs PORTFILE [--tls CERT KEY [ALPN,...]]
//     -> writes {"port": port} to PORTFILE once listening; with --tls it speaks TLS (node's `tls`,
//        the certificate and key given, ALPN http/1.1 unless a list is given: spec/engine/https_native_spec.lua)
//
// Every reply that carries one has X-Conn: the server's number for the connection it came on
// (the spec leaves it out of the comparison between the paths). Routes (the path, query ignored
// but where said):
//   /cl             Content-Length body "hello"        /chunked    chunked, trailers X-T and X-U
//   /close          HTTP/1.0, no length, body to the close
//   /h10            HTTP/1.0 with Content-Length, no keep-alive (the server leaves it open)
//   /continue       100 Continue, then 200              /head       Content-Length 1234, no body
//   /continue-1     100 Continue, 103 Early Hints and 200 in one write
//   /204 /304       no body (304 with a Content-Length) /cookies    two Set-Cookie lines
//   /empty-header   X-Empty with an empty value         /big        5 MiB chunked (64 KiB chunks)
//   /dribble        the reply 3 bytes at a time         /truncated  Content-Length 100, 10 bytes, FIN
//   /noreply        FIN without a byte                  /garbage    not an HTTP status line, FIN
//   /idle-close     a keep-alive reply; the server closes the connection 100 ms later
//   /extra          a reply followed by a second, unasked one in the same write
//   /slowread       reads nothing for 200 ms, then the body: its length and a checksum back
//   /echo-raw       the request head as received, as the body
//   /slow?id=X      answers after 3 s; /slow-state?id=X says "pending" or "answered"
//   /stream         chunked, 5 chunks 50 ms apart       /hold       200 "held" after 100 ms
//   /keepalive-once a reply; the next request on that connection is closed unanswered
//   /conn-close     HTTP/1.1 with Connection: close, the server leaves the connection open
//   /fold           a header folded on two lines        /noreason   a status line without reason
//   /lf-only        lines ended by LF alone             /bigheaders 90 KiB of headers
//   /early          (POST) a 413 as soon as the head came; the body read 300 ms later and dropped
//   /cl-and-te      both a Content-Length and Transfer-Encoding: chunked
//   /weird?kind=K   one of a list of odd replies (see the route), then FIN
//   /stats          {"connections": n, "requests": n}
//   /tls-info       (TLS) {"resumed": the handshake resumed a session, "alpn": ..., "servername": SNI or false}
//   /close-raw      (TLS) HTTP/1.0, a body to the close, closed without close_notify (a truncation, to TLS)
//   /idle-raw-close (TLS) a keep-alive reply; 100 ms later the connection is closed without close_notify
import net from 'node:net';
import tls from 'node:tls';
import fs from 'node:fs';
import crypto from 'node:crypto';

const portfile = process.argv[2];
let connections = 0, requests = 0;
const slow = new Map();

const reply = (status, headers, body) => {
  let s = `HTTP/1.1 ${status}\r\n`;
  for (const [k, v] of headers) s += `${k}: ${v}\r\n`;
  return Buffer.concat([Buffer.from(s + '\r\n'), Buffer.from(body || '')]);
};

function handle(sock, conn, head, body) {
  const [method, target] = head.split('\r\n')[0].split(' ');
  const url = new URL(target, 'http://x');
  const q = url.searchParams;
  const x = ['X-Conn', String(conn)];
  const send = (b) => { if (!sock.destroyed) sock.write(b); };
  requests++;
  switch (url.pathname) {
    case '/cl':
      send(reply('200 OK', [['Content-Type', 'text/plain'], ['Content-Length', 5], x], 'hello'));
      break;
    case '/chunked':
      send(Buffer.from('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T, X-U\r\nX-Conn: ' + conn +
        '\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\nX-T: done\r\nX-U: 42\r\n\r\n'));
      break;
    case '/close':
      sock.end('HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nX-Conn: ' + conn + '\r\n\r\nall of this until the close');
      break;
    case '/h10':
      send('HTTP/1.0 200 OK\r\nContent-Length: 2\r\nX-Conn: ' + conn + '\r\n\r\nok');
      break;
    case '/continue':
      send('HTTP/1.1 100 Continue\r\nX-Interim: yes\r\n\r\n');
      setTimeout(() => send(reply('200 OK', [['Content-Length', 4], ['X-Final', 'yes'], x], 'done')), 20);
      break;
    case '/continue-1':
      send('HTTP/1.1 100 Continue\r\nX-Interim: yes\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n' +
        'HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX-Final: yes\r\nX-Conn: ' + conn + '\r\n\r\ndone');
      break;
    case '/head':
      send(reply('200 OK', [['Content-Type', 'text/plain'], ['Content-Length', 1234], x]));
      break;
    case '/204':
      send(reply('204 No Content', [['X-Kind', 'none'], x]));
      break;
    case '/304':
      send(reply('304 Not Modified', [['ETag', '"v1"'], ['Content-Length', 10], x]));
      break;
    case '/cookies':
      send(reply('200 OK', [['Set-Cookie', 'a=1; Path=/'], ['Content-Length', 2], ['Set-Cookie', 'b=2'], x], 'ok'));
      break;
    case '/empty-header':
      send('HTTP/1.1 200 OK\r\nX-Empty:\r\nX-Spaces:   \r\nContent-Length: 2\r\nX-Conn: ' + conn + '\r\n\r\nok');
      break;
    case '/big': {
      send(`HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Conn: ${conn}\r\n\r\n`);
      const piece = Buffer.alloc(64 * 1024);
      for (let i = 0; i < 80; i++) { // 80 x 64 KiB = 5 MiB
        piece.fill(65 + (i % 26));
        send(Buffer.concat([Buffer.from(piece.length.toString(16) + '\r\n'), piece, Buffer.from('\r\n')]));
      }
      send('0\r\n\r\n');
      break;
    }
    case '/dribble': {
      const all = reply('200 OK', [['Content-Type', 'text/plain'], ['X-Dribbled', 'yes'], ['Content-Length', 26], x],
        'abcdefghijklmnopqrstuvwxyz');
      let off = 0;
      const next = () => {
        if (off >= all.length || sock.destroyed) return;
        send(all.subarray(off, off + 3));
        off += 3;
        setTimeout(next, 2);
      };
      next();
      break;
    }
    case '/truncated':
      sock.end(reply('200 OK', [['Content-Length', 100], x], '0123456789'));
      break;
    case '/noreply':
      sock.end();
      break;
    case '/garbage':
      sock.end('SSH-2.0-OpenSSH_9.2 not http at all\r\n\r\n');
      break;
    case '/idle-close':
      send(reply('200 OK', [['Content-Length', 4], x], 'idle'));
      setTimeout(() => sock.end(), 100);
      break;
    case '/extra':
      send(Buffer.concat([reply('200 OK', [['Content-Length', 2], x], 'ok'),
        reply('200 OK', [['Content-Length', 5], ['X-Unasked', 'yes']], 'bogus')]));
      break;
    case '/slowread': // the body was read after the pause (see the reader)
      send(reply('200 OK', [['Content-Length', 0], ['X-Len', body.length],
        ['X-Sum', crypto.createHash('sha256').update(body).digest('hex')], x]));
      break;
    case '/echo-raw':
      send(reply('200 OK', [['Content-Type', 'text/plain'], ['Content-Length', Buffer.byteLength(head)],
        ['X-Body', body.toString('hex')], x], head));
      break;
    case '/slow': {
      const id = q.get('id');
      slow.set(id, 'pending');
      setTimeout(() => { slow.set(id, 'answered'); send(reply('200 OK', [['Content-Length', 4], x], 'late')); }, 3000);
      break;
    }
    case '/slow-state': {
      const s = slow.get(q.get('id')) || 'unknown';
      send(reply('200 OK', [['Content-Length', s.length], x], s));
      break;
    }
    case '/stream': {
      send(`HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Conn: ${conn}\r\n\r\n`);
      let k = 0;
      const next = () => {
        if (sock.destroyed) return;
        k++;
        const c = `part ${k};`;
        send(`${c.length.toString(16)}\r\n${c}\r\n`);
        if (k < 5) setTimeout(next, 50);
        else send('0\r\n\r\n');
      };
      next();
      break;
    }
    case '/hold':
      setTimeout(() => send(reply('200 OK', [['Content-Length', 4], x], 'held')), 100);
      break;
    case '/early': // answered when its head came (see the reader)
      break;
    case '/cl-and-te': // both a Content-Length and chunked (RFC 7230 3.3.3: the chunking wins)
      send('HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\nX-Conn: ' + conn +
        '\r\n\r\n5\r\nhello\r\n0\r\n\r\n');
      break;
    case '/weird': { // odd replies by name (?kind=); the connection closed after each
      const kinds = {
        'no-colon': 'HTTP/1.1 200 OK\r\nX-A: 1\r\nNoColonHere\r\nContent-Length: 2\r\n\r\nok',
        'space-before-colon': 'HTTP/1.1 200 OK\r\nX-Sp : v\r\nContent-Length: 2\r\n\r\nok',
        'bad-length': 'HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nok',
        'two-lengths': 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok!',
        'same-two-lengths': 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok',
        'status-2-digits': 'HTTP/1.1 20 OK\r\nContent-Length: 2\r\n\r\nok',
        'status-999': 'HTTP/1.1 999 Odd\r\nContent-Length: 2\r\n\r\nok',
        'http2-line': 'HTTP/2 200\r\nContent-Length: 2\r\n\r\nok',
        'http11-lower': 'http/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok',
        'bad-chunk': 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n',
        'chunk-ext': 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;name=val\r\nhello\r\n0\r\n\r\n',
        'te-gzip-chunked': 'HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
        'te-identity': 'HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\nContent-Length: 2\r\n\r\nok',
        'tab-value': 'HTTP/1.1 200 OK\r\nX-Tab:\tv\t\r\nContent-Length: 2\r\n\r\nok',
        'utf8-value': 'HTTP/1.1 200 OK\r\nX-U: caf\u00e9\r\nContent-Length: 2\r\n\r\nok',
        'trailer-no-chunk': 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-Only: t\r\n\r\n',
        'interim-then-close': 'HTTP/1.1 100 Continue\r\n\r\n',
        'status-only': 'HTTP/1.1 200 OK\r\n',
        'reason-missing-space': 'HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok',
        '204-with-length': 'HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello',
        '304-chunked': 'HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n',
        'h11-to-close': 'HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the close',
        'http10-keepalive': 'HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok',
      };
      sock.end(Buffer.from(kinds[q.get('kind')] || 'HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n', 'utf8'));
      break;
    }
    case '/keepalive-once': // answered; the next request on this connection is dropped unanswered
      sock.dropNext = true;
      send(reply('200 OK', [['Content-Length', 4], x], 'once'));
      break;
    case '/conn-close': // HTTP/1.1 with Connection: close (the server leaves it open)
      send(reply('200 OK', [['Connection', 'close'], ['Content-Length', 2], x], 'cc'));
      break;
    case '/fold': // an obsolete line folding (RFC 7230 3.2.4)
      send('HTTP/1.1 200 OK\r\nX-Fold: first\r\n second\r\nContent-Length: 2\r\nX-Conn: ' + conn + '\r\n\r\nok');
      break;
    case '/noreason':
      send('HTTP/1.1 200\r\nContent-Length: 2\r\nX-Conn: ' + conn + '\r\n\r\nok');
      break;
    case '/lf-only':
      send('HTTP/1.1 200 OK\nContent-Length: 2\nX-Lf: yes\nX-Conn: ' + conn + '\n\nok');
      break;
    case '/bigheaders': // 90 KiB of headers: within libcurl's limits (100 KiB a header, 300 KiB in all)
      send(reply('200 OK', [['X-Big-1', 'a'.repeat(45 * 1024)], ['X-Big-2', 'b'.repeat(45 * 1024)],
        ['Content-Length', 2], x], 'ok'));
      break;
    case '/close-raw':
      send('HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nX-Conn: ' + conn + '\r\n\r\nall of this until the close');
      sock.write('', () => sock.destroy());
      break;
    case '/idle-raw-close':
      send(reply('200 OK', [['Content-Length', 4], x], 'idle'));
      setTimeout(() => sock.destroy(), 100);
      break;
    case '/tls-info': {
      const s = JSON.stringify({ resumed: !!(sock.isSessionReused && sock.isSessionReused()),
        alpn: sock.alpnProtocol || false, servername: sock.servername || false });
      send(reply('200 OK', [['Content-Type', 'application/json'], ['Content-Length', s.length], x], s));
      break;
    }
    case '/stats': {
      const s = JSON.stringify({ connections, requests });
      send(reply('200 OK', [['Content-Type', 'application/json'], ['Content-Length', s.length], x], s));
      break;
    }
    default:
      send(reply('404 Not Found', [['Content-Length', 7], x], 'no such'));
  }
  void method;
}

const onConnection = (sock) => {
  const conn = ++connections;
  let buf = Buffer.alloc(0);
  let want = -1, head = null, paused = false;
  sock.setNoDelay(true);
  sock.on('error', () => {});
  const pump = () => {
    for (;;) {
      if (paused) return;
      if (head === null) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        head = buf.subarray(0, end + 4).toString('latin1');
        if (sock.dropNext) { // see /keepalive-once
          sock.end();
          return;
        }
        buf = buf.subarray(end + 4);
        const m = /\r\ncontent-length:\s*(\d+)/i.exec(head);
        want = m ? Number(m[1]) : 0;
        if (head.startsWith('POST /early')) { // answered before its body is read (e.g. a 413)
          sock.write(reply('413 Payload Too Large', [['Content-Length', 8], ['X-Conn', String(conn)]], 'too big!'));
          paused = true; // then 300 ms without reading, and the body read and dropped
          sock.pause();
          setTimeout(() => { paused = false; sock.resume(); pump(); }, 300);
          return;
        }
        if (head.startsWith('POST /slowread') || head.startsWith('PUT /slowread')) {
          paused = true; // read nothing more for 200 ms: the client's write queues up
          sock.pause();
          setTimeout(() => { paused = false; sock.resume(); pump(); }, 200);
          return;
        }
      }
      if (buf.length < want) return;
      const body = buf.subarray(0, want);
      buf = buf.subarray(want);
      const h = head;
      head = null;
      handle(sock, conn, h, body);
    }
  };
  sock.on('data', (d) => { buf = Buffer.concat([buf, d]); pump(); });
};
const tlsAt = process.argv.indexOf('--tls');
const server = tlsAt > 0
  ? tls.createServer({ cert: fs.readFileSync(process.argv[tlsAt + 1]), key: fs.readFileSync(process.argv[tlsAt + 2]),
    ALPNProtocols: (process.argv[tlsAt + 3] || 'http/1.1').split(',') }, onConnection)
  : net.createServer(onConnection);
server.on('tlsClientError', () => {}); // a client that refuses the certificate
server.maxConnections = 5000;

server.listen(0, '127.0.0.1', 1024, () => {
  fs.writeFileSync(portfile + '.tmp', JSON.stringify({ port: server.address().port }));
  fs.renameSync(portfile + '.tmp', portfile);
});
process.on('SIGTERM', () => process.exit(0));

// Proxyless gRPC client on @grpc/grpc-js-xds for test/e2e.
//
// Usage: GRPC_XDS_BOOTSTRAP=FILE NODE_PATH=DIR/node_modules node client.js TARGET PHASES_JSON
//
// The same contract as client.py: PHASES_JSON is a list of
// {"n": RPCS, "metadata": [[KEY, VALUE], ...]}; the script sends each
// phase's unary grpc.testing.TestService/UnaryCall RPCs over one
// xds:///TARGET channel and prints one JSON line, a list, per phase, of
// {BACKEND_HOSTNAME: COUNT}. Messages stay raw bytes: the request is an
// empty SimpleRequest; only SimpleResponse.hostname (field 6) is read.
'use strict';

const grpc = require('@grpc/grpc-js');
require('@grpc/grpc-js-xds').register();

const METHOD = '/grpc.testing.TestService/UnaryCall';
const HOSTNAME_FIELD = 6;

// varint returns [value, next index] of the varint at buf[i].
function varint(buf, i) {
  let value = 0;
  let mul = 1;
  for (;;) {
    const b = buf[i++];
    value += (b & 0x7f) * mul;
    if (b < 0x80) return [value, i];
    mul *= 128;
  }
}

// hostname returns SimpleResponse.hostname from its wire bytes.
function hostname(buf) {
  let i = 0;
  while (i < buf.length) {
    let key;
    [key, i] = varint(buf, i);
    const field = Math.floor(key / 8);
    const wire = key & 7;
    if (wire === 0) {
      [, i] = varint(buf, i);
    } else if (wire === 1) {
      i += 8;
    } else if (wire === 5) {
      i += 4;
    } else if (wire === 2) {
      let size;
      [size, i] = varint(buf, i);
      if (field === HOSTNAME_FIELD) return buf.subarray(i, i + size).toString('utf8');
      i += size;
    } else {
      throw new Error(`unsupported wire type ${wire}`);
    }
  }
  return '';
}

function call(client, md) {
  return new Promise((resolve, reject) => {
    const metadata = new grpc.Metadata();
    for (const [k, v] of md) metadata.add(k, v);
    client.makeUnaryRequest(METHOD, (b) => b, (b) => b, Buffer.alloc(0), metadata,
      { deadline: Date.now() + 20000 }, (err, res) => (err ? reject(err) : resolve(hostname(res))));
  });
}

async function main() {
  const [target, phasesJSON] = process.argv.slice(2);
  const phases = JSON.parse(phasesJSON);
  const client = new grpc.Client('xds:///' + target, grpc.credentials.createInsecure());
  await new Promise((resolve, reject) =>
    client.waitForReady(Date.now() + 20000, (err) => (err ? reject(err) : resolve())));
  const out = [];
  for (const phase of phases) {
    const counts = {};
    for (let j = 0; j < phase.n; j++) {
      const name = await call(client, phase.metadata || []);
      counts[name] = (counts[name] || 0) + 1;
    }
    out.push(counts);
  }
  client.close();
  // The xDS client's ADS stream outlives the channel and would keep the
  // process alive: exit once the answer is out.
  process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0));
}

main().catch((err) => {
  process.stderr.write(`client.js: ${err.stack || err}\n`);
  process.exit(1);
});

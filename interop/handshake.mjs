// One side of a Cable Handshake over TCP, spoken by cable-handshake.ts 1.0.0, for interop/run.py's
// `handshake` step (interop/handshake_steps.py drives it).  Our code; only the Handshake, Noise and
// PostHandshakeTransport classes are cable-handshake.ts's, loaded from a built checkout:
//
//   CABLE_HANDSHAKE_TS=/path/to/cable-handshake.ts node interop/handshake.mjs ROLE PORT PSK SECRET PROLOGUE STEPS
//
// ROLE: responder (listens on 127.0.0.1:PORT, 0 for any, and takes one connection) or initiator
// (connects to 127.0.0.1:PORT).  PSK: the cabal key, hex.  SECRET: the X25519 static private key,
// hex.  PROLOGUE: the Noise prologue as text ("CABLE1.0" is cable-handshake.ts's default,
// "CABLE/1.0" the spec's).  STEPS: comma-separated, after the handshake: send:N (a message of N
// bytes, byte k = (31k + N) mod 256), recv (read one message), eos (writeEos), readeos (readEos).
// Prints one JSON object a line: listening, handshake (with both static keys), sent, message
// (length and sha256; length 0 is an end-of-stream marker), sent-eos, eos, error, done.
import { createHash } from 'node:crypto'
import { createRequire } from 'node:module'
import net from 'node:net'
import path from 'node:path'
import { pathToFileURL } from 'node:url'

const dir = process.env.CABLE_HANDSHAKE_TS
if (!dir) {
  console.error('set CABLE_HANDSHAKE_TS to a built cable-handshake.ts checkout (npm install && npx tsc)')
  process.exit(2)
}
const [role, port, pskHex, secretHex, prologue, steps] = process.argv.slice(2)
const { Handshake } = await import(pathToFileURL(path.join(dir, 'dist/src/handshake.js')).href)
const { Noise } = await import(pathToFileURL(path.join(dir, 'dist/src/noise.js')).href)
const dh = createRequire(path.join(dir, 'package.json'))('noise-handshake/dh.js')

const say = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')
const pattern = (n) => { const b = Buffer.alloc(n); for (let k = 0; k < n; k++) b[k] = (31 * k + n) & 0xff; return b }
const sha = (b) => createHash('sha256').update(b).digest('hex')
setTimeout(() => { say({ event: 'error', message: 'timed out' }); process.exit(3) }, 20000).unref()

async function run (socket) {
  const initiator = role === 'initiator'
  const key = dh.generateKeyPair(Buffer.from(secretHex, 'hex'))
  const psk = Buffer.from(pskHex, 'hex')
  const noise = new Noise(initiator, key, psk, Buffer.from(prologue))
  const tx = await new Handshake(key, psk, initiator, socket, noise).handshake()
  say({ event: 'handshake', local_static: key.publicKey.toString('hex') })
  for (const step of steps ? steps.split(',') : []) {
    if (step.startsWith('send:')) {
      const msg = pattern(Number(step.slice(5)))
      await tx.write(msg)
      say({ event: 'sent', length: msg.length, sha256: sha(msg) })
    } else if (step === 'recv') {
      const msg = await tx.read()
      say({ event: 'message', length: msg.length, sha256: sha(msg) })
    } else if (step === 'eos') {
      await tx.writeEos()
      say({ event: 'sent-eos' })
    } else if (step === 'readeos') {
      await tx.readEos()
      say({ event: 'eos' })
    } else {
      throw new Error(`unknown step ${step}`)
    }
  }
}

function finish (socket, err) {
  if (err) say({ event: 'error', message: String(err && err.message || err) })
  else say({ event: 'done' })
  socket.end(() => process.exit(err ? 1 : 0))
  setTimeout(() => process.exit(err ? 1 : 0), 500).unref()
}

if (role === 'responder') {
  const server = net.createServer((socket) => {
    server.close()
    run(socket).then(() => finish(socket), (err) => finish(socket, err))
  })
  server.listen(Number(port), '127.0.0.1', () => say({ event: 'listening', port: server.address().port }))
} else {
  const socket = net.connect(Number(port), '127.0.0.1', () => {
    run(socket).then(() => finish(socket), (err) => finish(socket, err))
  })
  socket.on('error', (err) => { say({ event: 'error', message: String(err.message) }); process.exit(1) })
}

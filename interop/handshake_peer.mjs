// cable-handshake.ts 1.0.0 as a Cable peer's transport, against real cablestore processes, for interop/run.py's
// `handshake` step (interop/handshake_peers.py drives it).  Our code; only Handshake, Noise and the
// PostHandshakeTransport it returns are cable-handshake.ts's, loaded from a built checkout (CABLE_HANDSHAKE_TS).
//
//   node interop/handshake_peer.mjs ask PORT PSK SECRET PROLOGUE HEX...
//     initiator: connect to 127.0.0.1:PORT (cablestore serve --cabal-key), send each HEX as one message
//     (a draft8 wire message, msg_len included), then read messages until one is a final answer to each
//     request, printing each message (hex); then the end-of-stream marker.
//   node interop/handshake_peer.mjs relay PSK SECRET PROLOGUE BACKEND_PORT
//     responder: listen on 127.0.0.1 (any port, printed), take one connection, and after the handshake
//     carry messages both ways between it and a plain TCP backend on BACKEND_PORT that speaks draft8
//     wire messages back to back (split here by their msg_len varint): a small responder serving the
//     backend's posts through cable-handshake.ts's transport.
// Prints one JSON object a line: listening, handshake, sent, message (length, hex up to 4 KB), eos, error, done.
import { createRequire } from 'node:module'
import net from 'node:net'
import path from 'node:path'
import { pathToFileURL } from 'node:url'

const dir = process.env.CABLE_HANDSHAKE_TS
if (!dir) {
  console.error('set CABLE_HANDSHAKE_TS to a built cable-handshake.ts checkout (npm install && npx tsc)')
  process.exit(2)
}
const { Handshake } = await import(pathToFileURL(path.join(dir, 'dist/src/handshake.js')).href)
const { Noise } = await import(pathToFileURL(path.join(dir, 'dist/src/noise.js')).href)
const dh = createRequire(path.join(dir, 'package.json'))('noise-handshake/dh.js')
const say = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')
setTimeout(() => { say({ event: 'error', message: 'timed out' }); process.exit(3) }, 30000).unref()

const [mode, ...args] = process.argv.slice(2)

async function handshake (socket, initiator, pskHex, secretHex, prologue) {
  const key = dh.generateKeyPair(Buffer.from(secretHex, 'hex'))
  const psk = Buffer.from(pskHex, 'hex')
  const tx = await new Handshake(key, psk, initiator, socket, new Noise(initiator, key, psk, Buffer.from(prologue))).handshake()
  say({ event: 'handshake', local_static: key.publicKey.toString('hex') })
  return tx
}

function varint (buf, pos) { // [value, next position] or null when not whole
  let value = 0; let shift = 0
  for (let i = pos; i < buf.length && i < pos + 10; i++) {
    value += (buf[i] & 0x7f) * 2 ** shift
    if (buf[i] < 0x80) return [value, i + 1]
    shift += 7
  }
  return null
}

function finish (socket, err) {
  if (err) say({ event: 'error', message: String(err && err.message || err) })
  else say({ event: 'done' })
  socket.end(() => process.exit(err ? 1 : 0))
  setTimeout(() => process.exit(err ? 1 : 0), 500).unref()
}

if (mode === 'ask') {
  const [port, pskHex, secretHex, prologue, ...messages] = args
  const socket = net.connect(Number(port), '127.0.0.1', async () => {
    try {
      const tx = await handshake(socket, true, pskHex, secretHex, prologue)
      for (const hex of messages) {
        await tx.write(Buffer.from(hex, 'hex'))
        say({ event: 'sent', length: hex.length / 2 })
      }
      // Answers: a channel list response (type 7) concludes at once; a hash response (type 0) with no hashes concludes.
      let open = messages.length
      while (open > 0) {
        const msg = await tx.read()
        say({ event: 'message', length: msg.length, hex: msg.length <= 4096 ? msg.toString('hex') : null })
        const head = varint(msg, 0)
        const type = head && varint(msg, head[1])
        if (type && (type[0] === 7 || (type[0] === 0 && msg.length === type[1] + 8 + 1 && msg[msg.length - 1] === 0))) open--
      }
      await tx.writeEos()
      say({ event: 'sent-eos' })
      finish(socket)
    } catch (err) { finish(socket, err) }
  })
  socket.on('error', (err) => { say({ event: 'error', message: String(err.message) }); process.exit(1) })
} else if (mode === 'relay') {
  const [pskHex, secretHex, prologue, backendPort] = args
  const server = net.createServer(async (socket) => {
    server.close()
    let tx
    try { tx = await handshake(socket, false, pskHex, secretHex, prologue) } catch (err) { finish(socket, err); return }
    const backend = net.connect(Number(backendPort), '127.0.0.1')
    let held = Buffer.alloc(0)
    let counts = { to_backend: 0, from_backend: 0 }
    backend.on('data', async (data) => {
      held = Buffer.concat([held, data])
      for (;;) {
        const head = varint(held, 0)
        if (!head || held.length < head[1] + head[0]) break
        const msg = held.subarray(0, head[1] + head[0])
        held = held.subarray(head[1] + head[0])
        counts.from_backend++
        await tx.write(Buffer.from(msg))
      }
    })
    backend.on('error', (err) => finish(socket, err))
    try {
      for (;;) {
        const msg = await tx.read()
        if (msg.length === 0) break // the initiator's end-of-stream marker
        counts.to_backend++
        backend.write(msg)
      }
      say({ event: 'eos', ...counts })
      await tx.writeEos()
      backend.end()
      finish(socket)
    } catch (err) {
      say({ event: 'relayed', ...counts })
      backend.end()
      finish(socket, err)
    }
  })
  server.listen(0, '127.0.0.1', () => say({ event: 'listening', port: server.address().port }))
} else {
  console.error(`unknown mode ${mode}`)
  process.exit(2)
}

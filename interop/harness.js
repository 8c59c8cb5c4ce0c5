// A cable-core.js 0.2.1 peer on TCP, for checking cablestore against the
// reference implementation on the wire (see interop/README.md).  Our code:
// it only loads cable-core.js from the checkout given in CABLE_CORE_JS.
//
//   node harness.js serve PORT SECONDS        author a small workload, listen, answer
//   node harness.js pull HOST PORT SECONDS    connect, request everything, print what it holds
//
// Messages are framed on the socket exactly as the wire defines them
// (msg_len varint, then the message); cable-core's swarm takes messages
// without msg_len in its "data" events and broadcasts whole ones.

const path = require("path")
const net = require("net")
const EventEmitter = require("events").EventEmitter

const root = process.env.CABLE_CORE_JS
if (!root) { console.error("set CABLE_CORE_JS to a cable-core.js 0.2.1 checkout"); process.exit(2) }
const { CableCore } = require(path.join(root, "index.js"))
const varint = require(path.join(root, "node_modules", "varint"))

let network = null

class TcpNetwork extends EventEmitter {
  constructor () { super(); this.sockets = new Set(); network = this }

  attach (socket) {
    this.sockets.add(socket)
    let pending = Buffer.alloc(0)
    const address = `${socket.remoteAddress}:${socket.remotePort}`
    socket.on("data", chunk => {
      pending = Buffer.concat([pending, chunk])
      while (pending.length > 0) {
        let len
        try { len = varint.decode(pending) } catch (e) { return }  // length not complete yet
        const start = varint.decode.bytes
        if (pending.length < start + len) return
        const data = pending.subarray(start, start + len)
        pending = pending.subarray(start + len)
        this.emit("data", { address, data })
      }
    })
    socket.on("close", () => this.sockets.delete(socket))
    socket.on("error", () => this.sockets.delete(socket))
    this.emit("peer-connected")
  }

  broadcast (data) { for (const s of this.sockets) s.write(data) }
  makeContact () {}
}

const cb = (f) => new Promise((resolve, reject) => f((err, v) => err ? reject(err) : resolve(v)))
const step = (f) => new Promise(resolve => f(resolve))
const hex = (b) => Buffer.from(b).toString("hex")

async function snapshot (core) {
  const channels = (await cb(done => core.getChannels(done))).slice().sort()
  const out = { channels: {} }
  for (const ch of channels) {
    const chat = await cb(done => core.store.getChannelTimeRange(ch, 0, 0, 0, done))
    const state = await cb(done => core.getChannelStateHashes(ch, done))
    const topic = await cb(done => core.getTopic(ch, done))
    const members = await cb(done => core.store.channelMembershipView.api.getUsersInChannel(ch, done))
    out.channels[ch] = {
      time_range: chat.map(hex),
      state: state.map(hex).sort(),
      topic: topic || "",
      members: members.map(m => typeof m === "string" ? m : hex(m)).sort()
    }
  }
  return out
}

async function authorWorkload (core) {
  // Two channels, a topic, a name, texts, a deletion, a leave: every post type.
  await step(done => core.join("interop", done))
  await step(done => core.setName("cable-core", done))
  await step(done => core.setTopic("interop", "talking to cablestore", done))
  const deleted = []
  for (let i = 0; i < 5; i++) {
    const buf = await new Promise(resolve => { const b = core.postText("interop", `hello ${i}`, () => resolve(b)) })
    deleted.push(buf)
  }
  const crypto = require(path.join(root, "node_modules", "cable.js", "cryptography.js"))
  await step(done => core.del(crypto.hash(deleted[1]), done))
  await step(done => core.join("second", done))
  await step(done => core.postText("second", "in the second channel", done))
  await step(done => core.leave("second", done))
}

async function serve (port, seconds) {
  const core = new CableCore(null, { network: [TcpNetwork] })
  await authorWorkload(core)
  const server = net.createServer(socket => network.attach(socket))
  server.listen(port, "127.0.0.1", () => console.log(`listening on 127.0.0.1:${server.address().port}`))
  // A post written while peers are connected: live requests must receive it.
  setTimeout(() => core.postText("interop", "written while you were listening"), seconds * 500)
  setTimeout(async () => {
    console.log(JSON.stringify(await snapshot(core)))
    server.close(); for (const s of network.sockets) s.destroy()
    process.exit(0)
  }, seconds * 1000)
}

async function pull (host, port, seconds) {
  const core = new CableCore(null, { network: [TcpNetwork] })
  const socket = net.connect(port, host, () => {
    network.attach(socket)
    core.requestChannels(0, 0, 0)
  })
  // Once the channel list is in, ask each channel's history and state.
  const asked = new Set()
  const poll = setInterval(async () => {
    for (const ch of await cb(done => core.getChannels(done))) {
      if (asked.has(ch)) continue
      asked.add(ch)
      core.requestPosts(ch, 0, Date.now() + 60000, 0, 0)
      core.requestState(ch, 0, 0)
    }
  }, 200)
  setTimeout(async () => {
    clearInterval(poll)
    console.log(JSON.stringify(await snapshot(core)))
    socket.destroy()
    process.exit(0)
  }, seconds * 1000)
}

const [mode, ...args] = process.argv.slice(2)
if (mode === "serve") serve(Number(args[0]), Number(args[1]))
else if (mode === "pull") pull(args[0], Number(args[1]), Number(args[2]))
else { console.error("usage: harness.js serve PORT SECONDS | pull HOST PORT SECONDS"); process.exit(2) }

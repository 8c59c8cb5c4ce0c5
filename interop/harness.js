// A cable-core.js 0.2.1 peer on TCP, for checking cablestore against the
// reference implementation on the wire (see interop/README.md).  Our code:
// it only loads cable-core.js from the checkout given in CABLE_CORE_JS.
//
//   node harness.js serve PORT SECONDS        author a small workload (chat and moderation), listen, answer
//                                             (prints "listening on HOST:PORT", then "moderation {labelled
//                                             users and post hashes}", and what it holds when it stops)
//   node harness.js pull HOST PORT SECONDS    connect, request everything, print what it holds
//   node harness.js pull-moderation HOST PORT CHANNEL... SECONDS
//                                             connect, request moderation state, print the hashes it holds
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
  // A mixed-case channel: cable-core.js compares names exactly, cablestore casefolds them.
  await step(done => core.join("Dev-Talk", done))
  await step(done => core.setTopic("Dev-Talk", "Mixed Case", done))
  for (let i = 0; i < 3; i++) await step(done => core.postText("Dev-Talk", `mixed ${i}`, done))
  return deleted
}

// Moderation posts by cable-core's local user (who is admin everywhere for
// itself), each labelled so run.py can name the hashes a moderation state
// request is answered with.  None of them hides or drops a post or channel
// that the chat comparison reads.
async function authorModeration (core, texts) {
  const crypto = require(path.join(root, "node_modules", "cable.js", "cryptography.js"))
  const constants = require(path.join(root, "node_modules", "cable.js", "constants.js"))
  const users = {}
  for (const name of ["mod", "admin", "spammer", "troll", "abuser", "forgiven", "elsewhere", "secret"]) users[name] = hex(crypto.generateKeypair().publicKey)
  const posts = {}
  let ts = Date.now()
  const add = async (label, make) => {
    ts += 1
    const buf = await new Promise(resolve => { const b = make(ts, () => resolve(b)) })
    posts[label] = { hash: hex(crypto.hash(buf)), timestamp: ts }
  }
  await add("role mod (cabal)", (t, done) => core.assignRole(users.mod, "", t, constants.MOD_FLAG, "cabal mod", 0, done))
  await add("role admin (interop)", (t, done) => core.assignRole(users.admin, "interop", t, constants.ADMIN_FLAG, "channel admin", 0, done))
  await add("role user (cabal), replaces role mod", (t, done) => core.assignRole(users.mod, "", t, constants.USER_FLAG, "stepped down", 0, done))
  await add("role mod (elsewhere)", (t, done) => core.assignRole(users.elsewhere, "elsewhere", t, constants.MOD_FLAG, "", 0, done))
  await add("role mod (cabal), privacy=1", (t, done) => core.assignRole(users.secret, "", t, constants.MOD_FLAG, "private", 1, done))
  await add("hide user spammer (interop)", (t, done) => core.moderateUsers([users.spammer], "interop", constants.ACTION_HIDE_USER, "spam", 0, t, done))
  await add("unhide user spammer (interop), replaces the hide", (t, done) => core.moderateUsers([users.spammer], "interop", constants.ACTION_UNHIDE_USER, "forgiven", 0, t, done))
  await add("hide user troll (cabal)", (t, done) => core.moderateUsers([users.troll], "", constants.ACTION_HIDE_USER, "cabal-wide", 0, t, done))
  await add("hide user troll (elsewhere)", (t, done) => core.moderateUsers([users.troll], "elsewhere", constants.ACTION_HIDE_USER, "", 0, t, done))
  await add("hide post hello 3", (t, done) => core.moderatePosts([hex(crypto.hash(texts[3]))], constants.ACTION_HIDE_POST, "rude", 0, t, done))
  await add("drop channel junk", (t, done) => core.moderateChannel("junk", constants.ACTION_DROP_CHANNEL, "off-topic", 0, t, done))
  await add("block abuser (drop, notify)", (t, done) => core.blockUsers([users.abuser], 1, 1, "abuse", 0, t, done))
  await add("unblock forgiven (undrop)", (t, done) => core.unblockUsers([users.forgiven], 1, "", 0, t, done))
  return { local_user: hex(core.kp.publicKey), users, posts }
}

async function serve (port, seconds) {
  const core = new CableCore(null, { network: [TcpNetwork] })
  const texts = await authorWorkload(core)
  const moderation = await authorModeration(core, texts)
  const server = net.createServer(socket => network.attach(socket))
  server.listen(port, "127.0.0.1", () => {
    console.log(`listening on 127.0.0.1:${server.address().port}`)
    console.log(`moderation ${JSON.stringify(moderation)}`)
  })
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

// Asks a peer for the moderation state of `channels` (message type 8), so
// cable-core.js requests and stores the posts it is answered with; prints
// the hashes of every post it then holds.  A post cable.js refuses to parse
// ends the process (cable-core.js does not catch it): exit status 1.
async function pullModeration (host, port, channels, seconds) {
  const core = new CableCore(null, { network: [TcpNetwork] })
  const socket = net.connect(port, host, () => {
    network.attach(socket)
    core.requestModeration(0, channels, 0, 0)
  })
  setTimeout(async () => {
    const stored = []
    for (const key of await cb(done => core.store.authorView.api.getUniquePublicKeys(done))) {
      for (const h of await cb(done => core.store.authorView.api.getAllHashesByAuthor(key, done))) stored.push(hex(h))
    }
    console.log(JSON.stringify({ stored }))
    socket.destroy()
    process.exit(0)
  }, seconds * 1000)
}

const [mode, ...args] = process.argv.slice(2)
if (mode === "serve") serve(Number(args[0]), Number(args[1]))
else if (mode === "pull") pull(args[0], Number(args[1]), Number(args[2]))
else if (mode === "pull-moderation") pullModeration(args[0], Number(args[1]), args.slice(2, -1), Number(args[args.length - 1]))
else { console.error("usage: harness.js serve PORT SECONDS | pull HOST PORT SECONDS | pull-moderation HOST PORT CHANNEL... SECONDS"); process.exit(2) }

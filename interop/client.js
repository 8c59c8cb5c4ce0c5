// Drives cable-client.js 0.1.1 (the library cable-cli 0.1.1 runs) over its
// own TCP transport (its tcp-network.js) against a Cable peer, for checking
// cablestore against the deployed client (see interop/README.md).  Our code:
// it only loads cable-client.js from the checkout given in CABLE_CLIENT_JS.
//
//   node client.js HOST PORT SECONDS [CHANNEL=TEXT | del:CHANNEL=TEXT ...]
//
// Starts the client as cable-cli does with --tcp (shim.js's Client, an
// in-memory store, DHT and LAN transports off, tcp-network.js connecting to
// HOST:PORT), lets it sync for half of SECONDS, then posts each TEXT to its
// CHANNEL with the client's own postText (del:CHANNEL=TEXT: and then deletes
// it with deleteSingle), and at SECONDS prints one JSON line
// of what the client shows through its API: every channel (getAllChannels),
// each channel's messages in the order getChat gives them (virtual status
// messages left out), topic (getTopic) and members (getChannelMembers), the
// users' names, the local user's key, and the hashes of the posts it wrote.
// Progress goes to stderr; exit 0 when it ran, 1 when the client threw.

const path = require("path")
const fs = require("fs")
const os = require("os")

const root = process.env.CABLE_CLIENT_JS
if (!root) { console.error("set CABLE_CLIENT_JS to a cable-client.js 0.1.1 checkout"); process.exit(2) }
const [host, portArg, secondsArg, ...posts] = process.argv.slice(2)
const port = Number(portArg), seconds = Number(secondsArg)
if (!host || !(port > 0) || !(seconds > 0) || posts.some(p => !p.includes("="))) {
  console.error("usage: client.js HOST PORT SECONDS [CHANNEL=TEXT ...]"); process.exit(2)
}

const { Client } = require(path.join(root, "shim.js"))
const crypto = require(path.join(root, "node_modules", "cable.js", "cryptography.js"))

process.on("uncaughtException", err => {
  console.error(`cable-client.js threw: ${err && err.stack ? err.stack.split("\n").slice(0, 3).join(" | ") : err}`)
  process.exit(1)
})

const dbdir = fs.mkdtempSync(path.join(os.tmpdir(), "cable-client-"))
const client = new Client({
  config: {
    temp: true, dbdir, serve: false, ip: host, tcpPort: port,
    disableDHT: true, disableLAN: true, disableTCP: false
  }
})

const hex = (b) => Buffer.from(b).toString("hex")

function snapshot (cc, written) {
  return new Promise(resolve => {
    const out = { local_user: cc.localUser.key, written, channels: {}, names: {} }
    for (const [key, user] of cc.getUsers()) out.names[key] = user.currentName
    const channels = cc.getAllChannels()
    let left = channels.length
    if (left === 0) return resolve(out)
    for (const ch of channels) {
      cc.getChat(ch, { tsNewerThan: 0, limit: 100000 }, (msgs) => {
        out.channels[String(ch)] = {
          name_type: typeof ch,
          messages: msgs.filter(m => m.postType >= 0).map(m => ({
            hash: m.postHash, post_type: m.postType, timestamp: m.timestamp, text: m.text, links: m.links || []
          })),
          topic: cc.getTopic(ch) || "",
          members: Object.keys(cc.getChannelMembers(ch)).sort()
        }
        if (--left === 0) resolve(out)
      })
    }
  })
}

client.addCabal(hex(crypto.randomBytes(32))).then(details => {
  const cc = details.cc
  console.error(`cable-client.js ready, local user ${cc.localUser.key}, connecting to ${host}:${port}`)
  const written = []
  setTimeout(() => {
    for (const p of posts) {
      const i = p.indexOf("=")
      const channel = p.slice(0, i), text = p.slice(i + 1)
      const del = channel.startsWith("del:")
      cc.postText(text, del ? channel.slice(4) : channel)
      // del:CHANNEL=TEXT: the post is then deleted with the client's deleteSingle (a post/delete)
      if (del) setTimeout(() => cc.deleteSingle(written[written.length - 1].hash), 500)
    }
  }, seconds * 500)
  // cable-core.js 0.2.1's postText returns the post's bytes: wrapped to record the hashes written.
  const postText = cc.core.postText.bind(cc.core)
  cc.core.postText = (channel, text, done) => {
    const buf = postText(channel, text, done)
    if (buf) written.push({ channel, text, hash: hex(crypto.hash(buf)) })
    return buf
  }
  setTimeout(async () => {
    const line = JSON.stringify(await snapshot(cc, written)) + "\n"
    fs.rmSync(dbdir, { recursive: true, force: true })
    process.stdout.write(line, () => process.exit(0))  // exit only once a large line is written to the pipe
  }, seconds * 1000)
})

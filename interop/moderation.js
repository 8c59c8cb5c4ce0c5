// Decodes posts with cable.js 0.2.1's own parser, for checking that the
// moderation posts cablestore writes decode there (see interop/README.md).
// Our code; only the parser, the hash and the encoders are cable.js's.
//
//   CABLE_JS=/path/to/cable.js node interop/moderation.js < lines
//
// Each input line is `POST_HEX [SECRET_KEY_HEX]` (or `create-info ...`, below).  Each output line is one
// JSON object, in input order:
//   {"ok": true, "hash": ..., "post": {fields as cable.js parsePost returns
//    them, buffers as hex}, "reencoded": HEX | null, "reencode_error": ...}
//   {"ok": false, "error": "the message cable.js threw"}
// With a secret key (64 bytes, libsodium's seed + public key), the parsed
// fields are handed back to cable.js's own `<TYPE>_POST.create`, whose bytes
// are "reencoded" (Ed25519 signatures are deterministic, so an encoder that
// agrees byte for byte gives the same post).

const path = require("path")
const root = process.env.CABLE_JS
if (!root) { console.error("set CABLE_JS to a cable.js 0.2.1 checkout"); process.exit(2) }
const cable = require(path.join(root, "index.js"))
const crypto = require(path.join(root, "cryptography.js"))
const constants = require(path.join(root, "constants.js"))

const hex = (v) => Buffer.isBuffer(v) || v instanceof Uint8Array ? Buffer.from(v).toString("hex")
  : Array.isArray(v) ? v.map(hex) : v

function reencode (p, secretKey) {
  const pk = Buffer.from(p.publicKey)
  switch (p.postType) {
    case constants.ROLE_POST:
      return cable.ROLE_POST.create(pk, secretKey, p.links, p.channel, p.timestamp, p.recipient, p.role, p.reason, p.privacy)
    case constants.MODERATION_POST:
      return cable.MODERATION_POST.create(pk, secretKey, p.links, p.channel, p.timestamp, p.recipients, p.action, p.reason, p.privacy)
    case constants.BLOCK_POST:
      return cable.BLOCK_POST.create(pk, secretKey, p.links, p.timestamp, p.recipients, p.drop, p.notify, p.reason, p.privacy)
    case constants.UNBLOCK_POST:
      return cable.UNBLOCK_POST.create(pk, secretKey, p.links, p.timestamp, p.recipients, p.undrop, p.reason, p.privacy)
    case constants.INFO_POST: // accept-role opt-outs: cable.js takes accept-role as an integer
      return cable.INFO_POST.create(pk, secretKey, p.links, p.timestamp, [...p.info.entries()])
    default:
      throw new Error(`not a moderation post type: ${p.postType}`)
  }
}

// `create-info SECRET_KEY_HEX TIMESTAMP KVARR_JSON`: cable.js writes a post/info (no links), e.g.
// [["accept-role", 0]]; the output line is {"ok": true, "buf": HEX} or {"ok": false, "error": ...}.
function createInfo (skHex, timestamp, kvarr) {
  const sk = Buffer.from(skHex, "hex")
  try {
    return { ok: true, buf: hex(cable.INFO_POST.create(sk.subarray(32), sk, [], Number(timestamp), JSON.parse(kvarr))) }
  } catch (e) { return { ok: false, error: String(e && e.message || e) } }
}

function one (line) {
  if (line.startsWith("create-info ")) {
    const [, skHex, timestamp, ...rest] = line.trim().split(" ")
    return createInfo(skHex, timestamp, rest.join(" "))
  }
  const [postHex, skHex] = line.trim().split(/\s+/)
  const buf = Buffer.from(postHex, "hex")
  let post
  try {
    post = cable.parsePost(buf)
    // The post type parsers *return* (not throw) an Error for a mismatched type.
    if (post instanceof Error) throw post
  } catch (e) {
    return { ok: false, error: String(e && e.message || e) }
  }
  const out = { ok: true, hash: hex(crypto.hash(buf)), post: {}, reencoded: null }
  for (const [k, v] of Object.entries(post)) out.post[k] = v instanceof Map ? [...v.entries()] : hex(v)
  if (skHex) {
    try { out.reencoded = hex(reencode(post, Buffer.from(skHex, "hex"))) } catch (e) { out.reencode_error = String(e && e.message || e) }
  }
  return out
}

let input = ""
process.stdin.setEncoding("utf8")
process.stdin.on("data", (chunk) => { input += chunk })
process.stdin.on("end", () => {
  for (const line of input.split("\n")) {
    if (line.trim()) process.stdout.write(JSON.stringify(one(line)) + "\n")
  }
})

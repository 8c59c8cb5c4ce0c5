// Decodes posts with cable.js 0.2.1's own parser, for checking that the
// moderation posts cablestore writes decode there (see interop/README.md).
// Our code; only the parser, the hash and the encoders are cable.js's.
//
//   CABLE_JS=/path/to/cable.js node interop/moderation.js < lines
//
// Each input line is `POST_HEX [SECRET_KEY_HEX]`.  Each output line is one
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
    default:
      throw new Error(`not a moderation post type: ${p.postType}`)
  }
}

function one (line) {
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
  for (const [k, v] of Object.entries(post)) out.post[k] = hex(v)
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

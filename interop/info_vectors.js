// Writes post/info vectors with accept-role, with the real cable.js 0.2.1 encoder:
//   CABLE_JS=/path/to/cable.js node interop/info_vectors.js > tests/data/cable-js-0.2.1-accept-role.json
// wire.md §6.2.4 makes accept-role's value a varint; cable.js writes it so (INFO_POST.create with an integer)
// and refuses anything but the one byte 0x00 or 0x01 (validation.checkAcceptRole), writing and parsing.
// Keys are crypto_sign_seed_keypair(BLAKE2b-256("cablestore moderation vector key <name>")), the keys of
// tests/data/cable-js-0.2.1-moderation.json; timestamps are fixed, so every run writes the same bytes.
// Each post is parsed back by cable.js's parsePost and its info recorded as parsed.  The "refused" cases are
// bytes cable.js's parsePost throws on (its message kept) and values its INFO_POST.create throws on.
// Our code; only the encoder, the parser and the crypto are cable.js's.
const path = require("path")
const root = process.env.CABLE_JS || "cable.js"
const cable = require(path.join(root, "index.js"))
const sodium = require(require.resolve("sodium-universal", { paths: [root] }))

function keypair (name) {
  const seed = Buffer.alloc(32)
  sodium.crypto_generichash(seed, Buffer.from(`cablestore moderation vector key ${name}`))
  const publicKey = Buffer.alloc(32)
  const secretKey = Buffer.alloc(64)
  sodium.crypto_sign_seed_keypair(publicKey, secretKey, seed)
  return { publicKey, secretKey }
}

const LINK = Buffer.from("aa78493a41cf5e7cb7e2acef724b989092d5bb142f4bf68fc59fd7a605b9c92a", "hex")
const out = {}
const refused = {}

function add (name, who, links, timestamp, kvarr) {
  const kp = keypair(who)
  const buf = cable.INFO_POST.create(kp.publicKey, kp.secretKey, links, timestamp, kvarr)
  const parsed = cable.parsePost(Buffer.from(buf))
  if (parsed instanceof Error) throw parsed
  out[name] = {
    author: who,
    public_key: kp.publicKey.toString("hex"),
    signature: Buffer.from(parsed.signature).toString("hex"),
    links: links.map((l) => l.toString("hex")),
    post_type: parsed.postType,
    timestamp: parsed.timestamp,
    info: [...parsed.info.entries()], // as cable.js parsed it back: accept-role as a number
  }
  out[name + " binary"] = buf.toString("hex")
  return buf
}

add("info post accept-role 0", "alice", [], 1700000000100, [["accept-role", 0]])
add("info post accept-role 1", "bob", [], 1700000000101, [["accept-role", 1]])
const both = add("info post name and accept-role 0", "alice", [], 1700000000102, [["name", "alice"], ["accept-role", 0]])
add("info post accept-role 1 and name", "mod", [LINK], 1700000000103, [["accept-role", 1], ["name", "möd ☕"]])

// What cable.js refuses to parse: `both` with another accept-role value, signed again with alice's key
// (parsePost checks the signature first).
const crypto = require(path.join(root, "cryptography.js"))
function swapped (valueBytes) {
  const tail = Buffer.concat([Buffer.from([11]), Buffer.from("accept-role"), Buffer.from([valueBytes.length]), valueBytes, Buffer.from([0])])
  const head = both.subarray(0, both.length - 15) // 15: the accept-role pair (1 + 11 + 1 + 1 bytes) and the terminator
  const buf = Buffer.concat([head, tail])
  crypto.sign(buf, keypair("alice").secretKey)
  return buf
}
for (const [name, value] of [
  ["text 0", Buffer.from("0")],
  ["text 1", Buffer.from("1")],
  ["varint 2", Buffer.from([2])],
  ["two bytes 0x00 0x00", Buffer.from([0, 0])],
  ["empty", Buffer.alloc(0)],
]) {
  const buf = swapped(value)
  const binary = buf.toString("hex") // before parsing: a failed signature check zeroes the payload in place
  let error = null
  try {
    const p = cable.parsePost(buf)
    if (p instanceof Error) throw p
  } catch (e) { error = String(e && e.message || e) }
  if (error === null) throw new Error(`cable.js parsed the accept-role value ${name}`)
  refused[`accept-role ${name}`] = { binary, cable_js_error: error }
}
const created = {}
const kp = keypair("alice")
for (const [name, value] of [["string \"0\"", "0"], ["2", 2]]) {
  try {
    cable.INFO_POST.create(kp.publicKey, kp.secretKey, [], 1700000000104, [["accept-role", value]])
    throw new Error(`cable.js wrote accept-role ${name}`)
  } catch (e) { created[`accept-role ${name}`] = String(e && e.message || e) }
}
out["refused by parsePost"] = refused
out["refused by INFO_POST.create"] = created
console.log(JSON.stringify(out, null, 1))

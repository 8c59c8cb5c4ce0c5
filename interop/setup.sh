#!/bin/sh
# Sets up the reference implementations interop/run.py talks to, outside the
# repository (nothing of theirs is ever committed here):
#
#   interop/setup.sh [DIR]        default DIR: /tmp/interop
#
# DIR/cable.js         cabal-club/cable.js       tag v0.2.1  (the codec)
# DIR/cable-core.js    cabal-club/cable-core.js  tag v0.2.1  (the peer; run.py's CABLE_CORE_JS)
# DIR/cable-client.js  cabal-club/cable-client.js tag v0.1.1 (the client on top of it)
# DIR/cable-handshake.ts cabal-club/cable-handshake.ts tag v1.0.0 (the Cable Handshake; run.py's CABLE_HANDSHAKE_TS)
#
# Sources: cloned from GitHub at those tags, or, when CABLE_GIT_MIRROR names a
# directory holding their git directories as cabal-club+<name>/repo, exported
# from there with `git archive` (how the recorded run was set up: a mirror,
# no network to GitHub).  Dependencies: from the npm registry with npm.
# cable.js and cable-core are not published there, so the two that depend on
# them get the checkouts linked into node_modules instead.
#
# cable-handshake.ts is built with its own TypeScript compiler (its dev dependencies).
#
# Then:  CABLE_CORE_JS=DIR/cable-core.js python interop/run.py
#        CABLE_HANDSHAKE_TS=DIR/cable-handshake.ts python interop/run.py handshake
set -eu

dir=${1:-/tmp/interop}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

checkout() { # NAME TAG
    if [ -e "$dir/$1" ]; then
        echo "setup.sh: $dir/$1 exists; remove it to set it up again" >&2
        exit 2
    fi
    if [ -n "${CABLE_GIT_MIRROR:-}" ]; then
        mkdir "$dir/$1"
        git --git-dir="$CABLE_GIT_MIRROR/cabal-club+$1/repo" archive "$2" | tar -x -C "$dir/$1"
    else
        git -c advice.detachedHead=false clone --quiet --depth 1 --branch "$2" "https://github.com/cabal-club/$1" "$dir/$1"
    fi
}

drop_deps() { # drop dependencies the registry lacks from ./package.json (they are linked instead)
    node -e 'const fs = require("fs"); const p = JSON.parse(fs.readFileSync("package.json"));
             for (const d of process.argv.slice(1)) delete p.dependencies[d];
             fs.writeFileSync("package.json", JSON.stringify(p, null, 1) + "\n")' "$@"
}

checkout cable.js v0.2.1
checkout cable-core.js v0.2.1
checkout cable-client.js v0.1.1
checkout cable-handshake.ts v1.0.0

(cd "$dir/cable.js" && npm install --omit=dev --no-audit --no-fund)

# cable-core.js depends on cable.js ^0.2.1; harness.js also loads varint from here.
(cd "$dir/cable-core.js" && drop_deps cable.js \
    && npm install --omit=dev --no-audit --no-fund \
    && npm install --omit=dev --no-audit --no-fund --no-save varint@6.0.0 \
    && ln -s "$dir/cable.js" node_modules/cable.js)

# cable-client.js depends on cable.js ^0.2.1 and cable-core ^0.2.1.
(cd "$dir/cable-client.js" && drop_deps cable.js cable-core \
    && npm install --omit=dev --no-audit --no-fund \
    && ln -s "$dir/cable.js" node_modules/cable.js \
    && ln -s "$dir/cable-core.js" node_modules/cable-core)

# cable-handshake.ts: built into dist/ with its own tsc.
(cd "$dir/cable-handshake.ts" && npm install --no-audit --no-fund && npx tsc)

# Each one loads.
(cd "$dir/cable.js" && node -e 'require("./index.js")')
(cd "$dir/cable-core.js" && node -e 'require("./index.js"); require("varint")')
(cd "$dir/cable-client.js" && node -e 'require("./cable-client.js")')
(cd "$dir/cable-handshake.ts" && node --input-type=module -e 'await import("./dist/src/handshake.js"); await import("./dist/src/noise.js")')
echo "set up in $dir; now: CABLE_CORE_JS=$dir/cable-core.js python interop/run.py"
echo "and: CABLE_HANDSHAKE_TS=$dir/cable-handshake.ts python interop/run.py handshake"

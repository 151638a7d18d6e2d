#!/usr/bin/env bash
# Builds the images twice from this commit into two empty directories and compares the digests: the static image
# (ovn-egressip) must come out byte for byte the same. The node image is compared too and reported (its Debian root
# is the machine's cached mmdebstrap output, so it is the same as long as the cache is). Exit 1 on a difference.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
a=$(mktemp -d) b=$(mktemp -d)
trap 'rm -rf "$a" "$b"' EXIT
IMAGE_OUT=$a "$here/build.sh" >"$a/digests"
IMAGE_OUT=$b "$here/build.sh" >"$b/digests"
paste "$a/digests" "$b/digests" | while read -r ref1 d1 _ d2; do
  if [[ $d1 == "$d2" ]]; then echo "reproducible: $ref1 $d1 (built twice)"; else echo "NOT reproducible: $ref1 $d1 then $d2"; fi
done
cmp -s "$a/digests" "$b/digests"

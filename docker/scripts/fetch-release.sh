#!/usr/bin/env bash
# fetch-release.sh URL sha256|sha512 DEST: download an Apache release tarball, check it against the
# checksum file published next to it (plain "HASH  name" or BSD "SHA512 (name) = HASH" form, any
# case and line wrapping), and unpack it into DEST without its top directory.
set -euo pipefail
url="$1"
algo="$2"
dest="$3"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
name="$(basename "$url")"
curl -fsSL --retry 3 -o "$work/$name" "$url"
curl -fsSL --retry 3 -o "$work/$name.$algo" "$url.$algo"
raw="$(tr -d '\r' < "$work/$name.$algo")"
case "$raw" in
  *=*) expected="${raw##*=}" ;;                                # SHA512 (name) = HASH
  *:*) expected="${raw#*:}" ;;                                 # name: HE XH AS H (gpg --print-md)
  *) expected="$(printf '%s\n' "$raw" | awk 'NR==1{print $1}')" ;; # HASH  name
esac
expected="$(printf '%s' "$expected" | tr -d ' \n\t' | tr 'A-F' 'a-f')"
actual="$("${algo}sum" "$work/$name" | cut -d' ' -f1)"
if [ "$expected" != "$actual" ]; then
  echo "fetch-release.sh: $name: $algo mismatch (expected $expected, got $actual)" >&2
  exit 1
fi
mkdir -p "$dest"
tar -xzf "$work/$name" -C "$dest" --strip-components=1

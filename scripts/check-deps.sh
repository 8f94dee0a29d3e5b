#!/usr/bin/env bash
# Enforces the package layering (STYLE.md §3): which internal packages each
# package may import, and which one package owns each heavy dependency.
# The rules live in layering_test.go; this runs just that test.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -count=1 -run '^TestLayering$' .

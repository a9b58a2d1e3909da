#!/bin/sh
# Seeds both targets' corpora with every bundled policy: policies/, examples/,
# tests/cases/ and the standard library.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
for target in check fmt; do
  mkdir -p "$here/corpus/$target"
  find "$root/policies" "$root/examples" "$root/tests/cases" "$root/stdlib" -name '*.gantry' |
    while read -r f; do
      cp "$f" "$here/corpus/$target/$(echo "$f" | sed "s|$root/||; s|/|_|g")"
    done
done
echo "seeded $(ls "$here/corpus/check" | wc -l) policies per target"

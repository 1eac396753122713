#!/bin/sh
# A kernel-matrix probe (`--probe`, with `--count`): `bench mprotect
# --ranges` with the instruction counter's markers around every call, so
# that tests/vm/count/counts.py reports the kernel instructions per
# mprotect() call of each range case (400 KiB, 1 MiB, 4 MiB of 4 KiB pages,
# anonymous and file-backed, to read-only and back).
mode=$1
ht=$PWD/target/release/hugetext
dir=$PWD/target/scratch/count-$mode
rm -rf "$dir" && mkdir -p "$dir"

. tests/vm/probe-lib.sh

capture count-mprotect "$ht" bench mprotect --ranges --calls 1000 --markers --dir "$dir" --json
rm -rf "$dir"

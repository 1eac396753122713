#!/bin/sh
# Only the shmem-text probe of tests/vm/probe.sh (shared huge text from a
# huge tmpfs), for one cell: scripts/kernel-matrix.sh --cell 6.1:ext4
# --plan EMPTY --probe tests/vm/probe-shmem.sh. Arguments as probe.sh's.
mode=$1
ht=$PWD/target/release/hugetext
dir=$PWD/target/scratch/probe-$mode
rm -rf "$dir" && mkdir -p "$dir"
. tests/vm/probe-lib.sh
"$ht" align target/fixtures/lld/pie -o "$dir/pie.aligned" > /dev/null 2>&1
capture shmem-text shmem_text "$dir/pie.aligned"
rm -rf "$dir"

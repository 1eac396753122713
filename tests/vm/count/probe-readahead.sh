#!/bin/sh
# A kernel-matrix probe (`--probe`, with `--count`): readahead(2) of 256 MiB
# from a cold page cache on the disk under test, every 2 MiB call between
# the instruction counter's markers (target/vm/rahead, tests/vm/count/rahead.c),
# by 1 thread, by 2 threads on the two halves of one file, and by 2 threads
# on a file of 128 MiB each; each twice, or LAB_RAHEAD_REPS times (the
# page cache's own functions repeat exactly; the whole count varies with
# the physical layout of the pages allocated: doc/kernel.md).
# tests/vm/count/counts.py reports the kernel instructions per MiB read.
# On a kernel with CONFIG_LOCK_STAT, the xa_lock classes of /proc/lock_stat
# (cleared before each repetition) are printed too.
mode=$1
dir=$PWD/target/scratch/count-readahead-$mode
rm -rf "$dir" && mkdir -p "$dir"

. tests/vm/probe-lib.sh

# readahead(2) reads at most the larger of the disk's read_ahead_kb and its
# largest I/O per call: 2 MiB, the kernel's own chunk, per call.
dev=$(df -P "$dir" | awk 'NR == 2 {print $1}')
dev=${dev#/dev/}
[ -w "/sys/block/$dev/queue/read_ahead_kb" ] && echo 2048 > "/sys/block/$dev/queue/read_ahead_kb"
echo "read_ahead_kb $(cat "/sys/block/$dev/queue/read_ahead_kb" 2> /dev/null) max_sectors_kb $(cat "/sys/block/$dev/queue/max_sectors_kb" 2> /dev/null) lock_stat $([ -e /proc/lock_stat ] && echo yes || echo no)" > "$dir/env"
capture count-readahead-env cat "$dir/env"
# The repetitions of each case (LAB_RAHEAD_REPS on the kernel command
# line; default 2, at most 20).
reps=${LAB_RAHEAD_REPS:-2}
capture count-readahead-1 target/vm/rahead "$dir" 256 1 halves 400 "$reps"
capture count-readahead-2 target/vm/rahead "$dir" 256 2 halves 440 "$reps"
capture count-readahead-2f target/vm/rahead "$dir" 256 2 files 480 "$reps"
rm -rf "$dir"

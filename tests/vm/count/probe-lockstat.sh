#!/bin/sh
# A kernel-matrix probe for the lock-statistics kernels (scripts/kernel-lab.sh
# --lockstat: CONFIG_LOCK_STAT and CONFIG_MEMCG): the readahead cases of
# probe-readahead.sh, which print the xa_lock classes of /proc/lock_stat
# around each repetition, then the series' mm selftest readahead_memcg
# (readahead into a memory cgroup at its limit; built static into the
# --extra directory), its TAP lines tagged readahead_memcg, on a cgroup v2
# hierarchy mounted here when the guest has none.
mode=$1
sh tests/vm/count/probe-readahead.sh "$mode"
dir=$PWD/target/scratch/lockstat-$mode
rm -rf "$dir" && mkdir -p "$dir"

. tests/vm/probe-lib.sh

grep -q ' cgroup2 ' /proc/mounts || mount -t cgroup2 cgroup2 /sys/fs/cgroup
capture readahead_memcg "$PWD/target/kernel-lab/lockstat/extra/readahead_memcg" "$dir"
rm -rf "$dir"

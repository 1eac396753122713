#!/bin/sh
# Guest probe for a 64 KiB-page arm64 kernel (kernel-matrix.sh --probe, with
# --extra target/extra64k holding tests/vm/extra64k/faultmap built static):
# which page-cache folios the kernel reads for a plain, an executable and a
# MADV_HUGEPAGE mapping of a 70 MiB file mapped 2 MiB-aligned and faulted in
# order, for a sequential read(2) of it, and after `hugetext warm`, and what
# smaps says. Folio sizes come from `hugetext inspect --file`. Each case
# starts from an empty page cache (drop_caches: busybox's dd has no
# iflag=nocache, and the copy's own written folios would stay).
mode=$1
ht=$PWD/target/release/hugetext
fm=$PWD/target/extra64k/faultmap
dir=$PWD/target/scratch/probe64k-$mode
rm -rf "$dir" && mkdir -p "$dir"
. tests/vm/probe-lib.sh
capture doctor "$ht" doctor --json --path "$dir"
# The disk's readahead window as it boots, then 16 MiB: readahead grows
# folios up to the window, so the window may be what caps them.
ra=/sys/block/vda/queue/read_ahead_kb
for kb in "$(cat $ra)" 16384; do
  echo "$kb" > $ra
  for kind in plain exec hugepage read warm; do
    f=$dir/$kind-$kb.bin
    cp target/fixtures/lld/pie "$f" && sync && echo 3 > /proc/sys/vm/drop_caches
    capture "cached-$kind-ra$kb" "$ht" inspect --file "$f" --json
    # $1 is the inner shell's (the read branch)
    # shellcheck disable=SC2016
    case $kind in
      read) capture "fault-$kind-ra$kb" sh -c 'cat "$1" > /dev/null' read "$f" ;;
      # The fixture's text is congruent modulo 64 KiB only: align it to the
      # 2 MiB unit first, as a user would (warm refuses text that cannot be
      # contpte-mapped at run time).
      warm) "$ht" align --page-size 64K -o "$f.aligned" "$f" > /dev/null && mv "$f.aligned" "$f" &&
            sync && echo 3 > /proc/sys/vm/drop_caches
            capture "fault-$kind-ra$kb" "$ht" warm "$f" ;;
      *) capture "fault-$kind-ra$kb" "$fm" "$f" "$kind" ;;
    esac
    capture "folios-$kind-ra$kb" "$ht" inspect --file "$f" --json
  done
done
rm -rf "$dir"

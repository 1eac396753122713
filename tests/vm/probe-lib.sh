# shellcheck shell=sh
# dir and mode are set by the probe that sources this:
# shellcheck disable=SC2154
# What the guest probes share (tests/vm/probe.sh, lab-probe.sh, probe-64k.sh):
# sourced from the repository root on the disk under test; POSIX sh. Each
# probe names its scratch directory `dir` before using these.

# tagged PREFIX CMD...: run CMD, print each line of its output (stdout and
# stderr) after PREFIX; CMD's status in `rc`.
tagged() {
  pfx=$1; shift
  "$@" > /tmp/probe-lib.out 2>&1
  rc=$?
  awk -v p="$pfx" '{print p $0}' /tmp/probe-lib.out
}

# start_ready OUT TENTHS CMD...: start CMD in the background with its input
# from a FIFO in $dir (it waits for the end of input) and its output in OUT;
# wait up to TENTHS tenths of a second for it to print "ready". Its pid is
# in `pid`; it runs until stop_ready.
start_ready() {
  sr_out=$1; sr_max=$2; shift 2
  rm -f "$dir/fifo" "$sr_out" && mkfifo "$dir/fifo"
  "$@" < "$dir/fifo" > "$sr_out" 2>&1 &
  pid=$!
  exec 3> "$dir/fifo"
  i=0
  while ! grep -q ready "$sr_out" 2> /dev/null && [ $i -lt "$sr_max" ]; do sleep 0.1; i=$((i + 1)); done
}

# stop_ready: end the input of the program start_ready started, wait for
# it; its status is the function's.
stop_ready() {
  exec 3>&-
  wait "$pid"
}

# capture NAME CMD...: run CMD, print its output tagged with NAME (under the
# THP mode in `mode`), then a probe fact with its status.
capture() {
  name=$1; shift
  tagged "@@OUT $name|$mode|" "$@"
  echo "@@HT {\"kind\":\"probe\",\"name\":\"$name\",\"thp\":\"$mode\",\"rc\":$rc}"
}

# shmem_text PIE: shared huge text from a huge tmpfs. Mounts a
# huge=within_size tmpfs at the text store's root (/run/hugetext/text, or
# SHMEM_ROOT),
# puts PIE (2 MiB-aligned text) there and starts 4 processes of it: with
# `hugetext warm --shmem` and `run` where the guest's hugetext has them,
# else a plain copy executed from the tmpfs. Prints the way taken, one line
# per process (kB ShmemPmdMapped and kB private of its text mappings, kB of
# text) and meminfo's ShmemHugePages while all 4 run; unmounts always.
# Uses `ht` (the hugetext binary) from the probe.
shmem_text() {
  st_src=$1
  st_root=${SHMEM_ROOT:-/run/hugetext/text}
  mkdir -p "$st_root"
  if ! mount -t tmpfs -o huge=within_size,size=256m,mode=0755 hugetext-text "$st_root"; then
    echo "mount: a huge=within_size tmpfs failed"
    return 1
  fi
  st_orig=$dir/shmem.pie
  cp "$st_src" "$st_orig"
  set --
  if "$ht" warm --help 2>&1 | grep -q -- --shmem; then
    echo "way=warm-shmem"
    "$ht" warm --shmem "$st_orig" 2>&1 | sed 's/^/warm: /'
    set -- "$ht" run --strategy shmem -- "$st_orig"
  else
    echo "way=copy"
    # Sized first, then written: huge=within_size gives a 2 MiB folio only
    # to an index below i_size, which a growing copy never is.
    dd if=/dev/null of="$st_root/shmem.pie" bs=1 seek="$(stat -c %s "$st_orig")" count=0 2> /dev/null
    dd if="$st_orig" of="$st_root/shmem.pie" bs=1M conv=notrunc 2> /dev/null
    chmod 0555 "$st_root/shmem.pie"
    set -- "$st_root/shmem.pie"
  fi
  # One FIFO, four readers: each waits for the end of its input, which
  # comes when the one writer (fd 3) closes it.
  rm -f "$dir/fifo" && mkfifo "$dir/fifo"
  st_pids=
  for st_i in 1 2 3 4; do
    "$@" wait < "$dir/fifo" > "$dir/shmem-$st_i.out" 2>&1 &
    st_pids="$st_pids $!"
  done
  exec 3> "$dir/fifo"
  for st_i in 1 2 3 4; do
    st_n=0
    while ! grep -q ready "$dir/shmem-$st_i.out" 2> /dev/null && [ $st_n -lt 600 ]; do sleep 0.1; st_n=$((st_n + 1)); done
  done
  st_i=0
  for st_p in $st_pids; do
    st_i=$((st_i + 1))
    # The executable mappings of the fixture (its original path or any
    # file under the store's root): ShmemPmdMapped, Private_* and Size.
    awk -v i="$st_i" -v a="$st_orig" -v b="$st_root/" '
      /^[0-9a-f]+-[0-9a-f]+ / { t = ($2 ~ /x/) && (index($0, a) || index($0, b)); next }
      t && /^Size:/ { s += $2 }
      t && /^ShmemPmdMapped:/ { h += $2 }
      t && /^Private_(Clean|Dirty):/ { p += $2 }
      END { printf "proc=%d shmem_pmd_kb=%d private_kb=%d text_kb=%d\n", i, h, p, s }' "/proc/$st_p/smaps"
  done
  awk '/^ShmemHugePages:/ {print "shmem_huge_pages_kb=" $2}' /proc/meminfo
  exec 3>&-
  st_rc=0
  for st_p in $st_pids; do wait "$st_p" || st_rc=1; done
  sed -n '/ready/!s/^/out: /p' "$dir/shmem-1.out" | head -n 3
  umount "$st_root"
  return $st_rc
}

# kernel_bench: the real-machine kit (scripts/kernel-bench.sh) end to end,
# short: the fixtures, 3 runs, every route (hardware counters unavailable
# under TCG). Any failure of the script fails the probe (status 1), and its
# time in the guest is reported.
kernel_bench() {
  kb_t0=$(cut -d. -f1 /proc/uptime)
  # "$@" of the inner shell
  # shellcheck disable=SC2016
  capture kernel-bench bash -c 'bash scripts/kernel-bench.sh "$@" || exit 1' _ --quick \
    --hugetext "$PWD/target/release/hugetext" --fixtures "$PWD/target/fixtures" --out "$dir/kernel-bench"
  echo "@@HT {\"kind\":\"probe-time\",\"name\":\"kernel-bench\",\"thp\":\"$mode\",\"seconds\":$(( $(cut -d. -f1 /proc/uptime) - kb_t0 ))}"
}

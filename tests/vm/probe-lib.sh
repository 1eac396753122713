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

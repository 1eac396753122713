#!/bin/busybox sh
# busybox ash, checked as dash (POSIX sh):
# shellcheck shell=dash
# /init of a kernel-matrix guest (built by scripts/kernel-matrix.sh).
# Loads the modules, makes the disk under test (HT_FS) and mounts it at the
# repository's path, copies the payload (test binaries, fixtures) onto it,
# then per THP mode runs the planned tests unmodified and the route probes.
# Everything it reports goes to the console as `@@HT {json}` (facts) and
# `@@OUT name|thp|line` (command output) lines, which the host collects.
/bin/busybox --install -s /bin
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts && mount -t tmpfs tmpfs /dev/shm
# Written into the guest image by scripts/kernel-matrix.sh.
# shellcheck source=/dev/null
. /ht.env
echo 1 > /proc/sys/kernel/printk

emit() { echo "@@HT $*"; }
emit "{\"kind\":\"boot\",\"uptime_s\":$(cut -d' ' -f1 /proc/uptime)}"
finish() { emit "{\"kind\":\"$1\",\"reason\":\"$2\"}"; sync; poweroff -f; sleep 10; }

# stuck WHY: what every process is waiting in (its kernel stack), so that a
# hang is located in the console log, not only timed out.
stuck() {
  echo "@@STUCK $1"
  for p in /proc/[0-9]*; do
    c=$( { tr '\0' ' ' < "$p/cmdline"; } 2> /dev/null)
    [ -n "$c" ] || continue
    echo "@@STUCK pid ${p#/proc/} state $(awk '/^State:/ {print $2}' "$p/status") wchan $(cat "$p/wchan" 2> /dev/null): $c"
    sed 's/^/@@STUCK   /' "$p/stack" 2> /dev/null
  done
}
# The watchdog: a guest that has not finished HT_DEADLINE seconds after boot
# (kernel-matrix.sh sets it below its own timeout) says where it is stuck and
# stops, so the host gets a reason instead of a killed emulator.
(
  sleep "${HT_DEADLINE:-1800}"
  stuck "the guest did not finish in ${HT_DEADLINE:-1800} s"
  finish error "watchdog: not finished in ${HT_DEADLINE:-1800} s (see the @@STUCK lines)"
) &

# module paths: one word each
# shellcheck disable=SC2013
for m in $(cat /modules.order); do
  insmod "/lib/modules/$(uname -r)/$m.ko" || finish unsupported "this kernel cannot load module $m"
done
grep -qw "$HT_FS" /proc/filesystems || finish unsupported "this kernel has no $HT_FS"
i=0
while [ ! -b /dev/vdb ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -b /dev/vdb ] || finish error "no virtio disks"

case $HT_FS in
  ext4) mkfs.ext4 -q -F /dev/vda || finish error "mkfs.ext4 failed" ;;
  xfs) mkfs.xfs -q -f /dev/vda || finish error "mkfs.xfs failed" ;;
esac
mkdir -p "$HT_REPO" /payload
mount -t "$HT_FS" /dev/vda "$HT_REPO" || finish error "mount $HT_FS failed"
mount -t ext4 -o ro /dev/vdb /payload || finish error "mount payload failed"
cp -a "/payload$HT_REPO/." "$HT_REPO/" || finish error "copying the payload failed"
umount /payload
sync
cd "$HT_REPO" || finish error "no repository directory"

emit "{\"kind\":\"guest\",\"release\":\"$(uname -r)\",\"fs\":\"$HT_FS\",\"thp_default\":\"$(sed 's/.*\[\(.*\)\].*/\1/' /sys/kernel/mm/transparent_hugepage/enabled)\",\"mem_kb\":$(awk '/MemTotal/{print $2}' /proc/meminfo),\"cpus\":$(grep -c ^processor /proc/cpuinfo)}"

export HOME=/root HUGETEXT_TEST_PREBUILT=1 RUST_BACKTRACE=0
# kernel-matrix.sh --count: qemu counts guest instructions between markers
# (tests/vm/count/); its self-check runs first, every time, and the probes
# may wrap what they measure in markers (HT_MARKERS=1: target/vm/marker, and
# `hugetext bench mprotect --markers`).
if [ "${HT_COUNT:-0}" = 1 ]; then
  export HT_MARKERS=1
  target/vm/marker selftest 2>&1 | awk '{print "@@OUT count-selftest|-|" $0}'
fi
# Where the unit of huge text is the 2 MiB contiguous-PTE block (64 KiB
# pages: a PMD above 32 MiB), `run` copies text into 2 MiB anonymous mTHP,
# whose own switch defaults to `never`: let it follow the THP mode under
# test, as the PMD size does elsewhere.
if [ "$(cat /sys/kernel/mm/transparent_hugepage/hpage_pmd_size 2> /dev/null || echo 0)" -gt 33554432 ] &&
  [ -w /sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled ]; then
  echo inherit > /sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled || finish error "cannot set hugepages-2048kB inherit"
fi
for mode in $HT_THP; do
  echo "$mode" > /sys/kernel/mm/transparent_hugepage/enabled || finish error "cannot set THP $mode"
  # What this kernel and the disk under test can do, by doctor's experiments
  # (the first test of the plan checks doctor against experiments of its
  # own): a capability is in $caps when doctor's check says "ok".
  #   large-folios   fs-large-folios: page-cache folios of the huge unit on
  #                  the disk (PMD-order; 2 MiB contpte blocks with 64 KiB pages)
  #   pmd-unit       the unit of huge text is the PMD (a PMD of at most 32 MiB:
  #                  every kernel but arm64's with 64 KiB pages)
  #   madv-collapse  madv-collapse: MADV_COLLAPSE collapses file text in place
  #   pagemap-scan   pagemap-scan: the PAGEMAP_SCAN ioctl
  #   anon-vma-name  anon-vma-name: anonymous memory can be named
  mkdir -p target/scratch
  target/release/hugetext doctor --json --path target/scratch > /tmp/doctor.json
  status_of() {
    awk -v id="\"id\": \"$1\"" 'index($0, id) {f = 1} f && /"status"/ {gsub(/[",]/, ""); print $2; exit}' /tmp/doctor.json
  }
  caps=
  for c in fs-large-folios:large-folios madv-collapse:madv-collapse pagemap-scan:pagemap-scan anon-vma-name:anon-vma-name; do
    [ "$(status_of "${c%%:*}")" = ok ] && caps="${caps:+$caps }${c#*:}"
  done
  [ "$(cat /sys/kernel/mm/transparent_hugepage/hpage_pmd_size 2> /dev/null || echo 0)" -le 33554432 ] &&
    caps="${caps:+$caps }pmd-unit"
  lf=$(status_of fs-large-folios)
  emit "{\"kind\":\"caps\",\"thp\":\"$mode\",\"large_folios\":\"$lf\",\"caps\":\"$caps\"}"
  grep -v '^#' tests/vm/plan.txt | grep . | while read -r key names; do
    need=
    case $key in needs=*) need=${key#needs=}; key=${names%% *}; names=${names#* } ;; esac
    # needs=A,B: every one of them among the guest's capabilities and its
    # machine (x86_64, aarch64); the first one missing is the reason.
    # needs=!A: a test about what hugetext does where the kernel lacks A.
    missing=
    for n in $(echo "$need" | tr , ' '); do
      case $n in
        !*) case " $caps " in *" ${n#!} "*) missing=${missing:-"a kernel without ${n#!}"} ;; esac ;;
        *) case " $caps $(uname -m) " in *" $n "*) ;; *) missing=${missing:-$n} ;; esac ;;
      esac
    done
    need=$missing
    if [ -n "$need" ]; then
      for n in $names; do
        emit "{\"kind\":\"test\",\"thp\":\"$mode\",\"suite\":\"$key\",\"test\":\"$n\",\"result\":\"n/a\",\"why\":\"needs $need\"}"
      done
      continue
    fi
    exe=$(awk -v k="$key" '$1 == k {print $2}' target/vm/testbins.txt)
    if [ -z "$exe" ] || [ ! -x "$exe" ]; then
      emit "{\"kind\":\"suite\",\"thp\":\"$mode\",\"suite\":\"$key\",\"status\":\"missing\"}"
      continue
    fi
    start=$(date +%s)
    # shellcheck disable=SC2086 # one argument per test name
    # stderr apart: a note a test writes there (skip_line) must not split
    # libtest's "test NAME ... ok" line.
    # The slowest suite takes under 200 s in these guests.
    emit "{\"kind\":\"suite-start\",\"thp\":\"$mode\",\"suite\":\"$key\"}"
    # split on purpose: one argument per test name
    # shellcheck disable=SC2086
    timeout -s KILL 600 "$exe" --exact --test-threads=1 $names > /tmp/out 2> /tmp/err &
    tpid=$!
    # One look at the processes before the suite's time is up.
    (
      sleep 590 & spid=$!
      trap 'kill $spid; exit 0' TERM
      wait $spid
      [ -d /proc/$tpid ] && stuck "suite $key still running after 590 s"
    ) &
    wpid=$!
    wait $tpid
    rc=$?
    kill $wpid 2> /dev/null
    wait $wpid 2> /dev/null
    awk -v p="@@OUT $key|$mode|" '{print p $0}' /tmp/out /tmp/err
    awk -v s="$key" -v m="$mode" '/^test .* \.\.\. (ok|FAILED|ignored)$/ {
        r = $NF; if (r == "FAILED") r = "failed";
        printf "@@HT {\"kind\":\"test\",\"thp\":\"%s\",\"suite\":\"%s\",\"test\":\"%s\",\"result\":\"%s\"}\n", m, s, $2, r }' /tmp/out
    emit "{\"kind\":\"suite\",\"thp\":\"$mode\",\"suite\":\"$key\",\"status\":$rc,\"seconds\":$(( $(date +%s) - start ))}"
  done
  sh "${HT_PROBE:-tests/vm/probe.sh}" "$mode" "$caps"
done
finish "done" ""

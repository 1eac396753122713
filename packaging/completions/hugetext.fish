# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_hugetext_global_optspecs
    string join \n h/help V/version
end

function __fish_hugetext_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_hugetext_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_hugetext_using_subcommand
    set -l cmd (__fish_hugetext_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c hugetext -n "__fish_hugetext_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c hugetext -n "__fish_hugetext_needs_command" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_needs_command" -f -a "inspect" -d 'Show how text (or all memory) of processes, cgroups, files or the system is backed'
complete -c hugetext -n "__fish_hugetext_needs_command" -f -a "doctor" -d 'Report what this kernel can do for huge text, and what it means for you'
complete -c hugetext -n "__fish_hugetext_needs_command" -f -a "explain" -d 'Say why each text mapping of a process is or is not on huge pages, and the command that fixes it'
complete -c hugetext -n "__fish_hugetext_needs_command" -f -a "check" -d 'Tell whether ELF files\' text can be PMD-mapped, and what `align` would gain'
complete -c hugetext -n "__fish_hugetext_needs_command" -f -a "align" -d 'Rewrite an ELF file so its read-only segments can be PMD-mapped'
complete -c hugetext -n "__fish_hugetext_needs_command" -f -a "warm" -d 'Fill the page cache with PMD-sized folios for programs\' text'
complete -c hugetext -n "__fish_hugetext_needs_command" -f -a "profile" -d 'Which text is hot, per 2 MiB window, and the iTLB misses huge pages would save'
complete -c hugetext -n "__fish_hugetext_needs_command" -f -a "run" -d 'Run a program with its text (and its libraries\') remapped onto huge pages'
complete -c hugetext -n "__fish_hugetext_needs_command" -f -a "agent" -d 'Serve Prometheus metrics about huge-page text, and keep a policy\'s programs warm'
complete -c hugetext -n "__fish_hugetext_needs_command" -f -a "bench" -d 'Benchmarks: the Linux large-folio patches\' micro-benchmarks and A/B runs of real programs'
complete -c hugetext -n "__fish_hugetext_needs_command" -f -a "completions" -d 'Print shell completions (bash, zsh, fish, elvish, powershell) to stdout'
complete -c hugetext -n "__fish_hugetext_needs_command" -f -a "man" -d 'Print the man page (roff) to stdout'
complete -c hugetext -n "__fish_hugetext_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c hugetext -n "__fish_hugetext_using_subcommand inspect" -l pid -d 'Inspect this process (repeatable). A process that does not exist is an error' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand inspect" -l cgroup -d 'Inspect every process in this cgroup and its descendants (v1 or v2), e.g. /sys/fs/cgroup/system.slice/nginx.service' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand inspect" -l file -d 'Page-cache view of these files, whether or not anyone maps them: cached kB held in folios of each size. Reads nothing that is not cached' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand inspect" -l cont -d 'Also count naturally aligned, physically contiguous blocks of SIZE inside one folio (arm64 contpte: 64K; AMD PTE coalescing: 16K/32K). SIZE is a power-of-two number of pages, at least 2 pages, at most the PMD size, with an optional K/M suffix (repeatable). Default on arm64: the kernel\'s contpte block (64K with 4 KiB pages, 2M with 16 KiB or 64 KiB pages); elsewhere none' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand inspect" -l watch -d 'Repeat every SECS seconds until interrupted' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand inspect" -l all -d 'Every mapping (anonymous and file-backed apart), not only executable ones'
complete -c hugetext -n "__fish_hugetext_using_subcommand inspect" -l rollup -d 'Sum per process and in total instead of listing every mapping'
complete -c hugetext -n "__fish_hugetext_using_subcommand inspect" -l json -d 'Print JSON (thpmaps\' labels, values in kB) instead of tables'
complete -c hugetext -n "__fish_hugetext_using_subcommand inspect" -l inc-empty -d 'Also show classes whose value is 0 in tables (JSON always has them)'
complete -c hugetext -n "__fish_hugetext_using_subcommand inspect" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c hugetext -n "__fish_hugetext_using_subcommand inspect" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand doctor" -l path -d 'A directory (or a file, whose directory is used) on the filesystem to probe: where your programs and libraries live. Must be writable for the experiment' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand doctor" -l json -d 'Print JSON instead of a table'
complete -c hugetext -n "__fish_hugetext_using_subcommand doctor" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c hugetext -n "__fish_hugetext_using_subcommand doctor" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand explain" -l pid -d 'Explain this process (repeatable)' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand explain" -l cgroup -d 'Explain every process in this cgroup and its descendants (v1 or v2)' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand explain" -l stop -d 'With PROGRAM: end it after explaining instead of waiting for it'
complete -c hugetext -n "__fish_hugetext_using_subcommand explain" -l json -d 'Print JSON (a stable reason code per mapping) instead of text'
complete -c hugetext -n "__fish_hugetext_using_subcommand explain" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c hugetext -n "__fish_hugetext_using_subcommand explain" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand check" -l page-size -d 'Page size of the kernel the files are meant for: 4K, 16K or 64K (arm64). Default: the running kernel\'s for files of this machine, 4K for AArch64 files on another machine' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand check" -l store -d 'The text store (`hugetext warm --shmem`) whose stale copies of the files are named on stderr' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand check" -l json -d 'Print a JSON array with one object per file (fields include unit_mappable_bytes and unit_mappable_bytes_after_align)'
complete -c hugetext -n "__fish_hugetext_using_subcommand check" -s h -l help -d 'Print help'
complete -c hugetext -n "__fish_hugetext_using_subcommand check" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand align" -s o -l output -d 'Write the aligned file here and leave FILE untouched. OUT must be a new name or a regular file you own (root: not another user\'s file in a sticky directory such as /tmp); a symlink, directory, device, FIFO or socket is refused' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand align" -l page-size -d 'Page size of the kernel the file is meant for: 4K, 16K or 64K (arm64); its PMD size is the alignment. Default: the running kernel\'s for a file of this machine, 4K for an AArch64 file on another machine (said in a note)' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand align" -l dry-run -d 'Only say what would be done'
complete -c hugetext -n "__fish_hugetext_using_subcommand align" -l force -d 'Rewrite signed files too (their signature becomes invalid)'
complete -c hugetext -n "__fish_hugetext_using_subcommand align" -l json -d 'Print the outcome as JSON'
complete -c hugetext -n "__fish_hugetext_using_subcommand align" -s h -l help -d 'Print help'
complete -c hugetext -n "__fish_hugetext_using_subcommand align" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -l config -d 'Read the files to warm (and options) from a TOML file, e.g. /etc/hugetext/warm.conf; see doc/warm.md. PATH arguments are added' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -l max-mem -d 'Memory guard: refuse to warm more than this, as a share of MemAvailable (50%) or a size (4G, 512M). Default 50%' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -l replace-allow -d 'Let --replace proceed where it refuses by default' -r -f -a "hardlinked\t'Files with more than one hard link (the other names keep the old file)'
open-for-write\t'Files a process has open for writing (its writes go to the old file)'
signed\t'Signed files (IMA/EVM xattrs, fs-verity)'"
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -l store -d 'The text store\'s directory' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -l shmem-size -d 'With --shmem: the size cap of the store when it is mounted now, as a share of RAM (25%) or a size (4G, 512M). Default 25%' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -l deps -d 'Also warm every shared library the programs load (DT_NEEDED, resolved like ld.so: RPATH/RUNPATH, LD_LIBRARY_PATH, ld.so.cache, default dirs)'
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -l json -d 'Print the result as JSON: {"files":[{"path", "unit_folio_kb", "blocked_kb", ...}]}'
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -l replace -d 'Files whose windows running processes block: write an identical copy (mode, owner, xattrs, capabilities, times kept), warm it and rename it over the original. Running processes keep the old file; new ones get huge folios'
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -l no-collapse -d 'Do not try MADV_COLLAPSE on windows that stayed small'
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -l force -d 'Fill 2 MiB folios even for text no process can PMD-map when it runs (segments not 2 MiB-congruent, or a PIE with p_align < 2 MiB). By default such a file is left as it is, with exit status 3 and advice to run `hugetext align` first'
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -l path-unit -d 'Print a systemd .path unit that re-warms when any of the files (and the --config file) changes, and exit'
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -l shmem -d 'Copy the files into the text store (a tmpfs mounted huge=within_size, mounted when absent) instead of the page cache: `hugetext run` then maps their text from there in 2 MiB pages shared by every process, on any filesystem. Needs root'
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -l drop -d 'With --shmem: remove the files\' entries from the store (all entries when no PATH is given)'
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -l list -d 'With --shmem: list the store\'s entries, their originals, sizes and whether they are stale (the original changed: never used)'
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c hugetext -n "__fish_hugetext_using_subcommand warm" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l pid -d 'Sample this running process (repeat for several: one profile of all)' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l perf-script -d 'Read samples from `perf script --show-mmap-events -F pid,ip,dso` output (\'-\': stdin)' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l input -d 'Report a profile written earlier with --output' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l duration -d 'Stop sampling after this many seconds (--pid: default 10)' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l frequency -d 'Samples per second per running thread' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l itlb -d 'iTLB geometry modelled by --exact: skylake, zen4 or neoverse-v2' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l walk-cycles -d 'Cycles per page walk in the --exact estimate' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l qemu -d 'The qemu-user binary for --exact (default: qemu-ARCH on PATH)' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -s o -l output -d 'Write the profile (JSON) to this file' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l svg -d 'Write the heat strips as SVG to this file' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l hot -d 'List the windows holding this percentage of the counts (what `run --hot` remaps)' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l hot-out -d 'Write the windows of --hot (default 99%) as a hot-window list for HUGETEXT_HOT' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l report -d 'Write the report (text, or --json) to this file, not to stdout (or, with a PROGRAM, stderr)' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l top -d 'Files shown in the text report' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l exact -d 'Run PROGRAM under qemu-user: every instruction counted, and the iTLB model'
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l json -d 'Print JSON (summary, iTLB estimate, hot windows) instead of text'
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -l per-pid -d 'With several --pid: also a table (and JSON summary) per process'
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c hugetext -n "__fish_hugetext_using_subcommand profile" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand run" -l strategy -d 'Routes the preload may use' -r -f -a "auto\t'already huge, else file, else collapse, else shmem, else copy (per window of the unit of huge text: the PMD, 2 MiB on x86-64; the 2 MiB contpte block on arm64 with 64 KiB pages)'
file\t'zero copy through 2 MiB page-cache folios (shared, no extra memory)'
collapse\t'MADV_COLLAPSE of file text (needs CONFIG_READ_ONLY_THP_FOR_FS before 7.x; PMD-size folios only, so never with 64 KiB pages)'
shmem\t'map the text from its copy in the text store (`hugetext warm --shmem`): 2 MiB shmem pages shared by every process, on any filesystem'
copy\t'copy into anonymous huge pages, mremap over the text (private memory; with 64 KiB pages 2 MiB mTHP, hugepages-2048kB/enabled not never)'"
complete -c hugetext -n "__fish_hugetext_using_subcommand run" -l store -d 'The text store the shmem route maps copies from (filled by `hugetext warm --shmem`)' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand run" -l include -d 'Only remap mappings whose file path matches RE (literals . [..] \\d \\w \\s * + ? ^ $ |)' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand run" -l exclude -d 'Leave mappings whose file path matches RE alone' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand run" -l preload -d 'The libhugetext.so to inject' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand run" -l hot -d 'Remap only the windows holding the hot share of this profile\'s samples (`hugetext profile -o`)' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand run" -l hot-share -d 'With --hot: the share of the profile\'s samples the remapped windows hold' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand run" -s v -l verbose -d 'Report on stderr, per text mapping, what was done and why not'
complete -c hugetext -n "__fish_hugetext_using_subcommand run" -l inherit -d 'Let child processes inherit the preload (default: they do not)'
complete -c hugetext -n "__fish_hugetext_using_subcommand run" -l gdb -d 'gdb/perf-friendly: never copy text to anonymous memory (zero-copy routes only)'
complete -c hugetext -n "__fish_hugetext_using_subcommand run" -l no-dlopen -d 'Do not follow libraries loaded after start (dlopen): no LD_AUDIT'
complete -c hugetext -n "__fish_hugetext_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c hugetext -n "__fish_hugetext_using_subcommand run" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand agent" -l config -d 'The config file: the programs to keep warm and the [agent] settings (TOML, the format of `warm --config`); e.g. /etc/hugetext/warm.conf' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand agent" -l listen -d 'Where to serve /metrics and /healthz [default: the config\'s listen, else 127.0.0.1:9437]' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand agent" -l check-config -d 'Check the config and print the policy\'s files, then exit'
complete -c hugetext -n "__fish_hugetext_using_subcommand agent" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c hugetext -n "__fish_hugetext_using_subcommand agent" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and not __fish_seen_subcommand_from exec mprotect readahead ab startup help" -s h -l help -d 'Print help'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and not __fish_seen_subcommand_from exec mprotect readahead ab startup help" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and not __fish_seen_subcommand_from exec mprotect readahead ab startup help" -f -a "exec" -d 'The exec-readahead microbenchmark of the Linux "large folios for exec memory" patches: cold faults and random calls into a large executable file of RET stubs (x86-64 `ret`, or AArch64 `ret` on arm64); baseline vs MADV_HUGEPAGE vs a warmed page cache'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and not __fish_seen_subcommand_from exec mprotect readahead ab startup help" -f -a "mprotect" -d 'The test program of the Linux "Optimize mprotect() for large folios" patches: mprotect() read-only/read-write 40 times over 1 GiB of PTE-mapped PMD THPs, of 64 KiB mTHPs, and of 4 KiB pages'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and not __fish_seen_subcommand_from exec mprotect readahead ab startup help" -f -a "readahead" -d 'The effect of the Linux "batch folio insertion" readahead patches: readahead(2) throughput from N threads, into N distinct files vs disjoint slices of one shared file (page-cache lock contention)'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and not __fish_seen_subcommand_from exec mprotect readahead ab startup help" -f -a "ab" -d 'Run a real command alternately with its text (and its libraries\', and its children\'s) in small and in PMD page-cache folios, paired'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and not __fish_seen_subcommand_from exec mprotect readahead ab startup help" -f -a "startup" -d 'The cost of `hugetext run`: a command\'s start-up plain, with its text warmed, and under `hugetext run --strategy ROUTE` for each route, paired and interleaved round by round'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and not __fish_seen_subcommand_from exec mprotect readahead ab startup help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from exec" -l size -d 'Size of each variant\'s RET-stub file (K, M, G suffixes; whole windows of the unit of huge text: the PMD, 2 MiB on x86-64, or the 2 MiB contpte block with 64 KiB pages). A run keeps all three in the page cache: refused before anything is written when they do not fit in 90% of the free space of --dir or in half of the available memory' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from exec" -l runs -d 'Runs (the minimum with --until-ci); each run measures every variant once' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from exec" -l dir -d 'Directory for the stub files, on a disk filesystem (ext4, xfs). Default: $TMPDIR unless it is tmpfs, else the current directory. They are removed at the end, on an error, and on SIGINT, SIGTERM or SIGHUP' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from exec" -l calls-per-page -d 'Random calls per page of the file' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from exec" -l random-passes -d 'Passes of the random phase per run, variants alternating pass by pass; the fastest pass counts' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from exec" -l seed -d 'Seed of the random phase and of the bootstrap' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from exec" -l until-ci -d 'Keep adding runs (after --runs) until every ratio\'s 95% confidence interval is at most WIDTH wide (e.g. 0.05), or --max-time has passed' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from exec" -l max-time -d 'Time budget for --until-ci, from the first run (s, m, h suffixes)' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from exec" -l json -d 'Print JSON instead of tables'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from exec" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from exec" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from mprotect" -l size -d 'Memory per case (the test program: 1G); a run holds all cases' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from mprotect" -l loops -d 'mprotect read-only/read-write rounds' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from mprotect" -l runs -d 'Runs (the minimum with --until-ci); cases alternate round by round' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from mprotect" -l seed -d 'Seed of the bootstrap' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from mprotect" -l until-ci -d 'Keep adding runs (after --runs) until every ratio\'s 95% confidence interval is at most WIDTH wide (e.g. 0.05), or --max-time has passed' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from mprotect" -l max-time -d 'Time budget for --until-ci, from the first run (s, m, h suffixes)' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from mprotect" -l calls -d 'With --ranges: mprotect() calls per range and direction' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from mprotect" -l dir -d 'With --ranges: directory for the file-backed ranges\' files (default: $TMPDIR when on a disk filesystem, else the current directory)' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from mprotect" -l allow-sysfs -d 'Allow setting /sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled to `madvise` for the mTHP case when it is `never` (restored after)'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from mprotect" -l ranges -d 'Instead of the test program: mprotect() of 400 KiB, 1 MiB and 4 MiB ranges of 4 KiB pages, anonymous and file-backed, read-only and back to read-write, each call timed (the small-page cases of the reported regression of PTE-batched mprotect)'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from mprotect" -l markers -d 'With --ranges: wrap every call in the markers of the kernel lab\'s instruction counter (no-ops elsewhere); pins the benchmark to its CPU'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from mprotect" -l json -d 'Print JSON instead of tables'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from mprotect" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from mprotect" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from readahead" -l threads -d 'Threads (default: number of CPUs)' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from readahead" -l size -d 'Bytes read per thread' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from readahead" -l chunk -d 'Bytes per readahead(2) call' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from readahead" -l runs -d 'Runs (the minimum with --until-ci); configurations alternate' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from readahead" -l dir -d 'Directory for the files, on a disk filesystem' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from readahead" -l seed -d 'Seed of the bootstrap' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from readahead" -l until-ci -d 'Keep adding runs (after --runs) until every ratio\'s 95% confidence interval is at most WIDTH wide (e.g. 0.05), or --max-time has passed' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from readahead" -l max-time -d 'Time budget for --until-ci, from the first run (s, m, h suffixes)' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from readahead" -l json -d 'Print JSON instead of tables'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from readahead" -s h -l help -d 'Print help'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from readahead" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from ab" -l runs -d 'Pairs of runs (one small + one huge run each)' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from ab" -l plot -d 'Write an SVG plot of every run\'s time to FILE (a new name or a regular file you own; mode 0666 less the umask)' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from ab" -l files -d 'More files whose text to manage (e.g. code the warm-up run did not reach, or when ptrace is not permitted and discovery falls back to polling)' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from ab" -l seed -d 'Seed of the side order and the bootstrap' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from ab" -l hot -d 'A third side: only the windows holding --hot-share of this profile\'s samples (`hugetext profile -o`) in PMD folios, the rest small' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from ab" -l hot-share -d 'With --hot: the share of the profile\'s samples its windows hold' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from ab" -l json -d 'Print JSON instead of tables'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from ab" -l no-discover -d 'Do not discover files from the warm-up run; manage only the executable and --files'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from ab" -l show-output -d 'Show the command\'s standard output (default: discarded)'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from ab" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from ab" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from startup" -l runs -d 'Rounds (each starts every variant once)' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from startup" -l routes -d 'Routes to measure, comma-separated (default: every route `run --strategy` accepts)' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from startup" -l ready -d 'A shell command that succeeds once the command is ready (e.g. `pg_isready -q -h /tmp -p 5499`): start-up is the time until then, and the command is stopped with SIGTERM' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from startup" -l ready-file -d 'Ready once PATH holds TEXT where it did not when the start began (postgres: `DATA/postmaster.pid ready`; mariadbd: `ERROR-LOG \'ready for connections\'`): checked every 0.5 ms, no process started, so the moment is not rounded to a probe\'s run' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from startup" -l timeout -d 'Longest a start (and a server\'s stop) may take (s, m suffixes)' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from startup" -l user -d 'Run the command, and `hugetext run`, as this user (name or uid), with its primary group' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from startup" -l files -d 'More files whose text to manage' -r -F
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from startup" -l run-cache -d 'The page cache the `run` variants start from: `small` (a first start: the file route refills the text) or `huge` (a later start, the text already in PMD folios as the file route leaves it)' -r -f -a "small\t'Text in small page-cache folios'
huge\t'Text in PMD folios'"
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from startup" -l seed -d 'Seed of the bootstrap' -r
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from startup" -l json -d 'Print JSON instead of tables'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from startup" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from startup" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "exec" -d 'The exec-readahead microbenchmark of the Linux "large folios for exec memory" patches: cold faults and random calls into a large executable file of RET stubs (x86-64 `ret`, or AArch64 `ret` on arm64); baseline vs MADV_HUGEPAGE vs a warmed page cache'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "mprotect" -d 'The test program of the Linux "Optimize mprotect() for large folios" patches: mprotect() read-only/read-write 40 times over 1 GiB of PTE-mapped PMD THPs, of 64 KiB mTHPs, and of 4 KiB pages'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "readahead" -d 'The effect of the Linux "batch folio insertion" readahead patches: readahead(2) throughput from N threads, into N distinct files vs disjoint slices of one shared file (page-cache lock contention)'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "ab" -d 'Run a real command alternately with its text (and its libraries\', and its children\'s) in small and in PMD page-cache folios, paired'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "startup" -d 'The cost of `hugetext run`: a command\'s start-up plain, with its text warmed, and under `hugetext run --strategy ROUTE` for each route, paired and interleaved round by round'
complete -c hugetext -n "__fish_hugetext_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c hugetext -n "__fish_hugetext_using_subcommand completions" -s h -l help -d 'Print help'
complete -c hugetext -n "__fish_hugetext_using_subcommand completions" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand man" -s h -l help -d 'Print help'
complete -c hugetext -n "__fish_hugetext_using_subcommand man" -s V -l version -d 'Print version'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and not __fish_seen_subcommand_from inspect doctor explain check align warm profile run agent bench completions man help" -f -a "inspect" -d 'Show how text (or all memory) of processes, cgroups, files or the system is backed'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and not __fish_seen_subcommand_from inspect doctor explain check align warm profile run agent bench completions man help" -f -a "doctor" -d 'Report what this kernel can do for huge text, and what it means for you'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and not __fish_seen_subcommand_from inspect doctor explain check align warm profile run agent bench completions man help" -f -a "explain" -d 'Say why each text mapping of a process is or is not on huge pages, and the command that fixes it'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and not __fish_seen_subcommand_from inspect doctor explain check align warm profile run agent bench completions man help" -f -a "check" -d 'Tell whether ELF files\' text can be PMD-mapped, and what `align` would gain'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and not __fish_seen_subcommand_from inspect doctor explain check align warm profile run agent bench completions man help" -f -a "align" -d 'Rewrite an ELF file so its read-only segments can be PMD-mapped'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and not __fish_seen_subcommand_from inspect doctor explain check align warm profile run agent bench completions man help" -f -a "warm" -d 'Fill the page cache with PMD-sized folios for programs\' text'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and not __fish_seen_subcommand_from inspect doctor explain check align warm profile run agent bench completions man help" -f -a "profile" -d 'Which text is hot, per 2 MiB window, and the iTLB misses huge pages would save'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and not __fish_seen_subcommand_from inspect doctor explain check align warm profile run agent bench completions man help" -f -a "run" -d 'Run a program with its text (and its libraries\') remapped onto huge pages'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and not __fish_seen_subcommand_from inspect doctor explain check align warm profile run agent bench completions man help" -f -a "agent" -d 'Serve Prometheus metrics about huge-page text, and keep a policy\'s programs warm'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and not __fish_seen_subcommand_from inspect doctor explain check align warm profile run agent bench completions man help" -f -a "bench" -d 'Benchmarks: the Linux large-folio patches\' micro-benchmarks and A/B runs of real programs'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and not __fish_seen_subcommand_from inspect doctor explain check align warm profile run agent bench completions man help" -f -a "completions" -d 'Print shell completions (bash, zsh, fish, elvish, powershell) to stdout'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and not __fish_seen_subcommand_from inspect doctor explain check align warm profile run agent bench completions man help" -f -a "man" -d 'Print the man page (roff) to stdout'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and not __fish_seen_subcommand_from inspect doctor explain check align warm profile run agent bench completions man help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "exec" -d 'The exec-readahead microbenchmark of the Linux "large folios for exec memory" patches: cold faults and random calls into a large executable file of RET stubs (x86-64 `ret`, or AArch64 `ret` on arm64); baseline vs MADV_HUGEPAGE vs a warmed page cache'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "mprotect" -d 'The test program of the Linux "Optimize mprotect() for large folios" patches: mprotect() read-only/read-write 40 times over 1 GiB of PTE-mapped PMD THPs, of 64 KiB mTHPs, and of 4 KiB pages'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "readahead" -d 'The effect of the Linux "batch folio insertion" readahead patches: readahead(2) throughput from N threads, into N distinct files vs disjoint slices of one shared file (page-cache lock contention)'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "ab" -d 'Run a real command alternately with its text (and its libraries\', and its children\'s) in small and in PMD page-cache folios, paired'
complete -c hugetext -n "__fish_hugetext_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "startup" -d 'The cost of `hugetext run`: a command\'s start-up plain, with its text warmed, and under `hugetext run --strategy ROUTE` for each route, paired and interleaved round by round'

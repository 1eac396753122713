//! `/proc/PID/maps` and `/proc/PID/smaps`, process and cgroup enumeration.

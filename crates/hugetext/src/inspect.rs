//! `inspect`: how the text of processes, cgroups, files or the whole system is
//! backed.

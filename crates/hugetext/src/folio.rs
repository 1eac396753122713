//! Folio scanning: read `/proc/PID/pagemap` and `/proc/kpageflags` in batches
//! and classify every mapped page the way the kernel's `thpmaps` does.

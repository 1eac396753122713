//! libhugetext.so: the preload library and C API. See `include/hugetext.h`.

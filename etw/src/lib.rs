//! Windows ETW source (cfg(windows)); type-checked on Linux.

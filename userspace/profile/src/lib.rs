//! The in-memory profile model and its writers.

//! Turns (pid, address) into frames.

//! Runnable examples of the resilience toolkit; see the `[[example]]` targets. What
//! several examples share is here.

pub mod grpc;
pub mod sim;

/// Resident memory of this process in bytes, from `/proc/self/statm` (0 where it
/// cannot be read).
pub fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

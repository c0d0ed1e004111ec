use resilience_runtime::{downgrade, Reason};

// The extra argument is the `Downgraded`, not its `Reason`.
fn fb(x: u32, _reason: Reason) -> u32 {
    x
}

#[downgrade(fallback_with_reason = fb)]
fn f(x: u32) -> u32 {
    x
}

// No extra argument at all: that is `fallback`.
async fn plain(x: u32) -> u32 {
    x
}

#[downgrade(timeout = "1s", fallback_with_reason = plain)]
async fn g(x: u32) -> u32 {
    x
}

fn main() {}

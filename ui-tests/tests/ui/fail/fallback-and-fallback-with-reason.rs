use resilience_runtime::{downgrade, Downgraded};

fn fb() -> u32 {
    0
}

fn fb_why(_: Downgraded) -> u32 {
    0
}

#[downgrade(fallback = fb, fallback_with_reason = fb_why)]
fn f() -> u32 {
    1
}

#[downgrade(fallback_with_reason = fb_why, default = 1)]
fn g() -> u32 {
    1
}

fn main() {}

use resilience_runtime::downgrade;

#[downgrade(timeout = "200", default)]
async fn no_unit() -> u32 {
    1
}

#[downgrade(timeout = "2 seconds", default)]
async fn spaced_unit() -> u32 {
    1
}

#[downgrade(timeout = "1d", default)]
async fn unknown_unit() -> u32 {
    1
}

#[downgrade(timeout = "fast", default)]
async fn no_number() -> u32 {
    1
}

#[downgrade(timeout = "25h", default)]
async fn too_long() -> u32 {
    1
}

fn main() {}

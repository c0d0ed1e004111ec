use resilience_runtime::breaker;

#[breaker(point = "x", window = 10)]
fn f() -> Result<u32, resilience_runtime::Downgraded> {
    Ok(1)
}

fn main() {}

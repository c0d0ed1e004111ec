use resilience_runtime::downgrade;

struct MyError;

#[downgrade(point = "x")]
fn f() -> Result<u32, MyError> {
    Ok(1)
}

fn main() {}

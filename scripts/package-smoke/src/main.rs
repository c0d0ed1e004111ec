//! The README's first example, built against the packaged crates.

use resilience_runtime::{downgrade, registry, Policy};

#[downgrade(point = "order.create", fallback = create_fallback)]
fn create_order(id: u64) -> Result<String, std::io::Error> {
    Ok(format!("order {id} created"))
}

// Runs only when the call is downgraded, never for business errors.
fn create_fallback(id: u64) -> Result<String, std::io::Error> {
    Ok(format!("order {id} queued for later"))
}

fn main() {
    let policy = Policy::builder().max_visits(2).build().unwrap();
    registry().set_policy("order.create", policy).unwrap();

    assert_eq!(create_order(1).unwrap(), "order 1 created");
    assert_eq!(create_order(2).unwrap(), "order 2 created");
    // the third visit inside the sliding 10 s window is downgraded
    assert_eq!(create_order(3).unwrap(), "order 3 queued for later");
    println!("package smoke: the first example ran against the packaged crates");
}

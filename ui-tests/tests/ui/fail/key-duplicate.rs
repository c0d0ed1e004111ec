use resilience_runtime::downgrade;

#[downgrade(point = "ui.key.twice", default, key = user, key = tenant)]
fn get(user: u64, tenant: &str) -> u32 {
    let _ = (user, tenant);
    1
}

fn main() {}

use resilience_runtime::downgrade;

#[downgrade(point = "ui.priority", default, priority = level + 1)]
fn lookup(level: u8) -> u32 {
    u32::from(level)
}

fn main() {
    lookup(1);
}

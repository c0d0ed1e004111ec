use resilience_runtime::priority::Priority;
use resilience_runtime::{breaker, downgrade};

#[downgrade(point = "ui.priority.sync", default, priority = if vip { Priority::Critical } else { Priority::Sheddable })]
fn lookup(vip: bool) -> u32 {
    u32::from(vip)
}

#[breaker(point = "ui.priority.async", default, priority = Priority::Critical)]
async fn fetch(id: u32) -> u32 {
    id
}

fn main() {
    assert_eq!(lookup(true), 1);
    let _ = fetch(1);
}

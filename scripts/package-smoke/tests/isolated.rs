//! Two tests on one point name, each with a registry of its own (feature `testing`,
//! a dev-dependency), run in parallel by cargo: neither sees the other's policy.

use resilience_runtime::testing::TestRegistry;
use resilience_runtime::{downgrade, Policy};

#[downgrade(point = "smoke.orders", default = "busy")]
fn create_order() -> &'static str {
    "created"
}

#[test]
fn closed_shop() {
    let registry = TestRegistry::new();
    let _scope = registry.enter();
    registry
        .set_policy("smoke.orders", Policy::builder().max_visits(0).build().unwrap())
        .unwrap();
    for _ in 0..1_000 {
        assert_eq!(create_order(), "busy");
    }
}

#[test]
fn open_shop() {
    let registry = TestRegistry::new();
    let _scope = registry.enter();
    for _ in 0..1_000 {
        assert_eq!(create_order(), "created");
    }
    assert_eq!(registry.stats("smoke.orders").unwrap().totals.passes, 1_000);
}

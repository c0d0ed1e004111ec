use resilience_runtime::downgrade;

trait T {
    #[downgrade(default)]
    fn f(&self) -> u32;
}

fn main() {}
